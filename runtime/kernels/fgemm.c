/*
 * fgemm.c — float GEMMs for many tokens over weights kept as stored (f32,
 * f16, bf16): y[t][n] = sum_k x[t][k] W[n][k] (+ bias) (+ add).
 *
 * Panels (any token count; ck_linear from 8 tokens on, qlinear.c's prefill):
 * BLAS needs float32 B, so converting f16 rows first and letting OpenBLAS
 * copy them again into its packed panel, plus packing the activations once
 * per tile, cost 18% of an f16 prefill. Here the conversion is the packing:
 * 48 rows x KC columns of W become one float panel P[k][48] (16 x 16
 * in-register transposes of converted rows), and the microkernel keeps an
 * 8-token x 48-row block of y in 24 zmm accumulators, each k one multiply-add
 * per accumulator with the token's activation broadcast from memory: the
 * arithmetic is all FMAs (92-96% of this Zen 4's peak at 128 tokens), and
 * the next panel's rows are prefetched while a panel's tiles run.
 *
 * ck_fgemm_general also reads W stored [K][N] (f32: a graph's x @ W, the backward's dY @ W) and a
 * transposed A (the weight gradient dW = dY^T X): ck_matmul's GEMMs without a scale.
 *
 * Few tokens (24-32, f32 weights; ck_linear): the activations are transposed
 * once instead, tokens as lanes, and W is read in place (see below).
 *
 * Each output's sum runs over k in order, one FMA each, restarted per KC
 * columns (the panel path adds the partial sums into y), so a result does not
 * depend on the panel widths; the scalar twins do the same FMAs (fmaf) in the
 * same order and equal the AVX-512 bodies bit for bit (tested). CPUs without
 * AVX-512 keep OpenBLAS (ck_linear) and qlinear.c's tiles into sgemm.
 *
 * On AMX-BF16, f16 / bf16 weights run on tiles instead (fgemm_amx below): the
 * operands split exactly into bf16 parts, so the products are float32's and
 * only the order of the sums differs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_kernels.h"
#include "ck_quant.h"
#include "ck_simd.h"
#include "amx_tiles.h"
#include "fgemm.h"

#define NV 3        /* zmm of weight rows per panel (the last panel of a range: as few as its rows need) */
#define NR (16 * NV) /* weight rows per panel */
#define MR 8        /* tokens per microkernel block: MR x NV accumulators */
#define KC CK_FGEMM_KC
/* the workspace sizes (CK_LINEAR_WORKSPACE_BYTES) reserve CK_FGEMM_PANEL_BYTES for a thread's panel: it fits
 * (0 off x86-64, where no fgemm body runs) */
typedef char ck_fgemm_panel_fits[CK_FGEMM_PANEL_BYTES == 0 || sizeof(float) * KC * NR + 64 <= CK_FGEMM_PANEL_BYTES ? 1 : -1];

int ck_fgemm_type(int type) { return type == CK_Q_F32 || type == CK_Q_F16 || type == CK_Q_BF16; }

int ck_fgemm_fast(void) { return ck_cpu_avx512vnni(); }

int ck_fgemm_body(int type)
{
    if ((type == CK_Q_F16 || type == CK_Q_BF16) && ck_cpu_amx_bf16()) return CK_FGEMM_AMX;
    return ck_fgemm_fast() ? CK_FGEMM_AVX512 : ck_cpu_avx2() ? CK_FGEMM_AVX2 : CK_FGEMM_REF;
}

/* element i of a row of `type` */
static float elem(int type, const void *row, size_t i)
{
    if (type == CK_Q_F32) return ((const float *)row)[i];
    if (type == CK_Q_F16) return ck_fp16_to_fp32(((const uint16_t *)row)[i]);
    return ck_bf16_to_fp32(((const uint16_t *)row)[i]);
}

static size_t elem_bytes(int type) { return type == CK_Q_F32 ? 4 : 2; }

/* P[k][r] = W[r][k0 + k] for r < rows (0 past them), k < kc; W's rows ldw elements apart. kn: W is stored
 * [K][N] (f32), so the element is w[(k0 + k) * ldw + r] */
static void pack_ref(float *P, int type, const void *w, size_t ldw, int kn, int rows, int k0, int kc)
{
    int r, k;
    for (k = 0; k < kc; k++)
        for (r = 0; r < NR; r++)
            P[k * NR + r] = r >= rows ? 0.0f
                            : kn      ? ((const float *)w)[(size_t)(k0 + k) * ldw + r]
                                      : elem(type, (const char *)w + elem_bytes(type) * ldw * r, (size_t)(k0 + k));
}

typedef struct {
    float *out;
    int ldo;
    const float *bias, *add;
    int ld_add;
} dest;

/* The activations: x[t][k] at x + t * st + k * sk (st = ldx, sk = 1 for rows; st = 1, sk = ldx for a transposed
 * A, which a weight gradient dW = dY^T X reads) */
typedef struct {
    const float *x;
    int64_t st, sk;
} acts;

/* y[t][n0 + r] (+)= sum_{k < kc} x[t][k0 + k] P[k][r] for tokens [t0, t0 + mr); `first`: the panel of k0 = 0
 * starts from the bias and the residual, later panels from what is stored */
static void tile_ref(const float *P, const acts *x, int k0, int kc, int t0, int mr, int n0, int rows, const dest *o,
                     int first)
{
    int i, r, k;
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        float acc[NR];
        float *y = o->out + (size_t)t * o->ldo + n0;
        for (r = 0; r < NR; r++) acc[r] = 0.0f;
        for (k = 0; k < kc; k++) {
            const float a = x->x[t * x->st + (int64_t)(k0 + k) * x->sk];
            for (r = 0; r < NR; r++) acc[r] = fmaf(a, P[k * NR + r], acc[r]);
        }
        for (r = 0; r < rows; r++) {
            float v = acc[r];
            if (first) {
                if (o->bias) v += o->bias[n0 + r];
                if (o->add) v += o->add[(size_t)t * o->ld_add + n0 + r];
            } else {
                v += y[r];
            }
            y[r] = v;
        }
    }
}

#ifdef CK_X86
#define CK_AVX512F __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

