/*
 * ck_quant_blocks.h — GGML's block layouts (ggml-common.h), shared by the
 * format code (io/quant.c) and the kernels that read it. Every field is a byte or a 16-bit value, so a block is
 * 2-byte aligned and tightly packed, as in the files.
 */
#ifndef CK_QUANT_BLOCKS_H
#define CK_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

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

/* The 8 (scale, min) pairs of a q4_K / q5_K super-block, unpacked from its 12 bytes of 6-bit fields
 * (llama.cpp's get_scale_min_k4, 32 bits at a time): the one unpacking every reader of these types uses. */
static inline void ck_k4_scales_mins(const uint8_t *scales12, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t u[3], s[2], m[2];
    memcpy(u, scales12, 12);
    s[0] = u[0] & 0x3f3f3f3fu;
    m[0] = u[1] & 0x3f3f3f3fu;
    s[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    m[1] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    memcpy(sc, s, 8);
    memcpy(mn, m, 8);
}

#endif
