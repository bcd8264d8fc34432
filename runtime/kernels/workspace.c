/*
 * workspace.c — the kernels' temporaries taken from a buffer the model allocated at init (ck_kernels.h).
 *
 * One workspace per calling thread (thread-local: two models called from two threads each use their own);
 * the kernels that take from it run on the calling thread, before or after their parallel regions.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    /* 64-byte aligned as the workspace's pieces: the decode bodies load their activations 64 bytes at a time, and
     * from malloc's 16-byte alignment every such load spans two cache lines. ck_linear_q over a 1.1B q4_1 model's
     * tensors on one thread of an AMD EPYC Zen 5 VM (VBMI bodies), activations from malloc: 25 GB/s of weights;
     * from the workspace or aligned: 37 GB/s. (By hand, not posix_memalign: newlib, the microcontrollers' C
     * library, declares it but does not have it.) malloc's own address is kept in the word before the piece. */
    {
        unsigned char *raw;
        uintptr_t piece;
        if (bytes > SIZE_MAX - 64 - sizeof raw) return NULL;
        raw = (unsigned char *)malloc(bytes + 64 + sizeof raw);
        if (!raw) return NULL;
        piece = ((uintptr_t)raw + sizeof raw + 63) & ~(uintptr_t)63;
        memcpy((void *)(piece - sizeof raw), &raw, sizeof raw);
        return (void *)piece;
    }
}

void ck_ws_free(void *p)
{
    const uintptr_t at = (uintptr_t)p, base = (uintptr_t)ws.base; /* (no pointer arithmetic on a NULL base) */
    if (p && !(ws.base && at >= base && at - base < ws.size)) { /* one of ck_ws_alloc's from malloc */
        void *raw;
        memcpy(&raw, (const unsigned char *)p - sizeof raw, sizeof raw);
        free(raw);
    }
}

size_t ck_ws_mark(void) { return ws.used; }

void ck_ws_reset(size_t mark)
{
    if (mark < ws.used) ws.used = mark;
}
