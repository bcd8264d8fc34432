/*
 * qgemm.c — prefill over integer-quantized weights: an int8 GEMM.
 *
 * For many tokens, y = x W^T with W in q8_0, q4_0, q4_1, q5_0, q5_1, q4_K,
 * q5_K or q6_K runs on integers, as llama.cpp's prefill does: the activations
 * are quantized once per call, exactly as the decode path quantizes them
 * (q8_0 / q8_1 / q8_K, qlinear.c), and every 32 (q6_K: 16) weights contribute
 * one exact integer dot product, scaled in float. Decode and prefill therefore
 * see the same integers; only the order of the float sums differs.
 *
 * Every weight type is first written as  w = s (u - z) + m  per sub-block of
 * L weights (L = 32, or 16 for q6_K): u unsigned (0..255), z an integer
 * offset, s and m floats (exact: f16 scale times a small integer):
 *   q8_0  u = q + 128, z = 128       q4_0  u = nibble, z = 8     q5_0  u = 5 bits, z = 16
 *   q4_1 / q5_1  u = nibble / 5 bits, s = d, m = m
 *   q4_K / q5_K  s = d sc_j, m = -dmin m_j        q6_K  u = 6 bits, z = 32, s = d sc_j
 * so for activations a = da qa (qa int8) one sub-block of one row gives
 *   s da (sum u qa - z sum qa) + m da sum qa
 * where the first sum is the integer dot product and the rest is per-token
 * data computed once per call (the -z sum qa starts the integer accumulator;
 * m da sum qa is one more multiply-add).
 *
 * Layout: 16 weight rows are packed per call into a panel whose 64-byte
 * chunks hold 4 consecutive u of each of the 16 rows, so one AVX-512 VNNI
 * vpdpbusd multiplies 16 rows by 4 activations (broadcast) into 16 int32
 * lanes: lanes are rows, and no horizontal sums are needed. A panel is
 * packed once and used by all T tokens (the AVX-512 body takes two panels
 * and 4 tokens at a time: each broadcast activation feeds both panels), so
 * the file's layout is kept in memory and read in place; the packing is
 * the BLAS idea of copying a panel of B, not a repacked model.
 *
 * Bodies: AMX-INT8 tiles where the CPU and the OS allow them (cpu.c), else
 * AVX-512 VNNI, else AVX-VNNI or AVX2 (one panel, two ymm of rows; picked at
 * run time), and a portable scalar twin with the same integer sums and the
 * same float operations in the same order (fmaf), so all give identical
 * results; tests compare them bit for bit. The AMX body also runs on emulated
 * tiles (plain C with the instructions' semantics and config checks), so
 * machines without AMX test its tiling the same way. CPUs without AVX2 keep
 * the float tile path of qlinear.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ck_kernels.h"
#include "ck_quant.h"
#include "ck_quant_blocks.h"
#include "ck_simd.h"
#include "amx_tiles.h"
#include "qgemm.h"

#ifdef CK_X86
#define CK_QA2 __attribute__((target("avx2,fma,f16c")))
#define CK_QA2V __attribute__((target("avx2,fma,f16c,avxvnni")))
#define CK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
#define CK_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c,amx-tile,amx-int8")))
#endif

#define NR 16 /* weight rows per panel: the int32 lanes of a zmm */
#define MR 8  /* tokens per call of the scalar twin */

/* ---- the per-type description: sub-block length, offset, min, unpacking ------------ */

/* One row of K weights as u[K], s[K / L], m[K / L] */
typedef void (*unpack_fn)(const void *row, int K, uint8_t *u, float *s, float *m);

static void unpack_q8_0(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q8_0 *x = (const ck_block_q8_0 *)row;
    int b, j;
    (void)m;
    for (b = 0; b < K / CK_QK; b++) {
        s[b] = ck_fp16_to_fp32(x[b].d);
        for (j = 0; j < CK_QK; j++) u[CK_QK * b + j] = (uint8_t)(x[b].qs[j] + 128);
    }
}

/* the nibbles of one q4_0 / q4_1 block, element order */
static void nibbles(const uint8_t *qs, uint8_t *u)
{
    int j;
    for (j = 0; j < CK_QK / 2; j++) {
        u[j] = qs[j] & 0x0F;
        u[j + CK_QK / 2] = qs[j] >> 4;
    }
}

static void unpack_q4_0(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q4_0 *x = (const ck_block_q4_0 *)row;
    int b;
    (void)m;
    for (b = 0; b < K / CK_QK; b++) {
        s[b] = ck_fp16_to_fp32(x[b].d);
        nibbles(x[b].qs, u + CK_QK * b);
    }
}

static void unpack_q4_1(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q4_1 *x = (const ck_block_q4_1 *)row;
    int b;
    for (b = 0; b < K / CK_QK; b++) {
        s[b] = ck_fp16_to_fp32(x[b].d);
        m[b] = ck_fp16_to_fp32(x[b].m);
        nibbles(x[b].qs, u + CK_QK * b);
    }
}

/* the 5-bit values of one q5_0 / q5_1 block, element order */
static void fives(const uint8_t *qs, const uint8_t *qh4, uint8_t *u)
{
    uint32_t qh;
    int j;
    memcpy(&qh, qh4, 4);
    for (j = 0; j < CK_QK / 2; j++) {
        u[j] = (uint8_t)((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10));
        u[j + CK_QK / 2] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
    }
}

static void unpack_q5_0(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q5_0 *x = (const ck_block_q5_0 *)row;
    int b;
    (void)m;
    for (b = 0; b < K / CK_QK; b++) {
        s[b] = ck_fp16_to_fp32(x[b].d);
        fives(x[b].qs, x[b].qh, u + CK_QK * b);
    }
}

static void unpack_q5_1(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q5_1 *x = (const ck_block_q5_1 *)row;
    int b;
    for (b = 0; b < K / CK_QK; b++) {
        s[b] = ck_fp16_to_fp32(x[b].d);
        m[b] = ck_fp16_to_fp32(x[b].m);
        fives(x[b].qs, x[b].qh, u + CK_QK * b);
    }
}

/* q4_K / q5_K super-blocks: 8 sub-blocks of 32, each s = d sc_j, m = -dmin m_j (qh: q5_K's fifth bits) */
static void unpack_k(const uint8_t *scales12, uint16_t d16, uint16_t dmin16, const uint8_t *q, const uint8_t *qh,
                     uint8_t *u, float *s, float *m)
{
    const float d = ck_fp16_to_fp32(d16), dmin = ck_fp16_to_fp32(dmin16);
    uint8_t sc[8], mn[8];
    int j, l;
    ck_k4_scales_mins(scales12, sc, mn);
    for (j = 0; j < 8; j++) {
        uint8_t *o = u + 32 * j;
        s[j] = d * (float)sc[j];
        m[j] = -dmin * (float)mn[j];
        for (l = 0; l < 32; l++) {
            int v = j & 1 ? q[32 * (j / 2) + l] >> 4 : q[32 * (j / 2) + l] & 0xF;
            if (qh && (qh[l] >> j) & 1) v += 16;
            o[l] = (uint8_t)v;
        }
    }
}

static void unpack_q4_K(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q4_K *x = (const ck_block_q4_K *)row;
    int b;
    for (b = 0; b < K / CK_QK_K; b++)
        unpack_k(x[b].scales, x[b].d, x[b].dmin, x[b].qs, NULL, u + CK_QK_K * b, s + 8 * b, m + 8 * b);
}

static void unpack_q5_K(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q5_K *x = (const ck_block_q5_K *)row;
    int b;
    for (b = 0; b < K / CK_QK_K; b++)
        unpack_k(x[b].scales, x[b].d, x[b].dmin, x[b].qs, x[b].qh, u + CK_QK_K * b, s + 8 * b, m + 8 * b);
}

