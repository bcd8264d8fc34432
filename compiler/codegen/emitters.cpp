// emitters.cpp — how each op becomes C: one emitter per op writing the call
// to its runtime kernel (runtime/include/ck_kernels.h), and the runtime
// sources that kernel lives in (what model.c.kernels lists).
//
// Emitters get C pointer expressions and row strides from the EmitCtx; they
// never compute addresses themselves, so the planner is free to place or
// alias tensors. Dimensions come from the same rules as the output shapes
// (ir/op_rules.h). lowering() checks once that every op that runs (all but
// the fold-only ones) has a row here.
#include "codegen/emitters.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ck_kernels.h"
#include "ir/ew_program.h"
#include "ir/op_rules.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

namespace {

using namespace rules;

// Emitters of static-shape (graph) kernels need concrete shapes.
const Shape &static_shape(const EmitCtx &c, const Tensor &t)
{
    if (shape_has_tokens(t.shape))
        internal_error(fmt::format("node '{}' ({}): needs a static shape, '{}' is {}", c.n.name, op_name(c.n.op), t.name,
                                   shape_str(t.shape)));
    return t.shape;
}

void embedding_emit(EmitCtx &c)
{
    int64_t C = c.tin(1).shape[1], V = c.tin(1).shape[0];
    if (c.stored_matrix(c.n.inputs[1])) {  // LM tokens into a stored table: one row dequantized per token
        c.w.line(fmt::format("ck_embedding_q({}, {}, {}, {}, {});", c.out(), c.in(1), c.in(0), c.rows(c.n.output), c.dim(C)));
        return;
    }
    if (c.tin(0).dtype == DType::I32) {  // LM tokens, checked by ck_model_embed_tokens
        c.w.line(fmt::format("ck_embedding({}, {}, {}, {}, {});", c.out(), c.in(1), c.in(0), c.rows(c.n.output), c.dim(C)));
        return;
    }
    c.w.open(fmt::format("if (ck_embedding_i64({}, {}, {}, {}, {}, {}) >= 0)", c.out(), c.in(1), c.in(0),
                         c.numel(c.n.inputs[0]), C, V));
    c.w.line(c.fail("CK_EINVAL", fmt::format("'{}': an id of '{}' is outside the vocabulary [0, {})", c.n.name,
                                             c.n.inputs[0], V)));
    c.w.close();
}

void pos_embed_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_pos_embed({}, {}, {}, {}, {}, pos0);", c.out(), c.in(0), c.in(1), c.rows(c.n.output),
                         last(c.tin(0).shape)));
}

std::string row_count(EmitCtx &c, const Tensor &t)
{
    if (shape_has_tokens(t.shape)) return c.rows(t.name);
    return std::to_string(shape_numel_fixed(t.shape) / last(t.shape));
}

void rmsnorm_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_rmsnorm({}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), row_count(c, c.tin(0)),
                         c.dim(last(c.tin(0).shape)), c_float(c.n.f("eps")), c_float(c.n.f("w_offset", 0.0))));
}

void layernorm_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_layernorm({}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), c.in(2),
                         row_count(c, c.tin(0)), c.dim(last(c.tin(0).shape)), c_float(c.n.f("eps"))));
}

void scale_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_scale({}, {}, {}, {});", c.out(), c.in(0), c.numel(c.n.output), c_float(c.n.f("scale"))));
}

void softcap_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_softcap({}, {}, {}, {});", c.out(), c.in(0), c.numel(c.n.output), c_float(c.n.f("cap"))));
}

