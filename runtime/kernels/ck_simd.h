/*
 * ck_simd.h — the few vector primitives the hot kernels share (internal to
 * runtime/kernels; static inline, so each kernel file gets its own copy).
 *
 *   ck_vexp(y, x, n)          y[i] = exp(x[i])             (Cephes polynomial, < 1e-7 relative)
 *   ck_vdots(s, q, K, nb, D)  s[b] = q . K[b]  for nb rows of K[nb][D] (also an AVX-512 body)
 *   ck_vmacc(acc, p, V, nb, D) acc += sum_b p[b] * V[b]   for nb rows of V[nb][D] (also an AVX-512 body, same bits)
 *   ck_vsum(x, n)             sum of x[0..n) in 16 lanes
 *   ck_vscale(y, a, n)        y[i] *= a
 *   ck_vsqrt(y, x, n)         y[i] = sqrt(x[i])            (exactly rounded, as sqrtf; no libm call per value)
 *   ck_transpose16(m)         16 x 16 32-bit transpose in zmm registers (the AVX-512 panel packers')
 *   ck_transpose8(m)          8 x 8 in ymm registers (grouped-query attention's AVX2 key blocks)
 * Each call does a block of work, so the run-time dispatch is paid once per
 * block, not per element (a per-row call made attention slower, measured).
 *
 * Why intrinsics: the generated model is built with a plain `cc -O3` (no
 * -march, no -ffast-math), so the compiler keeps float clamps as branches and
 * will not vectorize exp, nor reassociate a dot product. Each primitive has
 * an AVX2+FMA body, picked at run time when the CPU has it, an SSE2 body
 * (always there on x86-64), NEON bodies on ARM64 (exp, dots, macc, sqrt) and
 * a scalar body for other architectures. The bodies differ only in the last
 * bits of rounding.
 */
#ifndef CK_SIMD_H
#define CK_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ck_kernels.h"

#if CK_NEON /* (ck_kernels.h) ARM64: NEON bodies, when ck_cpu_neon() (CK_KERNELS=portable: the scalar ones) */
#include <arm_neon.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define CK_X86 1
#include <immintrin.h>
#define CK_AVX2 __attribute__((target("avx2,fma")))
#define ck_has_avx2 ck_cpu_avx2 /* cpu.c: detected once, forcible by tests */
#endif

/* Decode reads each weight once, row after row: the hardware prefetcher alone keeps too few lines in flight
 * to reach the memory's bandwidth (measured on a 2-core Xeon VM: a q4_0 GEMV at 7.9 GB/s a thread without,
 * 11.7 with, of a 15 GB/s streaming read), so the row loops ask for the lines CK_PREFETCH_BYTES ahead (8 KiB
 * measured best for the streams below, against 2, 4 and 16). */
#ifndef CK_PREFETCH_BYTES
#define CK_PREFETCH_BYTES 8192
#endif
#ifndef CK_PREFETCH_LOCALITY
#define CK_PREFETCH_LOCALITY 3 /* __builtin_prefetch's: 3 = into L1 (prefetcht0) */
#endif

/* rows to look ahead for rows of `row_bytes` */
static inline int64_t ck_prefetch_rows_ahead(size_t row_bytes)
{
    return row_bytes >= CK_PREFETCH_BYTES ? 1 : (int64_t)(CK_PREFETCH_BYTES / row_bytes);
}

/* A prefetch stream over a range the caller reads front to back (a thread's rows of a GEMV): before reading at
 * `at`, ck_pf_ahead asks for the lines up to CK_PREFETCH_BYTES past it that it has not asked for yet, so the
 * requests go out a few lines per block, spread over the computation, rather than a row's worth in one burst
 * (ck_prefetch of the row ahead) that fills the line-fill buffers and stalls the core while they drain: perf
 * put 54% of q4_K decode on the instruction after that burst. Decode of the 1.1B shape on the 2-core Xeon VM
 * (scripts/bench_decode.py, old and new interleaved), 1 / 2 threads: q4_K 1.35x / 1.30x, q5_K 1.39x / 1.37x,
 * q6_K 1.26x / 1.24x, q4_0 1.24x / 1.21x, q8_0 1.19x / 1.18x, f16 1.16x / 1.33x; the AVX2 bodies 1.12-1.41x. */
typedef struct ck_pf_stream {
    const char *next, *end;
} ck_pf_stream;

