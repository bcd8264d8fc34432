// backward_c.cpp — ck_<section>_backward for a language model (see backward_c.h).
//
// How to add an op's backward: one row in kBackward below; its function reads forward values with
// c.val(t), writes input gradients with c.write_grad(t) (after c.acc({...}) says whether to overwrite or
// add), reads the output's gradient with c.read_grad(n.output) and accumulates parameter gradients into
// c.param_grad(w). The kernel goes in runtime/kernels/train.c with a *_ref twin, a finite-difference test
// and a fast-vs-ref test (tests/unit/test_train_kernels.cpp).
#include "codegen/backward_c.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "codegen/cwriter.h"
#include "ir/op_rules.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

namespace {

using namespace rules;

constexpr const char *kInCarry = "@dcarry_in";    // the gradient of the section's input carry (written)
constexpr const char *kOutCarry = "@dcarry_out";  // the gradient of the section's output carry (read)

std::string goff_name(Section s, const std::string &root)
{
    return "CK_GOFF_" + upper(Program::section_name(s)) + "_" + upper(c_identifier(root));
}

struct StepAccess {
    std::set<std::string> reads, writes;
    int64_t scratch = 0;  // bytes per token
};

// What one backward function sees: forward values (saved), gradients (planned), parameter gradients.
class BwdCtx {
public:
    BwdCtx(const Program &p, Section sec, const SectionPlan &sp, const WeightTable &wt,
           const std::function<std::string(const Node &)> &rope, bool dry_run)
        : p(p), sec(sec), g(p.section(sec)), sp(sp), wt(wt), rope(rope), dry_run_(dry_run)
    {
    }

    const Program &p;
    Section sec;
    const Graph &g;
    const SectionPlan &sp;
    const WeightTable &wt;
    const std::function<std::string(const Node &)> &rope;
    CWriter w;
    const Node *n = nullptr;
    int step = 0;
    std::vector<StepAccess> access;  // per step (the dry run)

    bool recording() const { return dry_run_; }

    // ---- forward values
    std::string val(const std::string &t) const
    {
        const Tensor &tt = g.tensor(t);
        if (tt.storage == Storage::Weight) return wt.expr(sec, tt, sec == Section::Block ? "w->" : "m->w.");
        if (tt.storage == Storage::Input) return "m->tokens";
        const Region &r = sp.region.at(t);
        std::string base;
        if (r.root == kCarryRoot) {
            if (g.producer(t))
                internal_error("training: the backward of '" + n->name + "' reads the section's output '" + t + "'");
            base = sec == Section::Block ? "(m->train_x + (size_t)layer * T * CK_DIM)"
                                         : "(m->train_x + (size_t)CK_N_LAYERS * T * CK_DIM)";
        } else if (g.tensor(r.root).storage == Storage::Output) {
            base = "m->logits";
        } else {
            base = fmt::format("((float *)(m->act + (size_t)T * CK_OFF_{}_{}))", upper(Program::section_name(sec)),
                               upper(c_identifier(r.root)));
        }
        return r.offset ? fmt::format("({} + {})", base, r.offset) : base;
    }
    std::string ld(const std::string &t) const
    {
        const Tensor &tt = g.tensor(t);
        const Region &r = sp.region.at(t);
        if (tt.storage != Storage::Weight && r.strided) return std::to_string(root_width(r.root));
        return std::to_string(tt.shape.empty() ? 1 : tt.shape.back());
    }
    int64_t width(const std::string &t) const { return last(g.tensor(t).shape); }

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
    std::string grad(const std::string &t, bool read)
    {
        std::string root = groot(t);
        if (recording()) {
            if (root[0] != '@' || root == kInCarry) (read ? access[step].reads : access[step].writes).insert(root);
            return "g";
        }
        const Region &r = sp.region.at(t);
        std::string base;
        if (root == kInCarry) base = "gin";
        else if (root == kOutCarry) base = "gout";
        else if (root == "@dlogits") base = "m->dlogits";
        else base = fmt::format("((float *)(m->grad_act + (size_t)T * {}))", goff_name(sec, root));
        return r.offset ? fmt::format("({} + {})", base, r.offset) : base;
    }
    std::string read_grad(const std::string &t) { return grad(t, true); }    // an output's gradient
    std::string write_grad(const std::string &t) { return grad(t, false); }  // an input's gradient
    std::string gld(const std::string &t) const { return ld(t); }

