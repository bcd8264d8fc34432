/*
 * linear.c — y = x @ W^T (+ bias) (+ add), the workhorse of every layer.
 *
 * W stays in nn.Linear's [N][K] layout and is read with CblasTrans: packing
 * then streams rows of W (stride 1), which is the fast path at large sizes.
 * One token (decode) uses GEMV: sgemm with M = 1 is several times slower.
 *
 * Threads: the output features are split into one contiguous column range
 * per OpenMP thread, and each thread calls single-threaded OpenBLAS on its
 * range (see threads.c for why). Weights are therefore streamed once overall.
 *
 * The bias and the residual `add` are folded into the GEMM: the output is
 * pre-filled with add (+ bias) and the GEMM accumulates with beta = 1. When
 * add == out (the planner put the output in the dying residual's memory) no
 * copy happens at all: the MATMUL_ADD trick from the design notes.
 */
#include <cblas.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ck_kernels.h"

/* Columns [n0, n0 + nb) of the output. */
static void linear_cols(float *out, int ldo, const float *x, int ldx, const float *w,
                        const float *bias, const float *add, int ld_add, int T, int K, int n0, int nb)
{
    float beta = 0.0f;
    int t, j;
    if (nb <= 0) return;
    if (add || bias) {
        for (t = 0; t < T; t++) {
            float *o = out + (size_t)t * ldo + n0;
            if (add) {
                const float *a = add + (size_t)t * ld_add + n0;
                if (a != o) memcpy(o, a, (size_t)nb * sizeof(float));
                if (bias)
                    for (j = 0; j < nb; j++) o[j] += bias[n0 + j];
            } else {
                memcpy(o, bias + n0, (size_t)nb * sizeof(float));
            }
        }
        beta = 1.0f;
    }
    if (T == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, nb, K, 1.0f, w + (size_t)n0 * K, K, x, 1, beta, out + n0, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, nb, K, 1.0f, x, ldx, w + (size_t)n0 * K, K,
                    beta, out + n0, ldo);
}

void ck_linear(float *out, int ldo, const float *x, int ldx, const float *w,
               const float *bias, const float *add, int ld_add, int T, int K, int N)
{
#ifdef _OPENMP
    /* Below ~64k multiply-adds a parallel region costs more than it saves. */
    int team = omp_in_parallel() || (double)T * K * N < 65536.0 ? 1 : omp_get_max_threads();
    if (team > 1) {
#pragma omp parallel num_threads(team)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            /* one contiguous column range per thread, rounded to 16 floats (a
             * 64-byte line); a GEMM range is done in pieces of <= 1024 columns,
             * which keeps OpenBLAS's packed B panel cache-resident (measured
             * 138 -> 152 GFLOP/s at T=128, N=4096; GEMV does not care) */
            int per = ((N + nt - 1) / nt + 15) / 16 * 16;
            int n0 = id * per, n1 = n0 + per > N ? N : n0 + per;
            int pieces = T == 1 ? 1 : (n1 - n0 + 1023) / 1024;          /* equal pieces: no thin remainder */
            int piece = pieces > 0 ? ((n1 - n0 + pieces - 1) / pieces + 15) / 16 * 16 : 0, c;
            for (c = n0; c < n1; c += piece)
                linear_cols(out, ldo, x, ldx, w, bias, add, ld_add, T, K, c, n1 - c < piece ? n1 - c : piece);
        }
        return;
    }
#endif
    linear_cols(out, ldo, x, ldx, w, bias, add, ld_add, T, K, 0, N);
}

void ck_linear_ref(float *out, int ldo, const float *x, int ldx, const float *w,
                   const float *bias, const float *add, int ld_add, int T, int K, int N)
{
    int t, n, k;
    for (t = 0; t < T; t++)
        for (n = 0; n < N; n++) {
            double acc = 0.0;
            for (k = 0; k < K; k++) acc += (double)x[(size_t)t * ldx + k] * w[(size_t)n * K + k];
            if (bias) acc += bias[n];
            if (add) acc += add[(size_t)t * ld_add + n];
            out[(size_t)t * ldo + n] = (float)acc;
        }
}
