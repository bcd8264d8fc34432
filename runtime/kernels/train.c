/*
 * train.c — what training adds to the forward kernels: the backward of every
 * op a language model runs, the cross-entropy loss and AdamW (the llm.c set).
 *
 * Each backward recomputes the cheap per-row statistics its forward had
 * (RMSNorm's 1/rms, LayerNorm's mean, attention's softmax) from the saved
 * inputs instead of saving them, so the forward kernels stay as they are:
 *   RMSNorm    y = x r w',  r = (mean x^2 + eps)^-1/2, w' = w + w_offset
 *              dx = r (dy w' - x r^2 mean(dy w' x)),   dw += dy x r
 *   LayerNorm  x^ = (x - mu) r, y = x^ w + b,  g = dy w
 *              dx = r (g - mean g - x^ mean(g x^)),     dw += dy x^, db += dy
 *   attention  p = softmax(s), s = cap tanh(q.k scale / cap) (or q.k scale)
 *              dp_j = dO.v_j, ds_j = p_j (dp_j - dO.O), through the cap: (1 - (s/cap)^2)
 *              dq += ds scale k_j, dk_j += ds scale q, dv_j += p_j dO
 * Parallel work is split so that every thread owns what it writes (rows of
 * dx, rows of dw, one key of dk/dv), never by atomics.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "blas.h"
#include "ck_kernels.h"
#include "ck_quant.h"
#include "ck_simd.h"
#include "fgemm.h"
#include "moe_choice.h"

#ifdef _OPENMP
#define CK_TEAM(work) (omp_in_parallel() || (double)(work) < CK_PAR_MIN ? 1 : omp_get_max_threads())
#define CK_TID() omp_get_thread_num()
#define CK_NT() omp_get_num_threads()
#else
#define CK_TEAM(work) 1
#define CK_TID() 0
#define CK_NT() 1
#endif

/* [lo, hi) of n split into nt parts rounded to 16 (64-byte lines) */
static void share(int n, int nt, int id, int *lo, int *hi)
{
    int per = ((n + nt - 1) / nt + 15) / 16 * 16;
    *lo = id * per > n ? n : id * per;
    *hi = *lo + per > n ? n : *lo + per;
}

