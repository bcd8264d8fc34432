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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_kernels.h"
#include "ck_simd.h"

#define CK_ATT_BLOCK 32
#define CK_ATT_MAX_D CK_ATTENTION_MAX_HEAD_DIM

void ck_kv_store(float *k_cache, float *v_cache, int cap, int pos0,
                 const float *k, int ldk, const float *v, int ldv, int T, int KVH, int D)
{
    int t, h;
    for (h = 0; h < KVH; h++)
        for (t = 0; t < T; t++) {
            size_t dst = ((size_t)h * cap + (size_t)(pos0 + t)) * D;
            memcpy(k_cache + dst, k + (size_t)t * ldk + (size_t)h * D, (size_t)D * sizeof(float));
            memcpy(v_cache + dst, v + (size_t)t * ldv + (size_t)h * D, (size_t)D * sizeof(float));
        }
}

static int first_key(int p, int window)
{
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

static void attend_one(float *o, const float *q, const float *K, const float *V, int j0, int j1, int D,
                       float scale, float softcap)
{
    float acc[CK_ATT_MAX_D];
    float m = -INFINITY, l = 0.0f;
    int j, b, d;
    for (d = 0; d < D; d++) acc[d] = 0.0f;
    for (j = j0; j <= j1; j += CK_ATT_BLOCK) {
        float s[CK_ATT_BLOCK];
        int nb = j1 + 1 - j < CK_ATT_BLOCK ? j1 + 1 - j : CK_ATT_BLOCK;
        float bm = -INFINITY, m_new;
        ck_vdots(s, q, K + (size_t)j * D, nb, D);
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
        ck_vmacc(acc, s, V + (size_t)j * D, nb, D);
        m = m_new;
    }
    ck_vscale(acc, 1.0f / l, D);
    memcpy(o, acc, (size_t)D * sizeof(float));
}

void ck_attention(float *out, int ldo, const float *q, int ldq,
                  const float *k_cache, const float *v_cache, int cap,
                  int T, int pos0, int H, int KVH, int D, float scale, int window, float softcap)
{
    int group = H / KVH, total = T * H, idx;
#pragma omp parallel for schedule(dynamic, 4) if (total > 1 && (long)total * (pos0 + T) * D >= 32768)
    for (idx = 0; idx < total; idx++) {
        int t = idx / H, h = idx % H, p = pos0 + t;
        size_t kv = (size_t)(h / group) * cap * D;
        attend_one(out + (size_t)t * ldo + (size_t)h * D, q + (size_t)t * ldq + (size_t)h * D,
                   k_cache + kv, v_cache + kv, first_key(p, window), p, D, scale, softcap);
    }
}

void ck_attention_ref(float *out, int ldo, const float *q, int ldq,
                      const float *k_cache, const float *v_cache, int cap,
                      int T, int pos0, int H, int KVH, int D, float scale, int window, float softcap)
{
    double *s = (double *)malloc(sizeof(double) * (size_t)(pos0 + T));
    int t, h, j, d;
    if (!s) return;
    for (t = 0; t < T; t++)
        for (h = 0; h < H; h++) {
            const float *qv = q + (size_t)t * ldq + (size_t)h * D;
            const float *K = k_cache + (size_t)(h / (H / KVH)) * cap * D;
            const float *V = v_cache + (size_t)(h / (H / KVH)) * cap * D;
            int p = pos0 + t, j0 = first_key(p, window);
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
