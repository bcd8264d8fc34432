/*
 * attention.c — the KV cache and causal grouped-query attention.
 *
 * Cache layout [KVH][cap][D] per layer: one head's keys are contiguous, so a
 * query streams them in order. Query head h reads KV head h / (H / KVH).
 *
 * The fast kernel is an online softmax (the flash-attention recurrence) over
 * blocks of 32 keys: running max m, running sum l and an accumulator o[D] are
 * rescaled by exp(m_old - m_new) whenever the max grows. No score matrix is
 * materialized, so attention needs no scratch memory at any context length.
 * (query, head) pairs are independent and split over the OpenMP team.
 *
 * With AVX-512, grouped-query attention (several query heads per KV head, D a multiple of 16) takes
 * attend_heads_512 instead: the heads of a group share each block of 32 keys, transposed once, so scores are
 * FMAs without a horizontal sum per key, and up to 4 heads at a time share each load of the transposed keys
 * and of the value rows. Against the kernel before it (blocks of 16 keys, one head at a time, AMD EPYC Zen 5
 * VM): prefill attention of the 1.1B shape (32 heads, 4 KV heads, D 64) 65 -> 134-143 GFLOP/s on one thread
 * (512-2048 tokens), whole-model q4_0 prefill +10% at 512 tokens and +20% at 1024; one decode step over 22
 * layers at 100 / 400 / 1000 cached positions 323 -> 189 / 1144 -> 694 / 2828 -> 1932 us on one thread. With
 * 2 or 3 heads per KV head and the cache in DRAM (SmolLM2's shape past ~700 positions) decode's attention is
 * 3-12% slower than before (1.13 -> 1.26 ms for 2 heads, 1.38 -> 1.43 for 3, 30 layers at 1000 positions);
 * a prompt without grouping runs 8 tokens of a head together on the same kernels (ck_attention);
 * whole-model decode over 16-516 positions is unchanged (+-2%) for both models. On AVX2 (D a multiple of 8),
 * attend_heads_avx2 does the same with blocks of 16 keys and 16 columns at a time: with CK_KERNELS=avx2 on the
 * same VM, prefill attention 42 -> 76-81 GFLOP/s; decode at 100 / 400 / 1000 positions 476 -> 291 / 1810 ->
 * 1039 / 4435 -> 2615 us (1.1B shape), 214 -> 162 / 823 -> 591 / 2105 -> 1499 us (SmolLM2's, 30 layers),
 * against its kernel of 8-key blocks and one head at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "ck_kernels.h"
#include "ck_simd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define CK_ATT_BLOCK 32
#define CK_ATT_MAX_D CK_ATTENTION_MAX_HEAD_DIM

void ck_kv_store(float *k_cache, float *v_cache, int cap, int pos0,
                 const float *k, int ldk, const float *v, int ldv, int T, int KVH, int D, const ck_seqmap *map)
{
    int t, h;
    for (h = 0; h < KVH; h++)
        for (t = 0; t < T; t++) {
            size_t dst = ((size_t)h * cap + (size_t)(ck_seq_start(map, t) + ck_seq_pos(map, pos0, t))) * D;
            memcpy(k_cache + dst, k + (size_t)t * ldk + (size_t)h * D, (size_t)D * sizeof(float));
            memcpy(v_cache + dst, v + (size_t)t * ldv + (size_t)h * D, (size_t)D * sizeof(float));
        }
}

static int first_key(int p, int window)
{
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* A decoded token's keys and values were evicted by the weights streamed since this layer last ran. A short
 * range is asked for all at once, so that its cache misses overlap instead of following one another; a long
 * one is asked for CK_PREFETCH_BYTES ahead of each block as the blocks go (ck_pf_stream, ck_simd.h). Before,
 * a long range had no software prefetch: one decode step's attention, 22 layers, one thread, AMD EPYC Zen 5 VM:
 * 32 KV heads (no grouping) at 400 / 1000 positions 8.1-8.7 -> 5.8-5.9 / 21-22 -> 16.7-17.2 ms; the 1.1B shape's
 * 4 KV heads at 1000 positions 4.2 -> 2.8 ms (1.43 on two threads); whole-model q4_0 decode over 16-516
 * positions +2-4%. */
typedef struct {
    ck_pf_stream k, v;
    int ahead;
} kv_prefetch;

static void kv_prefetch_start(kv_prefetch *p, const float *K, const float *V, int j0, int j1, int D, int cold)
{
    memset(p, 0, sizeof *p);
    if (!cold) return;
    p->ahead = j1 - j0 >= 4 * CK_ATT_BLOCK;
    if (p->ahead) {
        ck_pf_start(&p->k, K + (size_t)j0 * D, K + (size_t)(j1 + 1) * D);
        ck_pf_start(&p->v, V + (size_t)j0 * D, V + (size_t)(j1 + 1) * D);
    } else {
        const char *kb = (const char *)(K + (size_t)j0 * D), *ke = (const char *)(K + (size_t)(j1 + 1) * D);
        const char *vb = (const char *)(V + (size_t)j0 * D);
        for (; kb < ke; kb += 64, vb += 64) {
            __builtin_prefetch(kb);
            __builtin_prefetch(vb);
        }
    }
}

/* before the block of keys from j */
static inline void kv_prefetch_ahead(kv_prefetch *p, const float *K, const float *V, int j, int D)
{
    if (p->ahead) {
        ck_pf_ahead(&p->k, K + (size_t)j * D);
        ck_pf_ahead(&p->v, V + (size_t)j * D);
    }
}

