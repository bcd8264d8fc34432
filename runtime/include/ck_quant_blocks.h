/*
 * ck_quant_blocks.h — GGML's block layouts (ggml-common.h), shared by the
 * format code (io/quant.c) and the kernels that read it. Every field is a byte or a 16-bit value, so a block is
 * 2-byte aligned and tightly packed, as in the files.
 */
#ifndef CK_QUANT_BLOCKS_H
#define CK_QUANT_BLOCKS_H

#include <stdint.h>

#include "ck_quant.h"

typedef struct { uint16_t d; int8_t qs[CK_QK]; } ck_block_q8_0;                       /* 34 */
typedef struct { uint16_t d, s; int8_t qs[CK_QK]; } ck_block_q8_1;                    /* 36 */
typedef struct { uint16_t d; uint8_t qs[CK_QK / 2]; } ck_block_q4_0;                  /* 18 */
typedef struct { uint16_t d, m; uint8_t qs[CK_QK / 2]; } ck_block_q4_1;               /* 20 */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[CK_QK / 2]; } ck_block_q5_0;   /* 22 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[CK_QK / 2]; } ck_block_q5_1; /* 24 */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12]; /* 8 x (6-bit scale, 6-bit min) */
    uint8_t qs[CK_QK_K / 2];
} ck_block_q4_K; /* 144 */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[CK_QK_K / 8];
    uint8_t qs[CK_QK_K / 2];
} ck_block_q5_K; /* 176 */
typedef struct {
    uint8_t ql[CK_QK_K / 2];
    uint8_t qh[CK_QK_K / 4];
    int8_t scales[CK_QK_K / 16];
    uint16_t d;
} ck_block_q6_K; /* 210 */
typedef struct {
    float d;
    int8_t qs[CK_QK_K];
    int16_t bsums[CK_QK_K / 16];
} ck_block_q8_K; /* 292 */

#endif