static inline void ck_pf_start(ck_pf_stream *s, const void *begin, const void *end)
{
    s->next = (const char *)((uintptr_t)begin & ~(uintptr_t)63);
    s->end = (const char *)end;
}

static inline void ck_pf_ahead(ck_pf_stream *s, const void *at)
{
#if defined(__GNUC__)
    const char *to = (const char *)at + CK_PREFETCH_BYTES;
    if (to > s->end) to = s->end;
    for (; s->next < to; s->next += 64) __builtin_prefetch(s->next, 0, CK_PREFETCH_LOCALITY);
#else
    (void)s;
    (void)at;
#endif
}

/* ck_pf_ahead for a body that moves at most 64 n bytes along its rows between calls (one group or block per call):
 * n requests, one line apart, CK_PREFETCH_BYTES past `at`, with no loop over the stream's position and no branch.
 * Successive calls' lines then leave none out (a line index grows by at most n per call). The loop of ck_pf_ahead
 * (one or two lines per 72-byte q4_0 group, in a pattern of 8) cost that body a quarter of its time where the
 * weights came from the L3 cache: q4_0 decode with one layer of 2048-wide matrices in it, one thread, 43.4 -> 56.3
 * GB/s, q4_K 41.2 -> 44.8 (AMD EPYC Zen 5 VM, interleaved); from DRAM 0.99-1.03x. The lines past the stream's end
 * are asked for too (a prefetch does not fault); a stream's first CK_PREFETCH_BYTES are not (the hardware
 * prefetchers and the demand loads take them). No stream state: a body that may run without prefetching tests its
 * own flag (a NULL test inside here made GCC 12 at -O2 drop every prefetch of qdot4.c's bodies). */
static inline void ck_pf_lines(const void *at, int n)
{
#if defined(__GNUC__)
    const char *p = (const char *)at + CK_PREFETCH_BYTES;
    int i;
    for (i = 0; i < n; i++) __builtin_prefetch(p + 64 * i, 0, CK_PREFETCH_LOCALITY);
#else
    (void)at;
    (void)n;
#endif
}

/* every cache line of p[0, n) toward the caches (nothing off x86 / GCC-compatible compilers) */
static inline void ck_prefetch(const void *p, size_t n)
{
#if defined(__GNUC__)
    size_t i;
    for (i = 0; i < n; i += 64) __builtin_prefetch((const char *)p + i, 0, CK_PREFETCH_LOCALITY);
#else
    (void)p;
    (void)n;
#endif
}

/* exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2]; 0 below CK_EXP_LO (exp(-inf)
 * is 0, and a masked score's probability 0 rather than a denormal), NaN for NaN, exp(CK_EXP_HI) above it */
#define CK_EXP_LO (-87.0f)
#define CK_EXP_HI 88.0f
#define CK_LOG2E 1.44269504088896341f
#define CK_LN2_HI 0.693359375f
#define CK_LN2_LO (-2.12194440e-4f)
#define CK_EXP_P0 1.9875691500E-4f
#define CK_EXP_P1 1.3981999507E-3f
#define CK_EXP_P2 8.3334519073E-3f
#define CK_EXP_P3 4.1665795894E-2f
#define CK_EXP_P4 1.6666665459E-1f
#define CK_EXP_P5 5.0000001201E-1f

static inline float ck_exp1(float v)
{
    float fn, r, p, s;
    int32_t e;
    if (v != v) return v;
    if (v < CK_EXP_LO) return 0.0f;
    if (v > CK_EXP_HI) v = CK_EXP_HI;
    fn = (v * CK_LOG2E + 12582912.0f) - 12582912.0f; /* round to nearest */
    r = v - fn * CK_LN2_HI;
    r = r - fn * CK_LN2_LO;
    p = ((((CK_EXP_P0 * r + CK_EXP_P1) * r + CK_EXP_P2) * r + CK_EXP_P3) * r + CK_EXP_P4) * r + CK_EXP_P5;
    p = p * r * r + r + 1.0f;
    e = ((int32_t)fn + 127) << 23;
    memcpy(&s, &e, sizeof s);
    return p * s;
}

