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

#include <fmt/format.h>

#include "codegen/emit.h"
#include "codegen/program_c.h"
#include "codegen/template.h"
#include "support/error.h"
#include "support/util.h"
#include "support/version.h"
#include "weights/constants.h"

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
    std::vector<std::string> frame_params(Section) const override { return {"int layer"}; }
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
    std::string signature(Section s) const override
    {
        return fmt::format("static int ckg_{}(ck_graph *g, int layer)", Program::section_name(s));
    }
    std::vector<std::string> maybe_unused() const override { return {"g", "layer"}; }
    std::string arena(const std::string &off, bool per_token) const override
    {
        if (per_token) internal_error("codegen: a graph has no per-token memory");
        return "g->act + " + off;
    }
    std::string carry() const override { return "g->carry"; }
    std::string input(const Tensor &t) const override
    {
        int i = index_of(p_.inputs, t.name);
        if (i < 0) internal_error("codegen: '" + t.name + "' is not a graph input");
        return fmt::format("((const {} *)g->{}[{}])", c_type(t.dtype), gcu_ ? "dev_in" : "in", i);
    }
    std::string output(const Tensor &t) const override
    {
        int i = index_of(p_.outputs, t.name);
        if (i < 0) internal_error("codegen: '" + t.name + "' is not a graph output");
        return fmt::format("(({} *)g->{}[{}])", c_type(t.dtype), gcu_ ? "dev_out" : "out", i);
    }
    std::string weights(Section s) const override { return s == Section::Block ? "w->" : "g->w."; }
    std::string block_preamble() const override { return "const ck_layer_weights *w = &g->w.layers[layer];"; }
    std::string tracer() const override { return "g->trace"; }
    std::string rope_table(const Node &n) override
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
    default: internal_error(std::string("codegen: no ck_graph dtype for ") + dtype_name(t));
    }
}

const Tensor &io_tensor(const Program &p, const std::string &name)
{
    for (Section s : kSections)
        if (p.section(s).has_tensor(name)) return p.section(s).tensor(name);
    internal_error("codegen: no tensor '" + name + "'");
}

std::string io_c(const Program &p)
{
    CWriter w;
    auto table = [&](const std::string &what, const std::vector<std::string> &tensors,
                     const std::vector<std::string> &names) {
        std::string up = upper(what);
        std::vector<std::string> n, d, r, sh;
        for (size_t i = 0; i < tensors.size(); i++) {
            const Tensor &t = io_tensor(p, tensors[i]);
            n.push_back(c_string(names[i]));
            d.push_back(dtype_enum(t.dtype));
            r.push_back(std::to_string(t.shape.size()));
            w.line(fmt::format("static const int64_t CK_{}_SHAPE_{}[] = {}; /* {} {} {} */", up, i, c_shape(t.shape),
                               what, comment_safe(names[i]), dtype_name(t.dtype)));
            sh.push_back(fmt::format("CK_{}_SHAPE_{}", up, i));
        }
        auto list = [](std::vector<std::string> v, const std::string &dflt) {
            return "{" + (v.empty() ? dflt : join(v, ", ")) + "}";
        };
        w.line(fmt::format("#define CK_N_{}S {}", up, tensors.size()));
        w.line(fmt::format("static const char *const CK_{}_NAMES[] = {};", up, list(n, "NULL")));
        w.line(fmt::format("static const int CK_{}_DTYPES[] = {};", up, list(d, "0")));
        w.line(fmt::format("static const int CK_{}_RANKS[] = {};", up, list(r, "0")));
        w.line(fmt::format("static const int64_t *const CK_{}_SHAPES[] = {};", up, list(sh, "NULL")));
    };
    table("input", p.inputs, p.inputs);
    w.line();
    table("output", p.outputs, p.output_names);
    return w.str();
}

}  // namespace

std::string graph_weights_path(const std::string &c_path)
{
    std::string base = ends_with(c_path, ".c") ? c_path.substr(0, c_path.size() - 2) : c_path;
    return base + ".weights.safetensors";
}

