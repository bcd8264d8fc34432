/*
 * select.c — the ops that build masks and indices from run-time data: casts,
 * comparisons, where, tril, arange, cumsum and advanced indexing (reads and index_put), over any dtype
 * (ck_elem).
 *
 * An exported model with an attention_mask input turns it into a [B,1,S,S]
 * boolean mask with exactly these (transformers' masking_utils: to(bool),
 * index by arange, le, and). They are small (bytes per score) next to the
 * attention they feed, so each is one pass with an odometer over the output,
 * the operands addressed through broadcast strides (0 along a broadcast dim).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ck_kernels.h"

static double load(const void *p, ck_elem t, int64_t i)
{
    switch (t) {
    case CK_ELEM_F32: return ((const float *)p)[i];
    case CK_ELEM_I64: return (double)((const int64_t *)p)[i];
    case CK_ELEM_I32: return ((const int32_t *)p)[i];
    case CK_ELEM_BOOL: return ((const uint8_t *)p)[i] != 0;
    }
    return NAN;
}

/* double -> integer: truncation toward 0, NaN 0, saturated at the type's limits */
static int64_t to_int(double v, double lo, double hi)
{
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

/* out[i] = v converted to `to` (ck_cast's rules) */
static void store(void *out, ck_elem to, size_t i, double v)
{
    switch (to) {
    case CK_ELEM_F32:
        ((float *)out)[i] = (float)v;
        break;
    case CK_ELEM_I64:
        ((int64_t *)out)[i] = to_int(v, -9223372036854775808.0, 9223372036854774784.0);
        break;
    case CK_ELEM_I32:
        ((int32_t *)out)[i] = (int32_t)to_int(v, -2147483648.0, 2147483647.0);
        break;
    case CK_ELEM_BOOL:
        ((uint8_t *)out)[i] = (uint8_t)(v != 0); /* NaN != 0 */
        break;
    }
}

void ck_cast(void *out, ck_elem to, const void *x, ck_elem from, size_t n)
{
    size_t i;
    /* element by element in order: out may equal x when the element sizes agree */
    for (i = 0; i < n; i++) store(out, to, i, load(x, from, (int64_t)i));
}

void ck_arange(void *out, ck_elem to, double start, double step, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) store(out, to, i, start + step * (double)i);
}

void ck_cumsum(void *out, const void *x, ck_elem t, int64_t outer, int64_t n, int64_t inner)
{
    int64_t o, j, k;
    for (o = 0; o < outer; o++)
        for (j = 0; j < inner; j++) {
            int64_t at = o * n * inner + j;
            if (t == CK_ELEM_I64) {
                int64_t acc = 0;
                for (k = 0; k < n; k++, at += inner) {
                    /* (wraps on overflow as torch's int64 sum does, without C's undefined behaviour) */
                    acc = (int64_t)((uint64_t)acc + (uint64_t)((const int64_t *)x)[at]);
                    ((int64_t *)out)[at] = acc;
                }
            } else {
                double acc = 0;
                for (k = 0; k < n; k++, at += inner) {
                    acc += ((const float *)x)[at];
                    ((float *)out)[at] = (float)acc;
                }
            }
        }
}

/* Element strides of an operand of shape s (rank entries, right-aligned) read at the output's indices. */
static void sel_strides(int64_t *st, const int64_t *s, int rank)
{
    int64_t acc = 1;
    int d;
    for (d = rank - 1; d >= 0; d--) {
        st[d] = s[d] == 1 ? 0 : acc;
        acc *= s[d];
    }
}

/* The odometer over the output: n operands' offsets advance with the output position. */
typedef struct walk {
    int rank, n;
    int64_t shape[CK_MAX_RANK], idx[CK_MAX_RANK], st[3][CK_MAX_RANK], off[3];
} walk;

