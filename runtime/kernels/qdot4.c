/*
 * qdot4.c — decode (one token, or a few) over q4_0 / q4_1 / q5_0 / q5_1 weights on AVX-512 VBMI, and the same
 * scheme on AVX2 / AVX-VNNI (two blocks per register; at the end of the file): the 4- and 5-bit block formats at
 * the memory roofline.
 *
 * A q4_0 block is 18 bytes (f16 scale, 16 bytes of nibbles: element j low, j + 16 high), q4_1 20 (scale, min,
 * nibbles). The one-block-at-a-time bodies (qlinear.c) spend most of their time moving the 16-byte nibble
 * fields of neighbouring blocks into one register (inserts and a permute on the shuffle port), and decode of
 * the 4-bit formats ran compute-bound at about half the read bandwidth (the 2-core Xeon VM of Nov 2026;
 * scripts/bench_decode.py). Here one vpermt2b gathers the four
 * nibble fields of 4 consecutive blocks out of two loads of the row (the group's first 64 bytes and the rest), as
 * the file stores it:
 * the weights are read in place, with no repacking. Then
 *   lo = x & 15   the elements 0-15 of each of the 4 blocks,   hi = x >> 4   their elements 16-31,
 * and the activations are laid out once per token in that same order (ck_qdot4_acts), so two vpdpbusd give
 * each block's exact integer dot product in 4 int32 lanes. A vpermw of the first load places each block's
 * f16 scale (and q4_1's min) on its lanes. Per 128 weights: 2 loads, 1 vpermt2b, 2 vpdpbusd, 1 vpermw, one
 * multiply-add in float.
 *
 *   q4_0  w = d (u - 8):   sum = sum_lanes d_w d_a (sum u qa - 8 sum qa); the -8 sum qa starts the accumulator
 *   q4_1  w = d u + m:     sum = sum_lanes d_w d_a sum u qa  +  sum_blocks m_w s_a   (s_a = d_a sum qa, f16)
 *   q5_0 / q5_1 as q4_0 / q4_1 with the fifth bits added (+16) through masks read from qh, and q5_0's offset 16
 * The integer sums are exact, so the result differs from the other bodies only in the order of float sums.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ck_kernels.h"
#include "ck_quant.h"
#include "ck_quant_blocks.h"
#include "ck_simd.h"
#include "qdot4.h"

int ck_qdot4_type(int type)
{
    return type == CK_Q_Q4_0 || type == CK_Q_Q4_1 || type == CK_Q_Q5_0 || type == CK_Q_Q5_1;
}

int ck_qdot4_takes(int type)
{
    if (!ck_qdot4_type(type)) return 0;
    if (ck_cpu_avx512vbmi()) return 1;
    /* AVX-512 VNNI without VBMI: q4_0 has qlinear.c's act512 body, the others these AVX2 ones */
    return ck_cpu_avx2() && (type != CK_Q_Q4_0 || !ck_cpu_avx512vnni());
}

/* the layout from each token's quants (contiguous, K per token) and per-block scales d and s (s NULL: none) */
typedef struct {
    const int8_t *q; /* token t's quants: q + t * q_stride, block b's at + block_stride * b */
    size_t q_stride, block_stride;
    const float *d, *s; /* [T][K / 32], or NULL with the blocks' f16 fields read instead */
    const char *blocks; /* q8_0 / q8_1 blocks: d at byte 0, s at byte 2 (q8_1) */
    size_t row_bytes;
    int has_s;
} acts_src;

#ifdef CK_X86
/* lane_offsets with AVX2: sums of 4 bytes by maddubs and madd against ones */
__attribute__((target("avx2"))) static void lane_offsets_avx2(const int8_t *o, int32_t *off)
{
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    int h;
    for (h = 0; h < 2; h++) { /* int32 lanes 8h .. 8h + 7 */
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(o + 32 * h));
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(o + 64 + 32 * h));
        const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(ones8, lo), _mm256_maddubs_epi16(ones8, hi)), ones16);
        _mm256_storeu_si256((__m256i *)(off + 8 * h), _mm256_mullo_epi32(s, _mm256_set1_epi32(-8)));
    }
}
#endif

/* off[l] = -8 * (the sum of bytes 4l .. 4l + 3 of lo = o[0, 64) and of hi = o[64, 128)): int32 lane l of a group
 * (block l / 4) */
static void lane_offsets(const int8_t *o, int32_t *off, int avx2)
{
    int l, j;
#ifdef CK_X86
    if (avx2) { /* (the scalar loop was a third of preparing a decode step's activations) */
        lane_offsets_avx2(o, off);
        return;
    }
#else
    (void)avx2;
#endif
    for (l = 0; l < 16; l++) {
        int sum = 0;
        for (j = 0; j < 4; j++) sum += o[4 * l + j] + o[64 + 4 * l + j];
        off[l] = -8 * sum;
    }
}

static int acts_init(ck_qdot4_acts *a, int T, int K, const acts_src *src)
{
    const int64_t ng = K / 128;
    const int avx2 = ck_cpu_avx2(); /* (asked once, not per group) */
    int t, g, l, b;
    memset(a, 0, sizeof *a);
    a->T = T;
    a->K = K;
    { /* one allocation: q, then d, off and s4 (4-byte lanes after q's multiple of 128 bytes), d8, off8, s8 */
        const size_t lanes = (size_t)T * (size_t)ng * 16, l8 = (size_t)T * (size_t)(ng / 2) * 8;
        char *mem = (char *)ck_ws_alloc(lanes * 8 + lanes * 3 * 4 + l8 * 3 * 4 + 64); /* the workspace, else malloc */
        if (!mem) return -1;
        a->q = (int8_t *)mem;
        a->d = (float *)(mem + lanes * 8);
        a->off = (int32_t *)(a->d + lanes);
        a->s4 = (float *)(a->off + lanes);
        a->d8 = a->s4 + lanes;
        a->off8 = (int32_t *)(a->d8 + l8);
        a->s8 = (float *)(a->off8 + l8);
    }
    for (t = 0; t < T; t++) {
        const int8_t *q = src->q + (size_t)t * src->q_stride;
        for (g = 0; g < ng; g++) {
            int8_t *o = a->q + ((size_t)t * ng + g) * 128;
            const size_t at = ((size_t)t * ng + g) * 16;
            float d[4], s[4];
            for (b = 0; b < 4; b++) {
                const int64_t blk = 4 * g + b;
                const int8_t *qb = q + src->block_stride * (size_t)blk;
                memcpy(o + 16 * b, qb, 16);
                memcpy(o + 64 + 16 * b, qb + 16, 16);
                if (src->d) {
                    d[b] = src->d[(size_t)t * (K / CK_QK) + blk];
                    s[b] = src->s ? src->s[(size_t)t * (K / CK_QK) + blk] : 0.0f;
                } else {
                    const char *y = src->blocks + src->row_bytes * t + src->block_stride * (size_t)blk;
                    uint16_t h;
                    memcpy(&h, y, 2);
                    d[b] = ck_fp16_to_fp32(h);
                    memcpy(&h, y + 2, 2);
                    s[b] = src->has_s ? ck_fp16_to_fp32(h) : 0.0f;
                }
            }
            lane_offsets(o, a->off + at, avx2);
            for (l = 0; l < 16; l++) {
                a->d[at + l] = d[l / 4];
                a->s4[at + l] = 0.25f * s[l / 4]; /* 4 lanes per block: exact quarters */
            }
            if (g / 2 < ng / 2) { /* block b of group g: lane 4 (b % 2) + 2 (g % 2) + b / 2 of its pair (CK_A2_PAIR) */
                const size_t at8 = ((size_t)t * (size_t)(ng / 2) + (size_t)(g / 2)) * 8;
                for (b = 0; b < 4; b++) {
                    const int lane = (b % 2) * 4 + (g % 2) * 2 + b / 2;
                    const int32_t *lo = a->off + at + 4 * b;
                    a->d8[at8 + lane] = d[b];
                    a->s8[at8 + lane] = s[b];
                    a->off8[at8 + lane] = lo[0] + lo[1] + lo[2] + lo[3];
                }
            }
        }
    }
    return 0;
}

