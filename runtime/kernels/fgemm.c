/*
 * fgemm.c — float GEMMs for many tokens over weights kept as stored (f32,
 * f16, bf16): y[t][n] = sum_k x[t][k] W[n][k] (+ bias) (+ add).
 *
 * Panels (any token count; ck_linear from 8 tokens on, qlinear.c's prefill):
 * BLAS needs float32 B, so converting f16 rows first and letting OpenBLAS
 * copy them again into its packed panel, plus packing the activations once
 * per tile, cost 18% of an f16 prefill. Here the conversion is the packing:
 * 48 rows x KC columns of W become one float panel P[k][48] (16 x 16
 * in-register transposes of converted rows), and the microkernel keeps an
 * 8-token x 48-row block of y in 24 zmm accumulators, each k one multiply-add
 * per accumulator with the token's activation broadcast from memory: the
 * arithmetic is all FMAs (92-96% of this Zen 4's peak at 128 tokens), and
 * the next panel's rows are prefetched while a panel's tiles run.
 *
 * ck_fgemm_general also reads W stored [K][N] (f32: a graph's x @ W, the backward's dY @ W) and a
 * transposed A (the weight gradient dW = dY^T X): ck_matmul's GEMMs without a scale.
 *
 * Few tokens (24-32, f32 weights; ck_linear): the activations are transposed
 * once instead, tokens as lanes, and W is read in place (see below).
 *
 * Each output's sum runs over k in order, one FMA each, restarted per KC
 * columns (the panel path adds the partial sums into y), so a result does not
 * depend on the panel widths; the scalar twins do the same FMAs (fmaf) in the
 * same order and equal the AVX-512 bodies bit for bit (tested). CPUs without
 * AVX-512 keep OpenBLAS (ck_linear) and qlinear.c's tiles into sgemm.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_kernels.h"
#include "ck_quant.h"
#include "ck_simd.h"
#include "fgemm.h"

#define NV 3        /* zmm of weight rows per panel (the last panel of a range: as few as its rows need) */
#define NR (16 * NV) /* weight rows per panel */
#define MR 8        /* tokens per microkernel block: MR x NV accumulators */
#define KC CK_FGEMM_KC
/* the workspace sizes (CK_LINEAR_WORKSPACE_BYTES) reserve CK_FGEMM_PANEL_BYTES for a thread's panel: it fits
 * (0 off x86-64, where no fgemm body runs) */
typedef char ck_fgemm_panel_fits[CK_FGEMM_PANEL_BYTES == 0 || sizeof(float) * KC * NR + 64 <= CK_FGEMM_PANEL_BYTES ? 1 : -1];

int ck_fgemm_type(int type) { return type == CK_Q_F32 || type == CK_Q_F16 || type == CK_Q_BF16; }

int ck_fgemm_fast(void) { return ck_cpu_avx512vnni(); }

/* element i of a row of `type` */
static float elem(int type, const void *row, size_t i)
{
    if (type == CK_Q_F32) return ((const float *)row)[i];
    if (type == CK_Q_F16) return ck_fp16_to_fp32(((const uint16_t *)row)[i]);
    return ck_bf16_to_fp32(((const uint16_t *)row)[i]);
}

static size_t elem_bytes(int type) { return type == CK_Q_F32 ? 4 : 2; }

/* P[k][r] = W[r][k0 + k] for r < rows (0 past them), k < kc; W's rows ldw elements apart. kn: W is stored
 * [K][N] (f32), so the element is w[(k0 + k) * ldw + r] */
static void pack_ref(float *P, int type, const void *w, size_t ldw, int kn, int rows, int k0, int kc)
{
    int r, k;
    for (k = 0; k < kc; k++)
        for (r = 0; r < NR; r++)
            P[k * NR + r] = r >= rows ? 0.0f
                            : kn      ? ((const float *)w)[(size_t)(k0 + k) * ldw + r]
                                      : elem(type, (const char *)w + elem_bytes(type) * ldw * r, (size_t)(k0 + k));
}

typedef struct {
    float *out;
    int ldo;
    const float *bias, *add;
    int ld_add;
} dest;

/* The activations: x[t][k] at x + t * st + k * sk (st = ldx, sk = 1 for rows; st = 1, sk = ldx for a transposed
 * A, which a weight gradient dW = dY^T X reads) */
typedef struct {
    const float *x;
    int64_t st, sk;
} acts;

/* y[t][n0 + r] (+)= sum_{k < kc} x[t][k0 + k] P[k][r] for tokens [t0, t0 + mr); `first`: the panel of k0 = 0
 * starts from the bias and the residual, later panels from what is stored */
