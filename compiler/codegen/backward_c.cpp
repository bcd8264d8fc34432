// backward_c.cpp — ck_<section>_backward for a language model (see backward_c.h).
//
// How to add an op's backward: one row in kBackward below; its function returns the kernel calls (kernel_call.h)
// of the op's gradient: forward values through c.val(t) (the same locals the forward declares), input gradients
// through c.write_grad(t) (after c.acc({...}) says whether to overwrite or add), the output's gradient through
// c.read_grad(n.output), parameter gradients through c.param_grad(w). The kernel goes in runtime/kernels/train.c
// with a *_ref twin, a finite-difference test and a fast-vs-ref test (tests/unit/test_train_kernels.cpp).
#include "codegen/backward_c.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "codegen/cwriter.h"
#include "ck_quant.h"  // CK_MOE_EXPERTS_BACKWARD_SCRATCH
#include "codegen/emit.h"
#include "ir/op_rules.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

namespace {

using namespace rules;
using Calls = std::vector<KernelCall>;

constexpr const char *kInCarry = "@dcarry_in";    // the gradient of the section's input carry (written)
constexpr const char *kOutCarry = "@dcarry_out";  // the gradient of the section's output carry (read)

std::string goff_name(Section s, const std::string &root)
{
    return "CK_GOFF_" + upper(Program::section_name(s)) + "_" + upper(c_identifier(root));
}

KernelCall call(const std::string &kernel, std::vector<CArg> args)
{
    KernelCall k;
    k.kernel = kernel;
    k.args = std::move(args);
    return k;
}

// Where the backward finds the forward's values: the arena (the training loop points m->act at the section's
// saved slice), the tokens and logits, and the section's input carry, saved per layer in m->train_x.
class BackwardTarget : public Target {
public:
    explicit BackwardTarget(Target &forward) : forward_(forward) {}
    std::string function_name(Section s) const override
    {
        return std::string("ck_") + Program::section_name(s) + "_backward";
    }
    std::vector<CParam> params(Section) const override
    {
        return {{"ck_model *", "m"}, {"int", "layer"}, {"int", "T"}, {"const float *", "gout"}, {"float *", "gin"}};
    }
    CExpr arena(const std::string &off, bool per_token) const override
    {
        if (!per_token) internal_error("training: the language model's arena has a fixed part");
        return {fmt::format("m->act + (size_t)T * {}", off), {"m", "T"}};
    }
    CExpr carry(Section s) const override
    {
        if (is_layer_section(s)) return {"m->train_x + (size_t)layer * T * CK_DIM", {"m", "layer", "T"}};
        return {"m->train_x + (size_t)CK_N_LAYERS * T * CK_DIM", {"m", "T"}};
    }
    CExpr input(const Tensor &) const override { return {"m->tokens", {"m"}}; }
    CExpr output(const Tensor &) const override { return {"m->logits", {"m"}}; }
    CExpr weights(Section s) const override { return forward_.weights(s); }
    CExpr layer_weights() const override { return forward_.layer_weights(); }
    std::string weights_type() const override { return forward_.weights_type(); }
    RopeRef rope_tables(const Node &rope) override { return forward_.rope_tables(rope); }  // the forward's tables
    std::string tracer() const override { return "m->trace"; }

private:
    Target &forward_;
};

struct StepAccess {
    std::set<std::string> reads, writes;
    int64_t scratch = 0;  // bytes per token
};

// What one backward function sees: forward values (saved), gradients (planned), parameter gradients. The dry run
// records what each step reads and writes (the gradient plan); the real run declares the locals the calls read.
class BwdCtx {
public:
    BwdCtx(const Program &p, Section sec, const SectionPlan &sp, const WeightTable &wt, BackwardTarget &target,
           bool dry_run)
        : p(p), sec(sec), g(p.section(sec)), sp(sp), wt(wt),
          l(p, sec, sp, wt, target, {"m", "w", "gw", "T", "layer", "gin", "gout"}), dry_run_(dry_run)
    {
    }

    const Program &p;
    Section sec;
    const Graph &g;
    const SectionPlan &sp;
    const WeightTable &wt;
    SectionLocals l;
    const Node *n = nullptr;
    int step = 0;
    std::vector<StepAccess> access;  // per step (the dry run)

    bool recording() const { return dry_run_; }