#ifdef CK_X86
CK_AVX2 static inline __m256 ck_exp8(__m256 v)
{
    __m256 fn, r, p;
    __m256i e;
    const __m256 under = _mm256_cmp_ps(v, _mm256_set1_ps(CK_EXP_LO), _CMP_LT_OQ);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q), x = v;
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(CK_EXP_LO)), _mm256_set1_ps(CK_EXP_HI));
    fn = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(CK_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(CK_LN2_HI), v);
    r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(CK_LN2_LO), r);
    p = _mm256_set1_ps(CK_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CK_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CK_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CK_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CK_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CK_EXP_P5));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fn), _mm256_set1_epi32(127)), 23);
    p = _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
    return _mm256_blendv_ps(p, x, nan);
}

static inline __m128 ck_exp4(__m128 v)
{
    __m128 fn, r, p;
    __m128i e;
    const __m128 magic = _mm_set1_ps(12582912.0f);
    const __m128 under = _mm_cmplt_ps(v, _mm_set1_ps(CK_EXP_LO)), nan = _mm_cmpunord_ps(v, v), x = v;
    v = _mm_min_ps(_mm_max_ps(v, _mm_set1_ps(CK_EXP_LO)), _mm_set1_ps(CK_EXP_HI));
    fn = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(v, _mm_set1_ps(CK_LOG2E)), magic), magic);
    r = _mm_sub_ps(v, _mm_mul_ps(fn, _mm_set1_ps(CK_LN2_HI)));
    r = _mm_sub_ps(r, _mm_mul_ps(fn, _mm_set1_ps(CK_LN2_LO)));
    p = _mm_set1_ps(CK_EXP_P0);
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(CK_EXP_P1));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(CK_EXP_P2));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(CK_EXP_P3));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(CK_EXP_P4));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(CK_EXP_P5));
    p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), r), _mm_set1_ps(1.0f));
    e = _mm_slli_epi32(_mm_add_epi32(_mm_cvtps_epi32(fn), _mm_set1_epi32(127)), 23);
    p = _mm_andnot_ps(under, _mm_mul_ps(p, _mm_castsi128_ps(e)));
    return _mm_or_ps(_mm_and_ps(nan, x), _mm_andnot_ps(nan, p));
}

CK_AVX2 static inline void ck_vexp_avx2(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ck_exp8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = ck_exp1(x[i]);
}

CK_AVX2 static inline float ck_hsum8(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}
/* the largest of the 8 lanes */
CK_AVX2 static inline float ck_hmax8(__m256 v)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

CK_AVX2 static inline void ck_vdots_avx2(float *s, const float *q, const float *K, size_t ld, int nb, int D)
{
    int b, i;
    for (b = 0; b < nb; b++) {
        const float *k = K + (size_t)b * ld;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        float t;
        for (i = 0; i + 16 <= D; i += 16) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), s1);
        }
        for (; i + 8 <= D; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), s0);
        t = ck_hsum8(_mm256_add_ps(s0, s1));
        for (; i < D; i++) t += q[i] * k[i];
        s[b] = t;
    }
}

CK_AVX2 static inline void ck_vmacc_avx2(float *acc, const float *p, const float *V, size_t ld, int nb, int D)
{
    int b, i = 0;
    /* 32 columns at a time: four independent FMA chains hide the FMA latency */
    for (; i + 32 <= D; i += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
        __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
        for (b = 0; b < nb; b++) {
            const float *v = V + (size_t)b * ld + i;
            __m256 pb = _mm256_set1_ps(p[b]);
            a0 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v), a0);
            a1 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + 8), a1);
            a2 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + 16), a2);
            a3 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + 24), a3);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
        _mm256_storeu_ps(acc + i + 16, a2);
        _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i + 8 <= D; i += 8) {
        __m256 a = _mm256_loadu_ps(acc + i);
        for (b = 0; b < nb; b++) a = _mm256_fmadd_ps(_mm256_set1_ps(p[b]), _mm256_loadu_ps(V + (size_t)b * ld + i), a);
        _mm256_storeu_ps(acc + i, a);
    }
    for (; i < D; i++)
        for (b = 0; b < nb; b++) acc[i] += p[b] * V[(size_t)b * ld + i];
}
/* m[c] = column c of the 8 x 8 matrix whose row r was m[r] (32-bit elements): interleave 32-bit, then 64-bit
 * within 128-bit lanes, then the lanes (24 shuffles) */
