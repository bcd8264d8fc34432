/*
 * elementwise.c — activations and elementwise ops (memory-bound loops).
 * Gated units (SwiGLU, GeGLU) read gate and up through row strides so they
 * consume the two halves of a fused gate|up GEMM output in place. exp and
 * tanh go through the vectorized exp of ck_simd.h (tanh u = 1 - 2/(e^2u + 1)).
 */
#include <math.h>

#include "ck_kernels.h"
#include "ck_simd.h"

#define CK_CHUNK_MAX 256 /* activate() works on at most this many values at once */

/* act(v) for n <= CK_CHUNK_MAX values, vectorized: e is scratch of n floats */
static void activate(float *y, const float *v, float *e, int n, ck_act act)
{
    int k;
    if (act == CK_ACT_SILU) { /* v / (1 + exp(-v)) */
        for (k = 0; k < n; k++) e[k] = -v[k];
        ck_vexp(e, e, n);
        for (k = 0; k < n; k++) y[k] = v[k] / (1.0f + e[k]);
    } else if (act == CK_ACT_GELU_TANH) { /* 0.5 v (1 + tanh(u)), tanh(u) = 1 - 2 / (exp(2u) + 1) */
        for (k = 0; k < n; k++) e[k] = 2.0f * (float)CK_GELU_TANH_C * (v[k] + (float)CK_GELU_TANH_A * v[k] * v[k] * v[k]);
        ck_vexp(e, e, n);
        for (k = 0; k < n; k++) y[k] = 0.5f * v[k] * (2.0f - 2.0f / (e[k] + 1.0f));
    } else { /* exact GELU: 0.5 v (1 + erf(v / sqrt 2)), erf by Abramowitz & Stegun 7.1.26
              * (|error| <= 1.5e-7): erf(a) = 1 - t (p1 + t (p2 + ...)) exp(-a^2), t = 1 / (1 + p a) */
        float t[CK_CHUNK_MAX];
        for (k = 0; k < n; k++) {
            float a = fabsf(v[k]) * 0.7071067811865476f;
            t[k] = 1.0f / (1.0f + 0.3275911f * a);
            e[k] = -a * a;
        }
        ck_vexp(e, e, n);
        for (k = 0; k < n; k++) {
            float p = t[k] * (0.254829592f + t[k] * (-0.284496736f + t[k] * (1.421413741f +
                      t[k] * (-1.453152027f + t[k] * 1.061405429f))));
            float erf_a = 1.0f - p * e[k];
            y[k] = 0.5f * v[k] * (1.0f + (v[k] < 0.0f ? -erf_a : erf_a));
        }
    }
}

static double activate_ref(double v, ck_act act)
{
    if (act == CK_ACT_SILU) return v / (1.0 + exp(-v));
    if (act == CK_ACT_GELU_TANH) return 0.5 * v * (1.0 + tanh(CK_GELU_TANH_C * (v + CK_GELU_TANH_A * v * v * v)));
    return 0.5 * v * (1.0 + erf(v * 0.7071067811865476));
}

#define CK_CHUNK CK_CHUNK_MAX

void ck_glu(float *out, int ldo, const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act)
{
    int t;
#pragma omp parallel for schedule(static) if ((long)T * F >= CK_PAR_MIN_ACT)
    for (t = 0; t < T; t++) {
        const float *g = gate + (size_t)t * ldg, *u = up + (size_t)t * ldu;
        float *o = out + (size_t)t * ldo;
        float a[CK_CHUNK], e[CK_CHUNK];
        int f0, f, n;
        for (f0 = 0; f0 < F; f0 += n) {
            n = F - f0 < CK_CHUNK ? F - f0 : CK_CHUNK;
            activate(a, g + f0, e, n, act);
            for (f = 0; f < n; f++) o[f0 + f] = a[f] * u[f0 + f];
        }
    }
}

