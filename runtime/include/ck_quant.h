/*
 * ck_quant.h — weight formats kept as they are stored: 16-bit floats and
 * GGML's block-quantized types, bit-exact with GGUF / llama.cpp.
 *
 * A row of K weights in a block type is K / block elements' worth of blocks,
 * each self-contained (its scale(s) and packed integers). Rows of a matrix
 * are independent, so a matrix can be sliced or concatenated by rows without
 * touching the bits. The type numbers are GGUF's own (ggml_type), so a tensor
 * read from a GGUF file needs no translation.
 *
 *   type   block  bytes  stores
 *   f32        1      4  float
 *   f16        1      2  IEEE half
 *   bf16       1      2  bfloat16
 *   q8_0      32     34  d (f16), 32 x int8                     x = d q
 *   q4_0      32     18  d, 16 bytes of nibbles                 x = d (q - 8)
 *   q4_1      32     20  d, m, nibbles                          x = d q + m
 *   q5_0      32     22  d, 32 high bits, nibbles               x = d (q - 16)
 *   q5_1      32     24  d, m, high bits, nibbles               x = d q + m
 *   q4_K     256    144  d, dmin, 8 x 6-bit (scale, min), nibbles  x = d s q - dmin m
 *   q5_K     256    176  as q4_K plus 32 bytes of high bits
 *   q6_K     256    210  16 x int8 scale, 4+2-bit quants, d     x = d s (q - 32)
 * Activation-side types used by the dot products (never stored in a model):
 *   q8_1      32     36  d, s = d * sum(q), 32 x int8
 *   q8_K     256    292  d (f32), 256 x int8, 16 sums of 16
 *
 * Quantizers are llama.cpp's reference ones (quantize_row_*_ref), so a file
 * ckc writes has the bytes llama-quantize would write for the same input.
 */
#ifndef CK_QUANT_H
#define CK_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ck_qtype {
    CK_Q_F32 = 0,
    CK_Q_F16 = 1,
    CK_Q_Q4_0 = 2,
    CK_Q_Q4_1 = 3,
    CK_Q_Q5_0 = 6,
    CK_Q_Q5_1 = 7,
    CK_Q_Q8_0 = 8,
    CK_Q_Q8_1 = 9,
    CK_Q_Q4_K = 12,
    CK_Q_Q5_K = 13,
    CK_Q_Q6_K = 14,
    CK_Q_Q8_K = 15,
    CK_Q_BF16 = 30
} ck_qtype;

#define CK_QK 32   /* elements per block of the _0 / _1 types */
#define CK_QK_K 256 /* elements per super-block of the K types */

/* One row per type (as ggml's type_traits, io/quant.c): everything the format
 * code knows of it. A function the type lacks is NULL and every caller checks
 * it (CK_ENOTSUP, never a silent 0). The kernels' side of a type (its dot
 * products per CPU, its GEMM) is ck_qtype_cpu (qlinear.c). */
typedef struct ck_qtype_traits {
    int type;           /* ck_qtype: GGUF's ggml_type number */
    const char *name;   /* "q4_K" */
    int block;          /* elements per block; 0: a GGML type ckc does not read (named for messages) */
    int block_bytes;
    int stored;         /* 1: a model's weights may be kept in it (q8_1 / q8_K only quantize activations) */
    int dot_type;       /* the type a row of activations is quantized to for its dot product; -1: none */
    int row_fallback;   /* llama.cpp's type for rows that are not whole blocks of this one; -1: f16 */
    int gguf_file_type; /* general.file_type (llama_ftype) of a file of matrices in this type; -1: none */
    void (*quantize)(const float *x, void *y, int64_t nblocks);   /* llama.cpp's reference quantizer */
    void (*dequantize)(const void *x, float *y, int64_t nblocks); /* the definition of the format */
} ck_qtype_traits;
const ck_qtype_traits *ck_qtype_traits_of(int type); /* NULL: no GGML type has this number */
const ck_qtype_traits *ck_qtype_traits_at(int i);    /* row i of the table, NULL past the end (tests loop) */