static void tile_ref(const float *P, const acts *x, int k0, int kc, int t0, int mr, int n0, int rows, const dest *o,
                     int first)
{
    int i, r, k;
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        float acc[NR];
        float *y = o->out + (size_t)t * o->ldo + n0;
        for (r = 0; r < NR; r++) acc[r] = 0.0f;
        for (k = 0; k < kc; k++) {
            const float a = x->x[t * x->st + (int64_t)(k0 + k) * x->sk];
            for (r = 0; r < NR; r++) acc[r] = fmaf(a, P[k * NR + r], acc[r]);
        }
        for (r = 0; r < rows; r++) {
            float v = acc[r];
            if (first) {
                if (o->bias) v += o->bias[n0 + r];
                if (o->add) v += o->add[(size_t)t * o->ld_add + n0 + r];
            } else {
                v += y[r];
            }
            y[r] = v;
        }
    }
}

#ifdef CK_X86
#define CK_AVX512F __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

/* 16 rows x 16 columns of W converted, transposed into P[k][c0 .. c0 + 15] */
CK_AVX512F static inline void pack16x16(float *P, size_t nr, int type, const void *w, size_t ldw, int rows, int k0,
                                        int c0)
{
    __m512 m[16];
    int r;
    for (r = 0; r < 16; r++) {
        if (r >= rows) {
            m[r] = _mm512_setzero_ps();
            continue;
        }
        if (type == CK_Q_F32) {
            m[r] = _mm512_loadu_ps((const float *)w + (size_t)r * ldw + k0);
        } else {
            const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + (size_t)r * ldw + k0));
            m[r] = type == CK_Q_F16 ? _mm512_cvtph_ps(h)
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
    }
    ck_transpose16(m);
    for (r = 0; r < 16; r++) _mm512_store_ps(P + (size_t)r * nr + c0, m[r]);
}

/* P[k][r] for a panel of nr = 16 nv rows (P's rows nr floats apart) */
CK_AVX512F static void pack_avx512(float *P, int nv, int type, const void *w, size_t ldw, int kn, int rows, int k0,
                                   int kc)
{
    const size_t nr = (size_t)16 * nv;
    int k, c, r, j;
    if (kn) { /* W stored [K][N]: each k's panel row is a piece of one row of W */
        for (k = 0; k < kc; k++)
            for (c = 0; c < (int)nr; c += 16) {
                const int left = rows - c;
                const __mmask16 m = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1u : 0u);
                _mm512_store_ps(P + (size_t)k * nr + c,
                                _mm512_maskz_loadu_ps(m, (const float *)w + (size_t)(k0 + k) * ldw + c));
            }
        return;
    }
    for (k = 0; k + 16 <= kc; k += 16)
        for (c = 0; c < (int)nr; c += 16)
            pack16x16(P + (size_t)k * nr, nr, type, (const char *)w + elem_bytes(type) * ldw * c, ldw, rows - c, k0 + k, c);
    for (j = k; j < kc; j++) /* a last part of the row under 16 columns */
        for (r = 0; r < (int)nr; r++)
            P[j * nr + r] = r < rows ? elem(type, (const char *)w + elem_bytes(type) * ldw * r, (size_t)(k0 + j)) : 0.0f;
}

/* sk1: the activations are rows (x->sk == 1, the inner loop steps one float); else a transposed A (x->st == 1) */
CK_AVX512F static inline __attribute__((always_inline)) void tile_avx512_n(const float *P, const acts *x, int k0,
                                                                           int kc, int t0, int mr, int n0, int rows,
                                                                           const dest *o, int first, const int nv,
                                                                           const int sk1)
{
    __m512 acc[MR][NV];
    const float *xr[MR];
    __mmask16 m[NV];
    const size_t nr = (size_t)16 * nv;
    const int64_t sk = sk1 ? 1 : x->sk;
    int i, k, v;
    for (v = 0; v < nv; v++) {
        const int left = rows - 16 * v;
        m[v] = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1u : 0u);
    }
    for (i = 0; i < MR; i++) {
        for (v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
        /* rows past the last token repeat the first */
        xr[i] = x->x + (t0 + (i < mr ? i : 0)) * x->st + (int64_t)k0 * sk;
    }
    for (k = 0; k < kc; k++) {
        __m512 p[NV];
        for (v = 0; v < nv; v++) p[v] = _mm512_load_ps(P + (size_t)k * nr + 16 * v);
        for (i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(xr[i][(int64_t)k * sk]);
            for (v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(a, p[v], acc[i][v]);
        }
    }
    for (i = 0; i < mr; i++) {
        const int t = t0 + i;
        float *y = o->out + (size_t)t * o->ldo + n0;
        for (v = 0; v < nv; v++) {
            __m512 r = acc[i][v];
            if (first) {
                if (o->bias) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], o->bias + n0 + 16 * v));
                if (o->add) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], o->add + (size_t)t * o->ld_add + n0 + 16 * v));
            } else {
                r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], y + 16 * v));
            }
            _mm512_mask_storeu_ps(y + 16 * v, m[v], r);
        }
    }
}