CK_AVX2 static inline void ck_transpose8(__m256 m[8])
{
    __m256 t[8], u[8];
    int r;
    for (r = 0; r < 8; r += 2) t[r] = _mm256_unpacklo_ps(m[r], m[r + 1]), t[r + 1] = _mm256_unpackhi_ps(m[r], m[r + 1]);
    for (r = 0; r < 8; r += 4) {
        u[r] = _mm256_shuffle_ps(t[r], t[r + 2], 0x44);
        u[r + 1] = _mm256_shuffle_ps(t[r], t[r + 2], 0xEE);
        u[r + 2] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0x44);
        u[r + 3] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0xEE);
    }
    for (r = 0; r < 4; r++) {
        m[r] = _mm256_permute2f128_ps(u[r], u[r + 4], 0x20);
        m[r + 4] = _mm256_permute2f128_ps(u[r], u[r + 4], 0x31);
    }
}

/* m[c] = column c of the 16 x 16 matrix whose row r was m[r] (32-bit elements): interleave 32-bit, then
 * 64-bit within 128-bit lanes, then the lanes (64 shuffles) */
#define CK_AVX512_TRANSPOSE __attribute__((target("avx512f")))
CK_AVX512_TRANSPOSE static inline void ck_transpose16(__m512 m[16])
{
    __m512 t[16];
    int r;
    for (r = 0; r < 16; r += 2) {
        t[r] = _mm512_unpacklo_ps(m[r], m[r + 1]);
        t[r + 1] = _mm512_unpackhi_ps(m[r], m[r + 1]);
    }
    for (r = 0; r < 16; r += 4) {
        m[r] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[r]), _mm512_castps_pd(t[r + 2])));
        m[r + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[r]), _mm512_castps_pd(t[r + 2])));
        m[r + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[r + 1]), _mm512_castps_pd(t[r + 3])));
        m[r + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[r + 1]), _mm512_castps_pd(t[r + 3])));
    }
    /* m[4g + j] now holds rows 4g..4g+3 of column j + 4 * lane in each 128-bit lane */
    for (r = 0; r < 4; r++) {
        const __m512 a = _mm512_shuffle_f32x4(m[r], m[4 + r], 0x88), b = _mm512_shuffle_f32x4(m[r], m[4 + r], 0xDD);
        const __m512 c = _mm512_shuffle_f32x4(m[8 + r], m[12 + r], 0x88), d = _mm512_shuffle_f32x4(m[8 + r], m[12 + r], 0xDD);
        t[r] = _mm512_shuffle_f32x4(a, c, 0x88);      /* column r */
        t[8 + r] = _mm512_shuffle_f32x4(a, c, 0xDD);  /* column r + 8 */
        t[4 + r] = _mm512_shuffle_f32x4(b, d, 0x88);  /* column r + 4 */
        t[12 + r] = _mm512_shuffle_f32x4(b, d, 0xDD); /* column r + 12 */
    }
    for (r = 0; r < 16; r++) m[r] = t[r];
}
#endif /* CK_X86 */

#if CK_NEON
/* ck_exp1 four at a time, the same operations (no fused multiply-adds: the scalar body's bits) */
static inline float32x4_t ck_exp4_neon(float32x4_t v)
{
    float32x4_t fn, r, p;
    int32x4_t e;
    const uint32x4_t under = vcltq_f32(v, vdupq_n_f32(CK_EXP_LO)), nan = vmvnq_u32(vceqq_f32(v, v));
    const float32x4_t x = v, magic = vdupq_n_f32(12582912.0f);
    v = vminq_f32(vmaxq_f32(v, vdupq_n_f32(CK_EXP_LO)), vdupq_n_f32(CK_EXP_HI));
    fn = vsubq_f32(vaddq_f32(vmulq_f32(v, vdupq_n_f32(CK_LOG2E)), magic), magic);
    r = vsubq_f32(v, vmulq_f32(fn, vdupq_n_f32(CK_LN2_HI)));
    r = vsubq_f32(r, vmulq_f32(fn, vdupq_n_f32(CK_LN2_LO)));
    p = vdupq_n_f32(CK_EXP_P0);
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(CK_EXP_P1));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(CK_EXP_P2));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(CK_EXP_P3));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(CK_EXP_P4));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(CK_EXP_P5));
    p = vaddq_f32(vaddq_f32(vmulq_f32(vmulq_f32(p, r), r), r), vdupq_n_f32(1.0f));
    e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(fn), vdupq_n_s32(127)), 23);
    p = vmulq_f32(p, vreinterpretq_f32_s32(e));
    p = vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(p), under));
    return vbslq_f32(nan, x, p);
}
#endif