static void unpack_q6_K(const void *row, int K, uint8_t *u, float *s, float *m)
{
    int b, j, l;
    (void)m;
    for (b = 0; b < K / CK_QK_K; b++) {
        const ck_block_q6_K *w = (const ck_block_q6_K *)row + b;
        const uint8_t *ql = w->ql, *qh = w->qh;
        const float d = ck_fp16_to_fp32(w->d);
        uint8_t *o = u + CK_QK_K * b;
        for (j = 0; j < CK_QK_K; j += 128, ql += 64, qh += 32)
            for (l = 0; l < 32; l++) {
                o[j + l + 0] = (uint8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                o[j + l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                o[j + l + 64] = (uint8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4));
                o[j + l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
        for (j = 0; j < CK_QK_K / 16; j++) s[16 * b + j] = d * (float)w->scales[j];
    }
}

#ifdef CK_X86
static unpack_fn unpack_avx2_of(int type);
#endif

/* The GEMM's view of a type: w = s (u - z) + m per sub-block of L weights (the file's comment). A type with
 * no row (unpack NULL) is not one qgemm multiplies. */
typedef struct {
    int L;           /* weights per sub-block: 32, or 16 for q6_K */
    int z;           /* the offset taken from the unsigned u */
    int has_min;     /* m is the block's own (q4_1, q5_1, q4_K, q5_K), else 0 */
    unpack_fn unpack;
} qgemm_desc;

static const qgemm_desc kDesc[] = {
    [CK_Q_Q8_0] = {32, 128, 0, unpack_q8_0}, [CK_Q_Q4_0] = {32, 8, 0, unpack_q4_0},
    [CK_Q_Q4_1] = {32, 0, 1, unpack_q4_1},   [CK_Q_Q5_0] = {32, 16, 0, unpack_q5_0},
    [CK_Q_Q5_1] = {32, 0, 1, unpack_q5_1},   [CK_Q_Q4_K] = {32, 0, 1, unpack_q4_K},
    [CK_Q_Q5_K] = {32, 0, 1, unpack_q5_K},   [CK_Q_Q6_K] = {16, 32, 0, unpack_q6_K},
};

static const qgemm_desc *desc_of(int type)
{
    return type >= 0 && type < (int)(sizeof kDesc / sizeof kDesc[0]) && kDesc[type].unpack ? &kDesc[type] : NULL;
}

int ck_qgemm_type(int type) { return desc_of(type) != NULL; }

/* ---- activations: quantized once per call, for every token ----------------- */

/* As qlinear.c's quantize_act for q8_0 / q8_1 (127 / amax, half to even, the
 * scale rounded to f16 as the block stores it), and llama.cpp's q8_K. */
static void quantize_row_ref(const ck_qgemm_acts *a, const float *xr, int8_t *q, float *d, int32_t *sum, float *s1)
{
    const int K = a->K;
    int b, j;
    if (a->dot_type == CK_Q_Q8_K) {
        for (b = 0; b < K / CK_QK_K; b++) {
            ck_block_q8_K blk;
            ck_qtype_traits_of(CK_Q_Q8_K)->quantize(xr + CK_QK_K * b, &blk, 1); /* llama.cpp's reference, one block */
            memcpy(q + CK_QK_K * b, blk.qs, CK_QK_K);
            for (j = 0; j < 8; j++) d[8 * b + j] = blk.d;
            for (j = 0; j < 16; j++) sum[16 * b + j] = blk.bsums[j];
        }
        return;
    }
    for (b = 0; b < K / 32; b++) {
        const float *v = xr + 32 * b;
        float amax = 0.0f, id;
        int s0 = 0, s16 = 0;
        for (j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (j = 0; j < 32; j++) {
            q[32 * b + j] = (int8_t)rintf(v[j] * id);
            if (j < 16)
                s0 += q[32 * b + j];
            else
                s16 += q[32 * b + j];
        }
        d[b] = ck_fp16_to_fp32(ck_fp32_to_fp16(amax / 127.f));
        sum[2 * b] = s0;
        sum[2 * b + 1] = s16;
        s1[b] = ck_fp16_to_fp32(ck_fp32_to_fp16(amax / 127.f * (float)(s0 + s16)));
    }
}

#ifdef CK_X86
/* a q8_K block of zeros (all its values 0, or its largest magnitude's sign lost): quants, scales and sums */
static void q8k_zero(int8_t *q, float *d8, int32_t *sum16)
{
    int j;
    memset(q, 0, CK_QK_K);
    for (j = 0; j < 8; j++) d8[j] = 0.0f;
    for (j = 0; j < 16; j++) sum16[j] = 0;
}

/* the same, 16 lanes at a time (cvtps rounds half to even like rintf and
 * llama.cpp's nearest_int; identical results, tested) */
CK_AVX512 static void quantize_row_avx512(const ck_qgemm_acts *a, const float *xr, int8_t *q, float *d, int32_t *sum,
                                          float *s1)
{
    const int K = a->K;
    int b, j;
    if (a->dot_type == CK_Q_Q8_K) {
        for (b = 0; b < K / CK_QK_K; b++) {
            const float *v = xr + CK_QK_K * b;
            __m512 m = _mm512_setzero_ps(), x[16];
            float amax, max = 0.0f, iscale;
            for (j = 0; j < 16; j++) {
                x[j] = _mm512_loadu_ps(v + 16 * j);
                m = _mm512_max_ps(m, _mm512_abs_ps(x[j]));
            }
            amax = _mm512_reduce_max_ps(m);
            for (j = 0; j < 16; j++) { /* the first value of the largest magnitude, with its sign */
                __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(x[j]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
                if (hit) {
                    max = v[16 * j + __builtin_ctz(hit)];
                    break;
                }
            }
            if (amax == 0.0f || max == 0.0f) {
                q8k_zero(q + CK_QK_K * b, d + 8 * b, sum + 16 * b);
                continue;
            }
            iscale = -127.f / max;
            for (j = 0; j < 16; j++) {
                __m512i i = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x[j], _mm512_set1_ps(iscale))),
                                             _mm512_set1_epi32(127));
                _mm_storeu_si128((__m128i *)(q + CK_QK_K * b + 16 * j), _mm512_cvtepi32_epi8(i));
                sum[16 * b + j] = _mm512_reduce_add_epi32(i);
            }
            for (j = 0; j < 8; j++) d[8 * b + j] = 1 / iscale;
        }
        return;
    }
    for (b = 0; b < K / 32; b++) {
        const __m512 x0 = _mm512_loadu_ps(xr + 32 * b), x1 = _mm512_loadu_ps(xr + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
        const int s0 = _mm512_reduce_add_epi32(i0), s16 = _mm512_reduce_add_epi32(i1);
        _mm_storeu_si128((__m128i *)(q + 32 * b), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + 32 * b + 16), _mm512_cvtepi32_epi8(i1));
        d[b] = amax / 127.f; /* rounded to f16 below */
        sum[2 * b] = s0;
        sum[2 * b + 1] = s16;
        s1[b] = amax / 127.f * (float)(s0 + s16);
    }
    /* the scales through f16 and back, 16 at a time: the F16C conversion rounds to nearest even as
     * ck_fp32_to_fp16 does (the same bits, subnormals included); the software one per block was 43% of
     * preparing a decode step's activations (qlinear.c act_prepare) */
    for (b = 0; b < K / 32; b += 16) {
        const __mmask16 m = (__mmask16)(K / 32 - b >= 16 ? 0xFFFF : (1u << (K / 32 - b)) - 1);
        const __m512 dv = _mm512_maskz_loadu_ps(m, d + b), sv = _mm512_maskz_loadu_ps(m, s1 + b);
        _mm512_mask_storeu_ps(d + b, m, _mm512_cvtph_ps(_mm512_cvtps_ph(dv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        _mm512_mask_storeu_ps(s1 + b, m, _mm512_cvtph_ps(_mm512_cvtps_ph(sv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
}
#endif

#ifdef CK_X86
/* the same on AVX2, 8 lanes at a time (identical results, tested) */
CK_QA2 static inline int hsum8_i32(__m256i v)
{
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1)));
}

/* 8 int32 (each in [-127, 127]) as 8 bytes at q */
CK_QA2 static inline void store_i8x8(int8_t *q, __m256i i)
{
    const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)q, _mm_packs_epi16(p16, p16));
}

CK_QA2 static void quantize_row_avx2(const ck_qgemm_acts *a, const float *xr, int8_t *q, float *d, int32_t *sum,
                                     float *s1)
{
    const int K = a->K;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int b, j;
    if (a->dot_type == CK_Q_Q8_K) {
        for (b = 0; b < K / CK_QK_K; b++) {
            const float *v = xr + CK_QK_K * b;
            __m256 m = _mm256_setzero_ps();
            float amax, max = 0.0f, iscale;
            for (j = 0; j < 32; j++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * j)));
            amax = ck_hmax8(m);
            for (j = 0; j < CK_QK_K; j++) /* the first value of the largest magnitude, with its sign */
                if (fabsf(v[j]) == amax) {
                    max = v[j];
                    break;
                }
            if (amax == 0.0f || max == 0.0f) {
                q8k_zero(q + CK_QK_K * b, d + 8 * b, sum + 16 * b);
                continue;
            }
            iscale = -127.f / max;
            for (j = 0; j < 16; j++) {
                const __m256 is = _mm256_set1_ps(iscale);
                const __m256i top = _mm256_set1_epi32(127);
                const __m256i i0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 16 * j), is)), top);
                const __m256i i1 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 16 * j + 8), is)), top);
                store_i8x8(q + CK_QK_K * b + 16 * j, i0);
                store_i8x8(q + CK_QK_K * b + 16 * j + 8, i1);
                sum[16 * b + j] = hsum8_i32(_mm256_add_epi32(i0, i1));
            }
            for (j = 0; j < 8; j++) d[8 * b + j] = 1 / iscale;
        }
        return;
    }
    for (b = 0; b < K / 32; b++) {
        __m256 x[4], m = _mm256_setzero_ps();
        __m256i i[4];
        float amax;
        for (j = 0; j < 4; j++) {
            x[j] = _mm256_loadu_ps(xr + 32 * b + 8 * j);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, x[j]));
        }
        amax = ck_hmax8(m);
        {
            const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
            for (j = 0; j < 4; j++) {
                i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(x[j], id));
                store_i8x8(q + 32 * b + 8 * j, i[j]);
            }
        }
        {
            const int s0 = hsum8_i32(_mm256_add_epi32(i[0], i[1])), s16 = hsum8_i32(_mm256_add_epi32(i[2], i[3]));
            d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            sum[2 * b] = s0;
            sum[2 * b + 1] = s16;
            s1[b] = _cvtsh_ss(_cvtss_sh(amax / 127.f * (float)(s0 + s16), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}
#endif

static void quantize_tokens(ck_qgemm_acts *a, const float *x, int ldx, int t0, int t1, int fast)
{
    const int K = a->K;
    int t;
    for (t = t0; t < t1; t++) {
        const float *xr = x + (size_t)t * ldx;
        int8_t *q = a->q + (size_t)t * K;
        float *d = a->d + (size_t)t * (K / 32), *s1 = a->s + (size_t)t * (K / 32);
        int32_t *sum = a->sum16 + (size_t)t * (K / 16);
#ifdef CK_X86
        if (fast && ck_cpu_avx512vnni())
            quantize_row_avx512(a, xr, q, d, sum, s1);
        else if (fast && ck_cpu_avx2())
            quantize_row_avx2(a, xr, q, d, sum, s1);
        else
#endif
            quantize_row_ref(a, xr, q, d, sum, s1);
        if (a->qt) { /* the tile-interleaved copies (none for ck_qgemm_acts_init_rows) */
            int8_t *qt = a->qt + (size_t)(t / 8) * 8 * K + 4 * (t % 8);
            float *dt = a->dt + (size_t)(t / 8) * 8 * (K / 32) + t % 8;
            int c;
            for (c = 0; c < K / 4; c++) memcpy(qt + 32 * c, q + 4 * c, 4);
            for (c = 0; c < K / 32; c++) dt[8 * c] = d[c];
        }
    }
    (void)fast;
}

/* a's row-major arrays, q with room for q_tokens tokens */
static int acts_rows(ck_qgemm_acts *a, int dot_type, int T, int K, size_t q_tokens)
{
    memset(a, 0, sizeof *a);
    a->dot_type = dot_type;
    a->T = T;
    a->K = K;
    /* from the workspace (ck_kernels.h), else malloc */
    a->q = (int8_t *)ck_ws_alloc(q_tokens * K + 64);
    a->d = (float *)ck_ws_alloc(sizeof(float) * (size_t)T * (K / 32) + 64);
    a->sum16 = (int32_t *)ck_ws_alloc(sizeof(int32_t) * (size_t)T * (K / 16) + 64);
    a->s = (float *)ck_ws_alloc(sizeof(float) * (size_t)T * (K / 32) + 64);
    return a->q && a->d && a->sum16 && a->s ? 0 : -1;
}

int ck_qgemm_acts_init(ck_qgemm_acts *a, int dot_type, int T, int K)
{
    const size_t T8 = (size_t)(T + 7) / 8 * 8, T16 = (size_t)(T + 15) / 16 * 16;
    /* the quants padded with zero tokens to a multiple of 16 (an AMX tile of tokens reads 16 rows) */
    if (acts_rows(a, dot_type, T, K, T16)) return -1;
    memset(a->q + (size_t)T * K, 0, (T16 - (size_t)T) * K);
    a->qt = (int8_t *)ck_ws_alloc(T8 * K + 64);
    a->dt = (float *)ck_ws_alloc(sizeof(float) * (T8 * (K / 32) + 16));
    if (!(a->qt && a->dt)) return -1;
    memset(a->qt, 0, T8 * K + 64); /* the padding tokens stay zero */
    memset(a->dt, 0, sizeof(float) * (T8 * (K / 32) + 16));
    return 0;
}

int ck_qgemm_acts_init_rows(ck_qgemm_acts *a, int dot_type, int T, int K)
{
    return acts_rows(a, dot_type, T, K, (size_t)T);
}

void ck_qgemm_acts_quantize(ck_qgemm_acts *a, const float *x, int ldx, int t0, int t1, int fast)
{
    quantize_tokens(a, x, ldx, t0, t1, fast);
}

void ck_qgemm_acts_free(ck_qgemm_acts *a)
{
    ck_ws_free(a->q);
    ck_ws_free(a->d);
    ck_ws_free(a->sum16);
    ck_ws_free(a->s);
    ck_ws_free(a->qt);
    ck_ws_free(a->dt);
    memset(a, 0, sizeof *a);
}

/* ---- panels ------------------------------------------------------------------ */

/* A panel of NR rows: u in chunks [K / 4][NR][4], s and m as [K / L][NR];
 * rows past `rows` are zero (their outputs are not stored). */
typedef struct {
    int type, L, z, min, rows;
    uint8_t *u;
    float *s, *m;
    uint8_t *tmp; /* NR rows of unpacked u, [NR][K] */
    float *ts, *tm;
    void *mem; /* one allocation; the vectors in it 64-byte aligned */
} panel;

static int panel_init(panel *p, int K)
{
    const size_t ub = (size_t)K * NR, fb = sizeof(float) * (size_t)(K / 16) * NR;
    char *c;
    memset(p, 0, sizeof *p);
    p->mem = ck_ws_alloc(2 * ub + 4 * fb + 64); /* the workspace (ck_kernels.h), else malloc */
    if (!p->mem) return -1;
    c = (char *)p->mem + (64 - (uintptr_t)p->mem % 64) % 64;
    p->u = (uint8_t *)c, c += ub; /* ub and fb are multiples of 64 (K is a multiple of 16) */
    p->s = (float *)c, c += fb;
    p->m = (float *)c, c += fb;
    p->ts = (float *)c, c += fb;
    p->tm = (float *)c, c += fb;
    p->tmp = (uint8_t *)c;
    return 0;
}

static void panel_free(panel *p) { ck_ws_free(p->mem); }

#ifdef CK_X86
/* The vector unpacking, for the AVX2 and the AVX-512 bodies alike (the packing is a small part of a GEMM's time):
 * the same u, s, m as the scalar functions */
CK_QA2 static void unpack_q8_0_avx2(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const ck_block_q8_0 *x = (const ck_block_q8_0 *)row;
    int b;
    (void)m;
    for (b = 0; b < K / CK_QK; b++) {
        s[b] = _cvtsh_ss(x[b].d);
        _mm256_storeu_si256((__m256i *)(u + CK_QK * b),
                            _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[b].qs), _mm256_set1_epi8((char)0x80)));
    }
}