static int64_t walk_start(walk *w, const int64_t *out_shape, int rank, int n, const int64_t *const *shapes)
{
    int64_t total = 1;
    int d, k;
    w->rank = rank;
    w->n = n;
    for (d = 0; d < rank; d++) {
        w->shape[d] = out_shape[d];
        w->idx[d] = 0;
        total *= out_shape[d];
    }
    for (k = 0; k < n; k++) {
        sel_strides(w->st[k], shapes[k], rank);
        w->off[k] = 0;
    }
    return total;
}

static void walk_next(walk *w)
{
    int d, k;
    for (d = w->rank - 1; d >= 0; d--) {
        for (k = 0; k < w->n; k++) w->off[k] += w->st[k][d];
        if (++w->idx[d] < w->shape[d]) return;
        for (k = 0; k < w->n; k++) w->off[k] -= w->st[k][d] * w->shape[d];
        w->idx[d] = 0;
    }
}

static int cmp(double a, double b, ck_cmpop op)
{
    switch (op) {
#define CK_CMP_APPLY_ROW(name, c_op) \
    case CK_CMP_##name: return a c_op b;
        CK_CMP_OPS(CK_CMP_APPLY_ROW)
#undef CK_CMP_APPLY_ROW
    case CK_CMP_COUNT: break;
    }
    return 0;
}

void ck_compare(uint8_t *out, const int64_t *out_shape, int rank, const void *a, ck_elem ta, const int64_t *a_shape,
                const void *b, ck_elem tb, const int64_t *b_shape, double scalar, ck_cmpop op)
{
    const int64_t *shapes[2] = {a_shape, b ? b_shape : a_shape};
    walk w;
    int64_t n = walk_start(&w, out_shape, rank, 2, shapes), i;
    for (i = 0; i < n; i++, walk_next(&w))
        out[i] = (uint8_t)cmp(load(a, ta, w.off[0]), b ? load(b, tb, w.off[1]) : scalar, op);
}

void ck_binary_i64(int64_t *out, const int64_t *out_shape, int rank, const int64_t *a, const int64_t *a_shape,
                   const int64_t *b, const int64_t *b_shape, int64_t scalar, int reverse, ck_binop op)
{
    const int64_t *shapes[2] = {a_shape, b ? b_shape : a_shape};
    walk w;
    int64_t n = walk_start(&w, out_shape, rank, 2, shapes), i;
    for (i = 0; i < n; i++, walk_next(&w)) {
        /* in uint64: wraps on overflow as torch's int64 arithmetic does, without C's undefined behaviour */
        uint64_t x = (uint64_t)a[w.off[0]], y = b ? (uint64_t)b[w.off[1]] : (uint64_t)scalar, t;
        if (reverse) t = x, x = y, y = t;
        switch (op) {
        case CK_BIN_ADD: out[i] = (int64_t)(x + y); break;
        case CK_BIN_SUB: out[i] = (int64_t)(x - y); break;
        case CK_BIN_MUL: out[i] = (int64_t)(x * y); break;
        case CK_BIN_DIV: /* (its result is float: the compiler never asks) */
        case CK_BIN_COUNT: out[i] = 0; break;
        }
    }
}

void ck_where(void *out, const int64_t *out_shape, int rank, const void *cond, ck_elem tc, const int64_t *c_shape,
              const void *a, const int64_t *a_shape, const void *b, const int64_t *b_shape, size_t elem)
{
    const int64_t *shapes[3] = {c_shape, a_shape, b_shape};
    walk w;
    int64_t n = walk_start(&w, out_shape, rank, 3, shapes), i;
    for (i = 0; i < n; i++, walk_next(&w)) {
        int take_a = load(cond, tc, w.off[0]) != 0;
        memcpy((char *)out + i * (int64_t)elem, (const char *)(take_a ? a : b) + (take_a ? w.off[1] : w.off[2]) * (int64_t)elem,
               elem);
    }
}