/* 16 rows x 16 columns of W converted, transposed into P[k][c0 .. c0 + 15] */
CK_AVX512F static inline void pack16x16(float *P, size_t nr, int type, const void *w, size_t ldw, int rows, int k0,
                                        int c0)
{
    __m512 m[16];
    int r;
    for (r = 0; r < 16; r++) {
        if (r >= rows) {
            m[r] = _mm512_setzero_ps();
            continue;
        }
        if (type == CK_Q_F32) {
            m[r] = _mm512_loadu_ps((const float *)w + (size_t)r * ldw + k0);
        } else {
            const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + (size_t)r * ldw + k0));
            m[r] = type == CK_Q_F16 ? _mm512_cvtph_ps(h)
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
    }
    ck_transpose16(m);
    for (r = 0; r < 16; r++) _mm512_store_ps(P + (size_t)r * nr + c0, m[r]);
}

/* P[k][r] for a panel of nr = 16 nv rows (P's rows nr floats apart) */
CK_AVX512F static void pack_avx512(float *P, int nv, int type, const void *w, size_t ldw, int kn, int rows, int k0,
                                   int kc)
{
    const size_t nr = (size_t)16 * nv;
    int k, c, r, j;
    if (kn) { /* W stored [K][N]: each k's panel row is a piece of one row of W */
        for (k = 0; k < kc; k++)
            for (c = 0; c < (int)nr; c += 16) {
                const int left = rows - c;
                const __mmask16 m = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1u : 0u);
                _mm512_store_ps(P + (size_t)k * nr + c,
                                _mm512_maskz_loadu_ps(m, (const float *)w + (size_t)(k0 + k) * ldw + c));
            }
        return;
    }
    for (k = 0; k + 16 <= kc; k += 16)
        for (c = 0; c < (int)nr; c += 16)
            pack16x16(P + (size_t)k * nr, nr, type, (const char *)w + elem_bytes(type) * ldw * c, ldw, rows - c, k0 + k, c);
    for (j = k; j < kc; j++) /* a last part of the row under 16 columns */
        for (r = 0; r < (int)nr; r++)
            P[j * nr + r] = r < rows ? elem(type, (const char *)w + elem_bytes(type) * ldw * r, (size_t)(k0 + j)) : 0.0f;
}

/* sk1: the activations are rows (x->sk == 1, the inner loop steps one float); else a transposed A (x->st == 1) */
CK_AVX512F static inline __attribute__((always_inline)) void tile_avx512_n(const float *P, const acts *x, int k0,
                                                                           int kc, int t0, int mr, int n0, int rows,
                                                                           const dest *o, int first, const int nv,
                                                                           const int sk1)
{
    __m512 acc[MR][NV];
    const float *xr[MR];
    __mmask16 m[NV];
    const size_t nr = (size_t)16 * nv;
    const int64_t sk = sk1 ? 1 : x->sk;
    int i, k, v;
    for (v = 0; v < nv; v++) {
        const int left = rows - 16 * v;
        m[v] = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1u : 0u);
    }
    for (i = 0; i < MR; i++) {
        for (v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
        /* rows past the last token repeat the first */
        xr[i] = x->x + (t0 + (i < mr ? i : 0)) * x->st + (int64_t)k0 * sk;
    }
    for (k = 0; k < kc; k++) {
        __m512 p[NV];
        for (v = 0; v < nv; v++) p[v] = _mm512_load_ps(P + (size_t)k * nr + 16 * v);
        for (i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(xr[i][(int64_t)k * sk]);
            for (v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(a, p[v], acc[i][v]);
        }
    }
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        float *y = o->out + (size_t)t * o->ldo + n0;
        for (v = 0; v < nv; v++) {
            __m512 r = acc[i][v];
            if (first) {
                if (o->bias) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], o->bias + n0 + 16 * v));
                if (o->add) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], o->add + (size_t)t * o->ld_add + n0 + 16 * v));
            } else {
                r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], y + 16 * v));
            }
            _mm512_mask_storeu_ps(y + 16 * v, m[v], r);
        }
    }
}

/* a tile of up to MR tokens: the full-height body for any mr (rows past the last token computed, not
 * stored: one body instead of one per token count), 1-3 zmm of panel rows */
CK_AVX512F static void tile_avx512(const float *P, int nv, const acts *x, int k0, int kc, int t0, int mr, int n0,
                                   int rows, const dest *o, int first)
{
    if (x->sk != 1) {
        switch (nv) {
        case 3: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 3, 0); break;
        case 2: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 2, 0); break;
        default: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 1, 0); break;
        }
        return;
    }
    switch (nv) {
    case 3: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 3, 1); break;
    case 2: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 2, 1); break;
    default: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 1, 1); break;
    }
}
#endif

#ifdef CK_X86
/* ---- the same on AVX2 (CK_FGEMM_AVX2) --------------------------------------------------------------------
 * The panel as the AVX-512 body's (P[k][16 nv], packed by 8 x 8 transposes), and a microkernel of 4 tokens x
 * 24 rows: 12 ymm accumulators, 3 of the panel and a broadcast fill the 16 registers. Each output's sum is the
 * same FMAs in the same order, so the results are the scalar twin's bit for bit. Only qlinear.c's prefill of
 * f16 / bf16 / f32 parts takes it (ck_fgemm_body): on an AVX2 CPU it converted 64-row tiles into OpenBLAS's
 * sgemm: 1.1B f16 prefill at CK_KERNELS=avx2-vnni, 2 threads, 0.95x llama.cpp's built at that level, now 1.01x
 * (AMD EPYC Zen 5 VM, Nov 28 2026). */
#define CK_AVX2F __attribute__((target("avx2,fma,f16c")))

/* 8 rows x 8 columns of W converted, transposed into P[k][c0 .. c0 + 7] */
CK_AVX2F static inline void pack8x8(float *P, size_t nr, int type, const void *w, size_t ldw, int rows, int k0, int c0)
{
    __m256 m[8];
    int r;
    for (r = 0; r < 8; r++) {
        if (r >= rows) {
            m[r] = _mm256_setzero_ps();
            continue;
        }
        if (type == CK_Q_F32) {
            m[r] = _mm256_loadu_ps((const float *)w + (size_t)r * ldw + k0);
        } else {
            const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + (size_t)r * ldw + k0));
            m[r] = type == CK_Q_F16 ? _mm256_cvtph_ps(h)
                                    : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
    }
    ck_transpose8(m);
    for (r = 0; r < 8; r++) _mm256_store_ps(P + (size_t)r * nr + c0, m[r]);
}