const char *act_enum(const Node &n)
{
    switch (act_of(n)) {
    case Act::Silu: return "CK_ACT_SILU";
    case Act::GeluTanh: return "CK_ACT_GELU_TANH";
    case Act::Gelu: return "CK_ACT_GELU";
    }
    internal_error("unreachable");
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
    bool strided = c.ld_in(0) != c.dim(d.trans_a ? d.M : d.K) || c.ld_out() != c.dim(d.N) ||
                   (add != "NULL" && ld_add != c.dim(d.N));
    if (!d.b_batched && d.trans_b && !d.trans_a && alpha == 1.0) {
        // weights in nn.Linear layout: the threaded, row-stride-aware GEMM/GEMV
        std::string rows = shape_has_tokens(c.tin(0).shape) ? c.rows(n.inputs[0]) : std::to_string(d.batch * d.M);
        if (add != "NULL")  // say what beta = 1 does here
            c.w.comment(fmt::format("{} = {} + {} W^T: the residual add folded into the GEMM (beta = 1)", n.output,
                                    n.inputs[2], n.inputs[0]));
        if (c.stored_matrix(n.inputs[1])) {  // a stored format: integer dot products / dequantized tiles
            c.w.open(fmt::format("if (ck_linear_q({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}))", c.out(), c.ld_out(),
                                 c.in(0), c.ld_in(0), c.in(1), bias, add, ld_add, rows, c.dim(d.K), c.dim(d.N)));
            c.w.line(c.fail("CK_ENOMEM", fmt::format("'{}': out of memory for the quantized GEMM's buffers", n.name)));
            c.w.close();
            return;
        }
        c.w.line(fmt::format("ck_linear({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.ld_out(), c.in(0),
                             c.ld_in(0), c.in(1), bias, add, ld_add, rows, c.dim(d.K), c.dim(d.N)));
        return;
    }
    if (strided) internal_error("node '" + n.name + "': ck_matmul needs contiguous operands");
    c.w.line(fmt::format("ck_matmul({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), add,
                         bias, d.batch, d.M, d.N, d.K, d.b_batched ? 1 : 0, d.trans_a ? 1 : 0, d.trans_b ? 1 : 0,
                         c_float(alpha)));
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

void rope_emit(EmitCtx &c)
{
    std::string t = c.rope_table(c.n);
    std::string cos = c.device_value("const float *", "rope_cos", t + "_cos", "RoPE cos table");
    std::string sin = c.device_value("const float *", "rope_sin", t + "_sin", "RoPE sin table");
    c.w.line(fmt::format("ck_rope({}, {}, {}, {}, {}, {}, {}, {}, pos0, {}, {}, {});", c.out(), c.ld_out(), c.in(0),
                         c.ld_in(0), c.rows(c.n.output), c.n.i("heads"), c.n.i("head_dim"), c.n.i("rot_dim"), cos, sin,
                         c.n.i("interleaved", 0)));
}

// Where KV_STORE writes this layer's keys and values and KV_ATTENTION reads them: the KV cache when it is on,
// else the node's arena buffer [2, kv_heads, T, head_dim]; `start` is the position of the first new token.
struct KvBuffers {
    std::string k, v, cap, start;
};
KvBuffers kv_buffers(EmitCtx &c, const std::string &kv_tensor)
{
    const Node &store = *c.g.producer(kv_tensor);
    std::string kv = c.name(kv_tensor), buf = c.ptr(kv_tensor);
    int64_t kvh = store.i("kv_heads"), d = store.i("head_dim");
    KvBuffers b;
    b.k = c.local("float *", kv + "_k",
                  fmt::format("m->kv_enabled ? m->k_cache + (size_t)layer * {} * m->kv_capacity * {} : {}", kvh, d, buf),
                  "this layer's keys: the KV cache, or the arena without one");
    b.v = c.local("float *", kv + "_v",
                  fmt::format("m->kv_enabled ? m->v_cache + (size_t)layer * {0} * m->kv_capacity * {1} : {2} + "
                              "(size_t){0} * T * {1}",
                              kvh, d, buf),
                  "this layer's values");
    b.cap = c.local("int ", kv + "_cap", "m->kv_enabled ? m->kv_capacity : T", "positions the K/V buffers hold");
    b.start = c.local("int ", kv + "_start", "m->kv_enabled ? pos0 : 0", "the first new token's position in them");
    return b;
}

void kv_store_emit(EmitCtx &c)
{
    KvBuffers b = kv_buffers(c, c.n.output);
    c.w.line(fmt::format("ck_kv_store({}, {}, {}, {}, {}, {}, {}, {}, T, {}, {});", b.k, b.v, b.cap, b.start, c.in(0),
                         c.ld_in(0), c.in(1), c.ld_in(1), c.n.i("kv_heads"), c.n.i("head_dim")));
}

void kv_attention_emit(EmitCtx &c)
{
    KvBuffers b = kv_buffers(c, c.n.inputs[1]);
    c.w.line(fmt::format("ck_attention({}, {}, {}, {}, {}, {}, {}, T, {}, {}, {}, {}, {}, {}, {});", c.out(), c.ld_out(),
                         c.in(0), c.ld_in(0), b.k, b.v, b.cap, b.start, c.n.i("heads"), c.n.i("kv_heads"),
                         c.n.i("head_dim"), c.param("scale", 0.0, false), c.param("window", 0, true),
                         c.param("softcap", 0.0, false)));
}

void glu_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_glu({}, {}, {}, {}, {}, {}, {}, {}, {});", c.out(), c.ld_out(), c.in(0), c.ld_in(0), c.in(1),
                         c.ld_in(1), row_count(c, c.tin(0)), c.dim(last(c.tin(0).shape)), act_enum(c.n)));
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

