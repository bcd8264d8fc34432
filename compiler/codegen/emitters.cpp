// emitters.cpp — how each op becomes C: one emitter per op returning the call(s) to its runtime kernel
// (runtime/include/ck_kernels.h) as data (kernel_call.h), and the runtime sources that kernel lives in (what
// model.c.kernels lists).
//
// Emitters get every argument from the EmitCtx — pointers and row strides from the planner's placement, sizes
// named by what they measure — and never compute an address or print C, so the planner is free to place or
// alias tensors and a target to render the calls as it must. Dimensions come from the same rules as the output
// shapes (ir/op_rules.h). lowering() checks once that every op that runs (all but the fold-only ones) has a row.
#include "codegen/emitters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "ck_kernels.h"
#include "ir/ew_program.h"
#include "ir/op_rules.h"
#include "ir/symbolic.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

namespace {

using namespace rules;
using Calls = std::vector<KernelCall>;

KernelCall call(const std::string &kernel, std::vector<CArg> args)
{
    KernelCall k;
    k.kernel = kernel;
    k.args = std::move(args);
    return k;
}

// Emitters of graph kernels that take whole shapes need shapes without T (symbolic sizes print as C that
// computes them when the code runs).
const Shape &static_shape(const EmitCtx &c, const Tensor &t)
{
    if (shape_has_tokens(t.shape))
        internal_error(fmt::format("node '{}' ({}): needs a static shape, '{}' is {}", c.n.name, op_name(c.n.op), t.name,
                                   shape_str(t.shape)));
    return t.shape;
}

// `sizeof *out`: the element size of a kernel that moves any dtype
CArg elem_size(const CArg &out) { return arg_expr("elem", "sizeof *" + out.text, out.reads); }

Calls embedding_emit(EmitCtx &c)
{
    const Tensor &table = c.tin(1);
    if (c.stored_matrix(c.n.inputs[1])) {  // LM tokens into a stored table: one row dequantized per token
        KernelCall k = call("ck_embedding_q", {c.out(), c.in(1), c.in(0), c.rows("T", c.n.output), c.dim("C", c.n.inputs[1])});
        k.fails_if = "!= CK_OK";
        k.fail_code = "CK_ENOTSUP";
        k.fail_message = fmt::format("'{}': the table's format has no dequantizer", c.n.name);
        return {k};
    }
    if (c.tin(0).dtype == DType::I32)  // LM tokens, checked by ck_model_embed_tokens
        return {call("ck_embedding", {c.out(), c.in(1), c.in(0), c.rows("T", c.n.output), c.dim("C", c.n.inputs[1])})};
    KernelCall k = call("ck_embedding_i64", {c.out(), c.in(1), c.in(0), c.numel("n", c.n.inputs[0]),
                                             c.dim("C", c.n.inputs[1]), arg_size("vocab", table.shape[0])});
    k.fails_if = ">= 0";
    k.fail_code = "CK_EINVAL";
    k.fail_message = fmt::format("'{}': an id of '{}' is outside the vocabulary [0, {})", c.n.name, c.n.inputs[0],
                                 table.shape[0]);
    return {k};
}

Calls pos_embed_emit(EmitCtx &c)
{
    return {call("ck_pos_embed", {c.out(), c.in(0), c.in(1), c.rows("T", c.n.output), c.dim("C", c.n.inputs[0]), c.pos0(),
                                  c.seqmap()})};
}

Calls rmsnorm_emit(EmitCtx &c)
{
    CArg rows = c.rows("T", c.n.inputs[0]), width = c.dim("C", c.n.inputs[0]);
    if (const int64_t group = c.n.i("group", 0)) {  // each group a row of its own (per-head norms)
        const int64_t per = last(c.tin(0).shape) / group;
        rows = arg_expr("T", fmt::format("{} * {}", rows.text, per), rows.reads);
        width = c.dim("C", c.n.inputs[1]);
    }
    return {call("ck_rmsnorm", {c.out(), c.in(0), c.in(1), rows, width, arg_float("eps", c.n.f("eps")),
                                arg_float("w_offset", c.n.f("w_offset", 0.0))})};
}

Calls layernorm_emit(EmitCtx &c)
{
    return {call("ck_layernorm", {c.out(), c.in(0), c.in(1), c.in(2), c.rows("T", c.n.inputs[0]),
                                  c.dim("C", c.n.inputs[0]), arg_float("eps", c.n.f("eps"))})};
}

Calls scale_emit(EmitCtx &c)
{
    return {call("ck_scale", {c.out(), c.in(0), c.numel("n", c.n.output), arg_float("scale", c.n.f("scale"))})};
}

Calls softcap_emit(EmitCtx &c)
{
    return {call("ck_softcap", {c.out(), c.in(0), c.numel("n", c.n.output), arg_float("cap", c.n.f("cap"))})};
}

Calls clamp_emit(EmitCtx &c)
{
    std::vector<CArg> args = {c.out(), c.in(0), c.numel("n", c.n.output)};
    for (CArg &a : clamp_bounds(c.n)) args.push_back(a);
    return {call("ck_clamp", args)};
}

CArg act_enum(const Node &n)
{
    switch (act_of(n)) {
    case Act::Silu: return arg_enum("act", "CK_ACT_SILU");
    case Act::GeluTanh: return arg_enum("act", "CK_ACT_GELU_TANH");
    case Act::Gelu: return arg_enum("act", "CK_ACT_GELU");
    }
    internal_error("unreachable");
}

Calls gelu_emit(EmitCtx &c) { return {call("ck_gelu", {c.out(), c.in(0), c.numel("n", c.n.output), act_enum(c.n)})}; }

Calls unary_emit(EmitCtx &c)
{
    return {call("ck_unary", {c.out(), c.in(0), c.numel("n", c.n.output),
                              arg_enum("op", std::string("CK_UN_") + op_name(c.n.op)),
                              arg_float("exponent", c.n.f("exponent", 0.0))})};
}

// "CK_BIN_SUB": the ck_binop of a CK_BINARY_OPS op (its IR name is the row's name)
CArg binop_enum(Op op)
{
    if (!binary_row(op)) internal_error(std::string("not a binary op: ") + op_name(op));
    return arg_enum("op", std::string("CK_BIN_") + op_name(op));
}

Calls binary_emit(EmitCtx &c)
{
    const Node &n = c.n;
    const DType out_t = c.tout().dtype;
    for (size_t i = 0; i < n.inputs.size(); i++)
        if (c.tin(i).dtype != out_t || (out_t != DType::F32 && out_t != DType::I64))
            input_error(fmt::format("node '{}' ({}) computes {} from '{}', a {} tensor: no kernel (ckc runs float32, "
                                    "and int64 from int64; fold it or cast it)", n.name, op_name(n.op),
                                    dtype_name(out_t), n.inputs[i], dtype_name(c.tin(i).dtype)));
    if (out_t == DType::I64) {  // integer arithmetic on run-time values (positions from run-time sizes)
        const Shape &so = static_shape(c, c.tout());
        size_t r = so.size();
        bool scalar = n.inputs.size() == 1;
        double v = scalar ? n.f("scalar") : 0.0;  // (within int64: binary_dtype checks it)
        return {call("ck_binary_i64", {c.out(), arg_array("so", "int64_t", so), arg_size("rank", static_cast<int64_t>(r)),
                                       c.in(0), arg_array("sa", "int64_t", aligned(c.tin(0).shape, r)),
                                       scalar ? arg_null("b") : c.in(1),
                                       arg_array("sb", "int64_t", aligned(scalar ? c.tin(0).shape : c.tin(1).shape, r)),
                                       arg_int("scalar", static_cast<int64_t>(v)),
                                       arg_int("reverse", n.i("reverse", 0)), binop_enum(n.op)})};
    }
    if (n.inputs.size() == 1)
        return {call("ck_binary_scalar", {c.out(), c.in(0), c.numel("n", n.output), arg_float("scalar", n.f("scalar")),
                                          binop_enum(n.op), arg_int("reverse", n.i("reverse", 0))})};
    const Shape &a = c.tin(0).shape, &b = c.tin(1).shape, &o = c.tout().shape;
    if (n.op == Op::ADD && a == b)  // the LM residual add (T-shaped) and equal shapes
        return {call("ck_add", {c.out(), c.in(0), c.in(1), c.numel("n", n.output)})};
    if (n.op == Op::ADD && b == Shape{last(a)} && a == o)  // a bias over rows
        return {call("ck_add_bias", {c.out(), c.in(0), c.in(1), c.rows("T", n.inputs[0]), c.dim("N", n.inputs[0])})};
    const Shape &so = static_shape(c, c.tout());
    size_t r = so.size();
    return {call("ck_binary", {c.out(), arg_array("so", "int64_t", so), arg_size("rank", static_cast<int64_t>(r)),
                               c.in(0), arg_array("sa", "int64_t", aligned(a, r)), c.in(1),
                               arg_array("sb", "int64_t", aligned(b, r)), binop_enum(n.op)})};
}

Calls matmul_emit(EmitCtx &c)
{
    const Node &n = c.n;
    Inputs in;
    for (auto &i : n.inputs) in.push_back(&c.g.tensor(i));
    MM d = matmul_dims(n, in);
    CArg bias = arg_null("bias"), add = arg_null("add"), ld_add = arg_size("ld_add", 0);
    std::string addend;
    if (n.op == Op::MATMUL_ADD) {
        if (c.tin(2).shape.size() == 1) {
            bias = c.in(2);
        } else {
            addend = n.inputs[2];
            add = c.in(2);
            ld_add = c.ld("ld_add", addend);
            if (n.inputs.size() == 4) bias = c.in(3);
        }
    }
    double alpha = n.f("alpha", 1.0);
    if (!d.b_batched && d.trans_b && !d.trans_a && alpha == 1.0) {
        // weights in nn.Linear layout: the threaded, row-stride-aware GEMM/GEMV
        CArg rows = shape_has_tokens(c.tin(0).shape) ? c.rows("T", n.inputs[0]) : arg_size("T", dim_mul(d.batch, d.M));
        std::vector<CArg> args = {c.out(), c.ld_out(), c.in(0), c.ld_in(0), c.in(1), bias, add, ld_add, rows,
                                  c.dim("K", n.inputs[0]), c.dim("N", n.output)};
        KernelCall k = call(c.stored_matrix(n.inputs[1]) ? "ck_linear_q" : "ck_linear", args);
        if (!addend.empty())  // say what beta = 1 does here
            k.note = fmt::format("{} = {} + {} W^T: the residual add folded into the GEMM (beta = 1)", n.output, addend,
                                 n.inputs[0]);
        if (c.stored_matrix(n.inputs[1])) {  // a stored format: integer dot products / dequantized tiles
            k.fails_if = "!= CK_OK";
            k.fail_code = "CK_ENOMEM";
            k.fail_message = fmt::format("'{}': out of memory for the quantized GEMM's buffers (or its format has no "
                                         "kernels)", n.name);
        }
        return {k};
    }
    if (c.strided(n.inputs[0]) || c.strided(n.output) || (!addend.empty() && c.strided(addend)))
        internal_error("node '" + n.name + "': ck_matmul needs contiguous operands");
    return {call("ck_matmul", {c.out(), c.in(0), c.in(1), add, bias, arg_size("batch", d.batch), arg_size("M", d.M),
                               arg_size("N", d.N), arg_size("K", d.K), arg_int("b_batched", d.b_batched ? 1 : 0),
                               arg_int("trans_a", d.trans_a ? 1 : 0), arg_int("trans_b", d.trans_b ? 1 : 0),
                               arg_float("alpha", alpha)})};
}

Calls slice_emit(EmitCtx &c)
{
    if (c.aliased()) return {};
    const Shape &s = static_shape(c, c.tin(0));
    int64_t axis = axis_of(c.n, s), outer, n, inner;
    split_axis(s, axis, outer, n, inner);
    CArg out = c.out();
    return {call("ck_slice_copy", {out, c.in(0), arg_size("outer", outer), arg_size("n", n), arg_size("inner", inner),
                                   arg_size("start", size_attr(c.n, "start")), arg_size("len", size_attr(c.n, "length")),
                                   arg_size("step", c.n.i("step", 1)), elem_size(out)})};
}

Calls rope_emit(EmitCtx &c)
{
    RopeRef t = c.rope_tables(c.n);
    CArg cos = c.device_value("const float *", "rope_cos", t.cos.text, "RoPE cos table", t.cos.reads);
    CArg sin = c.device_value("const float *", "rope_sin", t.sin.text, "RoPE sin table", t.sin.reads);
    return {call("ck_rope", {c.out(), c.ld_out(), c.in(0), c.ld_in(0), c.rows("T", c.n.output),
                             c.attr_size("heads", "heads", "kv_heads"), c.attr_size("head_dim", "head_dim"),
                             rope_rotated(c, c.n), c.pos0(), cos, sin,
                             arg_int("interleaved", c.n.i("interleaved", 0)), c.seqmap()})};
}

// Where KV_STORE writes this layer's keys and values and KV_ATTENTION reads them: the KV cache when it is on,
// else the node's arena buffer [2, kv_heads, T, head_dim]; `start` is the position of the first new token.
struct KvBuffers {
    CArg k, v, cap, start;
};
KvBuffers kv_buffers(EmitCtx &c, const std::string &kv_tensor)
{
    const Node &store = *c.g.producer(kv_tensor);
    CArg buf = c.ptr(kv_tensor);
    std::string kv = buf.text;
    std::string kvh = c.info().size_for_attr("kv_heads", store.i("kv_heads")),
                d = c.info().size_for_attr("head_dim", store.i("head_dim"));
    if (kvh.empty()) kvh = std::to_string(store.i("kv_heads"));
    if (d.empty()) d = std::to_string(store.i("head_dim"));
    KvBuffers b;
    b.k = arg_pointer(c.local("float *", kv + "_k",
                              fmt::format("m->kv_enabled ? m->k_cache + (size_t)layer * {} * m->kv_capacity * {} : {}",
                                          kvh, d, kv),
                              "this layer's keys: the KV cache, or the arena without one", {"m", "layer", kv}),
                      {});
    b.v = arg_pointer(c.local("float *", kv + "_v",
                              fmt::format("m->kv_enabled ? m->v_cache + (size_t)layer * {0} * m->kv_capacity * {1} : {2} + "
                                          "(size_t){0} * T * {1}",
                                          kvh, d, kv),
                              "this layer's values", {"m", "layer", "T", kv}),
                      {});
    b.cap = arg_expr("cap", c.local("int ", kv + "_cap", "m->kv_enabled ? m->kv_capacity : T",
                                    "positions the K/V buffers hold", {"m", "T"}),
                     {});
    b.start = arg_expr("pos0", c.local("int ", kv + "_start", "m->kv_enabled ? pos0 : 0",
                                       "the first new token's position in them", {"m", "pos0"}),
                       {});
    for (CArg *a : {&b.k, &b.v, &b.cap, &b.start}) a->reads = {a->text};
    return b;
}

Calls kv_store_emit(EmitCtx &c)
{
    KvBuffers b = kv_buffers(c, c.n.output);
    return {call("ck_kv_store", {b.k, b.v, b.cap, b.start, c.in(0), c.ld_in(0), c.in(1), c.ld_in(1), c.tokens(),
                                 c.attr_size("kv_heads", "kv_heads"), c.attr_size("head_dim", "head_dim"), c.seqmap()})};
}

Calls kv_attention_emit(EmitCtx &c)
{
    KvBuffers b = kv_buffers(c, c.n.inputs[1]);
    return {call("ck_attention", {c.out(), c.ld_out(), c.in(0), c.ld_in(0), b.k, b.v, b.cap, c.tokens(), b.start,
                                  c.attr_size("heads", "heads"), c.attr_size("kv_heads", "kv_heads"),
                                  c.attr_size("head_dim", "head_dim"), c.param("scale", "scale", 0.0, false),
                                  c.param("window", "window", 0, true), c.param("softcap", "softcap", 0.0, false),
                                  c.seqmap()})};
}

Calls glu_emit(EmitCtx &c)
{
    return {call("ck_glu", {c.out(), c.ld_out(), c.in(0), c.ld("ldg", c.n.inputs[0]), c.in(1), c.ld("ldu", c.n.inputs[1]),
                            c.rows("T", c.n.inputs[0]), c.dim("F", c.n.inputs[0]), act_enum(c.n)})};
}

Calls moe_route_emit(EmitCtx &c)
{
    return {call("ck_moe_route", {c.out(), c.ld_out(), c.in(0), c.ld_in(0), c.rows("T", c.n.inputs[0]),
                                  c.dim("E", c.n.inputs[0]), arg_size("k", c.n.i("top_k")),
                                  arg_int("norm_topk", c.n.i("norm_topk", 0))})};
}

Calls moe_experts_emit(EmitCtx &c)
{
    const Node &n = c.n;
    KernelCall k = call(c.info().stored_weights ? "ck_moe_experts" : "ck_moe_experts_f32", {c.out(), c.ld_out(), c.in(0), c.ld_in(0), c.in(1), c.ld("ldr", n.inputs[1]),
                                           c.rows("T", n.inputs[0]), c.dim("E", n.inputs[1]), c.dim("C", n.inputs[0]),
                                           c.dim("F", n.inputs[2], 1), c.in(2), c.in(3), c.in(4), act_enum(n),
                                           c.scratch()});
    k.fails_if = "!= CK_OK";
    k.fail_code = "CK_ENOMEM";
    k.fail_message = fmt::format("'{}': out of memory for an expert's GEMM buffers (or its format has no kernels)",
                                 n.name);
    return {k};
}

// [outer, n, inner] around the node's axis of tensor t, as sizes
std::vector<CArg> around_axis(const EmitCtx &c, const Tensor &t)
{
    const Shape &s = static_shape(c, t);
    int64_t outer, n, inner;
    split_axis(s, axis_of(c.n, s), outer, n, inner);
    return {arg_size("outer", outer), arg_size("n", n), arg_size("inner", inner)};
}

Calls softmax_emit(EmitCtx &c)
{
    std::vector<CArg> args = {c.out(), c.in(0)}, ax = around_axis(c, c.tin(0));
    args.insert(args.end(), ax.begin(), ax.end());
    args.push_back(arg_int("masked", c.n.i("masked", 0)));
    return {call("ck_softmax", args)};
}

// "CK_RED_MEAN": the ck_redop of a CK_REDUCE_OPS op
CArg redop_enum(Op op)
{
    static const std::map<Op, std::string> names = {
#define CK_REDOP_NAME(ir_name, name, identity, combine, finish) {Op::ir_name, "CK_RED_" #name},
        CK_REDUCE_OPS(CK_REDOP_NAME)
#undef CK_REDOP_NAME
    };
    auto it = names.find(op);
    if (it == names.end()) internal_error(std::string("not a reduction: ") + op_name(op));
    return arg_enum("op", it->second);
}

Calls reduce_emit(EmitCtx &c)
{
    std::vector<CArg> args = {c.out(), c.in(0)}, ax = around_axis(c, c.tin(0));
    args.insert(args.end(), ax.begin(), ax.end());
    args.push_back(redop_enum(c.n.op));
    return {call("ck_reduce", args)};
}

Calls causal_mask_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    int64_t S = s.back(), batch = 0;
    if (!dim_div(shape_numel(s), dim_mul(S, S), batch)) internal_error("node '" + c.n.name + "': not square slices");
    return {call("ck_causal_mask", {c.out(), c.in(0), arg_size("batch", batch), arg_size("S", S)})};
}