CK_AVX2F static void pack_avx2(float *P, int nv, int type, const void *w, size_t ldw, int kn, int rows, int k0, int kc)
{
    const size_t nr = (size_t)16 * nv;
    int k, c, r, j;
    if (kn) { /* W stored [K][N] (f32) */
        for (k = 0; k < kc; k++)
            for (r = 0; r < (int)nr; r++) P[(size_t)k * nr + r] = r < rows ? ((const float *)w)[(size_t)(k0 + k) * ldw + r] : 0.0f;
        return;
    }
    for (k = 0; k + 8 <= kc; k += 8)
        for (c = 0; c < (int)nr; c += 8)
            pack8x8(P + (size_t)k * nr, nr, type, (const char *)w + elem_bytes(type) * ldw * c, ldw, rows - c, k0 + k, c);
    for (j = k; j < kc; j++) /* a last part of the row under 8 columns */
        for (r = 0; r < (int)nr; r++)
            P[j * nr + r] = r < rows ? elem(type, (const char *)w + elem_bytes(type) * ldw * r, (size_t)(k0 + j)) : 0.0f;
}

/* tokens [t0, t0 + mr) (mr <= 4; rows past the last token repeat the first) x the panel's rows [c0, c0 + 8 nw) */
CK_AVX2F static inline __attribute__((always_inline)) void tile_avx2_n(const float *P, size_t nr, const acts *x, int k0,
                                                                       int kc, int t0, int mr, int n0, int rows,
                                                                       const dest *o, int first, int c0, const int nw,
                                                                       const int sk1)
{
    __m256 acc[4][3], res[4][3]; /* (res: the epilogue's copy, so that acc is only indexed by constants and GCC
                                   * keeps it in registers, not stored to the stack every k) */
    const float *xr[4];
    const int64_t sk = sk1 ? 1 : x->sk;
    int i, k, v;
    for (i = 0; i < 4; i++) {
        for (v = 0; v < nw; v++) acc[i][v] = _mm256_setzero_ps();
        xr[i] = x->x + (t0 + (i < mr ? i : 0)) * x->st + (int64_t)k0 * sk;
    }
    for (k = 0; k < kc; k++) {
        __m256 p[3];
        for (v = 0; v < nw; v++) p[v] = _mm256_load_ps(P + (size_t)k * nr + c0 + 8 * v);
        for (i = 0; i < 4; i++) {
            const __m256 a = _mm256_broadcast_ss(xr[i] + (int64_t)k * sk);
            for (v = 0; v < nw; v++) acc[i][v] = _mm256_fmadd_ps(a, p[v], acc[i][v]);
        }
    }
    for (i = 0; i < 4; i++)
        for (v = 0; v < nw; v++) res[i][v] = acc[i][v];
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        float *y = o->out + (size_t)t * o->ldo + n0;
        for (v = 0; v < nw; v++) {
            const int c = c0 + 8 * v, left = rows - c;
            if (left >= 8) { /* as tile_ref: the sum, + bias, + residual (or + what is stored) */
                __m256 r = res[i][v];
                if (first) {
                    if (o->bias) r = _mm256_add_ps(r, _mm256_loadu_ps(o->bias + n0 + c));
                    if (o->add) r = _mm256_add_ps(r, _mm256_loadu_ps(o->add + (size_t)t * o->ld_add + n0 + c));
                } else {
                    r = _mm256_add_ps(r, _mm256_loadu_ps(y + c));
                }
                _mm256_storeu_ps(y + c, r);
            } else if (left > 0) {
                float a8[8];
                int e;
                _mm256_storeu_ps(a8, res[i][v]);
                for (e = 0; e < left; e++) {
                    float u = a8[e];
                    if (first) {
                        if (o->bias) u += o->bias[n0 + c + e];
                        if (o->add) u += o->add[(size_t)t * o->ld_add + n0 + c + e];
                    } else {
                        u += y[c + e];
                    }
                    y[c + e] = u;
                }
            }
        }
    }
}

/* a tile of up to MR tokens (4 at a time) x the panel's 16 nv rows (24 at a time) */
CK_AVX2F static void tile_avx2(const float *P, int nv, const acts *x, int k0, int kc, int t0, int mr, int n0, int rows,
                               const dest *o, int first)
{
    const size_t nr = (size_t)16 * nv;
    int t, c0;
    for (t = t0; t < t0 + mr; t += 4) {
        const int m4 = t0 + mr - t < 4 ? t0 + mr - t : 4;
        for (c0 = 0; c0 < (int)nr && c0 < rows; c0 += 24) {
            const int nw = (int)nr - c0 >= 24 ? 3 : ((int)nr - c0) / 8;
            if (x->sk != 1) {
                switch (nw) {
                case 3: tile_avx2_n(P, nr, x, k0, kc, t, m4, n0, rows, o, first, c0, 3, 0); break;
                case 2: tile_avx2_n(P, nr, x, k0, kc, t, m4, n0, rows, o, first, c0, 2, 0); break;
                default: tile_avx2_n(P, nr, x, k0, kc, t, m4, n0, rows, o, first, c0, 1, 0); break;
                }
                continue;
            }
            switch (nw) {
            case 3: tile_avx2_n(P, nr, x, k0, kc, t, m4, n0, rows, o, first, c0, 3, 1); break;
            case 2: tile_avx2_n(P, nr, x, k0, kc, t, m4, n0, rows, o, first, c0, 2, 1); break;
            default: tile_avx2_n(P, nr, x, k0, kc, t, m4, n0, rows, o, first, c0, 1, 1); break;
            }
        }
    }
}
#endif