    // Whether the next call overwrites (0) or adds to (1) the gradients of `ts`: overwrite only when every
    // one is a whole root nobody has written yet. A column view of an unwritten root zeroes the root first
    // (its other columns may never be written); so does a whole root written alongside one that adds.
    std::string acc(const std::vector<std::string> &ts)
    {
        bool all_fresh = true;
        for (const auto &t : ts)
            if (written_.count(groot(t)) || partial(t)) all_fresh = false;
        for (const auto &t : ts) {
            std::string root = groot(t);
            if (written_.count(root)) continue;
            if (!all_fresh) zero(t, root);
            written_.insert(root);
        }
        return all_fresh ? "0" : "1";
    }

    std::string param_grad(const std::string &weight) const
    {
        const Tensor &t = g.tensor(weight);
        return "(float *)" + wt.expr(sec, t, sec == Section::Block ? "gw->" : "m->g.");
    }
    std::string scratch(int64_t bytes_per_token)
    {
        std::string key = n->name + "#gscratch";
        if (recording()) {
            access[step].scratch = std::max(access[step].scratch, align_up(bytes_per_token, 64));
            return "scratch";
        }
        return fmt::format("((float *)(m->grad_act + (size_t)T * {}))", goff_name(sec, key));
    }
    std::string numel(const std::string &t) const { return fmt::format("(size_t)T * {}", width(t)); }
    std::string param(const std::string &key, double dflt, bool is_int) const
    {
        std::string table = n->table(key);
        if (!table.empty()) return "CK_LAYER_" + upper(c_identifier(table)) + "[layer]";
        double v = n->f(key, dflt);
        return is_int ? std::to_string(static_cast<int64_t>(v)) : c_float(v);
    }
    bool needs_grad(const std::string &t) const
    {
        const Tensor &tt = g.tensor(t);
        return tt.storage != Storage::Weight && tt.storage != Storage::Input;
    }

private:
    bool dry_run_;  // records what each step reads and writes; emits nothing
    std::set<std::string> written_;

    int64_t root_width(const std::string &root) const
    {
        return root == kCarryRoot ? p.carry_shape.back() : g.tensor(root).shape.back();
    }
    bool partial(const std::string &t) const
    {
        const Region &r = sp.region.at(t);
        return r.root != t && r.root != kCarryRoot && (r.strided || r.offset || width(t) != root_width(r.root));
    }
    void zero(const std::string &t, const std::string &root)
    {
        if (recording()) {
            access[step].writes.insert(root);
            return;
        }
        std::string base = root == kInCarry ? "gin" : fmt::format("(m->grad_act + (size_t)T * {})", goff_name(sec, root));
        w.line(fmt::format("memset({}, 0, (size_t)T * {} * sizeof(float));", base, root_width(sp.region.at(t).root)));
    }
};

// ---- the backward table: one function per op --------------------------------------------------------

void embedding_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    c.w.line(fmt::format("ck_embedding_backward({}, {}, m->tokens, T, {});", c.param_grad(n.inputs[1]), c.read_grad(n.output),
                         c.width(n.output)));
}

void pos_embed_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    c.w.line(fmt::format("ck_pos_embed_backward({}, {}, T, {}, 0);", c.param_grad(n.inputs[1]), c.read_grad(n.output),
                         c.width(n.output)));
    std::string a = c.acc({n.inputs[0]});
    c.w.line(fmt::format("ck_grad_add({}, {}, {}, {}, 1.0f);", c.write_grad(n.inputs[0]), a, c.read_grad(n.output), c.numel(n.output)));
}

void rmsnorm_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    std::string a = c.acc({n.inputs[0]});
    c.w.line(fmt::format("ck_rmsnorm_backward({}, {}, {}, {}, {}, {}, T, {}, {}, {}, {});", c.write_grad(n.inputs[0]), a,
                         c.param_grad(n.inputs[1]), c.read_grad(n.output), c.val(n.inputs[0]), c.val(n.inputs[1]),
                         c.width(n.output), c_float(n.f("eps")), c_float(n.f("w_offset", 0.0)), c.scratch(4)));
}