// A contiguous copy of the input: its rows gathered when it is a column view (float32), else every byte.
Calls copy_of_input(EmitCtx &c)
{
    if (c.strided(c.n.inputs[0]))
        return {call("ck_copy_rows", {c.out(), c.in(0), c.ld_in(0), c.rows("rows", c.n.inputs[0]),
                                      c.dim("cols", c.n.inputs[0])})};
    // any dtype (a bool mask reshaped into an output): the element size of the typed pointer
    CArg out = c.out(), n = c.numel("n", c.n.output);
    std::vector<std::string> reads = out.reads;
    reads.insert(reads.end(), n.reads.begin(), n.reads.end());
    return {call("memcpy", {out, c.in(0), arg_expr("bytes", fmt::format("{} * sizeof *{}", n.text, out.text), reads)})};
}

Calls reshape_emit(EmitCtx &c)  // when it is not a view: a column view copied contiguous, or into a caller's buffer
{
    if (c.aliased()) return {};
    return copy_of_input(c);
}

Calls permute_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    std::vector<int> perm = perm_of(c.n, s.size());
    CArg out = c.out();
    return {call("ck_permute", {out, c.in(0), arg_size("rank", static_cast<int64_t>(s.size())),
                                arg_array("shape", "int64_t", s),
                                arg_array("perm", "int", std::vector<int64_t>(perm.begin(), perm.end())), elem_size(out)})};
}

