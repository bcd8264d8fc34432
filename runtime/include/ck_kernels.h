/*
 * ck_kernels.h — the compute kernels shipped with ckc (plain C99).
 *
 * Conventions, shared by every kernel:
 *   - the output comes first, then inputs, then sizes;
 *   - tensors are row-major float32; a 2-D operand is [rows][cols] with a
 *     leading dimension `ld*` (elements between consecutive rows), so a kernel
 *     can read or write a column slice of a wider tensor without a copy (the
 *     fused QKV / gate-up GEMM outputs are consumed this way);
 *   - no kernel allocates or fails; sizes are checked by the caller.
 * Dimension letters: T tokens, C model width, K/N GEMM in/out features,
 * H query heads, KVH key/value heads, D head dim, F FFN width.
 *
 * Every optimized kernel has a plain reference twin named `*_ref`, written for
 * obviousness, used by tests/kernels to check the fast one.
 */
#ifndef CK_KERNELS_H
#define CK_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- when a kernel threads --------------------------------------------------
 * Below these many elements of work a kernel runs on the calling thread:
 * waking the OpenMP team costs more than the split saves on small inputs.
 * Cheap elementwise work (adds, copies, norms, RoPE) waits for CK_PAR_MIN;
 * work with a transcendental per element (exp: activations, softmax,
 * attention) splits earlier. */
/* libgomp's wait between parallel regions, as GOMP_SPINCOUNT: spin this many
 * times, then sleep (the default, 300000, collapses throughput when other
 * programs keep the cores busy). The model executable and the Python wrapper
 * set it unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is already set. */
#define CK_GOMP_SPINCOUNT "10000"
#define CK_PAR_MIN 65536
#define CK_PAR_MIN_EXP 16384
#define CK_PAR_MIN_ACT 32768

/* ---- threads (threads.c) ------------------------------------------------ */
/* One OpenMP pool runs everything. While a model call is in progress OpenBLAS
 * is set to one thread (each OpenMP thread calls it on its own slice), so the
 * two pools never compete for cores; the caller's OpenBLAS setting is restored
 * afterwards. */
typedef struct ck_threads_saved {
    int blas_threads; /* OpenBLAS thread count before ck_threads_enter */
    int omp_threads;  /* OpenMP nthreads-var before ck_threads_enter */
} ck_threads_saved;

int  ck_threads_available(void);                /* cores OpenMP can use */
/* The calling thread's OpenMP team size for the kernels it runs (a gcu stream's worker thread). */
void ck_threads_use(int n_threads);
void ck_threads_enter(ck_threads_saved *saved, int n_threads);
void ck_threads_leave(const ck_threads_saved *saved);

/* ---- workspace (workspace.c) --------------------------------------------- */
/* Temporaries of the kernels without malloc: a model hands one buffer, allocated at init, to the kernels of a
 * call (ck_ws_use on the calling thread; NULL after). ck_ws_alloc takes 64-byte aligned pieces from it and
 * falls back to malloc (64-byte aligned too) when there is none or it is full (a missing workspace is never a failure); ck_ws_mark /
 * ck_ws_reset give the pieces taken since the mark back at once; ck_ws_free frees a piece that came from
 * malloc (workspace pieces: nothing). Decode's temporaries fit the workspace a model sizes with
 * ck_linear_q_workspace, so 32 decode steps call no allocator (tests/c/alloc_check.c). */
void ck_ws_use(void *buf, size_t bytes);
void *ck_ws_alloc(size_t bytes);
void ck_ws_free(void *p);
size_t ck_ws_mark(void);
void ck_ws_reset(size_t mark);
/* Bytes of workspace ck_linear's calling-thread temporaries of inputs K wide fit in: its few-token path's
 * transposed activations (32 rows of K floats) and a float GEMM panel (512 x 48 floats); the other threads of
 * a GEMM take theirs from malloc. The macro is the same as a constant expression. (ck_linear_q's: ck_quant.h) */
size_t ck_linear_workspace(int K);
#if defined(__x86_64__) || defined(_M_X64)
#define CK_FGEMM_PANEL_BYTES 98560 /* fgemm.c's AVX-512 panel: 512 x 48 floats + alignment */
#else
#define CK_FGEMM_PANEL_BYTES 0 /* (no fgemm body on this CPU) */
#endif
#define CK_LINEAR_WORKSPACE_BYTES(K) (sizeof(float) * (size_t)(K) * 32 + CK_FGEMM_PANEL_BYTES + 256)