/* 1 when ckc can store, load and multiply this type (not q8_1 / q8_K, which
 * only quantize activations); its name ("q4_K"), elements and bytes per block. */
int ck_qtype_valid(int type);
const char *ck_qtype_name(int type);
int ck_qtype_from_name(const char *name); /* -1 if unknown */
int ck_qtype_block(int type);
int ck_qtype_block_bytes(int type);
/* bytes of a row of n elements; 0 when n is not a multiple of the block */
size_t ck_qtype_row_bytes(int type, int64_t n);
/* the type a row of activations is quantized to for the dot product with a
 * row of `type` (q8_0, q8_1, q8_K; f32 for the float types) */
int ck_qtype_dot_type(int type);
/* The type rows of K elements are kept in when `want` is asked for: want, or
 * llama.cpp's fallback when K is not a whole number of its blocks (q4_K ->
 * q5_0, q5_K -> q5_1, q6_K -> q8_0, else f16). -1 for an unknown type. */
int ck_qtype_for_rows(int want, int64_t K);

uint16_t ck_fp32_to_fp16(float f); /* round to nearest even, like F16C */
float ck_fp16_to_fp32(uint16_t h);
uint16_t ck_fp32_to_bf16(float f); /* round to nearest even, NaN kept quiet */
float ck_bf16_to_fp32(uint16_t b);

/* n elements (a multiple of the block): CK_OK, CK_ENOTSUP for a type without
 * the function, CK_EINVAL for n not a whole number of blocks, CK_EFORMAT (quantize to a block type) for a
 * NaN or infinite value, which no block can hold. dequantize is the reference twin of every kernel here. */
int ck_quantize_row(int type, const float *x, void *y, int64_t n);
int ck_dequantize_row(int type, const void *x, float *y, int64_t n);

/* ---- the kernels' side of a type (qlinear.c; as ggml's type_traits_cpu) ----
 * sum_i w[i] * a[i] for one row of n weights of `type` and one row of
 * activations already quantized to ck_qtype_dot_type(type) (f32 for the
 * float types). A CPU body a type lacks is NULL; ck_vec_dot_for picks the
 * best the CPU runs (AVX-512 VNNI, AVX2, NEON, else the scalar reference). */
typedef float (*ck_vec_dot_fn)(int64_t n, const void *w, const void *a);
enum { CK_GEMM_TILES, CK_GEMM_FLOAT, CK_GEMM_INT8 }; /* how prefill multiplies a type */
typedef struct ck_qtype_cpu {
    int type;
    ck_vec_dot_fn dot_ref;    /* scalar: what the others are tested against */
    ck_vec_dot_fn dot_avx2;   /* AVX2 + FMA + F16C */
    ck_vec_dot_fn dot_avx512; /* AVX-512 VNNI */
    ck_vec_dot_fn dot_neon;   /* ARM64 NEON (qdot_neon.c) */
    int gemm;                 /* CK_GEMM_INT8: qgemm.c; CK_GEMM_FLOAT: fgemm.c; CK_GEMM_TILES: dequantized tiles */
} ck_qtype_cpu;
const ck_qtype_cpu *ck_qtype_cpu_of(int type); /* NULL: no kernels multiply it */
ck_vec_dot_fn ck_vec_dot_for(int type);        /* NULL: none */
/* the dot product through ck_vec_dot_for / the reference; NaN (never 0) for a type without one */
float ck_vec_dot(int type, int64_t n, const void *w, const void *a);
float ck_vec_dot_ref(int type, int64_t n, const void *w, const void *a);

/* A [N][K] weight matrix as stored: up to CK_QMAT_MAX_PARTS row ranges, each
 * in its own type and memory (the fused QKV of a GGUF file is three tensors,
 * possibly of different types, used in place). */