static void attend_one(float *o, const float *q, const float *K, const float *V, int j0, int j1, int D,
                       float scale, float softcap, int cold)
{
    float acc[CK_ATT_MAX_D];
    float m = -INFINITY, l = 0.0f;
    kv_prefetch pf;
    int j, b, d;
    for (d = 0; d < D; d++) acc[d] = 0.0f;
    kv_prefetch_start(&pf, K, V, j0, j1, D, cold);
    for (j = j0; j <= j1; j += CK_ATT_BLOCK) {
        float s[CK_ATT_BLOCK];
        int nb = j1 + 1 - j < CK_ATT_BLOCK ? j1 + 1 - j : CK_ATT_BLOCK;
        float bm = -INFINITY, m_new;
        kv_prefetch_ahead(&pf, K, V, j, D);
        ck_vdots(s, q, K + (size_t)j * D, (size_t)D, nb, D);
        for (b = 0; b < nb; b++) {
            float sc = s[b] * scale;
            if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
            s[b] = sc;
            if (sc > bm) bm = sc;
        }
        m_new = bm > m ? bm : m;
        if (m > -INFINITY && m_new != m) { /* the max grew: rescale what is accumulated */
            float corr = expf(m - m_new);
            l *= corr;
            ck_vscale(acc, corr, D);
        }
        for (b = 0; b < nb; b++) s[b] -= m_new;
        ck_vexp(s, s, nb);
        for (b = 0; b < nb; b++) l += s[b];
        ck_vmacc(acc, s, V + (size_t)j * D, (size_t)D, nb, D);
        m = m_new;
    }
    ck_vscale(acc, 1.0f / l, D);
    memcpy(o, acc, (size_t)D * sizeof(float));
}

#ifdef CK_X86
/* the grouped kernels' blocks (of `block` keys): the requests spread over p V's keys (key = the value row being
 * read) rather than a block's worth at its start, the keys one block further than the values (a block's keys
 * are read before its values). Decode, AMD EPYC Zen 5 VM, 1000 cached positions, one thread, blocks of 32: 2 /
 * 3 / 8 heads per KV head 1.50 -> 1.26 / 1.73 -> 1.43 / 2.37 -> 1.93 ms against requests at each block's start. */
static inline void kv_prefetch_during(kv_prefetch *p, const float *K, const float *V, int key, int D, int block)
{
    if (p->ahead) {
        ck_pf_ahead(&p->k, K + (size_t)(key + block) * D);
        ck_pf_ahead(&p->v, V + (size_t)key * D);
    }
}

#define CK_ATT_G 8 /* at most this many query heads share one transposed block of keys */

/* Grouped-query attention with AVX-512: G query heads of one KV head over keys [j0, j1], 32 keys at a time.
 * The block's keys are transposed once (16 x 16 at a time) into kt: kt[2 d] and kt[2 d + 1] hold dimension d of
 * keys 0-15 and 16-31. Then, up to HQ = 4 heads at a time (heads_512):
 *   scores: each head's 32 scores are D FMAs per half of a broadcast query element with the two rows of kt, so
 *     one load of each row and one broadcast per head feed 2 HQ FMAs (the loads, two a cycle on Zen 5, not the
 *     FMAs, bounded the 16-key kernel this replaced) and no horizontal sum per key is needed;
 *   the online softmax on the 32 scores in two registers per head;
 *   p V on 64 columns at a time: each value row's 4 loads feed 4 HQ FMAs, the accumulators in registers.
 * Each head's arithmetic is the same whichever heads share the block (one chain over d per score half, value
 * rows in key order per column), so the result does not depend on G or on the grouping: a batch decodes bit
 * for bit as each sequence alone. */
#define CK_ATT_HQ 4 /* heads per pass over a block's kt */

typedef struct { /* one head's running state (attend_heads_512 and attend_heads_avx2) */
    float m;    /* the running max */
    union {
        __m512 v16;
        __m256 v8;
    } l;        /* the running sum, per lane: added across lanes at the end */
    float *acc; /* D floats, 64-byte aligned */
    const float *q;
    int lo, hi; /* its keys [lo, hi] */
} att_head;

/* The rows one call of a grouped kernel attends: up to CK_ATT_G query rows (a token's query head) over one KV
 * head's keys, each with its output and its query and over its own range [lo, hi] (a token's heads share one;
 * a prompt's tokens end one key apart) */
typedef struct {
    float *o[CK_ATT_G];
    const float *q[CK_ATT_G];
    int n, lo[CK_ATT_G], hi[CK_ATT_G];
} att_rows;

/* each row's state at the start (no max, zero sums, its accumulator acc[g]), and the keys all rows reach in
 * [*j0, *j1] */
static void att_heads_start(att_head *hd, float (*acc)[CK_ATT_MAX_D], const att_rows *R, int D, int *j0, int *j1)
{
    int g;
    *j0 = R->lo[0], *j1 = R->hi[0];
    for (g = 0; g < R->n; g++) {
        memset(&hd[g], 0, sizeof hd[g]); /* (the running sums of either kernel) */
        hd[g].m = -INFINITY, hd[g].acc = acc[g], hd[g].q = R->q[g], hd[g].lo = R->lo[g], hd[g].hi = R->hi[g];
        *j0 = R->lo[g] < *j0 ? R->lo[g] : *j0, *j1 = R->hi[g] > *j1 ? R->hi[g] : *j1;
        memset(acc[g], 0, sizeof(float) * (size_t)D);
    }
}

/* the bits of keys j .. j + nb - 1 (nb <= 32) inside [lo, hi] */
static inline uint32_t att_live(int lo, int hi, int j, int nb)
{
    int a = lo - j, b = hi - j;
    if (a < 0) a = 0;
    if (b > nb - 1) b = nb - 1;
    if (a > b) return 0;
    return (b >= 31 ? 0xFFFFFFFFu : (1u << (b + 1)) - 1u) & ~((1u << a) - 1u);
}

/* the prefetch stream of a block from key j of the range K, V (kv_prefetch_during), or none */
typedef struct {
    kv_prefetch *pf;
    const float *K, *V;
    int j;
} att_pf;

