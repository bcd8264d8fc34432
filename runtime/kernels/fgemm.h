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
/* columns per panel: 96 KiB of floats, L2-resident while all tokens pass (256 measured 1-2% slower) */
#define CK_FGEMM_KC 512
#define CK_FGEMM_TB 512 /* 256: 10% slower, 1024: 10% slower on the LM head's dW (50257 x 768 x 256) */
/* Activations past this many bytes run in blocks of CK_FGEMM_TB tokens x CK_FGEMM_KC columns
 * (ck_fgemm_general): rows of them past the last-level cache, a transposed A (read a token's column at a
 * time) past 8 MiB. A build may set smaller ones (the sanitizer build does, so that its tests reach the
 * blocked loops with small matrices): the results are the same either way. */
#ifndef CK_FGEMM_BLOCKED_BYTES
#define CK_FGEMM_BLOCKED_BYTES (24u << 20)
#endif
#ifndef CK_FGEMM_BLOCKED_BYTES_T
#define CK_FGEMM_BLOCKED_BYTES_T (8u << 20)
#endif

int ck_fgemm_type(int type); /* 1 for f32, f16 and bf16 */
int ck_fgemm_fast(void);     /* 1 when the AVX-512 body runs (else qlinear.c keeps its tiles into sgemm) */
/* the bodies (the `fast` argument below) */
enum {
    CK_FGEMM_REF = 0,    /* the portable scalar twin of the AVX-512 body */
    CK_FGEMM_AVX512 = 1, /* AVX-512 FMAs over float panels: the scalar twin's results bit for bit */
    CK_FGEMM_AMX = 2,    /* f16 / bf16 weights: AMX-BF16 tiles over split operands (fgemm.c), float32's
                          * accuracy to ~1e-5 of sum |x w|; other types and layouts run the AVX-512 body */
    CK_FGEMM_AMX_EMU = 3, /* the AMX body's tile program on emulated tiles (tests, any machine); others: REF */
    CK_FGEMM_AVX2 = 4     /* AVX2 FMAs over the same panels: the scalar twin's results bit for bit */
};
int ck_fgemm_body(int type); /* the body the CPU runs for a weight type: AMX, AVX512, AVX2, or REF */
/* out[t][col0 + r] = sum_k x[t][k] W[r][k] (+ bias) (+ add) for rows [r0, r1) of one matrix part `w` of
 * `type` ([rows][K] values) and tokens [0, T); `fast`: the body (CK_FGEMM_*; REF, AVX512 and AVX2 give
 * identical results). 0, -1 when the panel cannot be allocated, -2 when the emulated tiles fault. */
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
