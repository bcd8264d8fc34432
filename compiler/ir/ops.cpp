// ops.cpp — the op registry: one entry per op in CK_OPS (ir/ops.h).
//
// Each entry: arity, shape rule, memory behaviour and the emitter writing the
// C call to its runtime kernel (runtime/include/ck_kernels.h). Emitters get
// C pointer expressions and row strides from the EmitCtx; they never compute
// addresses themselves, so the planner is free to place or alias tensors.
#include "ir/ops.h"

#include <fmt/format.h>

#include "codegen/emit.h"
#include "ir/graph.h"
#include "support/error.h"

namespace ckc {

namespace {

void expect(bool ok, const Node &n, const std::string &what)
{
    if (!ok) internal_error(fmt::format("node '{}' ({}): {}", n.name, op_name(n.op), what));
}

int64_t last(const Shape &s) { return s.empty() ? 1 : s.back(); }

std::string shapes(const std::vector<const Tensor *> &in)
{
    std::string out;
    for (auto *t : in) out += (out.empty() ? "" : ", ") + t->name + shape_str(t->shape);
    return out;
}

// [rows, cols] with rows = T or a number; every LLM activation is 2-D.
void expect_2d(const Node &n, const Tensor &t)
{
    expect(t.shape.size() == 2, n, fmt::format("'{}' must be 2-D, is {}", t.name, shape_str(t.shape)));
}

// ---- EMBEDDING --------------------------------------------------------------
Shape embedding_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect(in[0]->shape.size() == 1 && in[0]->dtype == DType::I32, n, "tokens must be a 1-D i32 tensor");
    expect(in[1]->shape.size() == 2, n, "table must be [vocab, dim]: " + shapes(in));
    return {in[0]->shape[0], in[1]->shape[1]};
}
void embedding_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_embedding({}, {}, {}, {}, {});", c.out(), c.in(1), c.in(0), c.rows(c.n.output),
                         c.tin(1).shape[1]));
}

// ---- POS_EMBED --------------------------------------------------------------
Shape pos_embed_shape(const Node &n, const std::vector<const Tensor *> &in)
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

// ---- RMSNORM ----------------------------------------------------------------
Shape rmsnorm_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect_2d(n, *in[0]);
    expect(in[1]->shape == Shape{last(in[0]->shape)}, n, "weight must be [dim]: " + shapes(in));
    expect(n.has("eps"), n, "needs attr eps");
    return in[0]->shape;
}
void rmsnorm_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_rmsnorm({}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), c.rows(c.n.output),
                         last(c.tin(0).shape), c_float(c.n.f("eps")), c_float(c.n.f("w_offset", 0.0))));
}

// ---- LAYERNORM --------------------------------------------------------------
Shape layernorm_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect_2d(n, *in[0]);
    Shape c{last(in[0]->shape)};
    expect(in[1]->shape == c && in[2]->shape == c, n, "weight and bias must be [dim]: " + shapes(in));
    expect(n.has("eps"), n, "needs attr eps");
    return in[0]->shape;
}
void layernorm_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_layernorm({}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), c.in(2),
                         c.rows(c.n.output), last(c.tin(0).shape), c_float(c.n.f("eps"))));
}

// ---- elementwise on a whole tensor: SCALE, SOFTCAP, GELU ----------------------
Shape same_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect_2d(n, *in[0]);
    return in[0]->shape;
}
std::string numel(EmitCtx &c) { return fmt::format("(size_t){} * {}", c.rows(c.n.output), last(c.tout().shape)); }
void scale_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_scale({}, {}, {}, {});", c.out(), c.in(0), numel(c), c_float(c.n.f("scale"))));
}
void softcap_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_softcap({}, {}, {}, {});", c.out(), c.in(0), numel(c), c_float(c.n.f("cap"))));
}
std::string act_enum(const Node &n)
{
    const std::string &a = n.s("act");
    if (a == "silu") return "CK_ACT_SILU";
    if (a == "gelu_tanh") return "CK_ACT_GELU_TANH";
    if (a == "gelu") return "CK_ACT_GELU";
    internal_error("node '" + n.name + "': unknown act '" + a + "'");
}
void gelu_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_gelu({}, {}, {}, {});", c.out(), c.in(0), numel(c), act_enum(c.n)));
}

// ---- MATMUL / MATMUL_ADD ----------------------------------------------------
Shape matmul_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect_2d(n, *in[0]);
    expect(in[1]->shape.size() == 2 && in[1]->shape[1] == in[0]->shape[1], n,
           "needs x[T,K] and w[N,K] (nn.Linear layout): " + shapes(in));
    Shape out{in[0]->shape[0], in[1]->shape[0]};
    if (n.op == Op::MATMUL_ADD) {
        const Shape &c = in[2]->shape;
        expect(c == Shape{out[1]} || c == out, n, "addend must be [N] or [T,N]: " + shapes(in));
        if (in.size() == 4) expect(c == out && in[3]->shape == Shape{out[1]}, n, "bias must be [N]: " + shapes(in));
    }
    return out;
}
void matmul_emit(EmitCtx &c)
{
    const Shape &w = c.tin(1).shape;
    std::string bias = "NULL", add = "NULL", ld_add = "0";
    if (c.n.op == Op::MATMUL_ADD) {
        if (c.tin(2).shape.size() == 1) {
            bias = c.in(2);
        } else {
            add = c.in(2);
            ld_add = c.ld_in(2);
            if (c.n.inputs.size() == 4) bias = c.in(3);
        }
    }
    c.w.line(fmt::format("ck_linear({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.ld_out(), c.in(0),
                         c.ld_in(0), c.in(1), bias, add, ld_add, c.rows(c.n.output), w[1], w[0]));
}

