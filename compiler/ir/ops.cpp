// ops.cpp — the op registry: one entry per op in CK_OPS (ir/ops.h).
//
// Each entry: arity, shape / dtype / view rules, memory behaviour, the
// evaluator constant folding uses (ir/eval.cpp) and the emitter writing the C
// call to its runtime kernel (runtime/include/ck_kernels.h). Emitters get C
// pointer expressions and row strides from the EmitCtx; they never compute
// addresses themselves, so the planner is free to place or alias tensors.
#include "ir/ops.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ck_kernels.h"
#include "codegen/emit.h"
#include "ir/eval.h"
#include "ir/graph.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

namespace {

// ---- helpers ---------------------------------------------------------------

void expect(bool ok, const Node &n, const std::string &what)
{
    if (!ok) internal_error(fmt::format("node '{}' ({}): {}", n.name, op_name(n.op), what));
}

int64_t last(const Shape &s) { return s.empty() ? 1 : s.back(); }

std::string shapes(const Inputs &in)
{
    std::string out;
    for (auto *t : in) out += (out.empty() ? "" : ", ") + t->name + shape_str(t->shape);
    return out;
}

void expect_2d(const Node &n, const Tensor &t)
{
    expect(t.shape.size() == 2, n, fmt::format("'{}' must be 2-D, is {}", t.name, shape_str(t.shape)));
}

int64_t axis_of(const Node &n, const Shape &s, const std::string &key = "axis", int64_t dflt = -1)
{
    int64_t a = n.i(key, dflt), r = static_cast<int64_t>(s.size());
    if (a < 0) a += r;
    expect(a >= 0 && a < std::max<int64_t>(r, 1), n, fmt::format("{} {} outside rank {}", key, n.i(key, dflt), r));
    return a;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// [outer, n, inner] around `axis`
void split_axis(const Shape &s, int64_t axis, int64_t &outer, int64_t &n, int64_t &inner)
{
    outer = inner = 1;
    for (int64_t i = 0; i < axis; i++) outer *= s[i];
    n = s.empty() ? 1 : s[axis];
    for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); i++) inner *= s[i];
}

// Emitters of static-shape (graph) kernels need concrete shapes.
const Shape &static_shape(const EmitCtx &c, const Tensor &t)
{
    if (shape_has_tokens(t.shape))
        internal_error(fmt::format("node '{}' ({}): needs a static shape, '{}' is {}", c.n.name, op_name(c.n.op), t.name,
                                   shape_str(t.shape)));
    return t.shape;
}

// `s` right-aligned to `rank` dims (leading 1s)
Shape aligned(const Shape &s, size_t rank)
{
    Shape out(rank - std::min(rank, s.size()), 1);
    out.insert(out.end(), s.begin(), s.end());
    return out;
}

DType same_dtype(const Node &, const Inputs &in) { return in.empty() ? DType::F32 : in[0]->dtype; }
DType attr_dtype(const Node &n, const Inputs &) { return dtype_from_name(n.s("dtype")); }
DType bool_dtype(const Node &, const Inputs &) { return DType::Bool; }

// ---- EMBEDDING ------------------------------------------------------------------
Shape embedding_shape(const Node &n, const Inputs &in)
{
    expect(in[0]->dtype == DType::I32 || in[0]->dtype == DType::I64, n, "ids must be i32 or i64");
    expect(in[1]->shape.size() == 2, n, "table must be [vocab, dim]: " + shapes(in));
    Shape out = in[0]->shape;
    out.push_back(in[1]->shape[1]);
    return out;
}
void embedding_emit(EmitCtx &c)
{
    int64_t C = c.tin(1).shape[1], V = c.tin(1).shape[0];
    if (c.tin(0).dtype == DType::I32) {  // LM tokens, checked by ck_model_embed_tokens
        c.w.line(fmt::format("ck_embedding({}, {}, {}, {}, {});", c.out(), c.in(1), c.in(0), c.rows(c.n.output), C));
        return;
    }
    c.w.open(fmt::format("if (ck_embedding_i64({}, {}, {}, {}, {}, {}) >= 0)", c.out(), c.in(1), c.in(0),
                         c.numel(c.n.inputs[0]), C, V));
    c.w.line(fmt::format("return ck_fail(CK_EINVAL, \"'{}': an id of '{}' is outside the vocabulary [0, {})\");",
                         c.n.name, c.n.inputs[0], V));
    c.w.close();
}

// ---- POS_EMBED ------------------------------------------------------------------
Shape pos_embed_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    expect(in[1]->shape.size() == 2 && in[1]->shape[1] == in[0]->shape[1], n, "table must be [positions, dim]: " + shapes(in));
    return in[0]->shape;
}
void pos_embed_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_pos_embed({}, {}, {}, {}, {}, pos0);", c.out(), c.in(0), c.in(1), c.rows(c.n.output),
                         last(c.tin(0).shape)));
}

