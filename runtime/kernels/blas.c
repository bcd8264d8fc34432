/*
 * blas.c — ck_sgemm / ck_sgemv (blas.h): OpenBLAS when built with CK_BLAS=1, else ckc's own.
 *
 * The own GEMM is the textbook blocking (Goto's, as in BLIS and llm.c's matmul): K in blocks of KC, for each
 * block B's columns packed 16 at a time into a contiguous [KC][16] panel (either stored layout becomes the
 * same panel), then every 4 rows of A against the panel in a 4 x 16 block of accumulators, one
 * multiply-add per accumulator per k. Written as plain loops over fixed-size arrays, the compiler keeps the
 * block in vector registers: NEON on ARM64, SIMD128 on wasm. On x86-64 the microkernel is in intrinsics:
 * 6 x 16 with AVX2+FMA, picked at run time (cpu.c), else 3 x 16 in SSE2. Each output element sums over k in order, so the result does not depend on M, N or on how the caller splits the columns
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

#ifndef CK_X86 /* (x86-64: the SSE2 and AVX2 bodies below) */
CK_GEMM_MICRO(micro_c, )
#endif

#ifdef CK_X86
#define GM_AVX2 6 /* rows of A per block on AVX2: 6 x 2 ymm accumulators, 2 for the panel's row, 1 broadcast */

/* the same for GM_AVX2 rows, in intrinsics: 12 FMAs per k on 2 loads and 6 broadcasts (what the compiler made
 * of the C above ran 40-44 GFLOP/s on one thread of a 128 x 768 x 768 GEMM on this Xeon, this 72, OpenBLAS 0.3.21 on its Haswell kernels 74) */
CK_AVX2 static void micro_avx2(float acc[GM_AVX2][GN], const float *A, ptrdiff_t rs, ptrdiff_t cs, int mr,
                               const float *P, int kc)
{
    __m256 c[GM_AVX2][2];
    int i, k;
    for (i = 0; i < GM_AVX2; i++) c[i][0] = c[i][1] = _mm256_setzero_ps();
    if (mr == GM_AVX2) {
        /* spelled out: at -O2 the compiler keeps a loop over the rows, and the accumulators in memory */
        __m256 c00 = c[0][0], c01 = c[0][1], c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
               c40 = c00, c41 = c00, c50 = c00, c51 = c00;
        for (k = 0; k < kc; k++) {
            const __m256 b0 = _mm256_loadu_ps(P + (size_t)k * GN), b1 = _mm256_loadu_ps(P + (size_t)k * GN + 8);
            const float *a = A + k * cs;
            __m256 ai;
#define CK_ROW(r, x0, x1)                     \
    ai = _mm256_broadcast_ss(a + (r) * rs); \
    x0 = _mm256_fmadd_ps(ai, b0, x0);         \
    x1 = _mm256_fmadd_ps(ai, b1, x1)
            CK_ROW(0, c00, c01);
            CK_ROW(1, c10, c11);
            CK_ROW(2, c20, c21);
            CK_ROW(3, c30, c31);
            CK_ROW(4, c40, c41);
            CK_ROW(5, c50, c51);
#undef CK_ROW
        }
        c[0][0] = c00, c[0][1] = c01, c[1][0] = c10, c[1][1] = c11, c[2][0] = c20, c[2][1] = c21;
        c[3][0] = c30, c[3][1] = c31, c[4][0] = c40, c[4][1] = c41, c[5][0] = c50, c[5][1] = c51;
    } else {
        for (i = 0; i < mr; i++) {
            __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
            for (k = 0; k < kc; k++) {
                const __m256 ai = _mm256_broadcast_ss(A + i * rs + k * cs);
                c0 = _mm256_fmadd_ps(ai, _mm256_loadu_ps(P + (size_t)k * GN), c0);
                c1 = _mm256_fmadd_ps(ai, _mm256_loadu_ps(P + (size_t)k * GN + 8), c1);
            }
            c[i][0] = c0, c[i][1] = c1;
        }
    }
    for (i = 0; i < GM_AVX2; i++) {
        _mm256_storeu_ps(acc[i], c[i][0]);
        _mm256_storeu_ps(acc[i] + 8, c[i][1]);
    }
}

