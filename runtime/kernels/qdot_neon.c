/*
 * qdot_neon.c — the dot products of decode on ARM64 (see qdot_neon.h), as llama.cpp's ARM kernels do them:
 * 16 int8 products at a time summed into 4 int32 lanes (SDOT where the compiler targets the dot-product
 * extension, -march=armv8.2-a+dotprod or a CPU that has it; else widening multiplies and pairwise adds, which
 * every ARMv8 NEON has), one block's integer sum exact, the block scales applied in float.
 *
 * Against the scalar references (qlinear.c's dot_ref_*): the integer sums are the same; the float sums run in
 * four lanes (float rows: sixteen) instead of one, so results differ in the last bits only (tested under
 * qemu-aarch64: tests/c/vec_dot_check.c).
 */
#include "qdot_neon.h"

int ck_qdot_neon_compiled(void) { return CK_NEON; }

#if CK_NEON

#include <arm_neon.h>
#include <string.h>

#include "ck_quant.h"
#include "ck_quant_blocks.h"

/* acc + the 16 products a[i] * b[i], four to a lane */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

float ck_dot_neon_f32(int64_t n, const void *vw, const void *va)
{
    const float *w = (const float *)vw, *a = (const float *)va;
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
    float sum;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(w + i), vld1q_f32(a + i));
        s1 = vfmaq_f32(s1, vld1q_f32(w + i + 4), vld1q_f32(a + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(w + i + 8), vld1q_f32(a + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(w + i + 12), vld1q_f32(a + i + 12));
    }
    sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) sum += w[i] * a[i];
    return sum;
}

/* 8 f16 / bf16 weights as two float32x4 */
static inline void half8_f16(const uint16_t *w, float32x4_t *lo, float32x4_t *hi)
{
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(w));
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
}

static inline void half8_bf16(const uint16_t *w, float32x4_t *lo, float32x4_t *hi)
{
    const uint16x8_t h = vld1q_u16(w);
    *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

#define CK_HALF_DOT(name, load, scalar)                                                                        \
    float name(int64_t n, const void *vw, const void *va)                                                      \
    {                                                                                                          \
        const uint16_t *w = (const uint16_t *)vw;                                                              \
        const float *a = (const float *)va;                                                                    \
        float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0, w0, w1, w2, w3;                         \
        float sum;                                                                                             \
        int64_t i = 0;                                                                                         \
        for (; i + 16 <= n; i += 16) {                                                                         \
            load(w + i, &w0, &w1);                                                                             \
            load(w + i + 8, &w2, &w3);                                                                         \
            s0 = vfmaq_f32(s0, w0, vld1q_f32(a + i));                                                          \
            s1 = vfmaq_f32(s1, w1, vld1q_f32(a + i + 4));                                                      \
            s2 = vfmaq_f32(s2, w2, vld1q_f32(a + i + 8));                                                      \
            s3 = vfmaq_f32(s3, w3, vld1q_f32(a + i + 12));                                                     \
        }                                                                                                      \
        sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));                                     \
        for (; i < n; i++) sum += scalar(w[i]) * a[i];                                                         \
        return sum;                                                                                            \
    }
CK_HALF_DOT(ck_dot_neon_f16, half8_f16, ck_fp16_to_fp32)
CK_HALF_DOT(ck_dot_neon_bf16, half8_bf16, ck_bf16_to_fp32)
#undef CK_HALF_DOT

float ck_dot_neon_q8_0(int64_t n, const void *vw, const void *va)
{
    const ck_block_q8_0 *w = (const ck_block_q8_0 *)vw, *a = (const ck_block_q8_0 *)va;
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t i;
    for (i = 0; i < n / CK_QK; i++) {
        int32x4_t s = dot16(vdupq_n_s32(0), vld1q_s8(w[i].qs), vld1q_s8(a[i].qs));
        s = dot16(s, vld1q_s8(w[i].qs + 16), vld1q_s8(a[i].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d));
    }
    return vaddvq_f32(acc);
}