int ck_qdot4_acts_init(ck_qdot4_acts *a, const ck_qgemm_acts *src)
{
    acts_src s;
    memset(&s, 0, sizeof s);
    s.q = src->q;
    s.q_stride = (size_t)src->K;
    s.block_stride = CK_QK;
    s.d = src->d;
    s.s = src->s;
    return acts_init(a, src->T, src->K, &s);
}

int ck_qdot4_acts_from_blocks(ck_qdot4_acts *a, int dot_type, const void *rows, size_t row_bytes, int T, int K)
{
    acts_src s;
    const size_t qs = dot_type == CK_Q_Q8_1 ? offsetof(ck_block_q8_1, qs) : offsetof(ck_block_q8_0, qs);
    memset(&s, 0, sizeof s);
    s.block_stride = dot_type == CK_Q_Q8_1 ? sizeof(ck_block_q8_1) : sizeof(ck_block_q8_0);
    s.q = (const int8_t *)rows + qs;
    s.q_stride = row_bytes;
    s.blocks = (const char *)rows;
    s.row_bytes = row_bytes;
    s.has_s = dot_type == CK_Q_Q8_1;
    return acts_init(a, T, K, &s);
}

void ck_qdot4_acts_free(ck_qdot4_acts *a)
{
    ck_ws_free(a->q); /* the one allocation */
    memset(a, 0, sizeof *a);
}

#ifdef CK_X86
#define CK_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx512bitalg,fma,f16c")))

/* A group of 4 blocks is loaded as A = its bytes [0, 64) and B = the rest, bytes [tail_at, 4 bsize) in the low
 * bytes of a register, loaded at their width: 8, 16 or 32 bytes from byte 64 (q4_0, q4_1, q5_1), q5_0's 32 from
 * byte 56 (not past the group; a masked 24-byte load from 64 read 3% slower). B crosses a cache line in at most
 * 3 of 8 groups, where a 64-byte load of bytes [4 bsize - 64, 4 bsize) crossed one in 7 of 8, and the word
 * permute took A from memory again, a third split load. With the narrow B q4_0 read 36.2 GB/s where it read
 * 30.1, q5_0 36.1 where it read 32.3 (1.1B shape, one thread, AMD EPYC Zen 5 VM, interleaved). The upper bytes
 * of B are never indexed. */
static inline int group_tail_at(int bsize) { return bsize == 22 ? 56 : 64; }

CK_VBMI static inline __m512i group_tail(const char *w, int bsize)
{
    const char *at = w + group_tail_at(bsize);
    switch (4 * bsize - 64) {
    case 8: return _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)at));
    case 16: return _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)at));
    default: return _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)at));
    }
}

/* A group's first 64 bytes, as a value the compiler keeps in a register (it would fold A into each permute as a
 * memory operand: another load that crosses a cache line) */
CK_VBMI static inline __m512i group_head(const char *w)
{
    __m512i a = _mm512_loadu_si512((const void *)w);
    __asm__("" : "+v"(a));
    return a;
}

/* The byte gather of 4 blocks of `bsize` bytes whose nibbles start at byte `qoff` of each, from A and B */
CK_VBMI static inline __m512i gather_index(int bsize, int qoff)
{
    uint8_t idx[64];
    int b, j;
    for (b = 0; b < 4; b++)
        for (j = 0; j < 16; j++) {
            const int s = bsize * b + qoff + j;
            idx[16 * b + j] = (uint8_t)(s < 64 ? s : 64 + s - group_tail_at(bsize)); /* 64 + i: byte i of B */
        }
    return _mm512_loadu_si512((const void *)idx);
}

/* word w_b of each of the 4 blocks (the scale: byte 0, the min: byte 2) on 4 lanes each; 16-bit lanes 16-31
 * the same for word w_b + 1 */
CK_VBMI static inline __m512i word_index(int bsize)
{
    uint16_t idx[32];
    int l;
    for (l = 0; l < 16; l++) {
        idx[l] = (uint16_t)(bsize / 2 * (l / 4));
        idx[16 + l] = (uint16_t)(idx[l] + 1);
    }
    return _mm512_loadu_si512((const void *)idx);
}