/* ---- CPU features (cpu.c) -------------------------------------------------- */
/* 1 where the runtime is compiled with NEON bodies (ARM64), which run when ck_cpu_neon() */
#if defined(__aarch64__) && defined(__ARM_NEON)
#define CK_NEON 1
#else
#define CK_NEON 0
#endif
int ck_cpu_avx2(void);                 /* 1 when the AVX2 + FMA kernel bodies run */
int ck_cpu_neon(void);                 /* 1 when the ARM64 NEON bodies run (off with ck_cpu_force_portable) */
void ck_cpu_force_portable(int on);    /* tests: use the SSE2 / scalar bodies */
int ck_cpu_vnni(void);                 /* 1 when the AVX-VNNI bodies run (on top of AVX2) */
void ck_cpu_force_no_vnni(int on);     /* tests: the AVX2 bodies without VNNI */
int ck_cpu_avx512vnni(void);           /* 1 when the AVX-512 VNNI bodies run (the int8 prefill GEMM) */
void ck_cpu_force_no_avx512(int on);   /* tests: what runs on a CPU without AVX-512 */
int ck_cpu_avx512vbmi(void);           /* 1 when the AVX-512 VBMI bodies run (4-bit decode) */
void ck_cpu_force_no_vbmi(int on);     /* tests: the AVX-512 bodies without VBMI */
int ck_cpu_amx(void);                  /* 1 when the AMX-INT8 tiles run the int8 prefill GEMM */
int ck_cpu_amx_bf16(void);             /* 1 when AMX-BF16 tiles run the f16 / bf16 prefill GEMM too */
int ck_cpu_avx512bf16(void);           /* 1 when the avx512 path may use AVX512_BF16's conversions */
void ck_cpu_force_no_amx(int on);      /* tests: the AVX-512 VNNI prefill on an AMX machine */
const char *ck_cpu_path(void);         /* the path that runs: portable, avx2, avx2-vnni, avx512, avx512-vbmi, amx, neon */
int ck_cpu_has_path(const char *name); /* 1 when the CPU has that path (CK_KERNELS and forcing aside) */

/* ---- batched sequences ----------------------------------------------------
 * Where each token of a call sits when one call carries several sequences (ck_model_batch): token t is at
 * position pos[t] of its sequence, whose keys and values occupy the cache rows start[t], start[t] + 1, ...
 * (each sequence a range of the one cache). The kernels that depend on positions take a `const ck_seqmap *`;
 * NULL (one sequence, every single-sequence call): token t at position pos0 + t, cache row pos0 + t. */
typedef struct ck_seqmap {
    const int32_t *pos, *start;
} ck_seqmap;
static inline int ck_seq_pos(const ck_seqmap *map, int pos0, int t) { return map ? map->pos[t] : pos0 + t; }
static inline int ck_seq_start(const ck_seqmap *map, int t) { return map ? map->start[t] : 0; }

/* ---- embedding (embedding.c) -------------------------------------------- */
/* out[t][:] = table[tokens[t]][:]; tokens are checked by the caller. */
void ck_embedding(float *out, const float *table, const int32_t *tokens, int T, int C);
/* out[t][:] = x[t][:] + table[pos0 + t][:]  (learned positions, GPT-2; map: map->pos[t]). out may equal x. */
void ck_pos_embed(float *out, const float *x, const float *table, int T, int C, int pos0, const ck_seqmap *map);

/* ---- normalization (norm.c) ----------------------------------------------- */
/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * (w + w_offset).  out may equal x.
 * w_offset is 0 for Llama-style norms, 1 for Gemma's x * (1 + w). */
void ck_rmsnorm(float *out, const float *x, const float *w, int T, int C, float eps, float w_offset);
void ck_rmsnorm_ref(float *out, const float *x, const float *w, int T, int C, float eps, float w_offset);
/* out[t] = (x[t] - mean) / sqrt(var + eps) * w + b  (biased variance, nn.LayerNorm). out may equal x. */
void ck_layernorm(float *out, const float *x, const float *w, const float *b, int T, int C, float eps);
void ck_layernorm_ref(float *out, const float *x, const float *w, const float *b, int T, int C, float eps);

/* ---- RoPE (rope.c) ------------------------------------------------------ */
typedef enum ck_rope_kind {
    CK_ROPE_DEFAULT = 0, /* inv_freq[i] = theta^(-2i/rot_dim) */
    CK_ROPE_LINEAR = 1,  /* default / factor */
    CK_ROPE_LLAMA3 = 2   /* Llama 3.1 wavelength-dependent scaling */
} ck_rope_kind;

typedef struct ck_rope_params {
    ck_rope_kind kind;
    double theta;
    double factor;           /* LINEAR, LLAMA3 */
    double low_freq_factor;  /* LLAMA3 */
    double high_freq_factor; /* LLAMA3 */
    double original_max_pos; /* LLAMA3: original_max_position_embeddings */
} ck_rope_params;

/* inv_freq[rot_dim/2], computed as Hugging Face does (float32 results). */
void ck_rope_inv_freq(float *inv_freq, int rot_dim, const ck_rope_params *p);
/* cos_t/sin_t[n_pos][rot_dim/2]: angle = (float)pos * inv_freq[i]. */
void ck_rope_table(float *cos_t, float *sin_t, const float *inv_freq, int rot_dim, int n_pos);
/* out = rope(x): x[T][ldx] holds n_heads heads of head_dim; the first
 * rot_dim dims of every head are rotated with the Hugging Face rotate_half
 * convention (pairs i and i + rot_dim/2), or with `interleaved` GGML's normal
 * mode (pairs 2i and 2i + 1), at positions pos0 .. pos0+T-1 (map: map->pos); the rest
 * are copied. out may equal x (then it works in place). */
void ck_rope(float *out, int ldo, const float *x, int ldx, int T, int n_heads, int head_dim, int rot_dim,
             int pos0, const float *cos_t, const float *sin_t, int interleaved, const ck_seqmap *map);
void ck_rope_ref(float *out, int ldo, const float *x, int ldx, int T, int n_heads, int head_dim, int rot_dim,
                 int pos0, const float *cos_t, const float *sin_t, int interleaved, const ck_seqmap *map);
/* out = rotate_half(x) over rows of D (even): out[.., j] = -x[.., j + D/2] and out[.., j + D/2] = x[.., j] for
 * j < D/2, as transformers' RoPE writes it (cat(-x2, x1)) in an exported graph; n = all elements. out != x. */