static float dot(const float *a, const float *b, int n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s;
    int i = 0, k;
    for (; i + 8 <= n; i += 8)
        for (k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static double dot_ref(const float *a, const float *b, int n)
{
    double s = 0.0;
    int i;
    for (i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ---- embeddings and sums ----------------------------------------------------------------------------- */

void ck_embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int T, int C)
{
    int team = CK_TEAM((double)T * C);
    (void)team; /* (read by the pragma: unused without OpenMP) */
#pragma omp parallel num_threads(team) if (team > 1)
    {
        int c0, c1, t, i;
        share(C, CK_NT(), CK_TID(), &c0, &c1);
        for (t = 0; t < T; t++) {
            float *d = dtable + (size_t)tokens[t] * C;
            const float *g = dout + (size_t)t * C;
            for (i = c0; i < c1; i++) d[i] += g[i];
        }
    }
}

void ck_embedding_backward_ref(float *dtable, const float *dout, const int32_t *tokens, int T, int C)
{
    int t, i;
    for (t = 0; t < T; t++)
        for (i = 0; i < C; i++) dtable[(size_t)tokens[t] * C + i] += dout[(size_t)t * C + i];
}

void ck_pos_embed_backward(float *dtable, const float *dout, int T, int C, int pos0)
{
    size_t i, n = (size_t)T * C;
    float *d = dtable + (size_t)pos0 * C;
    for (i = 0; i < n; i++) d[i] += dout[i];
}

void ck_grad_add(float *dst, int acc, const float *src, size_t n, float s)
{
    size_t i;
    if (acc) {
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (i = 0; i < n; i++) dst[i] += s * src[i];
    } else if (s == 1.0f) {
        if (dst != src) memcpy(dst, src, n * sizeof(float));
    } else {
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (i = 0; i < n; i++) dst[i] = s * src[i];
    }
}

/* ---- normalizations -------------------------------------------------------------------------------- */

/* dw[c] += sum_t dy[t][c] x_hat[t][c] with x_hat = (x - mu[t]) rstd[t] (mu NULL: x rstd[t], RMSNorm), and
 * db[c] += sum_t dy[t][c] when db is not NULL: threads own column ranges, so nothing races */
static void norm_param_grads(float *dw, float *db, const float *dy, const float *x, const float *mu,
                             const float *rstd, int T, int C, int team)
{
    (void)team;
#pragma omp parallel num_threads(team) if (team > 1)
    {
        int c0, c1, t, i;
        share(C, CK_NT(), CK_TID(), &c0, &c1);
        for (t = 0; t < T; t++) {
            const float *xr = x + (size_t)t * C, *g = dy + (size_t)t * C;
            float m = mu ? mu[t] : 0.0f, r = rstd[t];
            for (i = c0; i < c1; i++) dw[i] += g[i] * (xr[i] - m) * r;
            if (db)
                for (i = c0; i < c1; i++) db[i] += g[i];
        }
    }
}

void ck_rmsnorm_backward(float *dx, int acc, float *dw, const float *dy, const float *x, const float *w, int T, int C,
                         float eps, float w_offset, float *scratch)
{
    int team = CK_TEAM((double)T * C), t;
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
    for (t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * C, *g = dy + (size_t)t * C;
        float *d = dx + (size_t)t * C, r, m = 0.0f, acc8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int i = 0, k;
        r = 1.0f / sqrtf(dot(xr, xr, C) / (float)C + eps);
        scratch[t] = r;
        for (; i + 8 <= C; i += 8)
            for (k = 0; k < 8; k++) acc8[k] += g[i + k] * (w[i + k] + w_offset) * xr[i + k];
        m = ((acc8[0] + acc8[1]) + (acc8[2] + acc8[3])) + ((acc8[4] + acc8[5]) + (acc8[6] + acc8[7]));
        for (; i < C; i++) m += g[i] * (w[i] + w_offset) * xr[i];
        m = m * r * r / (float)C;
        for (i = 0; i < C; i++) {
            float v = r * (g[i] * (w[i] + w_offset) - xr[i] * m);
            d[i] = acc ? d[i] + v : v;
        }
    }
    norm_param_grads(dw, NULL, dy, x, NULL, scratch, T, C, team);
}

void ck_rmsnorm_backward_ref(float *dx, int acc, float *dw, const float *dy, const float *x, const float *w, int T,
                             int C, float eps, float w_offset)
{
    int t, i;
    for (t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * C, *g = dy + (size_t)t * C;
        double r = 1.0 / sqrt(dot_ref(xr, xr, C) / C + eps), m = 0.0;
        for (i = 0; i < C; i++) m += (double)g[i] * (w[i] + w_offset) * xr[i];
        m *= r * r / C;
        for (i = 0; i < C; i++) {
            double v = r * ((double)g[i] * (w[i] + w_offset) - xr[i] * m);
            dx[(size_t)t * C + i] = (float)(acc ? dx[(size_t)t * C + i] + v : v);
            dw[i] += (float)((double)g[i] * xr[i] * r);
        }
    }
}

void ck_layernorm_backward(float *dx, int acc, float *dw, float *db, const float *dy, const float *x, const float *w,
                           int T, int C, float eps, float *scratch)
{
    int team = CK_TEAM((double)T * C), t;
    float *mu = scratch, *rs = scratch + T;
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
    for (t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * C, *g = dy + (size_t)t * C;
        float *d = dx + (size_t)t * C, mean = 0.0f, var = 0.0f, r, mg = 0.0f, mgx = 0.0f;
        int i;
        for (i = 0; i < C; i++) mean += xr[i];
        mean /= (float)C;
        for (i = 0; i < C; i++) var += (xr[i] - mean) * (xr[i] - mean);
        r = 1.0f / sqrtf(var / (float)C + eps);
        mu[t] = mean;
        rs[t] = r;
        for (i = 0; i < C; i++) {
            float gw = g[i] * w[i];
            mg += gw;
            mgx += gw * (xr[i] - mean) * r;
        }
        mg /= (float)C;
        mgx /= (float)C;
        for (i = 0; i < C; i++) {
            float v = r * (g[i] * w[i] - mg - (xr[i] - mean) * r * mgx);
            d[i] = acc ? d[i] + v : v;
        }
    }
    norm_param_grads(dw, db, dy, x, mu, rs, T, C, team);
}

void ck_layernorm_backward_ref(float *dx, int acc, float *dw, float *db, const float *dy, const float *x,
                               const float *w, int T, int C, float eps)
{
    int t, i;
    for (t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * C, *g = dy + (size_t)t * C;
        double mean = 0.0, var = 0.0, r, mg = 0.0, mgx = 0.0;
        for (i = 0; i < C; i++) mean += xr[i];
        mean /= C;
        for (i = 0; i < C; i++) var += (xr[i] - mean) * (xr[i] - mean);
        r = 1.0 / sqrt(var / C + eps);
        for (i = 0; i < C; i++) {
            mg += (double)g[i] * w[i];
            mgx += (double)g[i] * w[i] * (xr[i] - mean) * r;
        }
        mg /= C;
        mgx /= C;
        for (i = 0; i < C; i++) {
            double xh = (xr[i] - mean) * r, v = r * ((double)g[i] * w[i] - mg - xh * mgx);
            dx[(size_t)t * C + i] = (float)(acc ? dx[(size_t)t * C + i] + v : v);
            dw[i] += (float)(g[i] * xh);
            db[i] += g[i];
        }
    }
}

/* ---- linear ---------------------------------------------------------------------------------------- */

void ck_linear_backward(float *dx, int lddx, int acc, float *dw, float *db, const float *dy, int lddy, const float *x,
                        int ldx, const float *w, int T, int K, int N)
{
    int team = CK_TEAM((double)T * K * N), fast = T >= CK_FGEMM_MIN_T && ck_fgemm_fast();
    (void)team;
#pragma omp parallel num_threads(team) if (team > 1)
    {
        int nt = CK_NT(), id = CK_TID(), k0, k1, n0, n1, t, n;
        /* dx[:, k0:k1] = dy @ w[:, k0:k1] (+ dx) */
        share(K, nt, id, &k0, &k1);
        /* with AVX-512 on fgemm.c's panels (W read as stored [N][K]; dy^T read transposed in place), else
         * OpenBLAS: 2 threads, a stories15M training step 224 -> 205-214 ms */
        if (dx && k1 > k0 &&
            (!fast || ck_fgemm_general(dx, lddx, dy, lddy, 1, CK_Q_F32, w, K, 1, NULL, acc ? dx : NULL, lddx, T, N,
                                       k0, k1, 0, 1)))
            ck_sgemm(0, 0, T, k1 - k0, N, 1.0f, dy, lddy, w + k0, K, acc ? 1.0f : 0.0f, dx + k0, lddx);
        /* dw[n0:n1] += dy[:, n0:n1]^T @ x, db[n0:n1] += column sums */
        share(N, nt, id, &n0, &n1);
        if (n1 > n0) {
            float *dwn = dw + (size_t)n0 * K;
            if (!fast || n1 - n0 < CK_FGEMM_MIN_T ||
                ck_fgemm_general(dwn, K, dy + n0, 1, lddy, CK_Q_F32, x, ldx, 1, NULL, dwn, K, n1 - n0, T, 0, K, 0, 1))
                ck_sgemm(1, 0, n1 - n0, K, T, 1.0f, dy + n0, lddy, x, ldx, 1.0f, dwn, K);
            if (db)
                for (t = 0; t < T; t++)
                    for (n = n0; n < n1; n++) db[n] += dy[(size_t)t * lddy + n];
        }
    }
}

void ck_linear_backward_ref(float *dx, int lddx, int acc, float *dw, float *db, const float *dy, int lddy,
                            const float *x, int ldx, const float *w, int T, int K, int N)
{
    int t, k, n;
    if (dx)
        for (t = 0; t < T; t++)
            for (k = 0; k < K; k++) {
                double s = 0.0;
                for (n = 0; n < N; n++) s += (double)dy[(size_t)t * lddy + n] * w[(size_t)n * K + k];
                dx[(size_t)t * lddx + k] = (float)(acc ? dx[(size_t)t * lddx + k] + s : s);
            }
    for (n = 0; n < N; n++) {
        double sb = 0.0;
        for (k = 0; k < K; k++) {
            double s = 0.0;
            for (t = 0; t < T; t++) s += (double)dy[(size_t)t * lddy + n] * x[(size_t)t * ldx + k];
            dw[(size_t)n * K + k] += (float)s;
        }
        for (t = 0; t < T; t++) sb += dy[(size_t)t * lddy + n];
        if (db) db[n] += (float)sb;
    }
}

/* ---- RoPE ------------------------------------------------------------------------------------------ */

void ck_rope_backward(float *dx, int lddx, int acc, const float *dy, int lddy, int T, int n_heads, int head_dim,
                      int rot_dim, int pos0, const float *cos_t, const float *sin_t)
{
    int half = rot_dim / 2, t;
#pragma omp parallel for schedule(static) if ((long)T * n_heads * head_dim >= CK_PAR_MIN)
    for (t = 0; t < T; t++) {
        const float *c = cos_t + (size_t)(pos0 + t) * half, *s = sin_t + (size_t)(pos0 + t) * half;
        int h, i;
        for (h = 0; h < n_heads; h++) {
            const float *g = dy + (size_t)t * lddy + (size_t)h * head_dim;
            float *d = dx + (size_t)t * lddx + (size_t)h * head_dim;
            for (i = 0; i < half; i++) {
                float a = g[i], b = g[i + half];
                float va = a * c[i] + b * s[i], vb = b * c[i] - a * s[i];
                d[i] = acc ? d[i] + va : va;
                d[i + half] = acc ? d[i + half] + vb : vb;
            }
            for (i = rot_dim; i < head_dim; i++) d[i] = acc ? d[i] + g[i] : g[i];
        }
    }
}

void ck_rope_backward_ref(float *dx, int lddx, int acc, const float *dy, int lddy, int T, int n_heads, int head_dim,
                          int rot_dim, int pos0, const float *cos_t, const float *sin_t)
{
    /* y = R x with R the rotation of ck_rope_ref; dx = R^T dy, written as the explicit transpose:
     * y[i] = x[i] c - x[i+h] s, y[i+h] = x[i+h] c + x[i] s  =>  dx[i] = dy[i] c + dy[i+h] s,
     * dx[i+h] = -dy[i] s + dy[i+h] c */
    int half = rot_dim / 2, t, h, i;
    for (t = 0; t < T; t++)
        for (h = 0; h < n_heads; h++) {
            const float *g = dy + (size_t)t * lddy + (size_t)h * head_dim;
            float *d = dx + (size_t)t * lddx + (size_t)h * head_dim;
            const float *c = cos_t + (size_t)(pos0 + t) * half, *s = sin_t + (size_t)(pos0 + t) * half;
            double res[CK_ATTENTION_MAX_HEAD_DIM];
            for (i = 0; i < head_dim; i++) res[i] = g[i];
            for (i = 0; i < half; i++) {
                res[i] = (double)g[i] * c[i] + (double)g[i + half] * s[i];
                res[i + half] = -(double)g[i] * s[i] + (double)g[i + half] * c[i];
            }
            for (i = 0; i < head_dim; i++) d[i] = (float)(acc ? d[i] + res[i] : res[i]);
        }
}

/* ---- attention ------------------------------------------------------------------------------------- */

static int visible_from(int t, int window) { return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; }

/* CK_ATT_BLK keys (pass 1) or queries (pass 2) at a time: their scores, probabilities and gradients in stack arrays,
 * each a vector op over the block (ck_vdots, ck_vexp, ck_vmacc) */
#define CK_ATT_BLK 128

/* s[i] = cap tanh(s[i] / cap) when cap > 0 */
static void soft_cap(float *s, int n, float cap)
{
    int i;
    if (cap > 0.0f)
        for (i = 0; i < n; i++) s[i] = cap * tanhf(s[i] / cap);
}

void ck_attention_backward(float *dq, int lddq, float *dk, int lddk, float *dv, int lddv, int acc, const float *dout,
                           int lddo, const float *q, int ldq, const float *k_cache, const float *v_cache, int cap,
                           const float *out, int ldo, int T, int H, int KVH, int D, float scale, int window,
                           float softcap, float *scratch)
{
    int group = H / KVH, total = T * H, idx;
    float *lse = scratch, *delta = scratch + (size_t)T * H; /* [head][query] */
    int par = (long)total * T * D >= CK_PAR_MIN_ACT;
    (void)par;
    /* 1: per (query, head) the softmax's log-sum-exp and dO.O; 2: dq */
#pragma omp parallel for schedule(dynamic, 4) if (par)
    for (idx = 0; idx < total; idx++) {
        int t = idx / H, h = idx % H, j0 = visible_from(t, window), j, i, d, nb;
        const float *qv = q + (size_t)t * ldq + (size_t)h * D, *go = dout + (size_t)t * lddo + (size_t)h * D;
        const float *K = k_cache + (size_t)(h / group) * cap * D, *V = v_cache + (size_t)(h / group) * cap * D;
        float m = -INFINITY, l = 0.0f, L, dl, *dqv = dq + (size_t)t * lddq + (size_t)h * D;
        float s[CK_ATT_BLK], p[CK_ATT_BLK], dp[CK_ATT_BLK];
        for (j = j0; j <= t; j += nb) {
            float bm = -INFINITY, sum = 0.0f;
            nb = t + 1 - j < CK_ATT_BLK ? t + 1 - j : CK_ATT_BLK;
            ck_vdots(s, qv, K + (size_t)j * D, D, nb, D);
            for (i = 0; i < nb; i++) s[i] *= scale;
            soft_cap(s, nb, softcap);
            for (i = 0; i < nb; i++) bm = s[i] > bm ? s[i] : bm;
            if (bm > m) {
                l *= expf(m - bm);
                m = bm;
            }
            for (i = 0; i < nb; i++) s[i] -= m;
            ck_vexp(p, s, nb);
            for (i = 0; i < nb; i++) sum += p[i];
            l += sum;
        }
        L = m + logf(l);
        dl = dot(go, out + (size_t)t * ldo + (size_t)h * D, D);
        lse[(size_t)h * T + t] = L;
        delta[(size_t)h * T + t] = dl;
        if (!acc)
            for (d = 0; d < D; d++) dqv[d] = 0.0f;
        for (j = j0; j <= t; j += nb) {
            nb = t + 1 - j < CK_ATT_BLK ? t + 1 - j : CK_ATT_BLK;
            ck_vdots(s, qv, K + (size_t)j * D, D, nb, D);
            for (i = 0; i < nb; i++) s[i] *= scale;
            soft_cap(s, nb, softcap);
            for (i = 0; i < nb; i++) p[i] = s[i] - L;
            ck_vexp(p, p, nb);
            ck_vdots(dp, go, V + (size_t)j * D, D, nb, D);
            for (i = 0; i < nb; i++) {
                float ds = p[i] * (dp[i] - dl);
                if (softcap > 0.0f) ds *= 1.0f - (s[i] / softcap) * (s[i] / softcap);
                dp[i] = ds * scale;
            }
            ck_vmacc(dqv, dp, K + (size_t)j * D, D, nb, D);
        }
    }
    /* 3: per (KV head, key) dk and dv, summed over the group's heads and the queries that see the key */
    total = KVH * T;
#pragma omp parallel for schedule(dynamic, 4) if (par)
    for (idx = 0; idx < total; idx++) {
        int g = idx / T, j = idx % T, t, h, d, i, nb;
        int t_end = window > 0 && j + window < T ? j + window : T; /* queries t < t_end see key j */
        const float *kj = k_cache + ((size_t)g * cap + j) * D, *vj = v_cache + ((size_t)g * cap + j) * D;
        float *dkj = dk + (size_t)j * lddk + (size_t)g * D, *dvj = dv + (size_t)j * lddv + (size_t)g * D;
        float s[CK_ATT_BLK], p[CK_ATT_BLK], dp[CK_ATT_BLK];
        if (!acc)
            for (d = 0; d < D; d++) dkj[d] = dvj[d] = 0.0f;
        for (h = g * group; h < (g + 1) * group; h++) {
            const float *Lh = lse + (size_t)h * T, *Dh = delta + (size_t)h * T;
            for (t = j; t < t_end; t += nb) {
                const float *Q = q + (size_t)t * ldq + (size_t)h * D, *GO = dout + (size_t)t * lddo + (size_t)h * D;
                nb = t_end - t < CK_ATT_BLK ? t_end - t : CK_ATT_BLK;
                ck_vdots(s, kj, Q, (size_t)ldq, nb, D);
                for (i = 0; i < nb; i++) s[i] *= scale;
                soft_cap(s, nb, softcap);
                for (i = 0; i < nb; i++) p[i] = s[i] - Lh[t + i];
                ck_vexp(p, p, nb);
                ck_vdots(dp, vj, GO, (size_t)lddo, nb, D);
                for (i = 0; i < nb; i++) {
                    float ds = p[i] * (dp[i] - Dh[t + i]);
                    if (softcap > 0.0f) ds *= 1.0f - (s[i] / softcap) * (s[i] / softcap);
                    dp[i] = ds * scale;
                }
                ck_vmacc(dkj, dp, Q, (size_t)ldq, nb, D);
                ck_vmacc(dvj, p, GO, (size_t)lddo, nb, D);
            }
        }
    }
}

void ck_attention_backward_ref(float *dq, int lddq, float *dk, int lddk, float *dv, int lddv, int acc,
                               const float *dout, int lddo, const float *q, int ldq, const float *k_cache,
                               const float *v_cache, int cap, int T, int H, int KVH, int D, float scale, int window,
                               float softcap)
{
    /* the textbook chain rule per (query, head): probabilities, dp, ds, then the three products, in double */
    int t, h, j, d, group = H / KVH;
    double gq[CK_ATTENTION_MAX_HEAD_DIM];
    double *p = (double *)malloc(sizeof(double) * (size_t)T * 3), *dp = p + T, *raw = dp + T;
    double *gk = (double *)calloc((size_t)T * KVH * D * 2, sizeof(double)), *gv = gk + (size_t)T * KVH * D;
    if (!p || !gk) {
        free(p);
        free(gk);
        return;
    }
    for (t = 0; t < T; t++)
        for (h = 0; h < H; h++) {
            const float *qv = q + (size_t)t * ldq + (size_t)h * D, *go = dout + (size_t)t * lddo + (size_t)h * D;
            const float *K = k_cache + (size_t)(h / group) * cap * D, *V = v_cache + (size_t)(h / group) * cap * D;
            int j0 = visible_from(t, window), g = h / group;
            double mx = -INFINITY, sum = 0.0, pdp = 0.0;
            for (j = j0; j <= t; j++) {
                double s = dot_ref(qv, K + (size_t)j * D, D) * scale;
                raw[j] = s;
                p[j] = softcap > 0.0f ? softcap * tanh(s / softcap) : s;
                if (p[j] > mx) mx = p[j];
            }
            for (j = j0; j <= t; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            for (j = j0; j <= t; j++) {
                p[j] /= sum;
                dp[j] = dot_ref(go, V + (size_t)j * D, D);
                pdp += p[j] * dp[j];
            }
            for (d = 0; d < D; d++) gq[d] = 0.0;
            for (j = j0; j <= t; j++) {
                double ds = p[j] * (dp[j] - pdp), th;
                if (softcap > 0.0f) {
                    th = tanh(raw[j] / softcap);
                    ds *= 1.0 - th * th;
                }
                ds *= scale;
                for (d = 0; d < D; d++) {
                    gq[d] += ds * K[(size_t)j * D + d];
                    gk[(size_t)j * KVH * D + g * D + d] += ds * qv[d];
                    gv[(size_t)j * KVH * D + g * D + d] += p[j] * go[d];
                }
            }
            for (d = 0; d < D; d++) {
                float *o = dq + (size_t)t * lddq + (size_t)h * D + d;
                *o = (float)(acc ? *o + gq[d] : gq[d]);
            }
        }
    for (j = 0; j < T; j++)
        for (d = 0; d < KVH * D; d++) {
            float *ok = dk + (size_t)j * lddk + d, *ov = dv + (size_t)j * lddv + d;
            double vk = gk[(size_t)j * KVH * D + d], vv = gv[(size_t)j * KVH * D + d];
            *ok = (float)(acc ? *ok + vk : vk);
            *ov = (float)(acc ? *ov + vv : vv);
        }
    free(p);
    free(gk);
}

/* ---- activations ----------------------------------------------------------------------------------- */

/* act'(x) */
static float act_grad(float x, ck_act act)
{
    if (act == CK_ACT_SILU) {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    if (act == CK_ACT_GELU_TANH) {
        float u = (float)CK_GELU_TANH_C * (x + (float)CK_GELU_TANH_A * x * x * x), th = tanhf(u);
        return 0.5f * (1.0f + th) +
               0.5f * x * (1.0f - th * th) * (float)CK_GELU_TANH_C * (1.0f + 3.0f * (float)CK_GELU_TANH_A * x * x);
    }
    return 0.5f * (1.0f + erff(x * 0.70710678f)) + x * expf(-0.5f * x * x) * 0.39894228f;
}

static float act_value(float x, ck_act act)
{
    if (act == CK_ACT_SILU) return x / (1.0f + expf(-x));
    if (act == CK_ACT_GELU_TANH)
        return 0.5f * x * (1.0f + tanhf((float)CK_GELU_TANH_C * (x + (float)CK_GELU_TANH_A * x * x * x)));
    return 0.5f * x * (1.0f + erff(x * 0.70710678f));
}

static double act_grad_ref(double x, ck_act act)
{
    if (act == CK_ACT_SILU) {
        double s = 1.0 / (1.0 + exp(-x));
        return s + x * s * (1.0 - s);
    }
    if (act == CK_ACT_GELU_TANH) {
        double u = CK_GELU_TANH_C * (x + CK_GELU_TANH_A * x * x * x), th = tanh(u);
        return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * CK_GELU_TANH_C * (1.0 + 3.0 * CK_GELU_TANH_A * x * x);
    }
    return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * 3.14159265358979323846);
}

static double act_value_ref(double x, ck_act act)
{
    if (act == CK_ACT_SILU) return x / (1.0 + exp(-x));
    if (act == CK_ACT_GELU_TANH) return 0.5 * x * (1.0 + tanh(CK_GELU_TANH_C * (x + CK_GELU_TANH_A * x * x * x)));
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

void ck_glu_backward(float *dgate, int lddg, float *dup, int lddu, int acc, const float *dy, int lddy,
                     const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act)
{
    int t;
#pragma omp parallel for schedule(static) if ((long)T * F >= CK_PAR_MIN_ACT)
    for (t = 0; t < T; t++) {
        const float *g = gate + (size_t)t * ldg, *u = up + (size_t)t * ldu, *e = dy + (size_t)t * lddy;
        float *dg = dgate + (size_t)t * lddg, *du = dup + (size_t)t * lddu;
        int f;
        for (f = 0; f < F; f++) {
            float vg = e[f] * u[f] * act_grad(g[f], act), vu = e[f] * act_value(g[f], act);
            dg[f] = acc ? dg[f] + vg : vg;
            du[f] = acc ? du[f] + vu : vu;
        }
    }
}

void ck_glu_backward_ref(float *dgate, int lddg, float *dup, int lddu, int acc, const float *dy, int lddy,
                         const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act)
{
    int t, f;
    for (t = 0; t < T; t++)
        for (f = 0; f < F; f++) {
            double g = gate[(size_t)t * ldg + f], u = up[(size_t)t * ldu + f], e = dy[(size_t)t * lddy + f];
            float *dg = dgate + (size_t)t * lddg + f, *du = dup + (size_t)t * lddu + f;
            *dg = (float)(acc ? *dg + e * u * act_grad_ref(g, act) : e * u * act_grad_ref(g, act));
            *du = (float)(acc ? *du + e * act_value_ref(g, act) : e * act_value_ref(g, act));
        }
}

void ck_gelu_backward(float *dx, int acc, const float *dy, const float *x, size_t n, ck_act act)
{
    size_t i;
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN_ACT)
    for (i = 0; i < n; i++) {
        float v = dy[i] * act_grad(x[i], act);
        dx[i] = acc ? dx[i] + v : v;
    }
}

void ck_gelu_backward_ref(float *dx, int acc, const float *dy, const float *x, size_t n, ck_act act)
{
    size_t i;
    for (i = 0; i < n; i++) dx[i] = (float)((acc ? dx[i] : 0.0) + dy[i] * act_grad_ref(x[i], act));
}

void ck_softcap_backward(float *dx, int acc, const float *dy, const float *x, size_t n, float cap)
{
    size_t i;
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN_ACT)
    for (i = 0; i < n; i++) {
        float th = tanhf(x[i] / cap), v = dy[i] * (1.0f - th * th);
        dx[i] = acc ? dx[i] + v : v;
    }
}

void ck_softcap_backward_ref(float *dx, int acc, const float *dy, const float *x, size_t n, float cap)
{
    size_t i;
    for (i = 0; i < n; i++) {
        double th = tanh((double)x[i] / cap);
        dx[i] = (float)((acc ? dx[i] : 0.0) + dy[i] * (1.0 - th * th));
    }
}

void ck_clamp_backward(float *dx, int acc, const float *dy, const float *x, size_t n, float lo, float hi, int bounds)
{
    const float l = bounds & 1 ? lo : -INFINITY, h = bounds & 2 ? hi : INFINITY;
    long i;
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN_ACT)
    for (i = 0; i < (long)n; i++) {
        const float v = x[i] >= l && x[i] <= h ? dy[i] : 0.0f;
        dx[i] = acc ? dx[i] + v : v;
    }
}

void ck_clamp_backward_ref(float *dx, int acc, const float *dy, const float *x, size_t n, float lo, float hi,
                           int bounds)
{
    size_t i;
    for (i = 0; i < n; i++) {
        const int in = x[i] == x[i] && (!(bounds & 1) || x[i] >= lo) && (!(bounds & 2) || x[i] <= hi);
        dx[i] = (float)((acc ? dx[i] : 0.0) + (in ? dy[i] : 0.0));
    }
}

/* ---- loss ------------------------------------------------------------------------------------------ */

double ck_cross_entropy(float *dlogits, const float *logits, const int32_t *targets, int T, int V, int ignore_index,
                        int *n_counted)
{
    int n = 0, t;
    double loss = 0.0;
    for (t = 0; t < T; t++) n += targets[t] != ignore_index;
    *n_counted = n;
#pragma omp parallel for schedule(static) reduction(+ : loss) if ((long)T * V >= CK_PAR_MIN_EXP)
    for (t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * V;
        float *d = dlogits + (size_t)t * V, mx = -INFINITY, sum, inv, lse, lt, scale;
        int v;
        if (targets[t] == ignore_index) {
            memset(d, 0, (size_t)V * sizeof(float));
            continue;
        }
        for (v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        lt = l[targets[t]]; /* (d may be l: read before the row is overwritten) */
        for (v = 0; v < V; v++) d[v] = l[v] - mx;
        ck_vexp(d, d, V); /* the vector exp: a scalar expf per logit was 15% of a stories15M step */
        sum = ck_vsum(d, V);
        lse = mx + logf(sum);
        loss += (double)(lse - lt);
        inv = 1.0f / (float)n;
        scale = inv / sum; /* softmax / n = exp(l - mx) / sum / n */
        for (v = 0; v < V; v++) d[v] *= scale;
        d[targets[t]] -= inv;
    }
    return n ? loss / n : 0.0;
}

double ck_cross_entropy_ref(float *dlogits, const float *logits, const int32_t *targets, int T, int V,
                            int ignore_index, int *n_counted)
{
    int n = 0, t, v;
    double loss = 0.0;
    for (t = 0; t < T; t++) n += targets[t] != ignore_index;
    *n_counted = n;
    for (t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * V;
        double mx = -INFINITY, sum = 0.0, lse;
        if (targets[t] == ignore_index) {
            for (v = 0; v < V; v++) dlogits[(size_t)t * V + v] = 0.0f;
            continue;
        }
        for (v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        for (v = 0; v < V; v++) sum += exp(l[v] - mx);
        lse = mx + log(sum);
        loss += lse - l[targets[t]];
        for (v = 0; v < V; v++)
            dlogits[(size_t)t * V + v] = (float)((exp(l[v] - lse) - (v == targets[t] ? 1.0 : 0.0)) / n);
    }
    return n ? loss / n : 0.0;
}

/* ---- optimizer ------------------------------------------------------------------------------------- */

double ck_sum_squares(const float *x, size_t n)
{
    double s = 0.0;
    long b, blocks = (long)((n + 4095) / 4096);
    /* blocks of 4096 in 8 double lanes (vectorizable; a single running sum is one add per element) */
#pragma omp parallel for schedule(static) reduction(+ : s) if (n >= CK_PAR_MIN)
    for (b = 0; b < blocks; b++) {
        const float *xb = x + (size_t)b * 4096;
        size_t m = n - (size_t)b * 4096 < 4096 ? n - (size_t)b * 4096 : 4096, i = 0;
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int k;
        for (; i + 8 <= m; i += 8)
            for (k = 0; k < 8; k++) lane[k] += (double)xb[i + k] * xb[i + k];
        for (; i < m; i++) lane[0] += (double)xb[i] * xb[i];
        s += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    return s;
}

/* AdamW over [i0, i1): torch.optim.AdamW's single-tensor step, in float32 like it */
static void adamw_part(float *w, const float *g, float *m, float *v, size_t i0, size_t i1, float b1, float b2,
                       float eps, float grad_scale, float step_size, float bc2_sqrt, float decay)
{
    size_t i;
    for (i = i0; i < i1; i++) {
        float gi = g[i] * grad_scale;
        float mi = m[i] + (gi - m[i]) * (1.0f - b1); /* torch: exp_avg.lerp_(grad, 1 - beta1) */
        float vi = v[i] * b2 + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
}

#ifdef CK_X86
/* the same, 8 at a time (sqrtf keeps the scalar loop from vectorizing: it may set errno) */
CK_AVX2 static void adamw_avx2(float *w, const float *g, float *m, float *v, size_t i0, size_t i1, float b1, float b2,
                               float eps, float grad_scale, float step_size, float bc2_sqrt, float decay)
{
    const __m256 gs = _mm256_set1_ps(grad_scale), a1 = _mm256_set1_ps(1.0f - b1), vb2 = _mm256_set1_ps(b2);
    const __m256 a2 = _mm256_set1_ps(1.0f - b2), bc = _mm256_set1_ps(bc2_sqrt), ve = _mm256_set1_ps(eps);
    const __m256 dec = _mm256_set1_ps(decay), ss = _mm256_set1_ps(step_size);
    size_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gs), m0 = _mm256_loadu_ps(m + i);
        const __m256 mi = _mm256_add_ps(m0, _mm256_mul_ps(_mm256_sub_ps(gi, m0), a1));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), vb2), _mm256_mul_ps(_mm256_mul_ps(a2, gi), gi));
        const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc), ve);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(w + i, _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(w + i), dec),
                                              _mm256_mul_ps(ss, _mm256_div_ps(mi, den))));
    }
    adamw_part(w, g, m, v, i, i1, b1, b2, eps, grad_scale, step_size, bc2_sqrt, decay);
}
#endif

