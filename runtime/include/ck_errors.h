/*
 * ck_errors.h — result codes and the error message shared by every library
 * ckc generates (ck_model.h, ck_graph.h).
 *
 * `int` results are 0 on success and a negative CK_E* code on failure, with a
 * message from ck_last_error() (thread-local; never NULL after a failure).
 */
#ifndef CK_ERRORS_H
#define CK_ERRORS_H

/* Where a thread's last error message lives: thread-local storage, except on a bare-metal ARM target
 * (arm-none-eabi: no OS threads, no TLS runtime), where it is a plain static. -DCK_THREAD_LOCAL= overrides. */
#ifndef CK_THREAD_LOCAL
#if (defined(__arm__) || defined(__thumb__)) && !defined(__linux__) && !defined(__APPLE__) && !defined(__ANDROID__)
#define CK_THREAD_LOCAL
#else
#define CK_THREAD_LOCAL __thread
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CK_OK = 0,
    CK_EINVAL = -1,  /* NULL handle, bad argument, out-of-range token id */
    CK_ERANGE = -2,  /* exceeds the context length or the KV-cache capacity */
    CK_ESTATE = -3,  /* wrong state, e.g. decode before kv_cache_enable or forward before embed_tokens */
    CK_EIO = -4,     /* cannot open or map the weights */
    CK_EFORMAT = -5, /* malformed checkpoint, or a tensor missing / of the wrong shape or dtype */
    CK_ENOMEM = -6,  /* out of memory */
    CK_ENOTSUP = -7, /* not compiled in, e.g. ck_model_set_trace without -DCK_TRACE */
    CK_EDEVICE = -8  /* the device (gcu.h) failed: the message quotes its call and error */
};

const char *ck_last_error(void);
int ck_last_error_code(void); /* the CK_E* code of that failure (what a NULL from *_init cannot return) */
/* Sets the message and code ck_last_error() reports (printf format); returns code. For the runtime's helpers
 * that run on a model's handle (ck_generate.h). */
int ck_error_set(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* CK_ERRORS_H */
