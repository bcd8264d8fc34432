/*
 * qgemm.h — the int8 prefill GEMM of qgemm.c, used by qlinear.c (internal to
 * runtime/kernels).
 */
#ifndef CK_QGEMM_H
#define CK_QGEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* T tokens of K activations quantized for one dot type (q8_0 and q8_1 share
 * theirs, or q8_K): quants [T][K] (zero rows after them up to a multiple of
 * 16 tokens: an AMX tile reads 16), the scale of every 32 [T][K / 32] (q8_K's
 * repeated), the sum of every 16 quants [T][K / 16], and q8_1's s = d sum of
 * every 32 as its block stores it (f16) [T][K / 32] */
typedef struct {
    int dot_type, T, K;
    int8_t *q;
    float *d;
    int32_t *sum16;
    float *s;
    /* the same per tile of 8 tokens, interleaved as the kernel reads them (zero past T): quants in 4-byte
     * groups [T / 8][K / 4][8][4], scales [T / 8][K / 32][8] */
    int8_t *qt;
    float *dt;
} ck_qgemm_acts;

int ck_qgemm_type(int type); /* 1 for the types qgemm multiplies */
/* the bodies of ck_qgemm_rows: all give the same results, bit for bit */
enum {
    CK_QGEMM_REF = 0,    /* the portable scalar twin */
    CK_QGEMM_VNNI = 1,   /* AVX-512 VNNI */
    CK_QGEMM_AMX = 2,    /* AMX-INT8 tiles (with AVX-512 for the float part) */
    CK_QGEMM_AMX_EMU = 3, /* the AMX body's tile program on emulated tiles (tests, any machine) */
    CK_QGEMM_AVX2 = 4,    /* AVX2: vpmaddubsw + vpmaddwd (q8_0: with vpsignb) */
    CK_QGEMM_AVXVNNI = 5  /* AVX-VNNI: vpdpbusd on ymm */
};
/* the body the CPU runs: CK_QGEMM_AMX, CK_QGEMM_VNNI, CK_QGEMM_AVXVNNI, CK_QGEMM_AVX2, or CK_QGEMM_REF */
int ck_qgemm_body(void);
int ck_qgemm_fast(void);         /* 1 when a vector body runs (and the vector quantizer of the activations) */
int ck_qgemm_takes(int type);    /* 1 when that body multiplies `type` (else qlinear.c keeps its float tiles) */
int ck_qgemm_acts_init(ck_qgemm_acts *a, int dot_type, int T, int K); /* 0, or -1 out of memory */
/* the same with the row-major arrays only (q with no padding tokens; qt, dt NULL): what the dot-product paths of
 * decode read (qlinear.c), not ck_qgemm_rows. For a decode step, the padding's memset and the tile copies were a
 * quarter of preparing its activations. */
int ck_qgemm_acts_init_rows(ck_qgemm_acts *a, int dot_type, int T, int K);
/* tokens [t0, t1) of x; `fast`: the CPU's vector quantizer (AVX-512, AVX2), else the scalar twin (identical
 * results) */
void ck_qgemm_acts_quantize(ck_qgemm_acts *a, const float *x, int ldx, int t0, int t1, int fast);
void ck_qgemm_acts_free(ck_qgemm_acts *a);
/* out[t][col0 + r] = sum_k x[t][k] W[r][k] (+ bias) (+ add) for rows [r0, r1)
 * of one matrix part `w` of `type` (bias / add indexed by output column) by
 * `body` (CK_QGEMM_*; the vector ones only where the CPU has them). 0, -1 when
 * its buffers cannot be allocated, -2 when the emulated tile program breaks a
 * rule of the hardware's (a bug, for tests to catch). */
int ck_qgemm_rows(float *out, int ldo, const ck_qgemm_acts *a, int type, const void *w, const float *bias,
                  const float *add, int ld_add, int64_t r0, int64_t r1, int64_t col0, int body);

#ifdef __cplusplus
}
#endif
#endif