/* a tile of up to MR tokens: the full-height body for any mr (rows past the last token computed, not
 * stored: one body instead of one per token count), 1-3 zmm of panel rows */
CK_AVX512F static void tile_avx512(const float *P, int nv, const acts *x, int k0, int kc, int t0, int mr, int n0,
                                   int rows, const dest *o, int first)
{
    if (x->sk != 1) {
        switch (nv) {
        case 3: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 3, 0); break;
        case 2: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 2, 0); break;
        default: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 1, 0); break;
        }
        return;
    }
    switch (nv) {
    case 3: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 3, 1); break;
    case 2: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 2, 1); break;
    default: tile_avx512_n(P, x, k0, kc, t0, mr, n0, rows, o, first, 1, 1); break;
    }
}
#endif

/* the rows of the panel starting `left` rows before the end of a range: 48; the last 64 as two of 32
 * rather than 48 + 16 (a 16-row panel pays a broadcast per multiply-add). The results do not depend on it. */
static int panel_width(int64_t left) { return (left + 15) / 16 == 4 ? 32 : NR; }

int ck_fgemm_rows(float *out, int ldo, const float *x, int ldx, int type, const void *w, const float *bias,
                  const float *add, int ld_add, int T, int K, int64_t r0, int64_t r1, int64_t col0, int fast)
{
    return ck_fgemm_general(out, ldo, x, ldx, 1, type, w, K, 0, bias, add, ld_add, T, K, r0, r1, col0, fast);
}

/* One KC block of one panel: pack rows [g, g + rows) x columns [k0, k0 + kc) of W, then run the token tiles
 * of [t0, T) over it. `next_*`: the panel the caller runs next (its rows prefetched while the tiles run; none: 0 rows). */
static void panel_block(float *P, int type, const void *w, int64_t ldw, int w_kn, int64_t g, int rows, int k0, int kc,
                        const acts *xa, int t0, int T, int n0, const dest *o, int fast, int64_t next_g, int next_k,
                        int next_rows, int K)
{
    const char *wg = (const char *)w + elem_bytes(type) * (w_kn ? (size_t)g : (size_t)g * ldw);
    int t;
#ifdef CK_X86
    if (fast) {
        const int nv = (rows + 15) / 16; /* a panel only as wide as its rows */
        const int next_bytes = (int)elem_bytes(type) * (K - next_k < KC ? K - next_k : KC);
        const int per_tile = (next_rows + (T - t0 + MR - 1) / MR - 1) / ((T - t0 + MR - 1) / MR);
        int pr = 0;
        pack_avx512(P, nv, type, wg, (size_t)ldw, w_kn, rows, k0, kc);
        for (t = t0; t < T; t += MR) {
            int e;
            for (e = 0; e < per_tile && pr < next_rows; e++, pr++) {
                const char *row = (const char *)w + elem_bytes(type) * ((size_t)(next_g + pr) * ldw + next_k);
                int c;
                for (c = 0; c < next_bytes; c += 64) _mm_prefetch(row + c, _MM_HINT_T0);
            }
            tile_avx512(P, nv, xa, k0, kc, t, T - t < MR ? T - t : MR, n0, rows, o, k0 == 0);
        }
        return;
    }
#endif
    pack_ref(P, type, wg, (size_t)ldw, w_kn, rows, k0, kc);
    for (t = t0; t < T; t += MR) tile_ref(P, xa, k0, kc, t, T - t < MR ? T - t : MR, n0, rows, o, k0 == 0);
    (void)fast, (void)next_g, (void)next_k, (void)next_rows, (void)K;
}