/* byte j of the result: 0x10 where bit j of qh is set, else 0 */
CK_QA2 static inline __m256i fifth_bits(uint32_t qh)
{
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3,
                                         3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10));
}

/* q4_0 / q4_1 (q5 0), q5_0 / q5_1 (q5 1); with_min: q4_1 / q5_1 */
CK_QA2 static inline void unpack_q45_avx2(int q5, int with_min, const void *row, int K, uint8_t *u, float *s, float *m)
{
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const size_t bs = q5 ? (with_min ? sizeof(ck_block_q5_1) : sizeof(ck_block_q5_0))
                         : (with_min ? sizeof(ck_block_q4_1) : sizeof(ck_block_q4_0));
    const int qs = (with_min ? 4 : 2) + (q5 ? 4 : 0);
    int b;
    for (b = 0; b < K / CK_QK; b++) {
        const uint8_t *blk = (const uint8_t *)row + bs * b;
        const __m128i t = _mm_loadu_si128((const __m128i *)(blk + qs));
        __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(t, 4), m4), _mm_and_si128(t, m4));
        s[b] = _cvtsh_ss(*(const uint16_t *)blk);
        if (with_min) m[b] = _cvtsh_ss(*(const uint16_t *)(blk + 2));
        if (q5) {
            uint32_t qh;
            memcpy(&qh, blk + qs - 4, 4);
            v = _mm256_or_si256(v, fifth_bits(qh));
        }
        _mm256_storeu_si256((__m256i *)(u + CK_QK * b), v);
    }
}