#define GM_SSE2 3 /* rows of A per block with SSE2 alone: 3 x 4 xmm accumulators, 4 for the panel's row */

/* the same for GM_SSE2 rows in SSE2 (every x86-64; no FMA): 12 multiplies and adds per k on 4 loads and 3
 * broadcasts. The compiler's SSE2 code of the C above kept 16 accumulators in 16 registers and spilled. */
static void micro_sse2(float acc[GM_AVX2][GN], const float *A, ptrdiff_t rs, ptrdiff_t cs, int mr, const float *P,
                       int kc)
{
    __m128 c[GM_SSE2][4];
    int i, j, k;
    for (i = 0; i < GM_SSE2; i++)
        for (j = 0; j < 4; j++) c[i][j] = _mm_setzero_ps();
    if (mr == GM_SSE2) {
        __m128 c00 = c[0][0], c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
               c20 = c00, c21 = c00, c22 = c00, c23 = c00;
        for (k = 0; k < kc; k++) {
            const float *p = P + (size_t)k * GN, *a = A + k * cs;
            const __m128 b0 = _mm_loadu_ps(p), b1 = _mm_loadu_ps(p + 4), b2 = _mm_loadu_ps(p + 8),
                         b3 = _mm_loadu_ps(p + 12);
            __m128 ai;
#define CK_ROW(r, x0, x1, x2, x3)                     \
    ai = _mm_set1_ps(a[(r) * rs]);                  \
    x0 = _mm_add_ps(x0, _mm_mul_ps(ai, b0));        \
    x1 = _mm_add_ps(x1, _mm_mul_ps(ai, b1));        \
    x2 = _mm_add_ps(x2, _mm_mul_ps(ai, b2));        \
    x3 = _mm_add_ps(x3, _mm_mul_ps(ai, b3))
            CK_ROW(0, c00, c01, c02, c03);
            CK_ROW(1, c10, c11, c12, c13);
            CK_ROW(2, c20, c21, c22, c23);
#undef CK_ROW
        }
        c[0][0] = c00, c[0][1] = c01, c[0][2] = c02, c[0][3] = c03, c[1][0] = c10, c[1][1] = c11;
        c[1][2] = c12, c[1][3] = c13, c[2][0] = c20, c[2][1] = c21, c[2][2] = c22, c[2][3] = c23;
    } else {
        for (i = 0; i < mr; i++)
            for (k = 0; k < kc; k++) {
                const __m128 ai = _mm_set1_ps(A[i * rs + k * cs]);
                for (j = 0; j < 4; j++) c[i][j] = _mm_add_ps(c[i][j], _mm_mul_ps(ai, _mm_loadu_ps(P + (size_t)k * GN + 4 * j)));
            }
    }
    for (i = 0; i < GM_SSE2; i++)
        for (j = 0; j < 4; j++) _mm_storeu_ps(acc[i] + 4 * j, c[i][j]);
}
#define GM_MAX GM_AVX2
#else
#define GM_MAX GM
#endif

void ck_sgemm_builtin(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    float P[GK * GN], acc[GM_MAX][GN];
    const ptrdiff_t rs = trans_a ? 1 : lda, cs = trans_a ? lda : 1;
    int i, j, k0, n0, gm = GM;
#ifdef CK_X86
    const int avx2 = ck_cpu_avx2();
    gm = avx2 ? GM_AVX2 : GM_SSE2;
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
            for (i = 0; i < M; i += gm) {
                const int mr = M - i < gm ? M - i : gm;
                const float *a = A + (size_t)i * rs + (size_t)k0 * cs;
                int r;
#ifdef CK_X86
                if (avx2)
                    micro_avx2(acc, a, rs, cs, mr, P, kc);
                else
                    micro_sse2(acc, a, rs, cs, mr, P, kc);
#else
                micro_c(acc, a, rs, cs, mr, P, kc);
#endif
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
#undef GM_AVX2
#undef GM_SSE2
#undef GM_MAX
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