int ck_fgemm_general(float *out, int ldo, const float *x, int64_t xs_t, int64_t xs_k, int type, const void *w,
                     int64_t ldw, int w_kn, const float *bias, const float *add, int ld_add, int T, int K, int64_t r0,
                     int64_t r1, int64_t col0, int fast)
{
    float *mem, *P;
    int64_t g;
    int k0;
    dest o;
    acts xa;
    if (r1 <= r0) return 0;
    if (w_kn && type != CK_Q_F32) return -1;
    const size_t mark = ck_ws_mark();
    /* the workspace (ck_kernels.h), else malloc */
    mem = (float *)ck_ws_alloc(sizeof(float) * (size_t)KC * NR + 64);
    if (!mem) return -1;
    P = (float *)((char *)mem + (64 - (uintptr_t)mem % 64) % 64);
    o.out = out, o.ldo = ldo, o.bias = bias, o.add = add, o.ld_add = ld_add;
    xa.x = x, xa.st = xs_t, xa.sk = xs_k;
    if ((double)T * K * sizeof(float) > (xs_k == 1 ? CK_FGEMM_BLOCKED_BYTES : CK_FGEMM_BLOCKED_BYTES_T)) {
        /* large activations (the tied LM head's dX = dY @ W reads 256 x 50257 floats, its dW = dY^T X
         * 50257 x 256 transposed): blocks of CK_FGEMM_TB tokens x KC columns of them run against every panel
         * while they are cache-resident, instead of all of them streaming from DRAM once per panel (the
         * panels are packed again per token block: W is the small operand here). 2 threads, GFLOP/s before
         * -> after: dX 256 x 768 x 50257 173 -> 198; dW 50257 x 768 x 256 120 -> 170-190 (OpenBLAS 170).
         * Each output still sums its KC blocks in order: the same results. (No prefetch: a [K][N] W's
         * panels are blocks of its rows, and a row-major W's next panel is the next block's.) */
        int tb;
        for (tb = 0; tb < T; tb += CK_FGEMM_TB) {
            const int te = T - tb < CK_FGEMM_TB ? T : tb + CK_FGEMM_TB;
            for (k0 = 0; k0 < K; k0 += KC) {
                const int kc = K - k0 < KC ? K - k0 : KC;
                for (g = r0; g < r1; g += panel_width(r1 - g)) {
                    const int rows = (int)(r1 - g < panel_width(r1 - g) ? r1 - g : panel_width(r1 - g));
                    panel_block(P, type, w, ldw, w_kn, g, rows, k0, kc, &xa, tb, te, (int)(col0 + g), &o, fast, 0,
                                0, 0, K);
                }
            }
        }
        ck_ws_free(mem);
        ck_ws_reset(mark);
        return 0;
    }
    for (g = r0; g < r1; g += panel_width(r1 - g)) {
        const int rows = (int)(r1 - g < panel_width(r1 - g) ? r1 - g : panel_width(r1 - g));
        for (k0 = 0; k0 < K; k0 += KC) {
            const int kc = K - k0 < KC ? K - k0 : KC;
            /* the next panel's weights come from DRAM: ask for them while this one's tiles run, a few rows
             * per tile (packing waited on them: 13% of an f16 prefill) */
            const int next_k = k0 + KC < K ? k0 + KC : 0;
            const int64_t next_g = k0 + KC < K ? g : g + rows;
            const int next_rows = next_g >= r1 || w_kn ? 0 : (int)(r1 - next_g < NR ? r1 - next_g : NR);
            panel_block(P, type, w, ldw, w_kn, g, rows, k0, kc, &xa, 0, T, (int)(col0 + g), &o, fast, next_g,
                        next_k, next_rows, K);
        }
    }
    ck_ws_free(mem);
    ck_ws_reset(mark);
    return 0;
}

/* ---- few tokens (T <= 32): tokens as lanes ------------------------------------------------------------
 * With 32 tokens or fewer the panels above cost as much to pack as their tiles save: the weights would be
 * converted and transposed for 4 uses each. Here the activations are transposed once instead (X^T[k][32],
 * tokens as the 32 lanes of two zmm, zero past T) and every weight is read in place from its row and
 * broadcast: 8 rows x 32 tokens in 16 accumulators, each k one multiply-add per accumulator. f32 weights
 * only (a broadcast 16-bit weight would need a conversion per element). */

/* xt[k][32] = x[t][k] for t < T (0 past it) */
static void small_pack_ref(float *xt, const float *x, int ldx, int T, int K)
{
    int k, t;
    for (k = 0; k < K; k++)
        for (t = 0; t < 32; t++) xt[(size_t)k * 32 + t] = t < T ? x[(size_t)t * ldx + k] : 0.0f;
}