    // ---- forward values and sizes
    CArg val(const std::string &t)
    {
        const Region &r = sp.region.at(t);
        if ((r.root == kCarryRoot || g.tensor(t).storage == Storage::Carry) && g.producer(t))
            internal_error("training: the backward of '" + n->name + "' reads the section's output '" + t + "'");
        return l.tensor(t);
    }
    CArg ld(const std::string &label, const std::string &t) const
    {
        std::string name = l.ld_name(t);
        return arg_size(label, l.ld(t), p.info.size_named(name) ? name : "");
    }
    CArg width(const std::string &label, const std::string &t) const
    {
        const Tensor &tt = g.tensor(t);
        const std::string &name = tt.dim(tt.shape.size() - 1);
        return arg_size(label, last(tt.shape), p.info.size_named(name) ? name : "");
    }
    CArg numel(const std::string &t) const
    {
        CArg w = width("n", t);
        return arg_expr("n", "(size_t)T * " + w.text, {"T"});
    }
    CArg attr_size(const std::string &label, const std::string &key, const std::string &also = "") const
    {
        int64_t v = n->i(key);
        std::string name = p.info.size_for_attr(key, v);
        if (name.empty() && !also.empty()) name = p.info.size_for_attr(also, v);
        return arg_size(label, v, name);
    }
    CArg tokens() const { return arg_expr("T", "T", {"T"}); }
    CArg param(const std::string &label, const std::string &key, double dflt, bool is_int) const
    {
        std::string table = n->table(key);
        if (!table.empty())
            return arg_expr(label, "CK_LAYER_" + upper(c_identifier(table)) + "[layer]", {"layer"});
        return is_int ? arg_int(label, static_cast<int64_t>(n->f(key, dflt))) : arg_float(label, n->f(key, dflt));
    }

    // ---- gradients
    std::string groot(const std::string &t) const
    {
        // the carry: the section's input, or its output (computed in the arena and copied to the carry when
        // the input is kept alive, as training's plan does)
        const Region &r = sp.region.at(t);
        if (g.tensor(t).storage == Storage::Carry || r.root == kCarryRoot) return g.producer(t) ? kOutCarry : kInCarry;
        if (g.tensor(r.root).storage == Storage::Output) return "@dlogits";
        return r.root;
    }
    // the gradient of t, as a float pointer; reading it records a read of its root
    CArg grad(const std::string &t, bool read)
    {
        std::string root = groot(t);
        if (recording()) {
            if (root[0] != '@' || root == kInCarry) (read ? access[step].reads : access[step].writes).insert(root);
            return arg_pointer("g", {});
        }
        const Region &r = sp.region.at(t);
        auto have = grad_local_.find(t);
        if (have != grad_local_.end()) return arg_pointer(have->second, {have->second});
        CExpr base = root_grad(root);
        if (root == t && root[0] != '@') return arg_pointer(grad_local_[t] = base.text, base.reads);  // a whole root
        std::string name = l.take_name("d_" + t);
        std::string expr = r.offset ? fmt::format("{} + {}", base.text, r.offset) : base.text;
        std::string what = r.root == kCarryRoot ? "the residual stream's" : r.offset || r.strided ? "columns of d " + root : "";
        l.add({root == kOutCarry ? "const float *" : "float *", name, expr,
               fmt::format("d {}{}", t, what.empty() ? "" : ": " + what), base.reads, false, 1});
        grad_local_[t] = name;
        return arg_pointer(name, {name});
    }
    CArg read_grad(const std::string &t) { return grad(t, true); }    // an output's gradient
    CArg write_grad(const std::string &t) { return grad(t, false); }  // an input's gradient

    // Whether the next call overwrites (0) or adds to (1) the gradients of `ts`: overwrite only when every
    // one is a whole root nobody has written yet. A column view of an unwritten root zeroes the root first
    // (its other columns may never be written); so does a whole root written alongside one that adds.
    CArg acc(const std::vector<std::string> &ts, Calls &calls)
    {
        bool all_fresh = true;
        for (const auto &t : ts)
            if (written_.count(groot(t)) || partial(t)) all_fresh = false;
        for (const auto &t : ts) {
            std::string root = groot(t);
            if (written_.count(root)) continue;
            if (!all_fresh) zero(t, root, calls);
            written_.insert(root);
        }
        return arg_int("acc", all_fresh ? 0 : 1);
    }

