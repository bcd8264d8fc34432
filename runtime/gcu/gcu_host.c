/*
 * gcu_host.c — the host implementation of the gcu device API (gcu.h), in
 * plain C99 + POSIX threads. "Device memory" is host memory the shim hands
 * out and tracks (so that a host pointer passed where a device pointer
 * belongs is an error, as on a real device). Every stream has a queue, run in
 * order, one operation at a time; launches and async copies return at once.
 *
 * Who runs a queue: the thread that synchronizes on it, if it comes within
 * GCU_HOST_LAZY_US microseconds of the queueing (default 1000; 0: always the
 * worker), else the stream's worker thread. Work nobody waits for still runs,
 * and a thread waiting on an event (synchronize, a query, another stream's
 * wait) kicks the worker of the event's stream to start at once.
 *
 * Why not the worker always: the kernels are OpenMP code, and libgomp keeps
 * one thread pool per thread that opens parallel regions. A worker running
 * kernels next to a caller that runs OpenMP itself (PyTorch does) makes two
 * pools; once its pools hold more threads than there are cores, libgomp stops
 * spinning between regions (its "throttled" wait) and every region pays a
 * futex wake-up. Measured on a 2-core machine, a 3-layer MLP at batch 1: 32 us
 * per run on the worker, 118-234 us once PyTorch had run one op, against
 * 26-35 us on the synchronizing thread either way (the caller's own pool).
 * Nor is the worker woken per run: a signalled wake-up (the kernel then pulls
 * threads next to their waker) cost that MLP 26 -> 44 us in half the
 * processes. The worker looks at its queue on a timer instead, which costs
 * nothing measurable: every 10 x GCU_HOST_LAZY_US while its stream is in use,
 * every second when idle; so work nobody waits for starts within ~11 ms
 * (~1 s after a pause). Kicks and gcu_stream_destroy do signal it.
 * scripts/bench_graph.py --targets measures the device against --target cpu.
 */
#define _POSIX_C_SOURCE 200809L
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise */
#endif

#include "gcu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define GCU_ALIGN 64
#define GCU_HUGE ((size_t)2 << 20) /* a huge page */
#define STREAM_MAGIC 0x67637573u /* "gcus" */
#define EVENT_MAGIC 0x67637565u  /* "gcue" */
#define GCU_IDLE_POLL_NS 1000000000L /* how often an idle stream's worker looks at its queue */

/* ---- time ------------------------------------------------------------------------ */
static long g_lazy_ns;
static pthread_once_t g_lazy_once = PTHREAD_ONCE_INIT;

static void read_lazy(void)
{
    const char *e = getenv("GCU_HOST_LAZY_US");
    long us = e && *e ? atol(e) : 1000;
    g_lazy_ns = us > 0 ? us * 1000L : 0;
}

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

static struct timespec at_ns(long ns)
{
    struct timespec t;
    t.tv_sec = ns / 1000000000L;
    t.tv_nsec = ns % 1000000000L;
    return t;
}

/* ---- errors ------------------------------------------------------------------ */
static __thread char g_msg[512];

static gcu_error gcu_fail(gcu_error e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return e;
}

const char *gcu_last_error_message(void) { return g_msg; }

const char *gcu_error_name(gcu_error e)
{
    switch (e) {
    case GCU_SUCCESS: return "GCU_SUCCESS";
    case GCU_ERROR_INVALID_VALUE: return "GCU_ERROR_INVALID_VALUE";
    case GCU_ERROR_OUT_OF_MEMORY: return "GCU_ERROR_OUT_OF_MEMORY";
    case GCU_ERROR_INVALID_DEVICE: return "GCU_ERROR_INVALID_DEVICE";
    case GCU_ERROR_NOT_READY: return "GCU_ERROR_NOT_READY";
    case GCU_ERROR_INVALID_HANDLE: return "GCU_ERROR_INVALID_HANDLE";
    case GCU_ERROR_LAUNCH_FAILED: return "GCU_ERROR_LAUNCH_FAILED";
    case GCU_ERROR_NOT_SUPPORTED: return "GCU_ERROR_NOT_SUPPORTED";
    }
    return "GCU_ERROR_UNKNOWN";
}