Calls expand_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    CArg out = c.out();
    return {call("ck_expand", {out, arg_array("so", "int64_t", o), arg_size("rank", static_cast<int64_t>(o.size())),
                               c.in(0), arg_array("sx", "int64_t", aligned(c.tin(0).shape, o.size())), elem_size(out)})};
}

Calls cat_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    int64_t axis = axis_of(c.n, o), outer, n, inner, at = 0;
    split_axis(o, axis, outer, n, inner);
    Calls out;
    for (size_t i = 0; i < c.n.inputs.size(); i++) {
        int64_t ni = c.tin(i).shape[axis];
        CArg dst = c.out();
        out.push_back(call("ck_cat_part", {dst, c.in(i), arg_size("outer", outer), arg_size("n_out", n),
                                           arg_size("n_in", ni), arg_size("offset", at), arg_size("inner", inner),
                                           elem_size(dst)}));
        at = dim_add(at, ni);
    }
    return out;
}

Calls copy_emit(EmitCtx &c) { return copy_of_input(c); }

Calls masked_fill_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    return {call("ck_masked_fill", {c.out(), arg_array("sx", "int64_t", s), arg_size("rank", static_cast<int64_t>(s.size())),
                                    c.in(0), c.in(1), arg_array("sm", "int64_t", aligned(c.tin(1).shape, s.size())),
                                    arg_float("value", c.n.f("value"))})};
}

