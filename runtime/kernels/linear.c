/*
 * linear.c — y = x @ W^T (+ bias) (+ add), the workhorse of every layer.
 *
 * W stays in nn.Linear's [N][K] layout and is read with CblasTrans: packing
 * then streams rows of W (stride 1), which is the fast path at large sizes.
 * One token (decode) uses GEMV: sgemm with M = 1 is several times slower.
 * From 8 tokens on, a CPU with AVX-512 runs fgemm.c's FMA panel GEMM instead
 * of OpenBLAS (its threads each take whole 16-row parts; measured 1.0x at
 * 128 x 512 x 512 and 1.3x at 32 x 2048 x 2048, where it prefetches the next
 * panel from DRAM; the torch backend's 3-layer MLP 32 x 2048 1.08x -> 0.72x of
 * eager's time).
 *
 * ck_matmul (graphs: any transposes, batched) runs its unscaled single GEMMs
 * on the same panels from 8 rows on, reading a [K][N] B or a transposed A as
 * stored (a training graph's dY @ W and dW = dY^T X: 1.6x OpenBLAS here).
 *
 * Threads: the output features are split into one contiguous column range
 * per OpenMP thread, and each thread calls single-threaded OpenBLAS on its
 * range (see threads.c for why). Weights are therefore streamed once overall.
 * A GEMM with at least as many rows as columns is split by rows instead.
 *
 * The bias and the residual `add` are folded into the GEMM: the output is
 * pre-filled with add (+ bias) and the GEMM accumulates with beta = 1. When
 * add == out (the planner put the output in the dying residual's memory) no
 * copy happens at all: the MATMUL_ADD trick from the design notes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ck_kernels.h"
#include "ck_quant.h"
#include "blas.h"
#include "ck_simd.h"
#include "fgemm.h"

/* Columns [n0, n0 + nb) of the output, single-threaded; w points at row n0. */
void ck_linear_cols(float *out, int ldo, const float *x, int ldx, const float *w, const float *bias, const float *add,
                    int ld_add, int T, int K, int n0, int nb)
{
    float beta = 0.0f;
    int t, j;
    if (nb <= 0) return;
    if (add || bias) {
        for (t = 0; t < T; t++) {
            float *o = out + (size_t)t * ldo + n0;
            if (add) {
                const float *a = add + (size_t)t * ld_add + n0;
                if (a != o) memcpy(o, a, (size_t)nb * sizeof(float));
                if (bias)
                    for (j = 0; j < nb; j++) o[j] += bias[n0 + j];
            } else if (bias) { /* (always: add or bias; said for GCC's -Wnonnull on ARM64) */
                memcpy(o, bias + n0, (size_t)nb * sizeof(float));
            }
        }
        beta = 1.0f;
    }
    if (T == 1)
        ck_sgemv(0, nb, K, 1.0f, w, K, x, beta, out + n0);
    else
        ck_sgemm(0, 1, T, nb, K, 1.0f, x, ldx, w, K, beta, out + n0, ldo);
}

/* A float GEMM on fgemm.c's panels (out[t][n] = sum_k x[t][k] W(n, k) (+ bias) (+ add), the layouts of
 * ck_fgemm_general), its N output columns split over the team in whole 16-column parts. A range whose panel
 * cannot be allocated (nothing written yet) calls fallback(ctx, n0, n1): OpenBLAS, which needs nothing from us. */
typedef struct {
    float *out;
    int ldo, ld_add, T, K;
    const float *x, *w, *bias, *add;
    int64_t xs_t, xs_k, ldw;
    int w_kn;
} fgemm_job;

/* the threads for `work` multiply-adds: 1 inside a parallel region or below CK_PAR_MIN */
static int team_for(double work)
{
#ifdef _OPENMP
    return omp_in_parallel() || work < CK_PAR_MIN ? 1 : omp_get_max_threads();
#else
    (void)work;
    return 1;
#endif
}

/* the calling team member's part [*n0, *n1) of N columns, in whole multiples of `align` */
static void team_part(int64_t N, int64_t align, int64_t *n0, int64_t *n1)
{
    int nt = 1, id = 0;
    int64_t per;
#ifdef _OPENMP
    nt = omp_get_num_threads(), id = omp_get_thread_num();
#endif
    per = ((N + nt - 1) / nt + align - 1) / align * align;
    *n0 = id * per;
    *n1 = *n0 + per > N ? N : *n0 + per;
}