// ---- normalization --------------------------------------------------------------
std::string row_count(EmitCtx &c, const Tensor &t)
{
    if (shape_has_tokens(t.shape)) return c.rows(t.name);
    return std::to_string(shape_numel_fixed(t.shape) / last(t.shape));
}
Shape rmsnorm_shape(const Node &n, const Inputs &in)
{
    expect(in[1]->shape == Shape{last(in[0]->shape)}, n, "weight must be [dim]: " + shapes(in));
    expect(n.has("eps"), n, "needs attr eps");
    return in[0]->shape;
}
void rmsnorm_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_rmsnorm({}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), row_count(c, c.tin(0)),
                         last(c.tin(0).shape), c_float(c.n.f("eps")), c_float(c.n.f("w_offset", 0.0))));
}
Shape layernorm_shape(const Node &n, const Inputs &in)
{
    Shape c{last(in[0]->shape)};
    expect(in[1]->shape == c && in[2]->shape == c, n, "weight and bias must be [dim]: " + shapes(in));
    expect(n.has("eps"), n, "needs attr eps");
    return in[0]->shape;
}
void layernorm_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_layernorm({}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), c.in(2),
                         row_count(c, c.tin(0)), last(c.tin(0).shape), c_float(c.n.f("eps"))));
}

// ---- elementwise on a whole tensor ------------------------------------------------
Shape same_shape(const Node &, const Inputs &in) { return in[0]->shape; }
void scale_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_scale({}, {}, {}, {});", c.out(), c.in(0), c.numel(c.n.output), c_float(c.n.f("scale"))));
}
void softcap_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_softcap({}, {}, {}, {});", c.out(), c.in(0), c.numel(c.n.output), c_float(c.n.f("cap"))));
}
std::string act_enum(const Node &n)
{
    const std::string &a = n.s("act");
    if (a == "silu") return "CK_ACT_SILU";
    if (a == "gelu_tanh") return "CK_ACT_GELU_TANH";
    if (a == "gelu") return "CK_ACT_GELU";
    internal_error("node '" + n.name + "': unknown act '" + a + "'");
}
Shape gelu_shape(const Node &n, const Inputs &in)
{
    act_enum(n);
    return in[0]->shape;
}
void gelu_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_gelu({}, {}, {}, {});", c.out(), c.in(0), c.numel(c.n.output), act_enum(c.n)));
}
void unary_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_unary({}, {}, {}, CK_UN_{}, {});", c.out(), c.in(0), c.numel(c.n.output), op_name(c.n.op),
                         c_float(c.n.f("exponent", 0.0))));
}

