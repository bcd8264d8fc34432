/*
 * reduce.c — softmax and reductions along the middle axis of [outer][n][inner],
 * and the causal mask.
 *
 * The last-axis case (inner == 1) is the common one: contiguous rows, exp
 * vectorized through ck_simd.h, rows split over the OpenMP team.
 */
#include <math.h>

#include "ck_kernels.h"
#include "ck_simd.h"

void ck_softmax(float *out, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    long r;
    if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * n >= CK_PAR_MIN_EXP)
        for (r = 0; r < (long)outer; r++) ck_vsoftmax(out + r * n, x + r * n, (int)n);
        return;
    }
    ck_softmax_ref(out, x, outer, n, inner);
}

void ck_softmax_ref(float *out, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    int64_t o, j, k;
    for (o = 0; o < outer; o++)
        for (j = 0; j < inner; j++) {
            const float *xr = x + o * n * inner + j;
            float *orow = out + o * n * inner + j;
            double mx = -INFINITY, sum = 0.0;
            for (k = 0; k < n; k++)
                if (xr[k * inner] > mx) mx = xr[k * inner];
            for (k = 0; k < n; k++) sum += exp((double)xr[k * inner] - mx);
            for (k = 0; k < n; k++) orow[k * inner] = (float)(exp((double)xr[k * inner] - mx) / sum);
        }
}

void ck_reduce(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, ck_redop op)
{
    long o;
#pragma omp parallel for schedule(static) if (outer * n * inner >= CK_PAR_MIN)
    for (o = 0; o < (long)outer; o++) {
        int64_t j, k;
        for (j = 0; j < inner; j++) {
            const float *xr = x + (int64_t)o * n * inner + j;
            float acc = op == CK_RED_MAX ? -INFINITY : 0.0f;
            for (k = 0; k < n; k++) {
                float v = xr[k * inner];
                if (op == CK_RED_MAX)
                    acc = v > acc ? v : acc;
                else
                    acc += v;
            }
            out[(int64_t)o * inner + j] = op == CK_RED_MEAN ? acc / (float)n : acc;
        }
    }
}

void ck_reduce_ref(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, ck_redop op)
{
    int64_t o, j, k;
    for (o = 0; o < outer; o++)
        for (j = 0; j < inner; j++) {
            double acc = op == CK_RED_MAX ? -INFINITY : 0.0;
            for (k = 0; k < n; k++) {
                double v = x[(o * n + k) * inner + j];
                acc = op == CK_RED_MAX ? (v > acc ? v : acc) : acc + v;
            }
            out[o * inner + j] = (float)(op == CK_RED_MEAN ? acc / (double)n : acc);
        }
}

void ck_causal_mask(float *out, const float *x, int64_t batch, int64_t S)
{
    int64_t b, i, j;
    for (b = 0; b < batch; b++)
        for (i = 0; i < S; i++) {
            const float *xr = x + (b * S + i) * S;
            float *o = out + (b * S + i) * S;
            for (j = 0; j < S; j++) o[j] = j > i ? -INFINITY : xr[j];
        }
}