CK_QA2 static void unpack_q4_0_avx2(const void *row, int K, uint8_t *u, float *s, float *m) { unpack_q45_avx2(0, 0, row, K, u, s, m); }
CK_QA2 static void unpack_q4_1_avx2(const void *row, int K, uint8_t *u, float *s, float *m) { unpack_q45_avx2(0, 1, row, K, u, s, m); }
CK_QA2 static void unpack_q5_0_avx2(const void *row, int K, uint8_t *u, float *s, float *m) { unpack_q45_avx2(1, 0, row, K, u, s, m); }
CK_QA2 static void unpack_q5_1_avx2(const void *row, int K, uint8_t *u, float *s, float *m) { unpack_q45_avx2(1, 1, row, K, u, s, m); }

/* q4_K (qh NULL) / q5_K: sub-block 2i in the low nibbles of 32 bytes, 2i + 1 in the high ones; q5_K's fifth bit
 * of sub-block j is bit j of each of its 32 qh bytes */
CK_QA2 static inline void unpack_k_avx2(const uint8_t *scales12, uint16_t d16, uint16_t dmin16, const uint8_t *q,
                                        const uint8_t *qh, uint8_t *u, float *s, float *m)
{
    const float d = _cvtsh_ss(d16), dmin = _cvtsh_ss(dmin16);
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    uint8_t sc[8], mn[8];
    int j;
    ck_k4_scales_mins(scales12, sc, mn);
    for (j = 0; j < 8; j++) {
        s[j] = d * (float)sc[j];
        m[j] = -dmin * (float)mn[j];
    }
    for (j = 0; j < 4; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) { /* (bits 2j and 2j + 1 shifted down within each byte's 16-bit lane, then up to 0x10) */
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * j), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * j + 1), one), 4));
        }
        _mm256_storeu_si256((__m256i *)(u + 64 * j), lo);
        _mm256_storeu_si256((__m256i *)(u + 64 * j + 32), hi);
    }
}

CK_QA2 static void unpack_q4_K_avx2(const void *row, int K, uint8_t *u, float *s, float *m)
{
    int b;
    for (b = 0; b < K / CK_QK_K; b++) {
        const ck_block_q4_K *x = (const ck_block_q4_K *)row + b;
        unpack_k_avx2(x->scales, x->d, x->dmin, x->qs, NULL, u + CK_QK_K * b, s + 8 * b, m + 8 * b);
    }
}

CK_QA2 static void unpack_q5_K_avx2(const void *row, int K, uint8_t *u, float *s, float *m)
{
    int b;
    for (b = 0; b < K / CK_QK_K; b++) {
        const ck_block_q5_K *x = (const ck_block_q5_K *)row + b;
        unpack_k_avx2(x->scales, x->d, x->dmin, x->qs, x->qh, u + CK_QK_K * b, s + 8 * b, m + 8 * b);
    }
}

CK_QA2 static void unpack_q6_K_avx2(const void *row, int K, uint8_t *u, float *s, float *m)
{
    const __m256i m2 = _mm256_set1_epi8(3), f = _mm256_set1_epi8(0x0F);
    int b, j, i;
    (void)m;
    for (b = 0; b < K / CK_QK_K; b++) {
        const ck_block_q6_K *x = (const ck_block_q6_K *)row + b;
        const float d = _cvtsh_ss(x->d);
        for (j = 0; j < CK_QK_K / 16; j++) s[16 * b + j] = d * (float)x->scales[j];
        for (j = 0; j < 2; j++) { /* 128 weights: ql's low nibbles 0-63, high nibbles 64-127, qh's bit pairs */
            const __m256i h = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * j));
            uint8_t *o = u + CK_QK_K * b + 128 * j;
            for (i = 0; i < 2; i++) { /* weights 32 i .. 32 i + 31 and 64 + 32 i .. */
                const __m256i l = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * j + 32 * i));
                const __m256i hl = _mm256_srli_epi16(h, 2 * i), hh = _mm256_srli_epi16(h, 2 * i + 4);
                _mm256_storeu_si256((__m256i *)(o + 32 * i),
                                    _mm256_or_si256(_mm256_and_si256(l, f), _mm256_slli_epi16(_mm256_and_si256(hl, m2), 4)));
                _mm256_storeu_si256((__m256i *)(o + 64 + 32 * i),
                                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), f),
                                                    _mm256_slli_epi16(_mm256_and_si256(hh, m2), 4)));
            }
        }
    }
}

static const unpack_fn kUnpackAvx2[] = {
    [CK_Q_Q8_0] = unpack_q8_0_avx2, [CK_Q_Q4_0] = unpack_q4_0_avx2, [CK_Q_Q4_1] = unpack_q4_1_avx2,
    [CK_Q_Q5_0] = unpack_q5_0_avx2, [CK_Q_Q5_1] = unpack_q5_1_avx2, [CK_Q_Q4_K] = unpack_q4_K_avx2,
    [CK_Q_Q5_K] = unpack_q5_K_avx2, [CK_Q_Q6_K] = unpack_q6_K_avx2,
};

static unpack_fn unpack_avx2_of(int type)
{
    return type >= 0 && type < (int)(sizeof kUnpackAvx2 / sizeof kUnpackAvx2[0]) ? kUnpackAvx2[type] : NULL;
}