static inline void ck_vexp(float *y, const float *x, int n)
{
    int i = 0;
#ifdef CK_X86
    if (ck_has_avx2()) {
        ck_vexp_avx2(y, x, n);
        return;
    }
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, ck_exp4(_mm_loadu_ps(x + i)));
#endif
#if CK_NEON
    if (ck_cpu_neon())
        for (; i + 4 <= n; i += 4) vst1q_f32(y + i, ck_exp4_neon(vld1q_f32(x + i)));
#endif
    for (; i < n; i++) y[i] = ck_exp1(x[i]);
}

#ifdef CK_X86
/* Decode's row sums, four rows at a time. A row body ends with a 16-lane accumulator; dropping its horizontal sum
 * per row (_mm512_reduce_add_ps: a chain of 4 shuffles and adds) made q4_K decode 11% faster (an upper bound: the
 * result was then wrong). Here the accumulators of 4 rows are kept and one tree of shuffles and adds over the 4
 * gives their 4 sums (13 operations for 4 rows where 4 reductions take 32), which go to out[n] + bias[n] +
 * add[n] (add may be out itself); ck_rows4_flush after the last row. Each row's sum is added within the row, in
 * the same order whatever the other rows are. q4_K / q5_K decode (qlinear.c), 1.1B shape, one thread, AMD EPYC
 * Zen 5 VM, interleaved: 0.975x / 0.977x the time. The 4-bit bodies of qdot4.c keep one sum per row: on their
 * shorter rows (K 512: 4 groups) this made decode 10% slower. */
typedef struct {
    __m512 a[4];
    int n;
    int64_t first;
} ck_rows4;

__attribute__((target("avx512f"))) static inline void ck_rows4_flush(ck_rows4 *r, float *out, const float *bias,
                                                                   const float *add)
{
    float s[16];
    int i;
    if (!r->n) return;
    for (i = r->n; i < 4; i++) r->a[i] = _mm512_setzero_ps();
    {
        /* [a0's 256-bit halves added | a1's], [a2's | a3's]; then [a0 | a1 | a2 | a3] folded to 4 lanes each */
        const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(r->a[0], r->a[1], 0x44), _mm512_shuffle_f32x4(r->a[0], r->a[1], 0xEE));
        const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(r->a[2], r->a[3], 0x44), _mm512_shuffle_f32x4(r->a[2], r->a[3], 0xEE));
        __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
        t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
        t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1)); /* row i's sum in lane 4 i */
        _mm512_storeu_ps(s, t);
    }
    for (i = 0; i < r->n; i++) {
        const int64_t j = r->first + i;
        out[j] = s[4 * i] + (bias ? bias[j] : 0.0f) + (add ? add[j] : 0.0f);
    }
    r->n = 0;
}

/* row n's sum is the sum of acc's 16 lanes (rows given in order; r->n = 0 to begin) */
__attribute__((target("avx512f"))) static inline void ck_rows4_put(ck_rows4 *r, __m512 acc, int64_t n, float *out,
                                                                 const float *bias, const float *add)
{
    if (!r->n) r->first = n;
    r->a[r->n++] = acc;
    if (r->n == 4) ck_rows4_flush(r, out, bias, add);
}

/* ck_vdots with AVX-512: 4 rows at a time sharing each load of q (four row streams in flight: f32 rows read
 * from the last-level cache ran at ~40 GB/s one row at a time on the 2-core Xeon VM of Nov 2026) */