// ---- ADD --------------------------------------------------------------------
Shape add_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect_2d(n, *in[0]);
    expect(in[1]->shape == in[0]->shape || in[1]->shape == Shape{last(in[0]->shape)}, n,
           "operands must match or the second be a [N] bias: " + shapes(in));
    return in[0]->shape;
}
void add_emit(EmitCtx &c)
{
    if (c.tin(1).shape == c.tin(0).shape)
        c.w.line(fmt::format("ck_add({}, {}, {}, (size_t){} * {});", c.out(), c.in(0), c.in(1), c.rows(c.n.output),
                             last(c.tin(0).shape)));
    else
        c.w.line(fmt::format("ck_add_bias({}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), c.rows(c.n.output),
                             last(c.tin(0).shape)));
}

// ---- SLICE (column view) ----------------------------------------------------
Shape slice_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect_2d(n, *in[0]);
    int64_t start = n.i("start"), len = n.i("length");
    expect(start >= 0 && len > 0 && start + len <= in[0]->shape[1], n,
           fmt::format("columns {}..{} outside {}", start, start + len, shape_str(in[0]->shape)));
    return {in[0]->shape[0], len};
}
std::optional<int64_t> slice_view(const Node &n) { return n.i("start"); }
void no_emit(EmitCtx &) {}

// ---- ROPE -------------------------------------------------------------------
Shape rope_shape(const Node &n, const std::vector<const Tensor *> &in)
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

// ---- KV_STORE / KV_ATTENTION ---------------------------------------------
// The KV store of a layer is the KV cache when it is enabled, otherwise the
// kv tensor itself: this call's keys/values in the arena ([2][KVH][T][D]).
Shape kv_store_shape(const Node &n, const std::vector<const Tensor *> &in)
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

Shape kv_attention_shape(const Node &n, const std::vector<const Tensor *> &in)
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

// ---- GLU --------------------------------------------------------------------
Shape glu_shape(const Node &n, const std::vector<const Tensor *> &in)
{
    expect_2d(n, *in[0]);
    expect(in[0]->shape == in[1]->shape, n, "gate and up must match: " + shapes(in));
    act_enum(n);
    return in[0]->shape;
}
void glu_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_glu({}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.ld_out(), c.in(0), c.ld_in(0),
                         c.in(1), c.ld_in(1), c.rows(c.n.output), last(c.tin(0).shape), act_enum(c.n)));
}

constexpr uint32_t in0 = 1, in1 = 2, in2 = 4;

const OpDef DEFS[] = {
    // name,         in,   shape rule,          view,       in-place, strided,                 side,  emitter,           kernels
    {"EMBEDDING",    2, 2, embedding_shape,     nullptr,    {},       0,                       false, embedding_emit,    {"kernels/embedding.c"}},
    {"POS_EMBED",    2, 2, pos_embed_shape,     nullptr,    {0},      0,                       false, pos_embed_emit,    {"kernels/embedding.c"}},
    {"RMSNORM",      2, 2, rmsnorm_shape,       nullptr,    {0},      0,                       false, rmsnorm_emit,      {"kernels/norm.c"}},
    {"LAYERNORM",    3, 3, layernorm_shape,     nullptr,    {0},      0,                       false, layernorm_emit,    {"kernels/norm.c"}},
    {"MATMUL",       2, 2, matmul_shape,        nullptr,    {},       in0 | kStridedOut,       false, matmul_emit,       {"kernels/linear.c"}},
    {"MATMUL_ADD",   3, 4, matmul_shape,        nullptr,    {2},      in0 | in2 | kStridedOut, false, matmul_emit,       {"kernels/linear.c"}},
    {"ADD",          2, 2, add_shape,           nullptr,    {0, 1},   0,                       false, add_emit,          {"kernels/elementwise.c"}},
    {"SCALE",        1, 1, same_shape,          nullptr,    {0},      0,                       false, scale_emit,        {"kernels/elementwise.c"}},
    {"SOFTCAP",      1, 1, same_shape,          nullptr,    {0},      0,                       false, softcap_emit,      {"kernels/elementwise.c"}},
    {"SLICE",        1, 1, slice_shape,         slice_view, {},       in0 | kStridedOut,       false, no_emit,           {}},
    {"ROPE",         1, 1, rope_shape,          nullptr,    {0},      in0 | kStridedOut,       false, rope_emit,         {"kernels/rope.c"}},
    {"KV_STORE",     2, 2, kv_store_shape,      nullptr,    {},       in0 | in1,               true,  kv_store_emit,     {"kernels/attention.c"}},
    {"KV_ATTENTION", 2, 2, kv_attention_shape,  nullptr,    {},       in0 | kStridedOut,       false, kv_attention_emit, {"kernels/attention.c"}},
    {"GELU",         1, 1, same_shape,          nullptr,    {0},      0,                       false, gelu_emit,         {"kernels/elementwise.c"}},
    {"GLU",          2, 2, glu_shape,           nullptr,    {0, 1},   in0 | in1 | kStridedOut, false, glu_emit,          {"kernels/elementwise.c"}},
};

static_assert(sizeof(DEFS) / sizeof(DEFS[0]) == kNumOps, "one OpDef per CK_OPS entry, in the same order");

}  // namespace

const OpDef &op_def(Op op) { return DEFS[static_cast<size_t>(op)]; }
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
#define CK_OP_LIST(name) out.push_back(Op::name);
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

}  // namespace ckc