void ck_rotate_half(float *out, const float *x, size_t n, int64_t D);

/* ---- linear / GEMM (linear.c) ------------------------------------------- */
/* out[T][N] (row stride ldo) = x[T][K] @ w[N][K]^T  (+ bias[N])  (+ add[T][N])
 * w is in nn.Linear layout, read with CblasTrans. `add` may alias `out`
 * (in-place residual: the GEMM accumulates with beta = 1). bias/add may be
 * NULL. One token uses GEMV. Work is split over output features across the
 * OpenMP team. */
void ck_linear(float *out, int ldo, const float *x, int ldx, const float *w,
               const float *bias, const float *add, int ld_add, int T, int K, int N);
/* One thread's share: output columns [n0, n0 + nb), w pointing at row n0 (the quantized GEMMs' tiles use it). */
void ck_linear_cols(float *out, int ldo, const float *x, int ldx, const float *w, const float *bias, const float *add,
                    int ld_add, int T, int K, int n0, int nb);
void ck_linear_ref(float *out, int ldo, const float *x, int ldx, const float *w,
                   const float *bias, const float *add, int ld_add, int T, int K, int N);

/* ---- KV cache and attention (attention.c) ------------------------------- */
#define CK_ATTENTION_MAX_HEAD_DIM 512 /* the compiler rejects larger head dims */

/* Copies k/v rows (KVH heads of D, row strides ldk/ldv) for positions
 * pos0 .. pos0+T-1 (map: rows map->start[t] + map->pos[t]) into caches laid out [KVH][cap][D]. */
void ck_kv_store(float *k_cache, float *v_cache, int cap, int pos0,
                 const float *k, int ldk, const float *v, int ldv, int T, int KVH, int D, const ck_seqmap *map);

/* Causal grouped-query attention over a [KVH][cap][D] cache.
 * Query row t (position p = pos0 + t, row stride ldq) attends to cache positions
 * j with max(0, p - window + 1) <= j <= p (window <= 0: no window); with a map, p = map->pos[t] and the
 * positions are rows map->start[t] + j (its own sequence's).
 * scores = q.k * scale; with softcap > 0, scores = softcap * tanh(scores / softcap).
 * out[T][H*D] (row stride ldo). Online softmax: no scratch memory. */
void ck_attention(float *out, int ldo, const float *q, int ldq,
                  const float *k_cache, const float *v_cache, int cap,
                  int T, int pos0, int H, int KVH, int D, float scale, int window, float softcap,
                  const ck_seqmap *map);
void ck_attention_ref(float *out, int ldo, const float *q, int ldq,
                      const float *k_cache, const float *v_cache, int cap,
                      int T, int pos0, int H, int KVH, int D, float scale, int window, float softcap,
                      const ck_seqmap *map);

/* ---- activations and elementwise (elementwise.c) ------------------------ */
/* The tanh approximation of GELU: sqrt(2/pi) and the cubic coefficient (the
 * compiler's evaluator and its GELU pattern match use these too). */
#define CK_GELU_TANH_C 0.7978845608028654
#define CK_GELU_TANH_A 0.044715

typedef enum ck_act {
    CK_ACT_SILU = 0,      /* x * sigmoid(x) */
    CK_ACT_GELU_TANH = 1, /* 0.5 x (1 + tanh(CK_GELU_TANH_C (x + CK_GELU_TANH_A x^3))): gelu_new, gelu_pytorch_tanh */
    CK_ACT_GELU = 2       /* 0.5 x (1 + erf(x / sqrt 2)) */
} ck_act;

/* out[t][f] = act(gate[t][f]) * up[t][f]: SwiGLU (silu), GeGLU (gelu). out may equal gate. */
void ck_glu(float *out, int ldo, const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act);
void ck_glu_ref(float *out, int ldo, const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act);
/* out[i] = act(x[i]) for a GELU act; out may equal x. */
void ck_gelu(float *out, const float *x, size_t n, ck_act act);
void ck_gelu_ref(float *out, const float *x, size_t n, ck_act act);
/* out[i] = a[i] + b[i]; out may equal a or b. */
void ck_add(float *out, const float *a, const float *b, size_t n);
void ck_add_ref(float *out, const float *a, const float *b, size_t n);
/* out[t][n] = a[t][n] + bias[n] (a bias broadcast over rows); out may equal a. */
void ck_add_bias(float *out, const float *a, const float *bias, int T, int N);
/* out[i] = x[i] * s (Gemma's embedding normalizer); out may equal x. */
void ck_scale(float *out, const float *x, size_t n, float s);
/* out[i] = cap * tanh(x[i] / cap) (Gemma-2 logit soft-capping); out may equal x. */
void ck_softcap(float *out, const float *x, size_t n, float cap);
void ck_softcap_ref(float *out, const float *x, size_t n, float cap);
/* out[i] = x[i] clamped to [lo, hi] (torch.clamp: NaN stays NaN); bounds bit 0: lo applies, bit 1: hi applies
 * (an absent one is unbounded, so infinities pass); out may equal x. OLMoE's clip_qkv, exported clamps. */
void ck_clamp(float *out, const float *x, size_t n, float lo, float hi, int bounds);
void ck_clamp_ref(float *out, const float *x, size_t n, float lo, float hi, int bounds);