CK_VBMI static inline float dot_q4_0_vbmi(int64_t ng, const char *w, const int8_t *q, const float *d, const int32_t *off,
                                          __m512i gidx, __m512i widx)
{
    /* One group per iteration: unrolled by two groups (two accumulators), the body read q4_0 at 28.0 GB/s where
     * this reads 30.8 (1.1B shape, one thread, AMD EPYC Zen 5 VM, interleaved) */
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    int64_t g;
    for (g = 0; g < ng; g++, w += 72, q += 128, d += 16, off += 16) {
        ck_pf_lines(w, 2); /* 72 bytes a group, up to 54 more between rows (a tail) */
        const __m512i a = group_head(w), b = group_tail(w, 18);
        const __m512i x = _mm512_permutex2var_epi8(a, gidx, b);
        __m512i p = _mm512_loadu_si512((const void *)off);
        p = _mm512_dpbusd_epi32(p, _mm512_and_si512(x, m4), _mm512_loadu_si512((const void *)q));
        p = _mm512_dpbusd_epi32(p, _mm512_and_si512(_mm512_srli_epi16(x, 4), m4), _mm512_loadu_si512((const void *)(q + 64)));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(widx, a))),
                                            _mm512_loadu_ps(d)),
                              _mm512_cvtepi32_ps(p), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* dot_q4_0_vbmi for two tokens at once: each weight group is loaded, unpacked and its scales converted once for
 * both (a batch of sequences' decode step); each token's sums are computed exactly as dot_q4_0_vbmi's */
CK_VBMI static inline void dot_q4_0_vbmi2(float *v0, float *v1, int64_t ng, const char *w, const int8_t *q,
                                          const float *d, const int32_t *off, const int8_t *q1, const float *d1,
                                          const int32_t *off1, __m512i gidx, __m512i widx)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps(), bcc = _mm512_setzero_ps();
    int64_t g;
    for (g = 0; g < ng; g++, w += 72, q += 128, d += 16, off += 16, q1 += 128, d1 += 16, off1 += 16) {
        ck_pf_lines(w, 2);
        const __m512i a = group_head(w), b = group_tail(w, 18);
        const __m512i x = _mm512_permutex2var_epi8(a, gidx, b);
        const __m512i l = _mm512_and_si512(x, m4), h = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
        const __m512 s = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(widx, a)));
        __m512i p = _mm512_loadu_si512((const void *)off), r = _mm512_loadu_si512((const void *)off1);
        p = _mm512_dpbusd_epi32(p, l, _mm512_loadu_si512((const void *)q));
        p = _mm512_dpbusd_epi32(p, h, _mm512_loadu_si512((const void *)(q + 64)));
        r = _mm512_dpbusd_epi32(r, l, _mm512_loadu_si512((const void *)q1));
        r = _mm512_dpbusd_epi32(r, h, _mm512_loadu_si512((const void *)(q1 + 64)));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_loadu_ps(d)), _mm512_cvtepi32_ps(p), acc);
        bcc = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_loadu_ps(d1)), _mm512_cvtepi32_ps(r), bcc);
    }
    *v0 = _mm512_reduce_add_ps(acc);
    *v1 = _mm512_reduce_add_ps(bcc);
}

CK_VBMI static inline float dot_q4_1_vbmi(int64_t ng, const char *w, const int8_t *q, const float *d, const float *s4,
                                          __m512i gidx, __m512i widx)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    int64_t g;
    for (g = 0; g < ng; g++, w += 80, q += 128, d += 16, s4 += 16) {
        ck_pf_lines(w, 3); /* 80 bytes a group, up to 60 more between rows */
        const __m512i a = group_head(w), b = group_tail(w, 20);
        const __m512i x = _mm512_permutex2var_epi8(a, gidx, b), dm = _mm512_permutexvar_epi16(widx, a);
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(x, m4), _mm512_loadu_si512((const void *)q));
        p = _mm512_dpbusd_epi32(p, _mm512_and_si512(_mm512_srli_epi16(x, 4), m4), _mm512_loadu_si512((const void *)(q + 64)));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(dm)), _mm512_loadu_ps(d)),
                              _mm512_cvtepi32_ps(p), acc);
        accm = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1)), _mm512_loadu_ps(s4), accm);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc, accm));
}
/* q5_0 / q5_1: the 4 blocks' nibbles as above, and the fifth bits from qh (bit j: element j, bit 16 + j:
 * element 16 + j) as two 64-bit masks, one per half, that add 16 to their bytes. The words (scales, mins, qh)
 * come from both loads (block 3's lie past the first 64 bytes), all in one two-source word permute. */
CK_VBMI static inline __m512i word_index2(int bsize, int first, int second)
{
    uint16_t idx[32];
    int l;
    for (l = 0; l < 32; l++) {
        const int field = l < 16 ? first : second;
        const int k = (bsize * ((l % 16) / 4) + (field < 0 ? 0 : field)) / 2; /* the word in the group */
        idx[l] = (uint16_t)(k < 32 ? k : 32 + k - group_tail_at(bsize) / 2); /* 32 + i: word i of B */
    }
    return _mm512_loadu_si512((const void *)idx);
}

/* words 0-3: each block's qh bits 0-15, words 4-7: bits 16-31 */
CK_VBMI static inline __m512i qh_index(int bsize, int qh)
{
    uint16_t idx[32];
    int l;
    memset(idx, 0, sizeof idx);
    for (l = 0; l < 8; l++) {
        const int k = (bsize * (l % 4) + qh) / 2 + l / 4;
        idx[l] = (uint16_t)(k < 32 ? k : 32 + k - group_tail_at(bsize) / 2); /* 32 + i: word i of B */
    }
    return _mm512_loadu_si512((const void *)idx);
}

/* q5_0's words: 0-15 its 4 blocks' scales on 4 lanes each (word_index2), 16-23 their qh words (qh_index) */
CK_VBMI static inline __m512i q5_0_word_index(void)
{
    uint16_t sc[32], qh[32], idx[32];
    int l;
    _mm512_storeu_si512((void *)sc, word_index2(22, 0, -1));
    _mm512_storeu_si512((void *)qh, qh_index(22, 2));
    for (l = 0; l < 32; l++) idx[l] = l < 16 ? sc[l] : l < 24 ? qh[l - 16] : sc[0];
    return _mm512_loadu_si512((const void *)idx);
}

/* q5_1's words: 0-3 its 4 blocks' scales, 4-7 their mins, 8-15 their qh words */
CK_VBMI static inline __m512i q5_1_word_index(void)
{
    uint16_t sc[32], qh[32], idx[32];
    int l;
    _mm512_storeu_si512((void *)sc, word_index2(24, 0, 2));
    _mm512_storeu_si512((void *)qh, qh_index(24, 4));
    for (l = 0; l < 32; l++) idx[l] = l < 4 ? sc[4 * l] : l < 8 ? sc[16 + 4 * (l - 4)] : l < 16 ? qh[l - 8] : sc[0];
    return _mm512_loadu_si512((const void *)idx);
}

/* The fifth bits' masks, by vpshufbitqmb: a word permute of the words (q5_0_word_index, q5_1_word_index) puts
 * block b's 32 qh bits in 64-bit lanes 2b and 2b + 1 (their qh words are at `at` and at + 4 there), and byte
 * j of the low nibbles' mask index is bit j % 16 of its lane (the high nibbles': 16 + j % 16). This took q5_0 to
 * 37.0 GB/s from 36.1 and q5_1 to 38.3 from 36.1, where the masks were moved from general registers (1.1B shape,
 * one thread, AMD EPYC Zen 5 VM, interleaved) */
