// ops.h — the op registry: every op is declared once, in CK_OPS below, and
// one OpDef entry (ir/ops.cpp) carries everything the passes and the planner
// need about it: arity, shape and dtype rules, memory behaviour (view /
// in-place / row strides / side effects / scratch) and the reference evaluator
// used by constant folding. Its C emitter and runtime kernel files are
// codegen's (codegen/emitters.cpp), checked at start-up to cover every op.
//
// How to add an op:
//   * an elementwise unary op (SIGMOID, SOFTPLUS, ...): one row in
//     CK_UNARY_OPS (runtime/include/ck_kernels.h) with its formula, and one
//     row in kUnaryPoints (tests/unit/test_graph_kernels.cpp; a test fails for
//     an op without one). The IR op, its shape rule, constant evaluator,
//     emitter and kernel all come from the row. For exported graphs, map the
//     ATen op to it in python/ckc/export.py (_HANDLERS; test_exporter_covers_
//     every_op fails until it is mapped or listed as LLM-only).
//   * an elementwise binary op (MAXIMUM, ...): one row in CK_BINARY_OPS, the
//     same way (the fused programs of fuse_elementwise take it too).
//   * a reduction (REDUCE_MIN, ...): one row in CK_REDUCE_OPS (identity,
//     combine, finish); the same way.
//   * any other op: add it to CK_OPS, write its OpDef entry in ir/ops.cpp
//     (flags: inplace, strided, elementwise, any_dtype...; an evaluator in
//     ir/eval.cpp if it should fold), its emitter row in codegen/emitters.cpp
//     (unless it is fold-only), the kernel (with a *_ref twin) in
//     runtime/kernels/, and a row in the kernel tests.
// Passes read the flags; nothing else should need to change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ck_kernels.h"  // CK_UNARY_OPS, CK_BINARY_OPS, CK_REDUCE_OPS: one row per op