void ck_adamw(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
              float wd, float grad_scale, int step)
{
    float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
    float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * wd;
    long c, chunks = (long)((n + 4095) / 4096);
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
    for (c = 0; c < chunks; c++) {
        size_t i0 = (size_t)c * 4096, i1 = n - i0 < 4096 ? n : i0 + 4096;
#ifdef CK_X86
        if (ck_has_avx2()) {
            adamw_avx2(w, g, m, v, i0, i1, b1, b2, eps, grad_scale, step_size, bc2_sqrt, decay);
            continue;
        }
#endif
        adamw_part(w, g, m, v, i0, i1, b1, b2, eps, grad_scale, step_size, bc2_sqrt, decay);
    }
}

void ck_adamw_ref(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
                  float wd, float grad_scale, int step)
{
    size_t i;
    for (i = 0; i < n; i++) {
        double gi = (double)g[i] * grad_scale;
        double mi = b1 * (double)m[i] + (1.0 - b1) * gi, vi = b2 * (double)v[i] + (1.0 - b2) * gi * gi;
        double mhat = mi / (1.0 - pow(b1, step)), vhat = vi / (1.0 - pow(b2, step));
        m[i] = (float)mi;
        v[i] = (float)vi;
        w[i] = (float)((double)w[i] * (1.0 - (double)lr * wd) - lr * mhat / (sqrt(vhat) + eps));
    }
}