// The template's target slots: host memory and direct calls (cpu), or device buffers, uploads, the stream,
// and the copies in and out around the launches (gcu). Generated gcu code reaches device memory only
// through gcu.h calls and launched kernels.
void target_slots(std::map<std::string, std::string> &slots, const Program &p, const WeightTable &wt,
                  const GraphTarget &target)
{
    if (!target.device()) {
        slots["TARGET_INCLUDES"] = slots["TARGET_FIELDS"] = slots["TARGET_CODE"] = slots["UPLOAD"] = "";
        slots["ALLOC"] =
            "    g->act = (unsigned char *)malloc(CK_ACT_FIXED > 0 ? CK_ACT_FIXED : 1);\n"
            "    g->carry = (float *)malloc(sizeof(float) * (CK_CARRY_ELEMS > 0 ? CK_CARRY_ELEMS : 1));\n"
            "    if (!g->act || !g->carry) {\n"
            "        ck_fail(CK_ENOMEM, \"ck_graph_init: out of memory for the %ld-byte activation arena\", (long)CK_ACT_FIXED);\n"
            "        ck_graph_free(g);\n"
            "        return NULL;\n"
            "    }\n";
        slots["FREE"] = "    free(g->act);\n    free(g->carry);\n";
        slots["RUN"] = "    rc = ckg_header(g, 0);\n"
                       "    for (layer = 0; rc == CK_OK && layer < CK_N_LAYERS; layer++) rc = ckg_block(g, layer);\n"
                       "    if (rc == CK_OK) rc = ckg_footer(g, 0);\n";
        return;
    }
    size_t n_consts = wt.inline_consts.size();
    slots["TARGET_INCLUDES"] =
        "#include \"gcu.h\"\n\n"
        "/* a failed gcu call returns CK_EDEVICE from the calling function */\n"
        "#define CK_GCU(call)                                                                              \\\n"
        "    do {                                                                                          \\\n"
        "        gcu_error ck_e_ = (call);                                                                 \\\n"
        "        if (ck_e_ != GCU_SUCCESS) return ck_fail(CK_EDEVICE, \"%s: %s\", #call, gcu_last_error_message()); \\\n"
        "    } while (0)\n";
    slots["TARGET_FIELDS"] = fmt::format(
        "    /* the gcu device: every buffer below, and act, carry and the weights, are device memory */\n"
        "    gcu_stream stream;        /* the kernels and copies of a run, in order */\n"
        "    void *dev_in[CK_N_INPUTS > 0 ? CK_N_INPUTS : 1];     /* the inputs, copied in per run */\n"
        "    void *dev_out[CK_N_OUTPUTS > 0 ? CK_N_OUTPUTS : 1];  /* the outputs, copied out per run */\n"
        "    void *dev_const[{}];      /* the inline constants, uploaded at init */\n"
        "    void *dev_weights[CK_N_GLOBAL_WEIGHTS + CK_N_LAYERS * CK_N_LAYER_WEIGHTS + 1]; /* uploaded at init */\n"
        "    int n_dev_weights;\n"
        "    int *dev_status;          /* the number of a failed run-time check (CK_DEVICE_CHECKS) */\n",
        std::max<size_t>(n_consts, 1));

    CWriter c;
    c.line("/* ============================================================================");
    c.line(" * The gcu device: buffers, uploads, and the copies around a run (gcu.h)");
    c.line(" * ============================================================================ */");
    auto bytes = [&](const std::vector<std::string> &names) {
        std::vector<std::string> v;
        for (const auto &n : names) {
            const Tensor *t = nullptr;
            for (Section s : kSections)
                if (p.section(s).has_tensor(n)) t = &p.section(s).tensor(n);
            if (!t) internal_error("codegen: no tensor '" + n + "'");
            v.push_back(std::to_string(shape_numel_fixed(t->shape) * dtype_size(t->dtype)));
        }
        if (v.empty()) v.push_back("0");
        return join(v, ", ");
    };
    c.line(fmt::format("static const size_t CK_INPUT_BYTES[] = {{{}}};", bytes(p.inputs)));
    c.line(fmt::format("static const size_t CK_OUTPUT_BYTES[] = {{{}}};", bytes(p.outputs)));
    c.open("static const struct { int code; const char *message; } CK_DEVICE_CHECKS[] =");
    for (const auto &[code, msg] : target.device_checks) c.line(fmt::format("{{{}, {}}},", code, c_string(msg)));
    if (target.device_checks.empty()) c.line("{CK_OK, \"\"} /* none */");
    c.close("};");
    c.line();
    c.line("/* The device buffers of a new handle; the inline constants go up once. */");
    c.line("static int ck_gcu_alloc(ck_graph *g)");
    c.line("{");
    c.indent();
    c.line("int i;");
    c.line("CK_GCU(gcu_stream_create(&g->stream));");
    c.line("CK_GCU(gcu_malloc((void **)&g->act, CK_ACT_FIXED > 0 ? CK_ACT_FIXED : 1));");
    c.line("CK_GCU(gcu_malloc((void **)&g->carry, sizeof(float) * (CK_CARRY_ELEMS > 0 ? CK_CARRY_ELEMS : 1)));");
    c.line("CK_GCU(gcu_malloc((void **)&g->dev_status, sizeof(int)));");
    c.line("for (i = 0; i < CK_N_INPUTS; i++) CK_GCU(gcu_malloc(&g->dev_in[i], CK_INPUT_BYTES[i]));");
    c.line("for (i = 0; i < CK_N_OUTPUTS; i++) CK_GCU(gcu_malloc(&g->dev_out[i], CK_OUTPUT_BYTES[i]));");
    for (size_t k = 0; k < n_consts; k++) {
        std::string arr = "CK_" + upper(wt.inline_consts[k].field);
        c.line(fmt::format("CK_GCU(gcu_malloc(&g->dev_const[{0}], sizeof {1}));", k, arr));
        c.line(fmt::format("CK_GCU(gcu_memcpy(g->dev_const[{0}], {1}, sizeof {1}, GCU_MEMCPY_HOST_TO_DEVICE));", k, arr));
    }
    c.line("(void)i;");
    c.line("return CK_OK;");
    c.dedent();
    c.line("}");
    c.line();
    c.line("/* One loaded weight (host, possibly mapped) replaced by its device copy. */");
    c.line("static int ck_gcu_upload(ck_graph *g, const ck_weight_spec *s, const float **field)");
    c.line("{");
    c.indent();
    c.line("size_t n = 0, part_n;");
    c.line("int k, d;");
    c.line("void *dev;");
    c.open("for (k = 0; k < s->n_parts; k++)");
    c.line("for (part_n = 1, d = 0; d < s->ndim; d++) part_n *= (size_t)s->shape[k][d];");
    c.line("n += part_n;");
    c.close();
    c.line("CK_GCU(gcu_malloc(&dev, n * sizeof(float)));");
    c.line("g->dev_weights[g->n_dev_weights++] = dev;");
    c.line("CK_GCU(gcu_memcpy(dev, *field, n * sizeof(float), GCU_MEMCPY_HOST_TO_DEVICE));");
    c.line("*field = (const float *)dev;");
    c.line("return CK_OK;");
    c.dedent();
    c.line("}");
    c.line();
    c.line("static int ck_gcu_upload_weights(ck_graph *g)");
    c.line("{");
    c.indent();
    c.line("size_t i;");
    c.line("int layer, rc;");
    c.line("for (i = 0; i < CK_N_GLOBAL_WEIGHTS; i++)");
    c.line("    if ((rc = ck_gcu_upload(g, &CK_GLOBAL_WEIGHTS[i], (const float **)((char *)&g->w + CK_GLOBAL_WEIGHTS[i].field)))) return rc;");
    c.line("for (layer = 0; layer < CK_N_LAYERS; layer++)");
    c.line("    for (i = 0; i < CK_N_LAYER_WEIGHTS; i++)");
    c.line("        if ((rc = ck_gcu_upload(g, &CK_LAYER_WEIGHTS[i],");
    c.line("                                (const float **)((char *)&g->w.layers[layer] + CK_LAYER_WEIGHTS[i].field))))");
    c.line("            return rc;");
    c.line("return CK_OK;");
    c.dedent();
    c.line("}");
    c.line();
    c.line("static void ck_gcu_release(ck_graph *g)");
    c.line("{");
    c.indent();
    c.line("int i;");
    c.line("if (g->stream) gcu_stream_destroy(g->stream); /* waits for its work */");
    c.line("gcu_free(g->act);");
    c.line("gcu_free(g->carry);");
    c.line("gcu_free(g->dev_status);");
    c.line("for (i = 0; i < CK_N_INPUTS; i++) gcu_free(g->dev_in[i]);");
    c.line("for (i = 0; i < CK_N_OUTPUTS; i++) gcu_free(g->dev_out[i]);");
    c.line(fmt::format("for (i = 0; i < {}; i++) gcu_free(g->dev_const[i]);", n_consts));
    c.line("for (i = 0; i < g->n_dev_weights; i++) gcu_free(g->dev_weights[i]);");
    c.dedent();
    c.line("}");
    c.line();
    c.line("/* The host gcu device runs kernels on the stream's worker thread: its OpenMP team gets the handle's");
    c.line(" * thread count, as the calling thread's does for --target cpu (the same numbers, bit for bit). */");
    c.line("static void ck_gcu_set_threads(void *n_threads) { ck_threads_use(*(const int *)n_threads); }");
    c.line();
    c.line("/* Queues the inputs' copies to the device and clears the check status. */");
    c.line("static int ck_gcu_inputs(ck_graph *g)");
    c.line("{");
    c.indent();
    c.line("int i;");
    c.line("CK_GCU(gcu_launch(ck_gcu_set_threads, &g->n_threads, sizeof g->n_threads, g->stream));");
    c.line("for (i = 0; i < CK_N_INPUTS; i++)");
    c.line("    CK_GCU(gcu_memcpy_async(g->dev_in[i], g->in[i], CK_INPUT_BYTES[i], GCU_MEMCPY_HOST_TO_DEVICE, g->stream));");
    c.line("CK_GCU(gcu_memset_async(g->dev_status, 0, sizeof(int), g->stream));");
    c.line("return CK_OK;");
    c.dedent();
    c.line("}");
    c.line();
    c.line("/* Queues the outputs' copies back, waits for the run, and reports a failed check. */");
    c.line("static int ck_gcu_outputs(ck_graph *g)");
    c.line("{");
    c.indent();
    c.line("int i, status = 0;");
    c.line("for (i = 0; i < CK_N_OUTPUTS; i++)");
    c.line("    CK_GCU(gcu_memcpy_async(g->out[i], g->dev_out[i], CK_OUTPUT_BYTES[i], GCU_MEMCPY_DEVICE_TO_HOST, g->stream));");
    c.line("CK_GCU(gcu_memcpy_async(&status, g->dev_status, sizeof status, GCU_MEMCPY_DEVICE_TO_HOST, g->stream));");
    c.line("CK_GCU(gcu_stream_synchronize(g->stream));");
    c.line("if (status > 0) return ck_fail(CK_DEVICE_CHECKS[status - 1].code, \"%s\", CK_DEVICE_CHECKS[status - 1].message);");
    c.line("return CK_OK;");
    c.dedent();
    c.line("}");
    slots["TARGET_CODE"] = c.str();
    slots["ALLOC"] = "    if (ck_gcu_alloc(g) != CK_OK) {\n        ck_graph_free(g);\n        return NULL;\n    }\n";
    slots["UPLOAD"] = "    if ((rc = ck_gcu_upload_weights(g)) != CK_OK) {\n        ck_graph_free(g);\n        return NULL;\n    }\n";
    slots["FREE"] = "    ck_gcu_release(g);\n";
    slots["RUN"] = "    rc = ck_gcu_inputs(g);\n"
                   "    if (rc == CK_OK) rc = ckg_header(g, 0);\n"
                   "    for (layer = 0; rc == CK_OK && layer < CK_N_LAYERS; layer++) rc = ckg_block(g, layer);\n"
                   "    if (rc == CK_OK) rc = ckg_footer(g, 0);\n"
                   "    if (rc == CK_OK) rc = ck_gcu_outputs(g);\n";
}