static void fgemm_team(const fgemm_job *j, int64_t N, void (*fallback)(const void *ctx, int64_t n0, int64_t n1),
                       const void *ctx)
{
    int team = team_for((double)j->T * j->K * N);
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
    {
        int64_t n0, n1;
        team_part(N, 16, &n0, &n1); /* whole zmm */
        if (n1 > n0 && ck_fgemm_general(j->out, j->ldo, j->x, j->xs_t, j->xs_k, CK_Q_F32, j->w, j->ldw, j->w_kn,
                                        j->bias, j->add, j->ld_add, j->T, j->K, n0, n1, 0, 1))
            fallback(ctx, n0, n1);
    }
    (void)team;
}

static void linear_fallback(const void *ctx, int64_t n0, int64_t n1)
{
    const fgemm_job *j = (const fgemm_job *)ctx;
    ck_linear_cols(j->out, j->ldo, j->x, (int)j->xs_t, j->w + (size_t)n0 * j->K, j->bias, j->add, j->ld_add, j->T,
                   j->K, (int)n0, (int)(n1 - n0));
}

static void linear_fgemm(float *out, int ldo, const float *x, int ldx, const float *w, const float *bias,
                         const float *add, int ld_add, int T, int K, int N)
{
    const fgemm_job j = {out, ldo, ld_add, T, K, x, w, bias, add, ldx, 1, K, 0};
    fgemm_team(&j, N, linear_fallback, &j);
}

size_t ck_linear_workspace(int K) { return CK_LINEAR_WORKSPACE_BYTES(K > 0 ? K : 0); }

/* T <= CK_FGEMM_SMALL_T: the activations transposed once, the weights read in place (fgemm.c); 0, or -1
 * when the transposed activations cannot be allocated */
static int linear_small(float *out, int ldo, const float *x, int ldx, const float *w, const float *bias,
                        const float *add, int ld_add, int T, int K, int N)
{
    int team = 1;
    const size_t mark = ck_ws_mark();
    void *mem = ck_ws_alloc(sizeof(float) * (size_t)K * 32 + 64); /* the workspace (ck_kernels.h), else malloc */
    float *xt;
    if (!mem) return -1;
    xt = (float *)((char *)mem + (64 - (uintptr_t)mem % 64) % 64);
    ck_fgemm_small_pack(xt, x, ldx, T, K, 1);
    team = team_for((double)T * K * N);
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
    {
        int64_t n0, n1;
        team_part(N, 8, &n0, &n1); /* whole 8-row tiles */
        if (n1 > n0) ck_fgemm_small(out, ldo, xt, w, bias, add, ld_add, T, K, n0, n1, 1);
    }
    (void)team;
    ck_ws_free(mem);
    ck_ws_reset(mark);
    return 0;
}

/* Rows [n0, n1) of the output for T <= CK_GEMV_MAX_T tokens by dot products (ck_vdots): chunks of rows read
 * once from memory, the next chunk prefetched, each token's dots from the cached chunk */
#define CK_GEMV_CHUNK 16
#define CK_GEMV_MAX_T 3
static void gemv_rows(float *out, int ldo, const float *x, int ldx, const float *w, const float *bias,
                      const float *add, int ld_add, int T, int K, int64_t n0, int64_t n1)
{
    const size_t rb = sizeof(float) * (size_t)K;
    int64_t c, j;
    int t;
    for (c = n0; c < n1; c += CK_GEMV_CHUNK) {
        const int nb = (int)(n1 - c < CK_GEMV_CHUNK ? n1 - c : CK_GEMV_CHUNK);
        const int64_t next = c + CK_GEMV_CHUNK, ahead = next < n1 ? (n1 - next < CK_GEMV_CHUNK ? n1 - next : CK_GEMV_CHUNK) : 0;
        if (ahead) ck_prefetch(w + (size_t)next * K, rb * (size_t)ahead);
        for (t = 0; t < T; t++) {
            float *o = out + (size_t)t * ldo + c;
            const float *a = add ? add + (size_t)t * ld_add + c : NULL;
            float s[CK_GEMV_CHUNK];
            ck_vdots(s, x + (size_t)t * ldx, w + (size_t)c * K, (size_t)K, nb, K);
            for (j = 0; j < nb; j++) o[j] = s[j] + (bias ? bias[c + j] : 0.0f) + (a ? a[j] : 0.0f); /* a may be o */
        }
    }
}