/* acc[h][i .. i + 63] += p[h] V over the block's nb keys, for HQ heads */
__attribute__((target("avx512f,avx2,fma"))) static inline __attribute__((always_inline)) void
pv_512(att_head *hd, float (*p)[32], const float *V, int nb, int D, int i, const int HQ, const att_pf *pf)
{
    __m512 a[CK_ATT_HQ][4];
    int h, b, c;
    for (h = 0; h < HQ; h++)
        for (c = 0; c < 4; c++) a[h][c] = _mm512_load_ps(hd[h].acc + i + 16 * c);
    for (b = 0; b < nb; b++) {
        const float *v = V + (size_t)b * D + i;
        if (pf) kv_prefetch_during(pf->pf, pf->K, pf->V, pf->j + b, D, 32);
        const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16), v2 = _mm512_loadu_ps(v + 32),
                     v3 = _mm512_loadu_ps(v + 48);
        for (h = 0; h < HQ; h++) {
            const __m512 pb = _mm512_set1_ps(p[h][b]);
            a[h][0] = _mm512_fmadd_ps(pb, v0, a[h][0]);
            a[h][1] = _mm512_fmadd_ps(pb, v1, a[h][1]);
            a[h][2] = _mm512_fmadd_ps(pb, v2, a[h][2]);
            a[h][3] = _mm512_fmadd_ps(pb, v3, a[h][3]);
        }
    }
    for (h = 0; h < HQ; h++)
        for (c = 0; c < 4; c++) _mm512_store_ps(hd[h].acc + i + 16 * c, a[h][c]);
}

/* one pass of HQ heads over a block of nb keys (kt as above, V from the block's first row); pf: the prefetches to
 * spread over its p V, or NULL */
__attribute__((target("avx512f,avx2,fma"))) static inline __attribute__((always_inline)) void
heads_512(att_head *hd, const __m512 *kt, const float *V, int j, int nb, int D, float scale, float softcap,
          const int HQ, const att_pf *pf)
{
    float p[CK_ATT_HQ][32] __attribute__((aligned(64)));
    __m512 s0[CK_ATT_HQ], s1[CK_ATT_HQ], t0[CK_ATT_HQ], t1[CK_ATT_HQ];
    const float *q[CK_ATT_HQ];
    int h, d, i, b;
    for (h = 0; h < HQ; h++) {
        q[h] = hd[h].q;
        s0[h] = s1[h] = t0[h] = t1[h] = _mm512_setzero_ps();
    }
    for (d = 0; d < D; d += 2) { /* the scores: two chains (even and odd d) per head and half */
        const __m512 k0 = kt[2 * d], k1 = kt[2 * d + 1], k2 = kt[2 * d + 2], k3 = kt[2 * d + 3];
        for (h = 0; h < HQ; h++) {
            const __m512 qd = _mm512_set1_ps(q[h][d]), qe = _mm512_set1_ps(q[h][d + 1]);
            s0[h] = _mm512_fmadd_ps(qd, k0, s0[h]);
            s1[h] = _mm512_fmadd_ps(qd, k1, s1[h]);
            t0[h] = _mm512_fmadd_ps(qe, k2, t0[h]);
            t1[h] = _mm512_fmadd_ps(qe, k3, t1[h]);
        }
    }
    for (h = 0; h < HQ; h++) s0[h] = _mm512_add_ps(s0[h], t0[h]), s1[h] = _mm512_add_ps(s1[h], t1[h]);
    for (h = 0; h < HQ; h++) { /* the online softmax */
        att_head *e = &hd[h];
        const uint32_t live = att_live(e->lo, e->hi, j, nb);
        __m512 x0 = _mm512_mul_ps(s0[h], _mm512_set1_ps(scale)), x1 = _mm512_mul_ps(s1[h], _mm512_set1_ps(scale));
        float m_new;
        if (!live) { /* none of this row's keys: it adds nothing */
            _mm512_store_ps(p[h], _mm512_setzero_ps());
            _mm512_store_ps(p[h] + 16, _mm512_setzero_ps());
            continue;
        }
        if (softcap > 0.0f) {
            _mm512_store_ps(p[h], x0);
            _mm512_store_ps(p[h] + 16, x1);
            for (b = 0; b < 32; b++) p[h][b] = softcap * tanhf(p[h][b] / softcap);
            x0 = _mm512_load_ps(p[h]);
            x1 = _mm512_load_ps(p[h] + 16);
        }
        x0 = _mm512_mask_blend_ps((__mmask16)live, _mm512_set1_ps(-INFINITY), x0);
        x1 = _mm512_mask_blend_ps((__mmask16)(live >> 16), _mm512_set1_ps(-INFINITY), x1);
        m_new = _mm512_reduce_max_ps(_mm512_max_ps(x0, x1));
        m_new = m_new > e->m ? m_new : e->m;
        if (e->m > -INFINITY && m_new != e->m) { /* the max grew: rescale what is accumulated */
            const float corr = expf(e->m - m_new);
            e->l.v16 = _mm512_mul_ps(e->l.v16, _mm512_set1_ps(corr));
            ck_vscale(e->acc, corr, D);
        }
        x0 = ck_exp16(_mm512_sub_ps(x0, _mm512_set1_ps(m_new))); /* masked keys: exp(-inf) = 0 */
        x1 = ck_exp16(_mm512_sub_ps(x1, _mm512_set1_ps(m_new)));
        e->l.v16 = _mm512_add_ps(e->l.v16, _mm512_add_ps(x0, x1));
        _mm512_store_ps(p[h], x0);
        _mm512_store_ps(p[h] + 16, x1);
        e->m = m_new;
    }
    for (i = 0; i + 64 <= D; i += 64) pv_512(hd, p, V, nb, D, i, HQ, i == 0 ? pf : NULL);
    for (; i < D; i += 16) /* the last columns, 16 at a time, in the same order */
        for (h = 0; h < HQ; h++) {
            __m512 a = _mm512_load_ps(hd[h].acc + i);
            for (b = 0; b < nb; b++) a = _mm512_fmadd_ps(_mm512_set1_ps(p[h][b]), _mm512_loadu_ps(V + (size_t)b * D + i), a);
            _mm512_store_ps(hd[h].acc + i, a);
        }
}

