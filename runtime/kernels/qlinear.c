/*
 * qlinear.c — y = x W^T with W kept in its stored format (ck_quant.h).
 *
 * Few tokens (decode): each token's activations are quantized once to the
 * weight type's partner (q8_0 / q8_1 / q8_K, as llama.cpp does), and every
 * output is one integer dot product of a weight row with them; f16 / bf16
 * rows are converted in registers against float activations. Rows are split
 * into one contiguous range per OpenMP thread, so weights stream once. With
 * AVX-512 VNNI, q8_0 / q4_0 / q4_K / q6_K rows take 64 weights per
 * instruction (the activations prepared once per token: contiguous quants,
 * float scales, and the weights' offset folded into the accumulator's start),
 * and the activations are quantized by qgemm.c's vector quantizer (3.4 -> 1.0
 * us a 768-wide token; stories110M q4_0 decode 293 -> 333 tok/s, q4_K_M 278 ->
 * 369).
 *
 * Many tokens (prefill): the activations of all T tokens are quantized once
 * as decode quantizes them, and each thread runs its rows through the int8
 * GEMM of qgemm.c (AVX-512 VNNI; stories110M q4_0 prefill 920 -> 1820 tok/s,
 * 2.4x its float tiles per matrix); f32 / f16 / bf16 parts go through
 * fgemm.c's FMA GEMM (1.1-1.3x the tiles below). On a CPU without AVX-512,
 * every part is dequantized in tiles of CK_QTILE rows into a float buffer with
 * one sgemm per tile, so the dequantization is paid once per tile for all T
 * tokens and the arithmetic is OpenBLAS's.
 *
 * The AVX2 bodies follow the integer scheme of llama.cpp's x86 kernels
 * (maddubs on |w| and sign-adjusted activations, then madd into int32); the
 * scalar twins in quant.c give the same integer sums.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ck_errors.h"
#include "ck_kernels.h"
#include "ck_quant.h"
#include "ck_simd.h"
#include "ck_quant_blocks.h"
#include "fgemm.h"
#include "qdot4.h"
#include "qdot_neon.h"
#include "qgemm.h"

#define CK_QTILE 64      /* rows dequantized per sgemm in the prefill path */
#define CK_QGEMM_MIN_T (CK_LINEAR_Q_DECODE_T + 1) /* from this many tokens on, the prefill paths */
/* the same for the AVX-VNNI and AVX2 int8 GEMMs (prefill_min_t) */
#define CK_QGEMM_AVXVNNI_MIN_T 12
#define CK_QGEMM_AVX2_MIN_T 20
#define CK_DOT_CHUNK_BYTES (64 * 1024) /* dot_rows with several tokens: the rows' bytes each token passes over at once */

/* ---- scalar dot products: the reference twins of the AVX2 bodies ------------------ */

/* the 32 quants of a q5 / q4 block as signed or unsigned ints, element order */
static void unpack_q5(const uint8_t *qs, const uint8_t *qh4, int offset, int *q)
{
    uint32_t qh;
    int j;
    memcpy(&qh, qh4, 4);
    for (j = 0; j < CK_QK / 2; j++) {
        q[j] = ((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - offset;
        q[j + CK_QK / 2] = ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - offset;
    }
}

/* f32 / f16 / bf16 rows against float activations, in double */
static float dot_ref_f32(int64_t n, const void *vw, const void *va)
{
    const float *w = (const float *)vw, *a = (const float *)va;
    double acc = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) acc += (double)w[i] * a[i];
    return (float)acc;
}

static float dot_ref_f16(int64_t n, const void *vw, const void *va)
{
    const uint16_t *w = (const uint16_t *)vw;
    const float *a = (const float *)va;
    double acc = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) acc += (double)ck_fp16_to_fp32(w[i]) * a[i];
    return (float)acc;
}

static float dot_ref_bf16(int64_t n, const void *vw, const void *va)
{
    const uint16_t *w = (const uint16_t *)vw;
    const float *a = (const float *)va;
    double acc = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) acc += (double)ck_bf16_to_fp32(w[i]) * a[i];
    return (float)acc;
}

static float dot_ref_q8_0(int64_t n, const void *vw, const void *va)
{
    const ck_block_q8_0 *w = (const ck_block_q8_0 *)vw, *a = (const ck_block_q8_0 *)va;
    float sum = 0.0f;
    int64_t i;
    int j;
    for (i = 0; i < n / CK_QK; i++) {
        int s = 0;
        for (j = 0; j < CK_QK; j++) s += w[i].qs[j] * a[i].qs[j];
        sum += s * ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d);
    }
    return sum;
}

static float dot_ref_q4_0(int64_t n, const void *vw, const void *va)
{
    const ck_block_q4_0 *w = (const ck_block_q4_0 *)vw;
    const ck_block_q8_0 *a = (const ck_block_q8_0 *)va;
    float sum = 0.0f;
    int64_t i;
    int j;
    for (i = 0; i < n / CK_QK; i++) {
        int s = 0;
        for (j = 0; j < CK_QK / 2; j++)
            s += ((w[i].qs[j] & 0x0F) - 8) * a[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + CK_QK / 2];
        sum += s * ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d);
    }
    return sum;
}

static float dot_ref_q4_1(int64_t n, const void *vw, const void *va)
{
    const ck_block_q4_1 *w = (const ck_block_q4_1 *)vw;
    const ck_block_q8_1 *a = (const ck_block_q8_1 *)va;
    float sum = 0.0f;
    int64_t i;
    int j;
    for (i = 0; i < n / CK_QK; i++) {
        int s = 0;
        for (j = 0; j < CK_QK / 2; j++)
            s += (w[i].qs[j] & 0x0F) * a[i].qs[j] + (w[i].qs[j] >> 4) * a[i].qs[j + CK_QK / 2];
        sum += ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d) * s + ck_fp16_to_fp32(w[i].m) * ck_fp16_to_fp32(a[i].s);
    }
    return sum;
}

static float dot_ref_q5_0(int64_t n, const void *vw, const void *va)
{
    const ck_block_q5_0 *w = (const ck_block_q5_0 *)vw;
    const ck_block_q8_0 *a = (const ck_block_q8_0 *)va;
    float sum = 0.0f;
    int64_t i;
    int j;
    for (i = 0; i < n / CK_QK; i++) {
        int q[CK_QK], s = 0;
        unpack_q5(w[i].qs, w[i].qh, 16, q);
        for (j = 0; j < CK_QK; j++) s += q[j] * a[i].qs[j];
        sum += s * ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d);
    }
    return sum;
}

static float dot_ref_q5_1(int64_t n, const void *vw, const void *va)
{
    const ck_block_q5_1 *w = (const ck_block_q5_1 *)vw;
    const ck_block_q8_1 *a = (const ck_block_q8_1 *)va;
    float sum = 0.0f;
    int64_t i;
    int j;
    for (i = 0; i < n / CK_QK; i++) {
        int q[CK_QK], s = 0;
        unpack_q5(w[i].qs, w[i].qh, 0, q);
        for (j = 0; j < CK_QK; j++) s += q[j] * a[i].qs[j];
        sum += ck_fp16_to_fp32(w[i].d) * ck_fp16_to_fp32(a[i].d) * s + ck_fp16_to_fp32(w[i].m) * ck_fp16_to_fp32(a[i].s);
    }
    return sum;
}

/* one q4_K / q5_K super-block (qh: q5_K's fifth bits, NULL for q4_K) against a q8_K block */
static float dot_ref_k(const uint8_t *scales12, uint16_t d, uint16_t dmin, const uint8_t *q, const uint8_t *qh,
                       const ck_block_q8_K *a)
{
    uint8_t sc[8], mn[8];
    int sumi = 0, summ = 0, j, l;
    ck_k4_scales_mins(scales12, sc, mn);
    for (j = 0; j < 8; j++) {
        int s = 0;
        for (l = 0; l < 32; l++) {
            int v = j & 1 ? q[32 * (j / 2) + l] >> 4 : q[32 * (j / 2) + l] & 0xF;
            if (qh && (qh[l] >> j) & 1) v += 16;
            s += v * a->qs[32 * j + l];
        }
        sumi += sc[j] * s;
        summ += mn[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    return a->d * (ck_fp16_to_fp32(d) * sumi - ck_fp16_to_fp32(dmin) * summ);
}

static float dot_ref_q4_K(int64_t n, const void *vw, const void *va)
{
    const ck_block_q4_K *w = (const ck_block_q4_K *)vw;
    const ck_block_q8_K *a = (const ck_block_q8_K *)va;
    float sum = 0.0f;
    int64_t i;
    for (i = 0; i < n / CK_QK_K; i++) sum += dot_ref_k(w[i].scales, w[i].d, w[i].dmin, w[i].qs, NULL, &a[i]);
    return sum;
}

static float dot_ref_q5_K(int64_t n, const void *vw, const void *va)
{
    const ck_block_q5_K *w = (const ck_block_q5_K *)vw;
    const ck_block_q8_K *a = (const ck_block_q8_K *)va;
    float sum = 0.0f;
    int64_t i;
    for (i = 0; i < n / CK_QK_K; i++) sum += dot_ref_k(w[i].scales, w[i].d, w[i].dmin, w[i].qs, w[i].qh, &a[i]);
    return sum;
}

static float dot_ref_q6_K(int64_t n, const void *vw, const void *va)
{
    const ck_block_q6_K *w = (const ck_block_q6_K *)vw;
    const ck_block_q8_K *a = (const ck_block_q8_K *)va;
    float sum = 0.0f;
    int64_t i;
    int j, l;
    for (i = 0; i < n / CK_QK_K; i++) {
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        const int8_t *y = a[i].qs;
        int q[CK_QK_K], sumi = 0;
        for (j = 0; j < CK_QK_K; j += 128, ql += 64, qh += 32)
            for (l = 0; l < 32; l++) {
                q[j + l + 0] = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                q[j + l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                q[j + l + 64] = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                q[j + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
        for (j = 0; j < CK_QK_K / 16; j++) {
            int s = 0;
            for (l = 0; l < 16; l++) s += q[16 * j + l] * y[16 * j + l];
            sumi += w[i].scales[j] * s;
        }
        sum += a[i].d * ck_fp16_to_fp32(w[i].d) * sumi;
    }
    return sum;
}

#ifdef CK_X86

#define CK_AVX2_F16 __attribute__((target("avx2,fma,f16c")))

CK_AVX2_F16 static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* int8 x int8 -> 8 float sums of 4 products */
CK_AVX2_F16 static inline __m256 dot_i8(__m256i x, __m256i y)
{
    const __m256i ax = _mm256_sign_epi8(x, x), sy = _mm256_sign_epi8(y, x);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)));
}

/* uint8 (< 128) x int8 -> 8 float sums of 4 products */
CK_AVX2_F16 static inline __m256 dot_u8(__m256i ux, __m256i y)
{
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ux, y)));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles first, then high ones */
CK_AVX2_F16 static inline __m256i nibbles32(const uint8_t *p)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set1_epi8(0x0F), _mm256_set_m128i(_mm_srli_epi16(t, 4), t));
}