void causal_mask_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    int64_t S = s.back();
    c.w.line(fmt::format("ck_causal_mask({}, {}, {}, {});", c.out(), c.in(0), shape_numel_fixed(s) / (S * S), S));
}

void reshape_emit(EmitCtx &c)  // when it is not a view: a column view copied contiguous, or into a caller's buffer
{
    if (c.aliased()) return;
    if (c.ld_in(0) != c.dim(last(c.tin(0).shape))) {  // column views are float32
        c.w.line(fmt::format("ck_copy_rows({}, {}, {}, {}, {});", c.out(), c.in(0), c.ld_in(0), row_count(c, c.tin(0)),
                             last(c.tin(0).shape)));
        return;
    }
    // any dtype (a bool mask reshaped into an output): the element size of the typed pointer
    c.w.line(fmt::format("memcpy({}, {}, {} * sizeof *{});", c.out(), c.in(0), c.numel(c.n.output), c.out()));
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

void expand_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    c.w.open("");
    c.w.line(fmt::format("static const int64_t so[] = {}, sx[] = {};", c_shape(o), c_shape(aligned(c.tin(0).shape, o.size()))));
    c.w.line(fmt::format("ck_expand({}, so, {}, {}, sx, sizeof *{});", c.out(), o.size(), c.in(0), c.out()));
    c.w.close();
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
    if (c.ld_in(0) != c.dim(last(c.tin(0).shape))) {
        c.w.line(fmt::format("ck_copy_rows({}, {}, {}, {}, {});", c.out(), c.in(0), c.ld_in(0), row_count(c, c.tin(0)),
                             last(c.tin(0).shape)));
        return;
    }
    c.w.line(fmt::format("memcpy({}, {}, {} * sizeof *{});", c.out(), c.in(0), c.numel(c.n.output), c.out()));
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

void bias_relu_emit(EmitCtx &c)
{
    c.w.line(fmt::format("ck_bias_relu({}, {}, {}, {}, {});", c.out(), c.in(0), c.in(1), row_count(c, c.tin(0)),
                         last(c.tin(0).shape)));
}

std::string ew_op_name(int op)
{
    static const char *const binary[] = {"CK_EW_ADD", "CK_EW_SUB", "CK_EW_MUL", "CK_EW_DIV"};
    static const char *const unary[] = {
#define CK_EW_UNARY_ENUM(name, formula) "CK_UN_" #name,
        CK_UNARY_OPS(CK_EW_UNARY_ENUM)
#undef CK_EW_UNARY_ENUM
    };
    return op < CK_EW_UNARY ? binary[op] : fmt::format("CK_EW_UNARY + {}", unary[op - CK_EW_UNARY]);
}

// One ck_ew call: the program as a table of instructions, each input's index pattern.
void ew_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    int nin = static_cast<int>(c.n.inputs.size());
    std::vector<EwInsn> prog = parse_ew_program(c.n.s("program"), nin);
    std::vector<std::string> insns, div, mod, ins;
    for (const EwInsn &p : prog)
        insns.push_back(fmt::format("{{{}, {}, {}, {}}}", ew_op_name(p.op), p.a, p.b, c_float(p.imm)));
    for (int k = 0; k < nin; k++) {
        auto dm = ew_index(c.tin(k).shape, o);
        if (!dm) internal_error(fmt::format("node '{}': input {} cannot be indexed", c.n.name, k));
        div.push_back(std::to_string(dm->first));
        mod.push_back(std::to_string(dm->second));
        ins.push_back(c.in(k));
    }
    c.w.open("");
    c.w.line(fmt::format("static const ck_ew_insn prog[] = {{{}}}; /* {} */", join(insns, ", "), c.n.s("program")));
    c.w.line(fmt::format("static const int64_t dv[] = {{{}}}, md[] = {{{}}};", join(div, ", "), join(mod, ", ")));
    c.w.line(fmt::format("const float *const in[] = {{{}}};", join(ins, ", ")));
    c.w.line(fmt::format("ck_ew({}, {}, {}, in, dv, md, {}, prog);", c.out(), c.numel(c.n.output), nin, prog.size()));
    c.w.close();
}

