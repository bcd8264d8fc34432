/*
 * rmsnorm.c — RMSNorm over the last dim, as Hugging Face computes it in
 * float32:  x * rsqrt(mean(x^2) + eps), then times the weight.
 * The fast kernel keeps 8 partial sums so the compiler can vectorize the
 * reduction without -ffast-math, and splits rows over the OpenMP team.
 */
#include <math.h>

#include "ck_kernels.h"

static void rmsnorm_row(float *o, const float *x, const float *w, int C, float eps, float w_offset)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float ss, inv;
    int i = 0, k;
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
#pragma omp parallel for schedule(static) if ((long)T * C >= 65536)
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