/* ---- the mixture of experts' backward (moe.c has the forward) ---- */

void ck_moe_aux_stats(double *aux, const float *logits, int ldl, int T, int E, int k)
{
    float p[CK_MOE_MAX_EXPERTS];
    unsigned char taken[CK_MOE_MAX_EXPERTS];
    int t, e;
    for (t = 0; t < T; t++) {
        ck_moe_choice(logits + (size_t)t * ldl, E, k, p, taken);
        for (e = 0; e < E; e++) {
            aux[e] += taken[e];
            aux[E + e] += p[e];
        }
    }
    aux[2 * E] += T;
}

double ck_moe_aux_loss(const double *aux, int E, double coef)
{
    double R = aux[2 * E], s = 0.0;
    int e;
    if (R <= 0) return 0.0;
    for (e = 0; e < E; e++) s += (aux[e] / R) * (aux[E + e] / R);
    return coef * E * s;
}

void ck_moe_route_backward(float *dlogits, int lddl, int acc, const float *droute, int lddr, const float *logits,
                           int ldl, int T, int E, int k, int norm_topk, const double *aux, float aux_coef)
{
    float gaux[CK_MOE_MAX_EXPERTS];
    int t, i;
    for (i = 0; i < E; i++) /* the load-balancing loss's d p_e, the same for every row */
        gaux[i] = aux && aux[2 * E] > 0 ? (float)(aux_coef * E * aux[i] / (aux[2 * E] * aux[2 * E])) : 0.0f;
#pragma omp parallel for schedule(static) if ((long)T * E >= CK_PAR_MIN)
    for (t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * ldl, *dr = droute + (size_t)t * lddr;
        float *dl = dlogits + (size_t)t * lddl;
        float p[CK_MOE_MAX_EXPERTS], dp[CK_MOE_MAX_EXPERTS], dot = 0.0f, pdp = 0.0f;
        unsigned char taken[CK_MOE_MAX_EXPERTS];
        float kept = ck_moe_choice(l, E, k, p, taken); /* the forward's choice, recomputed */
        int e;
        /* route_e = p_e (/ kept when norm_topk) on the chosen, 0 elsewhere: d p from d route */
        if (norm_topk)
            for (e = 0; e < E; e++)
                if (taken[e]) dot += dr[e] * (p[e] / kept);
        for (e = 0; e < E; e++) dp[e] = (!taken[e] ? 0.0f : norm_topk ? (dr[e] - dot) / kept : dr[e]) + gaux[e];
        /* softmax: d l_e = p_e (d p_e - sum_j p_j d p_j) */
        for (e = 0; e < E; e++) pdp += p[e] * dp[e];
        for (e = 0; e < E; e++) {
            float v = p[e] * (dp[e] - pdp);
            dl[e] = acc ? dl[e] + v : v;
        }
    }
}

