/*
 * layout.c — data movement: permute, slice, concatenate, broadcast, and the
 * copy of a row-strided (column view) tensor into contiguous memory. Any
 * dtype: sizes are in elements of `elem` bytes.
 *
 * ck_permute walks the output in order with an odometer over the input's
 * strides; when the permutation keeps the last axis, whole rows move with
 * memcpy (the [B,S,H,D] <-> [B,H,S,D] head transposes of attention).
 */
#include <stdint.h>
#include <string.h>

#include "ck_kernels.h"

/* out[b][j][i] = x[b][i][j] for 4-byte elements, x [B][R][C]: 32 x 32 tiles (both sides stay in cache lines),
 * split over (batch, tile row) tasks */
#define CK_TRANSPOSE_TILE 32
static void transpose_batched4(uint32_t *out, const uint32_t *x, int64_t B, int64_t R, int64_t C)
{
    int64_t row_tiles = (R + CK_TRANSPOSE_TILE - 1) / CK_TRANSPOSE_TILE, tasks = B * row_tiles, t;
#pragma omp parallel for schedule(static) if (B * R * C >= CK_PAR_MIN)
    for (t = 0; t < tasks; t++) {
        int64_t b = t / row_tiles, i0 = (t % row_tiles) * CK_TRANSPOSE_TILE, j0, i, j;
        int64_t i1 = i0 + CK_TRANSPOSE_TILE < R ? i0 + CK_TRANSPOSE_TILE : R;
        const uint32_t *xb = x + b * R * C;
        uint32_t *ob = out + b * R * C;
        for (j0 = 0; j0 < C; j0 += CK_TRANSPOSE_TILE) {
            int64_t j1 = j0 + CK_TRANSPOSE_TILE < C ? j0 + CK_TRANSPOSE_TILE : C;
            for (j = j0; j < j1; j++)
                for (i = i0; i < i1; i++) ob[j * R + i] = xb[i * C + j];
        }
    }
}

void ck_permute(void *out, const void *x, int rank, const int64_t *shape, const int *perm, size_t elem)
{
    int64_t in_strides[CK_MAX_RANK] = {0}, st[CK_MAX_RANK] = {0}, os[CK_MAX_RANK] = {0}, idx[CK_MAX_RANK] = {0};
    int64_t n = 1, run, pos;
    int d, keep_last;
    const char *src = (const char *)x;
    char *dst = (char *)out;
    if (rank <= 0) {
        memcpy(out, x, elem);
        return;
    }
    if (rank >= 2 && elem == 4 && perm[rank - 1] == rank - 2 && perm[rank - 2] == rank - 1) {
        /* the last two dims swapped, the leading ones in place (a matrix transpose per batch: aten.t,
         * transpose(-1, -2), the backward's weight-gradient operands): tiles, not an element at a time */
        int64_t B = 1;
        for (d = 0; d < rank - 2 && perm[d] == d; d++) B *= shape[d];
        if (d == rank - 2) {
            transpose_batched4((uint32_t *)out, (const uint32_t *)x, B, shape[rank - 2], shape[rank - 1]);
            return;
        }
    }
    keep_last = perm[rank - 1] == rank - 1;
    in_strides[rank - 1] = 1;
    for (d = rank - 2; d >= 0; d--) in_strides[d] = in_strides[d + 1] * shape[d + 1];
    for (d = 0; d < rank; d++) {
        os[d] = shape[perm[d]];
        st[d] = in_strides[perm[d]];
        idx[d] = 0;
        n *= os[d];
    }
    run = keep_last ? os[rank - 1] : 1; /* elements moved per step */
    for (pos = 0; pos < n; pos += run) {
        int64_t off = 0;
        int top = keep_last ? rank - 2 : rank - 1;
        for (d = 0; d <= top; d++) off += idx[d] * st[d];
        memcpy(dst + pos * (int64_t)elem, src + off * (int64_t)elem, (size_t)run * elem);
        for (d = top; d >= 0; d--) {
            if (++idx[d] < os[d]) break;
            idx[d] = 0;
        }
    }
}

void ck_permute_ref(void *out, const void *x, int rank, const int64_t *shape, const int *perm, size_t elem)
{
    int64_t in_strides[CK_MAX_RANK] = {0}, n = 1, i;
    int d;
    if (rank <= 0) {
        memcpy(out, x, elem);
        return;
    }
    in_strides[rank - 1] = 1;
    for (d = rank - 2; d >= 0; d--) in_strides[d] = in_strides[d + 1] * shape[d + 1];
    for (d = 0; d < rank; d++) n *= shape[d];
    for (i = 0; i < n; i++) {
        int64_t rem = i, off = 0;
        for (d = rank - 1; d >= 0; d--) {
            int64_t size = shape[perm[d]];
            off += (rem % size) * in_strides[perm[d]];
            rem /= size;
        }
        memcpy((char *)out + i * (int64_t)elem, (const char *)x + off * (int64_t)elem, elem);
    }
}

void ck_slice_copy(void *out, const void *x, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t len,
                   int64_t step, size_t elem)
{
    int64_t o, k;
    size_t row = (size_t)inner * elem;
    for (o = 0; o < outer; o++)
        for (k = 0; k < len; k++)
            memcpy((char *)out + ((size_t)(o * len + k)) * row, (const char *)x + ((size_t)(o * n + start + k * step)) * row,
                   row);
}

void ck_cat_part(void *out, const void *x, int64_t outer, int64_t n_out, int64_t n_in, int64_t offset, int64_t inner,
                 size_t elem)
{
    int64_t o;
    size_t block = (size_t)(n_in * inner) * elem;
    for (o = 0; o < outer; o++)
        memcpy((char *)out + (size_t)((o * n_out + offset) * inner) * elem, (const char *)x + (size_t)o * block, block);
}

void ck_expand(void *out, const int64_t *os, int rank, const void *x, const int64_t *xs, size_t elem)
{
    int64_t st[CK_MAX_RANK], idx[CK_MAX_RANK], n = 1, s = 1, pos;
    int d;
    for (d = rank - 1; d >= 0; d--) {
        st[d] = xs[d] == 1 ? 0 : s;
        s *= xs[d];
        idx[d] = 0;
        n *= os[d];
    }
    for (pos = 0; pos < n; pos++) {
        int64_t off = 0;
        for (d = 0; d < rank; d++) off += idx[d] * st[d];
        memcpy((char *)out + pos * (int64_t)elem, (const char *)x + off * (int64_t)elem, elem);
        for (d = rank - 1; d >= 0; d--) {
            if (++idx[d] < os[d]) break;
            idx[d] = 0;
        }
    }
}

void ck_copy_rows(float *out, const float *x, int64_t ldx, int64_t rows, int64_t cols)
{
    int64_t r;
    for (r = 0; r < rows; r++) memcpy(out + r * cols, x + r * ldx, (size_t)cols * sizeof(float));
}