#define CK_QMAT_MAX_PARTS 4
typedef struct ck_qmat {
    int n_parts;
    int type[CK_QMAT_MAX_PARTS];
    int64_t rows[CK_QMAT_MAX_PARTS];
    const void *data[CK_QMAT_MAX_PARTS];
} ck_qmat;

/* y[t][n] = x[t] . W[n] (+ bias[n]) (+ add[t][n]), like ck_linear. A few
 * tokens quantize x once and run the integer dot products over rows split
 * among the threads; more tokens dequantize W in tiles into an sgemm.
 * Returns CK_OK, CK_ENOMEM when a buffer (activations or a tile) cannot be
 * allocated, CK_ENOTSUP for a part in a type without kernels. The reference
 * twin always takes the dot-product path, scalar. */
/* Bytes of workspace (ck_ws_use, ck_kernels.h) that ck_linear_q's temporaries for T tokens of K inputs fit in:
 * a model sized with its decode's T and largest K calls no allocator while decoding. */
size_t ck_linear_q_workspace(int T, int K);
/* the same as a constant expression (a static build's CK_MODEL_MEMORY_BYTES): for T tokens of K, the quantized
 * activations (a generous 32 bytes per element: 65.5 K bytes at T = 3 over every kind of part, + 64-byte
 * alignment of each piece), and from CK_LINEAR_Q_DECODE_T + 1 tokens on (prefill) the calling thread's
 * dequantized tile (64 rows of K floats: 256 K bytes) and one GEMM panel (int8: 48 K bytes + terms within the
 * 32; float: 512 x 48 floats) */
#define CK_LINEAR_Q_WORKSPACE_BYTES(T, K)                                                                      \
    (((size_t)(T) + 7) / 8 * 8 * (size_t)(K) * 32 + ((T) > CK_LINEAR_Q_DECODE_T ? (size_t)(K) * 320 + CK_FGEMM_PANEL_BYTES : 0) + \
     4096)
/* ck_linear_q takes up to this many tokens by rows of dot products (decode, a batch of sequences' step), more by the
 * int8 GEMM. scripts/bench_batch.py, 1.1B q4_0, 2 threads, the 2-core Xeon: with one token's dots at a time the
 * GEMM wins from 7 tokens on; q4_0's pair kernel (qdot4.c) would still lead at 8 (90.7 vs 77.2 tok/s), the other
 * formats' single-token bodies would not */
#define CK_LINEAR_Q_DECODE_T 6
/* ... and up to this many minus one when an integer part has no int8 GEMM on the CPU (AVX2 without VNNI), where
 * the prefill path would dequantize the whole matrix into float tiles each call (qlinear.c: prefill_min_t) */
#define CK_LINEAR_Q_TILE_MIN_T 16
int ck_linear_q(float *out, int ldo, const float *x, int ldx, const ck_qmat *w, const float *bias, const float *add,
                int ld_add, int T, int K, int N);
int ck_linear_q_ref(float *out, int ldo, const float *x, int ldx, const ck_qmat *w, const float *bias,
                    const float *add, int ld_add, int T, int K, int N);
/* how many times, in this process, a thread of ck_linear_q's one-token decode took rows from another thread's
 * share (qlinear.c: rows_shared); for tests and benchmarks */
unsigned long ck_linear_q_steals(void);
/* out[t] = row ids[t] of the table, dequantized (ids checked by the caller); CK_OK, or CK_ENOTSUP for a
 * type without a dequantizer */
int ck_embedding_q(float *out, const ck_qmat *table, const int32_t *ids, int T, int C);
/* row r of a matrix, dequantized into y[K]; as ck_embedding_q */
int ck_qmat_row(const ck_qmat *w, int64_t r, int K, float *y);

/* ---- mixture of experts (moe.c) ---------------------------------------------------------------------
 * route[t][e] = softmax(logits[t])[e] for the k largest (the lower index first among equals; a NaN is never
 * larger, so exactly k are chosen whatever the logits), renormalized to sum 1 over the k when norm_topk, and
 * 0 for the others. E <= CK_MOE_MAX_EXPERTS, 1 <= k <= E (the compiler checks). */
