// program_c.cpp — shared model.c pieces (see program_c.h).
#include "codegen/program_c.h"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "ck_quant.h"
#include "ck_safetensors.h"  // CK_WEIGHT_MAX_PARTS, CK_WEIGHT_MAX_DIMS
#include "ir/op_rules.h"
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

std::string c_type(DType t)
{
    switch (t) {
    case DType::F32: return "float";
    case DType::I64: return "int64_t";
    case DType::I32: return "int32_t";
    case DType::Bool: return "uint8_t";
    default: internal_error(std::string("codegen: no C type for ") + dtype_name(t));
    }
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
        names.push_back(c_string(replace_all(replace_all(t.source.parts[i], "%", "%%"), "{L}", "%d")));
        std::vector<std::string> dims;
        for (int64_t d : t.source.part_shapes[i]) dims.push_back(std::to_string(d));
        if (dims.empty()) dims.push_back("1");
        shapes.push_back("{" + join(dims, ", ") + "}");
    }
    std::string format = f.format == CK_WEIGHT_FLOAT      ? "CK_WEIGHT_FLOAT"
                         : f.format == CK_WEIGHT_AS_STORED ? "CK_WEIGHT_AS_STORED"
                                                           : fmt::format("CK_Q_{}", upper(ck_qtype_name(f.format)));
    return fmt::format("{{offsetof({}, {}), {}, {{{}}}, {}, {{{}}}, {}, {}}},", strct, f.field, t.source.parts.size(),
                       join(names, ", "), t.source.part_shapes[0].size(), join(shapes, ", "), t.source.transposed ? 1 : 0,
                       format);
}

std::string offset_name(Section section, const std::string &root)
{
    return "CK_OFF_" + upper(Program::section_name(section)) + "_" + upper(c_identifier(root));
}

// The per-node emit context of a section.
struct SectionState {
    const Program &p;
    Section sec;
    const Graph &g;
    const SectionPlan &sp;
    const WeightTable &wt;
    Target &target;
    std::map<std::string, std::string> local;  // tensor -> C local
    // device targets: a kernel reads weights through pointer locals passed in the frame, never through
    // the handle (host memory); the section function declares them
    NameSet *names = nullptr;
    std::vector<std::pair<std::string, std::string>> *decls = nullptr;  // declaration, comment
    std::map<std::string, std::string> expr_local;                      // expression -> local

    const Shape &root_shape(const std::string &root) const
    {
        return root == kCarryRoot ? p.carry_shape : g.tensor(root).shape;
    }

    // A local for `expr` (declared once; a device section passes it in the frame).
    std::string value_local(const std::string &type, const std::string &hint, const std::string &expr,
                            const std::string &note)
    {
        auto it = expr_local.find(expr);
        if (it != expr_local.end()) return it->second;
        std::string name = names->take(hint);
        decls->push_back({fmt::format("{}{} = {};", type, name, expr), note});
        return expr_local[expr] = name;
    }
    std::string device_value(const std::string &type, const std::string &hint, const std::string &expr,
                             const std::string &note)
    {
        return target.device() ? value_local(type, hint, expr, note) : expr;
    }
    std::string device_weight(const Tensor &t, const std::string &expr)
    {
        return value_local(std::string("const ") + c_type(t.dtype) + " *", "w_" + c_identifier(t.name), expr,
                            fmt::format("{} weight {}", shape_str(t.shape), t.name));
    }
};