__attribute__((target("avx512f,avx2,fma"))) static void attend_heads_512(const att_rows *R, const float *K,
                                                                        const float *V, int D, float scale,
                                                                        float softcap, int cold)
{
    __m512 kt[2 * CK_ATT_MAX_D];
    float acc[CK_ATT_G][CK_ATT_MAX_D] __attribute__((aligned(64)));
    att_head hd[CK_ATT_G];
    kv_prefetch pf;
    const int G = R->n;
    int g, j, c, r, j0, j1;
    att_heads_start(hd, acc, R, D, &j0, &j1);
    kv_prefetch_start(&pf, K, V, j0, j1, D, cold);
    for (j = j0; j <= j1; j += 32) {
        const int nb = j1 + 1 - j < 32 ? j1 + 1 - j : 32;
        kv_prefetch_ahead(&pf, K, V, j, D);
        for (c = 0; c < D; c += 16) { /* kt[2 (c + r) + half] = dimension c + r of the half's 16 keys */
            const float *k = K + (size_t)j * D + c;
            __m512 t[16], u[16];
            if (nb == 32)
                for (r = 0; r < 16; r++) t[r] = _mm512_loadu_ps(k + (size_t)r * D), u[r] = _mm512_loadu_ps(k + (size_t)(r + 16) * D);
            else
                for (r = 0; r < 16; r++) {
                    t[r] = r < nb ? _mm512_loadu_ps(k + (size_t)r * D) : _mm512_setzero_ps();
                    u[r] = r + 16 < nb ? _mm512_loadu_ps(k + (size_t)(r + 16) * D) : _mm512_setzero_ps();
                }
            ck_transpose16(t);
            ck_transpose16(u);
            for (r = 0; r < 16; r++) kt[2 * (c + r)] = t[r], kt[2 * (c + r) + 1] = u[r];
        }
        const att_pf spread = {&pf, K, V, j};
        const float *vb = V + (size_t)j * D;
        for (g = 0; g + CK_ATT_HQ <= G; g += CK_ATT_HQ)
            heads_512(hd + g, kt, vb, j, nb, D, scale, softcap, CK_ATT_HQ, g == 0 ? &spread : NULL);
        if (G - g == 3) heads_512(hd + g, kt, vb, j, nb, D, scale, softcap, 3, g == 0 ? &spread : NULL);
        if (G - g == 2) heads_512(hd + g, kt, vb, j, nb, D, scale, softcap, 2, g == 0 ? &spread : NULL);
        if (G - g == 1) heads_512(hd + g, kt, vb, j, nb, D, scale, softcap, 1, g == 0 ? &spread : NULL);
    }
    for (g = 0; g < G; g++) {
        ck_vscale(acc[g], 1.0f / _mm512_reduce_add_ps(hd[g].l.v16), D);
        memcpy(R->o[g], acc[g], (size_t)D * sizeof(float));
    }
}

/* attend_heads_512 on AVX2 (16 registers of 8 floats): blocks of 16 keys, transposed 8 x 8 into kt[2 d + half]
 * (D a multiple of 8); up to 4 heads at a time share each load of the transposed keys (scores) and of the value
 * rows, 16 columns at a time (p V). The same per-head arithmetic whichever heads share a block. */
CK_AVX2 static inline __attribute__((always_inline)) void pv_avx2(att_head *hd, float (*p)[32], const float *V,
                                                                   int nb, int D, int i, const int HQ,
                                                                   const att_pf *pf)
{
    __m256 a[CK_ATT_HQ][2];
    int h, b;
    for (h = 0; h < HQ; h++) a[h][0] = _mm256_load_ps(hd[h].acc + i), a[h][1] = _mm256_load_ps(hd[h].acc + i + 8);
    for (b = 0; b < nb; b++) {
        const float *v = V + (size_t)b * D + i;
        if (pf) kv_prefetch_during(pf->pf, pf->K, pf->V, pf->j + b, D, 16);
        const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
        for (h = 0; h < HQ; h++) {
            const __m256 pb = _mm256_set1_ps(p[h][b]);
            a[h][0] = _mm256_fmadd_ps(pb, v0, a[h][0]);
            a[h][1] = _mm256_fmadd_ps(pb, v1, a[h][1]);
        }
    }
    for (h = 0; h < HQ; h++) _mm256_store_ps(hd[h].acc + i, a[h][0]), _mm256_store_ps(hd[h].acc + i + 8, a[h][1]);
}