__attribute__((target("avx512f,fma"))) static inline void ck_vdots_avx512(float *s, const float *q, const float *K,
                                                                        size_t ld, int nb, int D)
{
    int b = 0, i;
    for (; b + 4 <= nb; b += 4) {
        const float *k0 = K + (size_t)b * ld, *k1 = k0 + ld, *k2 = k1 + ld, *k3 = k2 + ld;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        float t0, t1, t2, t3;
        for (i = 0; i + 16 <= D; i += 16) {
            const __m512 qv = _mm512_loadu_ps(q + i);
            a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + i), a0);
            a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k1 + i), a1);
            a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k2 + i), a2);
            a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k3 + i), a3);
        }
        t0 = _mm512_reduce_add_ps(a0), t1 = _mm512_reduce_add_ps(a1);
        t2 = _mm512_reduce_add_ps(a2), t3 = _mm512_reduce_add_ps(a3);
        for (; i < D; i++) t0 += q[i] * k0[i], t1 += q[i] * k1[i], t2 += q[i] * k2[i], t3 += q[i] * k3[i];
        s[b] = t0, s[b + 1] = t1, s[b + 2] = t2, s[b + 3] = t3;
    }
    if (b < nb) ck_vdots_avx2(s + b, q, K + (size_t)b * ld, ld, nb - b, D);
}
/* ck_exp8 on 16 lanes: the same operations, so the same bits */
__attribute__((target("avx512f,fma"))) static inline __m512 ck_exp16(__m512 v)
{
    __m512 fn, r, p;
    __m512i e;
    const __mmask16 under = _mm512_cmp_ps_mask(v, _mm512_set1_ps(CK_EXP_LO), _CMP_LT_OQ);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512 x = v;
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(CK_EXP_LO)), _mm512_set1_ps(CK_EXP_HI));
    fn = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(CK_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(CK_LN2_HI), v);
    r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(CK_LN2_LO), r);
    p = _mm512_set1_ps(CK_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CK_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CK_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CK_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CK_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CK_EXP_P5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fn), _mm512_set1_epi32(127)), 23);
    p = _mm512_maskz_mul_ps((__mmask16)~under, p, _mm512_castsi512_ps(e));
    return _mm512_mask_blend_ps(nan, p, x);
}

/* ck_vmacc with AVX-512: 64 columns at a time in four chains, then 16, then 8 and single columns as the AVX2 one.
 * Each column's sum takes the same FMAs in the same order as ck_vmacc_avx2, so both give the same bits. */
__attribute__((target("avx512f,avx2,fma"))) static inline void ck_vmacc_avx512(float *acc, const float *p,
                                                                             const float *V, size_t ld, int nb, int D)
{
    int b, i = 0;
    for (; i + 64 <= D; i += 64) {
        __m512 a0 = _mm512_loadu_ps(acc + i), a1 = _mm512_loadu_ps(acc + i + 16);
        __m512 a2 = _mm512_loadu_ps(acc + i + 32), a3 = _mm512_loadu_ps(acc + i + 48);
        for (b = 0; b < nb; b++) {
            const float *v = V + (size_t)b * ld + i;
            const __m512 pb = _mm512_set1_ps(p[b]);
            a0 = _mm512_fmadd_ps(pb, _mm512_loadu_ps(v), a0);
            a1 = _mm512_fmadd_ps(pb, _mm512_loadu_ps(v + 16), a1);
            a2 = _mm512_fmadd_ps(pb, _mm512_loadu_ps(v + 32), a2);
            a3 = _mm512_fmadd_ps(pb, _mm512_loadu_ps(v + 48), a3);
        }
        _mm512_storeu_ps(acc + i, a0);
        _mm512_storeu_ps(acc + i + 16, a1);
        _mm512_storeu_ps(acc + i + 32, a2);
        _mm512_storeu_ps(acc + i + 48, a3);
    }
    for (; i + 16 <= D; i += 16) {
        __m512 a = _mm512_loadu_ps(acc + i);
        for (b = 0; b < nb; b++) a = _mm512_fmadd_ps(_mm512_set1_ps(p[b]), _mm512_loadu_ps(V + (size_t)b * ld + i), a);
        _mm512_storeu_ps(acc + i, a);
    }
    if (i < D) ck_vmacc_avx2(acc + i, p, V + i, ld, nb, D - i); /* its 8-column step and single columns */
}
#endif

/* s[b] = q . K[b] for nb rows of K (row stride ld) */
static inline void ck_vdots(float *s, const float *q, const float *K, size_t ld, int nb, int D)
{
    int b, i, k;
#ifdef CK_X86
    if (ck_cpu_avx512vnni()) {
        ck_vdots_avx512(s, q, K, ld, nb, D);
        return;
    }
    if (ck_has_avx2()) {
        ck_vdots_avx2(s, q, K, ld, nb, D);
        return;
    }
#endif
#if CK_NEON
    if (ck_cpu_neon()) { /* the 8 partial sums below in two registers */
        for (b = 0; b < nb; b++) {
            const float *kr = K + (size_t)b * ld;
            float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
            float acc[8], t;
            for (i = 0; i + 8 <= D; i += 8) {
                a0 = vaddq_f32(a0, vmulq_f32(vld1q_f32(q + i), vld1q_f32(kr + i)));
                a1 = vaddq_f32(a1, vmulq_f32(vld1q_f32(q + i + 4), vld1q_f32(kr + i + 4)));
            }
            vst1q_f32(acc, a0);
            vst1q_f32(acc + 4, a1);
            t = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; i < D; i++) t += q[i] * kr[i];
            s[b] = t;
        }
        return;
    }