void ck_tril(void *out, const void *x, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal, size_t elem)
{
    int64_t b, r;
    for (b = 0; b < batch; b++)
        for (r = 0; r < rows; r++) {
            char *o = (char *)out + ((b * rows + r) * cols) * (int64_t)elem;
            const char *xr = (const char *)x + ((b * rows + r) * cols) * (int64_t)elem;
            int64_t keep = r + diagonal + 1; /* columns 0..keep-1 stay */
            if (keep < 0) keep = 0;
            if (keep > cols) keep = cols;
            if (o != xr) memcpy(o, xr, (size_t)keep * elem);
            memset(o + keep * (int64_t)elem, 0, (size_t)(cols - keep) * elem); /* 0 in every dtype */
        }
}

int64_t ck_index(void *out, const void *x, const int64_t *x_shape, int x_rank, int k, const int64_t *const *idx,
                 const int64_t *idx_shapes, int b_rank, size_t elem)
{
    int64_t xst[CK_MAX_RANK], inner = 1, n = 1, i, pos[CK_MAX_RANK], ist[CK_MAX_RANK][CK_MAX_RANK], bshape[CK_MAX_RANK];
    int d, j, pass;
    for (d = x_rank - 1; d >= 0; d--) { /* x's element strides; inner: the elements of one indexed slice */
        xst[d] = d == x_rank - 1 ? 1 : xst[d + 1] * x_shape[d + 1];
        if (d >= k) inner *= x_shape[d];
    }
    for (d = 0; d < b_rank; d++) {
        bshape[d] = 1;
        for (j = 0; j < k; j++)
            if (idx_shapes[j * b_rank + d] != 1) bshape[d] = idx_shapes[j * b_rank + d];
        n *= bshape[d];
    }
    for (j = 0; j < k; j++) sel_strides(ist[j], idx_shapes + j * b_rank, b_rank);
    /* pass 0 checks every index, pass 1 copies: nothing is written when one is out of range */
    for (pass = 0; pass < 2; pass++) {
        for (d = 0; d < b_rank; d++) pos[d] = 0;
        for (i = 0; i < n; i++) {
            int64_t src = 0;
            for (j = 0; j < k; j++) {
                int64_t off = 0, v;
                for (d = 0; d < b_rank; d++) off += pos[d] * ist[j][d];
                v = idx[j][off];
                if (v < 0) v += x_shape[j];
                if (v < 0 || v >= x_shape[j]) return i; /* only pass 0 can get here */
                src += v * xst[j];
            }
            if (pass == 1)
                memcpy((char *)out + i * inner * (int64_t)elem, (const char *)x + src * (int64_t)elem,
                       (size_t)(inner * (int64_t)elem));
            for (d = b_rank - 1; d >= 0; d--) {
                if (++pos[d] < bshape[d]) break;
                pos[d] = 0;
            }
        }
    }
    return -1;
}

int64_t ck_index_put(void *out, const void *x, int64_t rows, int64_t inner, const int64_t *idx, int64_t n,
                     const void *values, int accumulate, size_t elem)
{
    int64_t i, j, row = inner * (int64_t)elem;
    for (i = 0; i < n; i++) /* every index first: nothing is written when one is out of range */
        if (idx[i] < -rows || idx[i] >= rows) return i;
    if (!x)
        memset(out, 0, (size_t)(rows * row));
    else if (out != x)
        memcpy(out, x, (size_t)(rows * row));
    /* (one pass in index order: a duplicate index adds in the order eager's CPU kernel does) */
    for (i = 0; i < n; i++) {
        int64_t r = idx[i] < 0 ? idx[i] + rows : idx[i];
        if (accumulate) {
            float *d = (float *)out + r * inner;
            const float *v = (const float *)values + i * inner;
            for (j = 0; j < inner; j++) d[j] += v[j];
        } else {
            memcpy((char *)out + r * row, (const char *)values + i * row, (size_t)row);
        }
    }
    return -1;
}