GraphCodegenResult generate_graph_c(Program &p, const Plan &plan, const CodegenOptions &o, const std::string &template_text)
{
    WeightTable wt;
    wt.collect(p);
    for (const auto &f : wt.inline_consts)
        if (!constant_value(p, *f.t)) internal_error("codegen: no value for constant '" + f.t->name + "'");
    bool gcu = o.target == "gcu";
    GraphTarget target(p, wt, gcu);

    std::string sections;
    for (Section s : kSections) sections += section_c(p, s, plan.section(s), wt, target) + (s != Section::Footer ? "\n" : "");

    int64_t n_params = 0, nodes = 0;
    for (Section s : kSections) {
        nodes += static_cast<int64_t>(p.section(s).nodes().size());
        for (const auto &[name, t] : p.section(s).tensors())
            if (t.storage == Storage::Weight) n_params += shape_numel_fixed(t.shape) * (s == Section::Block ? p.info.n_layers : 1);
    }
    std::string weights_name = graph_weights_path(o.output_name);
    std::string build = "cc -O3 -fPIC -shared -I \"$(ckc --include-dir)\" " + o.output_name + " $(cat " + o.output_name +
                        ".kernels) -lopenblas -lm -fopenmp -o libmodel.so";
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
    fm.line(" *");
    fm.line(" * Build a shared library (from any folder; the .kernels file holds absolute paths):");
    fm.line(" *   " + build);
    fm.line(" * and use it through ck_graph.h (in the same folder):");
    fm.line(" *   ck_graph *g = ck_graph_init(\"" + weights_name + "\");");
    fm.line(" *   ck_graph_run(g, inputs, outputs);   (contiguous buffers, in the order below)");
    fm.line(" */");

    CWriter cfg;
    cfg.line(fmt::format("#define CK_N_LAYERS {} /* times the block runs */", p.info.n_layers));
    cfg.line(fmt::format("#define CK_CARRY_ELEMS {} /* floats of the value passed from layer to layer */",
                         p.info.n_layers ? shape_numel_fixed(p.carry_shape) : 0));

    std::map<std::string, std::string> slots;
    slots["FRONTMATTER"] = fm.str();
    slots["IO"] = cfg.str() + "\n" + io_c(p);
    slots["WEIGHTS"] = weights_c(wt, "ck_") + "\n" + inline_constants_c(wt, p);
    slots["PLAN"] = plan_c(p, plan);
    slots["SECTIONS"] = sections;
    target_slots(slots, p, wt, target);

    GraphCodegenResult r;
    r.source = fill_template(template_text, slots, "templates/graph_model.c.in");
    std::set<std::string> always = {"kernels/threads.c", "kernels/cpu.c", "io/safetensors.c", "io/json.c"};
    if (gcu) always.insert("gcu/gcu_host.c");
    for (const auto &k : kernel_files(p, always))
        r.kernels.push_back(o.runtime_dir + "/" + k);
    if (!wt.global.empty() || !wt.layer.empty()) r.weights = graph_weights_bytes(p);
    r.weights_name = weights_name;
    return r;
}

}  // namespace ckc