void ck_glu_ref(float *out, int ldo, const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act)
{
    int t, f;
    for (t = 0; t < T; t++)
        for (f = 0; f < F; f++)
            out[(size_t)t * ldo + f] =
                (float)(activate_ref(gate[(size_t)t * ldg + f], act) * up[(size_t)t * ldu + f]);
}

static void unary_chunk(float *y, const float *x, float *e, int m, ck_unop op, float param);

/* out = f(x) over n values in CK_CHUNK pieces, split over the team when large:
 * f is the activation `act` when op < 0, else the unary op. */
static void map_chunks(float *out, const float *x, size_t n, int op, float param, ck_act act)
{
    long c;
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
    for (c = 0; c < (long)((n + CK_CHUNK - 1) / CK_CHUNK); c++) {
        float e[CK_CHUNK];
        size_t i0 = (size_t)c * CK_CHUNK;
        int m = n - i0 < CK_CHUNK ? (int)(n - i0) : CK_CHUNK;
        if (op < 0)
            activate(out + i0, x + i0, e, m, act);
        else
            unary_chunk(out + i0, x + i0, e, m, (ck_unop)op, param);
    }
}

void ck_gelu(float *out, const float *x, size_t n, ck_act act) { map_chunks(out, x, n, -1, 0.0f, act); }

void ck_gelu_ref(float *out, const float *x, size_t n, ck_act act)
{
    size_t i;
    for (i = 0; i < n; i++) out[i] = (float)activate_ref(x[i], act);
}

void ck_scale(float *out, const float *x, size_t n, float s)
{
    size_t i;
    for (i = 0; i < n; i++) out[i] = x[i] * s;
}

void ck_softcap(float *out, const float *x, size_t n, float cap)
{
    /* cap * tanh(x / cap), tanh(u) = 1 - 2 / (exp(2u) + 1), vectorized exp */
    size_t i0, k;
    float e[CK_CHUNK];
    for (i0 = 0; i0 < n; i0 += CK_CHUNK) {
        int m = n - i0 < CK_CHUNK ? (int)(n - i0) : CK_CHUNK;
        for (k = 0; k < (size_t)m; k++) e[k] = 2.0f * x[i0 + k] / cap;
        ck_vexp(e, e, m);
        for (k = 0; k < (size_t)m; k++) out[i0 + k] = cap * (1.0f - 2.0f / (e[k] + 1.0f));
    }
}

void ck_softcap_ref(float *out, const float *x, size_t n, float cap)
{
    size_t i;
    for (i = 0; i < n; i++) out[i] = (float)(cap * tanh((double)x[i] / cap));
}

void ck_clamp(float *out, const float *x, size_t n, float lo, float hi, int bounds)
{
    /* each bound a compare and a select (vectorizable): x < lo is false at NaN, so NaN passes through */
    const float l = bounds & 1 ? lo : -INFINITY, h = bounds & 2 ? hi : INFINITY;
    long i;
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
    for (i = 0; i < (long)n; i++) {
        const float v = x[i] < l ? l : x[i];
        out[i] = v > h ? h : v;
    }
}

void ck_clamp_ref(float *out, const float *x, size_t n, float lo, float hi, int bounds)
{
    size_t i;
    for (i = 0; i < n; i++) {
        float v = x[i];
        if ((bounds & 1) && v < lo) v = lo;
        if ((bounds & 2) && v > hi) v = hi;
        out[i] = v;
    }
}

void ck_add(float *out, const float *a, const float *b, size_t n)
{
    long i;
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
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
#pragma omp parallel for schedule(static) if ((long)T * N >= CK_PAR_MIN)
    for (t = 0; t < T; t++) {
        const float *ar = a + (size_t)t * N;
        float *o = out + (size_t)t * N;
        int n;
        for (n = 0; n < N; n++) o[n] = ar[n] + bias[n];
    }
}

/* ---- graph unary ops ------------------------------------------------------ */