CK_VBMI static inline __m512i qh_lane_index(int at)
{
    uint16_t idx[32];
    int l;
    for (l = 0; l < 32; l++) idx[l] = (uint16_t)(l % 4 == 0 ? at + l / 8 : l % 4 == 1 ? at + 4 + l / 8 : 0);
    return _mm512_loadu_si512((const void *)idx);
}

CK_VBMI static inline __m512i qh_bit_index(void)
{
    uint8_t idx[64];
    int j;
    for (j = 0; j < 64; j++) idx[j] = (uint8_t)(j % 16);
    return _mm512_loadu_si512((const void *)idx);
}

CK_VBMI static inline float dot_q5_vbmi(int has_min, int bsize, int64_t ng, const char *w, const int8_t *q,
                                        const float *d, const int32_t *off, const float *s4, __m512i gidx,
                                        __m512i widx, __m512i hidx, __m512i bidx)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    int64_t g;
    for (g = 0; g < ng; g++, w += 4 * bsize, q += 128, d += 16, off += 16, s4 += 16) {
        ck_pf_lines(w, 3); /* 88 / 96 bytes a group, up to 66 / 72 more between rows */
        const __m512i a = group_head(w), b = group_tail(w, bsize);
        const __m512i x = _mm512_permutex2var_epi8(a, gidx, b), dm = _mm512_permutex2var_epi16(a, widx, b);
        /* one two-source word permute gives the scales, q5_1's mins and the qh words (q5_0_word_index,
         * q5_1_word_index): a second one, for the qh words, made q5_0 read 24.3 GB/s where this reads 32.0 and
         * q5_1 33.3 where this reads 37.5 (1.1B shape, one thread, AMD EPYC Zen 5 VM, interleaved) */
        const __m512i qh = _mm512_permutexvar_epi16(hidx, dm);
        const __mmask64 klo = _mm512_bitshuffle_epi64_mask(qh, bidx);
        const __mmask64 khi = _mm512_bitshuffle_epi64_mask(qh, _mm512_add_epi8(bidx, sixteen));
        const __m512i l4 = _mm512_and_si512(x, m4), h4 = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
        __m512i p = has_min ? _mm512_setzero_si512() : _mm512_slli_epi32(_mm512_loadu_si512((const void *)off), 1);
        p = _mm512_dpbusd_epi32(p, _mm512_mask_add_epi8(l4, klo, l4, sixteen), _mm512_loadu_si512((const void *)q));
        p = _mm512_dpbusd_epi32(p, _mm512_mask_add_epi8(h4, khi, h4, sixteen), _mm512_loadu_si512((const void *)(q + 64)));
        if (has_min) { /* dm: words 0-3 the scales, 4-7 the mins, 8-15 the qh words (q5_1_word_index) */
            const __m512 sm = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm512_castsi512_si128(dm)));
            const __m512i four = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
            acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_permutexvar_ps(four, sm), _mm512_loadu_ps(d)), _mm512_cvtepi32_ps(p), acc);
            accm = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_add_epi32(four, _mm512_set1_epi32(4)), sm), _mm512_loadu_ps(s4), accm);
        } else {
            acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(dm)), _mm512_loadu_ps(d)),
                                  _mm512_cvtepi32_ps(p), acc);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc, accm));
}

/* rows [n0, n1) of q4_0 for tokens t0 and t1 together (see ck_qdot4_rows2) */
CK_VBMI static void rows_q4_0_vbmi2(float *out0, float *out1, const ck_qdot4_acts *a, int t0, int t1, const char *rows,
                                    size_t row_bytes, const void *act0, const void *act1, ck_vec_dot_fn tail_dot,
                                    const float *bias, const float *add0, const float *add1, int64_t n0, int64_t n1)
{
    const int64_t ng = a->K / 128, tail = a->K / CK_QK - 4 * ng;
    const size_t at0 = (size_t)t0 * (size_t)ng, at1 = (size_t)t1 * (size_t)ng;
    const size_t tail_at = 4 * (size_t)ng * sizeof(ck_block_q8_0);
    const __m512i gidx = gather_index(18, 2), widx = word_index(18);
    int64_t n;
    for (n = n0; n < n1; n++) {
        const char *w = rows + (size_t)n * row_bytes;
        float v0, v1;
        dot_q4_0_vbmi2(&v0, &v1, ng, w, a->q + at0 * 128, a->d + at0 * 16, a->off + at0 * 16, a->q + at1 * 128,
                       a->d + at1 * 16, a->off + at1 * 16, gidx, widx);
        if (tail) {
            v0 += tail_dot(tail * CK_QK, w + 4 * ng * 18, (const char *)act0 + tail_at);
            v1 += tail_dot(tail * CK_QK, w + 4 * ng * 18, (const char *)act1 + tail_at);
        }
        out0[n] = v0 + (bias ? bias[n] : 0.0f) + (add0 ? add0[n] : 0.0f);
        out1[n] = v1 + (bias ? bias[n] : 0.0f) + (add1 ? add1[n] : 0.0f);
    }
}

/* rows [n0, n1) of one token (see ck_qdot4_rows): the shuffle indices built once */
CK_VBMI static void rows_vbmi(float *out, const ck_qdot4_acts *a, int t, int type, const char *rows, size_t row_bytes,
                              const void *act_row, ck_vec_dot_fn tail_dot, const float *bias, const float *add,
                              int64_t n0, int64_t n1)
{
    const int64_t ng = a->K / 128, tail = a->K / CK_QK - 4 * ng;
    const size_t at = (size_t)t * (size_t)ng;
    /* the block: bytes, where its nibbles start; q8_1 activations for the formats with a min */
    const int bsize = type == CK_Q_Q4_0 ? 18 : type == CK_Q_Q4_1 ? 20 : type == CK_Q_Q5_0 ? 22 : 24;
    const int qoff = type == CK_Q_Q4_0 ? 2 : type == CK_Q_Q4_1 ? 4 : type == CK_Q_Q5_0 ? 6 : 8;
    const int has_min = type == CK_Q_Q4_1 || type == CK_Q_Q5_1;
    const char *act_tail = (const char *)act_row + 4 * ng * (has_min ? sizeof(ck_block_q8_1) : sizeof(ck_block_q8_0));
    const __m512i gidx = gather_index(bsize, qoff), widx = word_index(bsize);
    const __m512i widx5 = type == CK_Q_Q5_0 ? q5_0_word_index() : q5_1_word_index(); /* (q5_0 / q5_1 only) */
    const __m512i hidx = qh_lane_index(type == CK_Q_Q5_0 ? 16 : 8), bidx = qh_bit_index();
    const int8_t *q = a->q + at * 128;
    const float *d = a->d + at * 16, *s4 = a->s4 + at * 16;
    const int32_t *off = a->off + at * 16;
    int64_t n;
    for (n = n0; n < n1; n++) {
        const char *w = rows + (size_t)n * row_bytes;
        float v;
        switch (type) {
        case CK_Q_Q4_0: v = dot_q4_0_vbmi(ng, w, q, d, off, gidx, widx); break;
        case CK_Q_Q4_1: v = dot_q4_1_vbmi(ng, w, q, d, s4, gidx, widx); break;
        case CK_Q_Q5_0: v = dot_q5_vbmi(0, 22, ng, w, q, d, off, s4, gidx, widx5, hidx, bidx); break;
        default: v = dot_q5_vbmi(1, 24, ng, w, q, d, off, s4, gidx, widx5, hidx, bidx); break;
        }
        if (tail) v += tail_dot(tail * CK_QK, w + 4 * ng * (size_t)bsize, act_tail); /* the last 1-3 blocks, by the one-block body */
        out[n] = v + (bias ? bias[n] : 0.0f) + (add ? add[n] : 0.0f); /* add may be out itself */
    }
}