void ck_moe_experts_backward(float *dx, int lddx, int acc, float *droute, int lddr, float *dgate, float *dup,
                             float *ddown, const float *dy, int lddy, const float *x, int ldx, const float *route,
                             int ldr, int T, int E, int C, int F, const float *gate, const float *up,
                             const float *down, int act, float *scratch)
{
    float *xs = scratch, *g = xs + (size_t)T * C, *u = g + (size_t)T * F, *h = u + (size_t)T * F;
    float *ys = h + (size_t)T * F, *dys = ys + (size_t)T * C, *dh = dys + (size_t)T * C;
    float *dg = dh + (size_t)T * F, *du = dg + (size_t)T * F, *dxs = du + (size_t)T * F;
    int *rows = (int *)(dxs + (size_t)T * C);
    int t, e, i, c;
    if (!acc)
        for (t = 0; t < T; t++) memset(dx + (size_t)t * lddx, 0, (size_t)C * sizeof *dx);
    for (t = 0; t < T; t++) memset(droute + (size_t)t * lddr, 0, (size_t)E * sizeof *droute);
    for (e = 0; e < E; e++) {
        const float *wg = gate + (size_t)e * F * C, *wu = up + (size_t)e * F * C, *wd = down + (size_t)e * C * F;
        int n = 0;
        for (t = 0; t < T; t++)
            if (route[(size_t)t * ldr + e] != 0.0f) rows[n++] = t;
        if (!n) continue;
        for (i = 0; i < n; i++) memcpy(xs + (size_t)i * C, x + (size_t)rows[i] * ldx, (size_t)C * sizeof *xs);
        /* the forward again: g, u, h = act(g) u, ys = h Wd^T */
        ck_linear(g, F, xs, C, wg, NULL, NULL, 0, n, C, F);
        ck_linear(u, F, xs, C, wu, NULL, NULL, 0, n, C, F);
        ck_glu(h, F, g, F, u, F, n, F, (ck_act)act);
        ck_linear(ys, C, h, F, wd, NULL, NULL, 0, n, F, C);
        for (i = 0; i < n; i++) { /* d route = dy . ys; d ys = route dy */
            const float *d = dy + (size_t)rows[i] * lddy, *y = ys + (size_t)i * C;
            float w = route[(size_t)rows[i] * ldr + e], s = 0.0f;
            for (c = 0; c < C; c++) {
                s += d[c] * y[c];
                dys[(size_t)i * C + c] = w * d[c];
            }
            droute[(size_t)rows[i] * lddr + e] = s;
        }
        ck_linear_backward(dh, F, 0, ddown + (size_t)e * C * F, NULL, dys, C, h, F, wd, n, F, C);
        ck_glu_backward(dg, F, du, F, 0, dh, F, g, F, u, F, n, F, (ck_act)act);
        ck_linear_backward(dxs, C, 0, dgate + (size_t)e * F * C, NULL, dg, F, xs, C, wg, n, C, F);
        ck_linear_backward(dxs, C, 1, dup + (size_t)e * F * C, NULL, du, F, xs, C, wu, n, C, F);
        for (i = 0; i < n; i++) {
            float *o = dx + (size_t)rows[i] * lddx;
            const float *s = dxs + (size_t)i * C;
            for (c = 0; c < C; c++) o[c] += s[c];
        }
    }
}