/* The vectorized paths: y = op(x) over m values, e a scratch of m floats. */
typedef void (*unary_fast_fn)(float *y, const float *x, float *e, int m, float param);

static void relu_fast(float *y, const float *x, float *e, int m, float param)
{
    int k;
    (void)e, (void)param;
    for (k = 0; k < m; k++) y[k] = x[k] > 0.0f ? x[k] : 0.0f;
}

static void silu_fast(float *y, const float *x, float *e, int m, float param)
{
    (void)param;
    activate(y, x, e, m, CK_ACT_SILU);
}

static void tanh_fast(float *y, const float *x, float *e, int m, float param) /* 1 - 2 / (exp(2x) + 1) */
{
    int k;
    (void)param;
    for (k = 0; k < m; k++) e[k] = 2.0f * x[k];
    ck_vexp(e, e, m);
    for (k = 0; k < m; k++) y[k] = 1.0f - 2.0f / (e[k] + 1.0f);
}

static void exp_fast(float *y, const float *x, float *e, int m, float param)
{
    (void)e, (void)param;
    ck_vexp(y, x, m);
}

static void rsqrt_fast(float *y, const float *x, float *e, int m, float param)
{
    int k;
    (void)e, (void)param;
    ck_vsqrt(y, x, m);
    for (k = 0; k < m; k++) y[k] = 1.0f / y[k];
}

static void neg_fast(float *y, const float *x, float *e, int m, float param)
{
    int k;
    (void)e, (void)param;
    for (k = 0; k < m; k++) y[k] = -x[k];
}

static void pow_fast(float *y, const float *x, float *e, int m, float param) /* common exponents exactly */
{
    int k;
    (void)e;
    if (param == 2.0f)
        for (k = 0; k < m; k++) y[k] = x[k] * x[k];
    else if (param == 3.0f)
        for (k = 0; k < m; k++) y[k] = x[k] * x[k] * x[k];
    else if (param == 0.5f)
        ck_vsqrt(y, x, m);
    else
        for (k = 0; k < m; k++) y[k] = powf(x[k], param);
}

/* by ck_unop; an op of CK_UNARY_OPS without an entry runs its formula (unary_formula) */
static const unary_fast_fn kUnaryFast[CK_UN_COUNT] = {
    [CK_UN_RELU] = relu_fast, [CK_UN_SILU] = silu_fast, [CK_UN_TANH] = tanh_fast, [CK_UN_EXP] = exp_fast,
    [CK_UN_RSQRT] = rsqrt_fast, [CK_UN_NEG] = neg_fast, [CK_UN_POW] = pow_fast,
};

/* Every op of CK_UNARY_OPS through its formula (double), element by element. */
static void unary_formula(float *y, const float *xs, size_t m, ck_unop op, double p)
{
    size_t k;
    switch (op) {
#define CK_UN_FORMULA_CASE(name, formula)                 \
    case CK_UN_##name:                                    \
        for (k = 0; k < m; k++) {                         \
            double x = xs[k];                             \
            y[k] = (float)formula;                        \
        }                                                 \
        break;
        CK_UNARY_OPS(CK_UN_FORMULA_CASE)
#undef CK_UN_FORMULA_CASE
    case CK_UN_COUNT:
        break;
    }
    (void)p;
}

static void unary_chunk(float *y, const float *x, float *e, int m, ck_unop op, float param)
{
    if (kUnaryFast[op])
        kUnaryFast[op](y, x, e, m, param);
    else
        unary_formula(y, x, (size_t)m, op, param);
}

void ck_unary(float *out, const float *x, size_t n, ck_unop op, float param)
{
    map_chunks(out, x, n, (int)op, param, CK_ACT_SILU);
}

/* The definition: each op's CK_UNARY_OPS formula in double precision. */
void ck_unary_ref(float *out, const float *x, size_t n, ck_unop op, float param)
{
    unary_formula(out, x, n, op, (double)param);
}

