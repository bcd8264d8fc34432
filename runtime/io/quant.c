/*
 * quant.c — GGML's block formats: the traits table (one row per type, at the
 * end), 16-bit conversions, the reference quantizers (llama.cpp's
 * quantize_row_*_ref, so the bytes match what llama-quantize writes) and
 * dequantizers. The readers (safetensors.c,
 * gguf.c) convert with it, and so does `ckc quantize`; the dot products that
 * use the formats are kernels (kernels/qlinear.c).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ck_errors.h"
#include "ck_quant.h"
#include "ck_quant_blocks.h"

/* ---- 16-bit floats -------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The branch-free conversions of the FP16 library (what ggml uses without
 * F16C): exact, round to nearest even, NaN stays NaN. */
uint16_t ck_fp32_to_fp16(float f)
{
    const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    uint32_t w = f32_bits(f), shl1_w = w + w, sign = w & 0x80000000u, bias = shl1_w & 0xFF000000u, bits;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
    bits = f32_bits(base);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu)));
}

float ck_fp16_to_fp32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    const float exp_scale = 0x1.0p-112f;
    float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * exp_scale;
    float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t r = two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized);
    return f32_from_bits(sign | r);
}

uint16_t ck_fp32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

float ck_bf16_to_fp32(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

#define FP16(h) ck_fp16_to_fp32(h)
#define TO_FP16(f) ck_fp32_to_fp16(f)

/* ---- reference quantizers (llama.cpp's *_ref) ------------------------------ */

static int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* (int8_t)v, truncating as a C cast does, but defined for every float: saturated to [-128, 127], NaN -> 0. A
 * finite row can still overflow x * (1 / d) when its scale d is subnormal (1 / d is then infinite). */
static int8_t f2i8(float v)
{
    return v != v ? 0 : v >= 127.0f ? 127 : v <= -128.0f ? -128 : (int8_t)v;
}

#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))

static void quantize_q8_0(const float *x, void *vy, int64_t nb)
{
    ck_block_q8_0 *y = (ck_block_q8_0 *)vy;
    int64_t i;
    int j;
    for (i = 0; i < nb; i++, x += CK_QK) {
        float amax = 0.0f, d, id;
        for (j = 0; j < CK_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        d = amax / 127;
        id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (j = 0; j < CK_QK; j++) y[i].qs[j] = f2i8(roundf(x[j] * id));
    }
}

static void quantize_q8_1(const float *x, void *vy, int64_t nb)
{
    ck_block_q8_1 *y = (ck_block_q8_1 *)vy;
    int64_t i;
    int j;
    for (i = 0; i < nb; i++, x += CK_QK) {
        float amax = 0.0f, d, id;
        int sum = 0;
        for (j = 0; j < CK_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        d = amax / 127;
        id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (j = 0; j < CK_QK; j++) {
            y[i].qs[j] = f2i8(roundf(x[j] * id));
            sum += y[i].qs[j];
        }
        y[i].s = TO_FP16(sum * d);
    }
}

/* the value of largest magnitude, with its sign */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    int j;
    for (j = 0; j < n; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void quantize_q4_0(const float *x, void *vy, int64_t nb)
{
    ck_block_q4_0 *y = (ck_block_q4_0 *)vy;
    int64_t i;
    int j;
    for (i = 0; i < nb; i++, x += CK_QK) {
        const float d = signed_absmax(x, CK_QK) / -8, id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (j = 0; j < CK_QK / 2; j++) {
            const uint8_t x0 = (uint8_t)MINI(15, f2i8(x[j] * id + 8.5f));
            const uint8_t x1 = (uint8_t)MINI(15, f2i8(x[CK_QK / 2 + j] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(x0 | (x1 << 4));
        }
    }
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    int j;
    *mn = FLT_MAX;
    *mx = -FLT_MAX;
    for (j = 0; j < n; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

static void quantize_q4_1(const float *x, void *vy, int64_t nb)
{
    ck_block_q4_1 *y = (ck_block_q4_1 *)vy;
    int64_t i;
    int j;
    for (i = 0; i < nb; i++, x += CK_QK) {
        float mn, mx, d, id;
        min_max(x, CK_QK, &mn, &mx);
        d = (mx - mn) / 15;
        id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        y[i].m = TO_FP16(mn);
        for (j = 0; j < CK_QK / 2; j++) {
            const uint8_t x0 = (uint8_t)MINI(15, f2i8((x[j] - mn) * id + 0.5f));
            const uint8_t x1 = (uint8_t)MINI(15, f2i8((x[CK_QK / 2 + j] - mn) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(x0 | (x1 << 4));
        }
    }
}

static void quantize_q5_0(const float *x, void *vy, int64_t nb)
{
    ck_block_q5_0 *y = (ck_block_q5_0 *)vy;
    int64_t i;
    int j;
    for (i = 0; i < nb; i++, x += CK_QK) {
        const float d = signed_absmax(x, CK_QK) / -16, id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = TO_FP16(d);
        for (j = 0; j < CK_QK / 2; j++) {
            const uint8_t x0 = (uint8_t)MINI(31, f2i8(x[j] * id + 16.5f));
            const uint8_t x1 = (uint8_t)MINI(31, f2i8(x[CK_QK / 2 + j] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((x0 & 0x0F) | ((x1 & 0x0F) << 4));
            qh |= ((uint32_t)(x0 & 0x10u) >> 4) << j;
            qh |= ((uint32_t)(x1 & 0x10u) >> 4) << (j + CK_QK / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

static void quantize_q5_1(const float *x, void *vy, int64_t nb)
{
    ck_block_q5_1 *y = (ck_block_q5_1 *)vy;
    int64_t i;
    int j;
    for (i = 0; i < nb; i++, x += CK_QK) {
        float mn, mx, d, id;
        uint32_t qh = 0;
        min_max(x, CK_QK, &mn, &mx);
        d = (mx - mn) / 31;
        id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        y[i].m = TO_FP16(mn);
        for (j = 0; j < CK_QK / 2; j++) {
            const uint8_t x0 = (uint8_t)MINI(31, f2i8((x[j] - mn) * id + 0.5f));
            const uint8_t x1 = (uint8_t)MINI(31, f2i8((x[CK_QK / 2 + j] - mn) * id + 0.5f));
            y[i].qs[j] = (uint8_t)((x0 & 0x0F) | ((x1 & 0x0F) << 4));
            qh |= ((uint32_t)(x0 & 0x10u) >> 4) << j;
            qh |= ((uint32_t)(x1 & 0x10u) >> 4) << (j + CK_QK / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

static void quantize_q8_K(const float *x, void *vy, int64_t nb)
{
    ck_block_q8_K *y = (ck_block_q8_K *)vy;
    int64_t i;
    int j;
    for (i = 0; i < nb; i++, x += CK_QK_K) {
        const float max = signed_absmax(x, CK_QK_K);
        float iscale;
        if (max == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        iscale = -127.f / max;
        for (j = 0; j < CK_QK_K; j++) y[i].qs[j] = (int8_t)MINI(127, nearest_int(iscale * x[j]));
        for (j = 0; j < CK_QK_K / 16; j++) {
            int sum = 0, k;
            for (k = 0; k < 16; k++) sum += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* llama.cpp's make_qkx2_quants: a scale and a min for n values in [0, nmax],
 * the best of a small search by weighted squared error */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0], iscale, scale, best_error = 0;
    int i, is;
    for (i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    iscale = nmax / (max - min);
    scale = 1 / iscale;
    for (i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        float diff;
        L[i] = (uint8_t)MAXI(0, MINI(nmax, l));
        diff = scale * L[i] + min - x[i];
        best_error += weights[i] * diff * diff;
    }
    for (is = 0; is <= nstep; is++) {
        float sum_l = 0, sum_l2 = 0, sum_xl = 0, D;
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        for (i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            float w = weights[i];
            l = MAXI(0, MINI(nmax, l));
            Laux[i] = (uint8_t)l;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            float cur_error = 0;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            for (i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += weights[i] * diff * diff;
            }
            if (cur_error < best_error) {
                for (i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* 8 sub-blocks of 32: 6-bit scales and mins relative to d and dmin; L gets
 * the quants in [0, nmax] (15 for q4_K, 31 for q5_K) */
static void quantize_k_scales(const float *x, int nmax, uint8_t *scales12, uint16_t *d16, uint16_t *dmin16, uint8_t *L)
{
    uint8_t Laux[32], sc8[8], mn8[8];
    float weights[32], mins[8], scales[8], max_scale = 0, max_min = 0, inv_scale, inv_min;
    int j, l;
    for (j = 0; j < 8; j++) {
        float sum_x2 = 0, av_x;
        for (l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        av_x = sqrtf(sum_x2 / 32);
        for (l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     nmax == 15 ? -1.f : -0.5f, 0.1f, nmax == 15 ? 20 : 15);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales12, 0, 12);
    for (j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]), lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = (uint8_t)MINI(63, ls);
        lm = (uint8_t)MINI(63, lm);
        if (j < 4) {
            scales12[j] = ls;
            scales12[j + 4] = lm;
        } else {
            scales12[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales12[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales12[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = TO_FP16(max_scale / 63.f);
    *dmin16 = TO_FP16(max_min / 63.f);
    ck_k4_scales_mins(scales12, sc8, mn8);
    for (j = 0; j < 8; j++) {
        float d, dm;
        d = FP16(*d16) * sc8[j];
        if (!d) continue;
        dm = FP16(*dmin16) * mn8[j];
        for (l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)MAXI(0, MINI(nmax, nearest_int((x[32 * j + l] + dm) / d)));
    }
}

static void quantize_q4_K(const float *x, void *vy, int64_t nb)
{
    ck_block_q4_K *y = (ck_block_q4_K *)vy;
    uint8_t L[CK_QK_K];
    int64_t i;
    int j, l;
    for (i = 0; i < nb; i++, x += CK_QK_K) {
        uint8_t *q = y[i].qs;
        quantize_k_scales(x, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
        for (j = 0; j < CK_QK_K; j += 64, q += 32)
            for (l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void quantize_q5_K(const float *x, void *vy, int64_t nb)
{
    ck_block_q5_K *y = (ck_block_q5_K *)vy;
    uint8_t L[CK_QK_K];
    int64_t i;
    int j, l;
    for (i = 0; i < nb; i++, x += CK_QK_K) {
        uint8_t *ql = y[i].qs, *qh = y[i].qh, m1 = 1, m2 = 2;
        quantize_k_scales(x, 31, y[i].scales, &y[i].d, &y[i].dmin, L);
        memset(qh, 0, CK_QK_K / 8);
        for (j = 0; j < CK_QK_K; j += 64, ql += 32, m1 <<= 2, m2 <<= 2)
            for (l = 0; l < 32; l++) {
                int l1 = L[j + l], l2 = L[j + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[l] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[l] |= m2;
                }
                ql[l] = (uint8_t)(l1 | (l2 << 4));
            }
    }
}

/* llama.cpp's make_qx_quants with rmse_type 1 and no importance weights */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0, iscale, sumlx = 0, suml2 = 0, scale, best;
    int i, is;
    for (i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) { /* GROUP_MAX_EPS */
        for (i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    iscale = -nmax / max;
    for (i = 0; i < n; i++) {
        int l = MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i])));
        float w = x[i] * x[i];
        L[i] = (int8_t)(l + nmax);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    scale = suml2 ? sumlx / suml2 : 0.0f;
    best = scale * sumlx;
    for (is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (i = 0; i < n; i++) {
            int l = MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (i = 0; i < n; i++) L[i] = (int8_t)(nmax + MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quantize_q6_K(const float *x, void *vy, int64_t nb)
{
    ck_block_q6_K *y = (ck_block_q6_K *)vy;
    int8_t L[CK_QK_K];
    float scales[CK_QK_K / 16];
    int64_t i;
    int j, l, ib;
    for (i = 0; i < nb; i++, x += CK_QK_K) {
        float max_scale = 0, max_abs_scale = 0, iscale;
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (ib = 0; ib < CK_QK_K / 16; ib++) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < 1e-15f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        iscale = -128.f / max_scale;
        y[i].d = TO_FP16(1 / iscale);
        for (ib = 0; ib < CK_QK_K / 16; ib++) y[i].scales[ib] = (int8_t)MINI(127, nearest_int(iscale * scales[ib]));
        for (j = 0; j < CK_QK_K / 16; j++) {
            float d = FP16(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(MAXI(-32, MINI(31, nearest_int(x[16 * j + l] / d))) + 32);
        }
        for (j = 0; j < CK_QK_K; j += 128, ql += 64, qh += 32)
            for (l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                              q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
    }
}

static void quantize_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }

static void quantize_f16(const float *x, void *y, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i++) ((uint16_t *)y)[i] = ck_fp32_to_fp16(x[i]);
}

static void quantize_bf16(const float *x, void *y, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i++) ((uint16_t *)y)[i] = ck_fp32_to_bf16(x[i]);
}

/* ---- dequantizers: each format's definition, the reference twin of every kernel that reads it ---------- */

static void dequantize_f32(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }

static void dequantize_f16(const void *x, float *y, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i++) y[i] = FP16(((const uint16_t *)x)[i]);
}

static void dequantize_bf16(const void *x, float *y, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i++) y[i] = ck_bf16_to_fp32(((const uint16_t *)x)[i]);
}

static void dequantize_q8_0(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j;
    const ck_block_q8_0 *x = (const ck_block_q8_0 *)vx;
    for (i = 0; i < nb; i++, y += CK_QK) {
        const float d = FP16(x[i].d);
        for (j = 0; j < CK_QK; j++) y[j] = x[i].qs[j] * d;
    }
}

static void dequantize_q8_1(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j;
    const ck_block_q8_1 *x = (const ck_block_q8_1 *)vx;
    for (i = 0; i < nb; i++, y += CK_QK) {
        const float d = FP16(x[i].d);
        for (j = 0; j < CK_QK; j++) y[j] = x[i].qs[j] * d;
    }
}

static void dequantize_q4_0(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j;
    const ck_block_q4_0 *x = (const ck_block_q4_0 *)vx;
    for (i = 0; i < nb; i++, y += CK_QK) {
        const float d = FP16(x[i].d);
        for (j = 0; j < CK_QK / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + CK_QK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequantize_q4_1(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j;
    const ck_block_q4_1 *x = (const ck_block_q4_1 *)vx;
    for (i = 0; i < nb; i++, y += CK_QK) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        for (j = 0; j < CK_QK / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + CK_QK / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void dequantize_q5_0(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j;
    const ck_block_q5_0 *x = (const ck_block_q5_0 *)vx;
    for (i = 0; i < nb; i++, y += CK_QK) {
        const float d = FP16(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (j = 0; j < CK_QK / 2; j++) {
            const int x0 = ((x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[j] = x0 * d;
            y[j + CK_QK / 2] = x1 * d;
        }
    }
}

static void dequantize_q5_1(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j;
    const ck_block_q5_1 *x = (const ck_block_q5_1 *)vx;
    for (i = 0; i < nb; i++, y += CK_QK) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (j = 0; j < CK_QK / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int x1 = (x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            y[j] = x0 * d + m;
            y[j + CK_QK / 2] = x1 * d + m;
        }
    }
}

static void dequantize_q4_K(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j, l;
    const ck_block_q4_K *x = (const ck_block_q4_K *)vx;
    for (i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = FP16(x[i].d), mn = FP16(x[i].dmin);
        uint8_t sc[8], mins[8];
        int is = 0;
        ck_k4_scales_mins(x[i].scales, sc, mins);
        for (j = 0; j < CK_QK_K; j += 64, q += 32, is += 2) {
            const float d1 = d * sc[is], m1 = mn * mins[is], d2 = d * sc[is + 1], m2 = mn * mins[is + 1];
            for (l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void dequantize_q5_K(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j, l;
    const ck_block_q5_K *x = (const ck_block_q5_K *)vx;
    for (i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        const float d = FP16(x[i].d), mn = FP16(x[i].dmin);
        uint8_t sc[8], mins[8], u1 = 1, u2 = 2;
        int is = 0;
        ck_k4_scales_mins(x[i].scales, sc, mins);
        for (j = 0; j < CK_QK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
            const float d1 = d * sc[is], m1 = mn * mins[is], d2 = d * sc[is + 1], m2 = mn * mins[is + 1];
            for (l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void dequantize_q6_K(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j, l;
    const ck_block_q6_K *x = (const ck_block_q6_K *)vx;
    for (i = 0; i < nb; i++) {
        const float d = FP16(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (j = 0; j < CK_QK_K; j += 128, y += 128, ql += 64, qh += 32, sc += 8)
            for (l = 0; l < 32; l++) {
                int is = l / 16;
                const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
    }
}

static void dequantize_q8_K(const void *vx, float *y, int64_t nb)
{
    int64_t i;
    int j;
    const ck_block_q8_K *x = (const ck_block_q8_K *)vx;
    for (i = 0; i < nb; i++, y += CK_QK_K)
        for (j = 0; j < CK_QK_K; j++) y[j] = x[i].d * x[i].qs[j];
}

/* ---- the traits table: one row per type (as ggml's type_traits) --------------------------------------------
 * A function a type lacks is NULL; ck_quantize_row / ck_dequantize_row return CK_ENOTSUP for it, never a silent
 * zero. row_fallback is llama.cpp's (llama-quant.cpp) for rows that are not whole blocks; gguf_file_type is
 * general.file_type (llama_ftype) of a file whose matrices are in the type. */
#define CK_TRAITS(t, name, block, bytes, stored, dot, fb, ftype, q, dq) \
    {t, name, block, bytes, stored, dot, fb, ftype, q, dq}
#define CK_UNREAD(t, name) {t, name, 0, 0, 0, -1, -1, -1, NULL, NULL} /* GGML types ckc does not read */

static const ck_qtype_traits kTraits[] = {
    CK_TRAITS(CK_Q_F32, "f32", 1, 4, 1, CK_Q_F32, -1, 0, quantize_f32, dequantize_f32),
    CK_TRAITS(CK_Q_F16, "f16", 1, 2, 1, CK_Q_F32, -1, 1, quantize_f16, dequantize_f16),
    CK_TRAITS(CK_Q_BF16, "bf16", 1, 2, 1, CK_Q_F32, -1, 32, quantize_bf16, dequantize_bf16),
    CK_TRAITS(CK_Q_Q8_0, "q8_0", CK_QK, sizeof(ck_block_q8_0), 1, CK_Q_Q8_0, CK_Q_F16, 7, quantize_q8_0, dequantize_q8_0),
    CK_TRAITS(CK_Q_Q4_0, "q4_0", CK_QK, sizeof(ck_block_q4_0), 1, CK_Q_Q8_0, CK_Q_F16, 2, quantize_q4_0, dequantize_q4_0),
    CK_TRAITS(CK_Q_Q4_1, "q4_1", CK_QK, sizeof(ck_block_q4_1), 1, CK_Q_Q8_1, CK_Q_F16, 3, quantize_q4_1, dequantize_q4_1),
    CK_TRAITS(CK_Q_Q5_0, "q5_0", CK_QK, sizeof(ck_block_q5_0), 1, CK_Q_Q8_0, CK_Q_F16, 8, quantize_q5_0, dequantize_q5_0),
    CK_TRAITS(CK_Q_Q5_1, "q5_1", CK_QK, sizeof(ck_block_q5_1), 1, CK_Q_Q8_1, CK_Q_F16, 9, quantize_q5_1, dequantize_q5_1),
    /* q4_K's file type is Q4_K_M's number, the closest llama.cpp names */
    CK_TRAITS(CK_Q_Q4_K, "q4_K", CK_QK_K, sizeof(ck_block_q4_K), 1, CK_Q_Q8_K, CK_Q_Q5_0, 15, quantize_q4_K,
              dequantize_q4_K),
    CK_TRAITS(CK_Q_Q5_K, "q5_K", CK_QK_K, sizeof(ck_block_q5_K), 1, CK_Q_Q8_K, CK_Q_Q5_1, 17, quantize_q5_K,
              dequantize_q5_K),
    CK_TRAITS(CK_Q_Q6_K, "q6_K", CK_QK_K, sizeof(ck_block_q6_K), 1, CK_Q_Q8_K, CK_Q_Q8_0, 18, quantize_q6_K,
              dequantize_q6_K),
    /* activation-side types: quantized for the dot products, never stored in a model */
    CK_TRAITS(CK_Q_Q8_1, "q8_1", CK_QK, sizeof(ck_block_q8_1), 0, -1, -1, -1, quantize_q8_1, dequantize_q8_1),
    CK_TRAITS(CK_Q_Q8_K, "q8_K", CK_QK_K, sizeof(ck_block_q8_K), 0, -1, -1, -1, quantize_q8_K, dequantize_q8_K),
    CK_UNREAD(10, "q2_K"), CK_UNREAD(11, "q3_K"), CK_UNREAD(16, "iq2_xxs"), CK_UNREAD(17, "iq2_xs"),
    CK_UNREAD(18, "iq3_xxs"), CK_UNREAD(19, "iq1_s"), CK_UNREAD(20, "iq4_nl"), CK_UNREAD(21, "iq3_s"),
    CK_UNREAD(22, "iq2_s"), CK_UNREAD(23, "iq4_xs"), CK_UNREAD(24, "i8"), CK_UNREAD(25, "i16"),
    CK_UNREAD(26, "i32"), CK_UNREAD(27, "i64"), CK_UNREAD(28, "f64"), CK_UNREAD(29, "iq1_m"),
    CK_UNREAD(34, "tq1_0"), CK_UNREAD(35, "tq2_0"), CK_UNREAD(39, "mxfp4"),
};
#define N_TRAITS ((int)(sizeof kTraits / sizeof kTraits[0]))

const ck_qtype_traits *ck_qtype_traits_of(int type)
{
    int i;
    for (i = 0; i < N_TRAITS; i++)
        if (kTraits[i].type == type) return &kTraits[i];
    return NULL;
}

const ck_qtype_traits *ck_qtype_traits_at(int i) { return i >= 0 && i < N_TRAITS ? &kTraits[i] : NULL; }

int ck_qtype_valid(int type)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    return t && t->stored;
}

const char *ck_qtype_name(int type)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    return t ? t->name : "unknown";
}

int ck_qtype_from_name(const char *name)
{
    int i;
    if (!name) return -1;
    for (i = 0; i < N_TRAITS; i++) {
        const char *a = kTraits[i].name, *b = name;
        while (*a && *b && (*a | 32) == (*b | 32)) a++, b++; /* q4_k == q4_K */
        if (!*a && !*b && kTraits[i].stored) return kTraits[i].type;
    }
    return -1;
}

int ck_qtype_block(int type)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    return t ? t->block : 0;
}

int ck_qtype_block_bytes(int type)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    return t ? t->block_bytes : 0;
}

size_t ck_qtype_row_bytes(int type, int64_t n)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    if (!t || !t->block || n < 0 || n % t->block) return 0;
    return (size_t)(n / t->block) * (size_t)t->block_bytes;
}

int ck_qtype_dot_type(int type)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    return t ? t->dot_type : -1;
}

int ck_qtype_for_rows(int want, int64_t K)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(want), *fb;
    if (!t || !t->block) return -1;
    if (K % t->block == 0) return want;
    fb = ck_qtype_traits_of(t->row_fallback >= 0 ? t->row_fallback : CK_Q_F16);
    return fb && K % fb->block == 0 ? fb->type : CK_Q_F16;
}

int ck_quantize_row(int type, const float *x, void *y, int64_t n)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    if (!t || !t->quantize) return CK_ENOTSUP;
    if (n < 0 || n % t->block) return CK_EINVAL;
    if (t->block > 1) { /* a block's scale from a NaN or an infinity would cast them to integers (undefined) */
        int64_t i;
        for (i = 0; i < n; i++)
            if (!isfinite(x[i])) return CK_EFORMAT;
    }
    t->quantize(x, y, n / t->block);
    return CK_OK;
}

int ck_dequantize_row(int type, const void *x, float *y, int64_t n)
{
    const ck_qtype_traits *t = ck_qtype_traits_of(type);
    if (!t || !t->dequantize) return CK_ENOTSUP;
    if (n < 0 || n % t->block) return CK_EINVAL;
    t->dequantize(x, y, n / t->block);
    return CK_OK;
}