/* ---- the same on AVX2 (and AVX-VNNI): two blocks per 256-bit register ------------------------------------------
 * Two 16-byte loads put blocks 2i and 2i + 1's nibbles in the two halves of one register, so the activations in
 * ck_qdot4_acts' order (per 128 elements: the 4 blocks' quants 0-15, then 16-31) meet them lane for lane: each
 * block's exact integer dot product lands in 4 int32 lanes. Two groups (8 blocks) at a time, three horizontal
 * adds reduce each block's 4 lanes to one, so the float work (conversion, the weights' f16 scales times the
 * token's, one multiply-add) is done once for 8 blocks, the 8 scales packed from 8 word loads (CK_A2_PAIR). Per
 * 128 weights about 33 instructions where scales placed on each block's 4 lanes (CK_A2_ACC, still the step of an
 * odd last group) took about 39, and the one-block body (qlinear.c) about 70: 1.1B shape, one thread, GB/s of
 * weights read from DRAM (AMD EPYC Zen 5 VM, interleaved) CK_KERNELS=avx2-vnni q4_0 28.8 -> 35.3, q4_1 27.0 ->
 * 36.2, q5_0 22.8 -> 23.4, q5_1 21.6 -> 24.7; avx2 q4_0 26.6 -> 31.9, q4_1 25.0 -> 32.6 (q5 bodies spend their
 * time on the fifth bits). Gathering the 8 scales with vpgatherdd instead read 0.82x. */
#define CK_A2 __attribute__((target("avx2,fma,f16c")))
#define CK_A2V __attribute__((target("avx2,fma,f16c,avxvnni")))

/* The fifth bits of four q5 blocks' halves: qh holds the blocks' 32-bit qh words (element j's fifth bit is bit j);
 * sel picks, in each 128-bit lane, the two qh bytes of one block's 16 elements, each byte 8 times. Byte j of
 * the result is 16 where its element's bit is set, else 0: one shuffle, two ands and a compare per register
 * (no scalar bit assembly or general-register broadcasts per pair of blocks) */
CK_A2 static inline __m256i a2_fifth(__m256i qh, __m256i sel)
{
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(qh, sel), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(16));
}

/* sel of a2_fifth: qh bytes lo, lo + 1 (each 8 times) in the low lane, hi, hi + 1 in the high lane */
#define CK_A2_SEL(lo, hi)                                                                                              \
    _mm256_setr_epi8(lo, lo, lo, lo, lo, lo, lo, lo, lo + 1, lo + 1, lo + 1, lo + 1, lo + 1, lo + 1, lo + 1, lo + 1, hi, \
                     hi, hi, hi, hi, hi, hi, hi, hi + 1, hi + 1, hi + 1, hi + 1, hi + 1, hi + 1, hi + 1, hi + 1)

/* blocks b and b + 1's 16 nibble bytes (at byte qoff of each) in the low and high half */
CK_A2 static inline __m256i a2_nibbles(const char *w, int bsize, int qoff)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(w + qoff))),
                                   _mm_loadu_si128((const __m128i *)(w + bsize + qoff)), 1);
}

CK_A2 static inline uint32_t a2_u32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* A group of 4 blocks of one row, unpacked: the blocks' 32-bit words (scale, and min), and the bytes of their
 * low / high nibbles (with q5's fifth bits): blocks 0, 1 in l0 / h0, blocks 2, 3 in l1 / h1 */
typedef struct {
    __m128i words;
    __m256i l0, h0, l1, h1;
} a2_group;

CK_A2 static inline __attribute__((always_inline)) void a2_unpack(a2_group *u, int type, const char *w)
{
    const int bsize = type == CK_Q_Q4_0 ? 18 : type == CK_Q_Q4_1 ? 20 : type == CK_Q_Q5_0 ? 22 : 24;
    const int qoff = bsize - 16, has_min = type == CK_Q_Q4_1 || type == CK_Q_Q5_1;
    const int q5 = type == CK_Q_Q5_0 || type == CK_Q_Q5_1, qh = has_min ? 4 : 2;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i x0 = a2_nibbles(w, bsize, qoff), x1 = a2_nibbles(w + 2 * bsize, bsize, qoff);
    u->words = _mm_setr_epi32((int)a2_u32(w), (int)a2_u32(w + bsize), (int)a2_u32(w + 2 * bsize),
                              (int)a2_u32(w + 3 * bsize));
    u->l0 = _mm256_and_si256(x0, m4), u->h0 = _mm256_and_si256(_mm256_srli_epi16(x0, 4), m4);
    u->l1 = _mm256_and_si256(x1, m4), u->h1 = _mm256_and_si256(_mm256_srli_epi16(x1, 4), m4);
    if (q5) { /* qh bytes 0-1 of a block: its low nibbles' fifth bits, bytes 2-3: its high nibbles'. Blocks 0 and 1's
               * qh words in bytes 0-3 of the two halves, by two 16-byte loads (the last one ends inside the group),
               * as the nibbles: this read q5_0 at 19.4 GB/s where 4 scalar loads, inserts and a broadcast of
               * the 4 words read 18.1, q5_1 19.1 where they read 18.0 (CK_KERNELS=avx2, 1.1B shape, one thread,
               * AMD EPYC Zen 5 VM, interleaved) */
        const __m256i hq01 = a2_nibbles(w, bsize, qh), hq23 = a2_nibbles(w + 2 * bsize, bsize, qh);
        u->l0 = _mm256_or_si256(u->l0, a2_fifth(hq01, CK_A2_SEL(0, 0)));
        u->h0 = _mm256_or_si256(u->h0, a2_fifth(hq01, CK_A2_SEL(2, 2)));
        u->l1 = _mm256_or_si256(u->l1, a2_fifth(hq23, CK_A2_SEL(0, 0)));
        u->h1 = _mm256_or_si256(u->h1, a2_fifth(hq23, CK_A2_SEL(2, 2)));
    }
}

/* One token's share of a group: DOT(lo, hi, qa_lo, qa_hi, acc) adds each lane's 8 products to acc (maddubs +
 * madd, or one vpdpbusd each with AVX-VNNI); then the blocks' scales times the token's, and the mins' term */
#define CK_A2_DOT_PLAIN(l, h, al, ah, acc)                                                                      \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(l, al), _mm256_maddubs_epi16(h, ah)), \
                                            _mm256_set1_epi16(1)))