#define CK_MOE_MAX_EXPERTS 512
void ck_moe_route(float *route, int ldr, const float *logits, int ldl, int T, int E, int k, int norm_topk);
void ck_moe_route_ref(float *route, int ldr, const float *logits, int ldl, int T, int E, int k, int norm_topk);
/* out[t] = sum over the experts e with route[t][e] != 0, in order, of route[t][e] * down_e(act(gate_e x) * up_e x):
 * each expert's matrices over only the rows routed to it (gate[e], up[e]: F x C; down[e]: C x F, any stored
 * format). scratch: CK_MOE_EXPERTS_SCRATCH(T, C, F) bytes. Returns ck_linear_q's code. act: a ck_act. */
#define CK_MOE_EXPERTS_SCRATCH(T, C, F) ((size_t)(T) * ((size_t)2 * (size_t)(C) + (size_t)2 * (size_t)(F) + 1) * 4)
int ck_moe_experts(float *out, int ldo, const float *x, int ldx, const float *route, int ldr, int T, int E, int C,
                   int F, const ck_qmat *gate, const ck_qmat *up, const ck_qmat *down, int act, float *scratch);
int ck_moe_experts_ref(float *out, int ldo, const float *x, int ldx, const float *route, int ldr, int T, int E, int C,
                       int F, const ck_qmat *gate, const ck_qmat *up, const ck_qmat *down, int act, float *scratch);
/* the same with float32 experts, each [F][C] (down [C][F]) one after the other: a model without stored formats */
int ck_moe_experts_f32(float *out, int ldo, const float *x, int ldx, const float *route, int ldr, int T, int E, int C,
                       int F, const float *gate, const float *up, const float *down, int act, float *scratch);
/* Backward (ckc compile --train). The router: d logits (=/+=) from d route, the choice recomputed from the
 * logits; through the renormalization and the softmax. The experts (float32): dx (=/+=), d route (=, 0 where not
 * chosen), the experts' weight gradients (+=), the forward recomputed per expert. scratch:
 * CK_MOE_EXPERTS_BACKWARD_SCRATCH(T, C, F) bytes. */
#define CK_MOE_EXPERTS_BACKWARD_SCRATCH(T, C, F) \
    ((size_t)(T) * ((size_t)4 * (size_t)(C) + (size_t)6 * (size_t)(F) + 1) * 4)
void ck_moe_route_backward(float *dlogits, int lddl, int acc, const float *droute, int lddr, const float *logits,
                           int ldl, int T, int E, int k, int norm_topk, const double *aux, float aux_coef);
/* The router's load-balancing loss, as transformers' load_balancing_loss_func (Switch Transformer):
 *   aux = coef * E * sum_e (count_e / R) * (P_e / R)
 * over every mixture layer's R rows together: count_e how often expert e is among a row's top k, P_e the sum of
 * its softmax probabilities. ck_moe_aux_stats adds one layer's rows to aux[2E + 1] (count, P, R; zero it before
 * the first layer); ck_moe_aux_loss is the loss. With aux (else NULL), ck_moe_route_backward adds the loss's
 * gradient: d p_e = coef * E * count_e / R^2 (the counts are constant), through the softmax. */
void ck_moe_aux_stats(double *aux, const float *logits, int ldl, int T, int E, int k);
double ck_moe_aux_loss(const double *aux, int E, double coef);
void ck_moe_experts_backward(float *dx, int lddx, int acc, float *droute, int lddr, float *dgate, float *dup,
                             float *ddown, const float *dy, int lddy, const float *x, int ldx, const float *route,
                             int ldr, int T, int E, int C, int F, const float *gate, const float *up,
                             const float *down, int act, float *scratch);

#ifdef __cplusplus
}
#endif
#endif /* CK_QUANT_H */