/* few tokens: the dot products above, rows split over the team (16-row parts) */
static void linear_gemv(float *out, int ldo, const float *x, int ldx, const float *w, const float *bias,
                        const float *add, int ld_add, int T, int K, int N)
{
    const int team = team_for((double)T * K * N);
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
    {
        int64_t n0, n1;
        team_part(N, 16, &n0, &n1);
        if (n1 > n0) gemv_rows(out, ldo, x, ldx, w, bias, add, ld_add, T, K, n0, n1);
    }
    (void)team;
}

void ck_linear(float *out, int ldo, const float *x, int ldx, const float *w,
               const float *bias, const float *add, int ld_add, int T, int K, int N)
{
    /* 1-3 tokens: ckc's own dot products (with AVX2 or better) rather than OpenBLAS's sgemv, whose core Debian's
     * 0.3.21 picks by CPU model: on a Xeon it does not know (a 2-core VM, Nov 2026) it runs its SSE3 "Prescott"
     * kernels (bench_graph.py --targets, the 3-layer MLP at batch 1: 104 -> 47 us at width 512, 1.51 -> 1.25 ms
     * at 2048) */
    if (T <= CK_GEMV_MAX_T && ck_cpu_avx2()) {
        linear_gemv(out, ldo, x, ldx, w, bias, add, ld_add, T, K, N);
        return;
    }
    /* With AVX-512 (2 threads, GFLOP/s vs OpenBLAS): 24-32 tokens, the activations transposed and W read in
     * place (32 x 512 x 512: 199 vs 155; 32 x 2048 x 2048: 223 vs 105); more tokens, or fewer with a W past
     * L2 (whose next panel the panel GEMM prefetches: 16 x 2048 x 2048: 115 vs 71), the panel GEMM; fewer
     * tokens with a cached W stay with OpenBLAS (8 x 512 x 512: 65 vs 81 as panels) */
    if (T >= CK_FGEMM_SMALL_T * 3 / 4 && T <= CK_FGEMM_SMALL_T && ck_fgemm_fast() &&
        !linear_small(out, ldo, x, ldx, w, bias, add, ld_add, T, K, N))
        return;
    if (T >= CK_FGEMM_MIN_T && (T > CK_FGEMM_SMALL_T || (double)K * N >= (1 << 19)) && ck_fgemm_fast()) {
        linear_fgemm(out, ldo, x, ldx, w, bias, add, ld_add, T, K, N);
        return;
    }
    /* OpenBLAS, single-threaded in each piece (blas.h: pieces fixed by the shape, so any thread count gives the
     * same sums). With at least as many rows as columns, pieces of rows, each a whole-width GEMM: split by
     * columns, each thread gets a thin one, which OpenBLAS runs slowly (2 threads, T x K x N: 256x128x128 87 ->
     * 48 us, 256x512x128 225 -> 178 us; shapes with T < N measured the same or better by columns, which also
     * stream a large W only once). Column pieces are at most 1024 wide, which keeps OpenBLAS's packed B panel
     * cache-resident (measured 138 -> 152 GFLOP/s at T=128, N=4096; GEMV does not care); below ~64k
     * multiply-adds the team is one thread (a parallel region costs more than it saves). */
    {
        const int by_rows = T >= N && T >= 64;
        const long long len = by_rows ? T : N;
        const long long piece = by_rows ? ck_blas_piece(len, 8, 32, len) : ck_blas_piece(len, 16, 128, 1024);
        const long long count = (len + piece - 1) / piece;
        int team = 1;
#ifdef _OPENMP
        team = omp_in_parallel() || (double)T * K * N < CK_PAR_MIN ? 1 : omp_get_max_threads();
        if (team > count) team = (int)count;
#pragma omp parallel num_threads(team) if (team > 1)
#endif
        {
            int nt = 1, id = 0;
            long long p0, p1, p;
#ifdef _OPENMP
            nt = omp_get_num_threads(), id = omp_get_thread_num();
#endif
            ck_blas_run(count, nt, id, &p0, &p1);
            for (p = p0; p < p1; p++) {
                const int c = (int)(p * piece), nb = (int)(len - c < piece ? len - c : piece);
                if (by_rows)
                    ck_linear_cols(out + (size_t)c * ldo, ldo, x + (size_t)c * ldx, ldx, w, bias,
                                   add ? add + (size_t)c * ld_add : NULL, ld_add, nb, K, 0, N);
                else
                    ck_linear_cols(out, ldo, x, ldx, w + (size_t)c * K, bias, add, ld_add, T, K, c, nb);
            }
        }
        (void)team;
    }
}