/* ---- training (train.c): backward kernels, loss, optimizer ------------------
 * Gradients of the language-model ops, in the forward kernels' conventions
 * (the output gradient first, row strides for column views). Pass 0 as `acc`
 * to overwrite an input's gradient, 1 to add to it (a tensor read by several
 * ops sums their contributions). Parameter gradients (dw, db, dtable) are
 * always accumulated, as PyTorch's .grad is. Every kernel has a *_ref twin in
 * double precision; tests also check each against finite differences. */
/* dtable[tokens[t]][:] += dout[t][:] (threads own column ranges: repeated tokens never race) */
void ck_embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int T, int C);
void ck_embedding_backward_ref(float *dtable, const float *dout, const int32_t *tokens, int T, int C);
/* dtable[pos0 + t][:] += dout[t][:] (the learned positions of ck_pos_embed) */
void ck_pos_embed_backward(float *dtable, const float *dout, int T, int C, int pos0);
/* dst = (acc ? dst : 0) + s * src: the gradient of an ADD operand, a SCALE, a residual */
void ck_grad_add(float *dst, int acc, const float *src, size_t n, float s);
/* RMSNorm: dx (=/+=) d/dx, dw += sum_t dy * x_hat. scratch: T floats. */
void ck_rmsnorm_backward(float *dx, int acc, float *dw, const float *dy, const float *x, const float *w, int T, int C,
                         float eps, float w_offset, float *scratch);
void ck_rmsnorm_backward_ref(float *dx, int acc, float *dw, const float *dy, const float *x, const float *w, int T,
                             int C, float eps, float w_offset);
/* LayerNorm: dx (=/+=), dw += sum_t dy * x_hat, db += sum_t dy. scratch: 2 T floats. */
void ck_layernorm_backward(float *dx, int acc, float *dw, float *db, const float *dy, const float *x, const float *w,
                           int T, int C, float eps, float *scratch);
void ck_layernorm_backward_ref(float *dx, int acc, float *dw, float *db, const float *dy, const float *x,
                               const float *w, int T, int C, float eps);
/* y = x @ w^T + bias: dx[T][K] (=/+=) dy @ w (dx may be NULL), dw[N][K] += dy^T @ x, db[N] += sum_t dy (db may
 * be NULL). Threads own row ranges of dx and of dw. */
void ck_linear_backward(float *dx, int lddx, int acc, float *dw, float *db, const float *dy, int lddy, const float *x,
                        int ldx, const float *w, int T, int K, int N);
void ck_linear_backward_ref(float *dx, int lddx, int acc, float *dw, float *db, const float *dy, int lddy,
                            const float *x, int ldx, const float *w, int T, int K, int N);
/* RoPE: the transpose rotation (angle -theta) of dy into dx (=/+=); dx may equal dy when acc == 0. */
void ck_rope_backward(float *dx, int lddx, int acc, const float *dy, int lddy, int T, int n_heads, int head_dim,
                      int rot_dim, int pos0, const float *cos_t, const float *sin_t);
void ck_rope_backward_ref(float *dx, int lddx, int acc, const float *dy, int lddy, int T, int n_heads, int head_dim,
                          int rot_dim, int pos0, const float *cos_t, const float *sin_t);
/* Causal GQA attention over T tokens from position 0 (ck_attention with pos0 = 0, k/v in the [KVH][cap][D]
 * layout it read; out is its output): dq[T][H*D], dk/dv[T][KVH*D] (row strides; =/+= by acc). Softmax
 * statistics are recomputed: scratch holds 2 T H floats. */
void ck_attention_backward(float *dq, int lddq, float *dk, int lddk, float *dv, int lddv, int acc, const float *dout,
                           int lddo, const float *q, int ldq, const float *k_cache, const float *v_cache, int cap,
                           const float *out, int ldo, int T, int H, int KVH, int D, float scale, int window,
                           float softcap, float *scratch);
void ck_attention_backward_ref(float *dq, int lddq, float *dk, int lddk, float *dv, int lddv, int acc,
                               const float *dout, int lddo, const float *q, int ldq, const float *k_cache,
                               const float *v_cache, int cap, int T, int H, int KVH, int D, float scale, int window,
                               float softcap);
/* out = act(gate) * up: dgate, dup (=/+=), row strides. */
void ck_glu_backward(float *dgate, int lddg, float *dup, int lddu, int acc, const float *dy, int lddy,
                     const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act);
void ck_glu_backward_ref(float *dgate, int lddg, float *dup, int lddu, int acc, const float *dy, int lddy,
                         const float *gate, int ldg, const float *up, int ldu, int T, int F, ck_act act);
/* out = act(x) (a GELU act): dx (=/+=) dy * act'(x) */
void ck_gelu_backward(float *dx, int acc, const float *dy, const float *x, size_t n, ck_act act);
void ck_gelu_backward_ref(float *dx, int acc, const float *dy, const float *x, size_t n, ck_act act);
/* out = cap tanh(x / cap): dx (=/+=) dy (1 - tanh^2(x / cap)) */
void ck_softcap_backward(float *dx, int acc, const float *dy, const float *x, size_t n, float cap);
void ck_softcap_backward_ref(float *dx, int acc, const float *dy, const float *x, size_t n, float cap);
/* out = clamp(x, lo, hi) (ck_clamp's bounds): dx (=/+=) dy where lo <= x <= hi (torch's: the bounds included), 0
 * elsewhere and at NaN */
