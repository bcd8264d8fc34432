/*
 * threads.c — one thread pool for the whole model.
 *
 * OpenBLAS (Debian's pthread build) keeps its own worker pool and OpenMP keeps
 * another. On a 2-core machine, an OpenMP team that just finished a kernel
 * spins for a while (GOMP_SPINCOUNT) while OpenBLAS's workers want the same
 * cores. Measured on stories110M, 2 threads: letting OpenBLAS thread its own
 * GEMMs next to our OpenMP kernels gave ~255 tok/s prefill and ~20 tok/s
 * decode; one pool gives ~600 and ~66 (2.4x and 3.3x). So during a model call OpenBLAS runs
 * single-threaded and ck_linear splits each GEMM/GEMV over the OpenMP team
 * instead: one pool, no oversubscription. The caller's OpenBLAS and OpenMP
 * settings are restored on the way out, so a host process (numpy, torch)
 * sharing the same libopenblas is not affected.
 *
 * dlclose safety: OpenMP worker threads outlive every parallel region and sit
 * in libgomp's code. When a program dlopen()s libmodel.so (which alone pulled
 * libgomp in) and later dlclose()s it, libgomp would be unmapped under its own
 * threads: a crash at exit, measured 18 of 20 runs. So when the library loads,
 * libgomp is marked never-unload (RTLD_NODELETE). OpenBLAS needs nothing: its
 * destructor stops its own pool.
 */
#if defined(__linux__) && defined(__GNUC__)
#define _GNU_SOURCE /* RTLD_NODELETE, RTLD_NOLOAD */
#include <dlfcn.h>
#endif

#include "blas.h"
#include "ck_kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__linux__) && defined(__GNUC__) && defined(_OPENMP)
__attribute__((constructor)) static void ck_pin_openmp_runtime(void)
{
    /* RTLD_NOLOAD: only whichever OpenMP runtime is already loaded (GCC's or LLVM's) */
    const char *names[] = {"libgomp.so.1", "libomp.so.5", "libomp.so"};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE)) break; /* handle kept on purpose */
}
#endif

#if CK_BLAS
/* From OpenBLAS; declared here so any cblas.h variant works. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
static int blas_threads(void) { return openblas_get_num_threads(); }
static void blas_threads_set(int n) { openblas_set_num_threads(n); }
#else /* blas.c's own GEMM: single-threaded, nothing to save */
static int blas_threads(void) { return 1; }
static void blas_threads_set(int n) { (void)n; }
#endif

int ck_threads_available(void)
{
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

void ck_threads_use(int n_threads)
{
#ifdef _OPENMP
    omp_set_num_threads(n_threads > 0 ? n_threads : 1);
#else
    (void)n_threads;
#endif
}

void ck_threads_enter(ck_threads_saved *saved, int n_threads)
{
    saved->blas_threads = blas_threads();
    if (saved->blas_threads != 1) blas_threads_set(1);
#ifdef _OPENMP
    saved->omp_threads = omp_get_max_threads();
    omp_set_num_threads(n_threads > 0 ? n_threads : 1);
#else
    (void)n_threads;
    saved->omp_threads = 1;
#endif
}

void ck_threads_leave(const ck_threads_saved *saved)
{
    if (saved->blas_threads != 1) blas_threads_set(saved->blas_threads);
#ifdef _OPENMP
    omp_set_num_threads(saved->omp_threads);
#endif
}