// ---- binary (broadcasting) ----------------------------------------------------------
Shape broadcast(const Node &n, const Shape &a, const Shape &b)
{
    size_t r = std::max(a.size(), b.size());
    Shape A = aligned(a, r), B = aligned(b, r), out(r);
    for (size_t i = 0; i < r; i++) {
        expect(A[i] == B[i] || A[i] == 1 || B[i] == 1, n,
               fmt::format("shapes {} and {} do not broadcast", shape_str(a), shape_str(b)));
        out[i] = A[i] == 1 ? B[i] : A[i];
    }
    return out;
}
Shape binary_shape(const Node &n, const Inputs &in)
{
    if (in.size() == 1) {
        expect(n.has("scalar"), n, "one operand needs attr scalar");
        return in[0]->shape;
    }
    return broadcast(n, in[0]->shape, in[1]->shape);
}
DType binary_dtype(const Node &n, const Inputs &in)
{
    for (auto *t : in)
        if (is_float(t->dtype)) return DType::F32;
    if (n.op == Op::DIV || (in.size() == 1 && n.f("scalar") != std::floor(n.f("scalar")))) return DType::F32;
    return in[0]->dtype;
}
std::string binop_enum(Op op)
{
    switch (op) {
    case Op::ADD: return "CK_BIN_ADD";
    case Op::SUB: return "CK_BIN_SUB";
    case Op::MUL: return "CK_BIN_MUL";
    case Op::DIV: return "CK_BIN_DIV";
    default: internal_error(std::string("not a binary op: ") + op_name(op));
    }
}
void binary_emit(EmitCtx &c)
{
    const Node &n = c.n;
    if (c.tout().dtype != DType::F32)
        input_error(fmt::format("node '{}' ({}) on {} values has no kernel (fold it or cast it)", n.name, op_name(n.op),
                                   dtype_name(c.tout().dtype)));
    if (n.inputs.size() == 1) {
        c.w.line(fmt::format("ck_binary_scalar({}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.numel(n.output),
                             c_float(n.f("scalar")), binop_enum(n.op), n.i("reverse", 0)));
        return;
    }
    const Shape &a = c.tin(0).shape, &b = c.tin(1).shape, &o = c.tout().shape;
    if (n.op == Op::ADD && a == b) {  // the LM residual add (T-shaped) and equal shapes
        c.w.line(fmt::format("ck_add({}, {}, {}, {});", c.out(), c.in(0), c.in(1), c.numel(n.output)));
        return;
    }
    if (n.op == Op::ADD && b == Shape{last(a)} && a == o) {  // a bias over rows
        c.w.line(fmt::format("ck_add_bias({}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), row_count(c, c.tin(0)), last(a)));
        return;
    }
    const Shape &so = static_shape(c, c.tout());
    size_t r = so.size();
    c.w.open("");
    c.w.line(fmt::format("static const int64_t so[] = {}, sa[] = {}, sb[] = {};", c_shape(so), c_shape(aligned(a, r)),
                         c_shape(aligned(b, r))));
    c.w.line(fmt::format("ck_binary({}, so, {}, {}, sa, {}, sb, {});", c.out(), r, c.in(0), c.in(1), binop_enum(n.op)));
    c.w.close();
}

// ---- MATMUL / MATMUL_ADD ----------------------------------------------------------
struct MM {
    int64_t batch, M, N, K;
    bool b_batched, trans_b;
};
MM matmul_dims(const Node &n, const Inputs &in)
{
    const Shape &a = in[0]->shape, &b = in[1]->shape;
    bool tb = n.i("transpose_b", 0) != 0;
    expect(a.size() >= 2 && b.size() >= 2, n, "operands need rank >= 2: " + shapes(in));
    MM d;
    d.trans_b = tb;
    d.M = a[a.size() - 2];
    d.K = a.back();
    d.N = tb ? b[b.size() - 2] : b.back();
    int64_t kb = tb ? b.back() : b[b.size() - 2];
    expect(kb == d.K, n, fmt::format("inner dims differ ({} vs {}): {}", d.K, kb, shapes(in)));
    d.b_batched = b.size() > 2;
    if (d.b_batched)
        expect(b.size() == a.size() && std::equal(a.begin(), a.end() - 2, b.begin()), n,
               "batched B must have A's batch dims: " + shapes(in));
    d.batch = 1;
    for (size_t i = 0; i + 2 < a.size(); i++) d.batch *= a[i];
    return d;
}
Shape matmul_shape(const Node &n, const Inputs &in)
{
    MM d = matmul_dims(n, in);
    Shape out(in[0]->shape.begin(), in[0]->shape.end() - 1);
    out.push_back(d.N);
    if (n.op == Op::MATMUL_ADD) {
        const Shape &c = in[2]->shape;
        expect(c == Shape{d.N} || c == out, n, "addend must be [N] or the output's shape: " + shapes(in));
        if (in.size() == 4) expect(c == out && in[3]->shape == Shape{d.N}, n, "bias must be [N]: " + shapes(in));
    }
    return out;
}
void matmul_emit(EmitCtx &c)
{
    const Node &n = c.n;
    Inputs in;
    for (auto &i : n.inputs) in.push_back(&c.g.tensor(i));
    MM d = matmul_dims(n, in);
    std::string bias = "NULL", add = "NULL", ld_add = "0";
    if (n.op == Op::MATMUL_ADD) {
        if (c.tin(2).shape.size() == 1) {
            bias = c.in(2);
        } else {
            add = c.in(2);
            ld_add = c.ld_in(2);
            if (n.inputs.size() == 4) bias = c.in(3);
        }
    }
    double alpha = n.f("alpha", 1.0);
    bool strided = c.ld_in(0) != std::to_string(d.K) || c.ld_out() != std::to_string(d.N) ||
                   (add != "NULL" && ld_add != std::to_string(d.N));
    if (!d.b_batched && d.trans_b && alpha == 1.0) {
        // weights in nn.Linear layout: the threaded, row-stride-aware GEMM/GEMV
        std::string rows = shape_has_tokens(c.tin(0).shape) ? c.rows(n.inputs[0]) : std::to_string(d.batch * d.M);
        c.w.line(fmt::format("ck_linear({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.ld_out(), c.in(0),
                             c.ld_in(0), c.in(1), bias, add, ld_add, rows, d.K, d.N));
        return;
    }
    if (strided) internal_error("node '" + n.name + "': ck_matmul needs contiguous operands");
    c.w.line(fmt::format("ck_matmul({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), add, bias,
                         d.batch, d.M, d.N, d.K, d.b_batched ? 1 : 0, d.trans_b ? 1 : 0, c_float(alpha)));
}

// ---- SLICE ---------------------------------------------------------------------------
Shape slice_shape(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    int64_t axis = axis_of(n, s), start = n.i("start"), len = n.i("length"), step = n.i("step", 1);
    expect(step >= 1 && start >= 0 && len > 0 && start + (len - 1) * step < s[axis], n,
           fmt::format("slice {}:{}:{} of axis {} (size {}) is out of range", start, start + len * step, step, axis, s[axis]));
    Shape out = s;
    out[axis] = len;
    return out;
}
std::optional<ViewOf> slice_view(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    int64_t axis = axis_of(n, s), start = n.i("start"), step = n.i("step", 1);
    if (step != 1) return std::nullopt;
    int64_t outer, size, inner;
    split_axis(s, axis, outer, size, inner);
    if (outer == 1 || (axis == 0 && !shape_has_tokens(s))) return ViewOf{start * inner, false};  // leading rows: contiguous
    if (s.size() >= 2 && axis == static_cast<int64_t>(s.size()) - 1) return ViewOf{start, true};    // columns: a row stride
    return std::nullopt;
}
void slice_emit(EmitCtx &c)
{
    if (c.aliased()) return;
    const Shape &s = static_shape(c, c.tin(0));
    int64_t axis = axis_of(c.n, s), outer, n, inner;
    split_axis(s, axis, outer, n, inner);
    c.w.line(fmt::format("ck_slice_copy({}, {}, {}, {}, {}, {}, {}, {}, sizeof *{});", c.out(), c.in(0), outer, n, inner,
                         c.n.i("start"), c.n.i("length"), c.n.i("step", 1), c.out()));
}

// ---- ROPE / KV (language models) ---------------------------------------------------
Shape rope_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    int64_t h = n.i("heads"), d = n.i("head_dim"), r = n.i("rot_dim");
    expect(h * d == in[0]->shape[1], n, fmt::format("heads {} x head_dim {} != width of {}", h, d, shapes(in)));
    expect(r > 0 && r % 2 == 0 && r <= d, n, fmt::format("rot_dim {} must be even and <= head_dim {}", r, d));
    return in[0]->shape;
}
void rope_emit(EmitCtx &c)
{
    std::string t = c.rope_table(c.n);
    c.w.line(fmt::format("ck_rope({}, {}, {}, {}, {}, {}, {}, {}, pos0, {}_cos, {}_sin);", c.out(), c.ld_out(),
                         c.in(0), c.ld_in(0), c.rows(c.n.output), c.n.i("heads"), c.n.i("head_dim"),
                         c.n.i("rot_dim"), t, t));
}
// The KV store of a layer is the KV cache when it is enabled, otherwise the
// kv tensor itself: this call's keys/values in the arena ([2][KVH][T][D]).
Shape kv_store_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    int64_t kvh = n.i("kv_heads"), d = n.i("head_dim");
    expect(in[0]->shape == in[1]->shape && in[0]->shape[1] == kvh * d, n, "k and v must be [T, kv_heads*head_dim]: " + shapes(in));
    return {2, kvh, in[0]->shape[0], d};
}
void kv_store_emit(EmitCtx &c)
{
    std::string kv = c.name(c.n.output);
    int64_t kvh = c.n.i("kv_heads"), d = c.n.i("head_dim");
    c.w.line(fmt::format("float *{0}_k = m->kv_enabled ? m->k_cache + (size_t)layer * {1} * m->kv_capacity * {2} : {3};",
                         kv, kvh, d, c.out()));
    c.w.line(fmt::format("float *{0}_v = m->kv_enabled ? m->v_cache + (size_t)layer * {1} * m->kv_capacity * {2} : {3} + (size_t){1} * T * {2};",
                         kv, kvh, d, c.out()));
    c.w.line(fmt::format("int {0}_cap = m->kv_enabled ? m->kv_capacity : T;", kv));
    c.w.line(fmt::format("ck_kv_store({0}_k, {0}_v, {0}_cap, m->kv_enabled ? pos0 : 0, {1}, {2}, {3}, {4}, T, {5}, {6});",
                         kv, c.in(0), c.ld_in(0), c.in(1), c.ld_in(1), kvh, d));
}
Shape kv_attention_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    int64_t h = n.i("heads"), kvh = n.i("kv_heads"), d = n.i("head_dim");
    expect(in[0]->shape[1] == h * d, n, "q must be [T, heads*head_dim]: " + shapes(in));
    expect(h % kvh == 0, n, fmt::format("heads {} not a multiple of kv_heads {}", h, kvh));
    expect(in[1]->shape == Shape({2, kvh, in[0]->shape[0], d}), n, "kv must come from KV_STORE: " + shapes(in));
    expect(d <= 512, n, fmt::format("head_dim {} exceeds the kernel limit 512", d));
    return in[0]->shape;
}
void kv_attention_emit(EmitCtx &c)
{
    std::string kv = c.name(c.n.inputs[1]);
    c.w.line(fmt::format("ck_attention({}, {}, {}, {}, {}_k, {}_v, {}_cap, T, m->kv_enabled ? pos0 : 0, {}, {}, {}, {}, {}, {});",
                         c.out(), c.ld_out(), c.in(0), c.ld_in(0), kv, kv, kv, c.n.i("heads"), c.n.i("kv_heads"),
                         c.n.i("head_dim"), c.param("scale", 0.0, false), c.param("window", 0, true),
                         c.param("softcap", 0.0, false)));
}

