/*
 * moe.c — a mixture-of-experts MLP: the router's choice (ck_moe_route) and the experts over only the tokens
 * routed to each (ck_moe_experts), as transformers' Qwen3-MoE / Mixtral / OLMoE blocks compute them.
 *
 * The choice is a dense [T][E] matrix of weights, zero where an expert is not chosen: the experts read it
 * without indexing by a value computed from the data, so no router output (a NaN logit included) can reach
 * outside the expert table. Each expert runs its SwiGLU over the rows gathered for it, in expert order, and
 * adds its weighted output to those rows: the order of transformers' index_add over the experts it hit.
 */
#include <math.h>
#include <string.h>

#include "ck_errors.h"
#include "ck_kernels.h"
#include "ck_quant.h"
#include "moe_choice.h"

void ck_moe_route(float *route, int ldr, const float *logits, int ldl, int T, int E, int k, int norm_topk)
{
    int t;
#pragma omp parallel for schedule(static) if ((long)T * E >= CK_PAR_MIN)
    for (t = 0; t < T; t++) {
        float *r = route + (size_t)t * ldr;
        unsigned char taken[CK_MOE_MAX_EXPERTS];
        /* the probabilities, in place, then 0 where not chosen (renormalized over the chosen when norm_topk) */
        const float kept = ck_moe_choice(logits + (size_t)t * ldl, E, k, r, taken);
        int e;
        for (e = 0; e < E; e++) r[e] = !taken[e] ? 0.0f : norm_topk ? r[e] / kept : r[e];
    }
}

void ck_moe_route_ref(float *route, int ldr, const float *logits, int ldl, int T, int E, int k, int norm_topk)
{
    int t, e, j;
    for (t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * ldl;
        float *r = route + (size_t)t * ldr;
        double mx = l[0], sum = 0, chosen_sum = 0;
        double p[CK_MOE_MAX_EXPERTS];
        int taken[CK_MOE_MAX_EXPERTS];
        for (e = 1; e < E; e++)
            if (l[e] > mx) mx = l[e];
        for (e = 0; e < E; e++) sum += exp((double)l[e] - mx);
        for (e = 0; e < E; e++) {
            p[e] = exp((double)l[e] - mx) / sum;
            taken[e] = 0;
            r[e] = 0.0f;
        }
        for (j = 0; j < k; j++) {
            int best = -1;
            for (e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
            taken[best] = 1;
            chosen_sum += p[best];
        }
        for (e = 0; e < E; e++)
            if (taken[e]) r[e] = (float)(norm_topk ? p[e] / chosen_sum : p[e]);
    }
}

/* expert e's matrix: q[e], or a float32 view of f's e-th [rows][K] (float experts: --train, f32 models) */
static const ck_qmat *expert(const ck_qmat *q, const float *f, int e, int rows, int K, ck_qmat *view)
{
    if (q) return &q[e];
    memset(view, 0, sizeof *view);
    view->n_parts = 1;
    view->type[0] = CK_Q_F32;
    view->rows[0] = rows;
    view->data[0] = f + (size_t)e * (size_t)rows * (size_t)K;
    return view;
}

static int moe_experts(float *out, int ldo, const float *x, int ldx, const float *route, int ldr, int T, int E, int C,
                       int F, const ck_qmat *gate, const ck_qmat *up, const ck_qmat *down, const float *fgate,
                       const float *fup, const float *fdown, ck_act act, float *scratch, int ref)
{
    float *xs = scratch, *g = xs + (size_t)T * C, *u = g + (size_t)T * F, *ys = u + (size_t)T * F;
    int *rows = (int *)(ys + (size_t)T * C);
    int t, e, i, c, rc;
    for (t = 0; t < T; t++) memset(out + (size_t)t * ldo, 0, (size_t)C * sizeof *out);
    for (e = 0; e < E; e++) {
        ck_qmat vg, vu, vd;
        const ck_qmat *wg = expert(gate, fgate, e, F, C, &vg), *wu = expert(up, fup, e, F, C, &vu),
                      *wd = expert(down, fdown, e, C, F, &vd);
        int n = 0;
        for (t = 0; t < T; t++)
            if (route[(size_t)t * ldr + e] != 0.0f) rows[n++] = t; /* chosen (a NaN weight too: it shows) */
        if (!n) continue;
        for (i = 0; i < n; i++) memcpy(xs + (size_t)i * C, x + (size_t)rows[i] * ldx, (size_t)C * sizeof *xs);
        if (ref) {
            if ((rc = ck_linear_q_ref(g, F, xs, C, wg, NULL, NULL, 0, n, C, F)) != CK_OK) return rc;
            if ((rc = ck_linear_q_ref(u, F, xs, C, wu, NULL, NULL, 0, n, C, F)) != CK_OK) return rc;
            ck_glu_ref(g, F, g, F, u, F, n, F, act);
            if ((rc = ck_linear_q_ref(ys, C, g, F, wd, NULL, NULL, 0, n, F, C)) != CK_OK) return rc;
        } else {
            if ((rc = ck_linear_q(g, F, xs, C, wg, NULL, NULL, 0, n, C, F)) != CK_OK) return rc;
            if ((rc = ck_linear_q(u, F, xs, C, wu, NULL, NULL, 0, n, C, F)) != CK_OK) return rc;
            ck_glu(g, F, g, F, u, F, n, F, act);
            if ((rc = ck_linear_q(ys, C, g, F, wd, NULL, NULL, 0, n, F, C)) != CK_OK) return rc;
        }
        for (i = 0; i < n; i++) {
            float w = route[(size_t)rows[i] * ldr + e], *o = out + (size_t)rows[i] * ldo;
            const float *y = ys + (size_t)i * C;
            for (c = 0; c < C; c++) o[c] += y[c] * w;
        }
    }
    return CK_OK;
}

int ck_moe_experts(float *out, int ldo, const float *x, int ldx, const float *route, int ldr, int T, int E, int C,
                   int F, const ck_qmat *gate, const ck_qmat *up, const ck_qmat *down, int act, float *scratch)
{
    return moe_experts(out, ldo, x, ldx, route, ldr, T, E, C, F, gate, up, down, NULL, NULL, NULL, (ck_act)act,
                       scratch, 0);
}

int ck_moe_experts_ref(float *out, int ldo, const float *x, int ldx, const float *route, int ldr, int T, int E, int C,
                       int F, const ck_qmat *gate, const ck_qmat *up, const ck_qmat *down, int act, float *scratch)
{
    return moe_experts(out, ldo, x, ldx, route, ldr, T, E, C, F, gate, up, down, NULL, NULL, NULL, (ck_act)act,
                       scratch, 1);
}

int ck_moe_experts_f32(float *out, int ldo, const float *x, int ldx, const float *route, int ldr, int T, int E, int C,
                       int F, const float *gate, const float *up, const float *down, int act, float *scratch)
{
    return moe_experts(out, ldo, x, ldx, route, ldr, T, E, C, F, NULL, NULL, NULL, gate, up, down, (ck_act)act,
                       scratch, 0);
}
