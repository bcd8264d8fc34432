/*
 * gcu.h — the gcu device API: a small accelerator runtime in the shape of the
 * real ones (device query, device memory, copies, streams, events, kernel
 * launch). Generated models built with `ckc compile --target gcu` talk to the
 * device only through these functions, so a vendor implementation can replace
 * runtime/gcu/gcu_host.c without changing generated code.
 *
 *   void *d;  gcu_stream s;  gcu_event done;
 *   gcu_malloc(&d, bytes);
 *   gcu_stream_create(&s);
 *   gcu_memcpy_async(d, host, bytes, GCU_MEMCPY_HOST_TO_DEVICE, s);
 *   gcu_launch(my_kernel, &args, sizeof args, s);      // returns before the kernel runs
 *   gcu_event_create(&done); gcu_event_record(done, s);
 *   gcu_memcpy_async(host, d, bytes, GCU_MEMCPY_DEVICE_TO_HOST, s);
 *   gcu_stream_synchronize(s);
 *
 * Semantics an implementation must provide:
 *   - Work queued on one stream runs in queue order; work on different streams
 *     may overlap unless ordered by gcu_stream_wait_event. The stream NULL is
 *     the default stream (its own queue, created on first use).
 *   - Every *_async call and gcu_launch return once the work is queued; the
 *     argument block of a launch is copied at the call, so the caller may
 *     reuse it at once. Host buffers of async copies must stay valid until the
 *     stream reaches the copy.
 *   - gcu_memcpy / gcu_memset (no stream) complete before returning and are
 *     ordered after all work queued so far on the default stream.
 *   - A kernel is a host function `void k(void *args)` that the device runs; a
 *     real device would register device code instead, under the same launch.
 *   - Device pointers are opaque to the host: read or write them only through
 *     gcu_memcpy / gcu_memset / kernels. Pointer arithmetic inside an
 *     allocation is allowed (a device pointer plus an offset is a device
 *     pointer).
 *   - An integrated device (gcu_device_prop.integrated) also works on host
 *     memory registered with gcu_host_register, at the address
 *     gcu_host_get_device_pointer gives; a discrete one may refuse to map
 *     (GCU_ERROR_NOT_SUPPORTED), and models then copy. The host
 *     implementation is integrated; GCU_HOST_DISCRETE=1 makes it discrete.
 *   - Every function is thread-safe and returns GCU_SUCCESS or an error code;
 *     gcu_last_error_message() describes the calling thread's last failure.
 */
#ifndef GCU_H
#define GCU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcu_error {
    GCU_SUCCESS = 0,
    GCU_ERROR_INVALID_VALUE = 1,   /* a NULL or out-of-range argument, a pointer that is not of the kind said */
    GCU_ERROR_OUT_OF_MEMORY = 2,
    GCU_ERROR_INVALID_DEVICE = 3,
    GCU_ERROR_NOT_READY = 4,       /* gcu_stream_query / gcu_event_query: work still pending */
    GCU_ERROR_INVALID_HANDLE = 5,  /* an event never recorded, a stream or event already destroyed */
    GCU_ERROR_LAUNCH_FAILED = 6,   /* the implementation could not start its worker */
    GCU_ERROR_NOT_SUPPORTED = 7    /* the device cannot do this (gcu_host_get_device_pointer on a discrete device) */
} gcu_error;

const char *gcu_error_name(gcu_error e);      /* "GCU_ERROR_INVALID_VALUE" */
const char *gcu_last_error_message(void);     /* this thread's last failure, "" if none */

/* ---- devices ---- */
typedef struct gcu_device_prop {
    char name[64];
    size_t total_memory;     /* bytes */
    int multiprocessors;     /* compute units */
    int async_engines;       /* copies that can overlap kernels */
    int integrated;          /* 1: the device shares the host's memory and works on host buffers in place
                              * (gcu_host_get_device_pointer succeeds), as an integrated GPU or CUDA's mapped
                              * host memory; 0: a discrete device, whose memory only copies reach */
} gcu_device_prop;

gcu_error gcu_get_device_count(int *count);
gcu_error gcu_get_device_properties(gcu_device_prop *prop, int device);
gcu_error gcu_set_device(int device);
gcu_error gcu_get_device(int *device);

/* ---- memory ---- */
gcu_error gcu_malloc(void **dev_ptr, size_t bytes);   /* 64-byte aligned; bytes 0 gives a valid pointer */
gcu_error gcu_free(void *dev_ptr);                    /* NULL is a no-op */

typedef enum gcu_memcpy_kind {
    GCU_MEMCPY_HOST_TO_DEVICE = 0,
    GCU_MEMCPY_DEVICE_TO_HOST = 1,
    GCU_MEMCPY_DEVICE_TO_DEVICE = 2
} gcu_memcpy_kind;

typedef struct gcu_stream_s *gcu_stream;
typedef struct gcu_event_s *gcu_event;

/* Host memory the device reads and writes in place, as CUDA's cudaHostRegister (mapped) +
 * cudaHostGetDevicePointer: on an integrated device (gcu_device_prop.integrated) a model registers the caller's
 * buffers for a run instead of copying them. gcu_host_get_device_pointer gives the device address of
 * registered memory (GCU_ERROR_NOT_SUPPORTED on a discrete device that cannot map it); copies and kernels may
 * use it as device memory until gcu_host_unregister. The host must not touch the buffer while queued work
 * uses it. Registering the same memory twice takes two unregisters. */
gcu_error gcu_host_register(void *host_ptr, size_t bytes);
gcu_error gcu_host_unregister(void *host_ptr);
gcu_error gcu_host_get_device_pointer(void **dev_ptr, void *host_ptr);

gcu_error gcu_memcpy(void *dst, const void *src, size_t bytes, gcu_memcpy_kind kind);
gcu_error gcu_memcpy_async(void *dst, const void *src, size_t bytes, gcu_memcpy_kind kind, gcu_stream stream);
gcu_error gcu_memset(void *dev_ptr, int value, size_t bytes);
gcu_error gcu_memset_async(void *dev_ptr, int value, size_t bytes, gcu_stream stream);

/* ---- streams ---- */
gcu_error gcu_stream_create(gcu_stream *stream);
gcu_error gcu_stream_destroy(gcu_stream stream);      /* waits for its queued work first */
gcu_error gcu_stream_synchronize(gcu_stream stream);
gcu_error gcu_stream_query(gcu_stream stream);        /* GCU_SUCCESS when idle, else GCU_ERROR_NOT_READY */
gcu_error gcu_stream_wait_event(gcu_stream stream, gcu_event event); /* later work waits for the event */

/* ---- events ---- */
gcu_error gcu_event_create(gcu_event *event);
gcu_error gcu_event_destroy(gcu_event event);
gcu_error gcu_event_record(gcu_event event, gcu_stream stream);  /* completes when the stream reaches it */
gcu_error gcu_event_synchronize(gcu_event event);
gcu_error gcu_event_query(gcu_event event);
gcu_error gcu_event_elapsed_time(float *ms, gcu_event start, gcu_event end);  /* both completed */

/* ---- kernels ---- */
typedef void (*gcu_kernel)(void *args);
gcu_error gcu_launch(gcu_kernel kernel, const void *args, size_t args_size, gcu_stream stream);

/* Waits for all work on every stream. */
gcu_error gcu_synchronize(void);

#ifdef __cplusplus
}
#endif
#endif /* GCU_H */