/* ---- AMX-BF16 tiles: f16 / bf16 weights ---------------------------------------------------------------
 * TDPBF16PS C += A B takes A as bf16 [16 tokens][32 k], B as bf16 [16 pairs][16 rows x 2] (row g of B holds the
 * pair k = 2g, 2g + 1 of each of 16 weight rows: 16 rows of W viewed as 32-bit pairs, transposed) and C as float
 * [16 tokens][16 rows]; the product of two bf16 is exact in float and every sum rounds to nearest.
 *
 * bf16 keeps 8 significant bits, float 24. So that the tiles compute float32's products and not bf16's
 * (rounding the activations alone costs up to 2^-8 of every product: logits ~1e-3 off), the operands are split
 * exactly: an activation x = hi + mid + lo (three bf16 of 8 bits each, rounded to nearest in turn: each residual
 * has at most 16, then 8 significant bits), an f16 weight w = hi + lo (its 11 bits), a bf16 weight as it is. Per
 * 32 k and 16 rows, smallest first:
 *   bf16 weights  C += A_lo W + A_mid W + A_hi W
 *   f16 weights   C += A_lo W_hi + A_mid W_hi + A_hi W_hi + A_mid W_lo + A_hi W_lo
 * (the A_lo W_lo left out is under 2^-24 of the product). So an output differs from the FMA body's only by the
 * order and rounding of float sums, as two BLAS do (tested: within 2e-6 of sum |x w|, as the FMA body is).
 * That is 3 or 5 tile products where bf16 would take one; TDPBF16PS does 512 multiply-adds a cycle, 16x an
 * AVX-512 core's FMAs.
 *
 * Layout: the activations of up to FAMX_TB tokens are split once per call into A_hi / A_mid / A_lo
 * [tokens][kp] (kp: K rounded up to 32, zero past K and past the last token to a multiple of 16); the weights
 * are packed per panel (48 rows x KC columns, as the FMA body's) into B tiles of 1 KiB, [k tile][row block], hi
 * and (f16) lo. Tiles 0-2: C of the panel's three row blocks; 3-5: A_hi, A_mid, A_lo; 6, 7: B_hi, B_lo. After a
 * panel's k tiles the three C are stored and added into y as the FMA body adds a panel's sums (the bias and
 * residual with the first). The tile program (FAMX_TILE) runs on the real tiles, and on emulated ones
 * (amx_tiles.h) in the tests of every machine; the splitting and packing have a scalar and an AVX512_BF16 body
 * with the same rounding (VCVTNE2PS2BF16's), equal bit for bit. */
#define FAMX_TB 256 /* tokens whose activations are split at a time: 3 x 256 x K bf16 */
#define TM 16       /* tokens per tile */
#define KT 32       /* k per tile */

typedef struct {
    const uint16_t *hi, *mid, *lo; /* [tokens][kp] */
    size_t kp;
} famx_acts;

/* v as a bf16 part (VCVTNE2PS2BF16's rounding) and what is left of it (0 when v is infinite or NaN: the part
 * carries it) */
static uint16_t famx_part(float v, float *rest)
{
    const uint16_t h = amx_bf16_of(v);
    const float d = v - amx_bf16_value(h);
    *rest = d == d ? d : 0.0f;
    return h;
}

/* one f16 / bf16 weight as hi (+ lo) */
static void famx_split_w(int type, uint16_t v, uint16_t *hi, uint16_t *lo)
{
    float rest;
    if (type == CK_Q_BF16) {
        *hi = v, *lo = 0;
        return;
    }
    *hi = famx_part(ck_fp16_to_fp32(v), &rest);
    *lo = amx_bf16_of(rest);
}

/* tokens [t0, t1) of x into A's three parts (rows from 0; zero past K and from t1 - t0 to a multiple of TM) */
static void famx_acts_ref(uint16_t *hi, uint16_t *mid, uint16_t *lo, size_t kp, const float *x, int64_t ldx, int t0,
                          int t1, int K)
{
    const int rows = (t1 - t0 + TM - 1) / TM * TM;
    int i;
    size_t k;
    for (i = 0; i < rows; i++)
        for (k = 0; k < kp; k++) {
            const size_t at = (size_t)i * kp + k;
            float r1 = 0.0f, r2 = 0.0f;
            hi[at] = famx_part(i < t1 - t0 && k < (size_t)K ? x[(int64_t)(t0 + i) * ldx + (int64_t)k] : 0.0f, &r1);
            mid[at] = famx_part(r1, &r2);
            lo[at] = amx_bf16_of(r2);
        }
}

/* rows [0, rows) x columns [k0, k0 + kc) of W into nv row blocks of B tiles: Bh[(kk nv + v) 512 + 32 g + 2 n + i]
 * = W[16 v + n][k0 + 32 kk + 2 g + i] (zero past the rows and columns); Bl likewise with the lo parts (f16) */
static void famx_pack_ref(uint16_t *Bh, uint16_t *Bl, int type, const void *w, size_t ldw, int rows, int nv, int k0,
                          int kc)
{
    const int nk = (kc + KT - 1) / KT;
    int kk, v, g, n, i;
    for (kk = 0; kk < nk; kk++)
        for (v = 0; v < nv; v++)
            for (g = 0; g < 16; g++)
                for (n = 0; n < 16; n++)
                    for (i = 0; i < 2; i++) {
                        const int r = 16 * v + n, k = KT * kk + 2 * g + i;
                        const size_t at = (size_t)(kk * nv + v) * 512 + 32 * g + 2 * n + i;
                        uint16_t h = 0, l = 0;
                        if (r < rows && k < kc) famx_split_w(type, ((const uint16_t *)w)[(size_t)r * ldw + k0 + k], &h, &l);
                        Bh[at] = h;
                        if (Bl) Bl[at] = l;
                    }
}

static void famx_config(amx_config *c)
{
    int i;
    memset(c, 0, sizeof *c);
    c->palette_id = 1;
    for (i = 0; i < 8; i++) c->rows[i] = 16, c->colsb[i] = 64; /* every tile 16 x 64 bytes (see above) */
}

/* the tile program of one panel x 16 tokens over nk k tiles: c[TM][NR] = A B (the tiles named above; the
 * real one passes the intrinsics, the emulated one FEMU_*; tile numbers are immediates, hence no loop over v) */
#define FAMX_BLOCK(V, LOAD, DP)                                                     \
    do {                                                                            \
        LOAD(6, Bh + (size_t)(kk * nv + (V)) * 512, 64);                            \
        DP(V, 5, 6);                                                                \
        DP(V, 4, 6);                                                                \
        DP(V, 3, 6);                                                                \
        if (Bl) {                                                                   \
            LOAD(7, Bl + (size_t)(kk * nv + (V)) * 512, 64);                        \
            DP(V, 4, 7);                                                            \
            DP(V, 3, 7);                                                            \
        }                                                                           \
    } while (0)