    CArg param_grad(const std::string &weight)
    {
        const Tensor &t = g.tensor(weight);
        if (is_layer_section(sec) && !gw_declared_) {
            gw_declared_ = true;
            l.add({"const ck_layer_weights *", "gw", "&m->g.layers[layer]", "this layer's gradients", {"m", "layer"},
                   true});
        }
        std::string prefix = is_layer_section(sec) ? "gw->" : "m->g.";
        return arg_pointer("(float *)" + wt.expr(sec, t, prefix), {is_layer_section(sec) ? "gw" : "m"});
    }
    CArg scratch(int64_t bytes_per_token)
    {
        std::string key = n->name + "#gscratch";
        if (recording()) {
            access[step].scratch = std::max(access[step].scratch, align_up(bytes_per_token, 64));
            return arg_pointer("scratch", {});
        }
        std::string expr = fmt::format("(float *)(m->grad_act + (size_t)T * {})", goff_name(sec, key));
        auto have = scratch_local_.find(expr);
        if (have == scratch_local_.end()) {
            std::string local = l.take_name("scratch_" + c_identifier(n->name));
            l.add({"float *", local, expr, "scratch of the backward of " + n->name, {"m", "T"}, false, 1});
            have = scratch_local_.emplace(expr, local).first;
        }
        std::string name = have->second;
        CArg a = arg_pointer(name, {name});
        a.label = "scratch";
        return a;
    }
    bool needs_grad(const std::string &t) const
    {
        const Tensor &tt = g.tensor(t);
        return tt.storage != Storage::Weight && tt.storage != Storage::Input;
    }
    bool contiguous(const std::string &t) const { return l.ld(t) == last(g.tensor(t).shape); }

private:
    bool dry_run_;  // records what each step reads and writes; the calls it returns are not printed
    bool gw_declared_ = false;
    std::set<std::string> written_;
    std::map<std::string, std::string> grad_local_;

    // the pointer to a gradient root
    CExpr root_grad(const std::string &root)
    {
        if (root == kInCarry) return {"gin", {"gin"}};
        if (root == kOutCarry) return {"gout", {"gout"}};
        if (root == "@dlogits") return {"m->dlogits", {"m"}};
        auto have = root_local_.find(root);
        if (have != root_local_.end()) return {have->second, {have->second}};
        if (grad_local_.count(root)) return {grad_local_.at(root), {grad_local_.at(root)}};
        std::string name = l.take_name("d_" + root);
        l.add({"float *", name, fmt::format("(float *)(m->grad_act + (size_t)T * {})", goff_name(sec, root)),
               fmt::format("d {} {}", root, shape_str(g.tensor(root).shape)), {"m", "T"}, false, 1});
        root_local_[root] = name;
        return {name, {name}};
    }
    std::map<std::string, std::string> root_local_, scratch_local_;

    int64_t root_width(const std::string &root) const
    {
        return root == kCarryRoot ? p.carry_shape.back() : g.tensor(root).shape.back();
    }
    bool partial(const std::string &t) const
    {
        const Region &r = sp.region.at(t);
        return r.root != t && r.root != kCarryRoot && (r.strided || r.offset || last(g.tensor(t).shape) != root_width(r.root));
    }
    void zero(const std::string &t, const std::string &root, Calls &calls)
    {
        if (recording()) {
            access[step].writes.insert(root);
            return;
        }
        CExpr base = root_grad(root);
        int64_t width = root_width(sp.region.at(t).root);
        std::string name = root == kInCarry ? "" : root;
        const std::string &wname = root == kInCarry ? p.carry_dims.back() : g.tensor(root).dim(g.tensor(root).shape.size() - 1);
        std::string wtext = p.info.size_named(wname) ? wname : std::to_string(width);
        calls.push_back(call("memset", {arg_pointer(base.text, base.reads), arg_int("value", 0),
                                        arg_expr("bytes", fmt::format("(size_t)T * {} * sizeof(float)", wtext), {"T"})}));
    }
};

// ---- the backward table: one function per op --------------------------------------------------------

Calls embedding_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    return {call("ck_embedding_backward", {c.param_grad(n.inputs[1]), c.read_grad(n.output), c.val(n.inputs[0]), c.tokens(),
                                           c.width("C", n.output)})};
}

Calls pos_embed_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    Calls out = {call("ck_pos_embed_backward", {c.param_grad(n.inputs[1]), c.read_grad(n.output), c.tokens(),
                                                c.width("C", n.output), arg_int("pos0", 0)})};
    CArg a = c.acc({n.inputs[0]}, out);
    out.push_back(call("ck_grad_add", {c.write_grad(n.inputs[0]), a, c.read_grad(n.output), c.numel(n.output),
                                       arg_float("s", 1.0)}));
    return out;
}

Calls rmsnorm_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    Calls out;
    CArg a = c.acc({n.inputs[0]}, out);
    const int64_t group = n.i("group", 0), per = group ? last(c.g.tensor(n.output).shape) / group : 1;
    CArg rows = per == 1 ? c.tokens() : arg_expr("T", fmt::format("T * {}", per), {"T"});  // a row per group
    out.push_back(call("ck_rmsnorm_backward",
                       {c.write_grad(n.inputs[0]), a, c.param_grad(n.inputs[1]), c.read_grad(n.output), c.val(n.inputs[0]),
                        c.val(n.inputs[1]), rows, c.width("C", n.inputs[1]), arg_float("eps", n.f("eps")),
                        arg_float("w_offset", n.f("w_offset", 0.0)), c.scratch(4 * per)}));
    return out;
}

