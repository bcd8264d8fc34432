// graph_codegen.cpp — writes model.c for an exported graph (see graph_codegen.h).
//
// The skeleton (state, init/free, ck_graph_run, introspection) is
// templates/graph_model.c.in. This file fills its slots:
//   FRONTMATTER   version, command line, source hash, build line, memory
//   IO            input / output names, dtypes, ranks and shapes
//   WEIGHTS       weight structs + load tables, inline non-float constants
//   PLAN          arena offsets, one #define per allocation
//   SECTIONS      ckg_header / ckg_block / ckg_footer for the Target below:
//                 handle `g`, inputs g->in[i], outputs g->out[i], the arena
//                 g->act, the layer-to-layer value g->carry
#include "codegen/graph_codegen.h"

#include <algorithm>

#include <cstring>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "codegen/emit.h"
#include "codegen/program_c.h"
#include "codegen/template.h"
#include "support/error.h"
#include "support/util.h"
#include "support/version.h"
#include "ir/constants.h"
#include "ir/symbolic.h"
#include "support/checkpoint.h"
#include "support/safetensors_writer.h"

namespace ckc {

namespace {

int index_of(const std::vector<std::string> &v, const std::string &x)
{
    for (size_t i = 0; i < v.size(); i++)
        if (v[i] == x) return static_cast<int>(i);
    return -1;
}

class GraphTarget : public Target {
public:
    GraphTarget(const Program &p, const WeightTable &wt, bool gcu) : p_(p), wt_(wt), gcu_(gcu) {}
    bool device() const override { return gcu_; }
    std::vector<std::string> frame_params(Section) const override { return {"layer"}; }
    CExpr symbol(size_t k) const override { return {fmt::format("g->sym[{}]", k), {"g"}}; }
    std::string stream() const override { return "g->stream"; }
    std::string device_status() const override { return "g->dev_status"; }
    std::string inline_const(const Tensor &t, const std::string &array) const override
    {
        if (!gcu_) return array;
        for (size_t k = 0; k < wt_.inline_consts.size(); k++)
            if ("CK_" + upper(wt_.inline_consts[k].field) == array)
                return fmt::format("((const {} *)g->dev_const[{}])", c_type(t.dtype), k);
        internal_error("codegen: no device copy of " + array);
    }
    std::string function_name(Section s) const override { return std::string("ckg_") + Program::section_name(s); }
    std::vector<CParam> params(Section) const override { return {{"ck_graph *", "g"}, {"int", "layer"}}; }
    CExpr arena(const std::string &off, bool per_token) const override
    {
        if (per_token) internal_error("codegen: a graph has no per-token memory");
        return {"g->act + " + off, {"g"}};
    }
    CExpr carry(Section) const override { return {"g->carry", {"g"}}; }
    CExpr input(const Tensor &t) const override
    {
        int i = index_of(p_.inputs, t.name);
        if (i < 0) internal_error("codegen: '" + t.name + "' is not a graph input");
        return {fmt::format("((const {} *)g->{}[{}])", c_type(t.dtype), gcu_ ? "dev_in" : "in", i), {"g"}};
    }
    CExpr output(const Tensor &t) const override
    {
        int i = index_of(p_.outputs, t.name);
        if (i < 0) internal_error("codegen: '" + t.name + "' is not a graph output");
        return {fmt::format("(({} *)g->{}[{}])", c_type(t.dtype), gcu_ ? "dev_out" : "out", i), {"g"}};
    }
    CExpr weights(Section s) const override { return is_layer_section(s) ? CExpr{"w->", {"w"}} : CExpr{"g->w.", {"g"}}; }
    CExpr layer_weights() const override { return {"&g->w.layers[layer]", {"g", "layer"}}; }
    std::string weights_type() const override { return "ck_layer_weights"; }
    std::string tracer() const override { return "g->trace"; }
    RopeRef rope_tables(const Node &n) override
    {
        internal_error("codegen: node '" + n.name + "': RoPE tables exist only in language models");
    }

private:
    const Program &p_;
    const WeightTable &wt_;
    bool gcu_;
};

std::string dtype_enum(DType t)
{
    switch (t) {
    case DType::F32: return "CK_GRAPH_F32";
    case DType::I64: return "CK_GRAPH_I64";
    case DType::I32: return "CK_GRAPH_I32";
    case DType::Bool: return "CK_GRAPH_BOOL";
    case DType::F16:
    case DType::BF16: break;
    }
    internal_error(std::string("codegen: no ck_graph dtype for ") + dtype_name(t));
}

const Tensor &io_tensor(const Program &p, const std::string &name)
{
    for (Section s : p.sections())
        if (p.section(s).has_tensor(name)) return p.section(s).tensor(name);
    internal_error("codegen: no tensor '" + name + "'");
}

// The symbols of a graph with symbolic sizes: names and bounds, in the order g->sym holds their values.
std::string symbols_c(const Program &p)
{
    CWriter w;
    std::vector<std::string> names, lo, hi;
    for (const auto &s : p.symbols) {
        names.push_back(c_string(s));
        lo.push_back(std::to_string(sym_bounds(s).min));
        hi.push_back(std::to_string(sym_bounds(s).max));
    }
    auto list = [](const std::vector<std::string> &v, const std::string &dflt) { return v.empty() ? dflt : join(v, ", "); };
    w.line(fmt::format("#define CK_N_SYMBOLS {} /* symbolic sizes, bound by each call's input shapes */", p.symbols.size()));
    w.line(fmt::format("static const char *const CK_SYMBOL_NAMES[] = {{{}}};", list(names, "\"\"")));
    w.line(fmt::format("static const int64_t CK_SYMBOL_MIN[] = {{{}}};", list(lo, "0")));
    w.line(fmt::format("static const int64_t CK_SYMBOL_MAX[] = {{{}}};", list(hi, "0")));
    // the derived ones: "" for a free symbol, else its rule; ck_derive_symbols computes them from the free ones
    std::vector<std::string> rules, body;
    std::set<std::string> read;  // the values the rules read, by the names the sizes print them with
    for (size_t k = 0; k < p.symbols.size(); k++) {
        const std::string &s = p.symbols[k];
        rules.push_back(c_string(sym_rule(s)));
        if (const SymDerivation *d = sym_derivation(s)) {
            for (const auto &r : dim_symbols(d->of))
                if (read.insert(r).second)
                    body.push_back(fmt::format("const int64_t {} = sym[{}];", sym_c_name(r), index_of(p.symbols, r)));
            body.push_back(fmt::format("sym[{}] = {}; /* {} = {} */", k, sym_rule_c(s), comment_safe(s), comment_safe(sym_rule(s))));
        }
    }
    w.line(fmt::format("static const char *const CK_SYMBOL_RULES[] = {{{}}}; /* \"\": bound by an input's size */",
                       list(rules, "\"\"")));
    w.line("static void ck_derive_symbols(int64_t *sym)");
    w.line("{");
    if (body.empty()) body.push_back("(void)sym; /* no derived size */");
    for (const auto &b : body) w.line("    " + b);
    w.line("}");
    return w.str();
}

std::string io_c(const Program &p)
{
    CWriter w;
    w.lines(symbols_c(p));
    w.line();
    const bool symbolic = !p.symbols.empty();
    auto table = [&](const std::string &what, const std::vector<std::string> &tensors,
                     const std::vector<std::string> &names) {
        std::string up = upper(what);
        std::vector<std::string> n, d, r, sh, sz;
        for (size_t i = 0; i < tensors.size(); i++) {
            const Tensor &t = io_tensor(p, tensors[i]);
            n.push_back(c_string(names[i]));
            d.push_back(dtype_enum(t.dtype));
            r.push_back(std::to_string(t.shape.size()));
            Shape fixed;  // -1 where symbolic
            for (int64_t v : t.shape) fixed.push_back(is_sym(v) ? -1 : v);
            w.line(fmt::format("static const int64_t CK_{}_SHAPE_{}[] = {}; /* {} {} {}{} */", up, i, c_shape(fixed),
                               what, comment_safe(names[i]), dtype_name(t.dtype),
                               shape_is_static(t.shape) ? "" : " " + shape_str(t.shape)));
            sh.push_back(fmt::format("CK_{}_SHAPE_{}", up, i));
            if (symbolic) {  // each size as {coefficient, exponent of each symbol, constant}: c * s1^e1 ... + b
                std::vector<std::string> v;
                for (int64_t dim : t.shape) {
                    SymProduct sp;
                    int64_t b = 0;
                    if (!is_sym(dim)) {
                        sp.coef = dim;
                    } else {
                        int monomials = 0;
                        for (const SymProduct &term : sym_terms(dim)) {
                            if (term.powers.empty()) b = term.coef;
                            else sp = term, monomials++;
                        }
                        if (monomials != 1 || sp.coef < 1)
                            throw Error(ErrorKind::Input,
                                        fmt::format("{} '{}' has the size {}: the sizes of a graph's inputs and outputs "
                                                    "are constants or a product of symbols plus a constant",
                                                    what, names[i], dim_str(dim)));
                    }
                    v.push_back(std::to_string(sp.coef));
                    for (const auto &sym : p.symbols)
                        v.push_back(std::to_string(sp.powers.count(sym) ? sp.powers.at(sym) : 0));
                    v.push_back(std::to_string(b));
                }
                if (v.empty()) v.push_back("1");
                w.line(fmt::format("static const int64_t CK_{}_SIZE_{}[] = {{{}}};", up, i, join(v, ", ")));
                sz.push_back(fmt::format("CK_{}_SIZE_{}", up, i));
            }
        }
        auto list = [](std::vector<std::string> v, const std::string &dflt) {
            return "{" + (v.empty() ? dflt : join(v, ", ")) + "}";
        };
        w.line(fmt::format("#define CK_N_{}S {}", up, tensors.size()));
        w.line(fmt::format("static const char *const CK_{}_NAMES[] = {};", up, list(n, "NULL")));
        w.line(fmt::format("static const int CK_{}_DTYPES[] = {};", up, list(d, "0")));
        w.line(fmt::format("static const int CK_{}_RANKS[] = {};", up, list(r, "0")));
        w.line(fmt::format("static const int64_t *const CK_{}_SHAPES[] = {};", up, list(sh, "NULL")));
        if (symbolic)
            w.line(fmt::format("static const int64_t *const CK_{}_SIZES[] = {}; /* CK_{}_SIZE_i */", up, list(sz, "NULL"), up));
    };
    table("input", p.inputs, p.inputs);
    w.line();
    table("output", p.outputs, p.output_names);
    std::vector<std::string> into;
    for (const auto &o : p.outputs) {
        const Tensor &t = io_tensor(p, o);
        into.push_back(t.into.empty() ? "-1" : std::to_string(index_of(p.inputs, t.into)));
    }
    if (into.empty()) into.push_back("-1");
    w.line(fmt::format("static const int CK_OUTPUT_INTO[] = {{{}}}; /* the input an output is written into; -1: its "
                       "own buffer */",
                       join(into, ", ")));
    return w.str();
}

// The float32 weights file of a compiled graph: every f32 weight the program reads (by source name),
// copied from the export file or from p.constants.
std::string graph_weights_bytes(const Program &p)
{
    std::set<std::string> names;
    for (Section s : p.sections())
        for (const Node &n : p.section(s).nodes())
            for (const auto &in : n.inputs) {
                const Tensor &t = p.section(s).tensor(in);
                if (t.storage != Storage::Weight || t.dtype != DType::F32) continue;
                for (const auto &part : t.source.parts) {
                    if (part.find("{L}") == std::string::npos) {
                        names.insert(part);
                        continue;
                    }
                    for (int64_t l = 0; l < p.info.n_layers; l++) names.insert(replace_all(part, "{L}", std::to_string(l)));
                }
            }
    std::unique_ptr<CheckpointFile> ck;
    std::vector<StTensor> out;
    for (const auto &name : names) {
        StTensor st;
        st.name = name;
        auto it = p.constants.find(name);
        if (it != p.constants.end()) {
            st.shape = it->second.shape;
            st.dtype = CK_DT_F32;
            st.data.resize(it->second.v.size() * 4);
            for (size_t i = 0; i < it->second.v.size(); i++) {
                float f = static_cast<float>(it->second.v[i]);
                std::memcpy(st.data.data() + 4 * i, &f, 4);
            }
        } else {
            if (!ck) {
                if (p.weights_path.empty()) internal_error("graph weight '" + name + "' has no source file");
                ck = std::make_unique<CheckpointFile>(p.weights_path, ErrorKind::IO);
            }
            const ck_tensor_info *ti = ck->find(name);
            if (!ti) input_error(fmt::format("{}: constant '{}' is not in the weights file", p.weights_path, name));
            st.shape.assign(ti->shape, ti->shape + ti->ndim);
            st.dtype = checkpoint_dtype(dtype_from_checkpoint(ti->dtype, name));
            const auto *b = static_cast<const uint8_t *>(ti->data);
            st.data.assign(b, b + ti->nbytes);
        }
        out.push_back(std::move(st));
    }
    return safetensors_bytes(out);
}

}  // namespace

std::string graph_weights_path(const std::string &c_path)
{
    std::string base = ends_with(c_path, ".c") ? c_path.substr(0, c_path.size() - 2) : c_path;
    return base + ".weights.safetensors";
}

// The sizes of the inputs or outputs in bytes, for the gcu target's copies.
std::string io_bytes(const Program &p, const std::vector<std::string> &names)
{
    std::vector<std::string> v;
    for (const auto &n : names) {
        const Tensor &t = io_tensor(p, n);
        v.push_back(std::to_string(shape_numel_fixed(t.shape) * dtype_size(t.dtype)));
    }
    if (v.empty()) v.push_back("0");
    return join(v, ", ");
}

GraphCodegenResult generate_graph_c(Program &p, const Plan &plan, const CodegenOptions &o)
{
    if (p.has_block2()) internal_error("codegen: an exported graph with two kinds of layer");
    WeightTable wt;
    wt.collect(p);
    for (const auto &f : wt.inline_consts)
        if (!constant_value(p, *f.t)) internal_error("codegen: no value for constant '" + f.t->name + "'");
    bool gcu = o.target == "gcu";
    GraphTarget target(p, wt, gcu);

    std::string sections;
    for (Section s : p.sections()) sections += section_c(p, s, plan.section(s), wt, target) + (s != Section::Footer ? "\n" : "");

    const int64_t n_params = weight_totals(p).elements;
    int64_t nodes = 0;
    for (Section s : p.sections()) nodes += static_cast<int64_t>(p.section(s).nodes().size());
    std::string weights_name = graph_weights_path(o.output_name);
    CWriter fm;
    fm.line("/*");
    fm.line(fmt::format(" * {} — exported graph '{}' compiled by ckc {}. Do not edit; regenerate.", o.output_name,
                        comment_safe(p.info.family), CKC_VERSION));
    fm.line(" *");
    fm.line(" *   command : " + comment_safe(o.command_line));
    fm.line(fmt::format(" *   source  : {} (fnv1a64 {})", comment_safe(p.info.source_path), hex64(p.info.source_hash)));
    fm.line(" *   graph   : " + comment_safe(p.info.summary));
    fm.line(fmt::format(" *   code    : {} nodes{}", nodes,
                        p.info.n_layers ? fmt::format(" (the block runs {} times)", p.info.n_layers) : std::string()));
    fm.line(" *   passes  : " + (o.passes.empty() ? std::string("(none)") : join(o.passes, ", ")));
    fm.line(fmt::format(" *   memory  : arena {} (a naive plan: {}); weights {} floats in {}", human_bytes(plan.arena_fixed),
                        human_bytes([&] {
                            int64_t naive = 0;
                            for (const auto &sp : plan.sections) naive = std::max(naive, sp.fixed.naive);
                            return naive;
                        }()),
                        n_params, weights_name));
    if (!p.symbols.empty()) {
        std::vector<std::string> b;
        for (const auto &sym : p.symbols) b.push_back(fmt::format("{} in [{}, {}]", sym, sym_bounds(sym).min, sym_bounds(sym).max));
        fm.line(" *   symbols : " + join(b, ", ") + " (the arena is planned for the bounds; ck_graph_run_shaped binds them)");
    }
    fm.line(" *");
    for (const auto &l : build_lines(o, "-DCK_GRAPH_MAIN", "an executable that runs it on input files (main() at the end)"))
        fm.line(l);
    fm.line(" * and use the library through ck_graph.h:");
    fm.line(" *   ck_graph *g = ck_graph_init(\"" + weights_name + "\");");
    fm.line(" *   ck_graph_run(g, inputs, outputs);   (contiguous buffers, in the order below)");
    fm.line(" */");

    CWriter cfg;
    cfg.line(fmt::format("#define CK_N_LAYERS {} /* times the block runs */", p.info.n_layers));
    cfg.line(fmt::format("#define CK_MAX_K {} /* the widest K of a GEMM: sizes the kernels' workspace */",
                         widest_gemm_k(p)));
    cfg.line(fmt::format("#define CK_CARRY_ELEMS {} /* floats of the value passed from layer to layer */",
                         p.info.n_layers ? shape_numel_fixed(p.carry_shape) : 0));

    std::map<std::string, std::string> slots;
    slots["FRONTMATTER"] = fm.str();
    slots["IO"] = cfg.str() + "\n" + io_c(p);
    slots["WEIGHTS"] = weights_c(wt, "ck_") + "\n" + inline_constants_c(wt, p);
    slots["PLAN"] = plan_c(p, plan);
    slots["SECTIONS"] = sections;
    std::map<std::string, std::string> target_values;
    if (gcu) {
        CWriter consts;
        consts.indent();
        for (const auto &f : wt.inline_consts) consts.line(fmt::format("{{CK_{0}, sizeof CK_{0}}},", upper(f.field)));
        if (wt.inline_consts.empty()) consts.line("{NULL, 0} /* none */");
        target_values["INLINE_CONSTS"] = consts.str();
        target_values["INPUT_BYTES"] = io_bytes(p, p.inputs);
        target_values["OUTPUT_BYTES"] = io_bytes(p, p.outputs);
    }
    target_slots(slots, o.templates_dir, o.target, "graph", "ck_graph", target, target_values);

    GraphCodegenResult r;
    r.source = fill_template(read_template(o.templates_dir, "graph_model.c.in"), slots, "templates/graph_model.c.in");
    std::set<std::string> extra;
    if (gcu) extra.insert("gcu/gcu_host.c");
    for (const auto &k : kernel_files(p, extra)) r.kernels.push_back(k);
    if (!wt.global.empty() || !wt.layer.empty()) r.weights = graph_weights_bytes(p);
    r.weights_name = weights_name;
    return r;
}

}  // namespace ckc