/* 32 bits -> 32 bytes of 0x00 / 0xFF */
CK_AVX2_F16 static inline __m256i bits32(const uint8_t *p)
{
    uint32_t x32;
    __m256i bytes;
    memcpy(&x32, p, 4);
    bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32),
                                _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

CK_AVX2_F16 static float dot_q8_0(int64_t nb, const ck_block_q8_0 *w, const ck_block_q8_0 *a)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i;
    for (i = 0; i < nb; i++) {
        const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
        acc = _mm256_fmadd_ps(d, dot_i8(_mm256_loadu_si256((const __m256i *)w[i].qs),
                                        _mm256_loadu_si256((const __m256i *)a[i].qs)), acc);
    }
    return ck_hsum8(acc);
}

CK_AVX2_F16 static float dot_q4_0(int64_t nb, const ck_block_q4_0 *w, const ck_block_q8_0 *a)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i;
    for (i = 0; i < nb; i++) {
        const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
        const __m256i qx = _mm256_sub_epi8(nibbles32(w[i].qs), _mm256_set1_epi8(8));
        acc = _mm256_fmadd_ps(d, dot_i8(qx, _mm256_loadu_si256((const __m256i *)a[i].qs)), acc);
    }
    return ck_hsum8(acc);
}

CK_AVX2_F16 static float dot_q4_1(int64_t nb, const ck_block_q4_1 *w, const ck_block_q8_1 *a)
{
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    int64_t i;
    for (i = 0; i < nb; i++) {
        const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
        summs += h2f(w[i].m) * h2f(a[i].s);
        acc = _mm256_fmadd_ps(d, dot_u8(nibbles32(w[i].qs), _mm256_loadu_si256((const __m256i *)a[i].qs)), acc);
    }
    return ck_hsum8(acc) + summs;
}

CK_AVX2_F16 static float dot_q5_0(int64_t nb, const ck_block_q5_0 *w, const ck_block_q8_0 *a)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i;
    for (i = 0; i < nb; i++) {
        const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
        /* q - 16: a clear fifth bit sets the byte's top nibble (negative) */
        const __m256i hi = _mm256_andnot_si256(bits32(w[i].qh), _mm256_set1_epi8((char)0xF0));
        const __m256i qx = _mm256_or_si256(nibbles32(w[i].qs), hi);
        acc = _mm256_fmadd_ps(d, dot_i8(qx, _mm256_loadu_si256((const __m256i *)a[i].qs)), acc);
    }
    return ck_hsum8(acc);
}

CK_AVX2_F16 static float dot_q5_1(int64_t nb, const ck_block_q5_1 *w, const ck_block_q8_1 *a)
{
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    int64_t i;
    for (i = 0; i < nb; i++) {
        const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
        const __m256i hi = _mm256_and_si256(bits32(w[i].qh), _mm256_set1_epi8(0x10));
        summs += h2f(w[i].m) * h2f(a[i].s);
        acc = _mm256_fmadd_ps(d, dot_u8(_mm256_or_si256(nibbles32(w[i].qs), hi),
                                        _mm256_loadu_si256((const __m256i *)a[i].qs)), acc);
    }
    return ck_hsum8(acc) + summs;
}

/* The 8 6-bit scales and 8 mins of a q4_K / q5_K block (12 bytes; ck_k4_scales_mins) as 8 int16 each, with 32-bit
 * word operations: scales 0-3 / mins 0-3 are the low 6 bits of bytes 0-3 / 4-7; scales 4-7 the low nibbles of
 * bytes 8-11 with bytes 0-3's top two bits above them, mins 4-7 the high nibbles with bytes 4-7's top bits.
 * (k4_scales_mins8 below does it in vector registers: in this AVX2 body, whose vector ports are its limit, that
 * was slower: q5_K 1.04x the time, q4_K 1.01x, on the AMD EPYC Zen 5 VM with CK_KERNELS=avx2.) */
CK_AVX2_F16 static inline void k4_scales16(const uint8_t *s12, __m128i *sc, __m128i *mn)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s12, 4);
    memcpy(&u1, s12 + 4, 4);
    memcpy(&u2, s12 + 8, 4);
    {
        const uint32_t s_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
        const uint32_t s_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
        const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
        const __m128i b = _mm_setr_epi32((int)s_lo, (int)s_hi, (int)m_lo, (int)m_hi);
        *sc = _mm_cvtepu8_epi16(b);
        *mn = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(b, b));
    }
}

/* q4_K / q5_K: x = d sc q - dmin m; sum = d_a (d sum_j sc_j (q_j . a_j) - dmin sum_j m_j bsum_j). The scales reach
 * the int16 lanes by one byte shuffle each; the mins' part is one madd with the activations' sums of 32.
 * nt tokens (1, or 2 for a batch of sequences' decode step: a constant in each caller, so the loops over the
 * tokens unroll) share each block's unpacking; each token's operations and their order do not depend on nt, so
 * a token's result is the same alone or paired, bit for bit. v[t] = W . a[t] */
CK_AVX2_F16 static inline __attribute__((always_inline)) void qk45_rows(int nt, int q5, int64_t nb, const void *vw,
                                                                       const ck_block_q8_K *const *a,
                                                                       int pf, float *v)
{
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m128 accm[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    int64_t i;
    int j, t;
    for (i = 0; i < nb; i++) {
        const ck_block_q4_K *w4 = (const ck_block_q4_K *)vw + i;
        const ck_block_q5_K *w5 = (const ck_block_q5_K *)vw + i;
        const uint8_t *q = q5 ? w5->qs : w4->qs;
        if (pf) ck_pf_lines(q5 ? (const void *)w5 : (const void *)w4, 3); /* 144 / 176 bytes a block */
        const float dw = h2f(q5 ? w5->d : w4->d), dmin = h2f(q5 ? w5->dmin : w4->dmin);
        __m128i sc, mn;
        __m256i sumi[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, hbits = _mm256_setzero_si256(), sc2;
        k4_scales16(q5 ? w5->scales : w4->scales, &sc, &mn);
        for (t = 0; t < nt; t++) { /* the mins against the sums of 32 (adjacent pairs of the 16 sums of 16) */
            const __m128i sums = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a[t][i].bsums),
                                                _mm_loadu_si128((const __m128i *)(a[t][i].bsums + 8)));
            accm[t] = _mm_fmadd_ps(_mm_set1_ps(a[t][i].d * dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mn, sums)), accm[t]);
        }
        sc2 = _mm256_broadcastsi128_si256(sc);
        if (q5) hbits = _mm256_loadu_si256((const __m256i *)w5->qh);
        for (j = 0; j < 4; j++, q += 32) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)q);
            /* int16 words 2j and 2j + 1 of the scales in every lane */
            const __m256i s_lo = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j))));
            const __m256i s_hi = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j + 1))));
            __m256i lo = _mm256_and_si256(bits, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            if (q5) { /* bit 2j of qh[l] is the fifth bit of the low half, 2j+1 of the high half */
                const __m256i m = _mm256_set1_epi8(0x10);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j), 4), m));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j + 1), 4), m));
            }
            for (t = 0; t < nt; t++) {
                const int8_t *y = a[t][i].qs + 64 * j;
                const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)y));
                const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 32)));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s_lo, plo));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s_hi, phi));
            }
        }
        for (t = 0; t < nt; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][i].d * dw), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (t = 0; t < nt; t++) {
        __m128 m = _mm_add_ps(accm[t], _mm_movehl_ps(accm[t], accm[t]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        v[t] = ck_hsum8(acc[t]) - _mm_cvtss_f32(m);
    }
}

CK_AVX2_F16 static inline float dot_qk45(int q5, int64_t nb, const void *vw, const ck_block_q8_K *a, int pf)
{
    float v;
    qk45_rows(1, q5, nb, vw, &a, pf, &v);
    return v;
}

CK_AVX2_F16 static void dot2_qk45(int q5, int64_t nb, const void *vw, const ck_block_q8_K *const *a, int pf,
                                  float *v)
{
    qk45_rows(2, q5, nb, vw, a, pf, v);
}

/* q6_K: x = d sc (q - 32), q in [0, 64): the 32 is taken out through bsums (one madd with the 16 scales); each
 * group of 32 takes its two scales by one byte shuffle of the 8 scales of its half. nt tokens as qk45_rows. */
CK_AVX2_F16 static inline __attribute__((always_inline)) void q6_K_rows(int nt, int64_t nb, const ck_block_q6_K *w,
                                                                       const ck_block_q8_K *const *a,
                                                                       int pf, float *v)
{
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    int64_t i;
    int j, g, t;
    for (i = 0; i < nb; i++) {
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        if (pf) ck_pf_lines(w + i, 4); /* 210 bytes a block */
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const float dw = h2f(w[i].d);
        __m256i sumi[2];
        for (t = 0; t < nt; t++) /* 32 sum_j sc_j bsum_j, to take out */
            sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a[t][i].bsums)), 5));
        for (j = 0; j < 2; j++, ql += 64, qh += 32) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
            /* scales 8j .. 8j + 7 as int16, in both halves */
            const __m256i sc = _mm256_broadcastsi128_si256(j ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
            for (g = 0; g < 4; g++) { /* 32 elements, scales 2g (first 16) and 2g + 1 (of this half's 8) */
                const __m256i s = _mm256_shuffle_epi8(sc, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * g + 1))),
                                                                            _mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * g)))));
                for (t = 0; t < nt; t++) {
                    const __m256i p = _mm256_maddubs_epi16(q[g], _mm256_loadu_si256((const __m256i *)(a[t][i].qs + 128 * j + 32 * g)));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s, p));
                }
            }
        }
        for (t = 0; t < nt; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][i].d * dw), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (t = 0; t < nt; t++) v[t] = ck_hsum8(acc[t]);
}

CK_AVX2_F16 static inline float dot_q6_K(int64_t nb, const ck_block_q6_K *w, const ck_block_q8_K *a, int pf)
{
    float v;
    q6_K_rows(1, nb, w, &a, pf, &v);
    return v;
}

CK_AVX2_F16 static void dot2_q6_K(int64_t nb, const ck_block_q6_K *w, const ck_block_q8_K *const *a, int pf,
                                  float *v)
{
    q6_K_rows(2, nb, w, a, pf, v);
}

CK_AVX2_F16 static float dot_f16(int64_t n, const uint16_t *w, const float *a)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float s;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))), _mm256_loadu_ps(a + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))), _mm256_loadu_ps(a + i + 8),
                               acc1);
    }
    s = ck_hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += h2f(w[i]) * a[i];
    return s;
}

