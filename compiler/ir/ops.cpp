// ops.cpp — the op registry: one entry per op in CK_OPS (ir/ops.h).
//
// Each entry: arity, shape / dtype / view rules, memory behaviour and the
// evaluator constant folding uses (ir/eval.cpp). How an op becomes C (its
// emitter and runtime kernel files) is codegen's: codegen/emitters.cpp.
#include "ir/ops.h"

#include <math.h>  // the table formulas call exp, tanh, ... unqualified

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ck_kernels.h"
#include "ck_quant.h"  // CK_MOE_EXPERTS_SCRATCH, CK_MOE_MAX_EXPERTS
#include "ir/eval.h"
#include "ir/ew_program.h"
#include "ir/graph.h"
#include "ir/op_rules.h"
#include "ir/symbolic.h"
#include "support/error.h"
#include "support/limits.h"
#include "support/util.h"

namespace ckc {

namespace rules {

// ---- helpers ---------------------------------------------------------------

[[noreturn]] void fail(const Node &n, const std::string &what)
{
    internal_error(fmt::format("node '{}' ({}): {}", n.name, op_name(n.op), what));
}
// the message is built only when the check fails (shape rules run for every node after every pass)
#define CK_EXPECT(ok, n, what)                      \
    do {                                            \
        if (!(ok)) ::ckc::rules::fail(n, what);     \
    } while (0)

int64_t last(const Shape &s) { return s.empty() ? 1 : s.back(); }

std::string shapes(const Inputs &in)
{
    std::string out;
    for (auto *t : in) out += (out.empty() ? "" : ", ") + t->name + shape_str(t->shape);
    return out;
}

void expect_2d(const Node &n, const Tensor &t)
{
    CK_EXPECT(t.shape.size() == 2, n, fmt::format("'{}' must be 2-D, is {}", t.name, shape_str(t.shape)));
}

int64_t axis_of(const Node &n, const Shape &s, const std::string &key, int64_t dflt)
{
    int64_t a = n.i(key, dflt), r = static_cast<int64_t>(s.size());
    if (a < 0) a += r;
    CK_EXPECT(a >= 0 && a < std::max<int64_t>(r, 1), n, fmt::format("{} {} outside rank {}", key, n.i(key, dflt), r));
    return a;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// [outer, n, inner] around `axis`
void split_axis(const Shape &s, int64_t axis, int64_t &outer, int64_t &n, int64_t &inner)
{
    outer = inner = 1;
    for (int64_t i = 0; i < axis; i++) outer = dim_mul(outer, s[i]);
    n = s.empty() ? 1 : s[axis];
    for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); i++) inner = dim_mul(inner, s[i]);
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
    CK_EXPECT(in[0]->dtype == DType::I32 || in[0]->dtype == DType::I64, n, "ids must be i32 or i64");
    CK_EXPECT(in[1]->shape.size() == 2, n, "table must be [vocab, dim]: " + shapes(in));
    Shape out = in[0]->shape;
    out.push_back(in[1]->shape[1]);
    return out;
}

// ---- POS_EMBED ------------------------------------------------------------------
Shape pos_embed_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    CK_EXPECT(in[1]->shape.size() == 2 && in[1]->shape[1] == in[0]->shape[1], n, "table must be [positions, dim]: " + shapes(in));
    return in[0]->shape;
}

// ---- normalization --------------------------------------------------------------
Shape rmsnorm_shape(const Node &n, const Inputs &in)
{
    const int64_t group = n.i("group", 0), width = last(in[0]->shape);  // group: per-head norms (Qwen3's q/k)
    CK_EXPECT(group >= 0 && (group == 0 || width % group == 0), n,
              "group must divide the last dim: " + shapes(in) + ", group " + std::to_string(group));
    CK_EXPECT(in[1]->shape == Shape{group ? group : width}, n, "weight must be [group or dim]: " + shapes(in));
    CK_EXPECT(n.has("eps"), n, "needs attr eps");
    return in[0]->shape;
}
Shape layernorm_shape(const Node &n, const Inputs &in)
{
    Shape c{last(in[0]->shape)};
    CK_EXPECT(in[1]->shape == c && in[2]->shape == c, n, "weight and bias must be [dim]: " + shapes(in));
    CK_EXPECT(n.has("eps"), n, "needs attr eps");
    return in[0]->shape;
}

// ---- elementwise on a whole tensor ------------------------------------------------
Shape same_shape(const Node &, const Inputs &in) { return in[0]->shape; }

// SOFTMAX: the input's shape, its axis checked against the rank (a graph.json's attribute)
Shape softmax_shape(const Node &n, const Inputs &in)
{
    axis_of(n, in[0]->shape);
    return in[0]->shape;
}
Act act_of(const Node &n)
{
    const std::string &a = n.s("act");
    if (a == "silu") return Act::Silu;
    if (a == "gelu_tanh") return Act::GeluTanh;
    if (a == "gelu") return Act::Gelu;
    internal_error("node '" + n.name + "': unknown act '" + a + "'");
}
Shape gelu_shape(const Node &n, const Inputs &in)
{
    act_of(n);
    return in[0]->shape;
}