void ck_bias_relu(float *out, const float *x, const float *bias, size_t rows, int n)
{
    long r;
#pragma omp parallel for schedule(static) if (rows * (size_t)n >= CK_PAR_MIN)
    for (r = 0; r < (long)rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *o = out + (size_t)r * n;
        int j;
        for (j = 0; j < n; j++) {
            float v = xr[j] + bias[j];
            o[j] = v > 0.0f ? v : 0.0f;
        }
    }
}

/* ---- fused elementwise programs (the fuse_elementwise pass) --------------- */

#define CK_EW_INLINE static inline __attribute__((always_inline))

/* y = a op b over m values (the op's CK_BINARY_OPS formula); a or b NULL: the immediate s in its place */
CK_EW_INLINE void ew_binary(float *y, const float *av, const float *bv, float s, int m, ck_binop op)
{
    int k;
    switch (op) {
#define CK_EW_BINARY_CASE(name, formula, ints)                                  \
    case CK_BIN_##name:                                                   \
        if (!bv)                                                          \
            for (k = 0; k < m; k++) {                                     \
                const float a = av[k], b = s;                             \
                y[k] = formula;                                           \
            }                                                             \
        else if (!av)                                                     \
            for (k = 0; k < m; k++) {                                     \
                const float a = s, b = bv[k];                             \
                y[k] = formula;                                           \
            }                                                             \
        else                                                              \
            for (k = 0; k < m; k++) {                                     \
                const float a = av[k], b = bv[k];                         \
                y[k] = formula;                                           \
            }                                                             \
        break;
        CK_BINARY_OPS(CK_EW_BINARY_CASE)
#undef CK_EW_BINARY_CASE
    case CK_BIN_COUNT: break;
    }
}

/* input k's values for output elements i0 .. i0+m-1 */
CK_EW_INLINE void ew_gather(float *g, const float *src, int64_t div, int64_t mod, size_t i0, int m)
{
    int64_t j = (int64_t)(i0 / (size_t)div) % mod, q = (int64_t)(i0 % (size_t)div);
    int t;
    if (mod == 1) {
        for (t = 0; t < m; t++) g[t] = src[0];
        return;
    }
    for (t = 0; t < m; t++) {
        g[t] = src[j];
        if (++q == div) {
            q = 0;
            if (++j == mod) j = 0;
        }
    }
}

/* One chunk of a program: the instructions over CK_CHUNK values, intermediates in per-chunk buffers. Built
 * twice (plain and AVX2: the generated model is compiled without -march), the loops inlined into each. */
CK_EW_INLINE void ew_chunk(float *out, size_t n, int nin, const float *const *in, const int64_t *div,
                           const int64_t *mod, int ninsn, const ck_ew_insn *prog, const int *phys, size_t i0)
{
    float regs[CK_EW_MAX_INSNS][CK_CHUNK], gat[CK_EW_MAX_INPUTS][CK_CHUNK], e[CK_CHUNK];
    const float *slot[CK_EW_MAX_INPUTS + CK_EW_MAX_INSNS];
    int m = n - i0 < CK_CHUNK ? (int)(n - i0) : CK_CHUNK, jj, kk;
    for (kk = 0; kk < nin; kk++) {
        if (div[kk] == 1 && (size_t)mod[kk] == n) {
            slot[kk] = in[kk] + i0;
        } else {
            ew_gather(gat[kk], in[kk], div[kk], mod[kk], i0, m);
            slot[kk] = gat[kk];
        }
    }
    for (jj = 0; jj < ninsn; jj++) {
        const ck_ew_insn *p = &prog[jj];
        float *y = jj + 1 == ninsn ? out + i0 : regs[phys[jj]];
        const float *a = p->a >= 0 ? slot[p->a] : NULL;
        if (p->op >= CK_EW_UNARY)
            unary_chunk(y, a, e, m, (ck_unop)(p->op - CK_EW_UNARY), p->imm);
        else
            ew_binary(y, a, p->b >= 0 ? slot[p->b] : NULL, p->imm, m, (ck_binop)p->op);
        slot[nin + jj] = y;
    }
}