/* ---- devices ----------------------------------------------------------------- */
/* GCU_HOST_DISCRETE=1 in the environment: the device behaves as a discrete one (not integrated, no mapped host
 * memory), so that a model's copy path runs on this implementation too (tests, and what a vendor's discrete
 * device will do) */
static int discrete(void)
{
    const char *v = getenv("GCU_HOST_DISCRETE");
    return v && *v && strcmp(v, "0") != 0;
}

static __thread int g_device;

gcu_error gcu_get_device_count(int *count)
{
    if (!count) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_get_device_count: count is NULL");
    *count = 1;
    return GCU_SUCCESS;
}

gcu_error gcu_get_device_properties(gcu_device_prop *prop, int device)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!prop) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_get_device_properties: prop is NULL");
    if (device != 0) return gcu_fail(GCU_ERROR_INVALID_DEVICE, "gcu_get_device_properties: no device %d (there is 1)", device);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "gcu host (%ld CPU threads)", cpus > 0 ? cpus : 1);
    prop->total_memory = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    prop->multiprocessors = cpus > 0 ? (int)cpus : 1;
    prop->async_engines = 1;
    prop->integrated = !discrete();
    return GCU_SUCCESS;
}

gcu_error gcu_set_device(int device)
{
    if (device != 0) return gcu_fail(GCU_ERROR_INVALID_DEVICE, "gcu_set_device: no device %d (there is 1)", device);
    g_device = device;
    return GCU_SUCCESS;
}

gcu_error gcu_get_device(int *device)
{
    if (!device) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_get_device: device is NULL");
    *device = g_device;
    return GCU_SUCCESS;
}

/* ---- device memory: tracked allocations --------------------------------------- */
typedef struct alloc {
    char *base;
    size_t size;
    int mapped;     /* host memory registered by gcu_host_register (not freed by gcu_free) */
    size_t own_map; /* > 0: gcu_malloc's own mapping of this many bytes (munmap), else malloc's (free) */
} alloc;

static pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static alloc *g_allocs;
static size_t g_n_allocs, g_cap_allocs;

/* [p, p + bytes) lies inside one allocation: 1, or 2 when that is registered host memory (both host and
 * device memory); else 0 */
static int is_device(const void *p, size_t bytes)
{
    const char *c = (const char *)p;
    size_t i;
    int found = 0;
    if (!p) return 0;
    pthread_mutex_lock(&g_mem_mu);
    for (i = 0; i < g_n_allocs && !found; i++) {
        const alloc *a = &g_allocs[i];
        if (c >= a->base && c <= a->base + a->size && bytes <= (size_t)(a->base + a->size - c))
            found = a->mapped ? 2 : 1;
    }
    pthread_mutex_unlock(&g_mem_mu);
    return found;
}

/* appends an entry to the allocation table */
static gcu_error track(void *p, size_t bytes, int mapped, const char *fn)
{
    pthread_mutex_lock(&g_mem_mu);
    if (g_n_allocs == g_cap_allocs) {
        size_t cap = g_cap_allocs ? 2 * g_cap_allocs : 64;
        alloc *grown = (alloc *)realloc(g_allocs, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&g_mem_mu);
            return gcu_fail(GCU_ERROR_OUT_OF_MEMORY, "%s: out of memory for the allocation table", fn);
        }
        g_allocs = grown;
        g_cap_allocs = cap;
    }
    g_allocs[g_n_allocs].base = (char *)p;
    g_allocs[g_n_allocs].size = bytes;
    g_allocs[g_n_allocs].mapped = mapped;
    g_allocs[g_n_allocs].own_map = 0;
    g_n_allocs++;
    pthread_mutex_unlock(&g_mem_mu);
    return GCU_SUCCESS;
}

/* removes the entry starting at p of that kind; 0 when there is none, else 1 with its own_map in *own_map */
static int untrack(void *p, int mapped, size_t *own_map)
{
    size_t i;
    pthread_mutex_lock(&g_mem_mu);
    for (i = 0; i < g_n_allocs; i++)
        if (g_allocs[i].base == (char *)p && g_allocs[i].mapped == mapped) break;
    if (i == g_n_allocs) {
        pthread_mutex_unlock(&g_mem_mu);
        return 0;
    }
    if (own_map) *own_map = g_allocs[i].own_map;
    g_allocs[i] = g_allocs[--g_n_allocs];
    pthread_mutex_unlock(&g_mem_mu);
    return 1;
}