void layernorm_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    std::string a = c.acc({n.inputs[0]});
    c.w.line(fmt::format("ck_layernorm_backward({}, {}, {}, {}, {}, {}, {}, T, {}, {}, {});", c.write_grad(n.inputs[0]), a,
                         c.param_grad(n.inputs[1]), c.param_grad(n.inputs[2]), c.read_grad(n.output), c.val(n.inputs[0]),
                         c.val(n.inputs[1]), c.width(n.output), c_float(n.f("eps")), c.scratch(8)));
}

void matmul_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    Inputs in;
    for (auto &i : n.inputs) in.push_back(&c.g.tensor(i));
    MM d = matmul_dims(n, in);
    if (d.b_batched || !d.trans_b || d.trans_a || n.f("alpha", 1.0) != 1.0 ||
        c.g.tensor(n.inputs[1]).storage != Storage::Weight)
        input_error(fmt::format("training: node '{}' ({}) is not a linear layer of a weight; ckc trains x @ W^T (+ b)",
                                n.name, op_name(n.op)));
    std::string bias = "NULL", add;
    if (n.op == Op::MATMUL_ADD) {
        if (in[2]->shape.size() == 1) bias = c.param_grad(n.inputs[2]);
        else {
            add = n.inputs[2];
            if (n.inputs.size() == 4) bias = c.param_grad(n.inputs[3]);
        }
    }
    std::string x = n.inputs[0], dx = "NULL", a = "0";
    if (c.needs_grad(x)) {
        a = c.acc({x});
        dx = c.write_grad(x);
    }
    c.w.line(fmt::format("ck_linear_backward({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, T, {}, {});", dx, c.gld(x), a,
                         c.param_grad(n.inputs[1]), bias, c.read_grad(n.output), c.gld(n.output), c.val(x), c.ld(x),
                         c.val(n.inputs[1]), d.K, d.N));
    if (!add.empty()) {  // the residual folded into the GEMM passes the gradient through
        if (c.gld(n.output) != std::to_string(d.N) || c.gld(add) != std::to_string(d.N))
            internal_error("training: the residual of '" + n.name + "' is a column view");
        std::string aa = c.acc({add});
        c.w.line(fmt::format("ck_grad_add({}, {}, {}, {}, 1.0f);", c.write_grad(add), aa, c.read_grad(n.output), c.numel(n.output)));
    }
}

void slice_bwd(BwdCtx &c)
{
    // a column view: its gradient is the same view of its input's gradient (nothing to run)
    const Node &n = *c.n;
    if (!c.sp.views.count(n.name))
        internal_error("training: slice '" + n.name + "' is a copy, not a view of its input");
}

void rope_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    if (n.i("interleaved", 0)) internal_error("node '" + n.name + "': no backward for interleaved RoPE (GGUF weights)");
    std::string t = c.rope(n), a = c.acc({n.inputs[0]});
    c.w.line(fmt::format("ck_rope_backward({}, {}, {}, {}, {}, T, {}, {}, {}, 0, {}_cos, {}_sin);", c.write_grad(n.inputs[0]),
                         c.gld(n.inputs[0]), a, c.read_grad(n.output), c.gld(n.output), n.i("heads"), n.i("head_dim"),
                         n.i("rot_dim"), t, t));
}

void kv_store_bwd(BwdCtx &) {}  // the attention's backward writes the gradients of k and v itself

void kv_attention_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    const Node *store = c.g.producer(n.inputs[1]);
    if (!store || store->op != Op::KV_STORE) internal_error("training: '" + n.name + "' does not read a KV_STORE");
    const std::string &q = n.inputs[0], &k = store->inputs[0], &v = store->inputs[1];
    int64_t kvh = n.i("kv_heads"), hd = n.i("head_dim"), heads = n.i("heads");
    std::string kv = c.val(n.inputs[1]), a = c.acc({q, k, v});
    c.w.line(fmt::format("ck_attention_backward({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {} + (size_t){} * T * {}, "
                         "T, {}, {}, T, {}, {}, {}, {}, {}, {}, {});",
                         c.write_grad(q), c.gld(q), c.write_grad(k), c.gld(k), c.write_grad(v), c.gld(v), a, c.read_grad(n.output),
                         c.gld(n.output), c.val(q), c.ld(q), kv, kv, kvh, hd, c.val(n.output), c.ld(n.output), heads, kvh,
                         hd, c.param("scale", 0.0, false), c.param("window", 0, true), c.param("softcap", 0.0, false),
                         c.scratch(8 * heads)));
}