#define FAMX_TILE(ZERO, LOAD, DP, STORE)                                            \
    do {                                                                            \
        const size_t a0 = (size_t)ti * A->kp + k0;                                  \
        int kk;                                                                     \
        ZERO(0);                                                                    \
        if (nv > 1) ZERO(1);                                                        \
        if (nv > 2) ZERO(2);                                                        \
        for (kk = 0; kk < nk; kk++) {                                               \
            LOAD(3, A->hi + a0 + (size_t)KT * kk, A->kp * 2);                       \
            LOAD(4, A->mid + a0 + (size_t)KT * kk, A->kp * 2);                      \
            LOAD(5, A->lo + a0 + (size_t)KT * kk, A->kp * 2);                       \
            FAMX_BLOCK(0, LOAD, DP);                                                \
            if (nv > 1) FAMX_BLOCK(1, LOAD, DP);                                    \
            if (nv > 2) FAMX_BLOCK(2, LOAD, DP);                                    \
        }                                                                           \
        STORE(0, c, NR * 4);                                                        \
        if (nv > 1) STORE(1, c[0] + 16, NR * 4);                                    \
        if (nv > 2) STORE(2, c[0] + 32, NR * 4);                                    \
    } while (0)
#define FEMU_ZERO(t) emu_zero(&e, t)
#define FEMU_LOAD(t, base, stride) emu_load(&e, t, base, stride)
#define FEMU_DP(cc, aa, bb) emu_dpbf16ps(&e, cc, aa, bb)
#define FEMU_STORE(t, base, stride) emu_store(&e, t, base, stride)

/* y[t0 + i][n0 + r] (+)= c[i][r] for i < mr, r < rows, as tile_ref adds a panel's sums */
static void famx_add_ref(float c[TM][NR], int t0, int mr, int n0, int rows, const dest *o, int first)
{
    int i, r;
    for (i = 0; i < mr; i++) {
        float *y = o->out + (size_t)(t0 + i) * o->ldo + n0;
        for (r = 0; r < rows; r++) {
            float v = c[i][r];
            if (first) {
                if (o->bias) v += o->bias[n0 + r];
                if (o->add) v += o->add[(size_t)(t0 + i) * o->ld_add + n0 + r];
            } else {
                v += y[r];
            }
            y[r] = v;
        }
    }
}

/* the emulated tiles of one panel x up to 16 tokens (ti: the tokens' row in A); 0, or -1 on a fault */
static int famx_tile_emu(const uint16_t *Bh, const uint16_t *Bl, int nv, int nk, const famx_acts *A, int ti, int k0,
                         int t0, int mr, int n0, int rows, const dest *o)
{
    tile_emu e; /* 8 KiB of stack: the emulation runs in tests */
    amx_config cfg;
    float c[TM][NR];
    famx_config(&cfg);
    emu_config(&e, &cfg);
    memset(c, 0, sizeof c);
    FAMX_TILE(FEMU_ZERO, FEMU_LOAD, FEMU_DP, FEMU_STORE);
    if (e.fault) return -1;
    famx_add_ref(c, t0, mr, n0, rows, o, k0 == 0);
    return 0;
}

#ifdef CK_X86
#define CK_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c")))
#define CK_AMX_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c,amx-tile,amx-bf16")))

/* 32 floats (f0: the first 16) as bf16 parts and what is left of them (famx_part's rounding: VCVTNE2PS2BF16) */
CK_AVX512_BF16 static inline __m512i famx_part32(__m512 f0, __m512 f1, __m512 *r0, __m512 *r1)
{
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
    const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
    const __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
    const __m512 d0 = _mm512_sub_ps(f0, h0), d1 = _mm512_sub_ps(f1, h1);
    *r0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d0, d0, _CMP_ORD_Q), d0); /* infinity or NaN: the part carries it */
    *r1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d1, d1, _CMP_ORD_Q), d1);
    return h;
}

static inline __mmask16 famx_mask16(int left)
{
    return (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1u : 0u);
}

CK_AVX512_BF16 static void famx_acts_512(uint16_t *hi, uint16_t *mid, uint16_t *lo, size_t kp, const float *x,
                                         int64_t ldx, int t0, int t1, int K)
{
    const int rows = (t1 - t0 + TM - 1) / TM * TM;
    int i;
    size_t k;
    for (i = 0; i < rows; i++)
        for (k = 0; k < kp; k += 32) {
            const float *xr = x + (int64_t)(t0 + i) * ldx + (int64_t)k;
            const int in = i < t1 - t0;
            const size_t at = (size_t)i * kp + k;
            __m512 r0, r1, e0, e1;
            _mm512_storeu_si512((void *)(hi + at), famx_part32(_mm512_maskz_loadu_ps(in ? famx_mask16(K - (int)k) : 0, xr),
                                                               _mm512_maskz_loadu_ps(in ? famx_mask16(K - (int)k - 16) : 0, xr + 16),
                                                               &r0, &r1));
            _mm512_storeu_si512((void *)(mid + at), famx_part32(r0, r1, &e0, &e1));
            _mm512_storeu_si512((void *)(lo + at), (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
        }
}

CK_AVX512_BF16 static void famx_pack_512(uint16_t *Bh, uint16_t *Bl, int type, const void *w, size_t ldw,
                                         int rows, int nv, int k0, int kc)
{
    const int nk = (kc + KT - 1) / KT;
    int kk, v, n, g;
    for (kk = 0; kk < nk; kk++) {
        const int left = kc - KT * kk;
        const __mmask32 km = left >= 32 ? 0xFFFFFFFFu : (1u << left) - 1u;
        for (v = 0; v < nv; v++) {
            __m512 mh[16], ml[16];
            for (n = 0; n < 16; n++) {
                const int r = 16 * v + n;
                const __m512i raw = _mm512_maskz_loadu_epi16(r < rows ? km : 0,
                                                             (const uint16_t *)w + (size_t)r * ldw + k0 + KT * kk);
                if (type == CK_Q_BF16) {
                    mh[n] = _mm512_castsi512_ps(raw);
                    continue;
                }
                __m512 r0, r1;
                mh[n] = _mm512_castsi512_ps(famx_part32(_mm512_cvtph_ps(_mm512_castsi512_si256(raw)),
                                                        _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1)), &r0, &r1));
                ml[n] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(r1, r0));
            }
            ck_transpose16(mh); /* row g: the pair g of each of the 16 rows */
            for (g = 0; g < 16; g++) _mm512_store_ps((float *)(Bh + (size_t)(kk * nv + v) * 512 + 32 * g), mh[g]);
            if (!Bl) continue;
            ck_transpose16(ml);
            for (g = 0; g < 16; g++) _mm512_store_ps((float *)(Bl + (size_t)(kk * nv + v) * 512 + 32 * g), ml[g]);
        }
    }
}