namespace ckc {

#define CK_OPS(X)                                                                                 \
    /* ---- language-model ops ------------------------------------------------------------ */ \
    X(EMBEDDING)     /* (ids[..] i32/i64, table[V,C]) -> [..,C]  row gather                   */ \
    X(POS_EMBED)     /* (x[T,C], table[P,C]) -> [T,C]  x + table[pos0 + t] (learned)          */ \
    X(RMSNORM)       /* (x[..,C], w[G]) -> [..,C]  each G-wide group; attrs eps, w_offset, group G (0: C) */ \
    X(LAYERNORM)     /* (x[..,C], w[C], b[C]) -> [..,C]  attr eps                             */ \
    X(MATMUL)        /* (a[..,M,K] or [..,K,M], b[..,K,N] or [..,N,K]) -> [..,M,N]  transpose_a/_b, alpha */ \
    X(MATMUL_ADD)    /* (a, b, c[N] or c[..,M,N] [, bias[N]]) -> alpha a@b + c (+ bias)       */ \
    X(SCALE)         /* (x) -> x * scale                                                      */ \
    X(SOFTCAP)       /* (x) -> cap * tanh(x / cap)                                            */ \
    X(CLAMP)         /* (x) -> x clamped to [min, max]  attrs min, max: either may be absent  */ \
    X(SLICE)         /* (x) -> x[.., start : start + length*step : step, ..] along axis       */ \
    X(ROPE)          /* (x[T,H*D]) -> [T,H*D]  rotary embedding at positions pos0..           */ \
    X(KV_STORE)      /* (k[T,KVH*D], v[T,KVH*D]) -> kv[2,KVH,T,D]  append to the KV store     */ \
    X(KV_ATTENTION)  /* (q[T,H*D], kv) -> [T,H*D]  causal GQA over the KV store               */ \
    X(GELU)          /* (x) -> gelu(x)  attr act: gelu_tanh | gelu                            */ \
    X(GLU)           /* (gate, up) -> act(gate) * up  attr act: silu | gelu_tanh | gelu        */ \
    X(MOE_ROUTE)     /* (logits[T,E]) -> [T,E] softmax kept at the top_k (norm_topk: sum 1), 0 elsewhere */ \
    X(MOE_EXPERTS)   /* (x[T,C], route[T,E], gate[E,F,C], up[E,F,C], down[E,C,F]) -> [T,C] the routed GLUs */ \
    /* ---- graph ops (exported PyTorch graphs) ------------------------------------------ */ \
    CK_BINARY_OPS(X) /* (a, b) or (a) op scalar (attr reverse: scalar op a), numpy broadcasting:  */ \
                     /* ADD SUB MUL DIV... (ck_kernels.h)                                      */ \
    CK_UNARY_OPS(X)  /* (x) -> formula(x): RELU SILU TANH EXP RSQRT NEG POW... (ck_kernels.h)  */ \
    X(SOFTMAX)       /* (x) -> softmax along axis; attr masked: a row of only -inf gives 0 (SDPA) */ \
    CK_REDUCE_OPS(X) /* (x) -> reduced along axis (attr keepdim): REDUCE_SUM _MEAN _MAX...       */ \
    X(RESHAPE)       /* (x) -> x viewed as attr shape (an alias of contiguous memory)         */ \
    X(TRANSPOSE)     /* (x) -> x with axes dim0 and dim1 swapped                              */ \
    X(PERMUTE)       /* (x) -> x with axes reordered by perm                                  */ \
    X(EXPAND)        /* (x) -> x broadcast to attr shape                                      */ \
    X(CAT)           /* (x0, x1, ...) -> concatenation along axis                             */ \
    X(COPY)          /* (x) -> a contiguous copy of x                                          */ \
    X(MASKED_FILL)   /* (x, mask bool) -> mask ? value : x, broadcasting                      */ \
    X(CAUSAL_MASK)   /* (x[..,S,S]) -> x with -inf above the diagonal                         */ \
    X(ATTENTION)     /* (q[..,S,D], k[..,S,D], v[..,S,D]) -> softmax(q k^T scale [causal]) v    */ \
    X(BIAS_RELU)     /* (x[..,N], bias[N]) -> relu(x + bias)                                  */ \
    X(ROTATE_HALF)   /* (x[..,D]) -> cat(-x[..,D/2:], x[..,:D/2]) along the last dim (RoPE)   */ \
    X(EW)            /* (x0, x1, ...) -> attr program over them, attr shape (ir/ew_program.h)   */ \
    /* ---- masks and indices: folded when their inputs are constants, else run (select.c) */ \
    X(CMP)           /* (a, b) or (a) vs scalar -> bool  attr fn: eq ne lt le gt ge           */ \
    X(CAST)          /* (x) -> x converted to attr dtype                                      */ \
    X(WHERE)         /* (cond, a, b) -> cond ? a : b                                          */ \
    X(TRIL)          /* (x) -> x with zeros above diagonal + attr diagonal                    */ \
    X(INDEX)         /* (x, i0, .., ik-1 int64) -> x[i0, .., ik-1], the indices broadcast      */ \
    X(INDEX_PUT)     /* (idx[..] int64, values[idx..,R..] [, x[V,R..]]) -> x (or zeros[attr rows,R..]) with */ \
                     /* values put at rows idx; attr accumulate: added (f32), as index_put_ / the embedding grad */ \
    X(CUMSUM)        /* (x f32 or i64) -> running sums along attr axis (torch.cumsum)         */ \
    X(ARANGE)        /* () -> start, start+step, ... < end, or attr shape [n] (attr dtype)    */ \
    /* ---- fold-only ops: evaluated at compile time, never run ------------------------- */ \
    X(FULL)          /* () -> attr shape filled with value (attr dtype)                       */

enum class Op {
#define CK_OP_ENUM(name, ...) name,
    CK_OPS(CK_OP_ENUM)
#undef CK_OP_ENUM
};

#define CK_OP_COUNT(name, ...) +1
constexpr size_t kNumOps = 0 CK_OPS(CK_OP_COUNT);
#undef CK_OP_COUNT

struct Node;
struct Tensor;
struct ConstData;
enum class DType;
using Shape = std::vector<int64_t>;

constexpr uint32_t kStridedOut = 1u << 31;  // OpDef::strided bit for the output

// How an op's output may alias input 0: `offset` elements into it, either
// contiguous (a RESHAPE, a SLICE of leading rows) or, when `strided`, as the
// columns offset.. of a 2-D row-major input (the fused QKV outputs).
struct ViewOf {
    int64_t offset = 0;
    bool strided = false;
};

using Inputs = std::vector<const Tensor *>;

enum class MadeBy { Exporter, LlmFrontend, Pass };
const char *made_by_name(MadeBy m);  // "exporter", "llm", "pass"

struct OpDef {
    const char *name = nullptr;
    int min_inputs = 1, max_inputs = 1;
    // Output shape from the input tensors; throws Error(Internal) naming the node.
    Shape (*shape)(const Node &n, const Inputs &in) = nullptr;
    // Output dtype (nullptr: float32).
    DType (*dtype)(const Node &n, const Inputs &in) = nullptr;
    // If the output can alias input 0, how. The planner decides whether it
    // does (a strided view needs readers that take a row stride).
    std::optional<ViewOf> (*view)(const Node &n, const Inputs &in) = nullptr;
    // Inputs whose memory the output may reuse when that input dies here.
    std::vector<int> inplace;
    // Bit i: input i may be a column view (the kernel takes a row stride);
    // kStridedOut: the output may be written with a row stride.
    uint32_t strided = 0;
    // Bit i: input i may have any dtype (ids, masks, data that is only moved);
    // every other input must be float32 when the op runs.
    uint32_t any_dtype = 0;
    bool side_effects = false;  // dead-code elimination must keep it
    // Compile-time evaluation from constant inputs (constant folding);
    // nullptr when the op is not folded.
    bool (*eval)(const Node &n, const std::vector<const ConstData *> &in, ConstData &out) = nullptr;
    bool fold_only = false;  // has no kernel: must be folded away before codegen
    // Each output element depends only on the same element of input 0 (and a scalar or a broadcast
    // operand): reshapes may move across it (eliminate_reshapes).
    bool elementwise = false;
    // Scratch bytes the kernel needs while it runs (planned into the arena); per token of the section's T when
    // scratch_per_token (an LLM op whose scratch grows with the tokens of a call).
    int64_t (*scratch)(const Node &n, const Inputs &in) = nullptr;
    bool scratch_per_token = false;
    // What puts it in a Program: the exporter (an ATen op of python/ckc/export.py maps to it; a test checks that
    // every such op has a mapping), the LLM front end alone, or a pass (a fusion or a fold).
    MadeBy made_by = MadeBy::Exporter;
    // The names of the output's dims (Tensor::dims) from the inputs'; nullptr: none.
    std::vector<std::string> (*dims)(const Node &n, const Inputs &in) = nullptr;
};

// The row of the kernel tables (runtime/include/ck_kernels.h) an op comes from, or nullptr when it is not
// one: its runtime code and its formula in double (the constant evaluator's, the reference kernels').
struct UnaryRow {     // CK_UNARY_OPS
    ck_unop code;
    double (*f)(double x, double p);  // p: the op's parameter (POW's exponent)
};
struct BinaryRow {    // CK_BINARY_OPS
    ck_binop code;
    bool ints;        // integer operands give an integer (else a float: true division)
    double (*f)(double a, double b);
};
struct ReduceRow {    // CK_REDUCE_OPS
    ck_redop code;
    double identity;
    double (*combine)(double acc, double x);
    double (*finish)(double acc, double n);
};
const UnaryRow *unary_row(Op op);
const BinaryRow *binary_row(Op op);
const ReduceRow *reduce_row(Op op);

const OpDef &op_def(Op op);
const char *op_name(Op op);
std::optional<Op> op_from_name(const std::string &name);
std::vector<Op> all_ops();

}  // namespace ckc