// ---- GLU -------------------------------------------------------------------------------
Shape glu_shape(const Node &n, const Inputs &in)
{
    expect(in[0]->shape == in[1]->shape, n, "gate and up must match: " + shapes(in));
    act_enum(n);
    return in[0]->shape;
}
void glu_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_glu({}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.ld_out(), c.in(0), c.ld_in(0), c.in(1),
                         c.ld_in(1), row_count(c, c.tin(0)), last(c.tin(0).shape), act_enum(c.n)));
}

// ---- SOFTMAX / reductions / CAUSAL_MASK ---------------------------------------------
Shape reduce_shape(const Node &n, const Inputs &in)
{
    Shape s = in[0]->shape;
    int64_t axis = axis_of(n, s);
    if (n.i("keepdim", 0))
        s[axis] = 1;
    else
        s.erase(s.begin() + axis);
    return s;
}
void softmax_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    int64_t outer, n, inner;
    split_axis(s, axis_of(c.n, s), outer, n, inner);
    c.w.line(fmt::format("ck_softmax({}, {}, {}, {}, {});", c.out(), c.in(0), outer, n, inner));
}
void reduce_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    int64_t outer, n, inner;
    split_axis(s, axis_of(c.n, s), outer, n, inner);
    const char *op = c.n.op == Op::REDUCE_SUM ? "CK_RED_SUM" : c.n.op == Op::REDUCE_MEAN ? "CK_RED_MEAN" : "CK_RED_MAX";
    c.w.line(fmt::format("ck_reduce({}, {}, {}, {}, {}, {});", c.out(), c.in(0), outer, n, inner, op));
}
Shape causal_mask_shape(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    expect(s.size() >= 2 && s[s.size() - 1] == s[s.size() - 2], n, "needs square last two dims: " + shapes(in));
    return s;
}
void causal_mask_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    int64_t S = s.back();
    c.w.line(fmt::format("ck_causal_mask({}, {}, {}, {});", c.out(), c.in(0), shape_numel_fixed(s) / (S * S), S));
}