// ---- masks and indices (select.c) ----
CArg elem_enum(const std::string &label, DType t)
{
    switch (t) {
    case DType::F32: return arg_enum(label, "CK_ELEM_F32");
    case DType::I64: return arg_enum(label, "CK_ELEM_I64");
    case DType::I32: return arg_enum(label, "CK_ELEM_I32");
    case DType::Bool: return arg_enum(label, "CK_ELEM_BOOL");
    case DType::F16:
    case DType::BF16: break;
    }
    input_error(fmt::format("no run-time kernel moves {} values here (cast them to float32)", dtype_name(t)));
}

Calls cmp_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    size_t r = o.size();
    bool two = c.n.inputs.size() == 2;
    std::string op = "CK_CMP_" + c.n.s("fn");  // eq .. ge: CK_CMP_OPS
    std::transform(op.begin(), op.end(), op.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    return {call("ck_compare", {c.out(), arg_array("so", "int64_t", o), arg_size("rank", static_cast<int64_t>(r)), c.in(0),
                                elem_enum("ta", c.tin(0).dtype), arg_array("sa", "int64_t", aligned(c.tin(0).shape, r)),
                                two ? c.in(1) : arg_null("b"), elem_enum("tb", c.tin(two ? 1 : 0).dtype),
                                arg_array("sb", "int64_t", aligned(c.tin(two ? 1 : 0).shape, r)),
                                arg_float("scalar", two ? 0.0 : c.n.f("scalar")), arg_enum("op", op)})};
}