// ---- binary (broadcasting) ----------------------------------------------------------
Shape broadcast(const Node &n, const Shape &a, const Shape &b)
{
    size_t r = std::max(a.size(), b.size());
    Shape A = aligned(a, r), B = aligned(b, r), out(r);
    for (size_t i = 0; i < r; i++) {
        CK_EXPECT(A[i] == B[i] || A[i] == 1 || B[i] == 1, n,
               fmt::format("shapes {} and {} do not broadcast", shape_str(a), shape_str(b)));
        out[i] = A[i] == 1 ? B[i] : A[i];
    }
    return out;
}
Shape binary_shape(const Node &n, const Inputs &in)
{
    if (in.size() == 1) {
        CK_EXPECT(n.has("scalar"), n, "one operand needs attr scalar");
        return in[0]->shape;
    }
    return broadcast(n, in[0]->shape, in[1]->shape);
}
DType binary_dtype(const Node &n, const Inputs &in)
{
    for (auto *t : in)
        if (is_float(t->dtype)) return DType::F32;
    if (in.size() == 1 && n.f("scalar") != std::floor(n.f("scalar"))) return DType::F32;
    // integer operands: an integer result unless the op's row says its result is float (true division)
    if (!binary_row(n.op)->ints) return DType::F32;
    CK_EXPECT(in.size() == 2 || std::fabs(n.f("scalar")) < 9.2e18, n,
              fmt::format("the scalar {} of an integer op is outside int64", n.f("scalar")));
    return in[0]->dtype;
}

// ---- MATMUL / MATMUL_ADD ----------------------------------------------------------
MM matmul_dims(const Node &n, const Inputs &in)
{
    const Shape &a = in[0]->shape, &b = in[1]->shape;
    bool tb = n.i("transpose_b", 0) != 0, ta = n.i("transpose_a", 0) != 0;
    CK_EXPECT(a.size() >= 2 && b.size() >= 2, n, "operands need rank >= 2: " + shapes(in));
    MM d;
    d.trans_b = tb;
    d.trans_a = ta;
    d.M = ta ? a.back() : a[a.size() - 2];
    d.K = ta ? a[a.size() - 2] : a.back();
    d.N = tb ? b[b.size() - 2] : b.back();
    int64_t kb = tb ? b.back() : b[b.size() - 2];
    CK_EXPECT(kb == d.K, n, fmt::format("inner dims differ ({} vs {}): {}", d.K, kb, shapes(in)));
    d.b_batched = b.size() > 2;
    if (d.b_batched)
        CK_EXPECT(b.size() == a.size() && std::equal(a.begin(), a.end() - 2, b.begin()), n,
               "batched B must have A's batch dims: " + shapes(in));
    d.batch = 1;
    for (size_t i = 0; i + 2 < a.size(); i++) d.batch = dim_mul(d.batch, a[i]);
    return d;
}
Shape matmul_shape(const Node &n, const Inputs &in)
{
    MM d = matmul_dims(n, in);
    Shape out(in[0]->shape.begin(), in[0]->shape.end() - 2);
    out.push_back(d.M);
    out.push_back(d.N);
    if (n.op == Op::MATMUL_ADD) {
        const Shape &c = in[2]->shape;
        CK_EXPECT(c == Shape{d.N} || c == out, n, "addend must be [N] or the output's shape: " + shapes(in));
        if (in.size() == 4) CK_EXPECT(c == out && in[3]->shape == Shape{d.N}, n, "bias must be [N]: " + shapes(in));
    }
    return out;
}

// ---- SLICE ---------------------------------------------------------------------------
int64_t size_attr(const Node &n, const std::string &key)
{
    auto it = n.attrs.find(key);
    if (it == n.attrs.end() || !std::holds_alternative<std::string>(it->second)) return n.i(key);
    int64_t d = 0;
    try {
        d = parse_dim(std::get<std::string>(it->second));
        for (const auto &sym : dim_symbols(d)) sym_bounds(sym);  // declared
    } catch (const std::runtime_error &e) {
        fail(n, fmt::format("attr {}: {}", key, e.what()));
    }
    return d;
}

Shape slice_shape(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    // start and length may be symbolic ("seq-2": x[:, -2:] of a dynamic axis, counted from its end)
    int64_t axis = axis_of(n, s), start = size_attr(n, "start"), len = size_attr(n, "length"), step = n.i("step", 1);
    if (is_sym(s[axis]) || is_sym(len) || is_sym(start)) {  // within the bounds: the last element read is in the axis
        // for every binding (a strided length is a derived symbol, (seq+1)//2: dim_nonneg relates it to seq)
        CK_EXPECT(step >= 1 && step <= limits::kDim && dim_min(start) >= 0, n,
                  fmt::format("a slice of a symbolic size takes a step in [1, {}] and a start >= 0 for every size "
                              "within the symbols' bounds (step {}, start {})", limits::kDim, step, dim_str(start)));
        int64_t rest = dim_sub(dim_sub(s[axis], start), dim_add(dim_mul(dim_sub(len, 1), step), 1));
        CK_EXPECT(dim_min(len) >= 1 && dim_nonneg(rest), n,
                  fmt::format("slice of {} elements from {} in steps of {} of axis {} (size {}) leaves the axis for "
                              "some sizes within the symbols' bounds", dim_str(len), dim_str(start), step, axis,
                              dim_str(s[axis])));
    } else {
        CK_EXPECT(step >= 1 && start >= 0 && len > 0 && start + (len - 1) * step < s[axis], n,
                  fmt::format("slice {}:{}:{} of axis {} (size {}) is out of range", start, start + len * step, step,
                              axis, s[axis]));
    }
    Shape out = s;
    out[axis] = len;
    return out;
}
std::optional<ViewOf> slice_view(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    int64_t axis = axis_of(n, s), start = size_attr(n, "start"), step = n.i("step", 1);
    if (step != 1 || is_sym(start)) return std::nullopt;  // (a start known only at run time: a copy)
    int64_t outer, size, inner;
    split_axis(s, axis, outer, size, inner);
    if (is_sym(size) || is_sym(size_attr(n, "length"))) return std::nullopt;  // a copy (the small mask tensors)
    if (is_sym(inner) && start != 0) return std::nullopt;  // an offset known only at run time: a copy
    if (outer == 1 || (axis == 0 && !shape_has_tokens(s))) return ViewOf{is_sym(inner) ? 0 : start * inner, false};  // leading rows: contiguous
    if (s.size() >= 2 && axis == static_cast<int64_t>(s.size()) - 1) return ViewOf{start, true};    // columns: a row stride
    return std::nullopt;
}