// ---- layout: RESHAPE, TRANSPOSE, PERMUTE, EXPAND, CAT, COPY ----------------------------
Shape reshape_shape(const Node &n, const Inputs &in)
{
    Shape s = n.ints("shape");
    expect(shape_numel_fixed(s) == shape_numel_fixed(in[0]->shape) && !shape_has_tokens(in[0]->shape), n,
           fmt::format("cannot view {} as {}", shape_str(in[0]->shape), shape_str(s)));
    return s;
}
std::optional<ViewOf> whole_view(const Node &, const Inputs &) { return ViewOf{0, false}; }
void reshape_emit(EmitCtx &c)  // only when the input is a column view: copy it contiguous
{
    if (c.aliased()) return;
    c.w.line(fmt::format("ck_copy_rows({}, {}, {}, {}, {});", c.out(), c.in(0), c.ld_in(0), row_count(c, c.tin(0)),
                         last(c.tin(0).shape)));
}
std::vector<int> perm_of(const Node &n, size_t rank)
{
    std::vector<int> perm(rank);
    for (size_t i = 0; i < rank; i++) perm[i] = static_cast<int>(i);
    if (n.op == Op::TRANSPOSE) {
        int64_t a = n.i("dim0"), b = n.i("dim1"), r = static_cast<int64_t>(rank);
        if (a < 0) a += r;
        if (b < 0) b += r;
        expect(a >= 0 && a < r && b >= 0 && b < r, n, "dims outside the rank");
        std::swap(perm[a], perm[b]);
        return perm;
    }
    const auto &p = n.ints("perm");
    expect(p.size() == rank, n, "perm must list every axis once");
    std::vector<bool> seen(rank);
    for (size_t i = 0; i < rank; i++) {
        int64_t a = p[i] < 0 ? p[i] + static_cast<int64_t>(rank) : p[i];
        expect(a >= 0 && a < static_cast<int64_t>(rank) && !seen[a], n, "perm must list every axis once");
        seen[a] = true;
        perm[i] = static_cast<int>(a);
    }
    return perm;
}
Shape permute_shape(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    std::vector<int> perm = perm_of(n, s.size());
    Shape out(s.size());
    for (size_t i = 0; i < s.size(); i++) out[i] = s[perm[i]];
    return out;
}
void permute_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    std::vector<int> perm = perm_of(c.n, s.size());
    c.w.open("");
    c.w.line(fmt::format("static const int64_t shape[] = {};", c_shape(s)));
    c.w.line(fmt::format("static const int perm[] = {{{}}};", join([&] {
                             std::vector<std::string> v;
                             for (int p : perm) v.push_back(std::to_string(p));
                             return v;
                         }(), ", ")));
    c.w.line(fmt::format("ck_permute({}, {}, {}, shape, perm, sizeof *{});", c.out(), c.in(0), s.size(), c.out()));
    c.w.close();
}
Shape expand_shape(const Node &n, const Inputs &in)
{
    Shape s = n.ints("shape");
    Shape x = aligned(in[0]->shape, s.size());
    expect(in[0]->shape.size() <= s.size(), n, "cannot expand to a lower rank");
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == -1) s[i] = x[i];
        expect(x[i] == s[i] || x[i] == 1, n, fmt::format("cannot expand {} to {}", shape_str(in[0]->shape), shape_str(s)));
    }
    return s;
}
void expand_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    c.w.open("");
    c.w.line(fmt::format("static const int64_t so[] = {}, sx[] = {};", c_shape(o), c_shape(aligned(c.tin(0).shape, o.size()))));
    c.w.line(fmt::format("ck_expand({}, so, {}, {}, sx, sizeof *{});", c.out(), o.size(), c.in(0), c.out()));
    c.w.close();
}
Shape cat_shape(const Node &n, const Inputs &in)
{
    Shape out = in[0]->shape;
    int64_t axis = axis_of(n, out);
    out[axis] = 0;
    for (auto *t : in) {
        expect(t->shape.size() == out.size() && t->dtype == in[0]->dtype, n, "inputs must have one rank and dtype: " + shapes(in));
        for (size_t i = 0; i < out.size(); i++)
            expect(static_cast<int64_t>(i) == axis || t->shape[i] == in[0]->shape[i], n, "shapes differ off the axis: " + shapes(in));
        out[axis] += t->shape[axis];
    }
    return out;
}
void cat_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    int64_t axis = axis_of(c.n, o), outer, n, inner, at = 0;
    split_axis(o, axis, outer, n, inner);
    for (size_t i = 0; i < c.n.inputs.size(); i++) {
        int64_t ni = c.tin(i).shape[axis];
        c.w.line(fmt::format("ck_cat_part({}, {}, {}, {}, {}, {}, {}, sizeof *{});", c.out(), c.in(i), outer, n, ni, at,
                             inner, c.out()));
        at += ni;
    }
}
void copy_emit(EmitCtx &c)
{
    if (c.ld_in(0) != std::to_string(last(c.tin(0).shape))) {
        c.w.line(fmt::format("ck_copy_rows({}, {}, {}, {}, {});", c.out(), c.in(0), c.ld_in(0), row_count(c, c.tin(0)),
                             last(c.tin(0).shape)));
        return;
    }
    c.w.line(fmt::format("memcpy({}, {}, {} * sizeof *{});", c.out(), c.in(0), c.numel(c.n.output), c.out()));
}