#define CK_A2_DOT_VNNI(l, h, al, ah, acc) _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, l, al), h, ah)
#define CK_A2_ACC(DOT, type, u, q, d, off, s4, acc0, acc1, accm)                                                      \
    do {                                                                                                               \
        const int has_min_ = (type) == CK_Q_Q4_1 || (type) == CK_Q_Q5_1, q5_ = (type) == CK_Q_Q5_0 || (type) == CK_Q_Q5_1; \
        /* the scales (word 0 of each block) of blocks 0, 1 and of 2, 3 on their 4 lanes each; the mins (word 1) */  \
        const __m128i sc01 = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 4, 5, 4, 5, 4, 5, 4, 5);                        \
        const __m128i sc23 = _mm_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 12, 13, 12, 13, 12, 13, 12, 13);                \
        __m256i p0, p1;                                                                                                \
        if (has_min_) {                                                                                                \
            p0 = _mm256_setzero_si256();                                                                               \
            p1 = _mm256_setzero_si256();                                                                               \
        } else { /* q4_0's -8 sum qa per lane; q5_0's -16 */                                                           \
            p0 = _mm256_loadu_si256((const __m256i *)(off));                                                           \
            p1 = _mm256_loadu_si256((const __m256i *)((off) + 8));                                                     \
            if (q5_) {                                                                                                 \
                p0 = _mm256_slli_epi32(p0, 1);                                                                         \
                p1 = _mm256_slli_epi32(p1, 1);                                                                         \
            }                                                                                                          \
        }                                                                                                              \
        p0 = DOT((u).l0, (u).h0, _mm256_loadu_si256((const __m256i *)(q)), _mm256_loadu_si256((const __m256i *)((q) + 64)), p0); \
        p1 = DOT((u).l1, (u).h1, _mm256_loadu_si256((const __m256i *)((q) + 32)),                                     \
                 _mm256_loadu_si256((const __m256i *)((q) + 96)), p1);                                                 \
        acc0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_shuffle_epi8((u).words, sc01)), _mm256_loadu_ps(d)),  \
                               _mm256_cvtepi32_ps(p0), acc0);                                                          \
        acc1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_shuffle_epi8((u).words, sc23)), _mm256_loadu_ps((d) + 8)), \
                               _mm256_cvtepi32_ps(p1), acc1);                                                          \
        if (has_min_) {                                                                                                \
            const __m128i mn01 = _mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3, 6, 7, 6, 7, 6, 7, 6, 7);                    \
            const __m128i mn23 = _mm_setr_epi8(10, 11, 10, 11, 10, 11, 10, 11, 14, 15, 14, 15, 14, 15, 14, 15);    \
            accm = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_shuffle_epi8((u).words, mn01)), _mm256_loadu_ps(s4), accm);    \
            accm = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_shuffle_epi8((u).words, mn23)), _mm256_loadu_ps((s4) + 8), accm); \
        }                                                                                                              \
    } while (0)

/* Two groups (8 blocks) of one token: each block's integer sum reduced to one lane by three horizontal adds,
 * lanes in the order [0, 2, 4, 6, 1, 3, 5, 7] of the pair (ck_qdot4_acts' d8), then one conversion, one
 * scale product and one multiply-add for the 8 blocks; the 8 blocks' f16 scales (and mins) by 8 word loads */
#define CK_A2_PAIR(DOT, type, w, u, v, q, d8, off8, s8, acc, accm)                                                     \
    do {                                                                                                               \
        const int bs_ = (type) == CK_Q_Q4_0 ? 18 : (type) == CK_Q_Q4_1 ? 20 : (type) == CK_Q_Q5_0 ? 22 : 24;           \
        const int has_min_ = (type) == CK_Q_Q4_1 || (type) == CK_Q_Q5_1, q5_ = (type) == CK_Q_Q5_0 || (type) == CK_Q_Q5_1; \
        const __m256i z_ = _mm256_setzero_si256();                                                                     \
        const __m256i p0_ = DOT((u).l0, (u).h0, _mm256_loadu_si256((const __m256i *)(q)),                              \
                                _mm256_loadu_si256((const __m256i *)((q) + 64)), z_);                                  \
        const __m256i p1_ = DOT((u).l1, (u).h1, _mm256_loadu_si256((const __m256i *)((q) + 32)),                       \
                                _mm256_loadu_si256((const __m256i *)((q) + 96)), z_);                                  \
        const __m256i r0_ = DOT((v).l0, (v).h0, _mm256_loadu_si256((const __m256i *)((q) + 128)),                      \
                                _mm256_loadu_si256((const __m256i *)((q) + 192)), z_);                                 \
        const __m256i r1_ = DOT((v).l1, (v).h1, _mm256_loadu_si256((const __m256i *)((q) + 160)),                      \
                                _mm256_loadu_si256((const __m256i *)((q) + 224)), z_);                                 \
        __m256i h_ = _mm256_hadd_epi32(_mm256_hadd_epi32(p0_, p1_), _mm256_hadd_epi32(r0_, r1_));                      \
        const __m128i e_ = _mm_setr_epi32((int)a2_u32(w), (int)a2_u32((w) + 2 * bs_), (int)a2_u32((w) + 4 * bs_),      \
                                          (int)a2_u32((w) + 6 * bs_));                                                 \
        const __m128i o_ = _mm_setr_epi32((int)a2_u32((w) + bs_), (int)a2_u32((w) + 3 * bs_), (int)a2_u32((w) + 5 * bs_), \
                                          (int)a2_u32((w) + 7 * bs_));                                                 \
        const __m128i lo_ = _mm_set1_epi32(0xFFFF);                                                                    \
        if (!has_min_) {                                                                                               \
            __m256i o8_ = _mm256_loadu_si256((const __m256i *)(off8));                                                 \
            h_ = _mm256_add_epi32(h_, q5_ ? _mm256_slli_epi32(o8_, 1) : o8_);                                          \
        }                                                                                                              \
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_packus_epi32(_mm_and_si128(e_, lo_), _mm_and_si128(o_, lo_))), \
                                            _mm256_loadu_ps(d8)),                                                      \
                              _mm256_cvtepi32_ps(h_), acc);                                                            \
        if (has_min_)                                                                                                  \
            accm = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_packus_epi32(_mm_srli_epi32(e_, 16), _mm_srli_epi32(o_, 16))),  \
                                   _mm256_loadu_ps(s8), accm);                                                         \
    } while (0)