CK_AVX2 static inline __attribute__((always_inline)) void heads_avx2(att_head *hd, const __m256 *kt, const float *V,
                                                                      int j, int nb, int D, float scale,
                                                                      float softcap, const int HQ, const att_pf *pf)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    float p[CK_ATT_HQ][32] __attribute__((aligned(32)));
    __m256 s0[CK_ATT_HQ], s1[CK_ATT_HQ];
    const float *q[CK_ATT_HQ];
    int h, d, i, b;
    for (h = 0; h < HQ; h++) q[h] = hd[h].q, s0[h] = s1[h] = _mm256_setzero_ps();
    for (d = 0; d < D; d++) { /* the scores: one chain per head and half */
        const __m256 k0 = kt[2 * d], k1 = kt[2 * d + 1];
        for (h = 0; h < HQ; h++) {
            const __m256 qd = _mm256_set1_ps(q[h][d]);
            s0[h] = _mm256_fmadd_ps(qd, k0, s0[h]);
            s1[h] = _mm256_fmadd_ps(qd, k1, s1[h]);
        }
    }
    for (h = 0; h < HQ; h++) { /* the online softmax */
        att_head *e = &hd[h];
        const uint32_t live = att_live(e->lo, e->hi, j, nb);
        __m256 x0 = _mm256_mul_ps(s0[h], _mm256_set1_ps(scale)), x1 = _mm256_mul_ps(s1[h], _mm256_set1_ps(scale));
        __m256 live0, live1;
        float m_new;
        if (!live) { /* none of this row's keys: it adds nothing */
            _mm256_store_ps(p[h], _mm256_setzero_ps());
            _mm256_store_ps(p[h] + 8, _mm256_setzero_ps());
            continue;
        }
        live0 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(live & 0xFF)), bit), bit));
        live1 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(live >> 8 & 0xFF)), bit), bit));
        if (softcap > 0.0f) {
            _mm256_store_ps(p[h], x0);
            _mm256_store_ps(p[h] + 8, x1);
            for (b = 0; b < 16; b++) p[h][b] = softcap * tanhf(p[h][b] / softcap);
            x0 = _mm256_load_ps(p[h]);
            x1 = _mm256_load_ps(p[h] + 8);
        }
        x0 = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x0, live0);
        x1 = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x1, live1);
        m_new = ck_hmax8(_mm256_max_ps(x0, x1));
        m_new = m_new > e->m ? m_new : e->m;
        if (e->m > -INFINITY && m_new != e->m) { /* the max grew: rescale what is accumulated */
            const float corr = expf(e->m - m_new);
            e->l.v8 = _mm256_mul_ps(e->l.v8, _mm256_set1_ps(corr));
            ck_vscale(e->acc, corr, D);
        }
        x0 = ck_exp8(_mm256_sub_ps(x0, _mm256_set1_ps(m_new))); /* masked keys: exp(-inf) = 0 */
        x1 = ck_exp8(_mm256_sub_ps(x1, _mm256_set1_ps(m_new)));
        e->l.v8 = _mm256_add_ps(e->l.v8, _mm256_add_ps(x0, x1));
        _mm256_store_ps(p[h], x0);
        _mm256_store_ps(p[h] + 8, x1);
        e->m = m_new;
    }
    for (i = 0; i + 16 <= D; i += 16) pv_avx2(hd, p, V, nb, D, i, HQ, i == 0 ? pf : NULL);
    if (i < D) /* the last 8 columns, in the same order */
        for (h = 0; h < HQ; h++) {
            __m256 a = _mm256_load_ps(hd[h].acc + i);
            for (b = 0; b < nb; b++) a = _mm256_fmadd_ps(_mm256_set1_ps(p[h][b]), _mm256_loadu_ps(V + (size_t)b * D + i), a);
            _mm256_store_ps(hd[h].acc + i, a);
        }
}

CK_AVX2 static void attend_heads_avx2(const att_rows *R, const float *K, const float *V, int D, float scale,
                                      float softcap, int cold)
{
    __m256 kt[2 * CK_ATT_MAX_D];
    float acc[CK_ATT_G][CK_ATT_MAX_D] __attribute__((aligned(32)));
    att_head hd[CK_ATT_G];
    kv_prefetch pf;
    const int G = R->n;
    int g, j, c, r, j0, j1;
    att_heads_start(hd, acc, R, D, &j0, &j1);
    kv_prefetch_start(&pf, K, V, j0, j1, D, cold);
    for (j = j0; j <= j1; j += 16) {
        const int nb = j1 + 1 - j < 16 ? j1 + 1 - j : 16;
        kv_prefetch_ahead(&pf, K, V, j, D);
        for (c = 0; c < D; c += 8) { /* kt[2 (c + r) + half] = dimension c + r of the half's 8 keys */
            const float *k = K + (size_t)j * D + c;
            __m256 t[8], u[8];
            for (r = 0; r < 8; r++) {
                t[r] = r < nb ? _mm256_loadu_ps(k + (size_t)r * D) : _mm256_setzero_ps();
                u[r] = r + 8 < nb ? _mm256_loadu_ps(k + (size_t)(r + 8) * D) : _mm256_setzero_ps();
            }
            ck_transpose8(t);
            ck_transpose8(u);
            for (r = 0; r < 8; r++) kt[2 * (c + r)] = t[r], kt[2 * (c + r) + 1] = u[r];
        }
        const att_pf spread = {&pf, K, V, j};
        const float *vb = V + (size_t)j * D;
        for (g = 0; g + CK_ATT_HQ <= G; g += CK_ATT_HQ)
            heads_avx2(hd + g, kt, vb, j, nb, D, scale, softcap, CK_ATT_HQ, g == 0 ? &spread : NULL);
        if (G - g == 3) heads_avx2(hd + g, kt, vb, j, nb, D, scale, softcap, 3, g == 0 ? &spread : NULL);
        if (G - g == 2) heads_avx2(hd + g, kt, vb, j, nb, D, scale, softcap, 2, g == 0 ? &spread : NULL);
        if (G - g == 1) heads_avx2(hd + g, kt, vb, j, nb, D, scale, softcap, 1, g == 0 ? &spread : NULL);
    }
    for (g = 0; g < G; g++) {
        ck_vscale(acc[g], 1.0f / ck_hsum8(hd[g].l.v8), D);
        memcpy(R->o[g], acc[g], (size_t)D * sizeof(float));
    }
}
#endif

