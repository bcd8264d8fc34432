/*
 * qdot4.h — the decode bodies of q4_0 / q4_1 / q5_0 / q5_1 on AVX-512 VBMI and on AVX2 / AVX-VNNI (qdot4.c),
 * used by qlinear.c (internal to runtime/kernels).
 */
#ifndef CK_QDOT4_H
#define CK_QDOT4_H

#include <stddef.h>
#include <stdint.h>

#include "ck_quant.h"
#include "qgemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* T tokens of activations in the order the bodies read them: per 128 elements (4 blocks of 32), the 4 blocks'
 * quants 0-15 then 16-31 [T][K / 128][128]; per int32 lane (16 per 128 elements) its block's scale d, q4_0's
 * offset -8 (sum of the lane's 8 quants; q5_0 doubles it) and q4_1's / q5_1's s / 4 (s = d sum of the block's quants, f16) */
typedef struct {
    int T, K;
    int8_t *q;
    float *d;
    int32_t *off;
    float *s4;
    /* per pair of groups (8 blocks), one lane per block in the order [0, 2, 4, 6, 1, 3, 5, 7]: d, the block's
     * offset -8 sum qa, and s (the AVX2 bodies' two-group step) [T][K / 256][8] */
    float *d8;
    int32_t *off8;
    float *s8;
} ck_qdot4_acts;

int ck_qdot4_type(int type); /* 1 for q4_0, q4_1, q5_0 and q5_1 */
/* 1 when ck_qdot4_rows takes this type on this CPU (AVX-512 VBMI, else AVX2: on AVX-512 without VBMI, q4_0 has
 * qlinear.c's own body), as capped by CK_KERNELS */
int ck_qdot4_takes(int type);
/* from activations quantized by qgemm.c (q8_0, or q8_1 for s); 0, or -1 out of memory */
int ck_qdot4_acts_init(ck_qdot4_acts *a, const ck_qgemm_acts *src);
/* the same from T rows of q8_0 or q8_1 blocks (dot_type), row_bytes apart (q8_0's s4: 0) */
int ck_qdot4_acts_from_blocks(ck_qdot4_acts *a, int dot_type, const void *rows, size_t row_bytes, int T, int K);
void ck_qdot4_acts_free(ck_qdot4_acts *a);
/* out[n] = W[n] . x[t] (+ bias[n]) (+ add[n]) for rows [n0, n1) of a q4_0 / q4_1 / q5_0 / q5_1 part (rows: its data,
 * row_bytes apart); act_row: token t's activations as q8_0 / q8_1 blocks, for the last K % 128 elements, which
 * tail_dot (the type's one-block dot product, ck_vec_dot_for) multiplies */
void ck_qdot4_rows(float *out, const ck_qdot4_acts *a, int t, int type, const char *rows, size_t row_bytes,
                   const void *act_row, ck_vec_dot_fn tail_dot, const float *bias, const float *add, int64_t n0,
                   int64_t n1);
/* the same for tokens t0 and t1 at once (a batch of sequences): each weight group unpacked once for both (AVX2 and
 * AVX-VNNI: every type; AVX-512 VBMI: q4_0, the others run ck_qdot4_rows for each), each token's result exactly
 * that of ck_qdot4_rows */
void ck_qdot4_rows2(float *out0, float *out1, const ck_qdot4_acts *a, int t0, int t1, int type, const char *rows,
                    size_t row_bytes, const void *act0, const void *act1, ck_vec_dot_fn tail_dot, const float *bias,
                    const float *add0, const float *add1, int64_t n0, int64_t n1);

#ifdef __cplusplus
}
#endif
#endif