CK_AVX512_BF16 static void famx_add_512(float c[TM][NR], int t0, int mr, int n0, int rows, const dest *o, int first)
{
    int i, v;
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        float *y = o->out + (size_t)t * o->ldo + n0;
        for (v = 0; v * 16 < rows; v++) {
            const __mmask16 m = famx_mask16(rows - 16 * v);
            __m512 r = _mm512_loadu_ps(c[i] + 16 * v);
            if (first) {
                if (o->bias) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, o->bias + n0 + 16 * v));
                if (o->add) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, o->add + (size_t)t * o->ld_add + n0 + 16 * v));
            } else {
                r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, y + 16 * v));
            }
            _mm512_mask_storeu_ps(y + 16 * v, m, r);
        }
    }
}

/* the real tiles (configured by the caller) */
CK_AMX_BF16 static void famx_tile(const uint16_t *Bh, const uint16_t *Bl, int nv, int nk, const famx_acts *A, int ti,
                                  int k0, int t0, int mr, int n0, int rows, const dest *o)
{
    float c[TM][NR] __attribute__((aligned(64)));
    FAMX_TILE(_tile_zero, _tile_loadd, _tile_dpbf16ps, _tile_stored);
    famx_add_512(c, t0, mr, n0, rows, o, k0 == 0);
}

CK_AMX_BF16 static void famx_begin(void)
{
    amx_config cfg;
    famx_config(&cfg);
    _tile_loadconfig(&cfg);
}

CK_AMX_BF16 static void famx_end(void) { _tile_release(); }
#endif

/* ck_fgemm_general on tiles (body CK_FGEMM_AMX or CK_FGEMM_AMX_EMU; f16 / bf16 W as [N][K], x as rows):
 * 0, -1 when memory runs out, -2 when the emulated tile program breaks a rule of the hardware's */
static int fgemm_amx(float *out, int ldo, const float *x, int64_t ldx, int type, const void *w, int64_t ldw,
                     const float *bias, const float *add, int ld_add, int T, int K, int64_t r0, int64_t r1,
                     int64_t col0, int body)
{
    const size_t kp = (size_t)(K + KT - 1) / KT * KT, tb_max = (size_t)(T < FAMX_TB ? T : FAMX_TB);
    const size_t tile_elems = (size_t)(KC / KT) * 3 * 512, mark = ck_ws_mark();
    /* the AVX-512 splitting and packing wherever the CPU has AVX512_BF16, the emulated tiles too (so the
     * tests of a machine with it run them; their results equal the scalar ones bit for bit) */
    const int real = body == CK_FGEMM_AMX, simd = real || ck_cpu_avx512bf16();
    const size_t a_elems = kp * ((tb_max + TM - 1) / TM * TM);
    uint16_t *ah = (uint16_t *)ck_ws_alloc(3 * sizeof(uint16_t) * a_elems);
    uint16_t *Bh = (uint16_t *)ck_ws_alloc(sizeof(uint16_t) * tile_elems * 2 + 64);
    int tb, rc = 0;
    dest o;
    if (!ah || !Bh) {
        ck_ws_free(Bh), ck_ws_free(ah);
        ck_ws_reset(mark);
        return -1;
    }
    {
        uint16_t *const B0 = (uint16_t *)((char *)Bh + (64 - (uintptr_t)Bh % 64) % 64); /* 64-byte aligned */
        uint16_t *const Bl = type == CK_Q_F16 ? B0 + tile_elems : NULL;
        famx_acts A;
        (void)real, (void)simd; /* (no real tiles off x86-64) */
        A.hi = ah, A.mid = ah + a_elems, A.lo = ah + 2 * a_elems, A.kp = kp;
        o.out = out, o.ldo = ldo, o.bias = bias, o.add = add, o.ld_add = ld_add;
#ifdef CK_X86
        if (real) famx_begin();
#endif
        for (tb = 0; tb < T && !rc; tb += FAMX_TB) {
            const int te = T - tb < FAMX_TB ? T : tb + FAMX_TB;
            int64_t g;
#ifdef CK_X86
            if (simd)
                famx_acts_512((uint16_t *)A.hi, (uint16_t *)A.mid, (uint16_t *)A.lo, kp, x, ldx, tb, te, K);
            else
#endif
                famx_acts_ref((uint16_t *)A.hi, (uint16_t *)A.mid, (uint16_t *)A.lo, kp, x, ldx, tb, te, K);
            for (g = r0; g < r1 && !rc; g += NR) {
                const int rows = (int)(r1 - g < NR ? r1 - g : NR), nv = (rows + 15) / 16;
                const uint16_t *wg = (const uint16_t *)w + (size_t)g * (size_t)ldw;
                int k0;
                for (k0 = 0; k0 < K && !rc; k0 += KC) {
                    const int kc = K - k0 < KC ? K - k0 : KC, nk = (kc + KT - 1) / KT;
                    int t;
#ifdef CK_X86
                    if (real) {
                        famx_pack_512(B0, Bl, type, wg, (size_t)ldw, rows, nv, k0, kc);
                        for (t = tb; t < te; t += TM)
                            famx_tile(B0, Bl, nv, nk, &A, t - tb, k0, t, te - t < TM ? te - t : TM, (int)(col0 + g),
                                      rows, &o);
                        continue;
                    }
                    if (simd)
                        famx_pack_512(B0, Bl, type, wg, (size_t)ldw, rows, nv, k0, kc);
                    else
#endif
                        famx_pack_ref(B0, Bl, type, wg, (size_t)ldw, rows, nv, k0, kc);
                    for (t = tb; t < te && !rc; t += TM)
                        rc = famx_tile_emu(B0, Bl, nv, nk, &A, t - tb, k0, t, te - t < TM ? te - t : TM,
                                           (int)(col0 + g), rows, &o) ? -2 : 0;
                }
            }
        }
#ifdef CK_X86
        if (real) famx_end();
#endif
    }
    ck_ws_free(Bh), ck_ws_free(ah);
    ck_ws_reset(mark);
    return rc;
}

/* the rows of the panel starting `left` rows before the end of a range: 48; the last 64 as two of 32
 * rather than 48 + 16 (a 16-row panel pays a broadcast per multiply-add). The results do not depend on it. */