#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
/* n bytes (a multiple of GCU_HUGE) of fresh memory at a 2 MiB boundary, advised onto huge pages before any of
 * it is touched; NULL when the mapping fails. A fresh mapping, not malloc's: glibc serves a large request from
 * memory an earlier one used (its mmap threshold grows as large blocks are freed), whose 4 KiB pages are already
 * there, and the advice then changes nothing (the test of this file saw 0 of 12 MiB on huge pages after the
 * others had run) */
static void *huge_map(size_t n)
{
    char *raw = (char *)mmap(NULL, n + GCU_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *p;
    size_t lead;
    if (raw == MAP_FAILED) return NULL;
    p = (char *)(((uintptr_t)raw + GCU_HUGE - 1) & ~(uintptr_t)(GCU_HUGE - 1));
    lead = (size_t)(p - raw);
    if (lead) munmap(raw, lead);
    munmap(p + n, GCU_HUGE - lead);
    (void)madvise(p, n, MADV_HUGEPAGE);
    return p;
}
#define GCU_HUGE_MAP 1
#endif

gcu_error gcu_malloc(void **dev_ptr, size_t bytes)
{
    void *p = NULL;
    if (!dev_ptr) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_malloc: dev_ptr is NULL");
    *dev_ptr = NULL;
    gcu_error err;
    /* two huge pages or more (a model's weights): 2 MiB-aligned, and on Linux advised onto huge pages before the
     * first touch, so that the kernel compacts for them at fault instead of leaving 4 KiB pages where none is free:
     * a kernel streaming the weights then misses the TLB once per 2 MiB. Measured on the Zen 3 VM (an exported MLP
     * of three 2048-wide layers, --target gcu, two builds interleaved in one process): 48 of its 48 MiB of weights
     * on huge pages instead of 14, and 1.5-5% faster per call */
    const size_t align = bytes >= 2 * GCU_HUGE ? GCU_HUGE : GCU_ALIGN;
    size_t own_map = 0;
#ifdef GCU_HUGE_MAP
    if (align == GCU_HUGE && bytes <= SIZE_MAX - 2 * GCU_HUGE) {
        own_map = (bytes + GCU_HUGE - 1) / GCU_HUGE * GCU_HUGE;
        if (!(p = huge_map(own_map))) own_map = 0; /* (then malloc's, as elsewhere) */
    }
#endif
    if (!p && posix_memalign(&p, align, bytes ? bytes : 1) != 0)
        return gcu_fail(GCU_ERROR_OUT_OF_MEMORY, "gcu_malloc: out of device memory for %zu bytes", bytes);
    if ((err = track(p, bytes, 0, "gcu_malloc")) != GCU_SUCCESS) {
#ifdef GCU_HUGE_MAP
        if (own_map) munmap(p, own_map);
        else
#endif
            free(p);
        return err;
    }
    if (own_map) { /* (the entry just appended) */
        pthread_mutex_lock(&g_mem_mu);
        g_allocs[g_n_allocs - 1].own_map = own_map;
        pthread_mutex_unlock(&g_mem_mu);
    }
    *dev_ptr = p;
    return GCU_SUCCESS;
}

gcu_error gcu_free(void *dev_ptr)
{
    if (!dev_ptr) return GCU_SUCCESS;
    size_t own_map = 0;
    if (!untrack(dev_ptr, 0, &own_map))
        return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_free: %p is not the start of a device allocation", dev_ptr);
#ifdef GCU_HUGE_MAP
    if (own_map) {
        munmap(dev_ptr, own_map);
        return GCU_SUCCESS;
    }
#endif
    free(dev_ptr);
    return GCU_SUCCESS;
}

/* ---- host memory the device uses in place ---------------------------------------------- */
gcu_error gcu_host_register(void *host_ptr, size_t bytes)
{
    if (!host_ptr) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_host_register: host_ptr is NULL");
    return track(host_ptr, bytes, 1, "gcu_host_register");
}

gcu_error gcu_host_unregister(void *host_ptr)
{
    if (!host_ptr || !untrack(host_ptr, 1, NULL))
        return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_host_unregister: %p is not registered host memory", host_ptr);
    return GCU_SUCCESS;
}

gcu_error gcu_host_get_device_pointer(void **dev_ptr, void *host_ptr)
{
    if (!dev_ptr) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_host_get_device_pointer: dev_ptr is NULL");
    *dev_ptr = NULL;
    if (discrete())
        return gcu_fail(GCU_ERROR_NOT_SUPPORTED, "gcu_host_get_device_pointer: a discrete device (GCU_HOST_DISCRETE) "
                    "cannot use host memory in place");
    if (is_device(host_ptr, 0) != 2)
        return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_host_get_device_pointer: %p is not registered host memory",
                    host_ptr);
    *dev_ptr = host_ptr; /* the device is the host: one address space */
    return GCU_SUCCESS;
}

