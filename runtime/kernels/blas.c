/*
 * blas.c — ck_sgemm / ck_sgemv (blas.h): OpenBLAS when built with CK_BLAS=1, else ckc's own.
 *
 * The own GEMM is the textbook blocking (Goto's, as in BLIS and llm.c's matmul): K in blocks of KC, for each
 * block B's columns packed 16 at a time into a contiguous [KC][16] panel (either stored layout becomes the
 * same panel), then every 4 rows of A against the panel in a 4 x 16 block of accumulators, one
 * multiply-add per accumulator per k. Written as plain loops over fixed-size arrays, the compiler keeps the
 * block in vector registers: SSE2 on any x86-64, NEON on ARM64, SIMD128 on wasm. On x86 the same
 * microkernel is compiled a second time for AVX2+FMA and picked at run time (cpu.c). Each output element
 * sums over k in order, so the result does not depend on M, N or on how the caller splits the columns
 * over threads. Single-threaded: the kernels split their GEMMs over the team themselves (see threads.c).
 * Scratch is the panel on the stack (KC x 16 floats, 16 KiB): no allocation. The own GEMM is compiled in
 * either build (as ck_sgemm_builtin, so that tests compare it with a reference; scripts/bench_standalone.py times
 * the two builds).
 */
#include <stddef.h>
#include <string.h>

#include "blas.h"
#include "ck_kernels.h"
#include "ck_simd.h"


#define GM 4   /* rows of A per block */
#define GN 16  /* columns of B per panel */
#define GK 256 /* k per block: the panel is GK x GN floats */

/* P[k][j] = op(B)(k0 + k, n0 + j), zero past the matrix's n1 */
static void pack_b(float *P, const float *B, int ldb, int trans_b, int k0, int kc, int n0, int n1)
{
    int k, j, nb = n1 - n0;
    for (k = 0; k < kc; k++) {
        float *p = P + (size_t)k * GN;
        if (!trans_b) {
            memcpy(p, B + (size_t)(k0 + k) * ldb + n0, (size_t)nb * sizeof(float));
        } else {
            for (j = 0; j < nb; j++) p[j] = B[(size_t)(n0 + j) * ldb + k0 + k];
        }
        for (j = nb; j < GN; j++) p[j] = 0.0f;
    }
}

/* acc[i][j] = sum_k op(A)(i, k) P[k][j] for rows [0, mr) of A (a row i, column k at A + i * rs + k * cs) */
#define CK_GEMM_MICRO(name, attr)                                                                                   \
    attr static void name(float acc[GM][GN], const float *A, ptrdiff_t rs, ptrdiff_t cs, int mr, const float *P,   \
                          int kc)                                                                                   \
    {                                                                                                               \
        float c[GM][GN];                                                                                            \
        int i, j, k;                                                                                                \
        for (i = 0; i < GM; i++)                                                                                    \
            for (j = 0; j < GN; j++) c[i][j] = 0.0f;                                                                \
        if (mr == GM) {                                                                                             \
            for (k = 0; k < kc; k++) {                                                                              \
                const float *p = P + (size_t)k * GN, *a = A + k * cs;                                               \
                const float a0 = a[0], a1 = a[rs], a2 = a[2 * rs], a3 = a[3 * rs];                                  \
                for (j = 0; j < GN; j++) {                                                                          \
                    c[0][j] += a0 * p[j];                                                                           \
                    c[1][j] += a1 * p[j];                                                                           \
                    c[2][j] += a2 * p[j];                                                                           \
                    c[3][j] += a3 * p[j];                                                                           \
                }                                                                                                   \
            }                                                                                                       \
        } else {                                                                                                    \
            for (i = 0; i < mr; i++)                                                                                \
                for (k = 0; k < kc; k++) {                                                                          \
                    const float a = A[i * rs + k * cs], *p = P + (size_t)k * GN;                                    \
                    for (j = 0; j < GN; j++) c[i][j] += a * p[j];                                                   \
                }                                                                                                   \
        }                                                                                                           \
        memcpy(acc, c, sizeof c);                                                                                   \
    }