Calls layernorm_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    Calls out;
    CArg a = c.acc({n.inputs[0]}, out);
    out.push_back(call("ck_layernorm_backward",
                       {c.write_grad(n.inputs[0]), a, c.param_grad(n.inputs[1]), c.param_grad(n.inputs[2]),
                        c.read_grad(n.output), c.val(n.inputs[0]), c.val(n.inputs[1]), c.tokens(), c.width("C", n.output),
                        arg_float("eps", n.f("eps")), c.scratch(8)}));
    return out;
}

Calls matmul_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    Inputs in;
    for (auto &i : n.inputs) in.push_back(&c.g.tensor(i));
    MM d = matmul_dims(n, in);
    if (d.b_batched || !d.trans_b || d.trans_a || n.f("alpha", 1.0) != 1.0 ||
        c.g.tensor(n.inputs[1]).storage != Storage::Weight)
        input_error(fmt::format("training: node '{}' ({}) is not a linear layer of a weight; ckc trains x @ W^T (+ b)",
                                n.name, op_name(n.op)));
    CArg bias = arg_null("db");
    std::string add;
    if (n.op == Op::MATMUL_ADD) {
        if (in[2]->shape.size() == 1) bias = c.param_grad(n.inputs[2]);
        else {
            add = n.inputs[2];
            if (n.inputs.size() == 4) bias = c.param_grad(n.inputs[3]);
        }
    }
    Calls out;
    std::string x = n.inputs[0];
    CArg dx = arg_null("dx"), a = arg_int("acc", 0);
    if (c.needs_grad(x)) {
        a = c.acc({x}, out);
        dx = c.write_grad(x);
    }
    out.push_back(call("ck_linear_backward",
                       {dx, c.ld("lddx", x), a, c.param_grad(n.inputs[1]), bias, c.read_grad(n.output),
                        c.ld("lddy", n.output), c.val(x), c.ld("ldx", x), c.val(n.inputs[1]), c.tokens(),
                        c.width("K", x), c.width("N", n.output)}));
    if (!add.empty()) {  // the residual folded into the GEMM passes the gradient through
        if (!c.contiguous(n.output) || !c.contiguous(add))
            internal_error("training: the residual of '" + n.name + "' is a column view");
        CArg aa = c.acc({add}, out);
        out.push_back(call("ck_grad_add", {c.write_grad(add), aa, c.read_grad(n.output), c.numel(n.output),
                                           arg_float("s", 1.0)}));
    }
    return out;
}

Calls slice_bwd(BwdCtx &c)
{
    // a column view: its gradient is the same view of its input's gradient (nothing to run)
    const Node &n = *c.n;
    if (!c.sp.views.count(n.name)) internal_error("training: slice '" + n.name + "' is a copy, not a view of its input");
    return {};
}

Calls rope_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    if (n.i("interleaved", 0)) internal_error("node '" + n.name + "': no backward for interleaved RoPE (GGUF weights)");
    RopeRef t = c.l.target.rope_tables(n);
    Calls out;
    CArg a = c.acc({n.inputs[0]}, out);
    out.push_back(call("ck_rope_backward",
                       {c.write_grad(n.inputs[0]), c.ld("lddx", n.inputs[0]), a, c.read_grad(n.output),
                        c.ld("lddy", n.output), c.tokens(), c.attr_size("heads", "heads", "kv_heads"),
                        c.attr_size("head_dim", "head_dim"), rope_rotated(c, n), arg_int("pos0", 0),
                        arg_pointer(t.cos.text, t.cos.reads), arg_pointer(t.sin.text, t.sin.reads)}));
    return out;
}

Calls kv_store_bwd(BwdCtx &) { return {}; }  // the attention's backward writes the gradients of k and v itself

Calls kv_attention_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    const Node *store = c.g.producer(n.inputs[1]);
    if (!store || store->op != Op::KV_STORE) internal_error("training: '" + n.name + "' does not read a KV_STORE");
    const std::string &q = n.inputs[0], &k = store->inputs[0], &v = store->inputs[1];
    Calls out;
    CArg a = c.acc({q, k, v}, out);
    CArg kv = c.val(n.inputs[1]);
    CArg kvh = c.attr_size("kv_heads", "kv_heads"), hd = c.attr_size("head_dim", "head_dim");
    // the saved store holds this call's keys, then its values: [2][KVH][T][D]
    CArg values = arg_pointer(fmt::format("{} + (size_t){} * T * {}", kv.text, kvh.text, hd.text), {kv.text, "T"});
    out.push_back(call("ck_attention_backward",
                       {c.write_grad(q), c.ld("lddq", q), c.write_grad(k), c.ld("lddk", k), c.write_grad(v),
                        c.ld("lddv", v), a, c.read_grad(n.output), c.ld("lddo", n.output), c.val(q), c.ld("ldq", q), kv,
                        values, arg_expr("cap", "T", {"T"}), c.val(n.output), c.ld("ldo", n.output), c.tokens(),
                        c.attr_size("heads", "heads"), kvh, hd, c.param("scale", "scale", 0.0, false),
                        c.param("window", "window", 0, true), c.param("softcap", "softcap", 0.0, false),
                        c.scratch(8 * n.i("heads"))}));
    return out;
}