float ck_dot_neon_q4_0(int64_t n, const void *vw, const void *va)
{
    const ck_block_q4_0 *w = (const ck_block_q4_0 *)vw;
    const ck_block_q8_0 *a = (const ck_block_q8_0 *)va;
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t i;
    for (i = 0; i < n / CK_QK; i++) {
        const uint8x16_t q = vld1q_u8(w[i].qs); /* element j in the low nibble of byte j, j + 16 in the high */
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, low4)), eight);
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
        int32x4_t s = dot16(vdupq_n_s32(0), lo, vld1q_s8(a[i].qs));
        s = dot16(s, hi, vld1q_s8(a[i].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d));
    }
    return vaddvq_f32(acc);
}

/* q4_1 against q8_1: d_w d_a sum(q_w q_a) + m_w s_a (s_a: the activations' scaled block sum) */
float ck_dot_neon_q4_1(int64_t n, const void *vw, const void *va)
{
    const ck_block_q4_1 *w = (const ck_block_q4_1 *)vw;
    const ck_block_q8_1 *a = (const ck_block_q8_1 *)va;
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float mins = 0.0f;
    int64_t i;
    for (i = 0; i < n / CK_QK; i++) {
        const uint8x16_t q = vld1q_u8(w[i].qs);
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(q, low4)); /* 0..15: exact as int8 */
        const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
        int32x4_t s = dot16(vdupq_n_s32(0), lo, vld1q_s8(a[i].qs));
        s = dot16(s, hi, vld1q_s8(a[i].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d));
        mins += ck_fp16_to_fp32(w[i].m) * ck_fp16_to_fp32(a[i].s);
    }
    return vaddvq_f32(acc) + mins;
}

/* The K-quants against q8_K (256 values a block): every integer sum as the reference's (qlinear.c's
 * dot_ref_k / dot_ref_q6_K), the block's float in the same order, so the results are the reference's bits. */

/* the 32 products of one q4_K / q5_K sub-block: w0, w1 its values (16 each, 0..31), a its activations */
static inline int32_t dot32(int8x16_t w0, int8x16_t w1, const int8_t *a)
{
    return vaddvq_s32(dot16(dot16(vdupq_n_s32(0), w0, vld1q_s8(a)), w1, vld1q_s8(a + 16)));
}

/* q4_K (qh NULL) or q5_K: 8 sub-blocks of 32; sub-block 2p in the low nibbles of qs[32p, 32p + 32), 2p + 1 in
 * the high; q5_K's fifth bit of element l of sub-block j is bit j of qh[l] */
static inline float dot_k4(const uint8_t *scales12, uint16_t d, uint16_t dmin, const uint8_t *qs, const uint8_t *qh,
                           const ck_block_q8_K *a)
{
    const uint8x16_t low4 = vdupq_n_u8(0x0F), sixteen = vdupq_n_u8(16);
    uint8x16_t h0 = vdupq_n_u8(0), h1 = h0;
    uint8_t sc[8], mn[8];
    int32_t sumi = 0, summ = 0;
    int p, j;
    ck_k4_scales_mins(scales12, sc, mn);
    if (qh) h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
    for (p = 0; p < 4; p++) {
        const uint8x16_t q0 = vld1q_u8(qs + 32 * p), q1 = vld1q_u8(qs + 32 * p + 16);
        uint8x16_t l0 = vandq_u8(q0, low4), l1 = vandq_u8(q1, low4), u0 = vshrq_n_u8(q0, 4), u1 = vshrq_n_u8(q1, 4);
        if (qh) {
            const uint8x16_t blo = vdupq_n_u8((uint8_t)(1u << (2 * p))), bhi = vdupq_n_u8((uint8_t)(2u << (2 * p)));
            l0 = vorrq_u8(l0, vandq_u8(vtstq_u8(h0, blo), sixteen));
            l1 = vorrq_u8(l1, vandq_u8(vtstq_u8(h1, blo), sixteen));
            u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(h0, bhi), sixteen));
            u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(h1, bhi), sixteen));
        }
        sumi += sc[2 * p] * dot32(vreinterpretq_s8_u8(l0), vreinterpretq_s8_u8(l1), a->qs + 64 * p);
        sumi += sc[2 * p + 1] * dot32(vreinterpretq_s8_u8(u0), vreinterpretq_s8_u8(u1), a->qs + 64 * p + 32);
    }
    for (j = 0; j < 8; j++) summ += mn[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    return a->d * (ck_fp16_to_fp32(d) * sumi - ck_fp16_to_fp32(dmin) * summ);
}

