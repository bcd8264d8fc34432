/*
 * elementwise.c — activations and elementwise ops (memory-bound loops).
 * SwiGLU reads gate and up through row strides so it can consume the two
 * halves of the fused gate|up GEMM output in place.
 */
#include <math.h>

#include "ck_kernels.h"
#include "ck_simd.h"

void ck_swiglu(float *out, int ldo, const float *gate, int ldg, const float *up, int ldu, int T, int F)
{
    int t;
#pragma omp parallel for schedule(static) if ((long)T * F >= 32768)
    for (t = 0; t < T; t++) {
        const float *g = gate + (size_t)t * ldg, *u = up + (size_t)t * ldu;
        float *o = out + (size_t)t * ldo;
        float e[256];
        int f0, f, n;
        for (f0 = 0; f0 < F; f0 += n) { /* silu(g) = g / (1 + exp(-g)), exp vectorized */
            n = F - f0 < 256 ? F - f0 : 256;
            for (f = 0; f < n; f++) e[f] = -g[f0 + f];
            ck_vexp(e, e, n);
            for (f = 0; f < n; f++) o[f0 + f] = g[f0 + f] / (1.0f + e[f]) * u[f0 + f];
        }
    }
}

void ck_swiglu_ref(float *out, int ldo, const float *gate, int ldg, const float *up, int ldu, int T, int F)
{
    int t, f;
    for (t = 0; t < T; t++)
        for (f = 0; f < F; f++) {
            double g = gate[(size_t)t * ldg + f];
            out[(size_t)t * ldo + f] = (float)(g / (1.0 + exp(-g)) * up[(size_t)t * ldu + f]);
        }
}

void ck_add(float *out, const float *a, const float *b, size_t n)
{
    long i;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (i = 0; i < (long)n; i++) out[i] = a[i] + b[i];
}

void ck_add_ref(float *out, const float *a, const float *b, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void ck_add_bias(float *out, const float *a, const float *bias, int T, int N)
{
    int t;
#pragma omp parallel for schedule(static) if ((long)T * N >= 65536)
    for (t = 0; t < T; t++) {
        const float *ar = a + (size_t)t * N;
        float *o = out + (size_t)t * N;
        int n;
        for (n = 0; n < N; n++) o[n] = ar[n] + bias[n];
    }
}