CArg act_c(const Node &n)
{
    switch (act_of(n)) {
    case Act::Silu: return arg_enum("act", "CK_ACT_SILU");
    case Act::GeluTanh: return arg_enum("act", "CK_ACT_GELU_TANH");
    case Act::Gelu: return arg_enum("act", "CK_ACT_GELU");
    }
    internal_error("unreachable");
}

Calls glu_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    const std::string &gate = n.inputs[0], &up = n.inputs[1];
    Calls out;
    CArg a = c.acc({gate, up}, out);
    out.push_back(call("ck_glu_backward",
                       {c.write_grad(gate), c.ld("lddg", gate), c.write_grad(up), c.ld("lddu", up), a,
                        c.read_grad(n.output), c.ld("lddy", n.output), c.val(gate), c.ld("ldg", gate), c.val(up),
                        c.ld("ldu", up), c.tokens(), c.width("F", n.output), act_c(n)}));
    return out;
}

// The router: d logits through the renormalization and the softmax (the choice recomputed from the logits).
Calls moe_route_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    const std::string &logits = n.inputs[0];
    Calls out;
    CArg a = c.acc({logits}, out);
    double coef = n.f("aux_coef", 0.0);  // the load-balancing loss's gradient too (m->moe_aux: ck_block_moe_aux)
    out.push_back(call("ck_moe_route_backward",
                       {c.write_grad(logits), c.ld("lddl", logits), a, c.read_grad(n.output), c.ld("lddr", n.output),
                        c.val(logits), c.ld("ldl", logits), c.tokens(), c.width("E", logits),
                        arg_size("k", n.i("top_k")), arg_int("norm_topk", n.i("norm_topk", 0)),
                        coef > 0 ? arg_pointer("m->moe_aux", {"m"}) : arg_null("aux"), arg_float("aux_coef", coef)}));
    return out;
}

// The routers whose load-balancing loss joins the training loss (transformers' output_router_logits): before the
// backward, ck_layer_moe_aux adds each layer's counts and probabilities to m->moe_aux, since every layer's
// gradient depends on the counts over all of them. Writes ck_<section>_moe_aux for the block `s` when it has such
// routers (the experts and the weight of every one into `experts` and `coef`, which must agree) and returns how
// many it has.
int moe_aux_section(const Program &p, Section s, const SectionPlan &sp, const WeightTable &wt, BackwardTarget &target,
                    int64_t &experts, double &coef, std::string &functions)
{
    BwdCtx c(p, s, sp, wt, target, false);
    CWriter body;
    body.indent();
    std::set<std::string> reads;
    int count = 0;
    for (const std::string &id : sp.order) {
        const Node &n = *c.g.node(id);
        if (n.op != Op::MOE_ROUTE || n.f("aux_coef", 0.0) <= 0) continue;
        c.n = &n;
        const std::string &logits = n.inputs[0];
        int64_t E = last(c.g.tensor(logits).shape);
        if (experts && (E != experts || n.f("aux_coef") != coef))
            internal_error("training: two routers with different load-balancing losses");
        experts = E, coef = n.f("aux_coef");
        count++;
        KernelCall k = call("ck_moe_aux_stats", {arg_pointer("m->moe_aux", {"m"}), c.val(logits), c.ld("ldl", logits),
                                                 c.tokens(), c.width("E", logits), arg_size("k", n.i("top_k"))});
        render_call(k, body, [](const std::string &, const std::string &) -> std::string {
            internal_error("training: a statistics kernel that can fail");
        });
        for (const auto &r : k.reads()) reads.insert(r);
    }
    if (!count) return 0;
    body.line("return CK_OK;");
    auto params = target.params(s);
    functions += function_c("/* The layer's routers' load-balancing statistics, into m->moe_aux (before the backward). */",
                            signature_c(fmt::format("ck_{}_moe_aux", Program::section_name(s)), params), c.l, params,
                            {reads.begin(), reads.end()}, body.str());
    functions += "\n";
    return count;
}

