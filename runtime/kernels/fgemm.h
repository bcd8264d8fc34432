/*
 * fgemm.h — the prefill GEMM over f32 / f16 / bf16 weights of fgemm.c, used by
 * qlinear.c (internal to runtime/kernels).
 */
#ifndef CK_FGEMM_H
#define CK_FGEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* From this many tokens on, with AVX-512, fgemm.c's FMA panel GEMM instead of OpenBLAS */
#define CK_FGEMM_MIN_T 8

int ck_fgemm_type(int type); /* 1 for f32, f16 and bf16 */
int ck_fgemm_fast(void);     /* 1 when the AVX-512 body runs (else qlinear.c keeps its tiles into sgemm) */
/* out[t][col0 + r] = sum_k x[t][k] W[r][k] (+ bias) (+ add) for rows [r0, r1) of one matrix part `w` of
 * `type` ([rows][K] values) and tokens [0, T); `fast`: the AVX-512 body, else the scalar twin
 * (identical results). 0, or -1 when the panel cannot be allocated. */
int ck_fgemm_rows(float *out, int ldo, const float *x, int ldx, int type, const void *w, const float *bias,
                  const float *add, int ld_add, int T, int K, int64_t r0, int64_t r1, int64_t col0, int fast);
/* The same with any operand layout: x[t][k] at x + t * xs_t + k * xs_k; W's (n, k) at w + n * ldw + k, or
 * w + k * ldw + n when w_kn (f32 only; -1 for another type) */
int ck_fgemm_general(float *out, int ldo, const float *x, int64_t xs_t, int64_t xs_k, int type, const void *w,
                     int64_t ldw, int w_kn, const float *bias, const float *add, int ld_add, int T, int K, int64_t r0,
                     int64_t r1, int64_t col0, int fast);

/* Few tokens (T <= 32) of f32 weights: the activations transposed once into xt[K][32] (tokens as lanes,
 * zero past T; 64-byte aligned, K * 32 floats), then rows [n0, n1) of the output from W read in place
 * (8 rows at a time). `fast`: AVX-512, else the scalar twins (identical results). */
#define CK_FGEMM_SMALL_T 32
void ck_fgemm_small_pack(float *xt, const float *x, int ldx, int T, int K, int fast);
int ck_fgemm_small(float *out, int ldo, const float *xt, const float *w, const float *bias, const float *add,
                   int ld_add, int T, int K, int64_t n0, int64_t n1, int fast);

#ifdef __cplusplus
}
#endif
#endif