/* transpose_u below on AVX2: 8 x 8 transposes of 4-byte groups, rows 0-7 and 8-15 of each 8 chunks (K is a
 * multiple of 32: whole groups of 8 chunks) */
CK_QA2 static void transpose_u_avx2(const uint8_t *tmp, int K, uint8_t *u)
{
    int c, r, h;
    for (c = 0; c < K / 4; c += 8)
        for (h = 0; h < 2; h++) {
            __m256 m[8];
            for (r = 0; r < 8; r++) m[r] = _mm256_loadu_ps((const float *)(const void *)(tmp + (size_t)(8 * h + r) * K + 4 * c));
            ck_transpose8(m);
            for (r = 0; r < 8; r++) _mm256_store_ps((float *)(void *)(u + ((size_t)(c + r) * NR + 8 * h) * 4), m[r]);
        }
}

/* u[c][r][0..3] = tmp[r][4c .. 4c + 3] for the 16 rows: 16 x 16 transposes of 4-byte groups */
CK_AVX512 static void transpose_u(const uint8_t *tmp, int K, uint8_t *u)
{
    int c, r;
    for (c = 0; c + 16 <= K / 4; c += 16) {
        __m512 m[16];
        for (r = 0; r < NR; r++) m[r] = _mm512_castsi512_ps(_mm512_loadu_si512((const void *)(tmp + (size_t)r * K + 4 * c)));
        ck_transpose16(m);
        for (r = 0; r < 16; r++) _mm512_store_si512((void *)(u + ((size_t)(c + r) * NR) * 4), _mm512_castps_si512(m[r]));
    }
    for (; c < K / 4; c++)
        for (r = 0; r < NR; r++) memcpy(u + ((size_t)c * NR + r) * 4, tmp + (size_t)r * K + 4 * c, 4);
}
#endif

/* rows [0, rows) of `w` (row-major in its type, row_bytes apart); `vec`: the vector unpacking and the AVX-512 (1)
 * or AVX2 (2) transposes, else the scalar ones (0; the same panel) */
static void panel_pack(panel *p, int type, const char *w, size_t row_bytes, int rows, int K, int vec)
{
    const qgemm_desc *d = desc_of(type);
    const int L = d->L, nsub = K / L;
    int r, c, j;
#ifdef CK_X86
    const unpack_fn unpack = vec && unpack_avx2_of(type) ? unpack_avx2_of(type) : d->unpack;
#else
    const unpack_fn unpack = d->unpack;
    (void)vec;
#endif
    p->type = type;
    p->L = L;
    p->z = d->z;
    p->min = d->has_min;
    p->rows = rows;
    for (r = 0; r < NR; r++) {
        if (r < rows) {
            uint8_t *ur = p->tmp + (size_t)r * K;
            float *sr = p->ts + (size_t)r * nsub, *mr = p->tm + (size_t)r * nsub;
            unpack(w + row_bytes * r, K, ur, sr, mr);
        } else {
            memset(p->tmp + (size_t)r * K, 0, (size_t)K);
            for (j = 0; j < nsub; j++) p->ts[r * nsub + j] = p->tm[r * nsub + j] = 0.0f;
        }
    }
#ifdef CK_X86
    if (vec == 1)
        transpose_u(p->tmp, K, p->u);
    else if (vec == 2)
        transpose_u_avx2(p->tmp, K, p->u);
    else
#endif
        for (c = 0; c < K / 4; c++)
            for (r = 0; r < NR; r++) memcpy(p->u + ((size_t)c * NR + r) * 4, p->tmp + (size_t)r * K + 4 * c, 4);
    for (j = 0; j < nsub; j++)
        for (r = 0; r < NR; r++) {
            p->s[j * NR + r] = p->ts[r * nsub + j];
            p->m[j * NR + r] = p->tm[r * nsub + j];
        }
}

/* Per token and sub-block: the integer start of the accumulator (-z sum qa) or the float min term's
 * activation factor (da sum qa), for a panel's type; per tile of 8 tokens interleaved, [T / 8][K / L][8]
 * (zero past T) */
static void token_terms(const ck_qgemm_acts *a, const panel *p, void *terms)
{
    const int K = a->K, L = p->L, nsub = K / L, T = a->T;
    int t, j;
    memset(terms, 0, sizeof(int32_t) * (size_t)(T + 7) / 8 * 8 * nsub);
    for (t = 0; t < T; t++) {
        const int32_t *s16 = a->sum16 + (size_t)t * (K / 16);
        const float *d = a->d + (size_t)t * (K / 32);
        const size_t at = (size_t)(t / 8) * 8 * nsub + t % 8;
        for (j = 0; j < nsub; j++) {
            int32_t sum = L == 16 ? s16[j] : s16[2 * j] + s16[2 * j + 1];
            if (p->type == CK_Q_Q4_1 || p->type == CK_Q_Q5_1) /* q8_1's s = d sum, as its block stores it */
                ((float *)terms)[at + 8 * j] = a->s[(size_t)t * (K / 32) + j];
            else if (p->min)
                ((float *)terms)[at + 8 * j] = d[j * L / 32] * (float)sum;
            else
                ((int32_t *)terms)[at + 8 * j] = -p->z * sum;
        }
    }
}

/* ---- the tile: tokens x NR rows (a panel) ---------------------------------------------- */

typedef struct {
    float *out;
    int ldo;
    const float *bias, *add;
    int ld_add;
    int n0; /* the panel's first output column */
} out_rows;

static void store_ref(const out_rows *o, int t, int rows, const float *v)
{
    int r;
    for (r = 0; r < rows; r++) {
        const int n = o->n0 + r;
        float y = v[r];
        if (o->bias) y += o->bias[n];
        if (o->add) y += o->add[(size_t)t * o->ld_add + n];
        o->out[(size_t)t * o->ldo + n] = y;
    }
}

static void qtile_ref(const panel *p, const ck_qgemm_acts *a, const void *terms, int t0, int mr, const out_rows *o)
{
    const int K = a->K, L = p->L, nsub = K / L;
    int i, j, c, r, k;
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        const int8_t *q = a->q + (size_t)t * K;
        const float *d = a->d + (size_t)t * (K / 32);
        float f[NR];
        for (r = 0; r < NR; r++) f[r] = 0.0f;
        for (j = 0; j < nsub; j++) {
            int32_t acc[NR];
            const float da = d[j * L / 32];
            const size_t at = (size_t)(t / 8) * 8 * nsub + 8 * (size_t)j + t % 8;
            for (r = 0; r < NR; r++) acc[r] = p->min ? 0 : ((const int32_t *)terms)[at];
            for (c = j * L / 4; c < (j + 1) * L / 4; c++)
                for (r = 0; r < NR; r++)
                    for (k = 0; k < 4; k++) acc[r] += (int32_t)p->u[((size_t)c * NR + r) * 4 + k] * q[4 * c + k];
            for (r = 0; r < NR; r++) f[r] = fmaf((float)acc[r], p->s[j * NR + r] * da, f[r]);
            if (p->min)
                for (r = 0; r < NR; r++) f[r] = fmaf(p->m[j * NR + r], ((const float *)terms)[at], f[r]);
        }
        store_ref(o, t, p->rows, f);
    }
}

#ifdef CK_X86
/* store_ref on AVX-512: token t's row of the panel's first `rows` outputs, + bias, + add */
CK_AVX512 static inline void store_512(const out_rows *o, int t, int rows, __m512 y)
{
    const __mmask16 mask = (__mmask16)((1u << rows) - 1u);
    if (o->bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, o->bias + o->n0));
    if (o->add) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, o->add + (size_t)t * o->ld_add + o->n0));
    _mm512_mask_storeu_ps(o->out + (size_t)t * o->ldo + o->n0, mask, y);
}