Calls cast_emit(EmitCtx &c)
{
    return {call("ck_cast", {c.out(), elem_enum("to", c.tout().dtype), c.in(0), elem_enum("from", c.tin(0).dtype),
                             c.numel("n", c.n.output)})};
}

Calls arange_emit(EmitCtx &c)
{
    return {call("ck_arange", {c.out(), elem_enum("to", c.tout().dtype), arg_double("start", c.n.f("start")),
                               arg_double("step", c.n.f("step", 1.0)), c.numel("n", c.n.output)})};
}

Calls cumsum_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tin(0));
    int64_t outer, n, inner;
    split_axis(s, axis_of(c.n, s), outer, n, inner);
    return {call("ck_cumsum", {c.out(), c.in(0), elem_enum("t", c.tin(0).dtype), arg_size("outer", outer),
                               arg_size("n", n), arg_size("inner", inner)})};
}

Calls where_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    size_t r = o.size();
    CArg out = c.out();
    return {call("ck_where", {out, arg_array("so", "int64_t", o), arg_size("rank", static_cast<int64_t>(r)), c.in(0),
                              elem_enum("tc", c.tin(0).dtype), arg_array("sc", "int64_t", aligned(c.tin(0).shape, r)),
                              c.in(1), arg_array("sa", "int64_t", aligned(c.tin(1).shape, r)), c.in(2),
                              arg_array("sb", "int64_t", aligned(c.tin(2).shape, r)), elem_size(out)})};
}