// Every block's routers with a load-balancing loss (moe_aux_section) and ck_layer_moe_aux, which runs a layer's:
// CK_MOE_AUX in the config.
void moe_aux_c(const Program &p, const Plan &plan, const WeightTable &wt, BackwardTarget &target, TrainingC &out)
{
    int64_t experts = 0;
    double coef = 0.0;
    int count = 0;
    std::string functions, names[2];
    for (Section s : p.sections()) {
        if (!is_layer_section(s)) continue;
        int n = moe_aux_section(p, s, plan.section(s), wt, target, experts, coef, functions);
        if (n) names[s == Section::Block2] = fmt::format("ck_{}_moe_aux", Program::section_name(s));
        count = std::max(count, n);
    }
    out.config = fmt::format("#define CK_MOE_AUX {} /* routers per layer whose load-balancing loss is trained */\n", count);
    if (!count) return;
    out.config += fmt::format("#define CK_MOE_AUX_EXPERTS {}\n#define CK_MOE_AUX_COEF {} /* router_aux_loss_coef */\n",
                              experts, c_double(coef));
    out.functions += functions + layer_dispatch_c(p, "ck_layer_moe_aux", names[0], names[1],
                                                  "int T, const float *gout, float *gin", "T, gout, gin") + "\n";
}

// The experts (float32): dx, d route and the experts' gradients, each expert's forward recomputed.
Calls moe_experts_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    const std::string &x = n.inputs[0], &route = n.inputs[1];
    Calls out;
    CArg a = c.acc({x}, out);
    if (c.acc({route}, out).text != "0")  // the kernel writes d route whole: the router is its only reader
        internal_error("training: the route of '" + n.name + "' has another reader");
    const Tensor &gate = c.g.tensor(n.inputs[2]);
    const int64_t C = last(c.g.tensor(x).shape), F = gate.shape[1];
    out.push_back(call("ck_moe_experts_backward",
                       {c.write_grad(x), c.ld("lddx", x), a, c.write_grad(route), c.ld("lddr", route),
                        c.param_grad(n.inputs[2]), c.param_grad(n.inputs[3]), c.param_grad(n.inputs[4]),
                        c.read_grad(n.output), c.ld("lddy", n.output), c.val(x), c.ld("ldx", x), c.val(route),
                        c.ld("ldr", route), c.tokens(), c.width("E", route), c.width("C", x),
                        arg_size("F", F, "CK_EXPERT_FFN"), c.val(n.inputs[2]), c.val(n.inputs[3]),
                        c.val(n.inputs[4]), act_c(n),
                        c.scratch(static_cast<int64_t>(CK_MOE_EXPERTS_BACKWARD_SCRATCH(1, C, F)))}));
    return out;
}

void contiguous(BwdCtx &c, const std::string &t)
{
    if (!c.contiguous(t))
        internal_error("training: '" + t + "' of node '" + c.n->name + "' is a column view; its backward needs rows");
}

Calls gelu_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    contiguous(c, n.inputs[0]);
    contiguous(c, n.output);
    Calls out;
    CArg a = c.acc({n.inputs[0]}, out);
    out.push_back(call("ck_gelu_backward", {c.write_grad(n.inputs[0]), a, c.read_grad(n.output), c.val(n.inputs[0]),
                                            c.numel(n.output), act_c(n)}));
    return out;
}

Calls add_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    if (n.inputs.size() != 2 || c.g.tensor(n.inputs[0]).shape != c.g.tensor(n.inputs[1]).shape)
        input_error("training: node '" + n.name + "' (ADD) broadcasts; ckc trains adds of equal shapes");
    Calls out;
    for (const auto &t : n.inputs) {
        contiguous(c, t);
        CArg a = c.acc({t}, out);
        out.push_back(call("ck_grad_add", {c.write_grad(t), a, c.read_grad(n.output), c.numel(n.output), arg_float("s", 1.0)}));
    }
    return out;
}

Calls scale_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    contiguous(c, n.inputs[0]);
    Calls out;
    CArg a = c.acc({n.inputs[0]}, out);
    out.push_back(call("ck_grad_add", {c.write_grad(n.inputs[0]), a, c.read_grad(n.output), c.numel(n.output),
                                       arg_float("scale", n.f("scale"))}));
    return out;
}

Calls softcap_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    contiguous(c, n.inputs[0]);
    Calls out;
    CArg a = c.acc({n.inputs[0]}, out);
    out.push_back(call("ck_softcap_backward", {c.write_grad(n.inputs[0]), a, c.read_grad(n.output), c.val(n.inputs[0]),
                                               c.numel(n.output), arg_float("cap", n.f("cap"))}));
    return out;
}

Calls clamp_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    contiguous(c, n.inputs[0]);
    Calls out;
    CArg a = c.acc({n.inputs[0]}, out);
    std::vector<CArg> args = {c.write_grad(n.inputs[0]), a, c.read_grad(n.output), c.val(n.inputs[0]),
                              c.numel(n.output)};
    for (CArg &b : clamp_bounds(n)) args.push_back(b);
    out.push_back(call("ck_clamp_backward", args));
    return out;
}