class SectionEmitCtx : public EmitCtx {
public:
    SectionEmitCtx(CWriter &w, SectionState &st, const Node &n) : EmitCtx(w, st.g, n), st_(st) {}
    std::string ptr(const std::string &t) const override
    {
        const Tensor &tt = g.tensor(t);
        if (tt.storage == Storage::Weight) {
            std::string e = st_.wt.expr(st_.sec, tt, st_.target.weights(st_.sec));
            if (st_.wt.matrix(tt)) return "&" + e;
            if (tt.dtype != DType::F32) e = st_.target.inline_const(tt, e);
            return st_.target.device() ? st_.device_weight(tt, e) : e;
        }
        return name(t);
    }
    std::string ld(const std::string &t) const override
    {
        const Tensor &tt = g.tensor(t);
        const Region &r = st_.sp.region.at(t);
        if (tt.storage != Storage::Weight && r.strided) return dim(st_.root_shape(r.root).back());
        return dim(tt.shape.empty() ? 1 : tt.shape.back());
    }
    std::string dim(int64_t v) const override
    {
        for (const auto &[name, value] : st_.p.info.sizes)
            if (value == v && v > 1) return name;
        return std::to_string(v);
    }
    std::string name(const std::string &t) const override
    {
        auto it = st_.local.find(t);
        if (it == st_.local.end()) internal_error("codegen: tensor '" + t + "' has no local");
        return it->second;
    }
    std::string rope_table(const Node &rope) override { return st_.target.rope_table(rope); }
    std::string local(const std::string &type, const std::string &hint, const std::string &expr,
                      const std::string &note) override
    {
        return st_.value_local(type, hint, expr, note);
    }
    std::string device_value(const std::string &type, const std::string &hint, const std::string &expr,
                             const std::string &note) override
    {
        return st_.device_value(type, hint, expr, note);
    }
    std::string param(const std::string &key, double dflt, bool is_int) const override
    {
        std::string table = n.table(key);
        if (!table.empty()) {
            if (!st_.p.layer_tables.count(table) || st_.sec != Section::Block)
                internal_error("codegen: node '" + n.name + "' uses unknown per-layer table '" + table + "'");
            std::string e = "CK_LAYER_" + upper(c_identifier(table)) + "[layer]";
            return st_.device_value(is_int ? "int " : "float ", c_identifier(table), e, "per-layer " + table);
        }
        double v = n.f(key, dflt);
        return is_int ? std::to_string(static_cast<int64_t>(v)) : c_float(v);
    }
    std::string scratch() const override
    {
        auto it = st_.sp.scratch.find(n.name);
        if (it == st_.sp.scratch.end()) internal_error("codegen: node '" + n.name + "' has no scratch");
        std::string e = "(float *)(" + st_.target.arena(offset_name(st_.sec, it->second), false) + ")";
        return st_.device_value("float *", "scratch_" + c_identifier(n.name), e, "scratch of " + n.name);
    }
    bool aliased() const override { return st_.sp.views.count(n.name) != 0; }
    bool stored_matrix(const std::string &t) const override
    {
        const Tensor &tt = g.tensor(t);
        return tt.storage == Storage::Weight && st_.wt.matrix(tt);
    }
    std::string fail(const std::string &code, const std::string &message) const override
    {
        if (!st_.target.device()) return EmitCtx::fail(code, message);
        int id = st_.target.device_check(code, message);
        return fmt::format("{{ f_->status[0] = {}; return; }} /* {} */", id, comment_safe(message));
    }

private:
    SectionState &st_;
};

}  // namespace

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

// The stored type of a matrix with rows of K: the one asked for, else llama.cpp's fallback when K is not a
// whole number of its blocks (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0; f16 when K is not a multiple of 32).
int stored_type(int want, int64_t K)
{
    if (K % ck_qtype_block(want) == 0) return want;
    int fb = want == CK_Q_Q4_K ? CK_Q_Q5_0 : want == CK_Q_Q5_K ? CK_Q_Q5_1 : want == CK_Q_Q6_K ? CK_Q_Q8_0 : CK_Q_F16;
    return K % ck_qtype_block(fb) == 0 ? fb : CK_Q_F16;
}

}  // namespace

bool WeightTable::matrix(const Tensor &t) const { return matrix_keys.count(source_key(t)) != 0; }