Calls tril_emit(EmitCtx &c)
{
    const Shape &s = static_shape(c, c.tout());
    int64_t rows = s[s.size() - 2], cols = s.back(), batch = 1;
    for (size_t d = 0; d + 2 < s.size(); d++) batch = dim_mul(batch, s[d]);
    CArg out = c.out();
    return {call("ck_tril", {out, c.in(0), arg_size("batch", batch), arg_size("rows", rows), arg_size("cols", cols),
                             arg_int("diagonal", c.n.i("diagonal", 0)), elem_size(out)})};
}

Calls index_emit(EmitCtx &c)
{
    const Shape &x = static_shape(c, c.tin(0)), &o = static_shape(c, c.tout());
    int64_t k = static_cast<int64_t>(c.n.inputs.size()) - 1, b_rank = static_cast<int64_t>(o.size() - (x.size() - k));
    std::vector<CArg> idx;
    std::vector<int64_t> shapes;
    for (int64_t j = 1; j <= k; j++) {
        idx.push_back(c.in(static_cast<size_t>(j)));
        Shape s = aligned(c.tin(static_cast<size_t>(j)).shape, static_cast<size_t>(b_rank));
        shapes.insert(shapes.end(), s.begin(), s.end());
    }
    CArg out = c.out();
    KernelCall call_ = call("ck_index", {out, c.in(0), arg_array("sx", "int64_t", x),
                                         arg_size("rank", static_cast<int64_t>(x.size())), arg_size("k", k),
                                         arg_pointers("idx", "const int64_t *", idx), arg_array("si", "int64_t", shapes),
                                         arg_size("b_rank", b_rank), elem_size(out)});
    call_.fails_if = ">= 0";
    call_.fail_code = "CK_EINVAL";
    std::string dims;
    for (int64_t j = 0; j < k; j++) dims += fmt::format("{}{}", j ? ", " : "", dim_str(x[static_cast<size_t>(j)]));
    call_.fail_message = fmt::format("'{}': an index is outside the indexed dims ({}) of '{}'", c.n.name, dims,
                                     c.n.inputs[0]);
    return {call_};
}

Calls index_put_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout()), &ix = static_shape(c, c.tin(0));
    int64_t inner = 1, count = 1;
    for (size_t d = 1; d < o.size(); d++) inner = dim_mul(inner, o[d]);
    for (int64_t d : ix) count = dim_mul(count, d);
    CArg out = c.out();
    bool base = c.n.inputs.size() == 3;
    KernelCall k = call("ck_index_put", {out, base ? c.in(2) : arg_null("x"), arg_size("rows", o[0]),
                                         arg_size("inner", inner), c.in(0), arg_size("n", count), c.in(1),
                                         arg_int("accumulate", c.n.i("accumulate", 0)), elem_size(out)});
    k.fails_if = ">= 0";
    k.fail_code = "CK_EINVAL";
    k.fail_message = fmt::format("'{}': an index is outside the {} rows of {}", c.n.name, dim_str(o[0]),
                                 base ? "'" + c.n.inputs[2] + "'" : std::string("its zeros"));
    return {k};
}

// ATTENTION's mask (input 3) and grouped K/V heads (attr kv_groups): ck_att_extra_of(...), or ck_att_plain()
CArg attention_extra(EmitCtx &c, const Att &a)
{
    int64_t groups = c.n.i("kv_groups", 1);
    if (c.n.inputs.size() < 4 && groups <= 1) return arg_expr("extra", "ck_att_plain()", {});
    if (c.n.inputs.size() < 4) return arg_expr("extra", fmt::format("ck_att_extra_of(NULL, CK_MASK_NONE, 0, 0, 0, {})", groups), {});
    const Tensor &m = c.tin(3);
    MaskStrides st = attention_mask_strides(c.n, m.shape, a, m.dtype);
    CArg mask = c.in(3);
    std::vector<std::string> reads = mask.reads;
    for (int64_t d : {st.batch, st.head, st.row})
        for (const std::string &r : dim_reads(d)) reads.push_back(r);
    const std::string &kind = c.n.s("mask");
    std::string k = kind == "keep" ? "CK_MASK_KEEP" : kind == "drop" ? "CK_MASK_DROP" : "CK_MASK_ADD";
    return arg_expr("extra", fmt::format("ck_att_extra_of({}, {}, {}, {}, {}, {})", mask.text, k, dim_c(st.batch),
                                         dim_c(st.head), dim_c(st.row), groups),
                    reads);
}