CK_AVX2_F16 static inline __m256 bf16x8(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

CK_AVX2_F16 static float dot_bf16(int64_t n, const uint16_t *w, const float *a)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float s;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(bf16x8(w + i), _mm256_loadu_ps(a + i), acc0);
        acc1 = _mm256_fmadd_ps(bf16x8(w + i + 8), _mm256_loadu_ps(a + i + 8), acc1);
    }
    s = ck_hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)w[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        s += f * a[i];
    }
    return s;
}

CK_AVX2_F16 static float dot_f32(int64_t n, const float *w, const float *a)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float s;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(a + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(a + i + 8), acc1);
    }
    s = ck_hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += w[i] * a[i];
    return s;
}

/* f16 / bf16 rows to float in registers (the tile path's dequantization) */
CK_AVX2_F16 static void f16_row(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

CK_AVX2_F16 static void bf16_row(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, bf16x8(x + i));
    for (; i < n; i++) y[i] = ck_bf16_to_fp32(x[i]);
}


/* ---- AVX-512 VNNI decode bodies: 64 weights per vpdpbusd, exact integer sums per block ----
 * q8_0 and q4_0 multiply unsigned weights (q + 128, or the raw nibble) and take
 * the offset out with a second vpdpbusd of the activations against the offset
 * (128 or 8 in every byte): p - o = sum q a exactly, with no sign juggling. */
#define CK_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

/* One token's q8_0 activations as the q8_0 / q4_0 bodies below read them: the quants contiguous (two blocks
 * per 64-byte load), the scales as floats, and per pair of blocks the 16 int32 lanes of vpdpbusd's
 * -z * (sum of the lane's 4 activations) for the weights' offset z (8 for q4_0's nibbles, 128 for q8_0's
 * q + 128): the accumulator starts there, so p = sum q a exactly and nothing is done per row for it. */
typedef struct {
    const int8_t *q;
    const float *d;
    const int32_t *off8, *off128;
} act512;

/* the scales of blocks i, i + 1 of a row (f16, `stride` bytes apart) times the activations': lanes 0-7, 8-15
 * (a gather of 16 blocks' scales at once measured 1.3x slower in decode) */
CK_AVX512_VNNI static inline __m512 scales2(const uint16_t *d0, size_t stride, const float *da)
{
    const uint32_t both = *d0 | (uint32_t)*(const uint16_t *)((const char *)d0 + stride) << 16;
    const __m128 d = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)both)), _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)da)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_castps128_ps512(d));
}

/* q4_0 / q8_0 rows: pairs of blocks, 64 weights per vpdpbusd (the offset already in the accumulator) */
CK_AVX512_VNNI static float dot_q40_q80_512(int q8, int64_t nb, const void *vw, const act512 *a, int pf)
{
    const __m512i order = _mm512_set_epi64(7, 6, 3, 2, 5, 4, 1, 0), flip = _mm512_set1_epi8((char)0x80);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const size_t stride = q8 ? sizeof(ck_block_q8_0) : sizeof(ck_block_q4_0);
    const int32_t *off = q8 ? a->off128 : a->off8;
    const char *w = (const char *)vw;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const char *b0 = w + stride * i, *b1 = b0 + stride;
        __m512i u, p;
        if (pf) ck_pf_lines(b0, 2); /* 36 / 68 bytes a pair, up to 34 more between rows */
        if (q8) {
            u = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                                                    _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1),
                                 flip); /* q + 128 */
        } else {
            const __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 2))),
                                                      _mm_loadu_si128((const __m128i *)(b1 + 2)), 1);
            /* [lo0 lo1 | hi0 hi1] -> [lo0 hi0 lo1 hi1]: each block's 32 nibbles in element order */
            u = _mm512_permutexvar_epi64(order, _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(t, m4)),
                                                                   _mm256_and_si256(_mm256_srli_epi16(t, 4), m4), 1));
        }
        p = _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)(off + 8 * i)), u,
                                _mm512_loadu_si512((const void *)(a->q + 32 * i)));
        acc = _mm512_fmadd_ps(scales2((const uint16_t *)b0, stride, a->d + i), _mm512_cvtepi32_ps(p), acc);
    }
    if (i < nb) { /* an odd last block: lanes 0-7 */
        const char *b0 = w + stride * i;
        __m512i u, p;
        if (q8) {
            u = _mm512_xor_si512(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))), flip);
        } else {
            const __m128i t = _mm_loadu_si128((const __m128i *)(b0 + 2));
            u = _mm512_castsi256_si512(_mm256_and_si256(_mm256_set1_epi8(0x0F), _mm256_set_m128i(_mm_srli_epi16(t, 4), t)));
        }
        p = _mm512_maskz_dpbusd_epi32(0xFF, _mm512_maskz_loadu_epi32(0xFF, off + 8 * i), u,
                                      _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a->q + 32 * i))));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(h2f(*(const uint16_t *)b0) * a->d[i]), _mm512_cvtepi32_ps(p), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* act512's offsets of one token's nb blocks of contiguous quants q: off8 / off128[8 nb] */
CK_AVX512_VNNI static void act512_offsets(const int8_t *q, int64_t nb, int32_t *off8, int32_t *off128)
{
    int64_t b;
    for (b = 0; b < nb; b++) {
        const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                              _mm256_loadu_si256((const __m256i *)(q + 32 * b))); /* sums of 4 */
        _mm256_storeu_si256((__m256i *)(off8 + 8 * b), _mm256_mullo_epi32(s, _mm256_set1_epi32(-8)));
        _mm256_storeu_si256((__m256i *)(off128 + 8 * b), _mm256_mullo_epi32(s, _mm256_set1_epi32(-128)));
    }
}

/* ck_vec_dot's q8_0 / q4_0 on AVX-512: the activations prepared here (decode prepares them once per token), 32
 * blocks at a time in buffers on the stack. (They came from three mallocs per call: as the 4-bit VBMI bodies'
 * tail dot, one call per row where K is not a multiple of 128, that made q4_0 decode of SmolLM2's shape, K 576,
 * read 9 GB/s where the AVX2 path read 19, on an AMD EPYC Zen 5 VM.) */
#define CK_UNPREPARED_CHUNK 32
static float dot_512_unprepared(int type, int64_t nb, const void *w, const ck_block_q8_0 *blk)
{
    int8_t q[CK_UNPREPARED_CHUNK * 32] __attribute__((aligned(64)));
    float d[CK_UNPREPARED_CHUNK] __attribute__((aligned(64)));
    int32_t off[CK_UNPREPARED_CHUNK * 16] __attribute__((aligned(64)));
    const size_t wblock = type == CK_Q_Q8_0 ? sizeof(ck_block_q8_0) : sizeof(ck_block_q4_0);
    float r = 0.0f;
    int64_t c0, b;
    for (c0 = 0; c0 < nb; c0 += CK_UNPREPARED_CHUNK) {
        const int64_t n = nb - c0 < CK_UNPREPARED_CHUNK ? nb - c0 : CK_UNPREPARED_CHUNK;
        act512 a;
        for (b = 0; b < n; b++) {
            memcpy(q + 32 * b, blk[c0 + b].qs, 32);
            d[b] = ck_fp16_to_fp32(blk[c0 + b].d);
        }
        act512_offsets(q, n, off, off + 8 * n);
        a.q = q, a.d = d, a.off8 = off, a.off128 = off + 8 * n;
        r += dot_q40_q80_512(type == CK_Q_Q8_0, n, (const char *)w + (size_t)c0 * wblock, &a, 0);
    }
    return r;
}

/* q4_K: 64 weights (sub-blocks 2k and 2k + 1) per step: maddubs pairs, then vpdpwssd applies each
 * sub-block's scale while accumulating to int32; the mins go through the activations' sums of 16 */
CK_AVX512_VNNI static float dot_q4_K_512(int64_t nb, const ck_block_q4_K *w, const ck_block_q8_K *a)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    float accm = 0.0f;
    int64_t i;
    int k;
    for (i = 0; i < nb; i++) {
        uint8_t sc8[8], mn8[8];
        __m512i sumi = _mm512_setzero_si512();
        __m128i mins, sums;
        ck_k4_scales_mins(w[i].scales, sc8, mn8);
        {
            int64_t s8;
            memcpy(&s8, sc8, 8);
            const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(s8)));
            for (k = 0; k < 4; k++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * k));
                const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                                     _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
                /* int16 lanes 0-15 take scale 2k, 16-31 scale 2k + 1 */
                const __m512i idx = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(2 * k)),
                                                            _mm512_set1_epi16((short)(2 * k + 1)));
                const __m512i p = _mm512_maddubs_epi16(u, _mm512_loadu_si512((const void *)(a[i].qs + 64 * k)));
                sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_permutexvar_epi16(idx, sc));
            }
        }
        {
            int64_t m8;
            memcpy(&m8, mn8, 8);
            mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(m8));
            /* sums of 32: adjacent pairs of the 16 sums of 16 */
            sums = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a[i].bsums),
                                  _mm_loadu_si128((const __m128i *)(a[i].bsums + 8)));
            mins = _mm_madd_epi16(mins, sums);
            mins = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, 0x4E));
            mins = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, 0xB1));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(a[i].d * h2f(w[i].d)), _mm512_cvtepi32_ps(sumi), acc);
        accm += a[i].d * h2f(w[i].dmin) * (float)_mm_cvtsi128_si32(mins);
    }
    return _mm512_reduce_add_ps(acc) - accm;
}

/* The same scales and mins as bytes [sc 0-7 | mn 0-7] by two byte shuffles, in vector registers. It loads 16
 * bytes, so the 4 after the scales must be the block's (its quants, or q5_K's qh). In the AVX-512 body below
 * this replaced the 32-bit word operations and their moves into a vector register: q4_K 0.953-0.965x the time on one
 * thread, q5_K 1.00x (1.1B shape, AMD EPYC Zen 5 VM). */
CK_AVX2_F16 static inline __m128i k4_scales_mins8(const uint8_t *s12)
{
    const __m128i x = _mm_loadu_si128((const __m128i *)s12);
    const __m128i lo = _mm_shuffle_epi8(x, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i hi = _mm_shuffle_epi8(x, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i low6_or_nibble = _mm_and_si128(lo, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m128i high_nibble = _mm_and_si128(_mm_srli_epi16(lo, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    const __m128i top2 = _mm_srli_epi16(_mm_and_si128(hi, _mm_set1_epi8((char)0xC0)), 2); /* bits 6-7 to 4-5 */
    return _mm_or_si128(_mm_or_si128(low6_or_nibble, high_nibble), top2);
}

/* q4_K / q5_K with the activations laid out once per token as the weights' nibbles come: one 64-byte load of
 * the quants gives [sub-block 0 | 2] in its low nibbles and [1 | 3] in its high ones (4 | 6 and 5 | 7 for the
 * second), so each half multiplies its activations with no insert or permute of the weights; the sub-block
 * scales reach the int16 lanes by four vpermw of the 8 scales. q5_K's fifth bits: bit 2k (low nibbles) or
 * 2k + 1 (high) of qh[l] for chunk k, shifted into place per 256-bit half. Rows [n0, n1) of one token. */
CK_AVX512_VNNI static inline __m512i k5_bits(__m512i h, int s0, int s1)
{
    const __m512i cnt = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)s0), _mm512_set1_epi16((short)s1));
    return _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(h, cnt), 4), _mm512_set1_epi8(0x10));
}