void ck_linear_ref(float *out, int ldo, const float *x, int ldx, const float *w,
                   const float *bias, const float *add, int ld_add, int T, int K, int N)
{
    int t, n, k;
    for (t = 0; t < T; t++)
        for (n = 0; n < N; n++) {
            double acc = 0.0;
            for (k = 0; k < K; k++) acc += (double)x[(size_t)t * ldx + k] * w[(size_t)n * K + k];
            if (bias) acc += bias[n];
            if (add) acc += add[(size_t)t * ld_add + n];
            out[(size_t)t * ldo + n] = (float)acc;
        }
}

/* ---- batched GEMM for exported graphs -------------------------------------
 * A shared B (weights, or any 2-D right operand) folds the batch into M and
 * is one GEMM split over output columns like ck_linear. A batched B (the
 * q @ k^T of an unfused attention) is split over (batch, column range)
 * tasks, as many as the team has threads. add / bias are pre-filled into the
 * output and the GEMM accumulates with beta = 1 (MATMUL_ADD). */

/* rows [0, M) x columns [n0, n0 + nb) of one batch */
static void matmul_block(float *out, const float *a, const float *b, const float *add, const float *bias,
                         int64_t M, int64_t N, int64_t K, int trans_a, int trans_b, float alpha, int64_t n0, int64_t nb)
{
    float beta = 0.0f;
    int64_t m, j;
    const float *bb = trans_b ? b + n0 * K : b + n0;
    int ldb = trans_b ? (int)K : (int)N;
    if (nb <= 0) return;
    if (add || bias) {
        for (m = 0; m < M; m++) {
            float *o = out + m * N + n0;
            if (add && add + m * N + n0 != o) memcpy(o, add + m * N + n0, (size_t)nb * sizeof(float));
            if (!add) memset(o, 0, (size_t)nb * sizeof(float));
            if (bias)
                for (j = 0; j < nb; j++) o[j] += bias[n0 + j];
        }
        beta = 1.0f;
    }
    if (M == 1 && !trans_a)
        ck_sgemv(!trans_b, trans_b ? (int)nb : (int)K, trans_b ? (int)K : (int)nb, alpha, bb, ldb, a, beta, out + n0);
    else
        ck_sgemm(trans_a, trans_b, (int)M, (int)nb, (int)K, alpha, a, trans_a ? (int)M : (int)K, bb, ldb, beta,
                 out + n0, (int)N);
}

typedef struct {
    float *out;
    const float *a, *b, *add, *bias;
    int64_t M, N, K;
    int trans_a, trans_b;
} matmul_job;

static void matmul_fallback(const void *ctx, int64_t n0, int64_t n1)
{
    const matmul_job *j = (const matmul_job *)ctx;
    matmul_block(j->out, j->a, j->b, j->add, j->bias, j->M, j->N, j->K, j->trans_a, j->trans_b, 1.0f, n0, n1 - n0);
}

/* split each of `batch` GEMMs' N columns so that batch * splits covers the team; parts are multiples of 16
 * floats (64-byte lines). Returns the number of tasks, each (t / splits)'s part t % splits */
/* the parts depend on the shape alone (as blas.h's pieces): the same sums at any thread count */
static int64_t batch_split(int64_t batch, int64_t N, int64_t *splits, int64_t *per)
{
    *splits = batch >= CK_BLAS_PIECES ? 1 : (CK_BLAS_PIECES + batch - 1) / batch;
    *per = ((N + *splits - 1) / *splits + 15) / 16 * 16;
    if (*per < 64) *per = N < 64 ? N : 64;
    *splits = (N + *per - 1) / *per;
    if (*splits < 1) *splits = 1;
    return batch * *splits;
}