Calls attention_emit(EmitCtx &c)
{
    Inputs in;
    for (auto &i : c.n.inputs) in.push_back(&c.g.tensor(i));
    Att a = attention_dims(c.n, in);
    bool heads = c.n.i("heads", 0) > 0;
    // strides of every operand from its row stride (a column view is read in place)
    // (k and v have H / kv_groups heads)
    auto seq = [&](const std::string &label, const std::string &t, int64_t S, int64_t H) {
        int64_t ld = c.ld_value(t);
        std::vector<std::string> reads;
        for (int64_t d : {S, ld, a.D, H})
            for (const std::string &r : dim_reads(d)) reads.push_back(r);
        return arg_expr(label, heads ? fmt::format("ck_seq_bshd({}, {}, {})", dim_c(S), dim_c(ld), dim_c(a.D))
                                     : fmt::format("ck_seq_bhsd({}, {}, {})", dim_c(H), dim_c(S), dim_c(ld)),
                        reads);
    };
    int64_t groups = c.n.i("kv_groups", 1), kvh = a.H;
    if (groups > 1 && !dim_div(a.H, groups, kvh)) internal_error(fmt::format("'{}': heads over kv_groups", c.n.name));
    return {call(use_flash(c.n, a) ? "ck_attention_flash" : "ck_attention_std",
                 {c.out(), seq("so", c.n.output, a.Sq, a.H), c.in(0), seq("sq", c.n.inputs[0], a.Sq, a.H), c.in(1),
                  seq("sk", c.n.inputs[1], a.Sk, kvh), c.in(2), seq("sv", c.n.inputs[2], a.Sk, kvh), arg_size("B", a.B),
                  arg_size("H", a.H), arg_size("Sq", a.Sq), arg_size("Sk", a.Sk), arg_size("D", a.D),
                  arg_float("scale", c.n.f("scale")), arg_int("causal", c.n.i("causal", 0)), attention_extra(c, a),
                  c.scratch()})};
}

Calls rotate_half_emit(EmitCtx &c)
{
    return {call("ck_rotate_half", {c.out(), c.in(0), c.numel("n", c.n.output), c.dim("D", c.n.output)})};
}

Calls bias_relu_emit(EmitCtx &c)
{
    return {call("ck_bias_relu", {c.out(), c.in(0), c.in(1), c.rows("rows", c.n.inputs[0]), c.dim("n", c.n.inputs[0])})};
}

// The C name of a ck_ewop: "CK_EW_MUL", "CK_EW_UNARY + CK_UN_TANH"
std::string ew_op_name(int op)
{
    static const char *const binary[] = {
#define CK_EW_BINARY_NAME(name, formula, ints) "CK_EW_" #name,
        CK_BINARY_OPS(CK_EW_BINARY_NAME)
#undef CK_EW_BINARY_NAME
    };
    static const char *const unary[] = {
#define CK_EW_UNARY_ENUM(name, formula) "CK_UN_" #name,
        CK_UNARY_OPS(CK_EW_UNARY_ENUM)
#undef CK_EW_UNARY_ENUM
    };
    if (op < 0 || op >= CK_EW_UNARY + CK_UN_COUNT) internal_error(fmt::format("not a ck_ewop: {}", op));
    return op < CK_EW_UNARY ? binary[op] : fmt::format("CK_EW_UNARY + {}", unary[op - CK_EW_UNARY]);
}

// One ck_ew call: the program as a table of instructions, each input's index pattern.
Calls ew_emit(EmitCtx &c)
{
    const Shape &o = static_shape(c, c.tout());
    int nin = static_cast<int>(c.n.inputs.size());
    std::vector<EwInsn> prog = parse_ew_program(c.n.s("program"), nin);
    std::vector<std::string> insns;
    std::vector<int64_t> div, mod;
    std::vector<CArg> ins;
    for (const EwInsn &p : prog)
        insns.push_back(fmt::format("{{{}, {}, {}, {}}}", ew_op_name(p.op), p.a, p.b, c_float(p.imm)));
    for (int k = 0; k < nin; k++) {
        auto dm = ew_index(c.tin(k).shape, o);
        if (!dm) internal_error(fmt::format("node '{}': input {} cannot be indexed", c.n.name, k));
        div.push_back(dm->first);
        mod.push_back(dm->second);
        ins.push_back(c.in(k));
    }
    KernelCall k = call("ck_ew", {c.out(), c.numel("n", c.n.output), arg_size("nin", nin),
                                  arg_pointers("in", "const float *", ins), arg_array("dv", "int64_t", div),
                                  arg_array("md", "int64_t", mod), arg_size("ninsn", static_cast<int64_t>(prog.size())),
                                  arg_array("prog", "ck_ew_insn", insns)});
    k.note = "program: " + c.n.s("program");
    return {k};
}

const char *const K_EMB = "kernels/embedding.c", *const K_NORM = "kernels/norm.c", *const K_LIN = "kernels/linear.c",
                  *const K_EW = "kernels/elementwise.c", *const K_BIN = "kernels/binary.c", *const K_ROPE = "kernels/rope.c",
                  *const K_ATT = "kernels/attention.c", *const K_RED = "kernels/reduce.c", *const K_LAY = "kernels/layout.c",
                  *const K_SEL = "kernels/select.c",
                  *const K_MOE = "kernels/moe.c";