// ---- MASKED_FILL / ATTENTION / BIAS_RELU ------------------------------------------------
Shape masked_fill_shape(const Node &n, const Inputs &in)
{
    expect(in[1]->dtype == DType::Bool, n, "mask must be bool: " + shapes(in));
    expect(broadcast(n, in[0]->shape, in[1]->shape) == in[0]->shape, n, "mask must broadcast to x: " + shapes(in));
    expect(n.has("value"), n, "needs attr value");
    return in[0]->shape;
}
void masked_fill_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    c.w.open("");
    c.w.line(fmt::format("static const int64_t sx[] = {}, sm[] = {};", c_shape(s), c_shape(aligned(c.tin(1).shape, s.size()))));
    c.w.line(fmt::format("ck_masked_fill({}, sx, {}, {}, {}, sm, {});", c.out(), s.size(), c.in(0), c.in(1),
                         c_float(c.n.f("value"))));
    c.w.close();
}
// ATTENTION: heads == 0: q [.., Sq, D], k/v [.., Sk, D] (every leading index a
// slice); heads == H: q [B, Sq, H*D], k/v [B, Sk, H*D], the heads side by side
// in each row (no transpose needed), output in the layout of q.
struct Att {
    int64_t B, H, Sq, Sk, D;
};
Att attention_dims(const Node &n, const Inputs &in)
{
    const Shape &q = in[0]->shape, &k = in[1]->shape, &v = in[2]->shape;
    Att a;
    int64_t heads = n.i("heads", 0);
    if (heads > 0) {
        expect(q.size() == 3 && k.size() == 3 && v == k && q[0] == k[0] && q[2] == k[2], n,
               "with heads, q, k, v must be [B, S, heads*D] with one B and width: " + shapes(in));
        expect(q[2] % heads == 0, n, fmt::format("width {} is not a multiple of heads {}", q[2], heads));
        a = {q[0], heads, q[1], k[1], q[2] / heads};
    } else {
        expect(q.size() >= 2 && k.size() == q.size() && v == k, n, "q, k, v must be [..., S, D] with one rank: " + shapes(in));
        expect(std::equal(q.begin(), q.end() - 2, k.begin()) && q.back() == k.back(), n, "q and k differ: " + shapes(in));
        a.Sq = q[q.size() - 2];
        a.Sk = k[k.size() - 2];
        a.D = q.back();
        a.B = 1;
        a.H = shape_numel_fixed(q) / (a.Sq * a.D);
    }
    if (n.i("causal", 0)) expect(a.Sq <= a.Sk, n, "causal attention needs Sq <= Sk");
    return a;
}
Shape attention_shape(const Node &n, const Inputs &in)
{
    attention_dims(n, in);
    expect(n.has("scale"), n, "needs attr scale");
    return in[0]->shape;
}
bool use_flash(const Node &n, const Att &a)
{
    std::string impl = n.has("impl") ? n.s("impl") : "auto";
    return impl == "flash" || (impl == "auto" && a.Sk > 512);
}
int64_t attention_scratch(const Node &n, const Inputs &in)
{
    Att a = attention_dims(n, in);
    int64_t BH = a.B * a.H;
    return static_cast<int64_t>(use_flash(n, a) ? ck_attention_flash_scratch(BH, a.Sq, a.Sk, a.D)
                                                : ck_attention_std_scratch(BH, a.Sq, a.Sk, a.D));
}
void attention_emit(EmitCtx &c)
{
    Inputs in;
    for (auto &i : c.n.inputs) in.push_back(&c.g.tensor(i));
    Att a = attention_dims(c.n, in);
    bool heads = c.n.i("heads", 0) > 0;
    // strides of every operand from its row stride (a column view is read in place)
    auto seq = [&](const std::string &ld, int64_t S) {
        return heads ? fmt::format("ck_seq_bshd({}, {}, {})", S, ld, a.D)
                     : fmt::format("ck_seq_bhsd({}, {}, {})", a.H, S, ld);
    };
    c.w.line(fmt::format("ck_attention_{}({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});",
                         use_flash(c.n, a) ? "flash" : "std", c.out(), seq(c.ld_out(), a.Sq), c.in(0),
                         seq(c.ld_in(0), a.Sq), c.in(1), seq(c.ld_in(1), a.Sk), c.in(2), seq(c.ld_in(2), a.Sk), a.B,
                         a.H, a.Sq, a.Sk, a.D, c_float(c.n.f("scale")), c.n.i("causal", 0), c.scratch()));
}
Shape bias_relu_shape(const Node &n, const Inputs &in)
{
    expect(in[1]->shape == Shape{last(in[0]->shape)}, n, "bias must be [N]: " + shapes(in));
    return in[0]->shape;
}
void bias_relu_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_bias_relu({}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), row_count(c, c.tin(0)),
                         last(c.tin(0).shape)));
}

// ---- fold-only ----------------------------------------------------------------------------
Shape arange_shape(const Node &n, const Inputs &)
{
    double start = n.f("start"), end = n.f("end"), step = n.f("step", 1.0);
    expect(step != 0, n, "step must not be 0");
    int64_t len = static_cast<int64_t>(std::ceil((end - start) / step));
    return {std::max<int64_t>(len, 0)};
}
Shape full_shape(const Node &n, const Inputs &) { return n.ints("shape"); }
Shape cmp_shape(const Node &n, const Inputs &in)
{
    const std::string &fn = n.s("fn");
    expect(fn == "eq" || fn == "ne" || fn == "lt" || fn == "le" || fn == "gt" || fn == "ge", n, "unknown fn " + fn);
    return binary_shape(n, in);
}
Shape where_shape(const Node &n, const Inputs &in)
{
    return broadcast(n, broadcast(n, in[0]->shape, in[1]->shape), in[2]->shape);
}
DType where_dtype(const Node &, const Inputs &in) { return in[1]->dtype; }
Shape tril_shape(const Node &n, const Inputs &in)
{
    expect(in[0]->shape.size() >= 2, n, "needs rank >= 2");
    return in[0]->shape;
}
void no_emit(EmitCtx &) {}