/* The body for one token: the dot product of a row's 4 ng blocks with the prepared activations, two groups per
 * step (an odd last group by the one-group step) */
#define CK_A2_BODY(NAME, ATTR, DOT)                                                                                   \
    ATTR static inline float NAME(int type, int64_t ng, const char *w, const ck_qdot4_acts *a, int t)                  \
    {                                                                                                                  \
        const int bsize = type == CK_Q_Q4_0 ? 18 : type == CK_Q_Q4_1 ? 20 : type == CK_Q_Q5_0 ? 22 : 24;              \
        const size_t at = (size_t)t * (size_t)ng, at8 = (size_t)t * (size_t)(ng / 2) * 8;                              \
        const int8_t *q = a->q + at * 128;                                                                             \
        const float *d8 = a->d8 + at8, *s8 = a->s8 + at8;                                                              \
        const int32_t *off8 = a->off8 + at8;                                                                           \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), accm = _mm256_setzero_ps();                  \
        int64_t g;                                                                                                     \
        for (g = 0; g + 1 < ng; g += 2, w += 8 * bsize, q += 256, d8 += 8, off8 += 8, s8 += 8) {                       \
            a2_group u, v;                                                                                             \
            ck_pf_lines(w, (11 * bsize + 63) / 64); /* two groups, and a row's 1-3 block tail after them */            \
            a2_unpack(&u, type, w);                                                                                    \
            a2_unpack(&v, type, w + 4 * bsize);                                                                        \
            CK_A2_PAIR(DOT, type, w, u, v, q, d8, off8, s8, acc0, accm);                                               \
        }                                                                                                              \
        if (g < ng) {                                                                                                  \
            a2_group u;                                                                                                \
            const size_t l = (at + (size_t)g) * 16;                                                                    \
            a2_unpack(&u, type, w);                                                                                    \
            CK_A2_ACC(DOT, type, u, q, a->d + l, a->off + l, a->s4 + l, acc0, acc1, accm);                             \
        }                                                                                                              \
        return ck_hsum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), accm));                                              \
    }
CK_A2_BODY(dot_avx2_g4, CK_A2, CK_A2_DOT_PLAIN)
CK_A2_BODY(dot_avxvnni_g4, CK_A2V, CK_A2_DOT_VNNI)

/* The same for two tokens (a batch of sequences), each group unpacked once for both; each token's operations
 * and their order are the one-token body's, so its result is too, bit for bit */
#define CK_A2_BODY2(NAME, ATTR, DOT)                                                                                  \
    ATTR static inline void NAME(int type, int64_t ng, const char *w, const ck_qdot4_acts *a, int t0, int t1,          \
                                 float *v0, float *v1)                                                                 \
    {                                                                                                                  \
        const int bsize = type == CK_Q_Q4_0 ? 18 : type == CK_Q_Q4_1 ? 20 : type == CK_Q_Q5_0 ? 22 : 24;              \
        const size_t at0 = (size_t)t0 * (size_t)ng, at1 = (size_t)t1 * (size_t)ng;                                     \
        const size_t a80 = (size_t)t0 * (size_t)(ng / 2) * 8, a81 = (size_t)t1 * (size_t)(ng / 2) * 8;                 \
        const int8_t *q = a->q + at0 * 128, *qb = a->q + at1 * 128;                                                    \
        const float *d8 = a->d8 + a80, *s8 = a->s8 + a80, *db8 = a->d8 + a81, *sb8 = a->s8 + a81;                      \
        const int32_t *off8 = a->off8 + a80, *offb8 = a->off8 + a81;                                                   \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), accm = _mm256_setzero_ps();                  \
        __m256 bcc0 = _mm256_setzero_ps(), bcc1 = _mm256_setzero_ps(), bccm = _mm256_setzero_ps();                  \
        int64_t g;                                                                                                     \
        for (g = 0; g + 1 < ng; g += 2, w += 8 * bsize, q += 256, qb += 256, d8 += 8, off8 += 8, s8 += 8, db8 += 8,    \
                                offb8 += 8, sb8 += 8) {                                                                \
            a2_group u, v;                                                                                             \
            ck_pf_lines(w, (11 * bsize + 63) / 64);                                                                    \
            a2_unpack(&u, type, w);                                                                                    \
            a2_unpack(&v, type, w + 4 * bsize);                                                                        \
            CK_A2_PAIR(DOT, type, w, u, v, q, d8, off8, s8, acc0, accm);                                               \
            CK_A2_PAIR(DOT, type, w, u, v, qb, db8, offb8, sb8, bcc0, bccm);                                           \
        }                                                                                                              \
        if (g < ng) {                                                                                                  \
            a2_group u;                                                                                                \
            const size_t l0 = (at0 + (size_t)g) * 16, l1 = (at1 + (size_t)g) * 16;                                     \
            a2_unpack(&u, type, w);                                                                                    \
            CK_A2_ACC(DOT, type, u, q, a->d + l0, a->off + l0, a->s4 + l0, acc0, acc1, accm);                          \
            CK_A2_ACC(DOT, type, u, qb, a->d + l1, a->off + l1, a->s4 + l1, bcc0, bcc1, bccm);                         \
        }                                                                                                              \
        *v0 = ck_hsum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), accm));                                               \
        *v1 = ck_hsum8(_mm256_add_ps(_mm256_add_ps(bcc0, bcc1), bccm));                                               \
    }
CK_A2_BODY2(dot2_avx2_g4, CK_A2, CK_A2_DOT_PLAIN)
CK_A2_BODY2(dot2_avxvnni_g4, CK_A2V, CK_A2_DOT_VNNI)