/* ---- streams and events: the types ------------------------------------------------------ */
typedef enum op_kind { OP_LAUNCH, OP_COPY, OP_SET, OP_RECORD, OP_WAIT } op_kind;

typedef struct op {
    op_kind kind;
    struct op *next;
    long queued_at; /* now_ns() when queued: the worker runs it once it is GCU_HOST_LAZY_US old */
    gcu_kernel kernel;
    void *dst;
    const void *src;
    size_t bytes;
    int value;
    struct gcu_event_s *event;
    unsigned long generation;
    unsigned char *args; /* the launch's copied argument block, GCU_ALIGN-aligned, in the same allocation */
} op;

struct gcu_stream_s {
    unsigned magic;
    pthread_mutex_t mu;
    pthread_cond_t work; /* to the worker (CLOCK_MONOTONIC): work arrived while it slept, a kick, stop */
    pthread_cond_t done; /* to waiting threads: an operation finished */
    op *head, *tail;
    int busy;            /* a thread (the worker or a synchronizing one) is running the operation taken last */
    int stop;            /* gcu_stream_destroy: the worker runs what is left, then exits */
    int urgent;          /* someone waits for this stream's work: the worker runs it without waiting */
    unsigned long queued, finished; /* operations ever queued, ever finished */
    long last_queued;               /* now_ns() of the latest queueing */
    pthread_t thread;
    struct gcu_stream_s *next_stream; /* the registry gcu_synchronize walks */
};

struct gcu_event_s {
    unsigned magic;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long recorded, completed; /* generations: record() numbers them, the stream completes them */
    int waiters;                       /* queued gcu_stream_wait_event operations still reading it */
    struct gcu_stream_s *stream;       /* the stream of the latest record while it is pending, else NULL */
    struct timespec when;              /* when the last completed record ran */
};

/* Someone waits for s's work without running it: its worker starts now. Called with nothing or an event's
 * lock held (the lock order is event, then stream). */