void ck_clamp_backward(float *dx, int acc, const float *dy, const float *x, size_t n, float lo, float hi, int bounds);
void ck_clamp_backward_ref(float *dx, int acc, const float *dy, const float *x, size_t n, float lo, float hi,
                           int bounds);
/* Mean cross-entropy of logits[T][V] against targets (rows whose target is ignore_index do not count; the
 * caller checks the others are in [0, V)). Writes dlogits = (softmax - onehot) / n_counted, zero rows for
 * ignored targets; dlogits may equal logits. Returns the loss (0 when no row counts), *n_counted the rows. */
double ck_cross_entropy(float *dlogits, const float *logits, const int32_t *targets, int T, int V, int ignore_index,
                        int *n_counted);
double ck_cross_entropy_ref(float *dlogits, const float *logits, const int32_t *targets, int T, int V,
                            int ignore_index, int *n_counted);
/* sum of x[i]^2 in double (global gradient norm); NaN/Inf propagate */
double ck_sum_squares(const float *x, size_t n);
/* One AdamW step as torch.optim.AdamW computes it (step >= 1 counts from 1):
 *   w -= lr * wd * w;  g' = g * grad_scale;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *   w -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps) */
void ck_adamw(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
              float wd, float grad_scale, int step);
void ck_adamw_ref(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
                  float wd, float grad_scale, int step);

/* ---- exported-graph kernels ------------------------------------------------
 * Shapes are int64_t arrays of `rank` entries; broadcasting operands are
 * given right-aligned to the output rank (missing leading dims as 1). */
#define CK_MAX_RANK 8

/* ---- unary (elementwise.c) ----
 * The elementwise unary ops, one row each: X(NAME, formula). The formula is a
 * C expression of `double x` (the input) and `double p` (the op's parameter:
 * POW's exponent), in parentheses. Everything else comes from this list: the
 * ck_unop enum, the reference kernel, the fast kernel (a vectorized path where
 * elementwise.c has one, else this formula), the compiler's IR op of the same
 * name with its shape rule, constant evaluator and emitter (compiler/ir/ops.h),
 * and the kernel test, which loops over every row. Adding an op is a row here
 * and, for exported graphs, the ATen name in python/ckc/export.py. */
#define CK_UNARY_OPS(X)                           \
    X(RELU, (x > 0 ? x : 0))                      \
    X(SILU, (x / (1 + exp(-x))))                  \
    X(TANH, (tanh(x)))                            \
    X(EXP, (exp(x)))                              \
    X(RSQRT, (1 / sqrt(x)))                       \
    X(NEG, (-x))                                  \
    X(POW, (pow(x, p)))                           \
    X(SIGMOID, (1 / (1 + exp(-x))))               \
    X(ABS, (fabs(x)))                             \
    X(COS, (cos(x)))                              \
    X(SIN, (sin(x)))                              \
    X(ERF, (erf(x)))

#define CK_UN_ENUM_ROW(name, formula) CK_UN_##name,
typedef enum ck_unop { CK_UNARY_OPS(CK_UN_ENUM_ROW) CK_UN_COUNT } ck_unop;
#undef CK_UN_ENUM_ROW
/* out[i] = op(x[i]) (POW: x^param); out may equal x. */
void ck_unary(float *out, const float *x, size_t n, ck_unop op, float param);
void ck_unary_ref(float *out, const float *x, size_t n, ck_unop op, float param);
/* out = relu(x + bias) over rows of n; out may equal x. */
void ck_bias_relu(float *out, const float *x, const float *bias, size_t rows, int n);

/* ---- binary (binary.c) ----
 * The elementwise binary ops, one row each: X(NAME, formula, ints). The
 * formula is a C expression of `a` and `b` (floats in the kernels, doubles in
 * the compiler's evaluator), in parentheses; ints is 1 when integer operands
 * give an integer (torch.add), 0 when the result is float (torch.div's true
 * division; the compiler folds integer arithmetic, kernels run on floats). Everything else comes from this
 * list, as for CK_UNARY_OPS: the ck_binop enum and the ops of the fused
 * programs (ck_ewop), ck_binary / ck_binary_scalar / ck_binary_ref and ck_ew,
 * the compiler's IR op of the same name with its shape rule, constant
 * evaluator, emitter and elementwise fusion (compiler/ir/ops.h), and the
 * kernel tests, which loop over every row. Adding an op is a row here and,
 * for exported graphs, the ATen name in python/ckc/export.py. */
#define CK_BINARY_OPS(X)   \
    X(ADD, (a + b), 1)     \
    X(SUB, (a - b), 1)     \
    X(MUL, (a * b), 1)     \
    X(DIV, (a / b), 0)

#define CK_BIN_ENUM_ROW(name, formula, ints) CK_BIN_##name,
typedef enum ck_binop { CK_BINARY_OPS(CK_BIN_ENUM_ROW) CK_BIN_COUNT } ck_binop;
#undef CK_BIN_ENUM_ROW

/* a op b by the op's formula (every kernel's per-element definition); NaN for a value outside the enum */
static inline float ck_binop_apply(ck_binop op, float a, float b)
{
    switch (op) {
#define CK_BIN_APPLY_ROW(name, formula, ints) \
    case CK_BIN_##name: return formula;
        CK_BINARY_OPS(CK_BIN_APPLY_ROW)
#undef CK_BIN_APPLY_ROW
    case CK_BIN_COUNT: break;
    }
    return NAN;
}

