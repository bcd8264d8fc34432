/*
 * amx_tiles.h — AMX's tile configuration and an emulation of the tile
 * instructions in plain C, shared by the AMX bodies of qgemm.c (AMX-INT8,
 * TDPBSUD) and fgemm.c (AMX-BF16, TDPBF16PS); internal to runtime/kernels.
 *
 * AMX (Sapphire Rapids and later) has 8 tile registers of up to 16 rows of 64
 * bytes, shaped by a 64-byte configuration (LDTILECFG, palette 1). Each body
 * writes its tile program once as a macro over four operations (zero, load,
 * multiply-accumulate, store) and runs it on the real tiles with the
 * intrinsics, and on tile_emu with the functions below: each instruction's
 * semantics as the Intel SDM writes them, and the checks the hardware makes of
 * the configuration and the operands' shapes (a violation sets `fault`, which
 * the emulated body reports as an error). So a machine without AMX tests the
 * tiling (which rows and columns each tile holds, the padding, the strides)
 * on every run.
 */
#ifndef CK_AMX_TILES_H
#define CK_AMX_TILES_H

#include <stdint.h>
#include <string.h>

typedef struct { /* LDTILECFG's 64 bytes, palette 1 */
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* the emulated tiles */
typedef struct {
    amx_config cfg;
    int fault; /* an instruction the hardware would refuse (#UD / #GP) */
    uint8_t t[8][16][64];
} tile_emu;

static inline void emu_config(tile_emu *e, const amx_config *c)
{
    int i;
    memset(e, 0, sizeof *e);
    e->cfg = *c;
    if (c->palette_id != 1) e->fault = 1;
    for (i = 0; i < 8; i++)
        if (c->rows[i] > 16 || c->colsb[i] > 64 || (c->rows[i] == 0) != (c->colsb[i] == 0)) e->fault = 1;
}

static inline void emu_zero(tile_emu *e, int t) { memset(e->t[t], 0, sizeof e->t[t]); }

static inline void emu_load(tile_emu *e, int t, const void *base, size_t stride)
{
    int r;
    if (!e->cfg.rows[t]) e->fault = 1;
    emu_zero(e, t);
    for (r = 0; r < e->cfg.rows[t]; r++) memcpy(e->t[t][r], (const char *)base + stride * (size_t)r, e->cfg.colsb[t]);
}

static inline void emu_store(tile_emu *e, int t, void *base, size_t stride)
{
    int r;
    if (!e->cfg.rows[t]) e->fault = 1;
    for (r = 0; r < e->cfg.rows[t]; r++) memcpy((char *)base + stride * (size_t)r, e->t[t][r], e->cfg.colsb[t]);
}

/* the shapes a dot-product instruction accepts: C rows = A rows, C and B as wide, A's row holds B's rows of 4
 * bytes each */
static inline int emu_shapes_ok(const tile_emu *e, int c, int a, int b)
{
    const amx_config *f = &e->cfg;
    return f->rows[c] == f->rows[a] && f->colsb[c] == f->colsb[b] && f->colsb[a] == 4 * f->rows[b] &&
           f->colsb[a] % 4 == 0 && f->colsb[c] % 4 == 0;
}

/* TDPBSUD c, a, b: C[m][n] += sum_g sum_i int8 A[m][4 g + i] * uint8 B[g][4 n + i] */
static inline void emu_dpbsud(tile_emu *e, int c, int a, int b)
{
    const amx_config *f = &e->cfg;
    int m, n, g, i;
    if (!emu_shapes_ok(e, c, a, b)) {
        e->fault = 1;
        return;
    }
    for (m = 0; m < f->rows[c]; m++)
        for (n = 0; n < f->colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, e->t[c][m] + 4 * n, 4);
            for (g = 0; g < f->rows[b]; g++)
                for (i = 0; i < 4; i++) acc += (int32_t)(int8_t)e->t[a][m][4 * g + i] * (int32_t)e->t[b][g][4 * n + i];
            memcpy(e->t[c][m] + 4 * n, &acc, 4);
        }
}

/* bfloat16 as the AMX and AVX512_BF16 instructions see it: a denormal input is zero (DAZ), and a float result
 * that is denormal is flushed to zero (FTZ) */
static inline float amx_bf16_value(uint16_t h)
{
    const uint32_t u = (h & 0x7F80u) ? (uint32_t)h << 16 : (uint32_t)(h & 0x8000u) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float amx_ftz(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (!(u & 0x7F800000u)) u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

/* VCVTNE2PS2BF16's rounding of one float: zero and denormals to a signed zero, NaN kept quiet, else to the
 * nearest even */
static inline uint16_t amx_bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (!(u & 0x7F800000u)) return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* TDPBF16PS c, a, b: per pair g of A's row, C[m][n] += A[m][2g + 1] B[g][2n + 1], then += A[m][2g] B[g][2n]
 * (float products of two bf16 are exact; each sum rounds to nearest even, DAZ and FTZ), the SDM's order */
static inline void emu_dpbf16ps(tile_emu *e, int c, int a, int b)
{
    const amx_config *f = &e->cfg;
    int m, n, g;
    if (!emu_shapes_ok(e, c, a, b)) {
        e->fault = 1;
        return;
    }
    for (m = 0; m < f->rows[c]; m++)
        for (n = 0; n < f->colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, e->t[c][m] + 4 * n, 4);
            for (g = 0; g < f->rows[b]; g++) {
                uint16_t a0, a1, b0, b1;
                memcpy(&a0, e->t[a][m] + 4 * g, 2), memcpy(&a1, e->t[a][m] + 4 * g + 2, 2);
                memcpy(&b0, e->t[b][g] + 4 * n, 2), memcpy(&b1, e->t[b][g] + 4 * n + 2, 2);
                acc = amx_ftz(acc + amx_bf16_value(a1) * amx_bf16_value(b1));
                acc = amx_ftz(acc + amx_bf16_value(a0) * amx_bf16_value(b0));
            }
            memcpy(e->t[c][m] + 4 * n, &acc, 4);
        }
}

#endif