// ---- ROPE / KV (language models) ---------------------------------------------------
// ROPE: heads, head_dim, rot_dim (the width of its cos/sin tables), rope_type and its parameters (theta, factor,
// ...); theta and factor may be per-layer tables (one cos/sin table per distinct value), and "rotated", a
// per-layer table of rot_dim or 0, turns it off in some layers (a copy, or nothing in place).
Shape rope_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    int64_t h = n.i("heads"), d = n.i("head_dim"), r = n.i("rot_dim");
    CK_EXPECT(h * d == in[0]->shape[1], n, fmt::format("heads {} x head_dim {} != width of {}", h, d, shapes(in)));
    CK_EXPECT(r > 0 && r % 2 == 0 && r <= d, n, fmt::format("rot_dim {} must be even and <= head_dim {}", r, d));
    return in[0]->shape;
}
// The KV store of a layer is the KV cache when it is enabled, otherwise the
// kv tensor itself: this call's keys/values in the arena ([2][KVH][T][D]).
Shape kv_store_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    int64_t kvh = n.i("kv_heads"), d = n.i("head_dim");
    CK_EXPECT(in[0]->shape == in[1]->shape && in[0]->shape[1] == kvh * d, n, "k and v must be [T, kv_heads*head_dim]: " + shapes(in));
    return {2, kvh, in[0]->shape[0], d};
}
Shape kv_attention_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    int64_t h = n.i("heads"), kvh = n.i("kv_heads"), d = n.i("head_dim");
    CK_EXPECT(in[0]->shape[1] == h * d, n, "q must be [T, heads*head_dim]: " + shapes(in));
    CK_EXPECT(h % kvh == 0, n, fmt::format("heads {} not a multiple of kv_heads {}", h, kvh));
    CK_EXPECT(in[1]->shape == Shape({2, kvh, in[0]->shape[0], d}), n, "kv must come from KV_STORE: " + shapes(in));
    CK_EXPECT(d <= CK_ATTENTION_MAX_HEAD_DIM, n,
           fmt::format("head_dim {} exceeds the kernel limit {}", d, CK_ATTENTION_MAX_HEAD_DIM));
    return in[0]->shape;
}

// ---- GLU -------------------------------------------------------------------------------
Shape glu_shape(const Node &n, const Inputs &in)
{
    CK_EXPECT(in[0]->shape == in[1]->shape, n, "gate and up must match: " + shapes(in));
    act_of(n);
    return in[0]->shape;
}

// ---- mixture of experts (runtime/kernels/moe.c) ---------------------------------------------
Shape moe_route_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    int64_t E = in[0]->shape[1], k = n.i("top_k");
    CK_EXPECT(E >= 1 && E <= CK_MOE_MAX_EXPERTS, n, fmt::format("{} experts (1..{} supported)", E, CK_MOE_MAX_EXPERTS));
    CK_EXPECT(k >= 1 && k <= E, n, fmt::format("top_k {} must be in 1..{} (the experts)", k, E));
    return in[0]->shape;
}
Shape moe_experts_shape(const Node &n, const Inputs &in)
{
    expect_2d(n, *in[0]);
    expect_2d(n, *in[1]);
    int64_t T = in[0]->shape[0], C = in[0]->shape[1], E = in[1]->shape[1];
    CK_EXPECT(in[1]->shape[0] == T, n, "route must have x's rows: " + shapes(in));
    CK_EXPECT(in[2]->shape.size() == 3 && in[2]->shape[0] == E && in[2]->shape[2] == C, n,
              "gate must be [experts, F, C]: " + shapes(in));
    int64_t F = in[2]->shape[1];
    CK_EXPECT(in[3]->shape == in[2]->shape, n, "up must be gate's shape: " + shapes(in));
    CK_EXPECT(in[4]->shape == (Shape{E, C, F}), n, "down must be [experts, C, F]: " + shapes(in));
    act_of(n);
    return in[0]->shape;
}
int64_t moe_experts_scratch(const Node &, const Inputs &in)  // per token
{
    return static_cast<int64_t>(CK_MOE_EXPERTS_SCRATCH(1, in[0]->shape[1], in[2]->shape[1]));
}
std::vector<std::string> moe_experts_names(const Node &, const Inputs &in) { return in[0]->dims; }

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
Shape causal_mask_shape(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    CK_EXPECT(s.size() >= 2 && s[s.size() - 1] == s[s.size() - 2], n, "needs square last two dims: " + shapes(in));
    return s;
}