const std::map<Op, Calls (*)(BwdCtx &)> kBackward = {
    {Op::EMBEDDING, embedding_bwd}, {Op::POS_EMBED, pos_embed_bwd},   {Op::RMSNORM, rmsnorm_bwd},
    {Op::LAYERNORM, layernorm_bwd}, {Op::MATMUL, matmul_bwd},         {Op::MATMUL_ADD, matmul_bwd},
    {Op::SLICE, slice_bwd},         {Op::ROPE, rope_bwd},             {Op::KV_STORE, kv_store_bwd},
    {Op::KV_ATTENTION, kv_attention_bwd}, {Op::GLU, glu_bwd},         {Op::GELU, gelu_bwd},
    {Op::ADD, add_bwd},             {Op::SCALE, scale_bwd},           {Op::SOFTCAP, softcap_bwd},
    {Op::CLAMP, clamp_bwd},
    {Op::MOE_ROUTE, moe_route_bwd}, {Op::MOE_EXPERTS, moe_experts_bwd},
};

// Runs the backward rows of a section in reverse forward order; prints their calls into `body` (not in a dry
// run) and collects what they read.
void walk(BwdCtx &c, CWriter &body, std::set<std::string> &reads)
{
    const auto &order = c.sp.order;
    c.access.assign(order.size(), {});
    for (size_t i = 0; i < order.size(); i++) {
        const Node &n = *c.g.node(order[order.size() - 1 - i]);
        auto it = kBackward.find(n.op);
        if (it == kBackward.end()) {
            std::vector<std::string> ops;
            for (const auto &[op, fn] : kBackward) ops.push_back(op_name(op));
            input_error(fmt::format("training: node '{}' ({}) has no backward in ckc; trainable ops: {}", n.name,
                                    op_name(n.op), join(ops, ", ")));
        }
        c.n = &n;
        c.step = static_cast<int>(i);
        Calls calls = it->second(c);
        if (c.recording() || calls.empty()) continue;
        body.comment(comment_safe("d " + (n.origin.empty() ? n.name : n.origin.str())));
        for (const KernelCall &k : calls) {
            render_call(k, body, [](const std::string &, const std::string &) -> std::string {
                internal_error("training: a backward kernel that can fail");
            });
            for (const auto &r : k.reads()) reads.insert(r);
        }
    }
}

// The gradient arena of one section from the dry run's accesses.
std::map<std::string, Allocation> plan_gradients(const BwdCtx &c, int64_t &arena, int64_t &naive, int64_t &lower)
{
    std::map<std::string, Allocation> alloc;
    auto root_bytes = [&](const std::string &root) {
        const Shape &s = root == kInCarry ? c.p.carry_shape : c.g.tensor(root).shape;
        return align_up(shape_numel_fixed(s) * 4, 64);
    };
    for (int s = 0; s < static_cast<int>(c.access.size()); s++) {
        const StepAccess &a = c.access[s];
        for (const auto &set : {&a.writes, &a.reads})
            for (const auto &root : *set) {
                if (root == kInCarry) continue;  // the caller's buffer
                auto [it, fresh] = alloc.try_emplace(root);
                Allocation &al = it->second;
                if (fresh) {
                    al.root = root;
                    al.arena = ArenaKind::Gradients;
                    al.size = root_bytes(root);
                    al.birth = al.death = s;
                }
                al.birth = std::min(al.birth, s);
                al.death = std::max(al.death, s);
            }
        if (a.scratch) {
            Allocation al;
            al.root = c.g.node(c.sp.order[c.sp.order.size() - 1 - s])->name + "#gscratch";
            al.arena = ArenaKind::Gradients;
            al.size = a.scratch;
            al.birth = al.death = s;
            alloc[al.root] = al;
        }
    }
    SectionPlan tmp;
    tmp.alloc = alloc;
    PlanOptions o;
    place(tmp, o);
    arena = tmp.per_token.arena;
    naive = 0;
    lower = 0;
    for (const auto &[r, a] : tmp.alloc) naive += a.size;
    for (int s = 0; s < static_cast<int>(c.access.size()); s++) {
        int64_t live = 0;
        for (const auto &[r, a] : tmp.alloc)
            if (a.birth <= s && s <= a.death) live += a.size;
        lower = std::max(lower, live);
    }
    return tmp.alloc;
}

}  // namespace