CK_GEMM_MICRO(micro_c, )
#ifdef CK_X86
CK_GEMM_MICRO(micro_avx2, CK_AVX2)
#endif

void ck_sgemm_builtin(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    float P[GK * GN], acc[GM][GN];
    const ptrdiff_t rs = trans_a ? 1 : lda, cs = trans_a ? lda : 1;
    int i, j, k0, n0;
#ifdef CK_X86
    const int avx2 = ck_cpu_avx2();
#endif
    if (M <= 0 || N <= 0) return;
    /* beta first, once: C = beta C (beta 0 never reads C: it may hold NaN) */
    for (i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f)
            memset(c, 0, (size_t)N * sizeof(float));
        else if (beta != 1.0f)
            for (j = 0; j < N; j++) c[j] *= beta;
    }
    if (K <= 0 || alpha == 0.0f) return;
    for (k0 = 0; k0 < K; k0 += GK) {
        const int kc = K - k0 < GK ? K - k0 : GK;
        for (n0 = 0; n0 < N; n0 += GN) {
            const int n1 = N - n0 < GN ? N : n0 + GN, nb = n1 - n0;
            pack_b(P, B, ldb, trans_b, k0, kc, n0, n1);
            for (i = 0; i < M; i += GM) {
                const int mr = M - i < GM ? M - i : GM;
                const float *a = A + (size_t)i * rs + (size_t)k0 * cs;
                int r;
#ifdef CK_X86
                if (avx2)
                    micro_avx2(acc, a, rs, cs, mr, P, kc);
                else
#endif
                    micro_c(acc, a, rs, cs, mr, P, kc);
                for (r = 0; r < mr; r++) {
                    float *c = C + (size_t)(i + r) * ldc + n0;
                    for (j = 0; j < nb; j++) c[j] += alpha * acc[r][j];
                }
            }
        }
    }
}

void ck_sgemv_builtin(int trans, int M, int N, float alpha, const float *A, int lda, const float *x, float beta,
                      float *y)
{
    int i, j;
    const int ny = trans ? N : M;
    float s[64];
    for (j = 0; j < ny; j++) y[j] = beta == 0.0f ? 0.0f : beta * y[j];
    if (alpha == 0.0f) return;
    if (!trans) {
        /* y[i] += alpha A[i] . x: ck_vdots' row dot products, 64 rows at a time */
        for (i = 0; i < M; i += 64) {
            const int nb = M - i < 64 ? M - i : 64;
            ck_vdots(s, x, A + (size_t)i * lda, (size_t)lda, nb, N);
            for (j = 0; j < nb; j++) y[i + j] += alpha * s[j];
        }
        return;
    }
    for (i = 0; i < M; i++) { /* y += (alpha x[i]) A[i] */
        const float xi = alpha * x[i], *a = A + (size_t)i * lda;
        for (j = 0; j < N; j++) y[j] += xi * a[j];
    }
}

#undef GM
#undef GN
#undef GK
#undef CK_GEMM_MICRO

#if CK_BLAS

#include <cblas.h>

void ck_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
              int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

void ck_sgemv(int trans, int M, int N, float alpha, const float *A, int lda, const float *x, float beta, float *y)
{
    cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, M, N, alpha, A, lda, x, 1, beta, y, 1);
}

const char *ck_blas_name(void) { return "openblas"; }

#else

void ck_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
              int ldb, float beta, float *C, int ldc)
{
    ck_sgemm_builtin(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void ck_sgemv(int trans, int M, int N, float alpha, const float *A, int lda, const float *x, float beta, float *y)
{
    ck_sgemv_builtin(trans, M, N, alpha, A, lda, x, beta, y);
}

const char *ck_blas_name(void) { return "builtin"; }

#endif /* CK_BLAS */