// ---- layout: RESHAPE, TRANSPOSE, PERMUTE, EXPAND, CAT, COPY ----------------------------
Shape reshape_shape(const Node &n, const Inputs &in)
{
    Shape s = n.ints("shape");
    CK_EXPECT(shape_numel(s) == shape_numel(in[0]->shape) && !shape_has_tokens(in[0]->shape), n,
           fmt::format("cannot view {} as {}", shape_str(in[0]->shape), shape_str(s)));
    return s;
}
std::optional<ViewOf> whole_view(const Node &, const Inputs &) { return ViewOf{0, false}; }
std::vector<int> perm_of(const Node &n, size_t rank)
{
    std::vector<int> perm(rank);
    for (size_t i = 0; i < rank; i++) perm[i] = static_cast<int>(i);
    if (n.op == Op::TRANSPOSE) {
        int64_t a = n.i("dim0"), b = n.i("dim1"), r = static_cast<int64_t>(rank);
        if (a < 0) a += r;
        if (b < 0) b += r;
        CK_EXPECT(a >= 0 && a < r && b >= 0 && b < r, n, "dims outside the rank");
        std::swap(perm[a], perm[b]);
        return perm;
    }
    const auto &p = n.ints("perm");
    CK_EXPECT(p.size() == rank, n, "perm must list every axis once");
    std::vector<bool> seen(rank);
    for (size_t i = 0; i < rank; i++) {
        int64_t a = p[i] < 0 ? p[i] + static_cast<int64_t>(rank) : p[i];
        CK_EXPECT(a >= 0 && a < static_cast<int64_t>(rank) && !seen[a], n, "perm must list every axis once");
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
Shape expand_shape(const Node &n, const Inputs &in)
{
    Shape s = n.ints("shape");
    Shape x = aligned(in[0]->shape, s.size());
    CK_EXPECT(in[0]->shape.size() <= s.size(), n, "cannot expand to a lower rank");
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == -1) s[i] = x[i];
        CK_EXPECT(x[i] == s[i] || x[i] == 1, n, fmt::format("cannot expand {} to {}", shape_str(in[0]->shape), shape_str(s)));
    }
    return s;
}
Shape cat_shape(const Node &n, const Inputs &in)
{
    Shape out = in[0]->shape;
    int64_t axis = axis_of(n, out);
    out[axis] = 0;
    for (auto *t : in) {
        CK_EXPECT(t->shape.size() == out.size() && t->dtype == in[0]->dtype, n, "inputs must have one rank and dtype: " + shapes(in));
        for (size_t i = 0; i < out.size(); i++)
            CK_EXPECT(static_cast<int64_t>(i) == axis || t->shape[i] == in[0]->shape[i], n, "shapes differ off the axis: " + shapes(in));
        out[axis] = dim_add(out[axis], t->shape[axis]);
    }
    return out;
}

// ---- MASKED_FILL / ATTENTION / BIAS_RELU ------------------------------------------------
Shape masked_fill_shape(const Node &n, const Inputs &in)
{
    CK_EXPECT(in[1]->dtype == DType::Bool, n, "mask must be bool: " + shapes(in));
    CK_EXPECT(broadcast(n, in[0]->shape, in[1]->shape) == in[0]->shape, n, "mask must broadcast to x: " + shapes(in));
    CK_EXPECT(n.has("value"), n, "needs attr value");
    return in[0]->shape;
}
Att attention_dims(const Node &n, const Inputs &in)
{
    const Shape &q = in[0]->shape, &k = in[1]->shape, &v = in[2]->shape;
    Att a;
    int64_t heads = n.i("heads", 0), groups = n.i("kv_groups", 1);
    CK_EXPECT(groups >= 1 && groups <= limits::kHeads, n,
              fmt::format("kv_groups {} must be in [1, {}]", groups, limits::kHeads));
    if (heads > 0) {
        CK_EXPECT(heads % groups == 0, n, fmt::format("heads {} are not a multiple of kv_groups {}", heads, groups));
        CK_EXPECT(q.size() == 3 && k.size() == 3 && v == k && q[0] == k[0], n,
                  "with heads, q, k, v must be [B, S, heads*D] with one B: " + shapes(in));
        CK_EXPECT(q[2] % heads == 0, n, fmt::format("width {} is not a multiple of heads {}", q[2], heads));
        CK_EXPECT(dim_mul(k[2], groups) == q[2], n,
                  fmt::format("k and v are {} wide: q's width {} over kv_groups {} expected", dim_str(k[2]), dim_str(q[2]), groups));
        a = {q[0], heads, q[1], k[1], q[2] / heads};
    } else {
        CK_EXPECT(q.size() >= 2 && k.size() == q.size() && v == k, n, "q, k, v must be [..., S, D] with one rank: " + shapes(in));
        CK_EXPECT(q.back() == k.back(), n, "q and k differ: " + shapes(in));
        a.Sq = q[q.size() - 2];
        a.Sk = k[k.size() - 2];
        a.D = q.back();
        if (q.size() == 4) {  // [B, H, S, D]: grouped K/V heads [B, H / kv_groups, S, D]
            CK_EXPECT(q[0] == k[0] && dim_mul(k[1], groups) == q[1], n,
                      fmt::format("k and v must be [B, H / kv_groups, S, D] for q [B, H, S, D] with kv_groups {}: {}", groups,
                                  shapes(in)));
            a.B = q[0];
            a.H = q[1];
        } else {
            CK_EXPECT(groups == 1, n, "kv_groups needs q, k, v of rank 4: " + shapes(in));
            CK_EXPECT(std::equal(q.begin(), q.end() - 2, k.begin()), n, "q and k differ: " + shapes(in));
            a.B = 1;
            CK_EXPECT(dim_div(shape_numel(q), dim_mul(a.Sq, a.D), a.H), n, "q's leading dims: " + shapes(in));
        }
    }
    if (n.i("causal", 0)) CK_EXPECT(a.Sq <= a.Sk, n, "causal attention needs Sq <= Sk");
    if (in.size() == 4) attention_mask_strides(n, in[3]->shape, a, in[3]->dtype);
    return a;
}
// The mask's element strides over [B, H, Sq, Sk] (0 along a dim it broadcasts); checks its shape and dtype.
MaskStrides attention_mask_strides(const Node &n, const Shape &m, const Att &a, DType dtype)
{
    const std::string &kind = n.s("mask");
    CK_EXPECT(kind == "keep" || kind == "drop" || kind == "add", n,
              fmt::format("mask \"{}\" must be keep, drop (bool) or add (f32)", kind));
    CK_EXPECT((kind == "add") == (dtype == DType::F32) && (kind == "add" || dtype == DType::Bool), n,
              fmt::format("a mask \"{}\" of dtype {}: keep and drop take bool, add f32", kind, dtype_name(dtype)));
    CK_EXPECT(m.size() >= 1 && m.size() <= 4 && m.back() == a.Sk, n,
              fmt::format("the mask {} must end in the {} keys, with at most 4 dims", shape_str(m), dim_str(a.Sk)));
    Shape full = {a.B, a.H, a.Sq, a.Sk}, am = m;
    while (am.size() < 4) am.insert(am.begin(), 1);
    int64_t stride = a.Sk;
    MaskStrides st;
    int64_t *out[3] = {&st.batch, &st.head, &st.row};
    for (int d = 2; d >= 0; d--) {
        CK_EXPECT(am[d] == full[d] || am[d] == 1, n,
                  fmt::format("the mask {} does not broadcast to [B, H, Sq, Sk] = {}", shape_str(m), shape_str(full)));
        *out[d] = am[d] == 1 ? 0 : stride;
        stride = dim_mul(stride, am[d]);
    }
    return st;
}
Shape attention_shape(const Node &n, const Inputs &in)
{
    attention_dims(n, in);
    CK_EXPECT(n.has("scale"), n, "needs attr scale");
    return in[0]->shape;
}
bool use_flash(const Node &n, const Att &a)
{
    std::string impl = n.has("impl") ? n.s("impl") : "auto";
    return impl == "flash" || (impl == "auto" && dim_max(a.Sk) > kFlashMinKeys);  // symbolic: by its bound
}
int64_t attention_scratch(const Node &n, const Inputs &in)
{
    Att a = attention_dims(n, in);  // sized for the largest binding of symbolic sizes
    a = {dim_max(a.B), dim_max(a.H), dim_max(a.Sq), dim_max(a.Sk), dim_max(a.D)};
    int64_t BH = a.B * a.H;
    return static_cast<int64_t>(use_flash(n, a) ? ck_attention_flash_scratch(BH, a.Sq, a.Sk, a.D)
                                                : ck_attention_std_scratch(BH, a.Sq, a.Sk, a.D));
}
Shape rotate_half_shape(const Node &n, const Inputs &in)
{
    const Shape &s = in[0]->shape;
    CK_EXPECT(!s.empty() && !is_sym(s.back()) && s.back() % 2 == 0, n,
              "rotates the halves of an even, fixed last dim: " + shapes(in));
    return s;
}
Shape bias_relu_shape(const Node &n, const Inputs &in)
{
    CK_EXPECT(in[1]->shape == Shape{last(in[0]->shape)}, n, "bias must be [N]: " + shapes(in));
    return in[0]->shape;
}

