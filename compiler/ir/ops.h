// ops.h — the op registry: every op is declared once, in CK_OPS below, and
// one OpDef entry (ir/ops.cpp) carries everything the pipeline needs about
// it: arity, shape rule, memory behaviour (view / in-place / row strides /
// side effects), the C emitter and the runtime kernel files it calls.
//
// How to add an op: add it to CK_OPS, write its OpDef entry in ir/ops.cpp,
// write the kernel (with a *_ref twin) in runtime/kernels/, and add a row to
// tests/unit/test_kernels.cpp. Nothing else should need to change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ckc {

#define CK_OPS(X)                                                                             \
    X(EMBEDDING)    /* (tokens[T] i32, table[V,C]) -> [T,C]  row gather                   */ \
    X(POS_EMBED)    /* (x[T,C], table[P,C]) -> [T,C]  x + table[pos0 + t] (learned)       */ \
    X(RMSNORM)      /* (x[T,C], w[C]) -> [T,C]  attrs eps, w_offset                       */ \
    X(LAYERNORM)    /* (x[T,C], w[C], b[C]) -> [T,C]  attr eps                            */ \
    X(MATMUL)       /* (x[T,K], w[N,K]) -> [T,N]  y = x @ w^T  (nn.Linear layout)         */ \
    X(MATMUL_ADD)   /* (x, w, c[N] or c[T,N] [, bias[N]]) -> [T,N]  y = x @ w^T + c (+b) */ \
    X(ADD)          /* (a[T,N], b[T,N] or b[N]) -> [T,N]                                  */ \
    X(SCALE)        /* (x) -> x * scale                                                   */ \
    X(SOFTCAP)      /* (x) -> cap * tanh(x / cap)                                         */ \
    X(SLICE)        /* (x[T,W]) -> [T,len]  columns start..start+len: a strided view     */ \
    X(ROPE)         /* (x[T,H*D]) -> [T,H*D]  rotary embedding at positions pos0..       */ \
    X(KV_STORE)     /* (k[T,KVH*D], v[T,KVH*D]) -> kv[2,KVH,T,D]  append to the KV store  */ \
    X(KV_ATTENTION) /* (q[T,H*D], kv) -> [T,H*D]  causal GQA over the KV store            */ \
    X(GELU)         /* (x) -> gelu(x)  attr approximate: "tanh" or "none"                 */ \
    X(GLU)          /* (gate[T,F], up[T,F]) -> [T,F]  act(gate) * up, attr act            */

enum class Op {
#define CK_OP_ENUM(name) name,
    CK_OPS(CK_OP_ENUM)
#undef CK_OP_ENUM
};

struct Node;
struct Tensor;
class EmitCtx;
using Shape = std::vector<int64_t>;

#define CK_OP_COUNT(name) +1
constexpr size_t kNumOps = 0 CK_OPS(CK_OP_COUNT);
#undef CK_OP_COUNT

constexpr uint32_t kStridedOut = 1u << 31;  // OpDef::strided bit for the output

struct OpDef {
    const char *name;
    int min_inputs, max_inputs;
    // Output shape from the input tensors; throws Error(Internal) naming the node.
    Shape (*shape)(const Node &n, const std::vector<const Tensor *> &in);
    // If set and returning a value, the output is a view into input 0 starting
    // at that element offset along the last dim: no memory, no kernel.
    std::optional<int64_t> (*view)(const Node &n);
    // Inputs whose memory the output may reuse when that input dies here.
    std::vector<int> inplace;
    // Bit i: input i may be a column view (the kernel takes a row stride);
    // kStridedOut: the output may be written with a row stride.
    uint32_t strided;
    bool side_effects;  // dead-code elimination must keep it
    void (*emit)(EmitCtx &c);
    std::vector<const char *> kernels;  // runtime sources it calls, relative to runtime/
};

const OpDef &op_def(Op op);
const char *op_name(Op op);
std::optional<Op> op_from_name(const std::string &name);
std::vector<Op> all_ops();

}  // namespace ckc
