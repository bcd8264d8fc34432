/*
 * norm.c — normalizations over the last dim, as Hugging Face computes them in
 * float32:
 *   RMSNorm    x * rsqrt(mean(x^2) + eps) * (w + w_offset)   (Llama: 0, Gemma: 1)
 *   LayerNorm  (x - mean) * rsqrt(var + eps) * w + b         (biased variance)
 * The fast kernels keep 8 partial sums so the compiler can vectorize the
 * reductions without -ffast-math, and split rows over the OpenMP team.
 */
#include <math.h>

#include "ck_kernels.h"
#if CK_NEON
#include <arm_neon.h>
#endif

static void rmsnorm_row(float *o, const float *x, const float *w, int C, float eps, float w_offset)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float ss, inv;
    int i = 0, k;
#if CK_NEON
    if (ck_cpu_neon()) { /* the 8 partial sums in two registers (the compiler's -O2 keeps them scalar) */
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
        for (; i + 8 <= C; i += 8) {
            const float32x4_t x0 = vld1q_f32(x + i), x1 = vld1q_f32(x + i + 4);
            a0 = vaddq_f32(a0, vmulq_f32(x0, x0));
            a1 = vaddq_f32(a1, vmulq_f32(x1, x1));
        }
        vst1q_f32(acc, a0);
        vst1q_f32(acc + 4, a1);
    }
#endif
    for (; i + 8 <= C; i += 8)
        for (k = 0; k < 8; k++) acc[k] += x[i + k] * x[i + k];
    ss = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < C; i++) ss += x[i] * x[i];
    inv = 1.0f / sqrtf(ss / (float)C + eps);
    for (i = 0; i < C; i++) o[i] = (x[i] * inv) * (w[i] + w_offset);
}

void ck_rmsnorm(float *out, const float *x, const float *w, int T, int C, float eps, float w_offset)
{
    int t;
#pragma omp parallel for schedule(static) if ((long)T * C >= CK_PAR_MIN)
    for (t = 0; t < T; t++)
        rmsnorm_row(out + (size_t)t * C, x + (size_t)t * C, w, C, eps, w_offset);
}

void ck_rmsnorm_ref(float *out, const float *x, const float *w, int T, int C, float eps, float w_offset)
{
    int t, i;
    for (t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * C;
        float *o = out + (size_t)t * C;
        double ss = 0.0;
        float inv;
        for (i = 0; i < C; i++) ss += (double)xr[i] * xr[i];
        inv = (float)(1.0 / sqrt(ss / C + eps));
        for (i = 0; i < C; i++) o[i] = (xr[i] * inv) * (w[i] + w_offset);
    }
}

static float sum8(const float *x, int n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s;
    int i = 0, k;
    for (; i + 8 <= n; i += 8)
        for (k = 0; k < 8; k++) acc[k] += x[i + k];
    s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += x[i];
    return s;
}

static void layernorm_row(float *o, const float *x, const float *w, const float *b, int C, float eps)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, mean = sum8(x, C) / (float)C, var, inv;
    int i = 0, k;
    for (; i + 8 <= C; i += 8)
        for (k = 0; k < 8; k++) acc[k] += (x[i + k] - mean) * (x[i + k] - mean);
    var = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < C; i++) var += (x[i] - mean) * (x[i] - mean);
    inv = 1.0f / sqrtf(var / (float)C + eps);
    for (i = 0; i < C; i++) o[i] = (x[i] - mean) * inv * w[i] + b[i];
}

void ck_layernorm(float *out, const float *x, const float *w, const float *b, int T, int C, float eps)
{
    int t;
#pragma omp parallel for schedule(static) if ((long)T * C >= CK_PAR_MIN)
    for (t = 0; t < T; t++) layernorm_row(out + (size_t)t * C, x + (size_t)t * C, w, b, C, eps);
}

void ck_layernorm_ref(float *out, const float *x, const float *w, const float *b, int T, int C, float eps)
{
    int t, i;
    for (t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * C;
        float *o = out + (size_t)t * C;
        double mean = 0.0, var = 0.0;
        for (i = 0; i < C; i++) mean += xr[i];
        mean /= C;
        for (i = 0; i < C; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= C;
        for (i = 0; i < C; i++) o[i] = (float)((xr[i] - mean) / sqrt(var + eps) * w[i] + b[i]);
    }
}