/* QP_TOKENS tokens from token t (a multiple of QP_TOKENS: inside one tile of 8; the first mr real) x the
 * QP x 16 rows of QP = 2 panels. The activations, their scales and the per-token terms are interleaved per tile
 * of 8 tokens, so every broadcast is one load at a fixed offset from one pointer; each broadcast activation
 * feeds both panels' chunks (0.75 loads per vpdpbusd: two loads a cycle are the limit on Zen 5, as are two
 * of vpdpbusd, vmulps and vfmadd together), and the 8 integer and 8 float accumulators stay in registers.
 * Written out per token (QP_EACH): GCC keeps arrays of accumulators indexed in two dimensions in memory. L and
 * min are constants in each instance (qtile_avx512 below): with a run-time chunk count GCC moved every
 * accumulator through other registers and the stack per chunk (prefill 1.2x slower). */
#define QP 2        /* panels per pass of the AVX-512 body */
#define QP_TOKENS 4 /* tokens per call */
#define QP_EACH(M) M(0) M(1) M(2) M(3)
CK_AVX512 static inline __attribute__((always_inline)) void qtile_avx512_body(const panel *p, const ck_qgemm_acts *a,
                                                                              const void *terms, int t, int mr,
                                                                              const out_rows *o, const int L,
                                                                              const int min)
{
    const int K = a->K, nsub = K / L, cps = L / 4, tile = t / 8, h = t % 8;
    const int8_t *xt = a->qt + (size_t)tile * 8 * K + 4 * h;
    const float *dt = a->dt + (size_t)tile * 8 * (K / 32) + h;
    const int32_t *ti = (const int32_t *)terms + (size_t)tile * 8 * nsub + h;
    const float *tf = (const float *)terms + (size_t)tile * 8 * nsub + h;
    int j, c;
#define QP_DECL(i)                                                                                                   \
    __m512 f0##i = _mm512_setzero_ps(), f1##i = _mm512_setzero_ps();                                                \
    __m512i a0##i, a1##i;
    QP_EACH(QP_DECL)
    for (j = 0; j < nsub; j++) {
        const int8_t *xb = xt + (size_t)j * cps * 32;
        const float *dj = dt + (size_t)(j * L / 32) * 8;
        const uint8_t *u0 = p[0].u + (size_t)j * cps * NR * 4, *u1 = p[1].u + (size_t)j * cps * NR * 4;
        const __m512 s0 = _mm512_load_ps(p[0].s + j * NR), s1 = _mm512_load_ps(p[1].s + j * NR);
#define QP_INIT(i) a0##i = a1##i = min ? _mm512_setzero_si512() : _mm512_set1_epi32(ti[8 * j + i]);
        QP_EACH(QP_INIT)
#pragma GCC unroll 8
        for (c = 0; c < cps; c++) {
            const __m512i w0 = _mm512_load_si512((const void *)(u0 + (size_t)c * NR * 4));
            const __m512i w1 = _mm512_load_si512((const void *)(u1 + (size_t)c * NR * 4));
#define QP_DOT(i)                                                                                                    \
    {                                                                                                                \
        int32_t x4;                                                                                                  \
        __m512i x;                                                                                                   \
        memcpy(&x4, xb + 32 * c + 4 * i, 4);                                                                         \
        x = _mm512_set1_epi32(x4);                                                                                   \
        a0##i = _mm512_dpbusd_epi32(a0##i, w0, x);                                                                   \
        a1##i = _mm512_dpbusd_epi32(a1##i, w1, x);                                                                   \
    }
            QP_EACH(QP_DOT)
        }
        /* qtile_ref's float part: f = fmaf(acc, s da, f), then the min term */
#define QP_SCALE(i)                                                                                                  \
    {                                                                                                                \
        const __m512 da = _mm512_set1_ps(dj[i]);                                                                     \
        f0##i = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0##i), _mm512_mul_ps(s0, da), f0##i);                            \
        f1##i = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1##i), _mm512_mul_ps(s1, da), f1##i);                            \
    }
        QP_EACH(QP_SCALE)
        if (min) {
            const __m512 m0 = _mm512_load_ps(p[0].m + j * NR), m1 = _mm512_load_ps(p[1].m + j * NR);
#define QP_MIN(i)                                                                                                    \
    {                                                                                                                \
        const __m512 v = _mm512_set1_ps(tf[8 * j + i]);                                                              \
        f0##i = _mm512_fmadd_ps(m0, v, f0##i);                                                                       \
        f1##i = _mm512_fmadd_ps(m1, v, f1##i);                                                                       \
    }
            QP_EACH(QP_MIN)
        }
    }
#define QP_STORE(i)                                                                                                  \
    if (i < mr) {                                                                                                    \
        store_512(&o[0], t + i, p[0].rows, f0##i);                                                                   \
        if (p[1].rows) store_512(&o[1], t + i, p[1].rows, f1##i);                                                    \
    }
    QP_EACH(QP_STORE)
#undef QP_DECL
#undef QP_INIT
#undef QP_DOT
#undef QP_SCALE
#undef QP_MIN
#undef QP_STORE
}

CK_AVX512 static void qtile_avx512(const panel *p, const ck_qgemm_acts *a, const void *terms, int t, int mr,
                                  const out_rows *o)
{
    if (p->L == 16)
        qtile_avx512_body(p, a, terms, t, mr, o, 16, 0); /* q6_K: no min */
    else if (p->min)
        qtile_avx512_body(p, a, terms, t, mr, o, 32, 1);
    else
        qtile_avx512_body(p, a, terms, t, mr, o, 32, 0);
}
#endif

#ifdef CK_X86
/* The AVX2 tile: QP_TOKENS tokens x one panel, its 16 rows in two ymm of int32 lanes (rows 0-7, 8-15 of each
 * 64-byte chunk), each broadcast activation feeding both; per chunk DOT adds 4 products per lane: one vpdpbusd
 * with AVX-VNNI, else vpmaddubsw and vpmaddwd (pairs of u8 x s8 products in int16: at most 2 * 63 * 127, exact).
 * q8_0's u = q + 128 reaches 255, whose pairs would saturate there: with s8 the plain body multiplies |q| by the
 * activation with q's sign (vpsignb, as llama.cpp's AVX2 dot products), pairs within 2 * 128 * 127, and
 * starts the accumulator at 0 instead of -128 sum qa: the same integer sum q . qa. The float accumulators
 * live in memory (16 ymm registers hold the 8 integer ones, the weights and a broadcast), touched once per
 * sub-block, with the float operations of qtile_ref in its order, so the results are its bits. */
#define QA2_DOT_VNNI(acc, w, x) _mm256_dpbusd_avx_epi32(acc, w, x)
#define QA2_DOT_PLAIN(acc, w, x) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)))
#define QA2_BODY(NAME, ATTR, DOT)                                                                                      \
    ATTR static inline __attribute__((always_inline)) void NAME(const panel *p, const ck_qgemm_acts *a,                \
                                                                const void *terms, int t, int mr, const out_rows *o,   \
                                                                const int L, const int min, const int s8)              \
    {                                                                                                                  \
        const int K = a->K, nsub = K / L, cps = L / 4, tile = t / 8, h = t % 8;                                        \
        const int8_t *xt = a->qt + (size_t)tile * 8 * K + 4 * h;                                                       \
        const float *dt = a->dt + (size_t)tile * 8 * (K / 32) + h;                                                     \
        const int32_t *ti = (const int32_t *)terms + (size_t)tile * 8 * nsub + h;                                      \
        const float *tf = (const float *)terms + (size_t)tile * 8 * nsub + h;                                          \
        float f[QP_TOKENS][NR] __attribute__((aligned(32)));                                                           \
        int i, j, c;                                                                                                   \
        memset(f, 0, sizeof f);                                                                                        \
        for (j = 0; j < nsub; j++) {                                                                                   \
            const int8_t *xb = xt + (size_t)j * cps * 32;                                                              \
            const float *dj = dt + (size_t)(j * L / 32) * 8;                                                           \
            const uint8_t *u = p->u + (size_t)j * cps * NR * 4;                                                        \
            __m256i acc[QP_TOKENS][2];                                                                                 \
            for (i = 0; i < QP_TOKENS; i++)                                                                            \
                acc[i][0] = acc[i][1] = min || s8 ? _mm256_setzero_si256() : _mm256_set1_epi32(ti[8 * j + i]);         \
            _Pragma("GCC unroll 8") for (c = 0; c < cps; c++) {                                                        \
                __m256i w0 = _mm256_load_si256((const __m256i *)(u + (size_t)c * NR * 4)), q0 = w0;                    \
                __m256i w1 = _mm256_load_si256((const __m256i *)(u + (size_t)c * NR * 4 + 32)), q1 = w1;               \
                if (s8) {                                                                                              \
                    q0 = _mm256_xor_si256(w0, _mm256_set1_epi8((char)0x80)), w0 = _mm256_abs_epi8(q0);                 \
                    q1 = _mm256_xor_si256(w1, _mm256_set1_epi8((char)0x80)), w1 = _mm256_abs_epi8(q1);                 \
                }                                                                                                      \
                _Pragma("GCC unroll 4") for (i = 0; i < QP_TOKENS; i++) {                                              \
                    int32_t x4;                                                                                        \
                    __m256i x;                                                                                         \
                    memcpy(&x4, xb + 32 * c + 4 * i, 4);                                                               \
                    x = _mm256_set1_epi32(x4);                                                                         \
                    acc[i][0] = DOT(acc[i][0], w0, s8 ? _mm256_sign_epi8(x, q0) : x);                                  \
                    acc[i][1] = DOT(acc[i][1], w1, s8 ? _mm256_sign_epi8(x, q1) : x);                                  \
                }                                                                                                      \
            }                                                                                                          \
            for (i = 0; i < QP_TOKENS; i++) {                                                                          \
                const __m256 da = _mm256_set1_ps(dj[i]);                                                               \
                int k;                                                                                                 \
                for (k = 0; k < 2; k++) {                                                                              \
                    __m256 y = _mm256_load_ps(f[i] + 8 * k);                                                           \
                    y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][k]), _mm256_mul_ps(_mm256_load_ps(p->s + j * NR + 8 * k), da), y); \
                    if (min) y = _mm256_fmadd_ps(_mm256_load_ps(p->m + j * NR + 8 * k), _mm256_set1_ps(tf[8 * j + i]), y); \
                    _mm256_store_ps(f[i] + 8 * k, y);                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (i = 0; i < mr; i++) store_ref(o, t + i, p->rows, f[i]);                                                   \
    }
QA2_BODY(qtile_avx2_body, CK_QA2, QA2_DOT_PLAIN)
QA2_BODY(qtile_avxvnni_body, CK_QA2V, QA2_DOT_VNNI)

#define QA2_TILE(NAME, ATTR, BODY, S8)                                                                                 \
    ATTR static void NAME(const panel *p, const ck_qgemm_acts *a, const void *terms, int t, int mr, const out_rows *o) \
    {                                                                                                                  \
        if (p->L == 16)                                                                                                \
            BODY(p, a, terms, t, mr, o, 16, 0, 0); /* q6_K: no min */                                                  \
        else if (p->min)                                                                                               \
            BODY(p, a, terms, t, mr, o, 32, 1, 0);                                                                     \
        else if (S8 && p->z == 128)                                                                                    \
            BODY(p, a, terms, t, mr, o, 32, 0, 1); /* q8_0 on the plain body */                                        \
        else                                                                                                           \
            BODY(p, a, terms, t, mr, o, 32, 0, 0);                                                                     \
    }
QA2_TILE(qtile_avx2, CK_QA2, qtile_avx2_body, 1)
QA2_TILE(qtile_avxvnni, CK_QA2V, qtile_avxvnni_body, 0)
#endif

/* ---- the AMX tile: 16 tokens x NR rows ---------------------------------------------- */

/* AMX (Sapphire Rapids and later) has 8 tile registers of up to 16 rows of 64 bytes. TDPBSUD C += A B takes A as
 * signed bytes [M][4 G], B as unsigned bytes [G][4 N] (row g: 4 consecutive k for each of N columns, which is
 * the panel's chunk layout exactly) and C as int32 [M][N]. Per sub-block j of L weights:
 *   tile 1 (A) = the 16 tokens' L quants (a->q, rows K apart, zero past T), tile 2 (B) = the panel's L / 4
 *   chunks, tile 0 (C) = 0; TDPBSUD; C stored as int32 [16][16]
 * then the float part of qtile_ref on the stored sums: acc = C + the token's integer term (exact), f = fmaf(acc,
 * s da, f) and the min term. The same tile program (AMX_SUBBLOCK) runs on the real tiles with the AVX-512
 * float part, and on emulated tiles (amx_tiles.h: each instruction's semantics in C, and the checks the
 * hardware makes of the configuration) with the scalar float part, so a machine without AMX tests the tiling bit for
 * bit against the scalar twin. TM tokens per tile; results identical to the other bodies. */
#define TM 16

static void amx_config_for(amx_config *c, int L)
{
    memset(c, 0, sizeof *c);
    c->palette_id = 1;
    c->rows[0] = TM, c->colsb[0] = NR * 4; /* C: TM tokens x NR int32 */
    c->rows[1] = TM, c->colsb[1] = (uint16_t)L; /* A: TM tokens x L quants */
    c->rows[2] = (uint8_t)(L / 4), c->colsb[2] = NR * 4; /* B: L / 4 chunks of NR rows x 4 */
}

/* the emulated instructions, named as the intrinsics' arguments (a tile_emu `e` in scope) */
#define EMU_ZERO(t) emu_zero(&e, t)
#define EMU_LOAD(t, base, stride) emu_load(&e, t, base, stride)
#define EMU_DP(cc, aa, bb) emu_dpbsud(&e, cc, aa, bb)
#define EMU_STORE(t, base, stride) emu_store(&e, t, base, stride)

/* the tile program of sub-block j: C = A B into c[TM][NR] (tile names as above); the real one passes the
 * intrinsics (_tile_zero, _tile_loadd, _tile_dpbsud, _tile_stored), the emulated one EMU_* */
#define AMX_SUBBLOCK(ZERO, LOAD, DP, STORE)                                                                \
    do {                                                                                                    \
        ZERO(0);                                                                                            \
        LOAD(1, a->q + (size_t)t0 * K + (size_t)j * L, (size_t)K);                                          \
        LOAD(2, p->u + (size_t)j * L * NR, (size_t)NR * 4);                                                 \
        DP(0, 1, 2);                                                                                        \
        STORE(0, c, (size_t)NR * 4);                                                                        \
    } while (0)

/* the float part of sub-block j for tokens t0 .. t0 + mr - 1, as qtile_ref */
static void amx_float_ref(const panel *p, const ck_qgemm_acts *a, const void *terms, int t0, int mr, int j,
                          int32_t c[TM][NR], float f[TM][NR])
{
    const int K = a->K, L = p->L, nsub = K / L;
    int i, r;
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        const float da = a->d[(size_t)t * (K / 32) + j * L / 32];
        const size_t at = (size_t)(t / 8) * 8 * nsub + 8 * (size_t)j + t % 8;
        const int32_t base = p->min ? 0 : ((const int32_t *)terms)[at];
        for (r = 0; r < NR; r++) f[i][r] = fmaf((float)(c[i][r] + base), p->s[j * NR + r] * da, f[i][r]);
        if (p->min)
            for (r = 0; r < NR; r++) f[i][r] = fmaf(p->m[j * NR + r], ((const float *)terms)[at], f[i][r]);
    }
}

/* the emulated body; 0, or -1 when the tile program breaks a rule of the hardware's */
static int qtile_amx_emu(const panel *p, const ck_qgemm_acts *a, const void *terms, int t0, int mr, const out_rows *o)
{
    const int K = a->K, L = p->L, nsub = K / L;
    tile_emu e; /* 8 KiB of stack: the emulation runs in tests */
    amx_config cfg;
    int32_t c[TM][NR];
    float f[TM][NR];
    int i, j;
    amx_config_for(&cfg, L);
    emu_config(&e, &cfg);
    memset(f, 0, sizeof f);
    for (j = 0; j < nsub; j++) {
        AMX_SUBBLOCK(EMU_ZERO, EMU_LOAD, EMU_DP, EMU_STORE);
        amx_float_ref(p, a, terms, t0, mr, j, c, f);
    }
    if (e.fault) return -1;
    for (i = 0; i < mr; i++) store_ref(o, t0 + i, p->rows, f[i]);
    return 0;
}

#ifdef CK_X86
/* the float part on AVX-512: the same operations as amx_float_ref, 16 rows a vector */
CK_AMX static inline void amx_float_512(const panel *p, const ck_qgemm_acts *a, const void *terms, int t0, int mr,
                                        int j, int32_t c[TM][NR], float f[TM][NR])
{
    const int K = a->K, L = p->L, nsub = K / L;
    const __m512 s = _mm512_load_ps(p->s + j * NR);
    int i;
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        const float da = a->d[(size_t)t * (K / 32) + j * L / 32];
        const size_t at = (size_t)(t / 8) * 8 * nsub + 8 * (size_t)j + t % 8;
        __m512i acc = _mm512_loadu_si512((const void *)c[i]);
        __m512 y = _mm512_loadu_ps(f[i]);
        if (!p->min) acc = _mm512_add_epi32(acc, _mm512_set1_epi32(((const int32_t *)terms)[at]));
        y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(s, _mm512_set1_ps(da)), y);
        if (p->min) y = _mm512_fmadd_ps(_mm512_load_ps(p->m + j * NR), _mm512_set1_ps(((const float *)terms)[at]), y);
        _mm512_storeu_ps(f[i], y);
    }
}