TrainingC training_c(const Program &p, const Plan &plan, const WeightTable &wt, Target &forward)
{
    if (!plan.options.keep_all) internal_error("training: the forward plan must keep every activation");
    TrainingC out;
    CWriter defs, fns;
    BackwardTarget target(forward);
    defs.comment("gradient arena: byte offsets per token (a gradient lives at grad_act + T * offset)");
    const std::vector<Section> forward_order = p.sections();
    for (auto it = forward_order.rbegin(); it != forward_order.rend(); ++it) {  // the backward: footer first
        const Section s = *it;
        const SectionPlan &sp = plan.section(s);
        size_t si = static_cast<size_t>(s);
        CWriter scratch;
        std::set<std::string> ignored;
        BwdCtx dry(p, s, sp, wt, target, true);
        walk(dry, scratch, ignored);
        auto galloc = plan_gradients(dry, out.stats.per_token[si], out.stats.naive[si], out.stats.lower_bound[si]);
        out.stats.max_per_token = std::max(out.stats.max_per_token, out.stats.per_token[si]);
        for (const auto &[root, a] : galloc)
            defs.line(fmt::format("{:<48} /* d {} {}/token, steps {}..{} */",
                                  fmt::format("#define {} {}", goff_name(s, root), a.offset), comment_safe(root),
                                  human_bytes(a.size), a.birth, a.death));

        BwdCtx c(p, s, sp, wt, target, false);
        CWriter body;
        body.indent();
        std::set<std::string> reads;
        walk(c, body, reads);
        body.line("return CK_OK;");
        std::string comment = fmt::format("/* The {}'s backward: gout is the gradient of its output{}, gin receives its "
                                          "input's. */",
                                          Program::section_name(s), s == Section::Footer ? " (the logits': m->dlogits)" : "");
        fns.lines(function_c(comment, signature_c(target.function_name(s), target.params(s)), c.l, target.params(s),
                             {reads.begin(), reads.end()}, body.str()));
        fns.line();
    }
    defs.line(fmt::format("#define CK_GRAD_PER_TOKEN {} /* bytes per token: the largest section */",
                          out.stats.max_per_token));
    out.plan = defs.str();
    out.functions = fns.str() + layer_dispatch_c(p, "ck_layer_backward", "ck_block_backward", "ck_block2_backward",
                                                 "int T, const float *gout, float *gin", "T, gout, gin") + "\n";
    moe_aux_c(p, plan, wt, target, out);
    return out;
}

void print_training_report(const Program &p, const Plan &plan, const GradientPlanStats &g, int64_t tokens,
                           std::ostream &os)
{
    int64_t L = p.info.n_layers;
    auto saved = [&](Section s) { return plan.section(s).per_token.arena; };
    // each layer's slice is the larger of the two kinds' (CK_SAVED_BLOCK)
    int64_t saved_per_token = saved(Section::Header) + L * std::max(saved(Section::Block), saved(Section::Block2)) +
                              saved(Section::Footer) + (L + 1) * p.info.hidden_size * 4;
    const int64_t params = weight_totals(p).elements;
    os << "training memory (ckc compile --train):\n";
    os << fmt::format("  {:<28} {:>14} {:>14} {:>14}   (per token; x T at run time)\n", "", "planned", "naive sum",
                      "lower bound");
    os << fmt::format("  {:<28} {:>14} {:>14} {:>14}\n", "saved activations",
                      human_bytes(static_cast<double>(saved_per_token)), "", "");
    for (Section s : p.sections()) {
        size_t i = static_cast<size_t>(s);
        os << fmt::format("  {:<28} {:>14} {:>14} {:>14}\n", fmt::format("gradient arena: {}", Program::section_name(s)),
                          human_bytes(static_cast<double>(g.per_token[i])), human_bytes(static_cast<double>(g.naive[i])),
                          human_bytes(static_cast<double>(g.lower_bound[i])));
    }
    os << fmt::format("  {:<28} {:>14}   (the residual stream's gradient, twice)\n", "carry gradients",
                      human_bytes(static_cast<double>(2 * p.info.hidden_size * 4)));
    os << fmt::format("  {:<28} {:>14}   (the loss gradient)\n", "logits gradient",
                      human_bytes(static_cast<double>(p.info.vocab_size * 4)));
    double fixed = static_cast<double>(params) * 4;
    os << fmt::format("  parameters {} ({} floats): gradients {}, AdamW state {} (outside the arenas)\n", human_bytes(fixed),
                      params, human_bytes(fixed), human_bytes(2 * fixed));
    double per_tok = static_cast<double>(saved_per_token + g.max_per_token + 2 * p.info.hidden_size * 4 +
                                         p.info.vocab_size * 4);
    os << fmt::format("  at {} tokens: activations and gradients {}, with parameters, gradients and AdamW state {}\n",
                      tokens, human_bytes(per_tok * static_cast<double>(tokens)),
                      human_bytes(per_tok * static_cast<double>(tokens) + 4 * fixed));
}

}  // namespace ckc