void ck_attention(float *out, int ldo, const float *q, int ldq,
                  const float *k_cache, const float *v_cache, int cap,
                  int T, int pos0, int H, int KVH, int D, float scale, int window, float softcap,
                  const ck_seqmap *map)
{
    /* chunks of 4 pairs balance prefill's causal lengths; decode's few heads go one at a time (12 heads in
     * chunks of 4 left one of two threads with 8). Decode splits the heads from a far smaller size than
     * compute alone would: its keys and values come from DRAM (the weights streamed since evicted them), so
     * two threads keep twice the misses in flight (stories110M shape, 16-80 cached positions, 2 threads:
     * 31 -> 13 us a layer) */
    /* cold: the keys and values come from DRAM, as a decode step's (one token, or a batch of sequences) do, and
     * are prefetched (kv_prefetch). A prompt's tokens read the keys just stored, which the tokens before them (of
     * the same KV head: the order below) have brought into the cache: there the prefetches only cost
     * instructions (8% of prefill attention's time, 1.1B shape, 1024 tokens) */
    const int cold = T == 1 || map != NULL;
    int group = H / KVH, total = T * H, idx, chunk = total >= 64 ? 4 : 1;
    long work = (long)total * (map ? cap / 2 : pos0 + T) * D; /* (several sequences: about half the cache each) */
    (void)chunk, (void)work; /* read only by the pragma: unused without OpenMP */
#ifdef CK_X86
    void (*rows)(const att_rows *, const float *, const float *, int, float, float, int) = NULL;
    if (D % 16 == 0 && ck_cpu_avx512vnni()) rows = attend_heads_512;
    else if (D % 8 == 0 && ck_has_avx2()) rows = attend_heads_avx2;
    if (rows && group >= 2 && (T == 1 || map || 2 * group > CK_ATT_G)) {
        /* the heads of a group in sub-groups of up to CK_ATT_G, halved while there are fewer than two per thread */
        int sub = group < CK_ATT_G ? group : CK_ATT_G, n_sub, items, threads = 1;
#ifdef _OPENMP
        threads = omp_in_parallel() ? 1 : omp_get_max_threads();
#endif
        while (sub > 2 && (long)T * KVH * ((group + sub - 1) / sub) < 2L * threads) sub = (sub + 1) / 2;
        n_sub = (group + sub - 1) / sub, items = T * KVH * n_sub;
        (void)items;
#pragma omp parallel for schedule(dynamic, 1) if (items > 1 && (T == 1 ? work >= CK_PAR_MIN_ACT / 16 : work >= CK_PAR_MIN_ACT))
        for (idx = 0; idx < items; idx++) {
            /* one KV head's tokens one after another: its keys and values stay in the core's cache */
            const int kh = idx / (T * n_sub), t = idx / n_sub % T, h0 = kh * group + idx % n_sub * sub;
            const int p = ck_seq_pos(map, pos0, t), n = group - idx % n_sub * sub < sub ? group - idx % n_sub * sub : sub;
            const size_t kv = ((size_t)kh * cap + (size_t)ck_seq_start(map, t)) * D;
            att_rows R;
            int i;
            R.n = n;
            for (i = 0; i < n; i++) {
                R.o[i] = out + (size_t)t * ldo + (size_t)(h0 + i) * D, R.q[i] = q + (size_t)t * ldq + (size_t)(h0 + i) * D;
                R.lo[i] = first_key(p, window), R.hi[i] = p;
            }
            rows(&R, k_cache + kv, v_cache + kv, D, scale, softcap, cold);
        }
        return;
    }
    if (rows && (T >= 2 && !map)) {
        /* A prompt with up to CK_ATT_G / 2 heads per KV head (one without grouping, SmolLM2's 3): the heads of
         * CK_ATT_G / group consecutive tokens share the KV head's keys as a group's heads do, each row ending at
         * its token's position, so a block's transposed keys serve 8 (or 6) rows instead of 1-3. Against one
         * row per (token, head) with attend_one, AMD EPYC Zen 5 VM, one thread, D 64: 32 heads and 512 tokens
         * 33 -> 119 GFLOP/s, 12 heads and 1024 tokens 34 -> 130 (CK_KERNELS=avx2: 29 -> 72, 31 -> 76). A row's
         * block with none of its keys (the call's rows end up to 7 keys apart) is skipped; it would add zeros. */
        const int per = CK_ATT_G / group, blocks = (T + per - 1) / per, items = KVH * blocks;
        (void)items;
#pragma omp parallel for schedule(dynamic, 1) if (items > 1 && work >= CK_PAR_MIN_ACT)
        for (idx = 0; idx < items; idx++) {
            const int kh = idx / blocks, t0 = idx % blocks * per, nt = T - t0 < per ? T - t0 : per;
            const size_t kv = (size_t)kh * cap * D;
            att_rows R;
            int i, g;
            R.n = nt * group;
            for (i = 0; i < nt; i++) {
                const int p = ck_seq_pos(NULL, pos0, t0 + i);
                for (g = 0; g < group; g++) {
                    const int r = i * group + g, h = kh * group + g;
                    R.o[r] = out + (size_t)(t0 + i) * ldo + (size_t)h * D, R.q[r] = q + (size_t)(t0 + i) * ldq + (size_t)h * D;
                    R.lo[r] = first_key(p, window), R.hi[r] = p;
                }
            }
            rows(&R, k_cache + kv, v_cache + kv, D, scale, softcap, 0);
        }
        return;
    }
#endif
#pragma omp parallel for schedule(dynamic, chunk) if (total > 1 && (T == 1 ? work >= CK_PAR_MIN_ACT / 16 : work >= CK_PAR_MIN_ACT))
    for (idx = 0; idx < total; idx++) {
        int t = idx / H, h = idx % H, p = ck_seq_pos(map, pos0, t);
        size_t kv = ((size_t)(h / group) * cap + (size_t)ck_seq_start(map, t)) * D;
        attend_one(out + (size_t)t * ldo + (size_t)h * D, q + (size_t)t * ldq + (size_t)h * D,
                   k_cache + kv, v_cache + kv, first_key(p, window), p, D, scale, softcap, cold);
    }
}

void ck_attention_ref(float *out, int ldo, const float *q, int ldq,
                      const float *k_cache, const float *v_cache, int cap,
                      int T, int pos0, int H, int KVH, int D, float scale, int window, float softcap,
                      const ck_seqmap *map)
{
    double *s = (double *)malloc(sizeof(double) * (size_t)(map ? cap : pos0 + T));
    int t, h, j, d;
    if (!s) return;
    for (t = 0; t < T; t++)
        for (h = 0; h < H; h++) {
            const float *qv = q + (size_t)t * ldq + (size_t)h * D;
            size_t kv = ((size_t)(h / (H / KVH)) * cap + (size_t)ck_seq_start(map, t)) * D;
            const float *K = k_cache + kv, *V = v_cache + kv;
            int p = ck_seq_pos(map, pos0, t), j0 = first_key(p, window);
            double mx = -INFINITY, sum = 0.0;
            for (j = j0; j <= p; j++) {
                double acc = 0.0;
                for (d = 0; d < D; d++) acc += (double)qv[d] * K[(size_t)j * D + d];
                acc *= scale;
                if (softcap > 0.0f) acc = softcap * tanh(acc / softcap);
                s[j] = acc;
                if (acc > mx) mx = acc;
            }
            for (j = j0; j <= p; j++) {
                s[j] = exp(s[j] - mx);
                sum += s[j];
            }
            for (d = 0; d < D; d++) {
                double acc = 0.0;
                for (j = j0; j <= p; j++) acc += s[j] * V[(size_t)j * D + d];
                out[(size_t)t * ldo + (size_t)h * D + d] = (float)(acc / sum);
            }
        }
    free(s);
}