const char *const K_EMB = "kernels/embedding.c", *const K_NORM = "kernels/norm.c", *const K_LIN = "kernels/linear.c",
                  *const K_FGEMM = "kernels/fgemm.c",
                  *const K_EW = "kernels/elementwise.c", *const K_BIN = "kernels/binary.c", *const K_ROPE = "kernels/rope.c",
                  *const K_ATT = "kernels/attention.c", *const K_RED = "kernels/reduce.c", *const K_LAY = "kernels/layout.c";

std::vector<Lowering> build_lowerings()
{
    std::vector<std::tuple<Op, void (*)(EmitCtx &), std::vector<const char *>>> rows = {
        {Op::EMBEDDING, embedding_emit, {K_EMB}},
        {Op::POS_EMBED, pos_embed_emit, {K_EMB}},
        {Op::RMSNORM, rmsnorm_emit, {K_NORM}},
        {Op::LAYERNORM, layernorm_emit, {K_NORM}},
        {Op::MATMUL, matmul_emit, {K_LIN, K_FGEMM}},
        {Op::MATMUL_ADD, matmul_emit, {K_LIN, K_FGEMM}},
        {Op::ADD, binary_emit, {K_EW, K_BIN}},
        {Op::SCALE, scale_emit, {K_EW}},
        {Op::SOFTCAP, softcap_emit, {K_EW}},
        {Op::SLICE, slice_emit, {K_LAY}},
        {Op::ROPE, rope_emit, {K_ROPE}},
        {Op::KV_STORE, kv_store_emit, {K_ATT}},
        {Op::KV_ATTENTION, kv_attention_emit, {K_ATT}},
        {Op::GELU, gelu_emit, {K_EW}},
        {Op::GLU, glu_emit, {K_EW}},
        {Op::SUB, binary_emit, {K_BIN}},
        {Op::MUL, binary_emit, {K_BIN}},
        {Op::DIV, binary_emit, {K_BIN}},
        {Op::SOFTMAX, softmax_emit, {K_RED}},
        {Op::REDUCE_SUM, reduce_emit, {K_RED}},
        {Op::REDUCE_MEAN, reduce_emit, {K_RED}},
        {Op::REDUCE_MAX, reduce_emit, {K_RED}},
        {Op::RESHAPE, reshape_emit, {K_LAY}},
        {Op::TRANSPOSE, permute_emit, {K_LAY}},
        {Op::PERMUTE, permute_emit, {K_LAY}},
        {Op::EXPAND, expand_emit, {K_LAY}},
        {Op::CAT, cat_emit, {K_LAY}},
        {Op::COPY, copy_emit, {K_LAY}},
        {Op::MASKED_FILL, masked_fill_emit, {K_BIN}},
        {Op::CAUSAL_MASK, causal_mask_emit, {K_RED}},
        {Op::ATTENTION, attention_emit, {K_ATT}},
        {Op::BIAS_RELU, bias_relu_emit, {K_EW}},
        {Op::EW, ew_emit, {K_EW}},
#define CK_UNARY_LOWERING(name, formula) {Op::name, unary_emit, {K_EW}},
        CK_UNARY_OPS(CK_UNARY_LOWERING)
#undef CK_UNARY_LOWERING
    };
    std::vector<Lowering> out(kNumOps);
    for (auto &[op, emit, kernels] : rows) {
        Lowering &l = out[static_cast<size_t>(op)];
        if (l.emit) internal_error(std::string("two emitters for ") + op_name(op));
        l.emit = emit;
        l.kernels = kernels;
    }
    std::vector<std::string> missing, extra;
    for (Op op : all_ops()) {
        bool has = out[static_cast<size_t>(op)].emit != nullptr;
        if (!has && !op_def(op).fold_only) missing.push_back(op_name(op));
        if (has && op_def(op).fold_only) extra.push_back(op_name(op));
    }
    if (!missing.empty()) internal_error("ops without an emitter (codegen/emitters.cpp): " + join(missing, ", "));
    if (!extra.empty()) internal_error("fold-only ops with an emitter: " + join(extra, ", "));
    return out;
}

}  // namespace

std::string EmitCtx::fail(const std::string &code, const std::string &message) const
{
    return fmt::format("return ck_fail({}, {});", code, c_string(replace_all(message, "%", "%%")));
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

const Lowering &lowering(Op op)
{
    static const std::vector<Lowering> table = build_lowerings();
    return table[static_cast<size_t>(op)];
}

}  // namespace ckc