/* ---- fused elementwise programs (elementwise.c) ----
 * A chain of elementwise ops run in one pass over chunks of the output (the
 * fuse_elementwise pass, codegen/emitters.cpp): no intermediate reaches memory.
 * Operand slots: 0..nin-1 the inputs, nin + j the result of instruction j;
 * -1 is the instruction's immediate. Input k is read at ((i / div[k]) % mod[k])
 * for output element i (div 1, mod n: same shape; mod 1: a scalar; div 1: a
 * row broadcast; div > 1: a column broadcast). The last instruction's result
 * is `out`, which may equal an input of the output's shape. */
#define CK_EW_ENUM_ROW(name, formula, ints) CK_EW_##name = CK_BIN_##name,
typedef enum ck_ewop { CK_BINARY_OPS(CK_EW_ENUM_ROW) CK_EW_UNARY = CK_BIN_COUNT /* + ck_unop, imm its param */ } ck_ewop;
#undef CK_EW_ENUM_ROW
typedef struct ck_ew_insn {
    int op;   /* ck_ewop */
    int a, b; /* operand slots (b unused by unary ops) */
    float imm;
} ck_ew_insn;
#define CK_EW_MAX_INPUTS 16
#define CK_EW_MAX_INSNS 64
void ck_ew(float *out, size_t n, int nin, const float *const *in, const int64_t *div, const int64_t *mod, int ninsn,
           const ck_ew_insn *prog);
/* the definition: every instruction per element, unary ops by their formula in double (ck_unary_ref) */
void ck_ew_ref(float *out, size_t n, int nin, const float *const *in, const int64_t *div, const int64_t *mod,
               int ninsn, const ck_ew_insn *prog);

/* ---- broadcasting binary ops and selects (binary.c) ---- */
/* out = a op b with numpy broadcasting (odometer), fast paths for equal
 * shapes, a scalar operand and a row broadcast. out may equal a or b when
 * it has their shape. */
void ck_binary(float *out, const int64_t *out_shape, int rank, const float *a, const int64_t *a_shape,
               const float *b, const int64_t *b_shape, ck_binop op);
void ck_binary_ref(float *out, const int64_t *out_shape, int rank, const float *a, const int64_t *a_shape,
                   const float *b, const int64_t *b_shape, ck_binop op);
/* out[i] = a[i] op s, or s op a[i] when reverse. */
void ck_binary_scalar(float *out, const float *a, size_t n, float s, ck_binop op, int reverse);
/* out = mask ? value : x, mask (bytes) broadcast to x's shape. out may equal x. */
void ck_masked_fill(float *out, const int64_t *shape, int rank, const float *x, const uint8_t *mask,
                    const int64_t *mask_shape, float value);

/* ---- selects, comparisons, casts and gathers of any dtype (select.c) ----
 * What builds a mask from run-time data (an attention_mask input): numpy
 * broadcasting as ck_binary (shapes right-aligned to `rank` entries), element
 * types below (bool is one byte, 0 or 1). Values are compared as doubles, so
 * int64 compares exactly up to 2^53. */
typedef enum ck_elem { CK_ELEM_F32 = 0, CK_ELEM_I64 = 1, CK_ELEM_I32 = 2, CK_ELEM_BOOL = 3 } ck_elem;
#define CK_CMP_OPS(X) X(EQ, ==) X(NE, !=) X(LT, <) X(LE, <=) X(GT, >) X(GE, >=)
#define CK_CMP_ENUM_ROW(name, c_op) CK_CMP_##name,
typedef enum ck_cmpop { CK_CMP_OPS(CK_CMP_ENUM_ROW) CK_CMP_COUNT } ck_cmpop;
#undef CK_CMP_ENUM_ROW
/* out[i] = x[i] converted: to an integer by truncation toward 0 (NaN gives 0, values beyond the type's range
 * its limit), to bool by x != 0 (NaN is true), from bool 0 or 1. out may equal x when the sizes agree. */
void ck_cast(void *out, ck_elem to, const void *x, ck_elem from, size_t n);
/* out[i] = start + step * i (in double), converted as ck_cast converts: torch.arange of a length known when the
 * code runs (arange(0, seq) of a symbolic seq) */
void ck_arange(void *out, ck_elem to, double start, double step, size_t n);
/* out = running sums of x [outer][n][inner] along n (torch.cumsum), t CK_ELEM_F32 (summed in double, as torch on
 * the CPU) or CK_ELEM_I64. out may equal x. */
void ck_cumsum(void *out, const void *x, ck_elem t, int64_t outer, int64_t n, int64_t inner);
/* out = a op b (b NULL: a op scalar), 1 or 0 */
void ck_compare(uint8_t *out, const int64_t *out_shape, int rank, const void *a, ck_elem ta, const int64_t *a_shape,
                const void *b, ck_elem tb, const int64_t *b_shape, double scalar, ck_cmpop op);
/* int64 a op b (b NULL: a op scalar, or scalar op a when reverse) for the rows of CK_BINARY_OPS whose integer
 * operands give an integer (ADD, SUB, MUL), wrapping on overflow as torch does: position ids computed from
 * run-time sizes. out may equal a or b where its shape is theirs. */
void ck_binary_i64(int64_t *out, const int64_t *out_shape, int rank, const int64_t *a, const int64_t *a_shape,
                   const int64_t *b, const int64_t *b_shape, int64_t scalar, int reverse, ck_binop op);
