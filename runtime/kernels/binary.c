/*
 * binary.c — elementwise binary ops with numpy broadcasting, and masked fill.
 *
 * General case: the output's rows (its last dim), split across threads, each
 * row's operand offsets from its index over the leading dims and per-operand
 * strides (0 along broadcast dims), the row run as a tight loop. Fast
 * paths for the shapes that dominate real graphs: equal shapes, a scalar
 * operand, and a row vector broadcast over leading dims (biases).
 */
#include "ck_kernels.h"

static size_t numel(const int64_t *s, int rank)
{
    size_t n = 1;
    int i;
    for (i = 0; i < rank; i++) n *= (size_t)s[i];
    return n;
}

/* strides of an operand over the output's dims; 0 along broadcast dims */
static void bstrides(int64_t *st, const int64_t *shape, const int64_t *out_shape, int rank)
{
    int64_t s = 1;
    int d;
    for (d = rank - 1; d >= 0; d--) {
        st[d] = shape[d] == 1 && out_shape[d] != 1 ? 0 : s;
        s *= shape[d];
    }
}

static int same(const int64_t *a, const int64_t *b, int rank)
{
    int i;
    for (i = 0; i < rank; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* the offset of row r (an index over out's leading rank - 1 dims) in an operand of strides st */
static int64_t row_offset(int64_t r, const int64_t *os, int rank, const int64_t *st)
{
    int64_t off = 0;
    int d;
    for (d = rank - 2; d >= 0; d--) {
        off += (r % os[d]) * st[d];
        r /= os[d];
    }
    return off;
}

/* b is [1, ..., 1, N] against out [..., N] */
static int row_vector(const int64_t *b, const int64_t *out, int rank)
{
    int i;
    for (i = 0; i < rank - 1; i++)
        if (b[i] != 1) return 0;
    return rank > 0 && b[rank - 1] == out[rank - 1];
}

void ck_binary(float *out, const int64_t *os, int rank, const float *a, const int64_t *as, const float *b,
               const int64_t *bs, ck_binop op)
{
    size_t n = numel(os, rank), na = numel(as, rank), nb = numel(bs, rank);
    int64_t sa[CK_MAX_RANK], sb[CK_MAX_RANK];
    long k;
    if (n == 0) return;
    if (same(as, os, rank) && same(bs, os, rank)) {
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (k = 0; k < (long)n; k++) out[k] = ck_binop_apply(op, a[k], b[k]);
        return;
    }
    if (nb == 1 && na == n) {
        ck_binary_scalar(out, a, n, b[0], op, 0);
        return;
    }
    if (na == 1 && nb == n) {
        ck_binary_scalar(out, b, n, a[0], op, 1);
        return;
    }
    if (na == n && row_vector(bs, os, rank)) {
        int64_t N = os[rank - 1], rows = (int64_t)(n / (size_t)N);
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (k = 0; k < (long)rows; k++) {
            int64_t j;
            for (j = 0; j < N; j++) out[k * N + j] = ck_binop_apply(op, a[k * N + j], b[j]);
        }
        return;
    }
    /* general: rows of the last dim, each row's operand offsets from its index over the leading dims */
    bstrides(sa, as, os, rank);
    bstrides(sb, bs, os, rank);
    {
        int64_t N = os[rank - 1], rows = (int64_t)(n / (size_t)N), la = sa[rank - 1], lb = sb[rank - 1];
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (k = 0; k < (long)rows; k++) {
            const float *ra = a + row_offset(k, os, rank, sa), *rb = b + row_offset(k, os, rank, sb);
            float *ro = out + k * N;
            int64_t j;
            for (j = 0; j < N; j++) ro[j] = ck_binop_apply(op, ra[j * la], rb[j * lb]);
        }
    }
}

void ck_binary_ref(float *out, const int64_t *os, int rank, const float *a, const int64_t *as, const float *b,
                   const int64_t *bs, ck_binop op)
{
    size_t n = numel(os, rank), i;
    for (i = 0; i < n; i++) {
        size_t rem = i, ia = 0, ib = 0, ma = 1, mb = 1;
        int d;
        for (d = rank - 1; d >= 0; d--) {
            size_t c = rem % (size_t)os[d];
            rem /= (size_t)os[d];
            ia += (as[d] == 1 ? 0 : c) * ma;
            ib += (bs[d] == 1 ? 0 : c) * mb;
            ma *= (size_t)as[d];
            mb *= (size_t)bs[d];
        }
        out[i] = ck_binop_apply(op, a[ia], b[ib]);
    }
}

void ck_binary_scalar(float *out, const float *a, size_t n, float s, ck_binop op, int reverse)
{
    long k;
    if (reverse) {
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (k = 0; k < (long)n; k++) out[k] = ck_binop_apply(op, s, a[k]);
    } else {
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (k = 0; k < (long)n; k++) out[k] = ck_binop_apply(op, a[k], s);
    }
}

void ck_masked_fill(float *out, const int64_t *shape, int rank, const float *x, const uint8_t *mask,
                    const int64_t *mask_shape, float value)
{
    size_t n = numel(shape, rank);
    int64_t sm[CK_MAX_RANK], N, rows, lm;
    long k;
    if (n == 0) return;
    if (rank == 0 || same(mask_shape, shape, rank)) {
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
        for (k = 0; k < (long)n; k++) out[k] = mask[k] ? value : x[k];
        return;
    }
    bstrides(sm, mask_shape, shape, rank);
    N = shape[rank - 1];
    rows = (int64_t)(n / (size_t)N);
    lm = sm[rank - 1];
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
    for (k = 0; k < (long)rows; k++) {
        const uint8_t *rm = mask + row_offset(k, shape, rank, sm);
        const float *rx = x + k * N;
        float *ro = out + k * N;
        int64_t j;
        for (j = 0; j < N; j++) ro[j] = rm[j * lm] ? value : rx[j];
    }
}