float ck_dot_neon_q4_K(int64_t n, const void *vw, const void *va)
{
    const ck_block_q4_K *w = (const ck_block_q4_K *)vw;
    const ck_block_q8_K *a = (const ck_block_q8_K *)va;
    float sum = 0.0f;
    int64_t i;
    for (i = 0; i < n / CK_QK_K; i++) sum += dot_k4(w[i].scales, w[i].d, w[i].dmin, w[i].qs, NULL, &a[i]);
    return sum;
}

float ck_dot_neon_q5_K(int64_t n, const void *vw, const void *va)
{
    const ck_block_q5_K *w = (const ck_block_q5_K *)vw;
    const ck_block_q8_K *a = (const ck_block_q8_K *)va;
    float sum = 0.0f;
    int64_t i;
    for (i = 0; i < n / CK_QK_K; i++) sum += dot_k4(w[i].scales, w[i].d, w[i].dmin, w[i].qs, w[i].qh, &a[i]);
    return sum;
}

/* q6_K: each half of 128 values: ql[64] (low 4 bits: l and l + 64 share ql[l], l + 32 and l + 96 ql[l + 32]),
 * qh[32] (2 high bits each: bits 0-1 for l, 2-3 for l + 32, 4-5 for l + 64, 6-7 for l + 96), minus 32; each 16
 * values one int8 scale */
float ck_dot_neon_q6_K(int64_t n, const void *vw, const void *va)
{
    const ck_block_q6_K *w = (const ck_block_q6_K *)vw;
    const ck_block_q8_K *a = (const ck_block_q8_K *)va;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), three = vdupq_n_u8(3);
    const int8x16_t m32 = vdupq_n_s8(32);
    float sum = 0.0f;
    int64_t i;
    for (i = 0; i < n / CK_QK_K; i++) {
        int32_t sumi = 0;
        int h, c;
        for (h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            const int8_t *y = a[i].qs + 128 * h, *sc = w[i].scales + 8 * h;
            for (c = 0; c < 32; c += 16) {
                const uint8x16_t qa = vld1q_u8(ql + c), qb = vld1q_u8(ql + 32 + c), hb = vld1q_u8(qh + c);
                const uint8x16_t v0 = vorrq_u8(vandq_u8(qa, low4), vshlq_n_u8(vandq_u8(hb, three), 4));
                const uint8x16_t v1 = vorrq_u8(vandq_u8(qb, low4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), three), 4));
                const uint8x16_t v2 = vorrq_u8(vshrq_n_u8(qa, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), three), 4));
                const uint8x16_t v3 = vorrq_u8(vshrq_n_u8(qb, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
                const int g = c / 16; /* the 16-value group within each 32 */
                sumi += sc[0 + g] * vaddvq_s32(dot16(vdupq_n_s32(0), vsubq_s8(vreinterpretq_s8_u8(v0), m32),
                                                     vld1q_s8(y + c)));
                sumi += sc[2 + g] * vaddvq_s32(dot16(vdupq_n_s32(0), vsubq_s8(vreinterpretq_s8_u8(v1), m32),
                                                     vld1q_s8(y + 32 + c)));
                sumi += sc[4 + g] * vaddvq_s32(dot16(vdupq_n_s32(0), vsubq_s8(vreinterpretq_s8_u8(v2), m32),
                                                     vld1q_s8(y + 64 + c)));
                sumi += sc[6 + g] * vaddvq_s32(dot16(vdupq_n_s32(0), vsubq_s8(vreinterpretq_s8_u8(v3), m32),
                                                     vld1q_s8(y + 96 + c)));
            }
        }
        sum += a[i].d * ck_fp16_to_fp32(w[i].d) * sumi;
    }
    return sum;
}

#endif /* CK_NEON */