/* the real tiles (configured by the caller: amx_config_for and _tile_loadconfig) */
CK_AMX static void qtile_amx(const panel *p, const ck_qgemm_acts *a, const void *terms, int t0, int mr, const out_rows *o)
{
    const int K = a->K, L = p->L, nsub = K / L;
    int32_t c[TM][NR] __attribute__((aligned(64)));
    float f[TM][NR] __attribute__((aligned(64)));
    int i, j;
    memset(f, 0, sizeof f);
    for (j = 0; j < nsub; j++) {
        AMX_SUBBLOCK(_tile_zero, _tile_loadd, _tile_dpbsud, _tile_stored);
        amx_float_512(p, a, terms, t0, mr, j, c, f);
    }
    for (i = 0; i < mr; i++) store_512(o, t0 + i, p->rows, _mm512_loadu_ps(f[i]));
}

CK_AMX static void amx_begin(int L)
{
    amx_config cfg;
    amx_config_for(&cfg, L);
    _tile_loadconfig(&cfg);
}

CK_AMX static void amx_end(void) { _tile_release(); }
#endif

/* ---- rows of one part, for every token ------------------------------------------ */

int ck_qgemm_rows(float *out, int ldo, const ck_qgemm_acts *a, int type, const void *w, const float *bias,
                  const float *add, int ld_add, int64_t r0, int64_t r1, int64_t col0, int body)
{
    const int K = a->K, T = a->T;
    /* the AVX-512 or AVX2 unpacking and transposes (panel_pack) */
    const int fast = body == CK_QGEMM_VNNI || body == CK_QGEMM_AMX, v256 = body == CK_QGEMM_AVX2 || body == CK_QGEMM_AVXVNNI;
    const int tiles = body == CK_QGEMM_AMX || body == CK_QGEMM_AMX_EMU;
#ifdef CK_X86
    const int np = body == CK_QGEMM_VNNI ? QP : 1; /* panels per pass */
    panel p[QP];
    out_rows o[QP];
#else
    const int np = 1;
    panel p[1];
    out_rows o[1];
#endif
    const size_t rb = ck_qtype_row_bytes(type, K);
    void *terms;
    int64_t g;
    int t, k, made = 0, rc = 0;
    size_t mark;
    if (r1 <= r0) return 0;
    mark = ck_ws_mark();
    terms = ck_ws_alloc(sizeof(int32_t) * (size_t)(T + 7) / 8 * 8 * (K / 16) + 64);
    while (terms && made < np && !panel_init(&p[made], K)) made++;
    if (made < np) {
        while (made > 0) panel_free(&p[--made]);
        ck_ws_free(terms);
        ck_ws_reset(mark);
        return -1;
    }
#ifdef CK_X86
    if (body == CK_QGEMM_AMX) amx_begin(desc_of(type)->L);
#endif
    for (g = r0; g < r1 && !rc; g += (int64_t)np * NR) {
        for (k = 0; k < np; k++) { /* a panel past r1 is all zero rows (stored nowhere) */
            const int64_t gk = g + (int64_t)k * NR;
            const int rows = gk >= r1 ? 0 : (int)(r1 - gk < NR ? r1 - gk : NR);
            panel_pack(&p[k], type, (const char *)w + rb * (size_t)(rows ? gk : g), rb, rows, K, fast ? 1 : v256 ? 2 : 0);
            o[k].out = out;
            o[k].ldo = ldo;
            o[k].bias = bias;
            o[k].add = add;
            o[k].ld_add = ld_add;
            o[k].n0 = (int)(col0 + gk);
        }
        if (g == r0) token_terms(a, &p[0], terms);
        if (tiles) {
            for (t = 0; t < T && !rc; t += TM) {
                const int mr = T - t < TM ? T - t : TM;
#ifdef CK_X86
                if (body == CK_QGEMM_AMX) {
                    qtile_amx(&p[0], a, terms, t, mr, &o[0]);
                    continue;
                }
#endif
                rc = qtile_amx_emu(&p[0], a, terms, t, mr, &o[0]) ? -2 : 0;
            }
            continue;
        }
#ifdef CK_X86
        if (fast) {
            for (t = 0; t < T; t += QP_TOKENS) qtile_avx512(p, a, terms, t, T - t < QP_TOKENS ? T - t : QP_TOKENS, o);
            continue;
        }
        if (v256) {
            for (t = 0; t < T; t += QP_TOKENS)
                (body == CK_QGEMM_AVXVNNI ? qtile_avxvnni : qtile_avx2)(&p[0], a, terms, t,
                                                                        T - t < QP_TOKENS ? T - t : QP_TOKENS, &o[0]);
            continue;
        }
#endif
        for (t = 0; t < T; t += MR) qtile_ref(&p[0], a, terms, t, T - t < MR ? T - t : MR, &o[0]);
    }
#ifdef CK_X86
    if (body == CK_QGEMM_AMX) amx_end();
#endif
    for (k = 0; k < np; k++) panel_free(&p[k]);
    ck_ws_free(terms);
    ck_ws_reset(mark);
    return rc;
}

int ck_qgemm_body(void)
{
#ifdef CK_X86
    if (ck_cpu_amx()) return CK_QGEMM_AMX;
    if (ck_cpu_avx512vnni()) return CK_QGEMM_VNNI;
    if (ck_cpu_vnni()) return CK_QGEMM_AVXVNNI;
    if (ck_cpu_avx2()) return CK_QGEMM_AVX2;
#endif
    return CK_QGEMM_REF;
}

int ck_qgemm_fast(void) { return ck_qgemm_body() != CK_QGEMM_REF; }

int ck_qgemm_takes(int type) { return desc_of(type) && ck_qgemm_fast(); }
