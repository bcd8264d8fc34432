/*
 * workspace.c — the kernels' temporaries taken from a buffer the model allocated at init (ck_kernels.h).
 *
 * One workspace per calling thread (thread-local: two models called from two threads each use their own);
 * the kernels that take from it run on the calling thread, before or after their parallel regions.
 */
#include <stdint.h>
#include <stdlib.h>

#include "ck_errors.h"
#include "ck_kernels.h"

typedef struct {
    unsigned char *base;
    size_t size, used;
} workspace;

static CK_THREAD_LOCAL workspace ws;

void ck_ws_use(void *buf, size_t bytes)
{
    ws.base = (unsigned char *)buf;
    ws.size = buf ? bytes : 0;
    ws.used = 0;
}

void *ck_ws_alloc(size_t bytes)
{
    const size_t at = (ws.used + 63) & ~(size_t)63;
    const uintptr_t base = (uintptr_t)ws.base, aligned = (base + 63) & ~(uintptr_t)63;
    const size_t skip = (size_t)(aligned - base);
    if (ws.base && skip + at <= ws.size && bytes <= ws.size - skip - at) {
        ws.used = at + bytes;
        return (void *)(aligned + at);
    }
    return malloc(bytes ? bytes : 1);
}

void ck_ws_free(void *p)
{
    const uintptr_t at = (uintptr_t)p, base = (uintptr_t)ws.base; /* (no pointer arithmetic on a NULL base) */
    if (p && !(ws.base && at >= base && at - base < ws.size)) free(p);
}

size_t ck_ws_mark(void) { return ws.used; }

void ck_ws_reset(size_t mark)
{
    if (mark < ws.used) ws.used = mark;
}