/* rows [n0, n1) of the output for all tokens: the scalar twin, the same FMAs in the same order */
static void small_rows_ref(float *out, int ldo, const float *xt, const float *w, const float *bias, const float *add,
                           int ld_add, int T, int K, int64_t n0, int64_t n1)
{
    int64_t n;
    int t, k;
    for (n = n0; n < n1; n++)
        for (t = 0; t < T; t++) {
            float acc = 0.0f;
            for (k = 0; k < K; k++) acc = fmaf(w[(size_t)n * K + k], xt[(size_t)k * 32 + t], acc);
            if (bias) acc += bias[n];
            if (add) acc += add[(size_t)t * ld_add + n];
            out[(size_t)t * ldo + n] = acc;
        }
}

#ifdef CK_X86
CK_AVX512F static void small_pack_avx512(float *xt, const float *x, int ldx, int T, int K)
{
    int k, h, r;
    for (k = 0; k + 16 <= K; k += 16)
        for (h = 0; h < 2; h++) { /* tokens 16 h .. 16 h + 15 */
            __m512 m[16];
            for (r = 0; r < 16; r++)
                m[r] = 16 * h + r < T ? _mm512_loadu_ps(x + (size_t)(16 * h + r) * ldx + k) : _mm512_setzero_ps();
            ck_transpose16(m);
            for (r = 0; r < 16; r++) _mm512_store_ps(xt + (size_t)(k + r) * 32 + 16 * h, m[r]);
        }
    if (k < K) small_pack_ref(xt + (size_t)k * 32, x + k, ldx, T, K - k);
}

/* 8 rows (n0 .. n0 + rows - 1 real, the others repeat the last and are not stored) x 32 token lanes */
CK_AVX512F static void small_tile_avx512(float *out, int ldo, const float *xt, const float *w, const float *bias,
                                         const float *add, int ld_add, int T, int K, int64_t n0, int rows)
{
    const __mmask8 keep = (__mmask8)((1u << rows) - 1u);
    __m512 a0[8], a1[8];
    float buf[8][32];
    const float *wr[8];
    int r, k, t;
    for (r = 0; r < 8; r++) {
        a0[r] = _mm512_setzero_ps();
        a1[r] = _mm512_setzero_ps();
        wr[r] = w + (size_t)(n0 + (r < rows ? r : rows - 1)) * K;
    }
    for (k = 0; k < K; k++) {
        const __m512 x0 = _mm512_load_ps(xt + (size_t)k * 32), x1 = _mm512_load_ps(xt + (size_t)k * 32 + 16);
        for (r = 0; r < 8; r++) {
            const __m512 b = _mm512_set1_ps(wr[r][k]);
            a0[r] = _mm512_fmadd_ps(b, x0, a0[r]);
            a1[r] = _mm512_fmadd_ps(b, x1, a1[r]);
        }
    }
    for (r = 0; r < 8; r++) {
        _mm512_storeu_ps(buf[r], a0[r]);
        _mm512_storeu_ps(buf[r] + 16, a1[r]);
    }
    for (t = 0; t < T; t++) { /* the 8 rows of token t: one column of buf */
        __m256 v = _mm256_set_ps(buf[7][t], buf[6][t], buf[5][t], buf[4][t], buf[3][t], buf[2][t], buf[1][t], buf[0][t]);
        if (bias) v = _mm256_add_ps(v, _mm256_maskz_loadu_ps(keep, bias + n0));
        if (add) v = _mm256_add_ps(v, _mm256_maskz_loadu_ps(keep, add + (size_t)t * ld_add + n0));
        _mm256_mask_storeu_ps(out + (size_t)t * ldo + n0, keep, v);
    }
}
#endif

void ck_fgemm_small_pack(float *xt, const float *x, int ldx, int T, int K, int fast)
{
#ifdef CK_X86
    if (fast) {
        small_pack_avx512(xt, x, ldx, T, K);
        return;
    }
#endif
    (void)fast;
    small_pack_ref(xt, x, ldx, T, K);
}

int ck_fgemm_small(float *out, int ldo, const float *xt, const float *w, const float *bias, const float *add,
                   int ld_add, int T, int K, int64_t n0, int64_t n1, int fast)
{
#ifdef CK_X86
    int64_t n;
    if (fast) {
        for (n = n0; n < n1; n += 8)
            small_tile_avx512(out, ldo, xt, w, bias, add, ld_add, T, K, n, (int)(n1 - n < 8 ? n1 - n : 8));
        return 0;
    }
#endif
    (void)fast;
    small_rows_ref(out, ldo, xt, w, bias, add, ld_add, T, K, n0, n1);
    return 0;
}
