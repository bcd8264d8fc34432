/*
 * blas.h — the two BLAS calls the kernels make, row-major (internal to runtime/kernels).
 *
 * Built with CK_BLAS=1 (the default of the separate runtime sources; link -lopenblas) they are
 * cblas_sgemm / cblas_sgemv. Built with CK_BLAS=0 (the default of a `ckc compile --standalone`
 * file: nothing to install) they are blas.c's own blocked GEMM in plain C, which the compiler
 * vectorizes for whatever it targets (SSE2, NEON, wasm SIMD128) plus an AVX2+FMA twin of the same
 * microkernel picked at run time on x86.
 */
#ifndef CK_BLAS_H
#define CK_BLAS_H

#ifndef CK_BLAS
#define CK_BLAS 1
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* C[M][N] = alpha op(A) op(B) + beta C; op(A) is [M][K] (A stored [K][M] when trans_a), op(B) is [K][N]
 * (B stored [N][K] when trans_b); lda, ldb, ldc: row strides in floats. beta 0: C is not read. */
void ck_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
              int ldb, float beta, float *C, int ldc);
/* y[M'] = alpha op(A) x + beta y for A [M][N] (lda): op(A) = A (y has M entries, x N) or A^T (trans: y N, x M) */
void ck_sgemv(int trans, int M, int N, float alpha, const float *A, int lda, const float *x, float beta, float *y);
/* blas.c's own, whatever CK_BLAS says */
void ck_sgemm_builtin(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);
void ck_sgemv_builtin(int trans, int M, int N, float alpha, const float *A, int lda, const float *x, float beta,
                      float *y);
/* "openblas" or "builtin": what this build's ck_sgemm / ck_sgemv are */
const char *ck_blas_name(void);

/* OpenBLAS's value for an output element depends on the shape of the call that computes it (Debian's 0.3.21
 * on a Zen 3: the same column differs in the last bits between an N = 512 and an N = 1024 call, and so do rows),
 * so a kernel that splits a GEMM over its team cuts it into pieces that depend on the matrix alone, never on
 * the team, and the threads take whole pieces: the results are then the same at any thread count. A piece is
 * about len / CK_BLAS_PIECES (12: whole runs for 1, 2, 3, 4 and 6 threads), a multiple of `align`, within
 * [lo, hi]. */
#define CK_BLAS_PIECES 12
static inline long long ck_blas_piece(long long len, long long align, long long lo, long long hi)
{
    long long p = ((len + CK_BLAS_PIECES - 1) / CK_BLAS_PIECES + align - 1) / align * align;
    if (p < lo) p = lo;
    if (p > hi) p = hi;
    return p > 0 ? p : 1;
}
/* member id of a team of nt's run [*p0, *p1) of `count` pieces */
static inline void ck_blas_run(long long count, int nt, int id, long long *p0, long long *p1)
{
    *p0 = count * id / nt;
    *p1 = count * (id + 1) / nt;
}

#ifdef __cplusplus
}
#endif
#endif