// ---- fused elementwise --------------------------------------------------------------------
Shape ew_shape(const Node &n, const Inputs &in)
{
    const Shape &s = n.ints("shape");
    for (size_t k = 0; k < in.size(); k++) {
        CK_EXPECT(in[k]->dtype == DType::F32, n, fmt::format("input {} is not float32", k));
        CK_EXPECT(in[k]->shape.size() <= s.size() && broadcast(n, in[k]->shape, s) == s, n,
               fmt::format("input {} {} does not broadcast to {}", k, shape_str(in[k]->shape), shape_str(s)));
    }
    CK_EXPECT(in.size() <= CK_EW_MAX_INPUTS, n, fmt::format("more than {} inputs", CK_EW_MAX_INPUTS));
    try {
        parse_ew_program(n.s("program"), static_cast<int>(in.size()));
    } catch (const std::runtime_error &e) {
        CK_EXPECT(false, n, std::string("program: ") + e.what());
    }
    return s;
}

// ---- fold-only ----------------------------------------------------------------------------
Shape arange_shape(const Node &n, const Inputs &)
{
    double start = n.f("start"), step = n.f("step", 1.0);
    CK_EXPECT(step != 0, n, "step must not be 0");
    if (n.has("shape")) {  // a length known when the code runs: arange(0, seq), "shape": ["seq"]
        Shape s = n.ints("shape");
        CK_EXPECT(s.size() == 1 && (s[0] >= 0 || is_sym(s[0])), n, "\"shape\" must be one size");
        CK_EXPECT(!n.has("end"), n, "takes \"end\" or \"shape\", not both");
        return s;
    }
    int64_t len = static_cast<int64_t>(std::ceil((n.f("end") - start) / step));
    return {std::max<int64_t>(len, 0)};
}
Shape full_shape(const Node &n, const Inputs &) { return n.ints("shape"); }
Shape cmp_shape(const Node &n, const Inputs &in)
{
    const std::string &fn = n.s("fn");
    CK_EXPECT(fn == "eq" || fn == "ne" || fn == "lt" || fn == "le" || fn == "gt" || fn == "ge", n, "unknown fn " + fn);
    return binary_shape(n, in);
}
Shape where_shape(const Node &n, const Inputs &in)
{
    CK_EXPECT(in[1]->dtype == in[2]->dtype, n,
              fmt::format("the two values are {} and {}: one dtype expected", dtype_name(in[1]->dtype), dtype_name(in[2]->dtype)));
    return broadcast(n, broadcast(n, in[0]->shape, in[1]->shape), in[2]->shape);
}
DType where_dtype(const Node &, const Inputs &in) { return in[1]->dtype; }
Shape tril_shape(const Node &n, const Inputs &in)
{
    CK_EXPECT(in[0]->shape.size() >= 2, n, "needs rank >= 2");
    return in[0]->shape;
}
Shape cumsum_shape(const Node &n, const Inputs &in)
{
    CK_EXPECT(in[0]->dtype == DType::F32 || in[0]->dtype == DType::I64, n,
              fmt::format("sums f32 or i64, not {} ({})", dtype_name(in[0]->dtype), shapes(in)));
    axis_of(n, in[0]->shape);
    return in[0]->shape;
}
// x[i0, .., ik-1]: the indices' broadcast shape, then x's dims k..
Shape index_shape(const Node &n, const Inputs &in)
{
    const Shape &x = in[0]->shape;
    size_t k = in.size() - 1;
    CK_EXPECT(k <= x.size(), n, fmt::format("{} indices for a tensor of rank {}", k, x.size()));
    Shape b;
    for (size_t j = 1; j < in.size(); j++) {
        CK_EXPECT(in[j]->dtype == DType::I64, n, fmt::format("index {} is {}, not int64", j - 1, dtype_name(in[j]->dtype)));
        b = j == 1 ? in[j]->shape : broadcast(n, b, in[j]->shape);
    }
    Shape out = b;
    out.insert(out.end(), x.begin() + static_cast<std::ptrdiff_t>(k), x.end());
    CK_EXPECT(out.size() <= CK_MAX_RANK, n, fmt::format("rank {} exceeds {}", out.size(), CK_MAX_RANK));
    return out;
}

