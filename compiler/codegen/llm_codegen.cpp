// llm_codegen.cpp — writes model.c for a language-model Program.
//
// The skeleton (state struct, init/free, KV cache, the public ABI, an
// optional main) is templates/llm_model.c.in. This file produces the
// model-specific slots:
//   FRONTMATTER   version, command line, source hash, build line
//   CONFIG        dimensions as #defines
//   WEIGHTS       per-layer and global weight structs (a shape comment and
//                 the Hugging Face name on every field) + the load tables
//   PLAN          arena offsets, one #define per root, with lifetimes
//   SECTIONS      ck_header / ck_block / ck_footer: pointer locals for every
//                 tensor, then one kernel call per node (op emitters,
//                 ir/ops.cpp), each under a comment naming its HF module
//   MODEL_FIELDS, INIT_TABLES, FREE_TABLES   RoPE cos/sin tables
#include "codegen/llm_codegen.h"

#include <algorithm>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "codegen/cwriter.h"
#include "codegen/emit.h"
#include "codegen/template.h"
#include "support/error.h"
#include "support/util.h"
#include "support/version.h"

namespace ckc {

namespace {

std::string upper(std::string s)
{
    for (auto &c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

// C comments must not contain "*/".
std::string comment_safe(const std::string &s) { return replace_all(s, "*/", "* /"); }

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

// ---- weights ---------------------------------------------------------------

struct WeightField {
    std::string field;
    const Tensor *t;
};

struct WeightTable {
    std::vector<WeightField> global, layer;
    std::map<std::string, std::string> global_by_key, layer_by_key;

    void collect(const Program &p)
    {
        NameSet gnames, lnames;
        for (int s : {0, 2, 1})
            for (const Node &n : p.section(s).nodes())
                for (const auto &name : n.inputs) {
                const Tensor &t = p.section(s).tensor(name);
                if (t.storage != Storage::Weight) continue;
                std::string key = source_key(t);
                auto &by_key = s == 1 ? layer_by_key : global_by_key;
                if (by_key.count(key)) continue;
                std::string want = s == 1 ? name : merge_names(t.source.parts);
                if (starts_with(want, "model.")) want = want.substr(6);
                std::string field = (s == 1 ? lnames : gnames).take(want);
                by_key[key] = field;
                (s == 1 ? layer : global).push_back({field, &t});
            }
    }

    std::string expr(int section, const Tensor &t) const
    {
        const auto &by_key = section == 1 ? layer_by_key : global_by_key;
        auto it = by_key.find(source_key(t));
        if (it == by_key.end()) internal_error("codegen: weight '" + t.name + "' has no field");
        return (section == 1 ? "w->" : "m->w.") + it->second;
    }
};

std::string spec_row(const std::string &strct, const WeightField &f)
{
    const Tensor &t = *f.t;
    std::vector<std::string> names, shapes;
    for (size_t i = 0; i < t.source.parts.size(); i++) {
        names.push_back("\"" + replace_all(replace_all(t.source.parts[i], "%", "%%"), "{L}", "%d") + "\"");
        std::vector<std::string> dims;
        for (int64_t d : t.source.part_shapes[i]) dims.push_back(std::to_string(d));
        shapes.push_back("{" + join(dims, ", ") + "}");
    }
    return fmt::format("    {{offsetof({}, {}), {}, {{{}}}, {}, {{{}}}, {}}},", strct, f.field, t.source.parts.size(),
                       join(names, ", "), t.source.part_shapes[0].size(), join(shapes, ", "), t.source.transposed ? 1 : 0);
}

std::string weights_slot(const WeightTable &wt)
{
    CWriter w;
    auto field_line = [&](const WeightField &f) {
        std::string decl = fmt::format("const float *{};", f.field);
        w.line(fmt::format("{:<40} /* {} {}{} */", decl, shape_str(f.t->shape), comment_safe(merge_names(f.t->source.parts)),
                           f.t->source.transposed ? " (stored [in, out], loaded transposed)" : ""));
    };
    w.comment("one decoder layer; {L} in a name is the layer index");
    w.open("typedef struct ck_layer_weights");
    for (const auto &f : wt.layer) field_line(f);
    w.close("} ck_layer_weights;");
    w.line();
    w.open("typedef struct ck_weights");
    for (const auto &f : wt.global) field_line(f);
    w.line("ck_layer_weights layers[CK_N_LAYERS];");
    w.close("} ck_weights;");
    w.line();
    w.comment("load tables: field, parts (concatenated along dim 0), names, rank, file shape of each part, transpose");
    w.open("static const ck_weight_spec CK_GLOBAL_WEIGHTS[] =");
    for (const auto &f : wt.global) w.line(spec_row("ck_weights", f).substr(4));
    w.close("};");
    w.open("static const ck_weight_spec CK_LAYER_WEIGHTS[] =");
    for (const auto &f : wt.layer) w.line(spec_row("ck_layer_weights", f).substr(4));
    w.close("};");
    return w.str();
}

// ---- RoPE tables -------------------------------------------------------------

struct RopeTables {
    std::vector<const Node *> tables;  // one representative ROPE node per distinct table
    std::map<std::string, int> by_key;

    static std::string key(const Node &n)
    {
        return fmt::format("{}|{}|{}|{}|{}|{}|{}", n.i("rot_dim"), n.s("rope_type"), n.f("theta"), n.f("factor"),
                           n.f("low_freq_factor"), n.f("high_freq_factor"), n.f("original_max_position_embeddings"));
    }
    std::string prefix(const Node &n)
    {
        std::string k = key(n);
        if (!by_key.count(k)) {
            by_key[k] = static_cast<int>(tables.size());
            tables.push_back(&n);
        }
        return fmt::format("m->rope{}", by_key[k]);
    }
};

std::string rope_kind(const std::string &type)
{
    if (type == "default") return "CK_ROPE_DEFAULT";
    if (type == "linear") return "CK_ROPE_LINEAR";
    if (type == "llama3") return "CK_ROPE_LLAMA3";
    internal_error("codegen: unknown rope_type " + type);
}

// ---- sections ----------------------------------------------------------------

struct SectionState {
    const Program &p;
    int sec;
    const Graph &g;
    const SectionPlan &sp;
    const WeightTable &wt;
    RopeTables &rt;
    std::map<std::string, std::string> local;  // tensor -> C local
    std::string sec_upper;

    int64_t root_width(const std::string &root) const
    {
        if (root == kCarryRoot) return p.carry_shape.back();
        return g.tensor(root).shape.back();
    }
    std::string offset_name(const std::string &root) const
    {
        return "CK_OFF_" + sec_upper + "_" + upper(c_identifier(root));
    }
};

class LlmEmitCtx : public EmitCtx {
public:
    LlmEmitCtx(CWriter &w, SectionState &st, const Node &n) : EmitCtx(w, st.g, n), st_(st) {}
    std::string ptr(const std::string &t) const override
    {
        const Tensor &tt = g.tensor(t);
        if (tt.storage == Storage::Weight) return st_.wt.expr(st_.sec, tt);
        return name(t);
    }
    std::string ld(const std::string &t) const override
    {
        const Tensor &tt = g.tensor(t);
        if (tt.storage == Storage::Weight) return std::to_string(tt.shape.back());
        return std::to_string(st_.root_width(st_.sp.region.at(t).root));
    }
    std::string name(const std::string &t) const override
    {
        auto it = st_.local.find(t);
        if (it == st_.local.end()) internal_error("codegen: tensor '" + t + "' has no local");
        return it->second;
    }
    std::string rope_table(const Node &rope) override { return st_.rt.prefix(rope); }
    std::string param(const std::string &key, double dflt, bool is_int) const override
    {
        std::string table = n.table(key);
        if (!table.empty()) {
            if (!st_.p.layer_tables.count(table) || st_.sec != 1)
                internal_error("codegen: node '" + n.name + "' uses unknown per-layer table '" + table + "'");
            return "CK_LAYER_" + upper(c_identifier(table)) + "[layer]";
        }
        double v = n.f(key, dflt);
        return is_int ? std::to_string(static_cast<int64_t>(v)) : c_float(v);
    }

private:
    SectionState &st_;
};

std::string section_fn(SectionState &st)
{
    const Graph &g = st.g;
    const SectionPlan &sp = st.sp;
    NameSet names({"m", "w", "T", "layer", "pos0"});
    // locals, in order of first use
    std::vector<std::pair<std::string, std::string>> decls;  // declaration, comment
    auto declare = [&](const std::string &t) {
        if (st.local.count(t) || g.tensor(t).storage == Storage::Weight) return;
        const Tensor &tt = g.tensor(t);
        const Region &r = sp.region.at(t);
        std::string name = names.take(t), type = tt.dtype == DType::I32 ? "const int32_t *" : "float *", expr, note;
        std::string shape = shape_str(tt.shape);
        if (tt.storage == Storage::Input) {
            expr = "m->" + c_identifier(t);
            note = "caller input";
        } else if (r.root == kCarryRoot) {
            expr = r.col ? fmt::format("m->x + {}", r.col) : "m->x";
            note = "the residual stream";
        } else if (r.root == t && sp.alloc.count(t)) {
            const Allocation &a = sp.alloc.at(t);
            expr = a.per_token ? fmt::format("(float *)(m->act + (size_t)T * {})", st.offset_name(t))
                               : fmt::format("(float *)(m->act + (size_t)T * CK_ACT_PER_TOKEN + {})", st.offset_name(t));
            note = "arena";
        } else if (r.root == t) {
            if (tt.storage != Storage::Output || t != "logits") internal_error("codegen: no memory for '" + t + "'");
            expr = "m->logits";
            note = "result";
        } else {
            // the root's local; an output buffer may be reached before its own local
            std::string base = st.local.count(r.root) ? st.local.at(r.root)
                               : g.tensor(r.root).storage == Storage::Output ? std::string("m->logits")
                                                                           : st.local.at(r.root);
            bool view = tt.shape.back() != st.root_width(r.root);
            expr = r.col ? fmt::format("{} + {}", base, r.col) : base;
            note = view ? fmt::format("columns {}..{} of {} (row stride {})", r.col, r.col + tt.shape.back() - 1, base,
                                      st.root_width(r.root))
                   : g.tensor(r.root).storage == Storage::Output ? "written in the result buffer"
                                                                 : fmt::format("in place: {}'s memory", base);
        }
        st.local[t] = name;
        decls.push_back({fmt::format("{}{} = {};", type, name, expr), fmt::format("{} {}", shape, note)});
    };
    for (const auto &nn : sp.order) {
        const Node &n = *g.node(nn);
        for (const auto &in : n.inputs) declare(in);
        declare(n.output);
    }

    CWriter body;
    body.indent();
    for (const auto &nn : sp.order) {
        const Node &n = *g.node(nn);
        const OpDef &d = op_def(n.op);
        if (d.view && d.view(n)) continue;  // a view is just its pointer local
        body.comment(comment_safe(n.origin.empty() ? n.name : n.origin));
        LlmEmitCtx ctx(body, st, n);
        d.emit(ctx);
    }
    for (const auto &[t, pin] : sp.copies) {
        std::string dst = pin == kCarryRoot ? "m->x" : "m->logits";
        body.line(fmt::format("memcpy({}, {}, (size_t){} * sizeof(float)); /* {} -> {} */", dst, st.local.at(t),
                              fmt::format("T * {}", shape_numel_fixed(g.tensor(t).shape)), t,
                              pin == kCarryRoot ? "residual stream" : pin));
    }

    CWriter w;
    const char *sec = Program::section_name(st.sec);
    std::string what = st.sec == 0 ? "runs once before the layers"
                     : st.sec == 1 ? "one decoder layer, run for layer = 0 .. CK_N_LAYERS-1"
                                   : "runs once after the layers";
    w.line(fmt::format("/* ---- {}: {} ", sec, what) + std::string(std::max<int>(0, 70 - static_cast<int>(what.size()) - static_cast<int>(std::string(sec).size())), '-'));
    w.line(fmt::format(" * arena {}/token (without a planner: {}/token) */", human_bytes(sp.per_token.arena),
                       human_bytes(sp.per_token.naive)));
    w.line(fmt::format("static void ck_{}(ck_model *m, int layer, int T, int pos0)", sec));
    w.line("{");
    w.indent();
    if (st.sec == 1) w.line("const ck_layer_weights *w = &m->w.layers[layer];");
    size_t width = 0;
    for (const auto &[decl, note] : decls) width = std::max(width, decl.size());
    for (const auto &[decl, note] : decls) w.line(fmt::format("{:<{}} /* {} */", decl, width, comment_safe(note)));
    // silence parameters this section does not use
    std::string text = body.str();
    std::vector<std::string> unused;
    for (const char *param : {"layer", "pos0"}) {
        std::regex word(std::string("\\b") + param + "\\b");
        if (!std::regex_search(text, word) && !(std::string(param) == "layer" && st.sec == 1)) unused.push_back(param);
    }
    if (!unused.empty()) {
        std::string casts;
        for (const auto &u : unused) casts += "(void)" + u + "; ";
        casts.pop_back();
        w.line(casts);
    }
    w.line();
    std::string out = w.str() + text;
    out += "}\n";
    return out;
}

std::string plan_slot(const Program &p, const Plan &plan)
{
    CWriter w;
    w.line(fmt::format("#define CK_ACT_PER_TOKEN {} /* bytes per token: the largest section */", plan.arena_per_token));
    w.line(fmt::format("#define CK_ACT_FIXED {} /* bytes independent of T */", plan.arena_fixed));
    for (int s = 0; s < 3; s++) {
        const SectionPlan &sp = plan.sections[s];
        std::string sec = upper(Program::section_name(s));
        w.comment(fmt::format("{}: arena {}/token; naive sum {}/token; max-live lower bound {}/token",
                              Program::section_name(s), human_bytes(sp.per_token.arena), human_bytes(sp.per_token.naive),
                              human_bytes(sp.per_token.lower_bound)));
        std::vector<const Allocation *> allocs;
        for (const auto &[n, a] : sp.alloc) allocs.push_back(&a);
        std::sort(allocs.begin(), allocs.end(), [](auto *a, auto *b) {
            return a->per_token != b->per_token ? a->per_token > b->per_token : a->offset < b->offset;
        });
        for (const Allocation *a : allocs) {
            const Tensor &t = p.section(s).tensor(a->root);
            std::string def = fmt::format("#define CK_OFF_{}_{} {}", sec, upper(c_identifier(a->root)), a->offset);
            w.line(fmt::format("{:<44} /* {} {} {}, steps {}..{} */", def, a->root, shape_str(t.shape),
                               a->per_token ? human_bytes(a->size) + "/token" : human_bytes(a->size), a->birth, a->death));
        }
    }
    return w.str();
}

}  // namespace

CodegenResult generate_llm_c(const Program &p, const Plan &plan, const CodegenOptions &o, const std::string &template_text)
{
    WeightTable wt;
    wt.collect(p);
    RopeTables rt;

    const Node *kv = nullptr;
    for (const Node &n : p.block.nodes())
        if (n.op == Op::KV_STORE) kv = &n;
    if (!kv) internal_error("codegen: the block has no KV_STORE");

    std::map<std::string, std::string> slots;
    std::string sections;
    std::set<std::string> kernel_files = {"kernels/threads.c", "kernels/cpu.c", "io/safetensors.c", "io/json.c"};
    for (int s : {0, 1, 2}) {
        SectionState st{p, s, p.section(s), plan.sections[s], wt, rt, {}, upper(Program::section_name(s))};
        sections += section_fn(st) + (s < 2 ? "\n" : "");
        for (const Node &n : p.section(s).nodes())
            for (const char *k : op_def(n.op).kernels) kernel_files.insert(k);
    }

    // RoPE tables, discovered while emitting
    CWriter fields, init, fr;
    fields.indent();
    init.indent();
    fr.indent();
    for (size_t i = 0; i < rt.tables.size(); i++) {
        const Node &n = *rt.tables[i];
        int64_t rot = n.i("rot_dim");
        fields.line(fmt::format("float *rope{0}_cos, *rope{0}_sin; /* [CK_CONTEXT, {1}] RoPE table ({2}, theta {3}) */", i,
                                rot / 2, n.s("rope_type"), n.f("theta")));
        init.line("{");
        init.indent();
        init.line(fmt::format("static const ck_rope_params params = {{{}, {}, {}, {}, {}, {}}};", rope_kind(n.s("rope_type")),
                              c_double(n.f("theta")), c_double(n.f("factor")), c_double(n.f("low_freq_factor")),
                              c_double(n.f("high_freq_factor")), c_double(n.f("original_max_position_embeddings"))));
        init.line(fmt::format("float inv_freq[{}];", rot / 2));
        init.line(fmt::format("m->rope{0}_cos = (float *)malloc(sizeof(float) * CK_CONTEXT * {1});", i, rot / 2));
        init.line(fmt::format("m->rope{0}_sin = (float *)malloc(sizeof(float) * CK_CONTEXT * {1});", i, rot / 2));
        init.open(fmt::format("if (!m->rope{0}_cos || !m->rope{0}_sin)", i));
        init.line("snprintf(err, sizeof err, \"out of memory for the RoPE tables\");");
        init.line("goto fail;");
        init.close();
        init.line(fmt::format("ck_rope_inv_freq(inv_freq, {}, &params);", rot));
        init.line(fmt::format("ck_rope_table(m->rope{0}_cos, m->rope{0}_sin, inv_freq, {1}, CK_CONTEXT);", i, rot));
        init.close();
        fr.line(fmt::format("free(m->rope{0}_cos);", i));
        fr.line(fmt::format("free(m->rope{0}_sin);", i));
    }

    int64_t n_params = 0;
    for (int s = 0; s < 3; s++)
        for (const auto &[name, t] : p.section(s).tensors())
            if (t.storage == Storage::Weight) n_params += shape_numel_fixed(t.shape) * (s == 1 ? p.info.n_layers : 1);

    std::string build = "cc -O3 -fPIC -shared -I runtime/include " + o.output_name + " $(cat " + o.output_name +
                        ".kernels) -lopenblas -lm -fopenmp -o libmodel.so";
    CWriter fm;
    fm.line("/*");
    fm.line(fmt::format(" * {} — {} language model generated by ckc {}. Do not edit; regenerate.", o.output_name,
                        p.info.family, CKC_VERSION));
    fm.line(" *");
    fm.line(" *   command : " + comment_safe(o.command_line));
    fm.line(fmt::format(" *   source  : {} (fnv1a64 {})", comment_safe(p.info.source_path), hex64(p.info.source_hash)));
    fm.line(" *   model   : " + comment_safe(p.info.summary));
    fm.line(" *   passes  : " + (o.passes.empty() ? std::string("(none)") : join(o.passes, ", ")));
    fm.line(fmt::format(" *   memory  : arena {}/token (+ {} fixed); weights {} floats outside it",
                        human_bytes(plan.arena_per_token), human_bytes(plan.arena_fixed), n_params));
    fm.line(" *");
    fm.line(" * Build a shared library (from the ckc repository root):");
    fm.line(" *   " + build);
    fm.line(" * or an executable that greedily generates (see main() at the end):");
    fm.line(" *   cc -O3 -DCK_MODEL_MAIN -I runtime/include " + o.output_name + " $(cat " + o.output_name +
            ".kernels) -lopenblas -lm -fopenmp -o model");
    fm.line(" *");
    fm.line(" * Dimension letters: T tokens in this call, C model width (CK_DIM), V vocabulary,");
    fm.line(" * L layers. Every activation is [T, ...] row-major float32.");
    fm.line(" */");

    CWriter cfg;
    cfg.line(fmt::format("#define CK_VOCAB_SIZE {:<8} /* V */", p.info.vocab_size));
    cfg.line(fmt::format("#define CK_DIM {:<15} /* C: model width, the residual stream */", p.info.hidden_size));
    cfg.line(fmt::format("#define CK_N_LAYERS {:<10} /* L */", p.info.n_layers));
    cfg.line(fmt::format("#define CK_CONTEXT {:<11} /* positions: RoPE table, KV capacity, tokens per call */",
                         p.info.context_length));
    cfg.line(fmt::format("#define CK_KV_HEADS {:<10} /* key/value heads (KV cache) */", kv->i("kv_heads")));
    cfg.line(fmt::format("#define CK_HEAD_DIM {:<10} /* per head (KV cache) */", kv->i("head_dim")));
    cfg.line(fmt::format("#define CK_OPTIONAL_PREFIX \"{}\" /* checkpoint names may lack it (base-model files) */",
                         p.info.optional_prefix));
    for (const auto &[name, table] : p.layer_tables) {
        std::vector<std::string> vals;
        for (double v : table.values) vals.push_back(table.is_int ? std::to_string(static_cast<int64_t>(v)) : c_float(v));
        cfg.line(fmt::format("static const {} CK_LAYER_{}[CK_N_LAYERS] = {{{}}}; /* {} per layer */",
                             table.is_int ? "int" : "float", upper(c_identifier(name)), join(vals, ", "), name));
    }

    slots["FRONTMATTER"] = fm.str();
    slots["CONFIG"] = cfg.str();
    slots["WEIGHTS"] = weights_slot(wt);
    slots["PLAN"] = plan_slot(p, plan);
    slots["SECTIONS"] = sections;
    slots["MODEL_FIELDS"] = fields.str();
    slots["INIT_TABLES"] = init.str();
    slots["FREE_TABLES"] = fr.str();

    CodegenResult r;
    r.source = fill_template(template_text, slots, "templates/llm_model.c.in");
    for (const auto &k : kernel_files) r.kernels.push_back(o.runtime_dir + "/" + k);
    return r;
}

}  // namespace ckc
