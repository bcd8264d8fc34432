// llm_codegen.cpp — writes model.c for a language-model Program.
//
// The skeleton (state struct, init/free, KV cache, the public ABI, an
// optional main) is templates/llm_model.c.in. This file fills its slots:
//   FRONTMATTER   version, command line, source hash, build line
//   CONFIG        dimensions as #defines, per-layer attribute tables
//   WEIGHTS       per-layer and global weight structs + load tables (program_c)
//   PLAN          arena offsets, one #define per allocation (program_c)
//   SECTIONS      ck_header / ck_block / ck_footer (program_c) for the Target
//                 below: handle `m`, tokens in m->tokens, the residual stream
//                 in m->x, logits in m->logits, positions from pos0 (on the
//                 gcu device: m->dev_tokens and m->dev_logits)
//   MODEL_FIELDS, INIT_TABLES, FREE_TABLES   RoPE cos/sin tables
//   TARGET_*      templates/targets/{cpu,gcu}_llm.c.in: where the buffers live
#include "codegen/llm_codegen.h"

#include <algorithm>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "codegen/backward_c.h"
#include "codegen/program_c.h"
#include "codegen/template.h"
#include "support/error.h"
#include "support/util.h"
#include "support/version.h"

namespace ckc {

namespace {

// The parameters of one RoPE table (ck_rope_params and its width).
struct RopeParams {
    int64_t rot_dim = 0;
    std::string type;
    double theta = 0, factor = 0, low_freq_factor = 0, high_freq_factor = 0, original_max_position_embeddings = 0;
    std::string key() const
    {
        return fmt::format("{}|{}|{}|{}|{}|{}|{}", rot_dim, type, theta, factor, low_freq_factor, high_freq_factor,
                           original_max_position_embeddings);
    }
};

// RoPE tables m->rope_cos[i] / m->rope_sin[i], one per distinct set of parameters, discovered while emitting.
// A node whose theta or factor differs by layer (a per-layer table: Gemma 3's local and global layers) reads
// the table of its layer's parameters, chosen by an index table CK_ROPE_OF_LAYER<j>[layer].
struct RopeTables {
    explicit RopeTables(const Program &p) : p(p) {}
    const Program &p;
    std::vector<RopeParams> tables;
    std::map<std::string, int> by_key;
    std::vector<std::vector<int>> selectors;  // CK_ROPE_OF_LAYER<j>: the table of each layer