/* out = cond != 0 ? a : b, a and b of one type of `elem` bytes */
void ck_where(void *out, const int64_t *out_shape, int rank, const void *cond, ck_elem tc, const int64_t *c_shape,
              const void *a, const int64_t *a_shape, const void *b, const int64_t *b_shape, size_t elem);
/* x [batch][rows][cols] with zeros where col > row + diagonal (torch.tril). out may equal x. */
void ck_tril(void *out, const void *x, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal, size_t elem);
/* torch's x[i0, i1, .., ik-1] (advanced indexing of the k leading dims): the k int64 index tensors broadcast
 * to one shape of b_rank dims (idx_shapes: k rows of b_rank entries, right-aligned), out is that shape then
 * x's dims k..; a negative index counts from the end. Returns -1, or the first position of the broadcast
 * index shape whose index is out of range, before writing anything. */
int64_t ck_index(void *out, const void *x, const int64_t *x_shape, int x_rank, int k, const int64_t *const *idx,
                 const int64_t *idx_shapes, int b_rank, size_t elem);
/* torch's index_put of one index tensor into the leading dim: out [rows][inner] starts as x (NULL: zeros; out may
 * equal x), then row idx[i] of it gets row i of values [n][inner], added (accumulate: float32 values, each
 * duplicate index adds) or written (the last duplicate wins); a negative index counts from the end. Returns -1,
 * or the first i whose index is out of range, before writing anything. */
int64_t ck_index_put(void *out, const void *x, int64_t rows, int64_t inner, const int64_t *idx, int64_t n,
                     const void *values, int accumulate, size_t elem);

/* ---- softmax and reductions (reduce.c), over the middle of [outer][n][inner] ----
 * ck_softmax: masked = 1 gives a row of only -inf zeros (scaled_dot_product_attention's rule for a query that
 * may attend to nothing), masked = 0 NaN (torch.softmax's). */
void ck_softmax(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, int masked);
void ck_softmax_ref(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, int masked);
/* The reductions, one row each: X(IR_NAME, NAME, identity, combine, finish):
 * acc starts at `identity`, takes each `x` in order through `combine`, and
 * the result is `finish` of acc and the count `n` (C expressions of acc, x,
 * n, in parentheses). The row gives the ck_redop enum (CK_RED_<NAME>), the
 * reference kernel and the fast kernel's generic paths, the compiler's IR op
 * IR_NAME with its shape rule, evaluator and emitter, and the kernel test's
 * loop. Adding one is a row here and its ATen name in python/ckc/export.py. */
#define CK_REDUCE_OPS(X)                                         \
    X(REDUCE_SUM, SUM, 0.0, (acc + x), (acc))                    \
    X(REDUCE_MEAN, MEAN, 0.0, (acc + x), (acc / n))              \
    X(REDUCE_MAX, MAX, -INFINITY, (x > acc ? x : acc), (acc))

#define CK_RED_ENUM_ROW(ir_name, name, identity, combine, finish) CK_RED_##name,
typedef enum ck_redop { CK_REDUCE_OPS(CK_RED_ENUM_ROW) CK_RED_COUNT } ck_redop;
#undef CK_RED_ENUM_ROW
void ck_reduce(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, ck_redop op);
void ck_reduce_ref(float *out, const float *x, int64_t outer, int64_t n, int64_t inner, ck_redop op);
/* x [batch][S][S]: -inf above the diagonal. out may equal x. */
void ck_causal_mask(float *out, const float *x, int64_t batch, int64_t S);

/* ---- layout (layout.c): element size `elem` bytes, any dtype ---- */
/* out = x with axes permuted: out axis i is x axis perm[i]. */
void ck_permute(void *out, const void *x, int rank, const int64_t *shape, const int *perm, size_t elem);
void ck_permute_ref(void *out, const void *x, int rank, const int64_t *shape, const int *perm, size_t elem);
/* x [outer][n][inner] -> out [outer][len][inner], rows start, start+step, ... */
void ck_slice_copy(void *out, const void *x, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t len,
                   int64_t step, size_t elem);
/* x [outer][n_in][inner] into out [outer][n_out][inner] at rows offset.. (one CAT input) */
void ck_cat_part(void *out, const void *x, int64_t outer, int64_t n_out, int64_t n_in, int64_t offset, int64_t inner,
                 size_t elem);
/* out (out_shape) = x broadcast (x_shape right-aligned, rank entries) */
void ck_expand(void *out, const int64_t *out_shape, int rank, const void *x, const int64_t *x_shape, size_t elem);
/* out[rows][cols] = a row-strided x[rows][ldx] */
void ck_copy_rows(float *out, const float *x, int64_t ldx, int64_t rows, int64_t cols);

/* ---- batched GEMM (linear.c) ----
 * out[b] = alpha * op(a[b]) @ op(B) (+ add[b]) (+ bias), a [batch][M][K] (or [batch][K][M] with trans_a: the
 * backward's x^T @ dy without a transpose copy); B is [K][N] (or [N][K] with trans_b), per batch when
 * b_batched, else one matrix shared by every batch (then, without trans_a, the batch is folded into M). add
 * is the full [batch][M][N] addend (may equal out) or NULL; bias is [N] or NULL. */
void ck_matmul(float *out, const float *a, const float *b, const float *add, const float *bias, int64_t batch,
               int64_t M, int64_t N, int64_t K, int b_batched, int trans_a, int trans_b, float alpha);