const char *act_c(const Node &n)
{
    switch (act_of(n)) {
    case Act::Silu: return "CK_ACT_SILU";
    case Act::GeluTanh: return "CK_ACT_GELU_TANH";
    case Act::Gelu: return "CK_ACT_GELU";
    }
    return "";
}

void glu_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    const std::string &gate = n.inputs[0], &up = n.inputs[1];
    std::string a = c.acc({gate, up});
    c.w.line(fmt::format("ck_glu_backward({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, T, {}, {});", c.write_grad(gate),
                         c.gld(gate), c.write_grad(up), c.gld(up), a, c.read_grad(n.output), c.gld(n.output), c.val(gate), c.ld(gate),
                         c.val(up), c.ld(up), c.width(n.output), act_c(n)));
}

void contiguous(BwdCtx &c, const std::string &t)
{
    if (c.ld(t) != std::to_string(c.width(t)))
        internal_error("training: '" + t + "' of node '" + c.n->name + "' is a column view; its backward needs rows");
}

void gelu_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    contiguous(c, n.inputs[0]);
    contiguous(c, n.output);
    std::string a = c.acc({n.inputs[0]});
    c.w.line(fmt::format("ck_gelu_backward({}, {}, {}, {}, {}, {});", c.write_grad(n.inputs[0]), a, c.read_grad(n.output),
                         c.val(n.inputs[0]), c.numel(n.output), act_c(n)));
}

void add_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    if (n.inputs.size() != 2 || c.g.tensor(n.inputs[0]).shape != c.g.tensor(n.inputs[1]).shape)
        input_error("training: node '" + n.name + "' (ADD) broadcasts; ckc trains adds of equal shapes");
    for (const auto &t : n.inputs) {
        contiguous(c, t);
        std::string a = c.acc({t});
        c.w.line(fmt::format("ck_grad_add({}, {}, {}, {}, 1.0f);", c.write_grad(t), a, c.read_grad(n.output), c.numel(n.output)));
    }
}

void scale_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    contiguous(c, n.inputs[0]);
    std::string a = c.acc({n.inputs[0]});
    c.w.line(fmt::format("ck_grad_add({}, {}, {}, {}, {});", c.write_grad(n.inputs[0]), a, c.read_grad(n.output), c.numel(n.output),
                         c_float(n.f("scale"))));
}

void softcap_bwd(BwdCtx &c)
{
    const Node &n = *c.n;
    contiguous(c, n.inputs[0]);
    std::string a = c.acc({n.inputs[0]});
    c.w.line(fmt::format("ck_softcap_backward({}, {}, {}, {}, {}, {});", c.write_grad(n.inputs[0]), a, c.read_grad(n.output),
                         c.val(n.inputs[0]), c.numel(n.output), c_float(n.f("cap"))));
}

const std::map<Op, void (*)(BwdCtx &)> kBackward = {
    {Op::EMBEDDING, embedding_bwd}, {Op::POS_EMBED, pos_embed_bwd},   {Op::RMSNORM, rmsnorm_bwd},
    {Op::LAYERNORM, layernorm_bwd}, {Op::MATMUL, matmul_bwd},         {Op::MATMUL_ADD, matmul_bwd},
    {Op::SLICE, slice_bwd},         {Op::ROPE, rope_bwd},             {Op::KV_STORE, kv_store_bwd},
    {Op::KV_ATTENTION, kv_attention_bwd}, {Op::GLU, glu_bwd},         {Op::GELU, gelu_bwd},
    {Op::ADD, add_bwd},             {Op::SCALE, scale_bwd},           {Op::SOFTCAP, softcap_bwd},
};