// torch's index_put of one index tensor into the leading dim: values are the index's shape then x's rows
// (R..); the base is input 2, or zeros of attr rows (the embedding backward's scatter-add into zeros)
Shape index_put_shape(const Node &n, const Inputs &in)
{
    const Tensor &idx = *in[0], &vals = *in[1];
    CK_EXPECT(idx.dtype == DType::I64, n, fmt::format("the index is {}, not int64", dtype_name(idx.dtype)));
    CK_EXPECT(vals.shape.size() >= idx.shape.size() &&
                  std::equal(idx.shape.begin(), idx.shape.end(), vals.shape.begin()),
              n, fmt::format("the values {} do not start with the index's shape {}", shape_str(vals.shape), shape_str(idx.shape)));
    Shape row(vals.shape.begin() + static_cast<std::ptrdiff_t>(idx.shape.size()), vals.shape.end());
    Shape out;
    if (in.size() == 3) {
        out = in[2]->shape;
        CK_EXPECT(in[2]->dtype == vals.dtype, n,
                  fmt::format("the values are {}, the tensor {}", dtype_name(vals.dtype), dtype_name(in[2]->dtype)));
        CK_EXPECT(!out.empty() && Shape(out.begin() + 1, out.end()) == row, n,
                  fmt::format("values {} for index {} do not fit rows of {}", shape_str(vals.shape), shape_str(idx.shape),
                              shape_str(out)));
    } else {
        int64_t rows = n.i("rows", -1);
        CK_EXPECT(rows >= 0, n, "needs attr rows (the zero base's leading dim) without a third input");
        int64_t row_elems = 1;
        for (int64_t d : row) row_elems *= dim_max(d);  // (at most the values' elements)
        CK_EXPECT(rows <= limits::kDim && (rows == 0 || row_elems <= limits::kElements / rows), n,
                  fmt::format("rows {} of {} are above ckc's limits ({} per dimension, {} elements)", rows,
                              shape_str(row), limits::kDim, limits::kElements));
        out = row;
        out.insert(out.begin(), rows);
    }
    CK_EXPECT(!n.i("accumulate", 0) || vals.dtype == DType::F32, n,
              fmt::format("accumulates float32 values, not {}", dtype_name(vals.dtype)));
    CK_EXPECT(out.size() <= CK_MAX_RANK, n, fmt::format("rank {} exceeds {}", out.size(), CK_MAX_RANK));
    return out;
}
DType values_dtype(const Node &, const Inputs &in) { return in[1]->dtype; }

// ---- names of the output's dims (Tensor::dims) -----------------------------------------------
// input 0's: an op whose output is laid out as input 0 (elementwise, norms, RoPE, attention's rows of q)
std::vector<std::string> same_dims(const Node &, const Inputs &in) { return in[0]->dims; }
// a binary op's: input 0's when the output has its shape (no broadcast grew it)
std::vector<std::string> binary_names(const Node &, const Inputs &in)
{
    return in.size() == 1 || in[0]->shape == in[1]->shape || in[1]->shape.size() <= 1 ? in[0]->dims
                                                                                       : std::vector<std::string>{};
}
// x's leading dims, then the weight's N (its rows with transpose_b, else its columns)
std::vector<std::string> matmul_names(const Node &n, const Inputs &in)
{
    size_t r = in[0]->shape.size();
    std::vector<std::string> out(r);
    for (size_t i = 0; i + 2 < r; i++) out[i] = in[0]->dim(i);
    out[r - 2] = in[0]->dim(n.i("transpose_a", 0) ? r - 1 : r - 2);  // M
    const Tensor &b = *in[1];
    out.back() = b.dim(n.i("transpose_b", 0) ? b.shape.size() - 2 : b.shape.size() - 1);
    return out;
}
// the ids' dims, then the table's width
std::vector<std::string> embedding_names(const Node &, const Inputs &in)
{
    std::vector<std::string> out(in[0]->shape.size());
    for (size_t i = 0; i < out.size(); i++) out[i] = in[0]->dim(i);
    out.push_back(in[1]->dim(1));
    return out;
}