/* ---- whole-sequence attention for exported graphs --------------------------
 * See ck_kernels.h: B x H slices, each addressed through ck_seq strides.
 * Scratch comes from the planner: `ck_attention_slots(B * H)` slots, and no
 * more than that many threads run at once. */

#ifdef _OPENMP
#include <omp.h>
#define CK_THREAD_ID() omp_get_thread_num()
#define CK_MAX_THREADS() (omp_in_parallel() ? 1 : omp_get_max_threads())
#else
#define CK_THREAD_ID() 0
#define CK_MAX_THREADS() 1
#endif

static int64_t last_key(int64_t i, int64_t Sq, int64_t Sk, int causal) /* exclusive */
{
    int64_t e = i + 1 + (Sk - Sq);
    return causal ? (e < Sk ? e : Sk) : Sk;
}

/* the [S][D] matrix of slice bh */
static int64_t slice_at(ck_seq s, int64_t bh, int64_t H) { return (bh / H) * s.batch + (bh % H) * s.head; }

/* the K/V matrix query slice bh reads: head (bh % H) / kv_group of H / kv_group (ck_att_extra) */
static int64_t kv_at(ck_seq s, int64_t bh, int64_t H, const ck_att_extra *x)
{
    int64_t g = x && x->kv_group > 1 ? x->kv_group : 1;
    return (bh / H) * s.batch + ((bh % H) / g) * s.head;
}

/* the mask row of query i in slice bh, or NULL */
static const void *mask_row(const ck_att_extra *x, int64_t bh, int64_t H, int64_t i)
{
    int64_t off;
    if (!x || x->kind == CK_MASK_NONE || !x->mask) return NULL;
    off = (bh / H) * x->mb + (bh % H) * x->mh + i * x->mr;
    return x->kind == CK_MASK_ADD ? (const void *)((const float *)x->mask + off)
                                  : (const void *)((const uint8_t *)x->mask + off);
}

/* scores s[0..n) of keys j0.. under the mask row (ck_att_extra): -inf where a key does not take part, the
 * float mask added */
static void apply_mask(float *s, const void *row, ck_mask_kind kind, int64_t j0, int64_t n)
{
    int64_t j;
    if (!row) return;
    if (kind == CK_MASK_ADD) {
        const float *m = (const float *)row + j0;
        for (j = 0; j < n; j++) s[j] += m[j];
    } else {
        const uint8_t *m = (const uint8_t *)row + j0;
        uint8_t drop = kind == CK_MASK_KEEP ? 0 : 1;
        for (j = 0; j < n; j++)
            if ((m[j] != 0) == drop) s[j] = -INFINITY;
    }
}

/* Standard: scores of a block of query rows materialized in the slot
 * ([Sq][Sk]), two GEMMs around a row softmax. Slices run `slots` at a time;
 * each slice's rows are split into blocks so that the team stays busy even
 * for one slice. A causal row block stops its GEMMs at its last key. */
void ck_attention_std(float *out, ck_seq so, const float *q, ck_seq sq, const float *k, ck_seq sk, const float *v,
                      ck_seq sv, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, float scale, int causal,
                      ck_att_extra extra_, float *scratch)
{
    const ck_att_extra *extra = &extra_;
    int64_t BH = B * H, slots = (int64_t)ck_attention_slots(BH), g0;
    int masked = mask_row(extra, 0, H, 0) != NULL;
    int team = CK_MAX_THREADS();
    if ((double)BH * Sq * Sk * D < CK_PAR_MIN_ACT) team = 1;
    (void)team; /* (read by the pragma alone) */
    for (g0 = 0; g0 < BH; g0 += slots) {
        int64_t gn = BH - g0 < slots ? BH - g0 : slots;
        /* row blocks fixed by the shape, not the team (blas.h: OpenBLAS's sums depend on a call's shape) */
        int64_t blocks = BH >= CK_BLAS_PIECES ? 1 : (CK_BLAS_PIECES + BH - 1) / BH, rb, tasks, t;
        if (blocks > Sq) blocks = Sq;
        rb = (Sq + blocks - 1) / blocks;
        tasks = gn * blocks;
#pragma omp parallel for schedule(dynamic, 1) num_threads(team) if (team > 1)
        for (t = 0; t < tasks; t++) {
            int64_t s = t / blocks, bh = g0 + s, r0 = (t % blocks) * rb, r1 = r0 + rb < Sq ? r0 + rb : Sq, i;
            int64_t kmax = last_key(r1 - 1, Sq, Sk, causal);
            const float *Q = q + slice_at(sq, bh, H) + r0 * sq.row, *K = k + kv_at(sk, bh, H, extra);
            const float *V = v + kv_at(sv, bh, H, extra);
            float *S = scratch + (s * Sq + r0) * Sk;
            if (r0 >= r1) continue;
            ck_sgemm(0, 1, (int)(r1 - r0), (int)kmax, (int)D, scale, Q, (int)sq.row, K, (int)sk.row, 0.0f, S, (int)Sk);
            for (i = r0; i < r1; i++) {
                float *row = S + (i - r0) * Sk;
                int64_t e = last_key(i, Sq, Sk, causal);
                if (masked) apply_mask(row, mask_row(extra, bh, H, i), extra->kind, 0, e);
                /* all -inf: a query the mask leaves no key gets 0; without a mask, only from NaN scores */
                ck_vsoftmax(row, row, (int)e, masked ? 0.0f : NAN);
                if (e < kmax) memset(row + e, 0, (size_t)(kmax - e) * sizeof(float));
            }
            ck_sgemm(0, 0, (int)(r1 - r0), (int)D, (int)kmax, 1.0f, S, (int)Sk, V, (int)sv.row, 0.0f,
                     out + slice_at(so, bh, H) + r0 * so.row, (int)so.row);
        }
    }
}