// ---- the table --------------------------------------------------------------------------

constexpr uint32_t in0 = 1, in1 = 2, in2 = 4, all_inputs = ~0u >> 1;

struct Def {
    OpDef d;
    Def(const char *name, int lo, int hi, Shape (*shape)(const Node &, const Inputs &), void (*emit)(EmitCtx &),
        std::vector<const char *> kernels)
    {
        d.name = name;
        d.min_inputs = lo;
        d.max_inputs = hi;
        d.shape = shape;
        d.emit = emit;
        d.kernels = std::move(kernels);
    }
    Def &dtype(DType (*f)(const Node &, const Inputs &)) { d.dtype = f; return *this; }
    Def &view(std::optional<ViewOf> (*f)(const Node &, const Inputs &)) { d.view = f; return *this; }
    Def &inplace(std::vector<int> v) { d.inplace = std::move(v); return *this; }
    Def &strided(uint32_t bits) { d.strided = bits; return *this; }
    Def &side_effects() { d.side_effects = true; return *this; }
    Def &eval(bool (*f)(const Node &, const std::vector<const ConstData *> &, ConstData &)) { d.eval = f; return *this; }
    Def &fold_only() { d.fold_only = true; return *this; }
    Def &scratch(int64_t (*f)(const Node &, const Inputs &)) { d.scratch = f; return *this; }
    Def &any_dtype(uint32_t bits) { d.any_dtype = bits; return *this; }
    Def &elementwise() { d.elementwise = true; return *this; }
};

const char *const K_EMB = "kernels/embedding.c", *const K_NORM = "kernels/norm.c", *const K_LIN = "kernels/linear.c",
                  *const K_EW = "kernels/elementwise.c", *const K_BIN = "kernels/binary.c", *const K_ROPE = "kernels/rope.c",
                  *const K_ATT = "kernels/attention.c", *const K_RED = "kernels/reduce.c", *const K_LAY = "kernels/layout.c";