CK_AVX512_VNNI static inline void rows_k45_512(int q5, float *out, const char *rows, size_t rb, const int8_t *aq,
                                               const int16_t *sums8, const ck_block_q8_K *a, int64_t nb,
                                               const float *bias, const float *add, int64_t n0, int64_t n1)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const size_t bsize = q5 ? sizeof(ck_block_q5_K) : sizeof(ck_block_q4_K);
    const size_t qs_at = q5 ? offsetof(ck_block_q5_K, qs) : offsetof(ck_block_q4_K, qs);
    __m512i idx[4];
    ck_rows4 r4;
    int64_t n, i;
    int k;
    r4.n = 0;
    for (k = 0; k < 4; k++) /* int16 lanes 0-15: scale p, 16-31: scale p + 2, for p = 0, 1, 4, 5 */
        idx[k] = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)((k & 1) + 4 * (k >> 1))),
                                         _mm512_set1_epi16((short)((k & 1) + 4 * (k >> 1) + 2)));
    for (n = n0; n < n1; n++) {
        const char *row = rows + (size_t)n * rb;
        __m512 acc = _mm512_setzero_ps();
        __m128 accm = _mm_setzero_ps(); /* the mins' part, in 4 lanes */
        for (i = 0; i < nb; i++) {
            const char *blk = row + bsize * (size_t)i;
            ck_pf_lines(blk, 3); /* 144 / 176 bytes a block */
            const ck_block_q4_K *w4 = (const ck_block_q4_K *)blk; /* d, dmin, scales: the same place in both */
            const int8_t *y = aq + 256 * i;
            int32_t ddm;
            __m512i sc, sumi, u[4];
            const __m128i scmn = k4_scales_mins8(w4->scales);
            __m128i mins;
            __m128 dd;
            sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(scmn)); /* (its upper lanes are not read: indices 0-7) */
            {
                const __m512i l0 = _mm512_loadu_si512((const void *)(blk + qs_at));
                const __m512i l1 = _mm512_loadu_si512((const void *)(blk + qs_at + 64));
                u[0] = _mm512_and_si512(l0, m4), u[1] = _mm512_and_si512(_mm512_srli_epi16(l0, 4), m4);
                u[2] = _mm512_and_si512(l1, m4), u[3] = _mm512_and_si512(_mm512_srli_epi16(l1, 4), m4);
            }
            if (q5) {
                const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const ck_block_q5_K *)blk)->qh));
                u[0] = _mm512_or_si512(u[0], k5_bits(h, 0, 2));
                u[1] = _mm512_or_si512(u[1], k5_bits(h, 1, 3));
                u[2] = _mm512_or_si512(u[2], k5_bits(h, 4, 6));
                u[3] = _mm512_or_si512(u[3], k5_bits(h, 5, 7));
            }
            sumi = _mm512_madd_epi16(_mm512_maddubs_epi16(u[0], _mm512_loadu_si512((const void *)y)),
                                     _mm512_permutexvar_epi16(idx[0], sc));
            for (k = 1; k < 4; k++)
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u[k], _mm512_loadu_si512((const void *)(y + 64 * k))),
                                           _mm512_permutexvar_epi16(idx[k], sc));
            memcpy(&ddm, blk, 4); /* d and dmin, f16: converted together, times the activations' scale */
            dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(ddm)), _mm_set1_ps(a[i].d));
            /* the mins against the activations' sums of 32 (prepared per token), in 4 lanes until the row ends */
            mins = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(scmn, scmn)), _mm_loadu_si128((const __m128i *)(sums8 + 8 * i)));
            accm = _mm_fmadd_ps(_mm_cvtepi32_ps(mins), _mm_shuffle_ps(dd, dd, 0x55), accm);
            acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(sumi), acc);
        }
        ck_rows4_put(&r4, _mm512_sub_ps(acc, _mm512_zextps128_ps512(accm)), n, out, bias, add);
    }
    ck_rows4_flush(&r4, out, bias, add);
}

CK_AVX512_VNNI static void rows_q4_K_512(float *out, const char *rows, size_t rb, const int8_t *aq,
                                          const int16_t *sums8, const ck_block_q8_K *a, int64_t nb, const float *bias,
                                          const float *add, int64_t n0, int64_t n1)
{
    rows_k45_512(0, out, rows, rb, aq, sums8, a, nb, bias, add, n0, n1);
}

CK_AVX512_VNNI static void rows_q5_K_512(float *out, const char *rows, size_t rb, const int8_t *aq,
                                          const int16_t *sums8, const ck_block_q8_K *a, int64_t nb, const float *bias,
                                          const float *add, int64_t n0, int64_t n1)
{
    rows_k45_512(1, out, rows, rb, aq, sums8, a, nb, bias, add, n0, n1);
}

/* q6_K: 64 weights per step, in element order (ql's low nibbles cover 0-63 of each half, the high ones
 * 64-127; qh's bit pairs 0-1 / 2-3 / 4-5 / 6-7 the four quarters); scales per 16 through vpdpwssd, the
 * offset 32 through the activations' sums of 16 */
CK_AVX512_VNNI static float dot_q6_K_512(int64_t nb, const ck_block_q6_K *w, const ck_block_q8_K *a, int pf)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    int64_t i;
    int j, g;
    for (i = 0; i < nb; i++) {
        const int8_t *y = a[i].qs;
        if (pf) ck_pf_lines(&w[i], 4); /* 210 bytes a block */
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        /* the offset: 32 sum_j sc_j bsum_j */
        __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a[i].bsums));
        __m512i sumi;
        __m128i o = _mm_add_epi32(_mm256_castsi256_si128(off), _mm256_extracti128_si256(off, 1));
        o = _mm_add_epi32(o, _mm_shuffle_epi32(o, 0x4E));
        o = _mm_add_epi32(o, _mm_shuffle_epi32(o, 0xB1));
        sumi = _mm512_maskz_set1_epi32(1, -32 * _mm_cvtsi128_si32(o));
        for (j = 0; j < 2; j++) {
            const __m512i l = _mm512_loadu_si512((const void *)(w[i].ql + 64 * j));
            const __m256i h = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * j));
            /* high bits: [bits 0-1 | bits 2-3] for elements 0-63, [bits 4-5 | bits 6-7] for 64-127 */
            const __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
            const __m512i h23 = _mm512_srli_epi16(h01, 4);
            __m512i q[2];
            q[0] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(h01, m2), 4));
            q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                   _mm512_slli_epi16(_mm512_and_si512(h23, m2), 4));
            for (g = 0; g < 2; g++) {
                /* 64 elements = 4 sub-blocks of 16 = int16 lanes in groups of 8 */
                const int s0 = 8 * j + 4 * g;
                const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)s0),
                                                     _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23,
                                                                                        22, 21, 20, 19, 18, 17, 16, 15,
                                                                                        14, 13, 12, 11, 10, 9, 8, 7, 6,
                                                                                        5, 4, 3, 2, 1, 0),
                                                                       3));
                const __m512i p = _mm512_maddubs_epi16(q[g], _mm512_loadu_si512((const void *)(y + 128 * j + 64 * g)));
                sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_permutexvar_epi16(idx, sc));
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(a[i].d * h2f(w[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* f16 / bf16 rows on AVX-512: 32 weights per step in two accumulators (the AVX2 bodies ran compute-bound at
 * about 60% of the read bandwidth in decode on the 2-core Xeon VM of Nov 2026; these at 73-79%) */
CK_AVX512_VNNI static inline __m512 half16(int bf16, const uint16_t *p)
{
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}

CK_AVX512_VNNI static inline float dot_half_512(int bf16, int64_t n, const uint16_t *w, const float *a)
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    float s;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(half16(bf16, w + i), _mm512_loadu_ps(a + i), acc0);
        acc1 = _mm512_fmadd_ps(half16(bf16, w + i + 16), _mm512_loadu_ps(a + i + 16), acc1);
    }
    s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) s += (bf16 ? ck_bf16_to_fp32(w[i]) : h2f(w[i])) * a[i];
    return s;
}

/* the bodies above as ck_vec_dot_fn (n elements, untyped rows) */
#define CK_DOT_FN(name, call)                                          \
    static float name(int64_t n, const void *w, const void *a)         \
    {                                                                  \
        return call;                                                   \
    }
CK_DOT_FN(dot_avx2_f32, dot_f32(n, (const float *)w, (const float *)a))
CK_DOT_FN(dot_avx2_f16, dot_f16(n, (const uint16_t *)w, (const float *)a))
CK_DOT_FN(dot_avx2_bf16, dot_bf16(n, (const uint16_t *)w, (const float *)a))
CK_DOT_FN(dot_avx2_q8_0, dot_q8_0(n / CK_QK, (const ck_block_q8_0 *)w, (const ck_block_q8_0 *)a))
CK_DOT_FN(dot_avx2_q4_0, dot_q4_0(n / CK_QK, (const ck_block_q4_0 *)w, (const ck_block_q8_0 *)a))
CK_DOT_FN(dot_avx2_q4_1, dot_q4_1(n / CK_QK, (const ck_block_q4_1 *)w, (const ck_block_q8_1 *)a))
CK_DOT_FN(dot_avx2_q5_0, dot_q5_0(n / CK_QK, (const ck_block_q5_0 *)w, (const ck_block_q8_0 *)a))
CK_DOT_FN(dot_avx2_q5_1, dot_q5_1(n / CK_QK, (const ck_block_q5_1 *)w, (const ck_block_q8_1 *)a))
CK_DOT_FN(dot_avx2_q4_K, dot_qk45(0, n / CK_QK_K, w, (const ck_block_q8_K *)a, 0))
CK_DOT_FN(dot_avx2_q5_K, dot_qk45(1, n / CK_QK_K, w, (const ck_block_q8_K *)a, 0))
CK_DOT_FN(dot_avx2_q6_K, dot_q6_K(n / CK_QK_K, (const ck_block_q6_K *)w, (const ck_block_q8_K *)a, 0))
CK_DOT_FN(dot_avx512_f16, dot_half_512(0, n, (const uint16_t *)w, (const float *)a))
CK_DOT_FN(dot_avx512_bf16, dot_half_512(1, n, (const uint16_t *)w, (const float *)a))
CK_DOT_FN(dot_avx512_q8_0, dot_512_unprepared(CK_Q_Q8_0, n / CK_QK, w, (const ck_block_q8_0 *)a))
CK_DOT_FN(dot_avx512_q4_0, dot_512_unprepared(CK_Q_Q4_0, n / CK_QK, w, (const ck_block_q8_0 *)a))
CK_DOT_FN(dot_avx512_q4_K, dot_q4_K_512(n / CK_QK_K, (const ck_block_q4_K *)w, (const ck_block_q8_K *)a))
CK_DOT_FN(dot_avx512_q6_K, dot_q6_K_512(n / CK_QK_K, (const ck_block_q6_K *)w, (const ck_block_q8_K *)a, 0))
#undef CK_DOT_FN
#define CK_ON_X86(fn) fn
#else
#define CK_ON_X86(fn) NULL
#endif /* CK_X86 */