    RopeRef ref(const Node &n)
    {
        bool varies = !n.table("theta").empty() || !n.table("factor").empty();
        if (!varies) return pair(std::to_string(add(params(n, 0))), {"m"});
        std::vector<int> of_layer;
        for (int64_t l = 0; l < p.info.n_layers; l++) of_layer.push_back(add(params(n, l)));
        auto it = std::find(selectors.begin(), selectors.end(), of_layer);
        size_t j = static_cast<size_t>(it - selectors.begin());
        if (it == selectors.end()) selectors.push_back(of_layer);
        return pair(fmt::format("CK_ROPE_OF_LAYER{}[layer]", j), {"m", "layer"});
    }
    std::string selectors_c() const
    {
        CWriter w;
        for (size_t j = 0; j < selectors.size(); j++) {
            std::vector<std::string> v;
            for (int i : selectors[j]) v.push_back(std::to_string(i));
            w.line(fmt::format("static const int CK_ROPE_OF_LAYER{}[CK_N_LAYERS] = {{{}}}; /* each layer's RoPE table "
                               "(m->rope_cos[i]) */", j, join(v, ", ")));
        }
        return w.str();
    }

private:
    static RopeRef pair(const std::string &index, std::vector<std::string> reads)
    {
        return {{"m->rope_cos[" + index + "]", reads}, {"m->rope_sin[" + index + "]", reads}};
    }
    double value(const Node &n, const std::string &key, int64_t layer) const
    {
        std::string t = n.table(key);
        if (t.empty()) return n.f(key);
        auto it = p.layer_tables.find(t);
        if (it == p.layer_tables.end() || layer >= static_cast<int64_t>(it->second.values.size()))
            internal_error("codegen: node '" + n.name + "' uses unknown per-layer table '" + t + "'");
        return it->second.values[static_cast<size_t>(layer)];
    }
    RopeParams params(const Node &n, int64_t layer) const
    {
        RopeParams r;
        r.rot_dim = n.i("rot_dim");
        r.type = n.s("rope_type");
        r.theta = value(n, "theta", layer);
        r.factor = value(n, "factor", layer);
        r.low_freq_factor = n.f("low_freq_factor");
        r.high_freq_factor = n.f("high_freq_factor");
        r.original_max_position_embeddings = n.f("original_max_position_embeddings");
        return r;
    }
    int add(const RopeParams &r)
    {
        auto [it, fresh] = by_key.emplace(r.key(), static_cast<int>(tables.size()));
        if (fresh) tables.push_back(r);
        return it->second;
    }
};

std::string rope_kind(const std::string &type)
{
    if (type == "default") return "CK_ROPE_DEFAULT";
    if (type == "linear") return "CK_ROPE_LINEAR";
    if (type == "llama3") return "CK_ROPE_LLAMA3";
    internal_error("codegen: unknown rope_type " + type);
}

class LlmTarget : public Target {
public:
    LlmTarget(const Program &p, bool gcu) : rope(p), gcu_(gcu) {}
    RopeTables rope;
    bool device() const override { return gcu_; }
    std::vector<std::string> frame_params(Section) const override { return {"layer", "T", "pos0"}; }
    std::string stream() const override { return "m->stream"; }
    std::string device_status() const override { return "m->dev_status"; }
    std::string function_name(Section s) const override { return std::string("ck_") + Program::section_name(s); }
    std::vector<CParam> params(Section) const override
    {
        return {{"ck_model *", "m"}, {"int", "layer"}, {"int", "T"}, {"int", "pos0"}};
    }
    CExpr arena(const std::string &off, bool per_token) const override
    {
        return {per_token ? fmt::format("m->act + (size_t)T * {}", off)
                          : fmt::format("m->act + (size_t)T * CK_ACT_PER_TOKEN + {}", off),
                {"m", "T"}};
    }
    CExpr carry(Section) const override { return {"m->x", {"m"}}; }
    CExpr input(const Tensor &t) const override
    {
        if (t.name != "tokens") internal_error("codegen: a language model's only input is tokens, not " + t.name);
        return {gcu_ ? "m->dev_tokens" : "m->tokens", {"m"}};
    }
    CExpr output(const Tensor &t) const override
    {
        if (t.name != "logits") internal_error("codegen: a language model's only output is logits, not " + t.name);
        return {gcu_ ? "m->dev_logits" : "m->logits", {"m"}};
    }
    CExpr weights(Section s) const override { return is_layer_section(s) ? CExpr{"w->", {"w"}} : CExpr{"m->w.", {"m"}}; }
    CExpr layer_weights() const override { return {"&m->w.layers[layer]", {"m", "layer"}}; }
    std::string weights_type() const override { return "ck_layer_weights"; }
    std::string tracer() const override { return "m->trace"; }
    RopeRef rope_tables(const Node &n) override { return rope.ref(n); }

private:
    bool gcu_;
};

}  // namespace

CodegenResult generate_llm_c(const Program &p, const Plan &plan, const CodegenOptions &o)
{
    WeightTable wt;
    wt.collect(p);
    bool gcu = o.target == "gcu";
    LlmTarget target(p, gcu);
    for (Section s : p.sections())
        for (const Node &n : p.section(s).nodes())
            if (gcu && n.op == Op::MOE_EXPERTS)
                input_error("--target gcu has no mixture-of-experts kernels yet (node '" + n.name + "'): compile for --target cpu");
    if (gcu && p.info.stored_weights)
        input_error("--target gcu runs float32 weights (the device has no quantized kernels yet): compile a "
                    "config.json without --weights");

    const Node *kv = nullptr;
    for (const Node &n : p.block.nodes())
        if (n.op == Op::KV_STORE) kv = &n;
    if (!kv) internal_error("codegen: the block has no KV_STORE");

    std::string sections;
    for (Section s : p.sections()) sections += section_c(p, s, plan.section(s), wt, target) + "\n";
    sections += layer_dispatch_c(p, "ck_layer", "ck_block", "ck_block2", "int T, int pos0", "T, pos0");

    // training: the backward functions (after the forward's, which registered the RoPE tables) and the ABI
    auto train_parts = template_parts(read_template(o.templates_dir, "llm_train.c.in"), "templates/llm_train.c.in");
    std::string train_config = "#define CK_TRAIN 0 /* compiled without --train: the training ABI is CK_ENOTSUP */\n";
    std::string training = train_parts["OFF"], train_fields;
    std::string training_report;
    if (o.train) {
        if (gcu) input_error("--train runs on --target cpu (the gcu device has no backward kernels yet)");
        if (plan.arena_fixed != 0) internal_error("training: the language model's arena has a fixed part");
        TrainingC tc = training_c(p, plan, wt, target);
        train_config = "#define CK_TRAIN 1 /* ckc compile --train: backward, AdamW, the training ABI */\n";
        train_config += fmt::format("#define CK_SAVED_HEADER {} /* saved activations, bytes per token */\n",
                                    plan.section(Section::Header).per_token.arena);
        train_config += fmt::format("#define CK_SAVED_BLOCK {} /* a layer's: the larger of its kinds' */\n",
                                    std::max(plan.section(Section::Block).per_token.arena,
                                             plan.section(Section::Block2).per_token.arena));
        train_config += fmt::format("#define CK_SAVED_FOOTER {}\n", plan.section(Section::Footer).per_token.arena);
        train_config += tc.config;
        training = tc.plan + "\n" + tc.functions + train_parts["CODE"];
        train_fields = train_parts["FIELDS"];
        std::ostringstream rep;
        print_training_report(p, plan, tc.stats, p.info.context_length, rep);
        training_report = rep.str();
    }

    // RoPE tables, discovered while emitting
    CWriter fields, init, fr;
    int64_t table_floats = 0;  // per position, over every table
    fields.indent();
    init.indent();
    fr.indent();
    const size_t n_tables = target.rope.tables.size();
    if (n_tables)
        fields.line(fmt::format("float *rope_cos[{0}], *rope_sin[{0}]; /* RoPE tables [CK_CONTEXT, rot_dim / 2] */",
                                n_tables));
    for (size_t i = 0; i < n_tables; i++) {
        const RopeParams &r = target.rope.tables[i];
        int64_t rot = r.rot_dim;
        fields.line(fmt::format("/*   [{}]: {}, theta {}, factor {}, {} rotated dims */", i, r.type, r.theta, r.factor, rot));
        init.line("{");
        init.indent();
        init.line(fmt::format("static const ck_rope_params params = {{{}, {}, {}, {}, {}, {}}};", rope_kind(r.type),
                              c_double(r.theta), c_double(r.factor), c_double(r.low_freq_factor),
                              c_double(r.high_freq_factor), c_double(r.original_max_position_embeddings)));
        init.line(fmt::format("float inv_freq[{}];", rot / 2));
        init.line(fmt::format("m->rope_cos[{0}] = ck_table_alloc(m, (size_t)CK_CONTEXT * {1});", i, rot / 2));
        init.line(fmt::format("m->rope_sin[{0}] = ck_table_alloc(m, (size_t)CK_CONTEXT * {1});", i, rot / 2));
        init.open(fmt::format("if (!m->rope_cos[{0}] || !m->rope_sin[{0}])", i));
        init.line(fmt::format("ck_table_release(m->rope_cos[{0}]); /* host memory: not the target's to free */", i));
        init.line(fmt::format("ck_table_release(m->rope_sin[{0}]);", i));
        init.line(fmt::format("m->rope_cos[{0}] = m->rope_sin[{0}] = NULL;", i));
        init.line("snprintf(err, sizeof err, \"out of memory for the RoPE tables (%d positions)\", CK_CONTEXT);");
        init.line("rc = CK_ENOMEM;");
        init.line("goto fail;");
        init.close();
        init.line(fmt::format("ck_rope_inv_freq(inv_freq, {}, &params);", rot));
        init.line(fmt::format("ck_rope_table(m->rope_cos[{0}], m->rope_sin[{0}], inv_freq, {1}, CK_CONTEXT);", i, rot));
        // both calls run: each one takes its host table over or frees it, so ck_model_free frees only the target's
        init.line(fmt::format("int placed_cos = ck_target_table(m, &m->rope_cos[{0}], (size_t)CK_CONTEXT * {1});", i,
                              rot / 2));
        init.line(fmt::format("int placed_sin = ck_target_table(m, &m->rope_sin[{0}], (size_t)CK_CONTEXT * {1});", i,
                              rot / 2));
        init.open("if (placed_cos != CK_OK || placed_sin != CK_OK)");
        init.line("ck_fail_in(\"ck_model_init\");");
        init.line("ck_model_free(m);");
        init.line("return NULL;");
        init.close();
        init.close();
        fr.line(fmt::format("ck_target_table_free(m->rope_cos[{0}]);", i));
        fr.line(fmt::format("ck_target_table_free(m->rope_sin[{0}]);", i));
        table_floats += rot;  // cos and sin, rot / 2 each per position
    }

    const int64_t n_params = weight_totals(p).elements;

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
    for (const auto &l : build_lines(o, "-DCK_MODEL_MAIN", "an executable that generates (see main() at the end)"))
        fm.line(l);
    fm.line(" *");
    fm.line(" * Dimension letters: T tokens in this call, C model width (CK_DIM), V vocabulary,");
    fm.line(" * L layers. Every activation is [T, ...] row-major float32.");
    fm.line(" */");

    CWriter cfg;
    auto define = [&](const std::string &name, int64_t value, const std::string &doc) {
        cfg.line(fmt::format("{:<36} /* {} */", fmt::format("#define {} {}", name, value), doc));
    };
    define("CK_N_LAYERS", p.info.n_layers, "L");
    define("CK_CONTEXT", p.info.context_length, "positions: RoPE table, KV capacity, tokens per call");
    for (const auto &sz : p.info.sizes) define(sz.name, sz.value, sz.doc);
    for (const char *needed : {"CK_VOCAB_SIZE", "CK_DIM", "CK_KV_HEADS", "CK_HEAD_DIM"})  // the template's
        if (!p.info.size_named(needed)) internal_error(std::string("codegen: the program defines no ") + needed);
    if (p.info.size_named("CK_KV_HEADS")->value != kv->i("kv_heads") ||
        p.info.size_named("CK_HEAD_DIM")->value != kv->i("head_dim"))
        internal_error("codegen: the KV store's heads or head_dim differ from the program's");
    const int64_t max_k = widest_gemm_k(p);  // (ck_linear_q's with stored weights)
    define("CK_MAX_K", max_k, "widest K of a GEMM: sizes the kernels' workspace");
    define("CK_MAX_QK", p.info.stored_weights ? max_k : widest_expert_k(p),
           "the same of the matrices ck_linear_q multiplies: stored formats, a mixture's experts (0: none)");
    cfg.line(fmt::format("#define CK_TABLE_FLOATS ((size_t)CK_CONTEXT * {}) /* the RoPE tables: floats */", table_floats));
    if (o.static_tokens > 0) {
        if (gcu) input_error("--static builds for --target cpu (a gcu model's buffers are device memory)");
        if (o.train) input_error("--static cannot be combined with --train (training allocates gradients and optimizer state)");
        define("CK_STATIC", 1, "ckc compile --static: every buffer in one block of CK_MODEL_MEMORY_BYTES");
        define("CK_STATIC_TOKENS", o.static_tokens, "--max-tokens: the most tokens one call takes");
        define("CK_STATIC_KV", o.static_kv, "--kv: positions the KV cache holds (0: no KV cache)");
    } else {
        define("CK_STATIC", 0, "buffers allocated at init and grown on demand (ckc compile --static: one block)");
    }
    cfg.line(fmt::format("#define CK_OPTIONAL_PREFIX \"{}\" /* checkpoint names may lack it (base-model files) */",
                         p.info.optional_prefix));
    // values the weights' metadata must hold (ck_gguf_expect tables): checked by ck_model_init
    auto expect_table = [&](const std::string &name, const std::vector<ModelInfo::HeaderValue> &values) {
        using K = ModelInfo::HeaderValue;
        cfg.line(fmt::format("#define CK_N_{} {}", name, values.size()));
        cfg.open(fmt::format("static const ck_gguf_expect CK_{}[] =", name));
        for (const auto &h : values)
            cfg.line(h.kind == K::Int      ? fmt::format("{{{}, 0, {}, 0.0, NULL}},", c_string(h.key), h.i)
                     : h.kind == K::Number ? fmt::format("{{{}, 1, 0, {:.17g}, NULL}},", c_string(h.key), h.number)
                                           : fmt::format("{{{}, 2, 0, 0.0, {}}},", c_string(h.key), c_string(h.str)));
        if (values.empty()) cfg.line("{NULL, 0, 0, 0.0, NULL} /* (none: C has no empty arrays) */");
        cfg.close("};");
    };
    // a GGUF input: the metadata it was compiled from, checked in the file ck_model_init loads
    cfg.line(fmt::format("/* the GGUF metadata this model was compiled from ({} values; ck_model_init checks them) */",
                         p.info.gguf_header.size()));
    expect_table("GGUF_HEADER", p.info.gguf_header);
    // a config.json input: the values that decide the numbers, checked in a config.json beside the safetensors
    cfg.line(fmt::format("/* the config.json values this model was compiled from ({}; fnv1a64 {}): ck_model_init "
                         "checks a config.json beside the weights */", p.info.config_expect.size(),
                         hex64(p.info.config_hash)));
    expect_table("CONFIG_EXPECT", p.info.config_expect);

    std::map<std::string, std::string> slots;
    slots["EMBEDDED"] = embedded_weights_c(o);
    slots["FRONTMATTER"] = fm.str();
    slots["CONFIG"] = cfg.str() + train_config + layer_tables_c(p) + target.rope.selectors_c();
    slots["TRAIN_FIELDS"] = train_fields;
    slots["TRAINING"] = training;
    slots["WEIGHTS"] = weights_c(wt, "ck_");
    slots["PLAN"] = plan_c(p, plan);
    slots["SECTIONS"] = sections;
    slots["MODEL_FIELDS"] = fields.str();
    slots["INIT_TABLES"] = init.str();
    slots["FREE_TABLES"] = fr.str();
    target_slots(slots, o.templates_dir, o.target, "llm", "ck_model", target, {});

    CodegenResult r;
    r.source = fill_template(read_template(o.templates_dir, "llm_model.c.in"), slots, "templates/llm_model.c.in");
    std::set<std::string> extra;
    if (gcu) extra.insert("gcu/gcu_host.c");
    if (o.train) extra.insert("kernels/train.c");
    if (p.info.stored_weights) extra.insert("kernels/qlinear.c");  // (and what its private headers name: fgemm, qgemm, ...)
    // text in, text out: the tokenizers, sampling / generation and the chat formats
    for (const char *f : {"text/tokenizer.c", "text/tokenizer_load.c", "text/pretokenize.c", "text/normalize.c", "text/unicode.c",
                          "text/generate.c", "text/chat.c", "text/cli.c"})
        extra.insert(f);
    r.training_report = training_report;
    r.notes = wt.notes;
    for (const auto &k : kernel_files(p, extra)) r.kernels.push_back(k);
    return r;
}

}  // namespace ckc