static void matmul_batched_fgemm(float *out, const float *a, const float *b, const float *add, const float *bias,
                                 int64_t batch, int64_t M, int64_t N, int64_t K, int b_batched, int trans_a,
                                 int trans_b, float alpha)
{
    int64_t splits, per, tasks = batch_split(batch, N, &splits, &per), t;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(team_for((double)batch * M * N * K))
#endif
    for (t = 0; t < tasks; t++) {
        int64_t i = t / splits, n0 = (t % splits) * per, n1 = n0 + per > N ? N : n0 + per, r, c;
        float *o = out + i * M * N;
        const float *ai = a + i * M * K, *bi = b + (b_batched ? i * K * N : 0), *addi = add ? add + i * M * N : NULL;
        if (n1 <= n0) continue;
        if (ck_fgemm_general(o, (int)N, ai, trans_a ? 1 : K, trans_a ? M : 1, CK_Q_F32, bi, trans_b ? K : N, !trans_b,
                             bias, addi, (int)N, (int)M, (int)K, n0, n1, 0, 1)) {
            matmul_block(o, ai, bi, addi, bias, M, N, K, trans_a, trans_b, alpha, n0, n1 - n0);
            continue;
        }
        if (alpha != 1.0f)
            for (r = 0; r < M; r++)
                for (c = n0; c < n1; c++) o[r * N + c] *= alpha;
    }
}

void ck_matmul(float *out, const float *a, const float *b, const float *add, const float *bias, int64_t batch,
               int64_t M, int64_t N, int64_t K, int b_batched, int trans_a, int trans_b, float alpha)
{
    if (!b_batched && !trans_a) { /* one GEMM: [batch * M, K] @ B */
        M *= batch;
        batch = 1;
    }
    /* One unscaled GEMM with AVX-512, as ck_linear chooses (from 8 rows; up to 32 only with a B past L2):
     * fgemm.c's panels, for any transposes. 2 threads, GFLOP/s vs OpenBLAS: a training graph's dY @ W
     * (256 x 768 x 3072) 204 vs 129, dW = dY^T X (768 x 768 x 256) 218 vs 131, x @ W^T 203 vs 97; the tied
     * LM head's dW (a transposed A of 50257 x 256, run in cache-sized blocks) 170-190 vs 170 */
    if (batch == 1 && alpha == 1.0f && M >= CK_FGEMM_MIN_T && (M > CK_FGEMM_SMALL_T || (double)K * N >= (1 << 19)) &&
        M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && ck_fgemm_fast()) {
        const fgemm_job j = {out, (int)N, (int)N, (int)M, (int)K, a, b, bias, add,
                             trans_a ? 1 : K, trans_a ? M : 1, trans_b ? K : N, !trans_b};
        const matmul_job mj = {out, a, b, add, bias, M, N, K, trans_a, trans_b};
        fgemm_team(&j, N, matmul_fallback, &mj);
        return;
    }
    /* Batched GEMMs (attention's Q K^T and P V per head) on the same panels, a GEMM (or a part of its
     * columns) per thread, alpha applied to the finished rows (so not with an addend or a bias, which it
     * must not scale) */
    if (batch > 1 && M >= CK_FGEMM_MIN_T && (M > CK_FGEMM_SMALL_T || (double)K * N >= (1 << 19)) &&
        (alpha == 1.0f || (!add && !bias)) && M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX &&
        ck_fgemm_fast()) {
        matmul_batched_fgemm(out, a, b, add, bias, batch, M, N, K, b_batched, trans_a, trans_b, alpha);
        return;
    }
    {
        int64_t splits, per, tasks = batch_split(batch, N, &splits, &per), t;
#ifdef _OPENMP
        const int team = team_for((double)batch * M * N * K);
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
#endif
        for (t = 0; t < tasks; t++) {
            int64_t i = t / splits, n0 = (t % splits) * per, n1 = n0 + per > N ? N : n0 + per;
            matmul_block(out + i * M * N, a + i * M * K, b + (b_batched ? i * K * N : 0),
                         add ? add + i * M * N : NULL, bias, M, N, K, trans_a, trans_b, alpha, n0, n1 - n0);
        }
    }
}

void ck_matmul_ref(float *out, const float *a, const float *b, const float *add, const float *bias, int64_t batch,
                   int64_t M, int64_t N, int64_t K, int b_batched, int trans_a, int trans_b, float alpha)
{
    int64_t i, m, n, k;
    for (i = 0; i < batch; i++) {
        const float *A = a + i * M * K, *B = b + (b_batched ? i * K * N : 0);
        for (m = 0; m < M; m++)
            for (n = 0; n < N; n++) {
                double acc = 0.0;
                size_t o = (size_t)((i * M + m) * N + n);
                for (k = 0; k < K; k++)
                    acc += (double)(trans_a ? A[k * M + m] : A[m * K + k]) * (trans_b ? B[n * K + k] : B[k * N + n]);
                acc *= alpha;
                if (add) acc += add[o];
                if (bias) acc += bias[n];
                out[o] = (float)acc;
            }
    }
}