#if CK_NEON
#define CK_ON_NEON(fn) fn
#else
#define CK_ON_NEON(fn) NULL
#endif

/* ---- the kernels' side of each type (as ggml's type_traits_cpu) -------------------------------------------
 * A type ckc stores has a row with its reference dot product; a CPU body it lacks is NULL (ck_vec_dot then
 * takes the next one down). gemm: how prefill multiplies it (qgemm.c's int8 GEMM, fgemm.c's float GEMM, else
 * dequantized tiles into sgemm). */
static const ck_qtype_cpu kCpu[] = {
    {CK_Q_F32, dot_ref_f32, CK_ON_X86(dot_avx2_f32), NULL, CK_ON_NEON(ck_dot_neon_f32), CK_GEMM_FLOAT},
    {CK_Q_F16, dot_ref_f16, CK_ON_X86(dot_avx2_f16), CK_ON_X86(dot_avx512_f16), CK_ON_NEON(ck_dot_neon_f16), CK_GEMM_FLOAT},
    {CK_Q_BF16, dot_ref_bf16, CK_ON_X86(dot_avx2_bf16), CK_ON_X86(dot_avx512_bf16), CK_ON_NEON(ck_dot_neon_bf16), CK_GEMM_FLOAT},
    {CK_Q_Q8_0, dot_ref_q8_0, CK_ON_X86(dot_avx2_q8_0), CK_ON_X86(dot_avx512_q8_0), CK_ON_NEON(ck_dot_neon_q8_0), CK_GEMM_INT8},
    {CK_Q_Q4_0, dot_ref_q4_0, CK_ON_X86(dot_avx2_q4_0), CK_ON_X86(dot_avx512_q4_0), CK_ON_NEON(ck_dot_neon_q4_0), CK_GEMM_INT8},
    {CK_Q_Q4_1, dot_ref_q4_1, CK_ON_X86(dot_avx2_q4_1), NULL, CK_ON_NEON(ck_dot_neon_q4_1), CK_GEMM_INT8},
    {CK_Q_Q5_0, dot_ref_q5_0, CK_ON_X86(dot_avx2_q5_0), NULL, NULL, CK_GEMM_INT8},
    {CK_Q_Q5_1, dot_ref_q5_1, CK_ON_X86(dot_avx2_q5_1), NULL, NULL, CK_GEMM_INT8},
    {CK_Q_Q4_K, dot_ref_q4_K, CK_ON_X86(dot_avx2_q4_K), CK_ON_X86(dot_avx512_q4_K), CK_ON_NEON(ck_dot_neon_q4_K), CK_GEMM_INT8},
    {CK_Q_Q5_K, dot_ref_q5_K, CK_ON_X86(dot_avx2_q5_K), NULL, CK_ON_NEON(ck_dot_neon_q5_K), CK_GEMM_INT8},
    {CK_Q_Q6_K, dot_ref_q6_K, CK_ON_X86(dot_avx2_q6_K), CK_ON_X86(dot_avx512_q6_K), CK_ON_NEON(ck_dot_neon_q6_K), CK_GEMM_INT8},
};
#undef CK_ON_X86
#undef CK_ON_NEON

const ck_qtype_cpu *ck_qtype_cpu_of(int type)
{
    size_t i;
    for (i = 0; i < sizeof kCpu / sizeof kCpu[0]; i++)
        if (kCpu[i].type == type) return &kCpu[i];
    return NULL;
}

ck_vec_dot_fn ck_vec_dot_for(int type)
{
    const ck_qtype_cpu *c = ck_qtype_cpu_of(type);
    if (!c) return NULL;
#ifdef CK_X86
    if (c->dot_avx512 && ck_cpu_avx512vnni()) return c->dot_avx512;
    if (c->dot_avx2 && ck_has_avx2()) return c->dot_avx2;
#endif
    if (c->dot_neon && ck_cpu_neon()) return c->dot_neon;
    return c->dot_ref;
}

float ck_vec_dot(int type, int64_t n, const void *w, const void *a)
{
    ck_vec_dot_fn f = ck_vec_dot_for(type);
    return f ? f(n, w, a) : NAN;
}

float ck_vec_dot_ref(int type, int64_t n, const void *w, const void *a)
{
    const ck_qtype_cpu *c = ck_qtype_cpu_of(type);
    return c && c->dot_ref ? c->dot_ref(n, w, a) : NAN;
}

/* ---- matrices ---------------------------------------------------------------- */

/* the part holding row r, and r's index inside it */
static int qmat_part(const ck_qmat *w, int64_t *r)
{
    int p;
    for (p = 0; p < w->n_parts - 1 && *r >= w->rows[p]; p++) *r -= w->rows[p];
    return p;
}

static const void *qmat_row_ptr(const ck_qmat *w, int64_t r, int K, int *type)
{
    int p = qmat_part(w, &r);
    *type = w->type[p];
    return (const char *)w->data[p] + (size_t)r * ck_qtype_row_bytes(w->type[p], K);
}

int ck_qmat_row(const ck_qmat *w, int64_t r, int K, float *y)
{
    int type;
    const void *row = qmat_row_ptr(w, r, K, &type);
    return ck_dequantize_row(type, row, y, K);
}

int ck_embedding_q(float *out, const ck_qmat *table, const int32_t *ids, int T, int C)
{
    int t, rc = CK_OK;
    for (t = 0; t < T && rc == CK_OK; t++) rc = ck_qmat_row(table, ids[t], C, out + (size_t)t * C);
    return rc;
}

/* One row of activations in a dot type, as llama.cpp's x86 CPU backend
 * quantizes them (quantize_row_q8_0 / q8_1: scale by 127 / amax and round
 * half to even, which differs from the file format's reference quantizer in
 * the last bit now and then): the same inputs to the same integer dot
 * products, so decode agrees with llama.cpp as closely as the formats allow.
 * q8_K is llama.cpp's reference quantizer on every backend. */