static int panel_width(int64_t left) { return (left + 15) / 16 == 4 ? 32 : NR; }

int ck_fgemm_rows(float *out, int ldo, const float *x, int ldx, int type, const void *w, const float *bias,
                  const float *add, int ld_add, int T, int K, int64_t r0, int64_t r1, int64_t col0, int fast)
{
    return ck_fgemm_general(out, ldo, x, ldx, 1, type, w, K, 0, bias, add, ld_add, T, K, r0, r1, col0, fast);
}

/* One KC block of one panel: pack rows [g, g + rows) x columns [k0, k0 + kc) of W, then run the token tiles
 * of [t0, T) over it. `next_*`: the panel the caller runs next (its rows prefetched while the tiles run; none: 0 rows). */
static void panel_block(float *P, int type, const void *w, int64_t ldw, int w_kn, int64_t g, int rows, int k0, int kc,
                        const acts *xa, int t0, int T, int n0, const dest *o, int fast, int64_t next_g, int next_k,
                        int next_rows, int K)
{
    const char *wg = (const char *)w + elem_bytes(type) * (w_kn ? (size_t)g : (size_t)g * ldw);
    int t;
#ifdef CK_X86
    if (fast) {
        const int nv = (rows + 15) / 16; /* a panel only as wide as its rows */
        const int next_bytes = (int)elem_bytes(type) * (K - next_k < KC ? K - next_k : KC);
        const int per_tile = (next_rows + (T - t0 + MR - 1) / MR - 1) / ((T - t0 + MR - 1) / MR);
        int pr = 0;
        if (fast == CK_FGEMM_AVX2)
            pack_avx2(P, nv, type, wg, (size_t)ldw, w_kn, rows, k0, kc);
        else
            pack_avx512(P, nv, type, wg, (size_t)ldw, w_kn, rows, k0, kc);
        for (t = t0; t < T; t += MR) {
            int e;
            for (e = 0; e < per_tile && pr < next_rows; e++, pr++) {
                const char *row = (const char *)w + elem_bytes(type) * ((size_t)(next_g + pr) * ldw + next_k);
                int c;
                for (c = 0; c < next_bytes; c += 64) _mm_prefetch(row + c, _MM_HINT_T0);
            }
            (fast == CK_FGEMM_AVX2 ? tile_avx2 : tile_avx512)(P, nv, xa, k0, kc, t, T - t < MR ? T - t : MR, n0, rows, o,
                                                              k0 == 0);
        }
        return;
    }
#endif
    pack_ref(P, type, wg, (size_t)ldw, w_kn, rows, k0, kc);
    for (t = t0; t < T; t += MR) tile_ref(P, xa, k0, kc, t, T - t < MR ? T - t : MR, n0, rows, o, k0 == 0);
    (void)fast, (void)next_g, (void)next_k, (void)next_rows, (void)K;
}

int ck_fgemm_general(float *out, int ldo, const float *x, int64_t xs_t, int64_t xs_k, int type, const void *w,
                     int64_t ldw, int w_kn, const float *bias, const float *add, int ld_add, int T, int K, int64_t r0,
                     int64_t r1, int64_t col0, int fast)
{
    float *mem, *P;
    int64_t g;
    int k0;
    dest o;
    acts xa;
    if (r1 <= r0) return 0;
    if (w_kn && type != CK_Q_F32) return -1;
    if (fast == CK_FGEMM_AMX || fast == CK_FGEMM_AMX_EMU) { /* the tiles take f16 / bf16 weights and activations as rows */
        if ((type == CK_Q_F16 || type == CK_Q_BF16) && !w_kn && xs_k == 1)
            return fgemm_amx(out, ldo, x, xs_t, type, w, ldw, bias, add, ld_add, T, K, r0, r1, col0, fast);
        fast = fast == CK_FGEMM_AMX ? CK_FGEMM_AVX512 : CK_FGEMM_REF;
    }
    const size_t mark = ck_ws_mark();
    /* the workspace (ck_kernels.h), else malloc */
    mem = (float *)ck_ws_alloc(sizeof(float) * (size_t)KC * NR + 64);
    if (!mem) return -1;
    P = (float *)((char *)mem + (64 - (uintptr_t)mem % 64) % 64);
    o.out = out, o.ldo = ldo, o.bias = bias, o.add = add, o.ld_add = ld_add;
    xa.x = x, xa.st = xs_t, xa.sk = xs_k;
    if ((double)T * K * sizeof(float) > (xs_k == 1 ? CK_FGEMM_BLOCKED_BYTES : CK_FGEMM_BLOCKED_BYTES_T)) {
        /* large activations (the tied LM head's dX = dY @ W reads 256 x 50257 floats, its dW = dY^T X
         * 50257 x 256 transposed): blocks of CK_FGEMM_TB tokens x KC columns of them run against every panel
         * while they are cache-resident, instead of all of them streaming from DRAM once per panel (the
         * panels are packed again per token block: W is the small operand here). 2 threads, GFLOP/s before
         * -> after: dX 256 x 768 x 50257 173 -> 198; dW 50257 x 768 x 256 120 -> 170-190 (OpenBLAS 170).
         * Each output still sums its KC blocks in order: the same results. (No prefetch: a [K][N] W's
         * panels are blocks of its rows, and a row-major W's next panel is the next block's.) */
        int tb;
        for (tb = 0; tb < T; tb += CK_FGEMM_TB) {
            const int te = T - tb < CK_FGEMM_TB ? T : tb + CK_FGEMM_TB;
            for (k0 = 0; k0 < K; k0 += KC) {
                const int kc = K - k0 < KC ? K - k0 : KC;
                for (g = r0; g < r1; g += panel_width(r1 - g)) {
                    const int rows = (int)(r1 - g < panel_width(r1 - g) ? r1 - g : panel_width(r1 - g));
                    panel_block(P, type, w, ldw, w_kn, g, rows, k0, kc, &xa, tb, te, (int)(col0 + g), &o, fast, 0,
                                0, 0, K);
                }
            }
        }
        ck_ws_free(mem);
        ck_ws_reset(mark);
        return 0;
    }
    for (g = r0; g < r1; g += panel_width(r1 - g)) {
        const int rows = (int)(r1 - g < panel_width(r1 - g) ? r1 - g : panel_width(r1 - g));
        for (k0 = 0; k0 < K; k0 += KC) {
            const int kc = K - k0 < KC ? K - k0 : KC;
            /* the next panel's weights come from DRAM: ask for them while this one's tiles run, a few rows
             * per tile (packing waited on them: 13% of an f16 prefill) */
            const int next_k = k0 + KC < K ? k0 + KC : 0;
            const int64_t next_g = k0 + KC < K ? g : g + rows;
            const int next_rows = next_g >= r1 || w_kn ? 0 : (int)(r1 - next_g < NR ? r1 - next_g : NR);
            panel_block(P, type, w, ldw, w_kn, g, rows, k0, kc, &xa, 0, T, (int)(col0 + g), &o, fast, next_g,
                        next_k, next_rows, K);
        }
    }
    ck_ws_free(mem);
    ck_ws_reset(mark);
    return 0;
}