std::vector<OpDef> build_table()
{
    std::vector<Def> t = {
        // ---- language-model ops
        Def("EMBEDDING", 2, 2, embedding_shape, embedding_emit, {K_EMB}).eval(eval_embedding).any_dtype(in0),
        Def("POS_EMBED", 2, 2, pos_embed_shape, pos_embed_emit, {K_EMB}).inplace({0}),
        Def("RMSNORM", 2, 2, rmsnorm_shape, rmsnorm_emit, {K_NORM}).inplace({0}),
        Def("LAYERNORM", 3, 3, layernorm_shape, layernorm_emit, {K_NORM}).inplace({0}),
        Def("MATMUL", 2, 2, matmul_shape, matmul_emit, {K_LIN}).strided(in0 | kStridedOut),
        Def("MATMUL_ADD", 3, 4, matmul_shape, matmul_emit, {K_LIN}).inplace({2}).strided(in0 | in2 | kStridedOut),
        Def("ADD", 1, 2, binary_shape, binary_emit, {K_EW, K_BIN}).dtype(binary_dtype).inplace({0, 1}).eval(eval_binary).elementwise(),
        Def("SCALE", 1, 1, same_shape, scale_emit, {K_EW}).inplace({0}).elementwise(),
        Def("SOFTCAP", 1, 1, same_shape, softcap_emit, {K_EW}).inplace({0}).elementwise(),
        Def("SLICE", 1, 1, slice_shape, slice_emit, {K_LAY}).dtype(same_dtype).view(slice_view).strided(in0 | kStridedOut).eval(eval_slice).any_dtype(all_inputs),
        Def("ROPE", 1, 1, rope_shape, rope_emit, {K_ROPE}).inplace({0}).strided(in0 | kStridedOut),
        Def("KV_STORE", 2, 2, kv_store_shape, kv_store_emit, {K_ATT}).strided(in0 | in1).side_effects(),
        Def("KV_ATTENTION", 2, 2, kv_attention_shape, kv_attention_emit, {K_ATT}).strided(in0 | kStridedOut),
        Def("GELU", 1, 1, gelu_shape, gelu_emit, {K_EW}).inplace({0}).eval(eval_unary).elementwise(),
        Def("GLU", 2, 2, glu_shape, glu_emit, {K_EW}).inplace({0, 1}).strided(in0 | in1 | kStridedOut),
        // ---- graph ops
        Def("SUB", 1, 2, binary_shape, binary_emit, {K_BIN}).dtype(binary_dtype).inplace({0, 1}).eval(eval_binary).elementwise(),
        Def("MUL", 1, 2, binary_shape, binary_emit, {K_BIN}).dtype(binary_dtype).inplace({0, 1}).eval(eval_binary).elementwise(),
        Def("DIV", 1, 2, binary_shape, binary_emit, {K_BIN}).dtype(binary_dtype).inplace({0, 1}).eval(eval_binary).elementwise(),
        // every row of CK_UNARY_OPS (runtime/include/ck_kernels.h), in that order
#define CK_UNARY_DEF(name, formula) \
        Def(#name, 1, 1, same_shape, unary_emit, {K_EW}).inplace({0}).eval(eval_unary).elementwise(),
        CK_UNARY_OPS(CK_UNARY_DEF)
#undef CK_UNARY_DEF
        Def("SOFTMAX", 1, 1, same_shape, softmax_emit, {K_RED}).inplace({0}),
        Def("REDUCE_SUM", 1, 1, reduce_shape, reduce_emit, {K_RED}).eval(eval_reduce),
        Def("REDUCE_MEAN", 1, 1, reduce_shape, reduce_emit, {K_RED}).eval(eval_reduce),
        Def("REDUCE_MAX", 1, 1, reduce_shape, reduce_emit, {K_RED}).eval(eval_reduce),
        Def("RESHAPE", 1, 1, reshape_shape, reshape_emit, {K_LAY}).dtype(same_dtype).view(whole_view).strided(in0).eval(eval_reshape).any_dtype(all_inputs),
        Def("TRANSPOSE", 1, 1, permute_shape, permute_emit, {K_LAY}).dtype(same_dtype).eval(eval_permute).any_dtype(all_inputs),
        Def("PERMUTE", 1, 1, permute_shape, permute_emit, {K_LAY}).dtype(same_dtype).eval(eval_permute).any_dtype(all_inputs),
        Def("EXPAND", 1, 1, expand_shape, expand_emit, {K_LAY}).dtype(same_dtype).eval(eval_expand).any_dtype(all_inputs),
        Def("CAT", 1, 64, cat_shape, cat_emit, {K_LAY}).dtype(same_dtype).eval(eval_cat).any_dtype(all_inputs),
        Def("COPY", 1, 1, same_shape, copy_emit, {K_LAY}).dtype(same_dtype).strided(in0).eval(eval_reshape).any_dtype(all_inputs),
        Def("MASKED_FILL", 2, 2, masked_fill_shape, masked_fill_emit, {K_BIN}).inplace({0}).eval(eval_masked_fill).any_dtype(in1),
        Def("CAUSAL_MASK", 1, 1, causal_mask_shape, causal_mask_emit, {K_RED}).inplace({0}),
        Def("ATTENTION", 3, 3, attention_shape, attention_emit, {K_ATT}).scratch(attention_scratch).strided(in0 | in1 | in2 | kStridedOut),
        Def("BIAS_RELU", 2, 2, bias_relu_shape, bias_relu_emit, {K_EW}).inplace({0}),
        // ---- fold-only
        Def("ARANGE", 0, 0, arange_shape, no_emit, {}).dtype(attr_dtype).eval(eval_arange).fold_only(),
        Def("FULL", 0, 0, full_shape, no_emit, {}).dtype(attr_dtype).eval(eval_full).fold_only(),
        Def("CMP", 1, 2, cmp_shape, no_emit, {}).dtype(bool_dtype).eval(eval_cmp).fold_only(),
        Def("CAST", 1, 1, same_shape, no_emit, {}).dtype(attr_dtype).eval(eval_cast).fold_only(),
        Def("WHERE", 3, 3, where_shape, no_emit, {}).dtype(where_dtype).eval(eval_where).fold_only(),
        Def("TRIL", 1, 1, tril_shape, no_emit, {}).dtype(same_dtype).eval(eval_tril).fold_only(),
    };
    std::vector<OpDef> out;
    for (auto &d : t) out.push_back(d.d);
    return out;
}

const std::vector<OpDef> &table()
{
    static const std::vector<OpDef> t = [] {
        std::vector<OpDef> defs = build_table();
        const char *names[] = {
#define CK_OP_STR(name, ...) #name,
            CK_OPS(CK_OP_STR)
#undef CK_OP_STR
        };
        if (defs.size() != kNumOps) internal_error("op table and CK_OPS differ in length");
        for (size_t i = 0; i < kNumOps; i++)
            if (std::string(defs[i].name) != names[i])
                internal_error(std::string("op table entry ") + defs[i].name + " is where CK_OPS has " + names[i]);
        return defs;
    }();
    return t;
}

}  // namespace

const OpDef &op_def(Op op) { return table()[static_cast<size_t>(op)]; }
const char *op_name(Op op) { return op_def(op).name; }

std::optional<Op> op_from_name(const std::string &name)
{
    for (Op op : all_ops())
        if (name == op_name(op)) return op;
    return std::nullopt;
}

std::vector<Op> all_ops()
{
    std::vector<Op> out;
#define CK_OP_LIST(name, ...) out.push_back(Op::name);
    CK_OPS(CK_OP_LIST)
#undef CK_OP_LIST
    return out;
}

std::string EmitCtx::rows(const std::string &tensor) const
{
    const Shape &s = g.tensor(tensor).shape;
    if (s.empty()) return "1";
    return s[0] == kTokens ? std::string("T") : std::to_string(s[0]);
}

std::string EmitCtx::numel(const std::string &tensor) const
{
    const Shape &s = g.tensor(tensor).shape;
    if (shape_has_tokens(s)) return fmt::format("(size_t)T * {}", shape_numel_fixed(s));
    return std::to_string(shape_numel_fixed(s));
}

std::string c_shape(const Shape &s)
{
    std::vector<std::string> v;
    for (int64_t d : s) v.push_back(std::to_string(d));
    if (v.empty()) v.push_back("1");
    return "{" + join(v, ", ") + "}";
}

}  // namespace ckc