// Runs the backward rows of a section in reverse forward order.
void walk(BwdCtx &c)
{
    const auto &order = c.sp.order;
    c.access.assign(order.size(), {});
    for (size_t i = 0; i < order.size(); i++) {
        const Node &n = *c.g.node(order[order.size() - 1 - i]);
        auto it = kBackward.find(n.op);
        if (it == kBackward.end())
            input_error(fmt::format("training: node '{}' ({}) has no backward in ckc; trainable ops: EMBEDDING, "
                                    "POS_EMBED, RMSNORM, LAYERNORM, MATMUL(_ADD) of weights, SLICE, ROPE, KV_STORE, "
                                    "KV_ATTENTION, GLU, GELU, ADD, SCALE, SOFTCAP",
                                    n.name, op_name(n.op)));
        c.n = &n;
        c.step = static_cast<int>(i);
        if (!c.recording() && it->second != slice_bwd && it->second != kv_store_bwd)
            c.w.comment(comment_safe("d " + (n.origin.empty() ? n.name : n.origin.str())));
        it->second(c);
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

TrainingC training_c(const Program &p, const Plan &plan, const WeightTable &wt,
                     const std::function<std::string(const Node &)> &rope_table)
{
    if (!plan.options.keep_all) internal_error("training: the forward plan must keep every activation");
    TrainingC out;
    CWriter defs, fns;
    defs.comment("gradient arena: byte offsets per token (a gradient lives at grad_act + T * offset)");
    for (Section s : {Section::Footer, Section::Block, Section::Header}) {
        const SectionPlan &sp = plan.section(s);
        size_t si = static_cast<size_t>(s);
        BwdCtx dry(p, s, sp, wt, rope_table, true);
        walk(dry);
        auto galloc = plan_gradients(dry, out.stats.per_token[si], out.stats.naive[si], out.stats.lower_bound[si]);
        out.stats.max_per_token = std::max(out.stats.max_per_token, out.stats.per_token[si]);
        for (const auto &[root, a] : galloc)
            defs.line(fmt::format("{:<48} /* d {} {}/token, steps {}..{} */",
                                  fmt::format("#define {} {}", goff_name(s, root), a.offset), comment_safe(root),
                                  human_bytes(a.size), a.birth, a.death));

        BwdCtx c(p, s, sp, wt, rope_table, false);
        walk(c);
        fns.comment(fmt::format("The {}'s backward: gout is the gradient of its output{}, gin receives its input's.",
                                Program::section_name(s), s == Section::Footer ? " (the logits': m->dlogits)" : ""));
        fns.open(fmt::format("static int ck_{}_backward(ck_model *m, int layer, int T, const float *gout, float *gin)",
                             Program::section_name(s)));
        std::string body = c.w.str();
        if (s == Section::Block) {
            fns.line("const ck_layer_weights *w = &m->w.layers[layer];");
            fns.line("const ck_layer_weights *gw = &m->g.layers[layer];");
        }
        fns.line("(void)layer;");
        fns.line("(void)gout;");
        fns.line("(void)gin;");
        fns.lines(body);
        fns.line("return CK_OK;");
        fns.close();
        fns.line();
    }
    defs.line(fmt::format("#define CK_GRAD_PER_TOKEN {} /* bytes per token: the largest section */",
                          out.stats.max_per_token));
    out.plan = defs.str();
    out.functions = fns.str();
    return out;
}

void print_training_report(const Program &p, const Plan &plan, const GradientPlanStats &g, int64_t tokens,
                           std::ostream &os)
{
    int64_t L = p.info.n_layers;
    auto saved = [&](Section s) { return plan.section(s).per_token.arena; };
    int64_t saved_per_token = saved(Section::Header) + L * saved(Section::Block) + saved(Section::Footer) +
                              (L + 1) * p.info.hidden_size * 4;
    int64_t params = 0;
    std::set<std::string> counted;
    for (Section s : kSections)
        for (const auto &[name, t] : p.section(s).tensors())
            if (t.storage == Storage::Weight && counted.insert(join(t.source.parts, "|")).second)
                params += shape_numel_fixed(t.shape) * (s == Section::Block ? L : 1);
    os << "training memory (ckc compile --train):\n";
    os << fmt::format("  {:<28} {:>14} {:>14} {:>14}   (per token; x T at run time)\n", "", "planned", "naive sum",
                      "lower bound");
    os << fmt::format("  {:<28} {:>14} {:>14} {:>14}\n", "saved activations",
                      human_bytes(static_cast<double>(saved_per_token)), "", "");
    for (Section s : kSections) {
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