#endif
    for (b = 0; b < nb; b++) {
        const float *kr = K + (size_t)b * ld;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t; /* 8 partial sums: vectorizes without reassociation */
        for (i = 0; i + 8 <= D; i += 8)
            for (k = 0; k < 8; k++) acc[k] += q[i + k] * kr[i + k];
        t = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; i < D; i++) t += q[i] * kr[i];
        s[b] = t;
    }
}

/* acc[:] += sum_b p[b] V[b][:] for nb rows of V (row stride ld) */
static inline void ck_vmacc(float *acc, const float *p, const float *V, size_t ld, int nb, int D)
{
    int b, i;
#ifdef CK_X86
    if (ck_cpu_avx512vnni()) {
        ck_vmacc_avx512(acc, p, V, ld, nb, D);
        return;
    }
    if (ck_has_avx2()) {
        ck_vmacc_avx2(acc, p, V, ld, nb, D);
        return;
    }
#endif
#if CK_NEON
    if (ck_cpu_neon()) {
        for (b = 0; b < nb; b++) {
            const float *v = V + (size_t)b * ld;
            const float32x4_t pb = vdupq_n_f32(p[b]);
            for (i = 0; i + 4 <= D; i += 4) vst1q_f32(acc + i, vaddq_f32(vld1q_f32(acc + i), vmulq_f32(pb, vld1q_f32(v + i))));
            for (; i < D; i++) acc[i] += p[b] * v[i];
        }
        return;
    }
#endif
    for (b = 0; b < nb; b++)
        for (i = 0; i < D; i++) acc[i] += p[b] * V[(size_t)b * ld + i];
}

/* sum of n floats in 16 interleaved partial sums (vector lanes; one running sum would be one dependent add
 * per element), added pairwise at the end */
static inline float ck_vsum(const float *x, int64_t n)
{
    float lane[16];
    int64_t k;
    int l;
    for (l = 0; l < 16; l++) lane[l] = 0.0f;
    for (k = 0; k + 16 <= n; k += 16)
        for (l = 0; l < 16; l++) lane[l] += x[k + l];
    for (; k < n; k++) lane[k % 16] += x[k];
    for (l = 8; l > 0; l /= 2) {
        int i;
        for (i = 0; i < l; i++) lane[i] += lane[i + l];
    }
    return lane[0];
}

static inline void ck_vscale(float *y, float a, int n)
{
    int i;
    for (i = 0; i < n; i++) y[i] *= a;
}

#ifdef CK_X86
CK_AVX2 static inline void ck_vsqrt_avx2(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) _mm_store_ss(y + i, _mm_sqrt_ss(_mm_load_ss(x + i)));
}
#endif

/* y = sqrt(x) (y may equal x): sqrtps, as exact as sqrtf, which a plain -O3 build calls per value (errno) */
static inline void ck_vsqrt(float *y, const float *x, int n)
{
    int i = 0;
#ifdef CK_X86
    if (ck_has_avx2()) {
        ck_vsqrt_avx2(y, x, n);
        return;
    }
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
    for (; i < n; i++) _mm_store_ss(y + i, _mm_sqrt_ss(_mm_load_ss(x + i)));
#else
#if CK_NEON
    if (ck_cpu_neon())
        for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vsqrtq_f32(vld1q_f32(x + i)));
#endif
    for (; i < n; i++) y[i] = sqrtf(x[i]);
#endif
}

/* o = softmax(x) over n values (o may equal x). A row that is entirely
 * -inf (fully masked; torch gives NaN) becomes uniform, to stay finite. */
/* A row of only -inf (or an empty max) gives `empty` everywhere: NaN for torch.softmax, 0 for attention's
 * query that may attend to nothing. */
static inline void ck_vsoftmax(float *o, const float *x, int n, float empty)
{
    float mx = -INFINITY, sum = 0.0f, inv;
    int i;
    for (i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) {
        for (i = 0; i < n; i++) o[i] = empty;
        return;
    }
    for (i = 0; i < n; i++) o[i] = x[i] - mx;
    ck_vexp(o, o, n);
    for (i = 0; i < n; i++) sum += o[i];
    inv = 1.0f / sum;
    for (i = 0; i < n; i++) o[i] *= inv;
}

#endif /* CK_SIMD_H */