static void quantize_act(int type, const float *x, void *vy, int64_t n)
{
    int64_t i;
    int j;
    if (type != CK_Q_Q8_0 && type != CK_Q_Q8_1) { /* q8_K: the type has a quantizer (check_types) */
        ck_qtype_traits_of(type)->quantize(x, vy, n / ck_qtype_block(type));
        return;
    }

    for (i = 0; i < n / CK_QK; i++, x += CK_QK) {
        float amax = 0.0f, d, id;
        int8_t *q = type == CK_Q_Q8_0 ? ((ck_block_q8_0 *)vy)[i].qs : ((ck_block_q8_1 *)vy)[i].qs;
        int sum = 0;
        for (j = 0; j < CK_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        d = amax / 127.f;
        id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (j = 0; j < CK_QK; j++) {
            q[j] = (int8_t)rintf(x[j] * id); /* the default rounding mode: half to even */
            sum += q[j];
        }
        if (type == CK_Q_Q8_0) {
            ((ck_block_q8_0 *)vy)[i].d = ck_fp32_to_fp16(d);
        } else {
            ((ck_block_q8_1 *)vy)[i].d = ck_fp32_to_fp16(d);
            ((ck_block_q8_1 *)vy)[i].s = ck_fp32_to_fp16(d * (float)sum);
        }
    }
}

/* The activations of T tokens in each dot type the matrix's parts need
 * (at most one row set per type). */
typedef struct {
    int type[CK_QMAT_MAX_PARTS];
    void *rows[CK_QMAT_MAX_PARTS];
    size_t row_bytes[CK_QMAT_MAX_PARTS];
    int n;
    ck_qgemm_acts q8; /* q8_0 / q8_1 with AVX-512: quantized by qgemm.c's vector quantizer, */
    int32_t *off;     /* and per token act512's off8[K / 4], off128[K / 4] */
    ck_qgemm_acts q8k; /* q8_K with AVX-512, by the same quantizer */
    ck_qdot4_acts g4;  /* q4_0 / q4_1 / q5_0 / q5_1 (ck_qdot4_takes): the q8 rows in qdot4.c's order (g4.q NULL: none) */
    int8_t *k4;        /* q4_K / q5_K with AVX-512: the q8_K quants in rows_k45_512's order, [T][K] (NULL: none), */
    int16_t *k4sums;   /* and each 256-block's sums of 32 quants, [T][K / 256][8] */
    size_t ws_mark;    /* the workspace before act_prepare: act_free gives it back */
} act_set;

#ifdef CK_X86
/* f[0, n) to f16 (n <= 16), rounded to nearest even as ck_fp32_to_fp16 */
CK_AVX512_VNNI static void halves16(const float *f, uint16_t *h, int n)
{
    const __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    _mm256_mask_storeu_epi16(h, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* q8_0 / q8_1 blocks from the vector-quantized rows (the same bytes quantize_act writes: qgemm.c's
 * quantizer is tested equal to the scalar one, and its scales are already rounded to f16) */
static void blocks_from(const ck_qgemm_acts *a, int dt, void *rows, size_t row_bytes)
{
    int t, j;
    int64_t b;
    if (dt == CK_Q_Q8_K) {
        for (t = 0; t < a->T; t++)
            for (b = 0; b < a->K / CK_QK_K; b++) {
                ck_block_q8_K *y = (ck_block_q8_K *)((char *)rows + row_bytes * t) + b;
                y->d = a->d[(size_t)t * (a->K / CK_QK) + 8 * b];
                memcpy(y->qs, a->q + (size_t)t * a->K + CK_QK_K * b, CK_QK_K);
                for (j = 0; j < CK_QK_K / 16; j++) y->bsums[j] = (int16_t)a->sum16[(size_t)t * (a->K / 16) + 16 * b + j];
            }
        return;
    }
    for (t = 0; t < a->T; t++)
        for (b = 0; b < a->K / CK_QK; b += 16) { /* 16 blocks' scales to f16 at a time (exact: they are f16 values) */
            const int n = a->K / CK_QK - b < 16 ? (int)(a->K / CK_QK - b) : 16;
            const size_t at = (size_t)t * (a->K / CK_QK) + (size_t)b;
            uint16_t hd[16], hs[16];
            halves16(a->d + at, hd, n);
            if (dt == CK_Q_Q8_1) halves16(a->s + at, hs, n);
            for (j = 0; j < n; j++) {
                const int8_t *q = a->q + (size_t)t * a->K + CK_QK * (b + j);
                if (dt == CK_Q_Q8_0) {
                    ck_block_q8_0 *y = (ck_block_q8_0 *)((char *)rows + row_bytes * t) + b + j;
                    y->d = hd[j];
                    memcpy(y->qs, q, CK_QK);
                } else {
                    ck_block_q8_1 *y = (ck_block_q8_1 *)((char *)rows + row_bytes * t) + b + j;
                    y->d = hd[j];
                    y->s = hs[j];
                    memcpy(y->qs, q, CK_QK);
                }
            }
        }
}

/* 1 when a part of w has a type `is` accepts */
static int has_part(const ck_qmat *w, int (*is)(int))
{
    int p;
    for (p = 0; p < w->n_parts; p++)
        if (is(w->type[p])) return 1;
    return 0;
}

static int is_q8_0(int type) { return type == CK_Q_Q8_0; }
static int is_q4_0(int type) { return type == CK_Q_Q4_0; }
static int is_k45(int type) { return type == CK_Q_Q4_K || type == CK_Q_Q5_K; }

/* qdot4.c's activations from the q8_1 rows if there are (their quants are the q8_0 ones, with s), else the q8_0 */
static int g4_from_blocks(act_set *s, int T, int K)
{
    int i, pick = -1;
    for (i = 0; i < s->n; i++)
        if (s->type[i] == CK_Q_Q8_1 || (s->type[i] == CK_Q_Q8_0 && pick < 0)) pick = i;
    if (pick < 0) return 0; /* (not reached: a qdot4 type's part has q8_0 / q8_1 rows) */
    return ck_qdot4_acts_from_blocks(&s->g4, s->type[pick], s->rows[pick], s->row_bytes[pick], T, K);
}
#endif /* CK_X86 */

/* `fast`: AVX-512 preparation where the CPU has it (the reference twin quantizes with the scalar code) */
static int act_prepare(act_set *s, const ck_qmat *w, const float *x, int ldx, int T, int K, int fast)
{
    int p, i, t;
    (void)fast; /* (read by the x86 paths only) */
    s->ws_mark = ck_ws_mark(); /* every buffer below: the workspace (ck_kernels.h), else malloc */
    s->n = 0;
    s->off = NULL;
    memset(&s->q8, 0, sizeof s->q8);
    memset(&s->q8k, 0, sizeof s->q8k);
    memset(&s->g4, 0, sizeof s->g4);
    s->k4 = NULL;
    s->k4sums = NULL;
    for (p = 0; p < w->n_parts; p++) {
        int dt = ck_qtype_dot_type(w->type[p]);
        for (i = 0; i < s->n && s->type[i] != dt; i++) {}
        if (i < s->n) continue;
        s->type[i] = dt;
        s->row_bytes[i] = ck_qtype_row_bytes(dt, K);
        s->rows[i] = ck_ws_alloc(s->row_bytes[i] * (size_t)T + 1);
        s->n++;
        if (!s->rows[i]) return -1;
#ifdef CK_X86
        if ((dt == CK_Q_Q8_0 || dt == CK_Q_Q8_1) && fast && ck_cpu_avx512vnni()) {
            if (!s->q8.q) {
                if (ck_qgemm_acts_init_rows(&s->q8, CK_Q_Q8_0, T, K)) return -1;
                ck_qgemm_acts_quantize(&s->q8, x, ldx, 0, T, 1);
                /* act512's offsets: for q8_0 parts, and q4_0 ones the VBMI bodies do not take */
                if (has_part(w, is_q8_0) || (has_part(w, is_q4_0) && !(K >= 128 && ck_qdot4_takes(CK_Q_Q4_0)))) {
                    s->off = (int32_t *)ck_ws_alloc(sizeof(int32_t) * (size_t)T * (K / 2) + 64);
                    if (!s->off) return -1;
                    for (t = 0; t < T; t++)
                        act512_offsets(s->q8.q + (size_t)t * K, K / CK_QK, s->off + (size_t)t * (K / 2),
                                       s->off + (size_t)t * (K / 2) + K / 4);
                }
            }
            blocks_from(&s->q8, dt, s->rows[i], s->row_bytes[i]);
            continue;
        }
        if (dt == CK_Q_Q8_K && fast && ck_cpu_avx512vnni()) {
            if (ck_qgemm_acts_init_rows(&s->q8k, CK_Q_Q8_K, T, K)) return -1;
            ck_qgemm_acts_quantize(&s->q8k, x, ldx, 0, T, 1);
            blocks_from(&s->q8k, dt, s->rows[i], s->row_bytes[i]);
            continue;
        }
#endif
        for (t = 0; t < T; t++) quantize_act(dt, x + (size_t)t * ldx, (char *)s->rows[i] + s->row_bytes[i] * t, K);
    }
#ifdef CK_X86
    if (fast && K >= 128 && has_part(w, ck_qdot4_takes)) { /* from the vector quantizer's rows, else the blocks */
        if (s->q8.q ? ck_qdot4_acts_init(&s->g4, &s->q8) : g4_from_blocks(s, T, K)) return -1;
    }
    if (s->q8k.q && has_part(w, is_k45)) { /* per 128: elements 0-31, 64-95, 32-63, 96-127 (rows_k45_512) */
        int64_t c;
        s->k4 = (int8_t *)ck_ws_alloc((size_t)T * (size_t)K + 64);
        s->k4sums = (int16_t *)ck_ws_alloc(sizeof(int16_t) * (size_t)T * (size_t)(K / 32) + 64);
        if (!s->k4 || !s->k4sums) return -1;
        for (t = 0; t < T; t++)
            for (c = 0; c < K / 32; c++) /* sums of 16 (the vector quantizer's) in adjacent pairs */
                s->k4sums[(size_t)t * (K / 32) + c] =
                    (int16_t)(s->q8k.sum16[(size_t)t * (K / 16) + 2 * c] + s->q8k.sum16[(size_t)t * (K / 16) + 2 * c + 1]);
        for (t = 0; t < T; t++)
            for (c = 0; c < K; c += 128) {
                const int8_t *q = s->q8k.q + (size_t)t * K + c;
                int8_t *o = s->k4 + (size_t)t * K + c;
                memcpy(o, q, 32);
                memcpy(o + 32, q + 64, 32);
                memcpy(o + 64, q + 32, 32);
                memcpy(o + 96, q + 96, 32);
            }
    }
#endif
    return 0;
}

static void act_free(act_set *s)
{
    int i;
    for (i = 0; i < s->n; i++) ck_ws_free(s->rows[i]);
    ck_ws_free(s->off);
    ck_qgemm_acts_free(&s->q8);
    ck_qgemm_acts_free(&s->q8k);
    ck_qdot4_acts_free(&s->g4);
    ck_ws_free(s->k4sums);
    ck_ws_free(s->k4);
    ck_ws_reset(s->ws_mark);
}

static const void *act_row(const act_set *s, int type, int t)
{
    int i, dt = ck_qtype_dot_type(type);
    for (i = 0; i < s->n; i++)
        if (s->type[i] == dt) return (const char *)s->rows[i] + s->row_bytes[i] * t;
    return NULL;
}

/* rows [n0, n1) of the output for every token, by dot products; `fast`: the
 * AVX2 bodies, else the scalar twins. The rows are walked part by part, so the
 * type, the row size and the activations are resolved once per part, not per
 * row. (Four rows at a time, sharing the activation loads, measured 3.4x
 * slower on this Zen 4: the four interleaved streams stall on their loads.) */
static void dot_rows(float *out, int ldo, const act_set *acts, const ck_qmat *w, const float *bias, const float *add,
                     int ld_add, int T, int K, int64_t n0, int64_t n1, int fast)
{
    int64_t base = 0, n;
    int p, t;
    for (p = 0; p < w->n_parts; base += w->rows[p], p++) {
        const int type = w->type[p];
        const size_t rb = ck_qtype_row_bytes(type, K);
        const int64_t pa = n0 > base ? n0 : base, pb = n1 < base + w->rows[p] ? n1 : base + w->rows[p];
        const char *rows = (const char *)w->data[p] - (size_t)base * rb; /* indexed by global row */
        const ck_vec_dot_fn dot = fast ? ck_vec_dot_for(type) : ck_qtype_cpu_of(type)->dot_ref;
        const int64_t ahead = ck_prefetch_rows_ahead(rb);
        /* several tokens (a batch of sequences' decode step): the rows in chunks of about CK_DOT_CHUNK_BYTES, every
         * token's dots over a chunk while it is in the cache, so the weights come from memory once for all */
        const int64_t chunk = T > 1 ? (int64_t)(CK_DOT_CHUNK_BYTES / rb) + 1 : pb - pa;
        int64_t c0;
        int paired = -1; /* a token whose dots a pair kernel computed with the previous one */
        for (c0 = pa; c0 < pb; c0 += chunk, paired = -1)
        for (t = 0; t < T; t++) {
            const int64_t a = c0, b = c0 + chunk < pb ? c0 + chunk : pb;
            const void *act = act_row(acts, type, t);
            if (t == paired) continue;
            float *o = out + (size_t)t * ldo;
            const float *ad = add ? add + (size_t)t * ld_add : NULL;
            n = a;
#ifdef CK_X86
            if (fast && acts->k4 && is_k45(type)) { /* activations in the nibbles' order */
                (type == CK_Q_Q4_K ? rows_q4_K_512 : rows_q5_K_512)(o, rows, rb, acts->k4 + (size_t)t * K,
                                                                    acts->k4sums + (size_t)t * (K / 32),
                                                                    (const ck_block_q8_K *)act, K / CK_QK_K, bias, ad, n, b);
                n = b;
            }
            if (dot == dot_avx512_q6_K) { /* q6_K on AVX-512, its lines requested a few per block (ck_pf_lines) */
                for (; n < b; n++)
                    o[n] = dot_q6_K_512(K / CK_QK_K, (const ck_block_q6_K *)(rows + (size_t)n * rb),
                                        (const ck_block_q8_K *)act, 1) + (bias ? bias[n] : 0.0f) + (ad ? ad[n] : 0.0f);
            }
            if (fast && acts->g4.q && ck_qdot4_takes(type)) { /* q4_0 / q4_1 / q5_0 / q5_1: AVX-512 VBMI, AVX2 */
                /* the last K % 128 elements of each row by the type's AVX2 one-block body (these bodies run only
                 * where AVX2 does), which needs no activations prepared per call: q4_0's AVX-512 one did, per row
                 * (q4_0 decode of K 576 on an AMD EPYC Zen 5 VM, one thread, 12.5 -> 25 GB/s) */
                const ck_vec_dot_fn tail = ck_qtype_cpu_of(type)->dot_avx2 ? ck_qtype_cpu_of(type)->dot_avx2 : dot;
                if (t + 1 < T) { /* two tokens at a time: q4_0's weights unpacked once for both */
                    ck_qdot4_rows2(o, out + (size_t)(t + 1) * ldo, &acts->g4, t, t + 1, type, rows, rb, act,
                                   act_row(acts, type, t + 1), tail, bias, ad,
                                   add ? add + (size_t)(t + 1) * ld_add : NULL, n, b);
                    paired = t + 1;
                } else {
                    ck_qdot4_rows(o, &acts->g4, t, type, rows, rb, act, tail, bias, ad, n, b);
                }
                n = b;
            }
            if (fast && (type == CK_Q_Q4_0 || type == CK_Q_Q8_0) && acts->off) { /* activations prepared per token */
                const int64_t nb = K / CK_QK;
                act512 ax;
                ax.q = acts->q8.q + (size_t)t * K;
                ax.d = acts->q8.d + (size_t)t * nb;
                ax.off8 = acts->off + (size_t)t * (K / 2);
                ax.off128 = ax.off8 + K / 4;
                for (; n < b; n++) {
                    float v = dot_q40_q80_512(type == CK_Q_Q8_0, nb, rows + (size_t)n * rb, &ax, 1);
                    o[n] = v + (bias ? bias[n] : 0.0f) + (ad ? ad[n] : 0.0f);
                }
            }
            if (dot == dot_avx2_q4_K || dot == dot_avx2_q5_K || dot == dot_avx2_q6_K) {
                /* AVX2's K-quant bodies over whole rows, the lines requested a few per block (one horizontal sum
                 * and call per row, not per 512-element chunk as below). Decode of the 1.1B shape on the 2-core
                 * Zen 3 (bench_decode.py --baseline, interleaved), time new / old at 1 / 2 threads: q4_K 0.92x /
                 * 0.98x, q5_K 0.90x / 0.96x, q6_K 0.99x / 0.99x */
                const int64_t nb = K / CK_QK_K;
                const ck_block_q8_K *ak = (const ck_block_q8_K *)act;
                if (t + 1 < T && n < b) { /* two tokens: each block unpacked once for both */
                    const ck_block_q8_K *ak1 = (const ck_block_q8_K *)act_row(acts, type, t + 1);
                    float *o1 = out + (size_t)(t + 1) * ldo;
                    const float *ad1 = add ? add + (size_t)(t + 1) * ld_add : NULL;
                    const ck_block_q8_K *const pair[2] = {ak, ak1};
                    for (; n < b; n++) {
                        const char *wr = rows + (size_t)n * rb;
                        float v[2];
                        if (type == CK_Q_Q6_K)
                            dot2_q6_K(nb, (const ck_block_q6_K *)wr, pair, 1, v);
                        else
                            dot2_qk45(type == CK_Q_Q5_K, nb, wr, pair, 1, v);
                        o[n] = v[0] + (bias ? bias[n] : 0.0f) + (ad ? ad[n] : 0.0f);
                        o1[n] = v[1] + (bias ? bias[n] : 0.0f) + (ad1 ? ad1[n] : 0.0f);
                    }
                    paired = t + 1;
                }
                for (; n < b; n++) {
                    const char *wr = rows + (size_t)n * rb;
                    const float v = type == CK_Q_Q6_K ? dot_q6_K(nb, (const ck_block_q6_K *)wr, ak, 1)
                                                      : dot_qk45(type == CK_Q_Q5_K, nb, wr, ak, 1);
                    o[n] = v + (bias ? bias[n] : 0.0f) + (ad ? ad[n] : 0.0f);
                }
            }
            if (fast && dot != ck_qtype_cpu_of(type)->dot_ref && K % 512 == 0 && K > 512) {
                /* the other SIMD bodies: in 512-element chunks, the lines requested between them (the portable
                 * path keeps its one sum per row: the same order as on every other machine, wasm included) */
                const size_t cw = ck_qtype_row_bytes(type, 512), ca = ck_qtype_row_bytes(ck_qtype_dot_type(type), 512);
                const int lines = (int)((cw + 63) / 64);
                int64_t c;
                for (; n < b; n++) {
                    const char *wr = rows + (size_t)n * rb;
                    float v = 0.0f;
                    for (c = 0; c < K / 512; c++) {
                        ck_pf_lines(wr + cw * (size_t)c, lines);
                        v += dot(512, wr + cw * (size_t)c, (const char *)act + ca * (size_t)c);
                    }
                    o[n] = v + (bias ? bias[n] : 0.0f) + (ad ? ad[n] : 0.0f);
                }
            }
#endif
            for (; n < b; n++) {
                float v;
                if (n + ahead < b) ck_prefetch(rows + (size_t)(n + ahead) * rb, rb);
                v = dot(K, rows + (size_t)n * rb, act);
                if (bias) v += bias[n];
                if (ad) v += ad[n];
                o[n] = v;
            }
        }
    }
}

/* rows [n0, n1) of the output for every token: float32 parts by sgemm in
 * place (pieces of <= 1024 rows, as ck_linear), the others dequantized in
 * tiles of CK_QTILE rows, each tile one sgemm */
static void tile_rows(float *out, int ldo, const float *x, int ldx, const ck_qmat *w, const float *bias,
                      const float *add, int ld_add, int T, int K, int64_t n0, int64_t n1, float *tile)
{
    int64_t base = 0, c, r;
    int p;
    for (p = 0; p < w->n_parts; base += w->rows[p], p++) {
        const int type = w->type[p];
        const size_t rb = ck_qtype_row_bytes(type, K);
        const int64_t a = n0 > base ? n0 : base, b = n1 < base + w->rows[p] ? n1 : base + w->rows[p];
        const char *rows = (const char *)w->data[p] - (size_t)base * rb; /* indexed by global row */
        /* tiles at whole multiples of CK_QTILE rows of the matrix (cut at the part's ends), whatever the range:
         * each sgemm's shape depends on the matrix alone */
        for (c = a; c < b; c = (c / CK_QTILE + 1) * CK_QTILE) {
            const int64_t e = (c / CK_QTILE + 1) * CK_QTILE;
            int nb = (int)(b < e ? b - c : e - c);
            if (type == CK_Q_F32) {
                ck_linear_cols(out, ldo, x, ldx, (const float *)(rows + (size_t)c * rb), bias, add, ld_add, T, K, (int)c, nb);
                continue;
            }
            for (r = 0; r < nb; r++) {
                const void *src = rows + (size_t)(c + r) * rb;
                float *dst = tile + (size_t)r * K;
#ifdef CK_X86
                if (ck_has_avx2() && type == CK_Q_F16) {
                    f16_row((const uint16_t *)src, dst, K);
                    continue;
                }
                if (ck_has_avx2() && type == CK_Q_BF16) {
                    bf16_row((const uint16_t *)src, dst, K);
                    continue;
                }
#endif
                ck_qtype_traits_of(type)->dequantize(src, dst, K / ck_qtype_block(type)); /* (check_types) */
            }
            ck_linear_cols(out, ldo, x, ldx, tile, bias, add, ld_add, T, K, (int)c, nb);
        }
    }
}

/* The prefill of one call: each thread's rows, part by part, through the
 * int8 GEMM (qgemm.c) where the part's type has one and the CPU runs it, else
 * through the float tiles */
typedef struct {
    float *out;
    int ldo;
    const float *x;
    int ldx;
    const ck_qmat *w;
    const float *bias, *add;
    int ld_add, T, K;
    ck_qgemm_acts acts[2]; /* [0] q8_0 (also q8_1's quants and scales), [1] q8_K */
} prefill_job;

static int part_acts(int type) { return ck_qtype_dot_type(type) == CK_Q_Q8_K; }

static int prefill_rows(prefill_job *j, int64_t n0, int64_t n1, float **tile)
{
    int64_t base = 0;
    int p;
    for (p = 0; p < j->w->n_parts; base += j->w->rows[p], p++) {
        const int type = j->w->type[p];
        const int64_t a = n0 > base ? n0 : base, b = n1 < base + j->w->rows[p] ? n1 : base + j->w->rows[p];
        if (b <= a) continue;
        const int gemm = ck_qtype_cpu_of(type)->gemm;
        if (gemm == CK_GEMM_INT8 && ck_qgemm_takes(type)) {
            if (ck_qgemm_rows(j->out, j->ldo, &j->acts[part_acts(type)], type, j->w->data[p], j->bias, j->add,
                              j->ld_add, a - base, b - base, base, ck_qgemm_body()))
                return -1;
            continue;
        }
        if (gemm == CK_GEMM_FLOAT && ck_fgemm_body(type) != CK_FGEMM_REF) {
            if (ck_fgemm_rows(j->out, j->ldo, j->x, j->ldx, type, j->w->data[p], j->bias, j->add, j->ld_add, j->T,
                              j->K, a - base, b - base, base, ck_fgemm_body(type)))
                return -1;
            continue;
        }
        if (!*tile && !(*tile = ck_ws_alloc((size_t)CK_QTILE * j->K * sizeof(float)))) return -1; /* workspace, else malloc */
        tile_rows(j->out, j->ldo, j->x, j->ldx, j->w, j->bias, j->add, j->ld_add, j->T, j->K, a, b, *tile);
    }
    return 0;
}

static int prefill(float *out, int ldo, const float *x, int ldx, const ck_qmat *w, const float *bias,
                   const float *add, int ld_add, int T, int K, int N, int team)
{
    prefill_job j;
    int p, k, failed = 0, need[2] = {0, 0}, unit = 32;
    const size_t mark = ck_ws_mark(); /* the activations: the workspace, else malloc */
    (void)team; /* (read by OpenMP only) */
    memset(&j, 0, sizeof j);
    j.out = out, j.ldo = ldo, j.x = x, j.ldx = ldx, j.w = w, j.bias = bias, j.add = add, j.ld_add = ld_add;
    j.T = T, j.K = K;
    for (p = 0; p < w->n_parts; p++) {
        const int gemm = ck_qtype_cpu_of(w->type[p])->gemm;
        if (gemm == CK_GEMM_INT8 && ck_qgemm_takes(w->type[p])) need[part_acts(w->type[p])] = 1;
        else unit = CK_QTILE;
    }
    for (k = 0; k < 2; k++)
        if (need[k] && ck_qgemm_acts_init(&j.acts[k], k ? CK_Q_Q8_K : CK_Q_Q8_0, T, K)) failed = 1;
    if (!failed) {
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
        {
            int nt = 1, id = 0, t0, t1, per_t, r, a;
            int64_t per, n0, n1;
            float *tile = NULL;
#ifdef _OPENMP
            nt = omp_get_num_threads(), id = omp_get_thread_num();
#endif
            per_t = (T + nt - 1) / nt, t0 = id * per_t, t1 = t0 + per_t > T ? T : t0 + per_t;
            for (a = 0; a < 2; a++)
                if (need[a] && t1 > t0) ck_qgemm_acts_quantize(&j.acts[a], x, ldx, t0, t1, 1);
#ifdef _OPENMP
#pragma omp barrier
#endif
            /* whole tiles: tile_rows' sgemms then have the same shapes at any thread count (blas.h); where every
             * part runs the int8 GEMM, whose rows do not depend on the split, units of 32 rows (its two panels):
             * 576 rows (SmolLM2) go 288 / 288 instead of 320 / 256 */
            per = ((N + nt - 1) / nt + unit - 1) / unit * unit, n0 = id * per, n1 = n0 + per > N ? N : n0 + per;
            r = n1 > n0 ? prefill_rows(&j, n0, n1, &tile) : 0;
            ck_ws_free(tile); /* (the workspace's part: back at the reset below) */
            if (r) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
                failed = 1;
            }
        }
    }
    for (k = 0; k < 2; k++) ck_qgemm_acts_free(&j.acts[k]);
    ck_ws_reset(mark);
    return failed ? CK_ENOMEM : CK_OK;
}

/* CK_ENOTSUP when a part's type lacks what the paths below call: its kernels (ck_qtype_cpu), its
 * dequantizer (the tiles), its activations' quantizer. ck_weight_load only makes ck_qmats of types that have
 * them; checked once per call here, so the loops call the functions directly. */
static int check_types(const ck_qmat *w)
{
    int p;
    for (p = 0; p < w->n_parts; p++) {
        const ck_qtype_traits *t = ck_qtype_traits_of(w->type[p]), *a = ck_qtype_traits_of(ck_qtype_dot_type(w->type[p]));
        if (!ck_qtype_cpu_of(w->type[p]) || !t || !t->dequantize || !a || !a->quantize) return CK_ENOTSUP;
    }
    return CK_OK;
}

/* From how many tokens on a call takes the prefill path. CK_QGEMM_MIN_T where every part has its prefill GEMM on
 * this CPU (qgemm.c's int8 GEMM, fgemm.c), or is a float format (its tiles only convert f16 / bf16 rows, which is
 * cheap). CK_LINEAR_Q_TILE_MIN_T when an integer format would be dequantized into float tiles (no int8 GEMM here: a CPU
 * without AVX2), which costs the whole matrix's dequantization per call: up to about 16-24 tokens the dot
 * products are faster. Measured on an AMD EPYC (Zen 3, AVX2, 2 threads), q4_0 2048 x 5632, dot products vs tiles:
 * 8 tokens 4.1 vs 10.4 ms, 16 tokens 7.8 vs 11.0, 32 tokens 15.5 vs 13.8 (q8_0, q4_K, q6_K alike); f16 at 8
 * tokens 5.2 vs 4.0 (tiles). Batched decode (ck_model_batch: one token per sequence) is such a call. */
static int prefill_min_t(const ck_qmat *w)
{
    int p, any_int = 0;
    for (p = 0; p < w->n_parts; p++)
        if (ck_qtype_cpu_of(w->type[p])->gemm == CK_GEMM_INT8) {
            if (!ck_qgemm_takes(w->type[p])) return CK_LINEAR_Q_TILE_MIN_T;
            any_int = 1;
        }
    /* The AVX2 int8 GEMM takes 4 tokens per pass over a panel, the AVX-512 one 4 tokens x 2 panels: with a
     * few tokens the dot products (two tokens per pass over the rows) stay faster for longer. Batched decode of
     * 1.1B q4_0 (2 threads, AMD EPYC Zen 5 VM, CK_KERNELS forced), tok/s dot products vs GEMM: avx2-vnni 8
     * sequences 145 vs 115, 10 142 vs 128, 12 144 vs 150, 14 146 vs 153; avx2 16 127 vs 113, 24 125 vs 131. */
    if (any_int && ck_qgemm_body() == CK_QGEMM_AVXVNNI) return CK_QGEMM_AVXVNNI_MIN_T;
    if (any_int && ck_qgemm_body() == CK_QGEMM_AVX2) return CK_QGEMM_AVX2_MIN_T;
    return CK_QGEMM_MIN_T;
}

#ifdef _OPENMP
/* Decode's rows between the team's threads. An even split left them finishing apart: per GEMV of the 1.1B shape
 * on 2 threads (AMD EPYC Zen 5 VM), 9-21 us of 48-190 (11-17%) on average, neither thread first more often than
 * the other (their shares of the memory bandwidth swing from call to call), the early one waiting at the end.
 * So each thread owns an even share of the rows and takes it from the front, each time half of what is left (at
 * least CK_OWN_ROWS), and a thread done with its own
 * takes half of what is left of the fullest share, from the back. 1.1B decode on 2 threads, same VM, interleaved
 * against the even split (two runs each, the VM's bandwidth differing): q4_0 1.010x / 1.034x the tokens per
 * second, q4_K_M 1.018x / 1.085x, q8_0 1.021x; the GEMVs alone (bench_decode.py) 0.99-1.015x. (Pieces of a fixed 64
 * rows were 0.96x: each piece's call sets its body up again; pieces handed out from one counter, each starting
 * its stream cold, 0.94x for 1/8 of the rows in pieces of 32.) A row's result does not depend on the thread
 * that computes it: the outputs stay the same bits. A share is one 64-bit word, [front, back), changed by
 * compare-and-swap. */
#define CK_SHARES_MAX 64
#ifndef CK_OWN_ROWS
#define CK_OWN_ROWS 64
#endif

static unsigned long steals; /* ck_linear_q_steals */

static inline uint64_t share_pack(int64_t f, int64_t b) { return (uint64_t)f << 32 | (uint64_t)b; }

/* the next piece [*r0, *r1) of a share: from its front (its owner), or with `steal` half of what is left from its
 * back (from a multiple of 16 rows); 0 when there is none */
static int share_take(uint64_t *share, int steal, int64_t *r0, int64_t *r1)
{
    uint64_t old = __atomic_load_n(share, __ATOMIC_RELAXED), now;
    do {
        const int64_t f = (int64_t)(old >> 32), b = (int64_t)(old & 0xFFFFFFFFu);
        if (f >= b) return 0;
        if (steal) {
            const int64_t m = (f + (b - f) / 2 + 15) / 16 * 16;
            if (m >= b) return 0; /* under 32 rows left: the owner's */
            *r0 = m, *r1 = b;
            now = share_pack(f, m);
        } else { /* half of what is left, at least CK_OWN_ROWS */
            const int64_t half = ((b - f) / 2 + 15) / 16 * 16, take = half > CK_OWN_ROWS ? half : CK_OWN_ROWS;
            *r0 = f, *r1 = f + take < b ? f + take : b;
            now = share_pack(*r1, b);
        }
    } while (!__atomic_compare_exchange_n(share, &old, now, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    return 1;
}

/* thread id's part of dot_rows over all N rows, shares[] made for nt threads */
static void rows_shared(uint64_t *shares, int nt, int id, float *out, int ldo, const act_set *acts, const ck_qmat *w,
                        const float *bias, const float *add, int ld_add, int T, int K)
{
    int64_t r0, r1;
    int i;
    while (share_take(&shares[id], 0, &r0, &r1)) dot_rows(out, ldo, acts, w, bias, add, ld_add, T, K, r0, r1, 1);
    for (;;) { /* then from the back of the share with the most rows left */
        int victim = -1;
        int64_t most = 0;
        for (i = 0; i < nt; i++) {
            const uint64_t v = __atomic_load_n(&shares[i], __ATOMIC_RELAXED);
            const int64_t left = (int64_t)(v & 0xFFFFFFFFu) - (int64_t)(v >> 32);
            if (i != id && left > most) most = left, victim = i;
        }
        if (most < 32) return; /* (what is left is its owner's next piece or two) */
        if (share_take(&shares[victim], 1, &r0, &r1)) {
            __atomic_fetch_add(&steals, 1ul, __ATOMIC_RELAXED);
            dot_rows(out, ldo, acts, w, bias, add, ld_add, T, K, r0, r1, 1);
        }
    }
}
#endif

unsigned long ck_linear_q_steals(void)
{
#ifdef _OPENMP
    return __atomic_load_n(&steals, __ATOMIC_RELAXED);
#else
    return 0;
#endif
}

int ck_linear_q(float *out, int ldo, const float *x, int ldx, const ck_qmat *w, const float *bias, const float *add,
                int ld_add, int T, int K, int N)
{
    int team = 1;
    act_set acts;
    if (check_types(w)) return CK_ENOTSUP;
#ifdef _OPENMP
    team = omp_in_parallel() || (double)T * K * N < CK_PAR_MIN ? 1 : omp_get_max_threads();
#endif
    if (T >= prefill_min_t(w)) return prefill(out, ldo, x, ldx, w, bias, add, ld_add, T, K, N, team);
    if (act_prepare(&acts, w, x, ldx, T, K, 1)) {
        act_free(&acts);
        return CK_ENOMEM;
    }
    if (team == 1) {
        dot_rows(out, ldo, &acts, w, bias, add, ld_add, T, K, 0, N, 1);
    } else {
#ifdef _OPENMP
        /* one token: shares taken in pieces (rows_shared); several: an even split (their rows go in chunks that
         * every token's dots share, dot_rows) */
        uint64_t shares[CK_SHARES_MAX];
        const int shared = T == 1 && team <= CK_SHARES_MAX; /* (N: an int, under 2^31) */
        if (shared) {
            const int64_t per = ((N + team - 1) / team + 15) / 16 * 16;
            int i;
            for (i = 0; i < team; i++) {
                const int64_t n0 = i * per < N ? i * per : N;
                shares[i] = share_pack(n0, n0 + per < N ? n0 + per : N);
            }
        }
#pragma omp parallel num_threads(team)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            int64_t per = ((N + nt - 1) / nt + 15) / 16 * 16, n0 = id * per, n1 = n0 + per > N ? N : n0 + per;
            if (shared && nt == team)
                rows_shared(shares, nt, id, out, ldo, &acts, w, bias, add, ld_add, T, K);
            else if (n0 < n1) /* (or a team smaller than asked: the shares were made for `team`) */
                dot_rows(out, ldo, &acts, w, bias, add, ld_add, T, K, n0, n1, 1);
        }
#endif
    }
    act_free(&acts);
    return 0;
}

size_t ck_linear_q_workspace(int T, int K)
{
    /* counted from the allocations above (ck_quant.h) */
    return CK_LINEAR_Q_WORKSPACE_BYTES(T > 0 ? T : 1, K > 0 ? K : 0);
}

int ck_linear_q_ref(float *out, int ldo, const float *x, int ldx, const ck_qmat *w, const float *bias,
                    const float *add, int ld_add, int T, int K, int N)
{
    act_set acts;
    int rc;
    if (check_types(w)) return CK_ENOTSUP;
    rc = act_prepare(&acts, w, x, ldx, T, K, 0) ? CK_ENOMEM : CK_OK;
    if (!rc) dot_rows(out, ldo, &acts, w, bias, add, ld_add, T, K, 0, N, 0);
    act_free(&acts);
    return rc;
}
