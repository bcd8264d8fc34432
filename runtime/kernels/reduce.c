/*
 * reduce.c — softmax and reductions along the middle axis of [outer][n][inner],
 * and the causal mask.
 *
 * The last-axis case (inner == 1) is the common one: contiguous rows, exp
 * vectorized through ck_simd.h, rows split over the OpenMP team. A reduction
 * over a middle axis runs its columns as vector lanes, rows in order.
 */
#include <math.h>

#include "ck_kernels.h"
#include "ck_simd.h"

void ck_softmax(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, int masked)
{
    long r;
    if (inner == 1) {
        float empty = masked ? 0.0f : NAN;
#pragma omp parallel for schedule(static) if (outer * n >= CK_PAR_MIN_EXP)
        for (r = 0; r < (long)outer; r++) ck_vsoftmax(out + r * n, x + r * n, (int)n, empty);
        return;
    }
    ck_softmax_ref(out, x, outer, n, inner, masked);
}

void ck_softmax_ref(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, int masked)
{
    int64_t o, j, k;
    for (o = 0; o < outer; o++)
        for (j = 0; j < inner; j++) {
            const float *xr = x + o * n * inner + j;
            float *orow = out + o * n * inner + j;
            double mx = -INFINITY, sum = 0.0;
            for (k = 0; k < n; k++)
                if (xr[k * inner] > mx) mx = xr[k * inner];
            if (mx == -INFINITY) { /* nothing to attend to (or NaN everywhere) */
                for (k = 0; k < n; k++) orow[k * inner] = masked ? 0.0f : NAN;
                continue;
            }
            for (k = 0; k < n; k++) sum += exp((double)xr[k * inner] - mx);
            for (k = 0; k < n; k++) orow[k * inner] = (float)(exp((double)xr[k * inner] - mx) / sum);
        }
}

/* A reduction's columns [j0, j1) of slice o, the rows read in order and the columns as vector lanes (a
 * column's value in the order of the reference: the same for any split); at most CK_REDUCE_COLS. */
#define CK_REDUCE_COLS 256
static void reduce_cols(float *out, const float *x, int64_t o, int64_t n, int64_t inner, int64_t j0, int64_t j1,
                        ck_redop op)
{
    float accs[CK_REDUCE_COLS];
    int64_t j, k, w = j1 - j0;
    const float *xs = x + o * n * inner + j0;
    switch (op) {
#define CK_RED_COLS(ir_name, name, identity, combine, finish) \
    case CK_RED_##name:                                          \
        for (j = 0; j < w; j++) accs[j] = (float)(identity);     \
        for (k = 0; k < n; k++) {                                \
            const float *xr = xs + k * inner;                    \
            for (j = 0; j < w; j++) {                            \
                float acc = accs[j], x = xr[j];                  \
                accs[j] = combine;                               \
            }                                                    \
        }                                                        \
        for (j = 0; j < w; j++) {                                \
            float acc = accs[j];                                 \
            out[o * inner + j0 + j] = finish;                    \
        }                                                        \
        break;
        CK_REDUCE_OPS(CK_RED_COLS)
#undef CK_RED_COLS
    case CK_RED_COUNT: break;
    }
}

/* A contiguous row's reduction: a sum in ck_vsum's 16 lanes (SUM, MEAN), else the row's formula in order */
static float reduce_row(const float *x, int64_t n, ck_redop op)
{
    int64_t k;
    if (op == CK_RED_SUM) return ck_vsum(x, n);
    if (op == CK_RED_MEAN) return ck_vsum(x, n) / (float)n;
    switch (op) {
#define CK_RED_ROW(ir_name, name, identity, combine, finish) \
    case CK_RED_##name: {                                       \
        float acc = (float)(identity);                          \
        for (k = 0; k < n; k++) {                               \
            float x_ = x[k];                                    \
            {                                                   \
                float x = x_;                                   \
                acc = combine;                                  \
            }                                                   \
        }                                                       \
        return finish;                                          \
    }
        CK_REDUCE_OPS(CK_RED_ROW)
#undef CK_RED_ROW
    case CK_RED_COUNT: break;
    }
    return NAN;
}

void ck_reduce(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, ck_redop op)
{
    long t;
    if (inner == 1) { /* a row per output: LayerNorm's statistics, a loss's sum */
#pragma omp parallel for schedule(static) if (outer * n >= CK_PAR_MIN)
        for (t = 0; t < (long)outer; t++) out[t] = reduce_row(x + t * n, n, op);
        return;
    }
    { /* columns (a bias gradient: a sum over the tokens): blocks of columns, so few slices still split */
        int64_t blocks = (inner + CK_REDUCE_COLS - 1) / CK_REDUCE_COLS, tasks = outer * blocks;
#pragma omp parallel for schedule(static) if (outer * n * inner >= CK_PAR_MIN)
        for (t = 0; t < (long)tasks; t++) {
            int64_t o = t / blocks, j0 = (t % blocks) * CK_REDUCE_COLS;
            reduce_cols(out, x, o, n, inner, j0, j0 + CK_REDUCE_COLS < inner ? j0 + CK_REDUCE_COLS : inner, op);
        }
    }
}

/* The definition: each row's formula in double, in order. */
void ck_reduce_ref(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, ck_redop op)
{
    int64_t o, j, k;
    for (o = 0; o < outer; o++)
        for (j = 0; j < inner; j++) {
            double r = NAN;
            switch (op) {
#define CK_RED_REF(ir_name, name, identity, combine, finish)         \
    case CK_RED_##name: {                                               \
        double acc = identity;                                          \
        for (k = 0; k < n; k++) {                                       \
            double x_ = x[(o * n + k) * inner + j];                     \
            {                                                           \
                double x = x_;                                          \
                acc = combine;                                          \
            }                                                           \
        }                                                               \
        r = finish;                                                     \
        break;                                                          \
    }
                CK_REDUCE_OPS(CK_RED_REF)
#undef CK_RED_REF
            case CK_RED_COUNT: break;
            }
            out[o * inner + j] = (float)r;
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