// ---- the table --------------------------------------------------------------------------

constexpr uint32_t in0 = 1, in1 = 2, in2 = 4, all_inputs = ~0u >> 1;

struct Def {
    OpDef d;
    Def(const char *name, int lo, int hi, Shape (*shape)(const Node &, const Inputs &))
    {
        d.name = name;
        d.min_inputs = lo;
        d.max_inputs = hi;
        d.shape = shape;
    }
    Def &dtype(DType (*f)(const Node &, const Inputs &)) { d.dtype = f; return *this; }
    Def &view(std::optional<ViewOf> (*f)(const Node &, const Inputs &)) { d.view = f; return *this; }
    Def &inplace(std::vector<int> v) { d.inplace = std::move(v); return *this; }
    Def &strided(uint32_t bits) { d.strided = bits; return *this; }
    Def &side_effects() { d.side_effects = true; return *this; }
    Def &eval(bool (*f)(const Node &, const std::vector<const ConstData *> &, ConstData &)) { d.eval = f; return *this; }
    Def &fold_only() { d.fold_only = true; return *this; }
    Def &scratch(int64_t (*f)(const Node &, const Inputs &)) { d.scratch = f; return *this; }
    Def &scratch_per_token(int64_t (*f)(const Node &, const Inputs &))
    {
        d.scratch = f;
        d.scratch_per_token = true;
        return *this;
    }
    Def &any_dtype(uint32_t bits) { d.any_dtype = bits; return *this; }
    Def &elementwise() { d.elementwise = true; return *this; }
    Def &dims(std::vector<std::string> (*f)(const Node &, const Inputs &)) { d.dims = f; return *this; }
    Def &llm() { d.made_by = MadeBy::LlmFrontend; return *this; }   // the LLM front end alone makes it
    Def &by_pass() { d.made_by = MadeBy::Pass; return *this; }      // a pass (a fusion, a fold) makes it
};