void ck_matmul_ref(float *out, const float *a, const float *b, const float *add, const float *bias, int64_t batch,
                   int64_t M, int64_t N, int64_t K, int b_batched, int trans_a, int trans_b, float alpha);

/* ---- attention over whole sequences (attention.c) ----
 * B batches of H heads; per (batch, head) a [S][D] matrix of queries, keys,
 * values or outputs, addressed through element strides, so one kernel reads
 * both layouts graphs produce without a transpose copy:
 *   [B][H][S][D] contiguous             ck_seq_bhsd(H, S, D)
 *   [B][S][H*D] rows of stride ld        ck_seq_bshd(S, ld, D)  (q/k/v as column views of a fused QKV GEMM output)
 * causal: query i sees keys j <= i + (Sk - Sq). Two implementations behind
 * one op, equal within float rounding: standard (scores materialized, up to
 * Sq x Sk per slot, two GEMMs) and flash (tiled online softmax, 32 x 32
 * tiles). Scratch comes from the planner; at most CK_ATTENTION_SLOTS
 * (batch, head) slices run at once. */
typedef struct ck_seq {
    int64_t batch, head, row; /* element strides between batches, heads, positions (D elements are contiguous) */
} ck_seq;
static inline ck_seq ck_seq_bhsd(int64_t H, int64_t S, int64_t D)
{
    ck_seq s;
    s.batch = H * S * D;
    s.head = S * D;
    s.row = D;
    return s;
}
static inline ck_seq ck_seq_bshd(int64_t S, int64_t ld, int64_t D)
{
    ck_seq s;
    s.batch = S * ld;
    s.head = D;
    s.row = ld;
    return s;
}
#define CK_ATTENTION_SLOTS 16
#define CK_FLASH_TILE 32
static inline size_t ck_attention_slots(int64_t BH) { return (size_t)(BH < CK_ATTENTION_SLOTS ? BH : CK_ATTENTION_SLOTS); }
static inline size_t ck_attention_std_scratch(int64_t BH, int64_t Sq, int64_t Sk, int64_t D)
{
    (void)D;
    return ck_attention_slots(BH) * (size_t)Sq * (size_t)Sk * sizeof(float);
}
static inline size_t ck_attention_flash_scratch(int64_t BH, int64_t Sq, int64_t Sk, int64_t D)
{
    (void)Sq;
    (void)Sk;
    return ck_attention_slots(BH) * (size_t)(CK_FLASH_TILE * CK_FLASH_TILE + CK_FLASH_TILE * D + 2 * CK_FLASH_TILE) *
           sizeof(float);
}
/* What else an attention may read (NULL: nothing): a mask of the scores, [B][H][Sq][Sk] through element strides
 * (0 along a dim it broadcasts; a row's Sk entries contiguous), and grouped K/V heads. A mask of kind
 * CK_MASK_KEEP (bool: a key takes part where nonzero, as scaled_dot_product_attention's bool mask), CK_MASK_DROP
 * (bool: where zero) or CK_MASK_ADD (float32 added to the scaled scores); a query the mask (and causality) leaves
 * no key gets 0, as scaled_dot_product_attention's safe softmax. kv_group >= 1: query head h of batch b reads K/V
 * head h / kv_group of H / kv_group (grouped-query attention without repeat_kv's copies): sk and sv address
 * those heads. */
typedef enum ck_mask_kind { CK_MASK_NONE = 0, CK_MASK_KEEP = 1, CK_MASK_DROP = 2, CK_MASK_ADD = 3 } ck_mask_kind;
typedef struct ck_att_extra {
    const void *mask;
    ck_mask_kind kind;
    int64_t mb, mh, mr; /* the mask's element strides between batches, heads, query rows */
    int64_t kv_group;
} ck_att_extra;
static inline ck_att_extra ck_att_extra_of(const void *mask, ck_mask_kind kind, int64_t mb, int64_t mh, int64_t mr,
                                           int64_t kv_group)
{
    ck_att_extra x;
    x.mask = mask;
    x.kind = mask ? kind : CK_MASK_NONE;
    x.mb = mb;
    x.mh = mh;
    x.mr = mr;
    x.kv_group = kv_group > 1 ? kv_group : 1;
    return x;
}
/* no mask, one K/V head per query head */
static inline ck_att_extra ck_att_plain(void) { return ck_att_extra_of(0, CK_MASK_NONE, 0, 0, 0, 1); }
void ck_attention_std(float *out, ck_seq so, const float *q, ck_seq sq, const float *k, ck_seq sk, const float *v,
                      ck_seq sv, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, float scale, int causal,
                      ck_att_extra extra, float *scratch);
void ck_attention_flash(float *out, ck_seq so, const float *q, ck_seq sq, const float *k, ck_seq sk, const float *v,
                        ck_seq sv, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, float scale, int causal,
                        ck_att_extra extra, float *scratch);
void ck_attention_seq_ref(float *out, ck_seq so, const float *q, ck_seq sq, const float *k, ck_seq sk, const float *v,
                          ck_seq sv, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, float scale, int causal,
                          ck_att_extra extra);

/* ---- int64 ids (embedding.c) ---- */
/* out[i][:] = table[ids[i]][:]; returns -1, or the index of the first id
 * outside [0, vocab) (then nothing is written). */
int64_t ck_embedding_i64(float *out, const float *table, const int64_t *ids, int64_t n, int C, int64_t vocab);

#ifdef __cplusplus
}
#endif
#endif /* CK_KERNELS_H */