/* Flash: per (slice, 32-query tile) task, keys in 32-row tiles with the
 * online-softmax recurrence; the slot holds the tile's scores [32][32],
 * accumulators [32][D], running max and sum [32] — O(tile) memory at any S. */
void ck_attention_flash(float *out, ck_seq so, const float *q, ck_seq sq, const float *k, ck_seq sk, const float *v,
                        ck_seq sv, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, float scale, int causal,
                        ck_att_extra extra_, float *scratch)
{
    const ck_att_extra *extra = &extra_;
    const int64_t TL = CK_FLASH_TILE, per_slot = TL * TL + TL * D + 2 * TL;
    int64_t BH = B * H, tiles = (Sq + TL - 1) / TL, tasks = BH * tiles, t;
    int team = CK_MAX_THREADS();
    if (team > (int)ck_attention_slots(BH)) team = (int)ck_attention_slots(BH);
    if ((double)BH * Sq * Sk * D < CK_PAR_MIN_ACT) team = 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(team) if (team > 1)
    for (t = 0; t < tasks; t++) {
        float *S = scratch + (int64_t)CK_THREAD_ID() * per_slot, *acc = S + TL * TL, *m = acc + TL * D, *l = m + TL;
        int64_t bh = t / tiles, i0 = (t % tiles) * TL, ni = Sq - i0 < TL ? Sq - i0 : TL, i, j0, b;
        int64_t kend = last_key(i0 + ni - 1, Sq, Sk, causal);
        const float *Q = q + slice_at(sq, bh, H) + i0 * sq.row, *K = k + kv_at(sk, bh, H, extra);
        const float *V = v + kv_at(sv, bh, H, extra);
        for (i = 0; i < ni; i++) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
        memset(acc, 0, (size_t)(ni * D) * sizeof(float));
        for (j0 = 0; j0 < kend; j0 += TL) {
            int64_t nj = kend - j0 < TL ? kend - j0 : TL;
            for (i = 0; i < ni; i++) {
                float *s = S + i * TL, bm = -INFINITY, m_new;
                int64_t e = last_key(i0 + i, Sq, Sk, causal) - j0; /* keys of this row in the tile */
                if (e > nj) e = nj;
                if (e <= 0) continue;
                ck_vdots(s, Q + i * sq.row, K + j0 * sk.row, (size_t)sk.row, (int)e, (int)D);
                for (b = 0; b < e; b++) s[b] *= scale;
                apply_mask(s, mask_row(extra, bh, H, i0 + i), extra->kind, j0, e);
                for (b = 0; b < e; b++)
                    if (s[b] > bm) bm = s[b];
                if (bm == -INFINITY) { /* every key of the tile masked; or NaN scores, which stay NaN */
                    for (b = 0; b < e; b++)
                        if (s[b] != s[b]) l[i] = NAN;
                    continue;
                }
                m_new = bm > m[i] ? bm : m[i];
                if (m[i] > -INFINITY && m_new != m[i]) {
                    float corr = expf(m[i] - m_new);
                    l[i] *= corr;
                    ck_vscale(acc + i * D, corr, (int)D);
                }
                for (b = 0; b < e; b++) s[b] -= m_new;
                ck_vexp(s, s, (int)e);
                for (b = 0; b < e; b++) l[i] += s[b];
                ck_vmacc(acc + i * D, s, V + j0 * sv.row, (size_t)sv.row, (int)e, (int)D);
                m[i] = m_new;
            }
        }
        for (i = 0; i < ni; i++) {
            float *o = out + slice_at(so, bh, H) + (i0 + i) * so.row;
            /* no key took part: 0, as the safe softmax (NaN stays NaN) */
            float inv = l[i] > 0.0f ? 1.0f / l[i] : l[i] == 0.0f ? 0.0f : NAN;
            for (b = 0; b < D; b++) o[b] = acc[i * D + b] * inv;
        }
    }
}

void ck_attention_seq_ref(float *out, ck_seq so, const float *q, ck_seq sq, const float *k, ck_seq sk, const float *v,
                          ck_seq sv, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, float scale, int causal,
                          ck_att_extra extra_)
{
    const ck_att_extra *extra = &extra_;
    double *s = (double *)malloc(sizeof(double) * (size_t)Sk);
    int64_t bh, i, j, d;
    if (!s) return;
    for (bh = 0; bh < B * H; bh++)
        for (i = 0; i < Sq; i++) {
            const float *qr = q + slice_at(sq, bh, H) + i * sq.row;
            const float *K = k + kv_at(sk, bh, H, extra), *V = v + kv_at(sv, bh, H, extra);
            const void *mrow = mask_row(extra, bh, H, i);
            int64_t e = last_key(i, Sq, Sk, causal);
            double mx = -INFINITY, sum = 0.0;
            for (j = 0; j < e; j++) {
                double acc = 0.0;
                for (d = 0; d < D; d++) acc += (double)qr[d] * K[j * sk.row + d];
                s[j] = acc * scale;
                if (mrow && extra->kind == CK_MASK_ADD) s[j] += ((const float *)mrow)[j];
                if (mrow && extra->kind != CK_MASK_ADD && (((const uint8_t *)mrow)[j] != 0) != (extra->kind == CK_MASK_KEEP))
                    s[j] = -INFINITY;
                if (s[j] > mx) mx = s[j];
            }
            for (j = 0; j < e; j++) {
                s[j] = mx == -INFINITY ? 0.0 : exp(s[j] - mx);
                sum += s[j];
            }
            for (d = 0; d < D; d++) {
                double acc = 0.0;
                for (j = 0; j < e; j++) acc += s[j] * V[j * sv.row + d];
                out[slice_at(so, bh, H) + i * so.row + d] = (float)(sum > 0.0 ? acc / sum : 0.0);
            }
        }
    free(s);
}