#define CK_EW_CHUNK_ARGS                                                                                        \
    float *out, size_t n, int nin, const float *const *in, const int64_t *div, const int64_t *mod, int ninsn, \
        const ck_ew_insn *prog, const int *phys, size_t i0
static void ew_chunk_plain(CK_EW_CHUNK_ARGS) { ew_chunk(out, n, nin, in, div, mod, ninsn, prog, phys, i0); }
#ifdef CK_X86
CK_AVX2 static void ew_chunk_avx2(CK_EW_CHUNK_ARGS) { ew_chunk(out, n, nin, in, div, mod, ninsn, prog, phys, i0); }
#endif

void ck_ew(float *out, size_t n, int nin, const float *const *in, const int64_t *div, const int64_t *mod, int ninsn,
           const ck_ew_insn *prog)
{
    /* one buffer per live intermediate: an instruction's result takes the buffer of an operand it reads last */
    int phys[CK_EW_MAX_INSNS], last[CK_EW_MAX_INPUTS + CK_EW_MAX_INSNS], free_list[CK_EW_MAX_INSNS];
    int nfree = 0, nphys = 0, j, k;
#ifdef CK_X86
    int avx2 = ck_has_avx2();
#endif
    long c, nchunks = (long)((n + CK_CHUNK - 1) / CK_CHUNK);
    for (k = 0; k < nin + ninsn; k++) last[k] = -1;
    for (j = 0; j < ninsn; j++) {
        if (prog[j].a >= 0) last[prog[j].a] = j;
        if (prog[j].op < CK_EW_UNARY && prog[j].b >= 0) last[prog[j].b] = j;
    }
    for (j = 0; j + 1 < ninsn; j++) {
        int ops[2] = {prog[j].a, prog[j].op < CK_EW_UNARY ? prog[j].b : -1}, o;
        for (o = 0; o < 2; o++)
            if (ops[o] >= nin && last[ops[o]] == j && (o == 0 || ops[1] != ops[0])) free_list[nfree++] = phys[ops[o] - nin];
        phys[j] = nfree ? free_list[--nfree] : nphys++;
    }
#pragma omp parallel for schedule(static) if (n * (size_t)ninsn >= CK_PAR_MIN)
    for (c = 0; c < nchunks; c++) {
#ifdef CK_X86
        if (avx2) {
            ew_chunk_avx2(out, n, nin, in, div, mod, ninsn, prog, phys, (size_t)c * CK_CHUNK);
            continue;
        }
#endif
        ew_chunk_plain(out, n, nin, in, div, mod, ninsn, prog, phys, (size_t)c * CK_CHUNK);
    }
}

void ck_ew_ref(float *out, size_t n, int nin, const float *const *in, const int64_t *div, const int64_t *mod,
               int ninsn, const ck_ew_insn *prog)
{
    size_t i;
    float v[CK_EW_MAX_INPUTS + CK_EW_MAX_INSNS];
    for (i = 0; i < n; i++) {
        int j, k;
        for (k = 0; k < nin; k++) v[k] = in[k][(i / (size_t)div[k]) % (size_t)mod[k]];
        for (j = 0; j < ninsn; j++) {
            const ck_ew_insn *p = &prog[j];
            float a = p->a >= 0 ? v[p->a] : p->imm, r = 0.0f;
            if (p->op >= CK_EW_UNARY) {
                ck_unary_ref(&r, &a, 1, (ck_unop)(p->op - CK_EW_UNARY), p->imm);
            } else {
                float b = p->b >= 0 ? v[p->b] : p->imm;
                r = ck_binop_apply((ck_binop)p->op, a, b);
            }
            v[nin + j] = r;
        }
        out[i] = v[nin + ninsn - 1];
    }
}