static void kick(struct gcu_stream_s *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->head && !s->urgent) {
        s->urgent = 1;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Waits, holding e->mu, for generation gen of e; the stream that will complete it is kicked. */
static void wait_generation(struct gcu_event_s *e, unsigned long gen)
{
    while (e->completed < gen) {
        if (e->stream) kick(e->stream);
        pthread_cond_wait(&e->cv, &e->mu);
    }
}

/* ---- events ------------------------------------------------------------------------ */
static int valid_event(const struct gcu_event_s *e) { return e && e->magic == EVENT_MAGIC; }

gcu_error gcu_event_create(gcu_event *event)
{
    struct gcu_event_s *e;
    if (!event) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_event_create: event is NULL");
    e = (struct gcu_event_s *)calloc(1, sizeof *e);
    if (!e) return gcu_fail(GCU_ERROR_OUT_OF_MEMORY, "gcu_event_create: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->magic = EVENT_MAGIC;
    *event = e;
    return GCU_SUCCESS;
}

gcu_error gcu_event_synchronize(gcu_event e)
{
    if (!valid_event(e)) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_event_synchronize: not an event");
    pthread_mutex_lock(&e->mu);
    if (e->recorded == 0) {
        pthread_mutex_unlock(&e->mu);
        return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_event_synchronize: the event was never recorded");
    }
    wait_generation(e, e->recorded);
    pthread_mutex_unlock(&e->mu);
    return GCU_SUCCESS;
}

gcu_error gcu_event_destroy(gcu_event e)
{
    if (!valid_event(e)) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_event_destroy: not an event");
    pthread_mutex_lock(&e->mu); /* queued records and waits still point at it */
    while (e->completed < e->recorded || e->waiters > 0) {
        if (e->stream) kick(e->stream);
        pthread_cond_wait(&e->cv, &e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    e->magic = 0;
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
    return GCU_SUCCESS;
}

gcu_error gcu_event_query(gcu_event e)
{
    gcu_error r;
    if (!valid_event(e)) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_event_query: not an event");
    pthread_mutex_lock(&e->mu);
    r = e->recorded == 0 ? GCU_ERROR_INVALID_HANDLE : e->completed >= e->recorded ? GCU_SUCCESS : GCU_ERROR_NOT_READY;
    if (r == GCU_ERROR_NOT_READY && e->stream) kick(e->stream); /* a thread polling for it wants it done */
    pthread_mutex_unlock(&e->mu);
    if (r == GCU_ERROR_INVALID_HANDLE) return gcu_fail(r, "gcu_event_query: the event was never recorded");
    return r;
}

gcu_error gcu_event_elapsed_time(float *ms, gcu_event start, gcu_event end)
{
    gcu_error r;
    if (!ms) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_event_elapsed_time: ms is NULL");
    if (!valid_event(start) || !valid_event(end)) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_event_elapsed_time: not an event");
    if ((r = gcu_event_query(start)) != GCU_SUCCESS || (r = gcu_event_query(end)) != GCU_SUCCESS)
        return r == GCU_ERROR_NOT_READY ? gcu_fail(r, "gcu_event_elapsed_time: an event has not completed") : r;
    *ms = (float)((end->when.tv_sec - start->when.tv_sec) * 1e3 + (end->when.tv_nsec - start->when.tv_nsec) / 1e6);
    return GCU_SUCCESS;
}

/* ---- streams: a queue each, run by whoever needs it first ------------------------------- */
static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gcu_stream_s *g_streams;
static struct gcu_stream_s *g_default;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static gcu_error g_default_error;

static void run_op(op *o)
{
    switch (o->kind) {
    case OP_LAUNCH: o->kernel(o->args); break;
    case OP_COPY: memmove(o->dst, o->src, o->bytes); break;
    case OP_SET: memset(o->dst, o->value, o->bytes); break;
    case OP_RECORD:
        pthread_mutex_lock(&o->event->mu);
        clock_gettime(CLOCK_MONOTONIC, &o->event->when);
        if (o->generation > o->event->completed) o->event->completed = o->generation;
        if (o->event->completed >= o->event->recorded) o->event->stream = NULL;
        pthread_cond_broadcast(&o->event->cv);
        pthread_mutex_unlock(&o->event->mu);
        break;
    case OP_WAIT:
        pthread_mutex_lock(&o->event->mu);
        wait_generation(o->event, o->generation);
        o->event->waiters--;
        pthread_cond_broadcast(&o->event->cv);
        pthread_mutex_unlock(&o->event->mu);
        break;
    }
}

/* Takes the queue's first operation and runs it without the lock (one at a time: the caller saw !s->busy).
 * Called and returns with s->mu held. */
static void run_next(struct gcu_stream_s *s)
{
    op *o = s->head;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->busy = 1;
    pthread_mutex_unlock(&s->mu);
    run_op(o);
    free(o);
    pthread_mutex_lock(&s->mu);
    s->busy = 0;
    s->finished++;
    pthread_cond_broadcast(&s->done);
}

/* The worker never needs a signal for new work (with GCU_HOST_LAZY_US > 0): it looks at the queue on a timer,
 * every 10 x GCU_HOST_LAZY_US while the stream was used in the last 1000 x, else every GCU_IDLE_POLL_NS. */
static void *worker(void *arg)
{
    struct gcu_stream_s *s = (struct gcu_stream_s *)arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        long now = now_ns(), wake;
        struct timespec t;
        if (s->head && !s->busy) {
            long due = s->head->queued_at + g_lazy_ns;
            if (s->stop || s->urgent || now >= due) {
                run_next(s);
                continue;
            }
            wake = due;
        } else {
            if (!s->head) {
                s->urgent = 0;
                if (s->stop) break;
            }
            wake = now + (g_lazy_ns && now - s->last_queued < 1000 * g_lazy_ns ? 10 * g_lazy_ns : GCU_IDLE_POLL_NS);
        }
        t = at_ns(wake);
        pthread_cond_timedwait(&s->work, &s->mu, &t);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static gcu_error stream_init(struct gcu_stream_s *s)
{
    pthread_condattr_t attr;
    pthread_once(&g_lazy_once, read_lazy);
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->work, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&s->done, NULL);
    if (pthread_create(&s->thread, NULL, worker, s) != 0) {
        pthread_cond_destroy(&s->done);
        pthread_cond_destroy(&s->work);
        pthread_mutex_destroy(&s->mu);
        return gcu_fail(GCU_ERROR_LAUNCH_FAILED, "gcu_stream_create: cannot start the stream's worker thread");
    }
    s->magic = STREAM_MAGIC;
    pthread_mutex_lock(&g_streams_mu);
    s->next_stream = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_streams_mu);
    return GCU_SUCCESS;
}

static void make_default(void)
{
    static struct gcu_stream_s s;
    g_default_error = stream_init(&s);
    if (g_default_error == GCU_SUCCESS) g_default = &s;
}

/* The stream a call names (NULL: the default one), or NULL with the error set. */
static struct gcu_stream_s *resolve(gcu_stream s, const char *fn, gcu_error *err)
{
    if (!s) {
        pthread_once(&g_default_once, make_default);
        if (!g_default) *err = gcu_fail(g_default_error, "%s: the default stream could not start", fn);
        return g_default;
    }
    if (s->magic != STREAM_MAGIC) {
        *err = gcu_fail(GCU_ERROR_INVALID_HANDLE, "%s: not a stream (destroyed?)", fn);
        return NULL;
    }
    return s;
}

/* Appends o; called with s->mu held. */
static void append(struct gcu_stream_s *s, op *o)
{
    o->next = NULL;
    o->queued_at = s->last_queued = now_ns();
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    s->queued++;
    if (!g_lazy_ns) pthread_cond_signal(&s->work); /* else the worker's timer finds o (see worker()) */
}

static gcu_error enqueue(struct gcu_stream_s *s, op *o)
{
    pthread_mutex_lock(&s->mu);
    append(s, o);
    pthread_mutex_unlock(&s->mu);
    return GCU_SUCCESS;
}

static op *new_op(op_kind kind, size_t extra, const char *fn, gcu_error *err)
{
    op *o = (op *)calloc(1, sizeof *o + (extra ? extra + GCU_ALIGN : 0));
    if (!o) {
        *err = gcu_fail(GCU_ERROR_OUT_OF_MEMORY, "%s: out of memory queueing the work", fn);
        return NULL;
    }
    o->kind = kind;
    if (extra) {
        uintptr_t at = (uintptr_t)(o + 1);
        o->args = (unsigned char *)((at + GCU_ALIGN - 1) / GCU_ALIGN * GCU_ALIGN);
    }
    return o;
}

/* Everything queued on s so far has finished: the calling thread runs it, unless another thread already is. */
static gcu_error drain(struct gcu_stream_s *s)
{
    unsigned long target;
    pthread_mutex_lock(&s->mu);
    target = s->queued;
    while (s->finished < target) {
        if (s->head && !s->busy) run_next(s);
        else pthread_cond_wait(&s->done, &s->mu);
    }
    if (s->urgent && s->head) pthread_cond_signal(&s->work); /* kicked while we ran it: the rest is the worker's */
    pthread_mutex_unlock(&s->mu);
    return GCU_SUCCESS;
}

gcu_error gcu_stream_create(gcu_stream *stream)
{
    struct gcu_stream_s *s;
    gcu_error r;
    if (!stream) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_stream_create: stream is NULL");
    s = (struct gcu_stream_s *)malloc(sizeof *s);
    if (!s) return gcu_fail(GCU_ERROR_OUT_OF_MEMORY, "gcu_stream_create: out of memory");
    if ((r = stream_init(s)) != GCU_SUCCESS) {
        free(s);
        return r;
    }
    *stream = s;
    return GCU_SUCCESS;
}

gcu_error gcu_stream_destroy(gcu_stream stream)
{
    struct gcu_stream_s **p;
    if (!stream) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_stream_destroy: the default stream is not destroyed");
    if (stream->magic != STREAM_MAGIC) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_stream_destroy: not a stream");
    pthread_mutex_lock(&g_streams_mu);
    for (p = &g_streams; *p && *p != stream; p = &(*p)->next_stream) {
    }
    if (*p) *p = stream->next_stream;
    pthread_mutex_unlock(&g_streams_mu);
    pthread_mutex_lock(&stream->mu);
    stream->stop = 1; /* the worker runs the queue, then exits */
    pthread_cond_signal(&stream->work);
    pthread_mutex_unlock(&stream->mu);
    pthread_join(stream->thread, NULL);
    pthread_mutex_lock(&stream->mu);
    while (stream->busy) pthread_cond_wait(&stream->done, &stream->mu); /* a synchronizing thread's last one */
    pthread_mutex_unlock(&stream->mu);
    stream->magic = 0;
    pthread_cond_destroy(&stream->done);
    pthread_cond_destroy(&stream->work);
    pthread_mutex_destroy(&stream->mu);
    free(stream);
    return GCU_SUCCESS;
}

gcu_error gcu_stream_synchronize(gcu_stream stream)
{
    gcu_error err = GCU_SUCCESS;
    struct gcu_stream_s *s = resolve(stream, "gcu_stream_synchronize", &err);
    return s ? drain(s) : err;
}

gcu_error gcu_stream_query(gcu_stream stream)
{
    gcu_error err = GCU_SUCCESS;
    int idle;
    struct gcu_stream_s *s = resolve(stream, "gcu_stream_query", &err);
    if (!s) return err;
    pthread_mutex_lock(&s->mu);
    idle = !s->head && !s->busy;
    pthread_mutex_unlock(&s->mu);
    if (!idle) kick(s); /* a thread polling for it wants it done */
    return idle ? GCU_SUCCESS : GCU_ERROR_NOT_READY;
}

gcu_error gcu_stream_wait_event(gcu_stream stream, gcu_event event)
{
    gcu_error err = GCU_SUCCESS;
    struct gcu_stream_s *s = resolve(stream, "gcu_stream_wait_event", &err);
    op *o;
    unsigned long gen;
    if (!s) return err;
    if (!valid_event(event)) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_stream_wait_event: not an event");
    if (!(o = new_op(OP_WAIT, 0, "gcu_stream_wait_event", &err))) return err;
    pthread_mutex_lock(&event->mu);
    gen = event->recorded;
    if (gen) event->waiters++;
    pthread_mutex_unlock(&event->mu);
    if (gen == 0) { /* nothing recorded: nothing to wait for */
        free(o);
        return GCU_SUCCESS;
    }
    o->event = event;
    o->generation = gen;
    return enqueue(s, o);
}

gcu_error gcu_event_record(gcu_event event, gcu_stream stream)
{
    gcu_error err = GCU_SUCCESS;
    struct gcu_stream_s *s = resolve(stream, "gcu_event_record", &err);
    op *o;
    if (!s) return err;
    if (!valid_event(event)) return gcu_fail(GCU_ERROR_INVALID_HANDLE, "gcu_event_record: not an event");
    if (!(o = new_op(OP_RECORD, 0, "gcu_event_record", &err))) return err;
    o->event = event;
    pthread_mutex_lock(&event->mu); /* numbered and queued at once: a thread waiting for it finds its stream */
    o->generation = ++event->recorded;
    pthread_mutex_lock(&s->mu);
    append(s, o);
    pthread_mutex_unlock(&s->mu);
    event->stream = s;
    pthread_mutex_unlock(&event->mu);
    return GCU_SUCCESS;
}

gcu_error gcu_synchronize(void)
{
    struct gcu_stream_s *s;
    /* each stream drains under the registry lock: streams created meanwhile have no earlier work */
    pthread_mutex_lock(&g_streams_mu);
    for (s = g_streams; s; s = s->next_stream) drain(s);
    pthread_mutex_unlock(&g_streams_mu);
    return GCU_SUCCESS;
}

/* ---- copies, sets, launches ------------------------------------------------------------ */
static gcu_error check_copy(const char *fn, void *dst, const void *src, size_t bytes, gcu_memcpy_kind kind)
{
    int dst_dev = kind != GCU_MEMCPY_DEVICE_TO_HOST, src_dev = kind != GCU_MEMCPY_HOST_TO_DEVICE;
    if (kind != GCU_MEMCPY_HOST_TO_DEVICE && kind != GCU_MEMCPY_DEVICE_TO_HOST && kind != GCU_MEMCPY_DEVICE_TO_DEVICE)
        return gcu_fail(GCU_ERROR_INVALID_VALUE, "%s: unknown copy kind %d", fn, (int)kind);
    if (bytes == 0) return GCU_SUCCESS;
    if (!dst || !src) return gcu_fail(GCU_ERROR_INVALID_VALUE, "%s: NULL %s", fn, !dst ? "destination" : "source");
    /* (registered host memory, 2, is both) */
    if (dst_dev ? !is_device(dst, bytes) : is_device(dst, bytes) == 1)
        return gcu_fail(GCU_ERROR_INVALID_VALUE, "%s: the destination %p is %s", fn, dst,
                    dst_dev ? "not inside a device allocation (of that many bytes)" : "device memory, not host");
    if (src_dev ? !is_device(src, bytes) : is_device(src, bytes) == 1)
        return gcu_fail(GCU_ERROR_INVALID_VALUE, "%s: the source %p is %s", fn, src,
                    src_dev ? "not inside a device allocation (of that many bytes)" : "device memory, not host");
    return GCU_SUCCESS;
}

gcu_error gcu_memcpy_async(void *dst, const void *src, size_t bytes, gcu_memcpy_kind kind, gcu_stream stream)
{
    gcu_error err = check_copy("gcu_memcpy_async", dst, src, bytes, kind);
    struct gcu_stream_s *s;
    op *o;
    if (err != GCU_SUCCESS) return err;
    if (!(s = resolve(stream, "gcu_memcpy_async", &err))) return err;
    if (bytes == 0) return GCU_SUCCESS;
    if (!(o = new_op(OP_COPY, 0, "gcu_memcpy_async", &err))) return err;
    o->dst = dst;
    o->src = src;
    o->bytes = bytes;
    return enqueue(s, o);
}

gcu_error gcu_memcpy(void *dst, const void *src, size_t bytes, gcu_memcpy_kind kind)
{
    gcu_error err = check_copy("gcu_memcpy", dst, src, bytes, kind);
    if (err != GCU_SUCCESS) return err;
    if ((err = gcu_memcpy_async(dst, src, bytes, kind, NULL)) != GCU_SUCCESS) return err;
    return gcu_stream_synchronize(NULL);
}

gcu_error gcu_memset_async(void *dev_ptr, int value, size_t bytes, gcu_stream stream)
{
    gcu_error err = GCU_SUCCESS;
    struct gcu_stream_s *s;
    op *o;
    if (bytes && !is_device(dev_ptr, bytes))
        return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_memset: %p is not inside a device allocation of %zu bytes", dev_ptr, bytes);
    if (!(s = resolve(stream, "gcu_memset_async", &err))) return err;
    if (bytes == 0) return GCU_SUCCESS;
    if (!(o = new_op(OP_SET, 0, "gcu_memset_async", &err))) return err;
    o->dst = dev_ptr;
    o->value = value;
    o->bytes = bytes;
    return enqueue(s, o);
}

gcu_error gcu_memset(void *dev_ptr, int value, size_t bytes)
{
    gcu_error err = gcu_memset_async(dev_ptr, value, bytes, NULL);
    return err != GCU_SUCCESS ? err : gcu_stream_synchronize(NULL);
}

gcu_error gcu_launch(gcu_kernel kernel, const void *args, size_t args_size, gcu_stream stream)
{
    gcu_error err = GCU_SUCCESS;
    struct gcu_stream_s *s;
    op *o;
    if (!kernel) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_launch: kernel is NULL");
    if (args_size && !args) return gcu_fail(GCU_ERROR_INVALID_VALUE, "gcu_launch: %zu argument bytes at NULL", args_size);
    if (!(s = resolve(stream, "gcu_launch", &err))) return err;
    if (!(o = new_op(OP_LAUNCH, args_size, "gcu_launch", &err))) return err;
    o->kernel = kernel;
    if (args_size) memcpy(o->args, args, args_size);
    return enqueue(s, o);
}