std::vector<Lowering> build_lowerings()
{
    std::vector<std::tuple<Op, Calls (*)(EmitCtx &), std::vector<const char *>>> rows = {
        {Op::EMBEDDING, embedding_emit, {K_EMB}},
        {Op::POS_EMBED, pos_embed_emit, {K_EMB}},
        {Op::RMSNORM, rmsnorm_emit, {K_NORM}},
        {Op::LAYERNORM, layernorm_emit, {K_NORM}},
        {Op::MATMUL, matmul_emit, {K_LIN}},
        {Op::MATMUL_ADD, matmul_emit, {K_LIN}},
        {Op::SCALE, scale_emit, {K_EW}},
        {Op::SOFTCAP, softcap_emit, {K_EW}},
        {Op::CLAMP, clamp_emit, {K_EW}},
        {Op::SLICE, slice_emit, {K_LAY}},
        {Op::ROPE, rope_emit, {K_ROPE}},
        {Op::KV_STORE, kv_store_emit, {K_ATT}},
        {Op::KV_ATTENTION, kv_attention_emit, {K_ATT}},
        {Op::GELU, gelu_emit, {K_EW}},
        {Op::GLU, glu_emit, {K_EW}},
        {Op::MOE_ROUTE, moe_route_emit, {K_MOE}},
        {Op::MOE_EXPERTS, moe_experts_emit, {K_MOE, "kernels/qlinear.c", K_EW}},
        {Op::SOFTMAX, softmax_emit, {K_RED}},
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
        {Op::ROTATE_HALF, rotate_half_emit, {K_ROPE}},
        {Op::EW, ew_emit, {K_EW}},
        {Op::CMP, cmp_emit, {K_SEL}},
        {Op::CAST, cast_emit, {K_SEL}},
        {Op::ARANGE, arange_emit, {K_SEL}},
        {Op::CUMSUM, cumsum_emit, {K_SEL}},
        {Op::WHERE, where_emit, {K_SEL}},
        {Op::TRIL, tril_emit, {K_SEL}},
        {Op::INDEX, index_emit, {K_SEL}},
        {Op::INDEX_PUT, index_put_emit, {K_SEL}},
#define CK_UNARY_LOWERING(name, formula) {Op::name, unary_emit, {K_EW}},
        CK_UNARY_OPS(CK_UNARY_LOWERING)
#undef CK_UNARY_LOWERING
#define CK_BINARY_LOWERING(name, formula, ints) {Op::name, binary_emit, {K_EW, K_BIN, K_SEL}},  /* (int64: select.c) */
        CK_BINARY_OPS(CK_BINARY_LOWERING)
#undef CK_BINARY_LOWERING
#define CK_REDUCE_LOWERING(ir_name, name, identity, combine, finish) {Op::ir_name, reduce_emit, {K_RED}},
        CK_REDUCE_OPS(CK_REDUCE_LOWERING)
#undef CK_REDUCE_LOWERING
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

// ---- EmitCtx's arguments ------------------------------------------------------------------------------------

CArg EmitCtx::ld(const std::string &label, const std::string &tensor) const
{
    std::string name = ld_name(tensor);
    return arg_size(label, ld_value(tensor), info().size_named(name) ? name : "");
}

CArg EmitCtx::dim(const std::string &label, const std::string &tensor, int axis) const
{
    const Tensor &t = g.tensor(tensor);
    size_t a = axis < 0 ? (t.shape.empty() ? 0 : t.shape.size() - 1) : static_cast<size_t>(axis);
    int64_t v = t.shape.empty() ? 1 : t.shape.at(a);
    if (v == kTokens) return tokens();
    const std::string &name = t.dim(a);
    return arg_size(label, v, info().size_named(name) ? name : "");
}

CArg EmitCtx::rows(const std::string &label, const std::string &tensor) const
{
    const Shape &s = g.tensor(tensor).shape;
    Shape lead(s.begin(), s.empty() ? s.end() : s.end() - 1);
    if (!shape_has_tokens(lead)) return arg_size(label, shape_numel(lead));
    int64_t fixed = shape_numel_fixed(lead);
    if (fixed == 1) return tokens();
    return arg_expr(label, fmt::format("T * {}", fixed), {"T"});
}

CArg EmitCtx::numel(const std::string &label, const std::string &tensor) const
{
    const Tensor &t = g.tensor(tensor);
    if (!shape_has_tokens(t.shape)) return arg_size(label, shape_numel(t.shape));
    if (t.shape.size() == 2 && t.shape[0] == kTokens) {  // [T, width]: T times the width's name
        CArg w = dim(label, tensor);
        if (w.named) return arg_expr(label, "(size_t)T * " + w.text, {"T"});
    }
    return arg_expr(label, fmt::format("(size_t)T * {}", shape_numel_fixed(t.shape)), {"T"});
}

CArg EmitCtx::attr_size(const std::string &label, const std::string &key, const std::string &also) const
{
    int64_t v = n.i(key);
    std::string name = info().size_for_attr(key, v);
    if (name.empty() && !also.empty()) name = info().size_for_attr(also, v);
    return arg_size(label, v, name);
}

bool EmitCtx::strided(const std::string &tensor) const
{
    const Tensor &t = g.tensor(tensor);
    return ld_value(tensor) != (t.shape.empty() ? 1 : t.shape.back());
}

const Lowering &lowering(Op op)
{
    static const std::vector<Lowering> table = build_lowerings();
    return table[static_cast<size_t>(op)];
}

}  // namespace ckc