void WeightTable::collect(const Program &p)
{
    NameSet gnames, lnames;
    if (p.info.stored_weights) {  // matrices: every use a GEMM weight or an embedding table
        std::map<std::string, bool> all_matrix;
        for (Section s : kSections)
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
    for (Section s : {Section::Header, Section::Footer, Section::Block})
        for (const Node &n : p.section(s).nodes())
            for (const auto &name : n.inputs) {
                const Tensor &t = p.section(s).tensor(name);
                if (t.storage != Storage::Weight) continue;
                std::string key = source_key(t);
                if (t.dtype != DType::F32) {
                    if (s == Section::Block && key.find("{L}") != std::string::npos)
                        input_error("constant '" + name + "' (" + dtype_name(t.dtype) +
                                    ") differs by layer; only float32 weights can");
                    if (inline_by_key.count(key)) continue;
                    std::string field = gnames.take("const_" + name);
                    inline_by_key[key] = field;
                    inline_consts.push_back({field, &t});
                    continue;
                }
                auto &by_key = s == Section::Block ? layer_by_key : global_by_key;
                if (by_key.count(key)) continue;
                std::string want = s == Section::Block ? name : merge_names(t.source.parts);
                if (starts_with(want, "model.")) want = want.substr(6);
                std::string field = (s == Section::Block ? lnames : gnames).take(want);
                by_key[key] = field;
                WeightField wf{field, &t};
                if (matrix_keys.count(key)) {
                    wf.matrix = true;
                    wf.format = CK_WEIGHT_AS_STORED;
                    if (p.info.weight_type >= 0) {
                        const Shape &ps = t.source.part_shapes[0];
                        int64_t K = t.source.transposed ? ps[0] : ps[1];
                        wf.format = stored_type(p.info.weight_type, K);
                        if (wf.format != p.info.weight_type)
                            notes.push_back(fmt::format("{}: rows of {} are not whole {} blocks of {}; stored as {}",
                                                        merge_names(t.source.parts), K, ck_qtype_name(p.info.weight_type),
                                                        ck_qtype_block(p.info.weight_type), ck_qtype_name(wf.format)));
                    }
                }
                (s == Section::Block ? layer : global).push_back(wf);
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
    const auto &by_key = section == Section::Block ? layer_by_key : global_by_key;
    auto it = by_key.find(source_key(t));
    if (it == by_key.end()) internal_error("codegen: weight '" + t.name + "' has no field");
    return it->second;
}

std::string weights_c(const WeightTable &wt, const std::string &prefix)
{
    CWriter w;
    auto field_line = [&](const WeightField &f) {
        std::string decl = f.matrix ? fmt::format("ck_qmat {};", f.field)
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
    if (wt.global.empty()) w.line("{0, 0, {NULL}, 0, {{0}}, 0, CK_WEIGHT_FLOAT} /* none */");
    w.close("};");
    w.open("static const ck_weight_spec CK_LAYER_WEIGHTS[] =");
    for (const auto &f : wt.layer) w.line(spec_row(prefix + "layer_weights", f));
    if (wt.layer.empty()) w.line("{0, 0, {NULL}, 0, {{0}}, 0, CK_WEIGHT_FLOAT} /* none */");
    w.close("};");
    w.line(fmt::format("#define CK_N_GLOBAL_WEIGHTS {}", wt.global.size()));
    w.line(fmt::format("#define CK_N_LAYER_WEIGHTS {}", wt.layer.size()));
    return w.str();
}

std::string plan_c(const Program &p, const Plan &plan)
{
    CWriter w;
    w.line(fmt::format("#define CK_ACT_PER_TOKEN {} /* bytes per token: the largest section */", plan.arena_per_token));
    w.line(fmt::format("#define CK_ACT_FIXED {} /* bytes independent of T */", plan.arena_fixed));
    for (Section s : kSections) {
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

namespace {

// Writes one section's C function: pointer locals for every tensor, then per node (in the planner's
// order) its kernel call under a comment naming its source, and a CK_TRACE_NODE hook.
class SectionWriter {
public:
    SectionWriter(const Program &p, Section sec, const SectionPlan &sp, const WeightTable &wt, Target &target)
        : st_{p, sec, p.section(sec), sp, wt, target, {}, nullptr, nullptr, {}}, names_({"m", "g", "w", "T", "layer", "pos0", "f_"})
    {
        st_.names = &names_;
        st_.decls = &decls_;
    }

    std::string write()
    {
        for (const auto &nn : st_.sp.order) {
            const Node &n = *st_.g.node(nn);
            for (const auto &in : n.inputs) declare(in);
            declare(n.output);
        }
        body_.indent();
        for (const auto &nn : st_.sp.order) {
            const Node &n = *st_.g.node(nn);
            if (!st_.sp.views.count(n.name)) emit_node(n);  // a view is just its pointer local
            trace(n);
        }
        emit_copies();
        body_.line("return CK_OK;");
        return trace_table() + device_kernels() + frame();
    }

    // The frame struct and the trampolines of a device section.
    std::string device_kernels() const
    {
        if (!st_.target.device()) return "";
        CWriter w;
        w.open("typedef struct");
        for (const auto &[type, name] : frame_fields()) w.line(fmt::format("{}{};", type, name));
        w.line("int *status; /* device: the number of a failed run-time check */");
        w.close(fmt::format("}} {}_frame;", function_name()));
        w.line();
        std::string out = w.str();
        for (const auto &k : kernels_) out += k + "\n";
        return out;
    }

private:
    const char *section_name() const { return Program::section_name(st_.sec); }

    std::string root_expr(const std::string &root, const std::string &type)
    {
        const Graph &g = st_.g;
        if (root == kCarryRoot) return st_.target.carry();
        const Tensor &r = g.tensor(root);
        if (r.storage == Storage::Input)  // written into (graph.json "into"): not const
            return g.updated_input(root) ? fmt::format("(({} *){})", type, st_.target.input(r)) : st_.target.input(r);
        // (an output written into an input has no buffer of its own: when it cannot go there directly, the
        // planner gave it an arena slot, copied into the input at the end)
        if (r.storage == Storage::Output && r.into.empty()) return st_.target.output(r);
        if (st_.local.count(root)) return st_.local.at(root);
        const Allocation &a = st_.sp.alloc.at(root);
        return fmt::format("({} *)({})", type, st_.target.arena(offset_name(st_.sec, root), a.per_token));
    }

    // A pointer local for tensor t: its arena slot, a view into another tensor, or a caller buffer.
    void declare(const std::string &t)
    {
        const Graph &g = st_.g;
        if (st_.local.count(t) || g.tensor(t).storage == Storage::Weight) return;
        const Tensor &tt = g.tensor(t);
        const Region &r = st_.sp.region.at(t);
        bool input = tt.storage == Storage::Input || (r.root != kCarryRoot && g.has_tensor(r.root) &&
                                                      g.tensor(r.root).storage == Storage::Input);
        if (input && r.root != kCarryRoot && g.updated_input(r.root)) input = false;  // an output is written there
        std::string type = c_type(tt.dtype), name = names_.take(t), expr, note;
        std::string ctype = (input ? "const " : "") + type + " *";
        std::string shape = shape_str(tt.shape) + (tt.dtype != DType::F32 ? std::string(" ") + dtype_name(tt.dtype) : "");
        if (r.root == t) {
            expr = root_expr(t, type);
            note = tt.storage == Storage::Input    ? "caller input"
                   : tt.storage == Storage::Output ? "caller output"
                                                   : "arena";
        } else {
            std::string base = root_expr(r.root, type);
            expr = r.offset ? fmt::format("{} + {}", base, r.offset) : base;
            if (r.strided)
                note = fmt::format("columns {}..{} of {} (row stride {})", r.offset, r.offset + tt.shape.back() - 1,
                                   base, st_.root_shape(r.root).back());
            else if (r.root == kCarryRoot)
                note = "the residual stream";
            else if (g.tensor(r.root).storage == Storage::Output)
                note = "written in the result buffer";
            else if (r.offset)
                note = fmt::format("a view of {} at element {}", base, r.offset);
            else
                note = fmt::format("in place: {}'s memory", base);
        }
        st_.local[t] = name;
        decls_.push_back({fmt::format("{}{} = {};", ctype, name, expr), fmt::format("{} {}", shape, note)});
    }

    void emit_node(const Node &n)
    {
        const Graph &g = st_.g;
        const OpDef &d = op_def(n.op);
        std::string from = n.origin.empty() ? "" : ", from " + n.origin.str();
        if (d.fold_only)
            throw Error(ErrorKind::Input,
                        fmt::format("node '{}' ({}{}) could not be computed at compile time: {} only runs on constants, "
                                    "and one of its inputs is not constant",
                                    n.name, op_name(n.op), from, op_name(n.op)));
        for (size_t i = 0; i < n.inputs.size(); i++)
            if (g.tensor(n.inputs[i]).dtype != DType::F32 && !(d.any_dtype & (1u << i)))
                throw Error(ErrorKind::Input,
                            fmt::format("node '{}' ({}{}) reads '{}', a {} tensor, and computes only on float32 (ckc runs "
                                        "integer and bool tensors as ids, masks and moved data)",
                                        n.name, op_name(n.op), from, n.inputs[i], dtype_name(g.tensor(n.inputs[i]).dtype)));
        body_.comment(comment_safe(n.origin.empty() ? n.name : n.origin.str()));
        if (!st_.target.device()) {
            SectionEmitCtx ctx(body_, st_, n);
            lowering(n.op).emit(ctx);
            return;
        }
        CWriter kernel;
        kernel.indent();
        SectionEmitCtx ctx(kernel, st_, n);
        lowering(n.op).emit(ctx);
        std::string fn = fmt::format("{}_k{}", function_name(), kernels_.size());
        kernels_.push_back(trampoline(fn, n, kernel.str()));
        body_.line(fmt::format("CK_GCU(gcu_launch({}, &f_, sizeof f_, {}));", fn, st_.target.stream()));
    }

    // "ckg_block": the section function's name, from the target's signature.
    std::string function_name() const
    {
        static const std::regex re("(\\w+)\\(");
        std::smatch m;
        std::string sig = st_.target.signature(st_.sec);
        if (!std::regex_search(sig, m, re)) internal_error("codegen: no function name in '" + sig + "'");
        return m[1].str();
    }

    // A launched kernel: unpacks what `code` uses from the section's frame, then runs it.
    std::string trampoline(const std::string &fn, const Node &n, const std::string &code) const
    {
        CWriter w;
        w.line(fmt::format("/* {} ({}) */", comment_safe(n.name), op_name(n.op)));
        w.line(fmt::format("static void {}(void *frame)", fn));
        w.line("{");
        w.indent();
        w.line(fmt::format("const {}_frame *f_ = (const {}_frame *)frame;", function_name(), function_name()));
        auto uses = [&](const std::string &name) { return std::regex_search(code, std::regex("\\b" + name + "\\b")); };
        for (const auto &param : frame_fields())
            if (uses(param.second)) w.line(fmt::format("{}{} = f_->{};", param.first, param.second, param.second));
        w.dedent();
        return w.str() + code + "}\n";
    }

    // (type, name) of every frame field: the target's parameters, the block's weights, the pointer locals.
    std::vector<std::pair<std::string, std::string>> frame_fields() const
    {
        std::vector<std::pair<std::string, std::string>> out;
        static const std::regex split("^(.*[\\s*])(\\w+)$");
        std::vector<std::string> params = st_.target.frame_params(st_.sec);
        for (const auto &p : params) {
            std::smatch m;
            if (!std::regex_match(p, m, split)) internal_error("codegen: frame parameter '" + p + "'");
            out.push_back({m[1].str(), m[2].str()});
        }
        for (const auto &[decl, note] : decls_) {
            auto eq = decl.find(" = ");
            std::smatch m;
            std::string lhs = decl.substr(0, eq);
            if (!std::regex_match(lhs, m, split)) internal_error("codegen: local '" + lhs + "'");
            out.push_back({m[1].str(), m[2].str()});
        }
        return out;
    }

    // CK_TRACE_NODE after every node with a float32 output (not the KV store's side effect). Not on a device:
    // its buffers are not the host's to read.
    void trace(const Node &n)
    {
        const Tensor &t = st_.g.tensor(n.output);
        if (t.dtype != DType::F32 || op_def(n.op).side_effects || st_.target.device()) return;
        SectionEmitCtx ctx(body_, st_, n);
        int64_t cols = t.shape.empty() ? 1 : t.shape.back();
        Shape lead(t.shape.begin(), t.shape.empty() ? t.shape.end() : t.shape.end() - 1);
        std::string rows = shape_has_tokens(lead) ? (shape_numel_fixed(lead) == 1
                                                          ? std::string("T")
                                                          : fmt::format("(int64_t)T * {}", shape_numel_fixed(lead)))
                                                  : std::to_string(shape_numel_fixed(lead));
        if (cols == kTokens) internal_error("codegen: node '" + n.name + "': a trace needs a fixed last dimension");
        body_.line(fmt::format("CK_TRACE_NODE({}, CK_TRACE_{}[{}], {}, {}, {}, {}, {});", st_.target.tracer(),
                               upper(section_name()), sites_.size(), st_.sec == Section::Block ? "layer" : "-1",
                               ctx.out(), rows, ctx.dim(cols), ctx.ld_out()));
        sites_.push_back(fmt::format("{{\"{}\", {}, \"{}\", {}, {}}},", section_name(), c_string(n.name), op_name(n.op),
                                     c_string(n.origin.module), c_string(t.reference)));
    }

    void emit_copies()
    {
        const Graph &g = st_.g;
        for (const auto &[t, pin] : st_.sp.copies) {
            std::string dst = pin == kCarryRoot ? st_.target.carry() : root_expr(pin, c_type(g.tensor(pin).dtype));
            std::string n = shape_has_tokens(g.tensor(t).shape)
                                ? fmt::format("(size_t)T * {}", shape_numel_fixed(g.tensor(t).shape))
                                : std::to_string(shape_numel_fixed(g.tensor(t).shape));
            std::string what = fmt::format("/* {} -> {} */", t, pin == kCarryRoot ? "residual stream" : pin);
            if (st_.target.device())
                body_.line(fmt::format("CK_GCU(gcu_memcpy_async({}, {}, {} * sizeof(float), GCU_MEMCPY_DEVICE_TO_DEVICE, "
                                       "{})); {}", dst, st_.local.at(t), n, st_.target.stream(), what));
            else
                body_.line(fmt::format("memcpy({}, {}, {} * sizeof(float)); {}", dst, st_.local.at(t), n, what));
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

    // The function around the body: a header comment, the signature, the locals, (void) for unused parameters.
    std::string frame() const
    {
        const SectionPlan &sp = st_.sp;
        Section sec = st_.sec;
        CWriter w;
        const char *name = section_name();
        std::string what = sec == Section::Header ? "runs once before the layers"
                           : sec == Section::Block ? "one layer, run for layer = 0 .. CK_N_LAYERS-1"
                                                   : "runs once after the layers";
        w.line(fmt::format("/* ---- {}: {} ", name, what) +
               std::string(std::max<int>(0, 70 - static_cast<int>(what.size()) - static_cast<int>(std::string(name).size())),
                           '-'));
        std::string arena = sp.per_token.arena || sp.per_token.naive
                                ? fmt::format("{}/token (without a planner: {}/token)", human_bytes(sp.per_token.arena),
                                              human_bytes(sp.per_token.naive))
                                : fmt::format("{} (without a planner: {})", human_bytes(sp.fixed.arena),
                                              human_bytes(sp.fixed.naive));
        w.line(" * arena " + arena + " */");
        w.line(st_.target.signature(sec));
        w.line("{");
        w.indent();
        std::string text = body_.str();
        // what the function reads when CK_TRACE_NODE compiles to nothing
        static const std::regex trace_line("\\s*CK_TRACE_NODE\\(.*\\n");
        std::string code = std::regex_replace(text, trace_line, "\n");
        bool device = st_.target.device();
        if (sec == Section::Block && (device || code.find("w->") != std::string::npos)) w.line(st_.target.block_preamble());
        size_t width = 0;
        for (const auto &[decl, note] : decls_)
            if (decl.size() <= 80) width = std::max(width, decl.size());  // longer ones do not push the comments right
        for (const auto &[decl, note] : decls_) w.line(fmt::format("{:<{}} /* {} */", decl, width, comment_safe(note)));
        if (device) {  // the frame every kernel of the section reads; the launches follow
            w.line(fmt::format("{}_frame f_;", function_name()));
            for (const auto &field : frame_fields()) w.line(fmt::format("f_.{0} = {0};", field.second));
            w.line(fmt::format("f_.status = {};", st_.target.device_status()));
            w.line();
            return w.str() + text + "}\n";
        }
        std::vector<std::string> unused;
        for (const auto &param : st_.target.maybe_unused()) {
            std::regex word("\\b" + param + "\\b");
            if (!std::regex_search(code, word) && !(param == "layer" && sec == Section::Block)) unused.push_back(param);
        }
        if (!unused.empty()) {
            std::string casts;
            for (const auto &u : unused) casts += "(void)" + u + "; ";
            casts.pop_back();
            w.line(casts);
        }
        w.line();
        return w.str() + text + "}\n";
    }

    SectionState st_;
    NameSet names_;
    std::vector<std::pair<std::string, std::string>> decls_;  // declaration, comment
    CWriter body_;
    std::vector<std::string> sites_;  // CK_TRACE_<SECTION> rows
    std::vector<std::string> kernels_;  // device targets: one trampoline per node
};

}  // namespace

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

std::set<std::string> kernel_files(const Program &p, const std::set<std::string> &extra)
{
    // what every model uses: the thread pool, CPU dispatch, and the checkpoint readers with their formats
    std::set<std::string> files = {"kernels/threads.c", "kernels/cpu.c", "io/safetensors.c", "io/gguf.c",
                                   "io/quant.c", "io/json.c"};
    files.insert(extra.begin(), extra.end());
    for (Section s : kSections)
        for (const Node &n : p.section(s).nodes())
            for (const char *k : lowering(n.op).kernels) files.insert(k);
    return files;
}

}  // namespace ckc