/* rows [n0, n1) of one token (see ck_qdot4_rows); the type a constant in each call, so each body specializes */
#define CK_A2_ROWS(NAME, ATTR, BODY)                                                                                  \
    ATTR static void NAME(float *out, const ck_qdot4_acts *a, int t, int type, const char *rows, size_t row_bytes,  \
                          const void *act_row, ck_vec_dot_fn tail_dot, const float *bias, const float *add, int64_t n0, \
                          int64_t n1)                                                                                  \
    {                                                                                                                  \
        const int64_t ng = a->K / 128, tail = a->K / CK_QK - 4 * ng;                                                   \
        const int bsize = type == CK_Q_Q4_0 ? 18 : type == CK_Q_Q4_1 ? 20 : type == CK_Q_Q5_0 ? 22 : 24;              \
        const int has_min = type == CK_Q_Q4_1 || type == CK_Q_Q5_1;                                                   \
        const char *act_tail = (const char *)act_row + 4 * ng * (has_min ? sizeof(ck_block_q8_1) : sizeof(ck_block_q8_0)); \
        int64_t n;                                                                                                     \
        for (n = n0; n < n1; n++) {                                                                                    \
            const char *w = rows + (size_t)n * row_bytes;                                                              \
            float v;                                                                                                   \
            switch (type) {                                                                                            \
            case CK_Q_Q4_0: v = BODY(CK_Q_Q4_0, ng, w, a, t); break;                                                   \
            case CK_Q_Q4_1: v = BODY(CK_Q_Q4_1, ng, w, a, t); break;                                                   \
            case CK_Q_Q5_0: v = BODY(CK_Q_Q5_0, ng, w, a, t); break;                                                   \
            default: v = BODY(CK_Q_Q5_1, ng, w, a, t); break;                                                          \
            }                                                                                                          \
            if (tail) v += tail_dot(tail * CK_QK, w + 4 * ng * (size_t)bsize, act_tail);                              \
            out[n] = v + (bias ? bias[n] : 0.0f) + (add ? add[n] : 0.0f);                                             \
        }                                                                                                              \
    }
CK_A2_ROWS(rows_avx2, CK_A2, dot_avx2_g4)
CK_A2_ROWS(rows_avxvnni, CK_A2V, dot_avxvnni_g4)

/* rows [n0, n1) of tokens t0 and t1 together (see ck_qdot4_rows2) */
#define CK_A2_ROWS2(NAME, ATTR, BODY2)                                                                                \
    ATTR static void NAME(float *out0, float *out1, const ck_qdot4_acts *a, int t0, int t1, int type,                 \
                          const char *rows, size_t row_bytes, const void *act0, const void *act1,                     \
                          ck_vec_dot_fn tail_dot, const float *bias, const float *add0, const float *add1, int64_t n0, \
                          int64_t n1)                                                                                  \
    {                                                                                                                  \
        const int64_t ng = a->K / 128, tail = a->K / CK_QK - 4 * ng;                                                   \
        const int bsize = type == CK_Q_Q4_0 ? 18 : type == CK_Q_Q4_1 ? 20 : type == CK_Q_Q5_0 ? 22 : 24;              \
        const int has_min = type == CK_Q_Q4_1 || type == CK_Q_Q5_1;                                                   \
        const size_t tail_at = 4 * (size_t)ng * (has_min ? sizeof(ck_block_q8_1) : sizeof(ck_block_q8_0));            \
        int64_t n;                                                                                                     \
        for (n = n0; n < n1; n++) {                                                                                    \
            const char *w = rows + (size_t)n * row_bytes;                                                              \
            float v0, v1;                                                                                              \
            switch (type) {                                                                                            \
            case CK_Q_Q4_0: BODY2(CK_Q_Q4_0, ng, w, a, t0, t1, &v0, &v1); break;                                       \
            case CK_Q_Q4_1: BODY2(CK_Q_Q4_1, ng, w, a, t0, t1, &v0, &v1); break;                                       \
            case CK_Q_Q5_0: BODY2(CK_Q_Q5_0, ng, w, a, t0, t1, &v0, &v1); break;                                       \
            default: BODY2(CK_Q_Q5_1, ng, w, a, t0, t1, &v0, &v1); break;                                              \
            }                                                                                                          \
            if (tail) {                                                                                                \
                v0 += tail_dot(tail * CK_QK, w + 4 * ng * (size_t)bsize, (const char *)act0 + tail_at);               \
                v1 += tail_dot(tail * CK_QK, w + 4 * ng * (size_t)bsize, (const char *)act1 + tail_at);               \
            }                                                                                                          \
            out0[n] = v0 + (bias ? bias[n] : 0.0f) + (add0 ? add0[n] : 0.0f);                                         \
            out1[n] = v1 + (bias ? bias[n] : 0.0f) + (add1 ? add1[n] : 0.0f);                                         \
        }                                                                                                              \
    }
CK_A2_ROWS2(rows2_avx2, CK_A2, dot2_avx2_g4)
CK_A2_ROWS2(rows2_avxvnni, CK_A2V, dot2_avxvnni_g4)
#endif

void ck_qdot4_rows2(float *out0, float *out1, const ck_qdot4_acts *a, int t0, int t1, int type, const char *rows,
                    size_t row_bytes, const void *act0, const void *act1, ck_vec_dot_fn tail_dot, const float *bias,
                    const float *add0, const float *add1, int64_t n0, int64_t n1)
{
#ifdef CK_X86
    if (type == CK_Q_Q4_0 && ck_cpu_avx512vbmi()) {
        rows_q4_0_vbmi2(out0, out1, a, t0, t1, rows, row_bytes, act0, act1, tail_dot, bias, add0, add1, n0, n1);
        return;
    }
    if (!ck_cpu_avx512vbmi()) { /* AVX2 (with AVX-VNNI or not): every type's groups unpacked once for both */
        (ck_cpu_vnni() ? rows2_avxvnni : rows2_avx2)(out0, out1, a, t0, t1, type, rows, row_bytes, act0, act1,
                                                     tail_dot, bias, add0, add1, n0, n1);
        return;
    }
#endif
    ck_qdot4_rows(out0, a, t0, type, rows, row_bytes, act0, tail_dot, bias, add0, n0, n1);
    ck_qdot4_rows(out1, a, t1, type, rows, row_bytes, act1, tail_dot, bias, add1, n0, n1);
}

void ck_qdot4_rows(float *out, const ck_qdot4_acts *a, int t, int type, const char *rows, size_t row_bytes,
                   const void *act_row, ck_vec_dot_fn tail_dot, const float *bias, const float *add, int64_t n0,
                   int64_t n1)
{
#ifdef CK_X86
    if (ck_cpu_avx512vbmi())
        rows_vbmi(out, a, t, type, rows, row_bytes, act_row, tail_dot, bias, add, n0, n1);
    else if (ck_cpu_vnni())
        rows_avxvnni(out, a, t, type, rows, row_bytes, act_row, tail_dot, bias, add, n0, n1);
    else
        rows_avx2(out, a, t, type, rows, row_bytes, act_row, tail_dot, bias, add, n0, n1);
#else
    (void)out, (void)a, (void)t, (void)type, (void)rows, (void)row_bytes, (void)act_row, (void)tail_dot, (void)bias, (void)add;
    (void)n0, (void)n1; /* not reached: ck_qdot4_takes() is 0 off x86 */
#endif
}