/* ---- few tokens (T <= 32): tokens as lanes ------------------------------------------------------------
 * With 32 tokens or fewer the panels above cost as much to pack as their tiles save: the weights would be
 * converted and transposed for 4 uses each. Here the activations are transposed once instead (X^T[k][32],
 * tokens as the 32 lanes of two zmm, zero past T) and every weight is read in place from its row and
 * broadcast: 8 rows x 32 tokens in 16 accumulators, each k one multiply-add per accumulator. f32 weights
 * only (a broadcast 16-bit weight would need a conversion per element). */

/* xt[k][32] = x[t][k] for t < T (0 past it) */
static void small_pack_ref(float *xt, const float *x, int ldx, int T, int K)
{
    int k, t;
    for (k = 0; k < K; k++)
        for (t = 0; t < 32; t++) xt[(size_t)k * 32 + t] = t < T ? x[(size_t)t * ldx + k] : 0.0f;
}

/* rows [n0, n1) of the output for all tokens: the scalar twin, the same FMAs in the same order */
static void small_rows_ref(float *out, int ldo, const float *xt, const float *w, const float *bias, const float *add,
                           int ld_add, int T, int K, int64_t n0, int64_t n1)
{
    int64_t n;
    int t, k;
    for (n = n0; n < n1; n++)
        for (t = 0; t < T; t++) {
            float acc = 0.0f;
            for (k = 0; k < K; k++) acc = fmaf(w[(size_t)n * K + k], xt[(size_t)k * 32 + t], acc);
            if (bias) acc += bias[n];
            if (add) acc += add[(size_t)t * ld_add + n];
            out[(size_t)t * ldo + n] = acc;
        }
}

#ifdef CK_X86
CK_AVX512F static void small_pack_avx512(float *xt, const float *x, int ldx, int T, int K)
{
    int k, h, r;
    for (k = 0; k + 16 <= K; k += 16)
        for (h = 0; h < 2; h++) { /* tokens 16 h .. 16 h + 15 */
            __m512 m[16];
            for (r = 0; r < 16; r++)
                m[r] = 16 * h + r < T ? _mm512_loadu_ps(x + (size_t)(16 * h + r) * ldx + k) : _mm512_setzero_ps();
            ck_transpose16(m);
            for (r = 0; r < 16; r++) _mm512_store_ps(xt + (size_t)(k + r) * 32 + 16 * h, m[r]);
        }
    if (k < K) small_pack_ref(xt + (size_t)k * 32, x + k, ldx, T, K - k);
}

/* 8 rows (n0 .. n0 + rows - 1 real, the others repeat the last and are not stored) x 32 token lanes */
CK_AVX512F static void small_tile_avx512(float *out, int ldo, const float *xt, const float *w, const float *bias,
                                         const float *add, int ld_add, int T, int K, int64_t n0, int rows)
{
    const __mmask8 keep = (__mmask8)((1u << rows) - 1u);
    __m512 a0[8], a1[8];
    float buf[8][32];
    const float *wr[8];
    int r, k, t;
    for (r = 0; r < 8; r++) {
        a0[r] = _mm512_setzero_ps();
        a1[r] = _mm512_setzero_ps();
        wr[r] = w + (size_t)(n0 + (r < rows ? r : rows - 1)) * K;
    }
    for (k = 0; k < K; k++) {
        const __m512 x0 = _mm512_load_ps(xt + (size_t)k * 32), x1 = _mm512_load_ps(xt + (size_t)k * 32 + 16);
        for (r = 0; r < 8; r++) {
            const __m512 b = _mm512_set1_ps(wr[r][k]);
            a0[r] = _mm512_fmadd_ps(b, x0, a0[r]);
            a1[r] = _mm512_fmadd_ps(b, x1, a1[r]);
        }
    }
    for (r = 0; r < 8; r++) {
        _mm512_storeu_ps(buf[r], a0[r]);
        _mm512_storeu_ps(buf[r] + 16, a1[r]);
    }
    for (t = 0; t < T; t++) { /* the 8 rows of token t: one column of buf */
        __m256 v = _mm256_set_ps(buf[7][t], buf[6][t], buf[5][t], buf[4][t], buf[3][t], buf[2][t], buf[1][t], buf[0][t]);
        if (bias) v = _mm256_add_ps(v, _mm256_maskz_loadu_ps(keep, bias + n0));
        if (add) v = _mm256_add_ps(v, _mm256_maskz_loadu_ps(keep, add + (size_t)t * ld_add + n0));
        _mm256_mask_storeu_ps(out + (size_t)t * ldo + n0, keep, v);
    }
}
#endif

void ck_fgemm_small_pack(float *xt, const float *x, int ldx, int T, int K, int fast)
{
#ifdef CK_X86
    if (fast) {
        small_pack_avx512(xt, x, ldx, T, K);
        return;
    }
#endif
    (void)fast;
    small_pack_ref(xt, x, ldx, T, K);
}

int ck_fgemm_small(float *out, int ldo, const float *xt, const float *w, const float *bias, const float *add,
                   int ld_add, int T, int K, int64_t n0, int64_t n1, int fast)
{
#ifdef CK_X86
    int64_t n;
    if (fast) {
        for (n = n0; n < n1; n += 8)
            small_tile_avx512(out, ldo, xt, w, bias, add, ld_add, T, K, n, (int)(n1 - n < 8 ? n1 - n : 8));
        return 0;
    }
#endif
    (void)fast;
    small_rows_ref(out, ldo, xt, w, bias, add, ld_add, T, K, n0, n1);
    return 0;
}