std::vector<OpDef> build_table()
{
    std::vector<Def> t = {
        // ---- language-model ops
        Def("EMBEDDING", 2, 2, embedding_shape).eval(eval_embedding).any_dtype(in0).dims(embedding_names),
        Def("POS_EMBED", 2, 2, pos_embed_shape).inplace({0}).dims(same_dims).llm(),
        Def("RMSNORM", 2, 2, rmsnorm_shape).inplace({0}).dims(same_dims).llm(),
        Def("LAYERNORM", 3, 3, layernorm_shape).inplace({0}).dims(same_dims),
        Def("MATMUL", 2, 2, matmul_shape).strided(in0 | kStridedOut).dims(matmul_names),
        Def("MATMUL_ADD", 3, 4, matmul_shape).inplace({2}).strided(in0 | in2 | kStridedOut).dims(matmul_names).by_pass(),
        Def("SCALE", 1, 1, same_shape).inplace({0}).elementwise().dims(same_dims).llm(),
        Def("SOFTCAP", 1, 1, same_shape).inplace({0}).elementwise().dims(same_dims).llm(),
        Def("CLAMP", 1, 1, same_shape).inplace({0}).eval(eval_clamp).elementwise().dims(same_dims),
        Def("SLICE", 1, 1, slice_shape).dtype(same_dtype).view(slice_view).strided(in0 | kStridedOut).eval(eval_slice).any_dtype(all_inputs),
        Def("ROPE", 1, 1, rope_shape).inplace({0}).strided(in0 | kStridedOut).dims(same_dims).llm(),
        Def("KV_STORE", 2, 2, kv_store_shape).strided(in0 | in1).side_effects().llm(),
        Def("KV_ATTENTION", 2, 2, kv_attention_shape).strided(in0 | kStridedOut).dims(same_dims).llm(),
        Def("GELU", 1, 1, gelu_shape).inplace({0}).eval(eval_unary).elementwise().dims(same_dims),
        Def("GLU", 2, 2, glu_shape).inplace({0, 1}).strided(in0 | in1 | kStridedOut).dims(same_dims).llm(),
        Def("MOE_ROUTE", 1, 1, moe_route_shape).inplace({0}).strided(in0 | kStridedOut).dims(same_dims).llm(),
        Def("MOE_EXPERTS", 5, 5, moe_experts_shape).strided(in0 | kStridedOut).scratch_per_token(moe_experts_scratch)
            .dims(moe_experts_names).llm(),
        // ---- graph ops
        // every row of CK_BINARY_OPS (runtime/include/ck_kernels.h), in that order
#define CK_BINARY_DEF(name, formula, ints) \
        Def(#name, 1, 2, binary_shape).dtype(binary_dtype).inplace({0, 1}).eval(eval_binary).elementwise().dims(binary_names).any_dtype(all_inputs),
        CK_BINARY_OPS(CK_BINARY_DEF)
#undef CK_BINARY_DEF
        // every row of CK_UNARY_OPS (runtime/include/ck_kernels.h), in that order
#define CK_UNARY_DEF(name, formula) \
        Def(#name, 1, 1, same_shape).inplace({0}).eval(eval_unary).elementwise().dims(same_dims),
        CK_UNARY_OPS(CK_UNARY_DEF)
#undef CK_UNARY_DEF
        Def("SOFTMAX", 1, 1, softmax_shape).inplace({0}),
        // every row of CK_REDUCE_OPS
#define CK_REDUCE_DEF(ir_name, name, identity, combine, finish) Def(#ir_name, 1, 1, reduce_shape).eval(eval_reduce),
        CK_REDUCE_OPS(CK_REDUCE_DEF)
#undef CK_REDUCE_DEF
        Def("RESHAPE", 1, 1, reshape_shape).dtype(same_dtype).view(whole_view).strided(in0).eval(eval_reshape).any_dtype(all_inputs),
        Def("TRANSPOSE", 1, 1, permute_shape).dtype(same_dtype).eval(eval_permute).any_dtype(all_inputs),
        Def("PERMUTE", 1, 1, permute_shape).dtype(same_dtype).eval(eval_permute).any_dtype(all_inputs),
        Def("EXPAND", 1, 1, expand_shape).dtype(same_dtype).eval(eval_expand).any_dtype(all_inputs),
        Def("CAT", 1, 64, cat_shape).dtype(same_dtype).eval(eval_cat).any_dtype(all_inputs),
        Def("COPY", 1, 1, same_shape).dtype(same_dtype).strided(in0).eval(eval_reshape).any_dtype(all_inputs).by_pass(),
        Def("MASKED_FILL", 2, 2, masked_fill_shape).inplace({0}).eval(eval_masked_fill).any_dtype(in1),
        Def("CAUSAL_MASK", 1, 1, causal_mask_shape).inplace({0}).by_pass(),
        Def("ATTENTION", 3, 4, attention_shape).scratch(attention_scratch).strided(in0 | in1 | in2 | kStridedOut).any_dtype(1u << 3),
        Def("BIAS_RELU", 2, 2, bias_relu_shape).inplace({0}).by_pass(),
        Def("ROTATE_HALF", 1, 1, rotate_half_shape).eval(eval_rotate_half).by_pass(),
        Def("EW", 1, CK_EW_MAX_INPUTS, ew_shape).inplace({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}).by_pass(),
        // ---- masks and indices
        Def("CMP", 1, 2, cmp_shape).dtype(bool_dtype).eval(eval_cmp).any_dtype(all_inputs),
        Def("CAST", 1, 1, same_shape).dtype(attr_dtype).eval(eval_cast).any_dtype(all_inputs),
        Def("WHERE", 3, 3, where_shape).dtype(where_dtype).eval(eval_where).any_dtype(all_inputs),
        Def("TRIL", 1, 1, tril_shape).dtype(same_dtype).inplace({0}).eval(eval_tril).any_dtype(all_inputs),
        Def("INDEX", 2, 1 + CK_MAX_RANK, index_shape).dtype(same_dtype).eval(eval_index).any_dtype(all_inputs),
        // (the base, input 2, is the one the output may take over: never the values)
        Def("INDEX_PUT", 2, 3, index_put_shape).dtype(values_dtype).inplace({2}).eval(eval_index_put).any_dtype(all_inputs),
        Def("CUMSUM", 1, 1, cumsum_shape).dtype(same_dtype).eval(eval_cumsum).any_dtype(all_inputs),
        Def("ARANGE", 0, 0, arange_shape).dtype(attr_dtype).eval(eval_arange),
        // ---- fold-only
        Def("FULL", 0, 0, full_shape).dtype(attr_dtype).eval(eval_full).fold_only(),
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

}  // namespace rules

const char *made_by_name(MadeBy m)
{
    switch (m) {
    case MadeBy::Exporter: return "exporter";
    case MadeBy::LlmFrontend: return "llm";
    case MadeBy::Pass: return "pass";
    }
    internal_error("made_by_name: a MadeBy outside the enum");
}

const OpDef &op_def(Op op) { return rules::table()[static_cast<size_t>(op)]; }
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




// ---- the rows of the kernel tables behind an op (ck_kernels.h) ------------------------------------------
// Each formula compiled in double: the constant evaluator (ir/eval.cpp) and the kernels' references compute
// the same expression.

namespace {

// Index of `rows` by op (nullptr for ops of no row).
template <class Row>
std::vector<const Row *> by_op(const std::vector<std::pair<Op, Row>> &rows)
{
    std::vector<const Row *> out(kNumOps, nullptr);
    for (const auto &[op, row] : rows) out[static_cast<size_t>(op)] = &row;
    return out;
}

}  // namespace

const UnaryRow *unary_row(Op op)
{
    static const std::vector<std::pair<Op, UnaryRow>> rows = {
#define CK_UNARY_ROW(name, formula) {Op::name, {CK_UN_##name, [](double x, double p) { (void)p; return formula; }}},
        CK_UNARY_OPS(CK_UNARY_ROW)
#undef CK_UNARY_ROW
    };
    static const std::vector<const UnaryRow *> index = by_op(rows);
    return index[static_cast<size_t>(op)];
}

const BinaryRow *binary_row(Op op)
{
    static const std::vector<std::pair<Op, BinaryRow>> rows = {
#define CK_BINARY_ROW(name, formula, ints) {Op::name, {CK_BIN_##name, ints != 0, [](double a, double b) { return formula; }}},
        CK_BINARY_OPS(CK_BINARY_ROW)
#undef CK_BINARY_ROW
    };
    static const std::vector<const BinaryRow *> index = by_op(rows);
    return index[static_cast<size_t>(op)];
}

const ReduceRow *reduce_row(Op op)
{
    static const std::vector<std::pair<Op, ReduceRow>> rows = {
#define CK_REDUCE_ROW(ir_name, name, identity, combine, finish)                                                    \
    {Op::ir_name,                                                                                               \
     {CK_RED_##name, identity, [](double acc, double x) { return combine; }, [](double acc, double n) {        \
          (void)n;                                                                                              \
          return finish;                                                                                        \
      }}},
        CK_REDUCE_OPS(CK_REDUCE_ROW)
#undef CK_REDUCE_ROW
    };
    static const std::vector<const ReduceRow *> index = by_op(rows);
    return index[static_cast<size_t>(op)];
}

}  // namespace ckc
