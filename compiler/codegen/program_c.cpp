// program_c.cpp — shared model.c pieces (see program_c.h).
#include "codegen/program_c.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "ck_quant.h"
#include "ck_weights.h"  // CK_WEIGHT_MAX_PARTS, CK_WEIGHT_MAX_DIMS
#include "ir/op_rules.h"
#include "ir/symbolic.h"
#include "codegen/emit.h"
#include "codegen/emitters.h"
#include "codegen/template.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

std::string upper(std::string s)
{
    for (auto &c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

std::string comment_safe(const std::string &s) { return replace_all(s, "*/", "* /"); }

CExpr Target::symbol(size_t k) const
{
    internal_error(fmt::format("codegen: this target has no symbolic sizes (asked for the {}th)", k));
}

std::string c_type(DType t)
{
    switch (t) {
    case DType::F32: return "float";
    case DType::I64: return "int64_t";
    case DType::I32: return "int32_t";
    case DType::Bool: return "uint8_t";
    case DType::F16:
    case DType::BF16: break;  // weights in these are converted at load; no activation has them
    }
    internal_error(std::string("codegen: no C type for ") + dtype_name(t));
}

std::string c_shape(const Shape &s)
{
    std::vector<std::string> v;
    for (int64_t d : s) v.push_back(std::to_string(d));
    if (v.empty()) v.push_back("1");
    return "{" + join(v, ", ") + "}";
}

namespace {

std::string source_key(const Tensor &t) { return join(t.source.parts, "|"); }

class NameSet {
public:
    explicit NameSet(std::set<std::string> reserved = {}) : used_(std::move(reserved)) {}
    std::string take(const std::string &want)
    {
        std::string base = c_identifier(want), name = base;
        for (int k = 2; used_.count(name); k++) name = base + "_" + std::to_string(k);
        used_.insert(name);
        return name;
    }

private:
    std::set<std::string> used_;
};

std::string spec_row(const std::string &strct, const WeightField &f)
{
    const Tensor &t = *f.t;
    if (t.source.parts.empty() || t.source.parts.size() > CK_WEIGHT_MAX_PARTS ||
        t.source.part_shapes[0].size() > CK_WEIGHT_MAX_DIMS)
        throw Error(ErrorKind::Internal, fmt::format("weight '{}': {} parts of rank {}; the loader takes 1..{} of "
                                                     "rank <= {}", t.name, t.source.parts.size(),
                                                     t.source.part_shapes.empty() ? 0 : t.source.part_shapes[0].size(),
                                                     CK_WEIGHT_MAX_PARTS, CK_WEIGHT_MAX_DIMS));
    std::vector<std::string> names, shapes;
    for (size_t i = 0; i < t.source.parts.size(); i++) {
        names.push_back(c_string(replace_all(replace_all(replace_all(t.source.parts[i], "%", "%%"), "{L}", "%d"), "{E}",
                                             "%d")));
        std::vector<std::string> dims;
        for (int64_t d : t.source.part_shapes[i]) dims.push_back(std::to_string(d));
        if (dims.empty()) dims.push_back("1");
        shapes.push_back("{" + join(dims, ", ") + "}");
    }
    std::string format = f.format == CK_WEIGHT_FLOAT      ? "CK_WEIGHT_FLOAT"
                         : f.format == CK_WEIGHT_AS_STORED ? "CK_WEIGHT_AS_STORED"
                                                           : fmt::format("CK_Q_{}", upper(ck_qtype_name(f.format)));
    return fmt::format("{{offsetof({}, {}), {}, {{{}}}, {}, {{{}}}, {}, {}{}}},", strct, f.field, t.source.parts.size(),
                       join(names, ", "), t.source.part_shapes[0].size(), join(shapes, ", "), t.source.transposed ? 1 : 0,
                       format, fmt::format(", {}", f.experts));
}

}  // namespace

std::string offset_name(Section section, const std::string &root)
{
    return "CK_OFF_" + upper(Program::section_name(section)) + "_" + upper(c_identifier(root));
}


namespace {

// Input i of n reads a weight as ck_linear's [N][K] matrix or as an embedding table: the uses a stored
// format (ck_qmat) serves.
bool matrix_use(const Graph &g, const Node &n, size_t i)
{
    if (n.op == Op::EMBEDDING) return i == 1;
    if ((n.op != Op::MATMUL && n.op != Op::MATMUL_ADD) || i != 1) return false;
    Inputs in;
    for (auto &x : n.inputs) in.push_back(&g.tensor(x));
    rules::MM d = rules::matmul_dims(n, in);
    return !d.b_batched && d.trans_b && !d.trans_a && n.f("alpha", 1.0) == 1.0;
}

}  // namespace

bool WeightTable::matrix(const Tensor &t) const { return matrix_keys.count(source_key(t)) != 0; }
bool WeightTable::experts(const Tensor &t) const { return expert_keys.count(source_key(t)) != 0; }

void WeightTable::collect(const Program &p)
{
    NameSet gnames, lnames;
    layer_kind = p.layer_kind;
    if (p.info.stored_weights) {  // matrices: every use a GEMM weight or an embedding table
        std::map<std::string, bool> all_matrix;
        for (Section s : p.sections())
            for (const Node &n : p.section(s).nodes())
                for (size_t i = 0; i < n.inputs.size(); i++) {
                    const Tensor &t = p.section(s).tensor(n.inputs[i]);
                    if (t.storage != Storage::Weight || t.dtype != DType::F32 || t.shape.size() != 2) continue;
                    auto [it, fresh] = all_matrix.emplace(source_key(t), true);
                    it->second = it->second && matrix_use(p.section(s), n, i);
                }
        for (const auto &[key, ok] : all_matrix)
            if (ok) matrix_keys.insert(key);
    }
    for (Section s : {Section::Block, Section::Block2})  // a mixture's experts: inputs 2..4 of MOE_EXPERTS
        for (const Node &n : p.section(s).nodes())
            if (n.op == Op::MOE_EXPERTS)
                for (size_t i = 2; i < n.inputs.size(); i++)
                    expert_keys.insert(source_key(p.section(s).tensor(n.inputs[i])));
    std::map<std::string, size_t> layer_index;  // a layer field's place in `layer`
    for (Section s : {Section::Header, Section::Footer, Section::Block, Section::Block2})
        for (const Node &n : p.section(s).nodes())
            for (const auto &name : n.inputs) {
                const Tensor &t = p.section(s).tensor(name);
                if (t.storage != Storage::Weight) continue;
                std::string key = source_key(t);
                if (t.dtype != DType::F32) {
                    if (is_layer_section(s) && key.find("{L}") != std::string::npos)
                        input_error("constant '" + name + "' (" + dtype_name(t.dtype) +
                                    ") differs by layer; only float32 weights can");
                    if (inline_by_key.count(key)) continue;
                    std::string field = gnames.take("const_" + name);
                    inline_by_key[key] = field;
                    inline_consts.push_back({field, &t});
                    continue;
                }
                const bool per_layer = is_layer_section(s);
                const int kind = s == Section::Block2 ? 2 : 1;
                auto &by_key = per_layer ? layer_by_key : global_by_key;
                if (by_key.count(key)) {
                    if (per_layer) layer[layer_index.at(key)].kinds |= kind;
                    continue;
                }
                std::string want = replace_all(per_layer ? name : merge_names(t.source.parts), ".{E}", "");
                if (starts_with(want, "model.")) want = want.substr(6);
                std::string field = (per_layer ? lnames : gnames).take(want);
                by_key[key] = field;
                WeightField wf{field, &t};
                wf.kinds = kind;
                if (expert_keys.count(key)) {  // per expert: the stored format, the one asked for; or float32, all
                    wf.experts = t.shape[0];      // experts in one array (a float field, trainable)
                    wf.format = CK_WEIGHT_FLOAT;
                    if (p.info.stored_weights) wf.format = CK_WEIGHT_AS_STORED;
                    if (p.info.weight_type >= 0) {
                        int64_t K = t.shape[2];
                        wf.format = ck_qtype_for_rows(p.info.weight_type, K);
                        if (wf.format != p.info.weight_type)
                            notes.push_back(fmt::format("{}: rows of {} are not whole {} blocks of {}; stored as {}",
                                                        merge_names(t.source.parts), K, ck_qtype_name(p.info.weight_type),
                                                        ck_qtype_block(p.info.weight_type), ck_qtype_name(wf.format)));
                    }
                } else if (matrix_keys.count(key)) {
                    wf.matrix = true;
                    wf.format = CK_WEIGHT_AS_STORED;
                    if (p.info.weight_type >= 0) {
                        const Shape &ps = t.source.part_shapes[0];
                        int64_t K = t.source.transposed ? ps[0] : ps[1];
                        wf.format = ck_qtype_for_rows(p.info.weight_type, K);
                        if (wf.format != p.info.weight_type)
                            notes.push_back(fmt::format("{}: rows of {} are not whole {} blocks of {}; stored as {}",
                                                        merge_names(t.source.parts), K, ck_qtype_name(p.info.weight_type),
                                                        ck_qtype_block(p.info.weight_type), ck_qtype_name(wf.format)));
                    }
                }
                if (per_layer) layer_index[key] = layer.size();
                (per_layer ? layer : global).push_back(wf);
            }
}

std::string WeightTable::expr(Section section, const Tensor &t, const std::string &prefix) const
{
    if (t.dtype != DType::F32) {
        auto it = inline_by_key.find(source_key(t));
        if (it == inline_by_key.end()) internal_error("codegen: constant '" + t.name + "' has no array");
        return "CK_" + upper(it->second);
    }
    return prefix + field(section, t);
}

std::string inline_constants_c(const WeightTable &wt, const Program &p)
{
    CWriter w;
    w.line(fmt::format("#define CK_N_INLINE_CONSTS {}", wt.inline_consts.size()));
    for (const auto &f : wt.inline_consts) {
        const Tensor &t = *f.t;
        auto it = p.constants.find(t.source.parts[0]);
        if (it == p.constants.end()) internal_error("codegen: constant '" + t.name + "' has no value");
        const ConstData &c = it->second;
        if (c.v.size() > (1u << 22))
            input_error(fmt::format("constant '{}' ({} {}) is too large to inline in model.c; only float32 constants "
                                    "go to the weights file",
                                    t.name, dtype_name(t.dtype), shape_str(t.shape)));
        w.line(fmt::format("static const {} CK_{}[{}] = {{ /* {} {} */", c_type(t.dtype), upper(f.field),
                           std::max<size_t>(c.v.size(), 1), shape_str(t.shape), comment_safe(t.name)));
        w.indent();
        std::string line;
        for (size_t i = 0; i < c.v.size(); i++) {
            std::string v = t.dtype == DType::I64 ? fmt::format("INT64_C({})", static_cast<int64_t>(c.v[i]))
                                                  : std::to_string(static_cast<int64_t>(c.v[i]));
            if (line.size() + v.size() > 100) {
                w.line(line);
                line.clear();
            }
            line += v + ", ";
        }
        if (c.v.empty()) line = "0";
        if (!line.empty()) w.line(line);
        w.dedent();
        w.line("};");
    }
    return w.str();
}

std::string WeightTable::field(Section section, const Tensor &t) const
{
    const auto &by_key = is_layer_section(section) ? layer_by_key : global_by_key;
    auto it = by_key.find(source_key(t));
    if (it == by_key.end()) internal_error("codegen: weight '" + t.name + "' has no field");
    return it->second;
}

std::string weights_c(const WeightTable &wt, const std::string &prefix)
{
    CWriter w;
    auto field_line = [&](const WeightField &f) {
        std::string decl = f.experts && f.format != CK_WEIGHT_FLOAT ? fmt::format("const ck_qmat *{};", f.field)
                           : f.matrix ? fmt::format("ck_qmat {};", f.field)
                                      : fmt::format("const {} *{};", c_type(f.t->dtype == DType::F32 ? DType::F32 : f.t->dtype), f.field);
        w.line(fmt::format("{:<40} /* {} {}{} */", decl, shape_str(f.t->shape), comment_safe(merge_names(f.t->source.parts)),
                           f.t->source.transposed ? " (stored [in, out], loaded transposed)" : ""));
    };
    w.comment("one decoder layer; {L} in a name is the layer index");
    w.open(fmt::format("typedef struct {}layer_weights", prefix));
    for (const auto &f : wt.layer) field_line(f);
    if (wt.layer.empty()) w.line("char unused; /* no layers */");
    w.close(fmt::format("}} {}layer_weights;", prefix));
    w.line();
    w.open(fmt::format("typedef struct {}weights", prefix));
    for (const auto &f : wt.global) field_line(f);
    w.line(fmt::format("{}layer_weights layers[CK_N_LAYERS > 0 ? CK_N_LAYERS : 1];", prefix));
    w.close(fmt::format("}} {}weights;", prefix));
    w.line();
    w.comment("load tables: field, parts (concatenated along dim 0), names, rank, file shape of each part, transpose, format");
    w.open("static const ck_weight_spec CK_GLOBAL_WEIGHTS[] =");
    for (const auto &f : wt.global) w.line(spec_row(prefix + "weights", f));
    if (wt.global.empty()) w.line("{0, 0, {NULL}, 0, {{0}}, 0, CK_WEIGHT_FLOAT, 0} /* none */");
    w.close("};");
    w.open("static const ck_weight_spec CK_LAYER_WEIGHTS[] =");
    for (const auto &f : wt.layer) w.line(spec_row(prefix + "layer_weights", f));
    if (wt.layer.empty()) w.line("{0, 0, {NULL}, 0, {{0}}, 0, CK_WEIGHT_FLOAT, 0} /* none */");
    w.close("};");
    w.line(fmt::format("#define CK_N_GLOBAL_WEIGHTS {}", wt.global.size()));
    w.line(fmt::format("#define CK_N_LAYER_WEIGHTS {}", wt.layer.size()));
    if (wt.layer_kind.empty()) {
        w.line("#define CK_LAYER_READS(layer, i) 1 /* every layer reads every layer weight */");
        return w.str();
    }
    // layers of two kinds (block, block2): which kind each layer is, which kinds read each field
    std::vector<std::string> kinds, reads;
    for (int k : wt.layer_kind) kinds.push_back(std::to_string(k));
    for (const auto &f : wt.layer) reads.push_back(std::to_string(f.kinds));
    w.line(fmt::format("static const unsigned char CK_LAYER_KIND[CK_N_LAYERS] = {{{}}}; /* 0: ck_block, 1: ck_block2 */",
                       join(kinds, ", ")));
    w.line(fmt::format("static const unsigned char CK_LAYER_WEIGHT_KINDS[CK_N_LAYER_WEIGHTS] = {{{}}}; /* bit k: the "
                       "layers of kind k read it */", join(reads, ", ")));
    w.comment("whether layer `layer` reads layer weight i (the others stay NULL)");
    w.line("#define CK_LAYER_READS(layer, i) ((CK_LAYER_WEIGHT_KINDS[i] >> CK_LAYER_KIND[layer]) & 1)");
    return w.str();
}

int64_t widest_gemm_k(const Program &p)
{
    int64_t k = 0;
    for (Section s : p.sections())
        for (const Node &n : p.section(s).nodes())
            if ((n.op == Op::MATMUL || n.op == Op::MATMUL_ADD) && !p.section(s).tensor(n.inputs[0]).shape.empty())
                k = std::max(k, p.section(s).tensor(n.inputs[0]).shape.back());
    return std::max(k, widest_expert_k(p));
}

int64_t widest_expert_k(const Program &p)
{
    int64_t k = 0;
    for (Section s : {Section::Block, Section::Block2}) {
        const Graph &g = p.section(s);
        for (const Node &n : g.nodes())
            if (n.op == Op::MOE_EXPERTS)  // gate/up read the width, down the experts' width
                k = std::max({k, g.tensor(n.inputs[2]).shape[2], g.tensor(n.inputs[4]).shape[2]});
    }
    return k;
}

std::string plan_c(const Program &p, const Plan &plan)
{
    CWriter w;
    w.line(fmt::format("#define CK_ACT_PER_TOKEN {} /* bytes per token: the largest section */", plan.arena_per_token));
    w.line(fmt::format("#define CK_ACT_FIXED {} /* bytes independent of T */", plan.arena_fixed));
    for (Section s : p.sections()) {
        const SectionPlan &sp = plan.section(s);
        if (sp.alloc.empty() && p.section(s).nodes().empty()) continue;
        w.comment(fmt::format("{}: arena {}/token + {}; naive sum {}/token + {}; max-live lower bound {}/token + {}",
                              Program::section_name(s), human_bytes(sp.per_token.arena), human_bytes(sp.fixed.arena),
                              human_bytes(sp.per_token.naive), human_bytes(sp.fixed.naive),
                              human_bytes(sp.per_token.lower_bound), human_bytes(sp.fixed.lower_bound)));
        std::vector<const Allocation *> allocs;
        for (const auto &[n, a] : sp.alloc) allocs.push_back(&a);
        std::sort(allocs.begin(), allocs.end(), [](auto *a, auto *b) {
            return a->per_token != b->per_token ? a->per_token > b->per_token : a->offset < b->offset;
        });
        for (const Allocation *a : allocs) {
            bool scratch = p.section(s).has_tensor(a->root) == false;
            std::string what = scratch ? "scratch of " + a->root.substr(0, a->root.find('#'))
                                       : a->root + " " + shape_str(p.section(s).tensor(a->root).shape);
            std::string def = fmt::format("#define {} {}", offset_name(s, a->root), a->offset);
            w.line(fmt::format("{:<44} /* {} {}, steps {}..{} */", def, comment_safe(what),
                               a->per_token ? human_bytes(a->size) + "/token" : human_bytes(a->size), a->birth, a->death));
        }
    }
    return w.str();
}

std::string layer_dispatch_c(const Program &p, const std::string &name, const std::string &block,
                             const std::string &block2, const std::string &params, const std::string &args)
{
    auto call = [&](const std::string &fn) { return fn.empty() ? std::string("CK_OK") : fn + "(m, layer, " + args + ")"; };
    CWriter w;
    w.line(fmt::format("/* Layer `layer`: {} */", p.has_block2() ? "its kind's block (CK_LAYER_KIND)" : "the block"));
    w.line(fmt::format("static int {}(ck_model *m, int layer, {})", name, params));
    w.line("{");
    w.indent();
    if (!p.has_block2()) w.line(fmt::format("return {};", call(block)));
    else w.line(fmt::format("return CK_LAYER_KIND[layer] ? {} : {};", call(block2), call(block)));
    w.dedent();
    w.line("}");
    return w.str();
}

std::string layer_tables_c(const Program &p)
{
    CWriter w;
    for (const auto &[name, table] : p.layer_tables) {
        std::vector<std::string> vals;
        for (double v : table.values) vals.push_back(table.is_int ? std::to_string(static_cast<int64_t>(v)) : c_float(v));
        w.line(fmt::format("static const {} CK_LAYER_{}[CK_N_LAYERS] = {{{}}}; /* {} per layer */",
                           table.is_int ? "int" : "float", upper(c_identifier(name)), join(vals, ", "), name));
    }
    return w.str();
}


// ---- the locals of a generated function ------------------------------------------------------------------

SectionLocals::SectionLocals(const Program &p, Section sec, const SectionPlan &sp, const WeightTable &wt,
                             Target &target, std::set<std::string> reserved)
    : p(p), sec(sec), g(p.section(sec)), sp(sp), wt(wt), target(target), used_names_(std::move(reserved))
{
}

std::string SectionLocals::take_name(const std::string &hint)
{
    std::string base = c_identifier(hint), name = base;
    for (int k = 2; used_names_.count(name); k++) name = base + "_" + std::to_string(k);
    used_names_.insert(name);
    return name;
}

void SectionLocals::add(Local l) { locals_.push_back(std::move(l)); }

std::string SectionLocals::value(const std::string &type, const std::string &hint, const std::string &expr,
                                 const std::string &note, std::vector<std::string> reads)
{
    auto it = expr_local_.find(expr);
    if (it != expr_local_.end()) return it->second;
    std::string name = take_name(hint);
    locals_.push_back({type, name, expr, note, std::move(reads)});
    return expr_local_[expr] = name;
}

std::vector<std::string> SectionLocals::reads() const
{
    std::vector<std::string> out;
    for (const Local &l : locals_) out.insert(out.end(), l.reads.begin(), l.reads.end());
    return out;
}

void SectionLocals::write(CWriter &w, const std::set<std::string> &used, const std::set<std::string> &traced) const
{
    std::vector<const Local *> order, trace_only;
    for (const Local &l : locals_) {
        if (!l.lazy || used.count(l.name)) order.push_back(&l);
        else if (traced.count(l.name)) trace_only.push_back(&l);
    }
    std::stable_sort(order.begin(), order.end(), [](const Local *a, const Local *b) {
        return std::make_pair(!a->host_only, a->group) < std::make_pair(!b->host_only, b->group);
    });
    std::vector<std::string> decls;
    size_t width = 0;
    for (const Local *l : order) {
        decls.push_back(fmt::format("{}{} = {};", l->type, l->name, l->expr));
        if (decls.back().size() <= 80) width = std::max(width, decls.back().size());  // long ones do not push the comments right
    }
    for (size_t i = 0; i < decls.size(); i++)
        w.line(fmt::format("{:<{}} /* {} */", decls[i], width, comment_safe(order[i]->note)));
    if (trace_only.empty()) return;
    w.line("#ifdef CK_TRACE /* what only the trace hooks read */");
    for (const Local *l : trace_only)
        w.line(fmt::format("{}{} = {}; /* {} */", l->type, l->name, l->expr, comment_safe(l->note)));
    w.line("#endif");
}

CExpr SectionLocals::root_expr(const std::string &root, const std::string &type)
{
    if (root == kCarryRoot) return target.carry(sec);
    const Tensor &r = g.tensor(root);
    if (r.storage == Storage::Input) {  // written into (graph.json "into"): not const
        CExpr in = target.input(r);
        if (g.updated_input(root)) in.text = fmt::format("(({} *){})", type, in.text);
        return in;
    }
    // (an output written into an input has no buffer of its own: when it cannot go there directly, the
    // planner gave it an arena slot, copied into the input at the end)
    if (r.storage == Storage::Output && r.into.empty()) return target.output(r);
    const Allocation &a = sp.alloc.at(root);
    CExpr arena = target.arena(offset_name(sec, root), a.per_token);
    return {fmt::format("({} *)({})", type, arena.text), arena.reads};
}

std::string SectionLocals::declare(const std::string &t)
{
    auto have = tensor_local_.find(t);
    if (have != tensor_local_.end()) return have->second;
    const Tensor &tt = g.tensor(t);
    if (tt.storage == Storage::Weight) internal_error("codegen: weight '" + t + "' has no pointer local");
    const Region &r = sp.region.at(t);
    bool input = tt.storage == Storage::Input || (r.root != kCarryRoot && g.has_tensor(r.root) &&
                                                  g.tensor(r.root).storage == Storage::Input);
    if (input && r.root != kCarryRoot && g.updated_input(r.root)) input = false;  // an output is written there
    std::string type = c_type(tt.dtype), expr, note;
    std::vector<std::string> reads;
    std::string shape = shape_str(tt.shape) + (tt.dtype != DType::F32 ? std::string(" ") + dtype_name(tt.dtype) : "");
    if (r.root == t) {
        CExpr e = root_expr(t, type);
        expr = e.text;
        reads = e.reads;
        note = tt.storage == Storage::Input    ? "caller input"
               : tt.storage == Storage::Output ? "caller output"
                                               : "arena";
    } else {
        CExpr base;
        bool own_local = r.root != kCarryRoot && g.tensor(r.root).storage == Storage::Activation;
        if (own_local) {  // a view of a tensor of the section: through its local
            std::string root_local = declare(r.root);
            base = {root_local, {root_local}};
        } else {
            base = root_expr(r.root, type);
        }
        expr = r.offset ? fmt::format("{} + {}", base.text, r.offset) : base.text;
        reads = base.reads;
        if (r.strided)
            note = fmt::format("columns {}..{} of {} (row stride {})", r.offset, r.offset + tt.shape.back() - 1,
                               base.text, ld(t));
        else if (r.root == kCarryRoot)
            note = "the residual stream";
        else if (g.tensor(r.root).storage == Storage::Output)
            note = "written in the result buffer";
        else if (r.offset)
            note = fmt::format("a view of {} at element {}", base.text, r.offset);
        else
            note = fmt::format("in place: {}'s memory", base.text);
    }
    std::string name = take_name(t);
    locals_.push_back({(input ? "const " : "") + type + " *", name, expr, shape + " " + note, reads});
    locals_.back().lazy = lazy_views && r.root != t;  // a view nothing reads (only its trace): no local
    return tensor_local_[t] = name;
}

CArg SectionLocals::tensor(const std::string &t)
{
    const Tensor &tt = g.tensor(t);
    if (tt.storage != Storage::Weight) {
        std::string name = declare(t);
        return arg_pointer(name, {name});
    }
    CExpr prefix = target.weights(sec);
    if (is_layer_section(sec) && tt.dtype == DType::F32 && !expr_local_.count("@w")) {
        CExpr lw = target.layer_weights();  // the block's `w`, declared first (the host's: not in a device frame)
        used_names_.insert("w");
        locals_.insert(locals_.begin(),
                       {"const " + target.weights_type() + " *", "w", lw.text, "this layer's weights", lw.reads, true});
        expr_local_["@w"] = "w";
    }
    std::string e = wt.expr(sec, tt, prefix.text);
    std::vector<std::string> reads = tt.dtype == DType::F32 ? prefix.reads : std::vector<std::string>{};
    if (wt.matrix(tt)) return arg_pointer("&" + e, reads);
    if (wt.experts(tt) && p.info.stored_weights) return arg_pointer(e, reads);  // one ck_qmat per expert
    if (tt.dtype != DType::F32) e = target.inline_const(tt, e);
    if (!target.device()) return arg_pointer(e, reads);
    // a device kernel reads weights through pointer locals passed in its frame, never through the handle
    std::string name = value(std::string("const ") + c_type(tt.dtype) + " *", "w_" + c_identifier(tt.name), e,
                             fmt::format("{} weight {}", shape_str(tt.shape), tt.name), prefix.reads);
    return arg_pointer(name, {name});
}

int64_t SectionLocals::ld(const std::string &t) const
{
    const Tensor &tt = g.tensor(t);
    if (tt.storage != Storage::Weight && sp.region.at(t).strided) {
        const std::string &root = sp.region.at(t).root;
        return root == kCarryRoot ? p.carry_shape.back() : g.tensor(root).shape.back();
    }
    return tt.shape.empty() ? 1 : tt.shape.back();
}

std::string SectionLocals::ld_name(const std::string &t) const
{
    const Tensor &tt = g.tensor(t);
    if (tt.storage != Storage::Weight && sp.region.at(t).strided) {
        const std::string &root = sp.region.at(t).root;
        if (root == kCarryRoot) return p.carry_dims.empty() ? "" : p.carry_dims.back();
        const Tensor &rt = g.tensor(root);
        return rt.dim(rt.shape.size() - 1);
    }
    return tt.shape.empty() ? "" : tt.dim(tt.shape.size() - 1);
}

namespace {

// A node's EmitCtx over a section's locals.
class SectionEmitCtx : public EmitCtx {
public:
    SectionEmitCtx(SectionLocals &l, const Node &n) : EmitCtx(l.g, n), l_(l) {}
    CArg ptr(const std::string &t) const override { return l_.tensor(t); }
    int64_t ld_value(const std::string &t) const override { return l_.ld(t); }
    std::string ld_name(const std::string &t) const override { return l_.ld_name(t); }
    bool aliased() const override { return l_.sp.views.count(n.name) != 0; }
    bool stored_matrix(const std::string &t) const override
    {
        const Tensor &tt = g.tensor(t);
        return tt.storage == Storage::Weight && l_.wt.matrix(tt);
    }
    const ModelInfo &info() const override { return l_.p.info; }
    std::string local(const std::string &type, const std::string &hint, const std::string &expr, const std::string &note,
                      std::vector<std::string> reads) override
    {
        return l_.value(type, hint, expr, note, std::move(reads));
    }
    CArg device_value(const std::string &type, const std::string &hint, const std::string &expr, const std::string &note,
                      std::vector<std::string> reads) override
    {
        if (!l_.target.device()) return arg_pointer(expr, reads);
        std::string name = l_.value(type, hint, expr, note, std::move(reads));
        return arg_pointer(name, {name});
    }
    RopeRef rope_tables(const Node &rope) override { return l_.target.rope_tables(rope); }
    CArg param(const std::string &label, const std::string &key, double dflt, bool is_int) override
    {
        std::string table = n.table(key);
        if (table.empty()) return is_int ? arg_int(label, static_cast<int64_t>(n.f(key, dflt))) : arg_float(label, n.f(key, dflt));
        if (!l_.p.layer_tables.count(table) || !is_layer_section(l_.sec))
            internal_error("codegen: node '" + n.name + "' uses unknown per-layer table '" + table + "'");
        std::string e = "CK_LAYER_" + upper(c_identifier(table)) + "[layer]";
        CArg v = device_value(is_int ? "int " : "float ", c_identifier(table), e, "per-layer " + table, {"layer"});
        v.label = label;
        return v;
    }
    CArg scratch() override
    {
        auto it = l_.sp.scratch.find(n.name);
        if (it == l_.sp.scratch.end()) internal_error("codegen: node '" + n.name + "' has no scratch");
        CExpr arena = l_.target.arena(offset_name(l_.sec, it->second), l_.sp.alloc.at(it->second).per_token);
        CArg s = device_value("float *", "scratch_" + c_identifier(n.name), "(float *)(" + arena.text + ")",
                              "scratch of " + n.name, arena.reads);
        s.label = "scratch";
        return s;
    }

private:
    SectionLocals &l_;
};

std::vector<KernelCall> emit_calls(SectionLocals &l, const Node &n)
{
    const OpDef &d = op_def(n.op);
    std::string from = n.origin.empty() ? "" : ", from " + n.origin.str();
    if (d.fold_only)
        throw Error(ErrorKind::Input,
                    fmt::format("node '{}' ({}{}) could not be computed at compile time: {} only runs on constants, and "
                                "one of its inputs is not constant",
                                n.name, op_name(n.op), from, op_name(n.op)));
    for (size_t i = 0; i < n.inputs.size(); i++)
        if (l.g.tensor(n.inputs[i]).dtype != DType::F32 && !(d.any_dtype & (1u << i)))
            throw Error(ErrorKind::Input,
                        fmt::format("node '{}' ({}{}) reads '{}', a {} tensor, and computes only on float32 (ckc runs "
                                    "integer and bool tensors as ids, masks and moved data)",
                                    n.name, op_name(n.op), from, n.inputs[i], dtype_name(l.g.tensor(n.inputs[i]).dtype)));
    SectionEmitCtx ctx(l, n);
    return lowering(n.op).emit(ctx);
}

std::string host_fail(const std::string &code, const std::string &message)
{
    return fmt::format("return ck_fail({}, {});", code, c_string(replace_all(message, "%", "%%")));
}

// Writes one section's C function: pointer locals for every tensor, then per node (in the planner's order) its
// kernel calls under a comment naming its source, and a trace hook; on a device, each node's calls in a kernel.
class SectionWriter {
public:
    SectionWriter(const Program &p, Section sec, const SectionPlan &sp, const WeightTable &wt, Target &target)
        : l_(p, sec, sp, wt, target, {"m", "g", "w", "T", "layer", "pos0", "f_"}), target_(target), sec_(sec)
    {
        l_.lazy_views = true;
        for (size_t k = 0; k < p.symbols.size(); k++) {  // the symbolic sizes' values, as the sizes print them
            const std::string name = l_.take_name(sym_c_name(p.symbols[k]));
            if (name != sym_c_name(p.symbols[k])) internal_error("codegen: the local " + name + " is taken");
            CExpr v = target.symbol(k);
            const SymBounds &b = sym_bounds(p.symbols[k]);
            SectionLocals::Local l{"int64_t ", name, v.text,
                                   fmt::format("symbolic size {} ({}..{}), bound by the call", p.symbols[k], b.min, b.max),
                                   v.reads};
            l.lazy = true;
            l_.add(l);
        }
    }

    std::string write()
    {
        for (const auto &nn : l_.sp.order) {  // every tensor's local, in the order the nodes run
            const Node &n = *l_.g.node(nn);
            for (const auto &in : n.inputs)
                if (l_.g.tensor(in).storage != Storage::Weight) l_.declare(in);
            l_.declare(n.output);
        }
        body_.indent();
        for (const auto &nn : l_.sp.order) {
            const Node &n = *l_.g.node(nn);
            if (!l_.sp.views.count(n.name)) emit_node(n);  // a view is just its pointer local
            trace(n);
        }
        emit_copies();
        body_.line("return CK_OK;");
        return trace_table() + device_kernels() + frame();
    }

private:
    const char *section_name() const { return Program::section_name(sec_); }
    std::string fn() const { return target_.function_name(sec_); }

    void emit_node(const Node &n)
    {
        body_.comment(comment_safe(n.origin.empty() ? n.name : n.origin.str()));
        std::vector<KernelCall> calls = emit_calls(l_, n);
        if (!target_.device()) {
            for (const KernelCall &k : calls) {
                render_call(k, body_, host_fail);
                for (const auto &r : k.reads()) reads_.insert(r);
            }
            return;
        }
        CWriter code;
        code.indent();
        std::set<std::string> reads;
        for (const KernelCall &k : calls) {
            render_call(k, code, [&](const std::string &c, const std::string &message) {
                return fmt::format("{{ f_->status[0] = {}; return; }} /* {} */", target_.device_check(c, message),
                                   comment_safe(message));
            });
            for (const auto &r : k.reads()) reads.insert(r);
        }
        std::string name = fmt::format("{}_k{}", fn(), kernels_.size());
        kernels_.push_back(trampoline(name, n, reads, code.str()));
        body_.line(fmt::format("CK_GCU(gcu_launch({}, &f_, sizeof f_, {}));", name, target_.stream()));
    }

    // (type, name) of every frame field: the parameters the target passes, then every local.
    std::vector<std::pair<std::string, std::string>> frame_fields() const
    {
        std::vector<std::pair<std::string, std::string>> out;
        std::vector<std::string> names = target_.frame_params(sec_);
        for (const CParam &p : target_.params(sec_))
            if (std::find(names.begin(), names.end(), p.name) != names.end()) out.push_back({p.type + " ", p.name});
        for (const auto &l : l_.locals())
            if (!l.host_only) out.push_back({l.type, l.name});
        return out;
    }

    // A launched kernel: unpacks the frame fields its calls read, then runs them.
    std::string trampoline(const std::string &name, const Node &n, const std::set<std::string> &reads,
                           const std::string &code) const
    {
        CWriter w;
        w.line(fmt::format("/* {} ({}) */", comment_safe(n.name), op_name(n.op)));
        w.line(fmt::format("static void {}(void *frame)", name));
        w.line("{");
        w.indent();
        w.line(fmt::format("const {0}_frame *f_ = (const {0}_frame *)frame;", fn()));
        std::set<std::string> carried;
        for (const auto &[type, field] : frame_fields()) {
            carried.insert(field);
            if (reads.count(field)) w.line(fmt::format("{}{} = f_->{};", type, field, field));
        }
        for (const auto &r : reads)
            if (!carried.count(r))
                internal_error(fmt::format("codegen: kernel {} reads '{}', which its frame does not carry", name, r));
        w.dedent();
        return w.str() + code + "}\n";
    }

    // The frame struct and the kernels of a device section.
    std::string device_kernels() const
    {
        if (!target_.device()) return "";
        CWriter w;
        w.open("typedef struct");
        for (const auto &[type, name] : frame_fields()) w.line(fmt::format("{}{};", type, name));
        w.line("int *status; /* device: the number of a failed run-time check */");
        w.close(fmt::format("}} {}_frame;", fn()));
        w.line();
        std::string out = w.str();
        for (const auto &k : kernels_) out += k + "\n";
        return out;
    }

    // CK_TRACE_NODE after every node with a float32 output (not the KV store's side effect). Not on a device:
    // its buffers are not the host's to read. What the hook reads does not count as read: without -DCK_TRACE it
    // compiles to nothing.
    void trace(const Node &n)
    {
        const Tensor &t = l_.g.tensor(n.output);
        if (t.dtype != DType::F32 || op_def(n.op).side_effects || target_.device()) return;
        SectionEmitCtx ctx(l_, n);
        if (!t.shape.empty() && t.shape.back() == kTokens)
            internal_error("codegen: node '" + n.name + "': a trace needs a fixed last dimension");
        CArg out = ctx.out(), rows = ctx.rows("rows", n.output), cols = ctx.dim("cols", n.output), ld = ctx.ld_out();
        for (const CArg *a : {&out, &rows, &cols, &ld}) traced_.insert(a->reads.begin(), a->reads.end());
        body_.line(fmt::format("CK_TRACE_NODE({}, CK_TRACE_{}[{}], {}, {}, {}, {}, {});", target_.tracer(),
                               upper(section_name()), sites_.size(), is_layer_section(sec_) ? "layer" : "-1",
                               out.text, rows.text, cols.text, ld.text));
        sites_.push_back(fmt::format("{{\"{}\", {}, \"{}\", {}, {}}},", section_name(), c_string(n.name), op_name(n.op),
                                     c_string(n.origin.module), c_string(t.reference)));
    }

    // Section outputs pinned to the carry or an input they could not be written into directly.
    void emit_copies()
    {
        const Graph &g = l_.g;
        for (const auto &[t, pin] : l_.sp.copies) {
            CExpr dst = pin == kCarryRoot ? target_.carry(sec_) : CExpr{};
            if (pin != kCarryRoot) {
                std::string local = l_.declare(pin);
                dst = {local, {local}};
            }
            std::string src = l_.declare(t);
            SectionEmitCtx ctx(l_, *g.producer(t));
            CArg n = ctx.numel("n", t);
            std::string what = fmt::format("/* {} -> {} */", t, pin == kCarryRoot ? "residual stream" : pin);
            if (target_.device())
                body_.line(fmt::format("CK_GCU(gcu_memcpy_async({}, {}, {} * sizeof(float), GCU_MEMCPY_DEVICE_TO_DEVICE, "
                                       "{})); {}", dst.text, src, n.text, target_.stream(), what));
            else
                body_.line(fmt::format("memcpy({}, {}, {} * sizeof(float)); {}", dst.text, src, n.text, what));
            for (const auto &r : dst.reads) reads_.insert(r);
            for (const auto &r : n.reads) reads_.insert(r);
            reads_.insert(src);
        }
    }

    // The node table CK_TRACE_NODE reads, compiled only with -DCK_TRACE.
    std::string trace_table() const
    {
        if (sites_.empty()) return "";
        CWriter w;
        w.line("#ifdef CK_TRACE");
        w.open(fmt::format("static const ck_trace_site CK_TRACE_{}[] =", upper(section_name())));
        w.comment("section, node, op, source module, reference (ck_trace.h)");
        for (const auto &s : sites_) w.line(s);
        w.close("};");
        w.line("#endif");
        return w.str();
    }

    // The function around the body; on a device, it fills the frame every kernel of the section reads.
    std::string frame()
    {
        const SectionPlan &sp = l_.sp;
        const char *name = section_name();
        std::string what = sec_ == Section::Header ? "runs once before the layers"
                           : sec_ == Section::Block2 ? "one layer of the second kind, run for the layers CK_LAYER_KIND marks 1"
                           : sec_ == Section::Block && l_.p.has_block2() ? "one layer, run for the layers CK_LAYER_KIND marks 0"
                           : sec_ == Section::Block ? "one layer, run for layer = 0 .. CK_N_LAYERS-1"
                                                    : "runs once after the layers";
        std::string arena = sp.per_token.arena || sp.per_token.naive
                                ? fmt::format("{}/token (without a planner: {}/token)", human_bytes(sp.per_token.arena),
                                              human_bytes(sp.per_token.naive))
                                : fmt::format("{} (without a planner: {})", human_bytes(sp.fixed.arena),
                                              human_bytes(sp.fixed.naive));
        std::string comment =
            fmt::format("/* ---- {}: {} ", name, what) +
            std::string(std::max<int>(0, 70 - static_cast<int>(what.size()) - static_cast<int>(std::string(name).size())),
                        '-') +
            "\n * arena " + arena + " */";
        std::string body = body_.str();
        std::vector<std::string> reads(reads_.begin(), reads_.end());
        if (target_.device() && !kernels_.empty()) {  // (a section with no kernel has no frame to fill)
            CWriter fill;
            fill.indent();
            fill.line(fmt::format("{}_frame f_;", fn()));
            for (const auto &field : frame_fields()) {
                fill.line(fmt::format("f_.{0} = {0};", field.second));
                reads.push_back(field.second);
            }
            fill.line(fmt::format("f_.status = {};", target_.device_status()));
            fill.line();
            body = fill.str() + body;
            reads.push_back(target_.device_status().substr(0, target_.device_status().find("->")));
        }
        return function_c(comment, signature_c(fn(), target_.params(sec_)), l_, target_.params(sec_), reads, body,
                          traced_);
    }

    SectionLocals l_;
    Target &target_;
    Section sec_;
    CWriter body_;
    std::set<std::string> reads_;     // what the body's calls read
    std::set<std::string> traced_;    // what its trace hooks read (compiled with -DCK_TRACE only)
    std::vector<std::string> sites_;  // CK_TRACE_<SECTION> rows
    std::vector<std::string> kernels_;  // device targets: one kernel per node
};

}  // namespace

std::string signature_c(const std::string &name, const std::vector<CParam> &params)
{
    std::vector<std::string> ps;
    for (const CParam &p : params) ps.push_back(p.type + (ends_with(p.type, "*") ? "" : " ") + p.name);
    return fmt::format("static int {}({})", name, join(ps, ", "));
}

std::string function_c(const std::string &comment, const std::string &signature, const SectionLocals &locals,
                       const std::vector<CParam> &params, const std::vector<std::string> &reads, const std::string &body,
                       const std::set<std::string> &traced)
{
    std::set<std::string> used(reads.begin(), reads.end());
    for (const auto &l : locals.locals())
        if (!l.lazy) used.insert(l.reads.begin(), l.reads.end());
    // a lazy local is declared when read, and then reads what it reads (a view of a view: to a fixed point)
    auto close = [&](std::set<std::string> &names) {
        for (bool grew = true; grew;) {
            grew = false;
            for (const auto &l : locals.locals())
                if (l.lazy && names.count(l.name))
                    for (const auto &r : l.reads) grew = names.insert(r).second || grew;
        }
    };
    close(used);
    std::set<std::string> trace_only(traced.begin(), traced.end());
    close(trace_only);
    CWriter w;
    if (!comment.empty()) w.lines(comment);
    w.line(signature);
    w.line("{");
    w.indent();
    locals.write(w, used, trace_only);
    std::vector<std::string> unused;
    for (const CParam &p : params)
        if (!used.count(p.name)) unused.push_back("(void)" + p.name + ";");
    if (!unused.empty()) w.line(join(unused, " "));
    w.line();
    w.dedent();
    return w.str() + body + "}\n";
}

std::string section_c(const Program &p, Section sec, const SectionPlan &sp, const WeightTable &wt, Target &target)
{
    return SectionWriter(p, sec, sp, wt, target).write();
}

void target_slots(std::map<std::string, std::string> &out, const std::string &templates_dir, const std::string &target_name,
                  const std::string &kind, const std::string &handle, const Target &target,
                  const std::map<std::string, std::string> &slots)
{
    static const char *const kParts[] = {"INCLUDES", "FIELDS", "CODE"};
    auto load = [&](const std::string &file, const std::map<std::string, std::string> &values) {
        std::string name = "templates/targets/" + file;
        auto parts = template_parts(fill_template(read_template(templates_dir, "targets/" + file), values, name), name);
        for (const char *part : kParts)
            if (!parts.count(part)) internal_error(name + ": no part '@@ " + std::string(part) + "'");
        if (parts.size() != 3) internal_error(name + ": parts other than INCLUDES, FIELDS, CODE");
        return parts;
    };
    std::map<std::string, std::string> common;
    if (target.device()) {
        CWriter checks;
        checks.indent();
        for (const auto &[code, msg] : target.device_checks) checks.line(fmt::format("{{{}, {}}},", code, c_string(msg)));
        if (target.device_checks.empty()) checks.line("{CK_OK, \"\"} /* none */");
        common = load("gcu.c.in", {{"HANDLE", handle}, {"DEVICE_CHECKS", checks.str()}});
    }
    auto own = load(target_name + "_" + kind + ".c.in", slots);
    for (const char *part : kParts) {
        std::string text = common.count(part) ? common[part] : "";
        if (!text.empty() && part == std::string("CODE") && !own[part].empty()) text += "\n";
        out[std::string("TARGET_") + part] = text + own[part];
    }
}

std::vector<std::string> build_lines(const CodegenOptions &o, const std::string &exe_define, const std::string &exe_what)
{
    const std::string &f = o.output_name;
    if (o.standalone)
        return {" * Build (one file, nothing to install; add -fopenmp for threads, -march=native for this CPU only,",
                " * -DCK_BLAS=1 -lopenblas for OpenBLAS's GEMMs):",
                " *   cc -O3 -fPIC -shared " + f + " -lm -o libmodel.so",
                " * or " + exe_what + ":",
                " *   cc -O3 " + exe_define + " " + f + " -lm -o model"};
    std::string manifest = " -I \"$(ckc --include-dir)\" " + f + " $(cat " + f + ".kernels) -lopenblas -lm -fopenmp";
    return {" * Build a shared library (from any folder; the .kernels file holds absolute paths):",
            " *   cc -O3 -fPIC -shared" + manifest + " -o libmodel.so", " * or " + exe_what + ":",
            " *   cc -O3 " + exe_define + manifest + " -o model"};
}

std::string embedded_weights_c(const CodegenOptions &o)
{
    if (o.embed_bytes.empty())
        return "#define CK_EMBEDDED_BYTES 0 /* none: ck_model_init(NULL) is an error */\n";
    std::string out = fmt::format("#define CK_EMBEDDED_BYTES {}\n#define CK_EMBEDDED_NAME {}\n", o.embed_bytes.size(),
                                  c_string(comment_safe(o.embed_name) + " (compiled in)"));
    out += "#if defined(__GNUC__)\n#define CK_EMBEDDED_ALIGN __attribute__((aligned(64))) /* as a mapped file's rows */\n"
           "#else\n#define CK_EMBEDDED_ALIGN\n#endif\n";
    out += "static const unsigned char CK_EMBEDDED_DATA[CK_EMBEDDED_BYTES] CK_EMBEDDED_ALIGN = {\n";
    out.reserve(out.size() + o.embed_bytes.size() * 4 + o.embed_bytes.size() / 8);
    char num[8];
    for (size_t i = 0; i < o.embed_bytes.size(); i++) {
        int n = std::snprintf(num, sizeof num, "%u,", static_cast<unsigned char>(o.embed_bytes[i]));
        out.append(num, static_cast<size_t>(n));
        if (i % 32 == 31) out += '\n';
    }
    out += "\n};\n";
    return out;
}

std::set<std::string> kernel_files(const Program &p, const std::set<std::string> &extra)
{
    // what every model uses: the thread pool, CPU dispatch, and the checkpoint readers with their formats
    std::set<std::string> files = {"kernels/threads.c", "kernels/cpu.c",         "kernels/workspace.c",
                                   "io/checkpoint.c",   "io/checkpoint_open.c", "io/huge_pages.c",
                                   "io/safetensors.c",  "io/gguf.c",            "io/weights.c",
                                   "io/quant.c",        "io/json.c"};
    files.insert(extra.begin(), extra.end());
    for (Section s : p.sections())
        for (const Node &n : p.section(s).nodes())
            for (const char *k : lowering(n.op).kernels) files.insert(k);
    return files;
}

}  // namespace ckc
