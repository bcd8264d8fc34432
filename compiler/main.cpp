// main.cpp — the ckc command line.
//
//   ckc compile INPUT -o model.c     compile to one C file + model.c.kernels
//                                    (+ model.weights.safetensors for a graph)
//   ckc inspect INPUT                the header/block/footer IR (--json, --plan, --weights)
//
// INPUT is a Hugging Face config.json (a decoder LLM) or a graph.json written
// by ckc.export (python/ckc/export.py) (an exported PyTorch module), told apart by its
// "schema" key.
//   ckc random-weights CONFIG -o DIR a deterministic random checkpoint for testing
//
// Exit codes: 0 ok, 1 invalid input, 2 usage, 3 I/O, 4 internal error.
#include <unistd.h>

#include <charconv>
#include <climits>
#include <fstream>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codegen/graph_codegen.h"
#include "codegen/llm_codegen.h"
#include "ck_quant.h"
#include "frontend/gguf/gguf_arch.h"
#include "frontend/gguf/gguf_frontend.h"
#include "frontend/graph/graph_json.h"
#include "frontend/hf/families.h"
#include "ir/printer.h"
#include "passes/pass.h"
#include "planner/planner.h"
#include "support/error.h"
#include "support/util.h"
#include "support/version.h"
#include "tools/gguf_quantize.h"
#include "tools/random_weights.h"
#include "tools/standalone.h"

using namespace ckc;

namespace {

// The folder holding runtime/ and templates/: $CKC_HOME, else found from the
// executable: the directory above it (build/ckc in a checkout, ckc/bin/ckc in
// the Python package) or PREFIX/share/ckc (bin/ckc after `cmake --install`),
// else the checkout it was built from.
std::string find_home()
{
    auto valid = [](const std::string &d) {
        return is_directory(d + "/runtime/include") && is_file(d + "/templates/llm_model.c.in");
    };
    if (const char *env = std::getenv("CKC_HOME")) {
        if (valid(env)) return absolute_path(env);
        io_error(std::string("CKC_HOME=") + env + " does not contain runtime/ and templates/");
    }
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = '\0';
        std::string exe(buf);
        std::string dir = exe.substr(0, exe.rfind('/'));
        std::string parent = dir.substr(0, dir.rfind('/'));
        if (valid(parent)) return absolute_path(parent);
        if (valid(parent + "/share/ckc")) return absolute_path(parent + "/share/ckc");
    }
#ifdef CKC_SOURCE_DIR
    if (valid(CKC_SOURCE_DIR)) return CKC_SOURCE_DIR;
#endif
    io_error("cannot find the ckc runtime/ and templates/ folders next to this executable; set CKC_HOME to the "
             "folder that holds them (a ckc checkout, the installed Python package, or PREFIX/share/ckc)");
}

template <class P>
std::vector<std::string> policy_names(const std::vector<NamedPolicy<P>> &t)
{
    std::vector<std::string> out;
    for (const auto &p : t) out.push_back(p.name);
    return out;
}

template <class P>
std::string policy_help(const std::vector<NamedPolicy<P>> &t)
{
    std::vector<std::string> out;
    for (const auto &p : t) out.push_back(std::string(p.name) + " (" + p.doc + ")");
    return join(out, ", ") + "; default " + t.front().name;
}

template <class P>
P policy_named(const std::vector<NamedPolicy<P>> &t, const std::string &name)
{
    for (const auto &p : t)
        if (name == p.name) return p.policy;
    throw Error(ErrorKind::Usage, "unknown planner policy '" + name + "'" + did_you_mean(name, policy_names(t)));
}

// The weight formats a model may be kept in (ck_quant.h's traits table), in table order: "f32, f16, ...".
std::vector<std::string> stored_formats()
{
    std::vector<std::string> out;
    for (int i = 0; const ck_qtype_traits *t = ck_qtype_traits_at(i); i++)
        if (t->stored) out.push_back(t->name);
    return out;
}

struct CommonOptions {
    std::string input;
    int64_t max_context = 0;
    std::vector<std::string> max_sizes;  // --max NAME=N (and --max-batch / --max-seq)
    int64_t max_batch = 0, max_seq = 0;
    std::vector<std::string> disable;
    std::string dump_after;
    std::string order = order_policies().front().name;
    std::string placement = placement_policies().front().name;
    bool no_inplace = false;
    bool no_fold_layers = false;
    bool train = false;  // compile only: plan for training (every activation kept)
    std::string weights;  // --weights: f32 (default) or a stored format
    bool allow_outside_paths = false;
};

void add_common(CLI::App *cmd, CommonOptions &o)
{
    cmd->add_option("INPUT", o.input,
                    "a Hugging Face config.json, a GGUF model file (its weight matrices are used as stored), or a "
                    "graph.json from ckc.export (python/ckc/export.py)")
        ->required();

    cmd->add_option("--max-context", o.max_context,
                    "LLM: cap the context length (positions, KV-cache capacity); default: max_position_embeddings")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--max", o.max_sizes,
                    "graph.json with symbolic sizes: lower the upper bound of NAME (one of its \"symbols\") to N "
                    "(repeatable, NAME=N): the memory plan and every buffer are sized for it, and a call beyond it is "
                    "refused (CK_EINVAL). E.g. a graph exported for seq <= 2048 compiled for a device that serves 256");
    cmd->add_option("--max-batch", o.max_batch, "graph.json: --max batch=N")->check(CLI::PositiveNumber);
    cmd->add_option("--max-seq", o.max_seq, "graph.json: --max seq=N")->check(CLI::PositiveNumber);
    cmd->add_option("--disable-pass", o.disable, "skip a pass (repeatable); see `ckc --list-passes`");
    cmd->add_option("--dump-after", o.dump_after, "print the IR to stderr after this pass");
    cmd->add_option("--order", o.order, "planner execution order: " + policy_help(order_policies()))
        ->check(CLI::IsMember(policy_names(order_policies())));
    cmd->add_option("--placement", o.placement, "planner placement: " + policy_help(placement_policies()))
        ->check(CLI::IsMember(policy_names(placement_policies())));
    cmd->add_flag("--no-inplace", o.no_inplace, "planner: never let an output reuse a dying input's memory");
    cmd->add_flag("--no-fold-layers", o.no_fold_layers,
                  "graph: keep repeated submodules (layers.N / h.N / blocks.N) unrolled (= --disable-pass fold_layers)");
    cmd->add_flag("--allow-outside-paths", o.allow_outside_paths,
                  "let a document name files outside its folder: the shards of a *.safetensors.index.json, the "
                  "\"weights\" of a graph.json. By default a name that is absolute, has a \"..\" component or "
                  "goes through a symlinked folder leading elsewhere is refused (the files come from strangers). "
                  "Same as the environment variable CK_WEIGHTS_ANY_PATH=1, which the generated model's loader reads");
}

struct Built {
    Program program;
    Plan plan;
    std::vector<std::string> passes;
    std::vector<PassStat> pass_stats;
};

// A frontend reading `path`: any JSON library exception that escapes its checks is still the document's fault
// (a value of an unexpected type somewhere) and is reported as an input error naming the file.
template <class F>
Program read_input(const std::string &path, F &&frontend)
{
    try {
        return frontend();
    } catch (const nlohmann::json::exception &e) {
        std::string what = e.what();
        size_t tag = what.find("] ");
        throw Error(ErrorKind::Input,
                    path + ": malformed document: " + (tag == std::string::npos ? what : what.substr(tag + 2)));
    }
}

Built build(const CommonOptions &o)
{
    Built b;
    if (o.allow_outside_paths) setenv("CK_WEIGHTS_ANY_PATH", "1", 1);  // (read by every checkpoint open)
    bool graph = is_graph_json(o.input);
    if (!graph && (!o.max_sizes.empty() || o.max_batch || o.max_seq))
        throw Error(ErrorKind::Usage, "--max / --max-batch / --max-seq apply to a graph.json with symbolic sizes (a "
                                      "language model's tokens per call are bounded by --max-context)");
    if (graph) {
        if (o.max_context) throw Error(ErrorKind::Usage, "--max-context applies to language models, not to a graph.json");
        if (!o.weights.empty() && o.weights != "f32")
            throw Error(ErrorKind::Usage, "--weights applies to language models, not to a graph.json");
        std::map<std::string, int64_t> max_sizes;
        for (const std::string &m : o.max_sizes) {
            size_t eq = m.find('=');
            int64_t n = 0;
            std::string name = m.substr(0, eq), value = eq == std::string::npos ? "" : m.substr(eq + 1);
            auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
            if (name.empty() || ec != std::errc() || end != value.data() + value.size() || n < 1)
                throw Error(ErrorKind::Usage, "--max " + m + ": expected NAME=N, a symbol of the graph and a size >= 1 "
                                              "(e.g. --max seq=256)");
            if (!max_sizes.emplace(name, n).second) throw Error(ErrorKind::Usage, "--max " + name + " given twice");
        }
        for (auto [name, n] : {std::pair<const char *, int64_t>{"batch", o.max_batch}, {"seq", o.max_seq}})
            if (n && !max_sizes.emplace(name, n).second)
                throw Error(ErrorKind::Usage, std::string("--max-") + name + " and --max " + name + "=N both given");
        b.program = read_input(o.input, [&] { return build_from_graph_json(o.input, max_sizes); });
    } else if (is_gguf(o.input)) {
        if (o.no_fold_layers) throw Error(ErrorKind::Usage, "--no-fold-layers applies to a graph.json");
        if (!o.weights.empty())
            throw Error(ErrorKind::Usage, "--weights applies to a config.json: a GGUF file's tensors are used in the "
                                          "formats it stores (requantize with `ckc quantize`)");
        HfOptions hf;
        hf.max_context = o.max_context;
        b.program = read_input(o.input, [&] { return build_from_gguf(o.input, hf); });
    } else {
        if (o.no_fold_layers) throw Error(ErrorKind::Usage, "--no-fold-layers applies to a graph.json");
        HfOptions hf;
        hf.max_context = o.max_context;
        b.program = read_input(o.input, [&] { return build_from_hf_config(o.input, hf); });
        if (!o.weights.empty() && o.weights != "f32") {
            b.program.info.stored_weights = true;
            b.program.info.weight_type = ck_qtype_from_name(o.weights.c_str());
        }
    }
    if (b.program.info.stored_weights && o.train)
        throw Error(ErrorKind::Usage, std::string("--train needs float32 weights (") +
                                          (is_gguf(o.input) ? "a GGUF input keeps its formats" : "drop --weights") +
                                          "); training updates every weight in float32");
    PipelineOptions po;
    po.disabled = {o.disable.begin(), o.disable.end()};
    if (o.no_fold_layers) po.disabled.insert("fold_layers");
    po.dump_after = o.dump_after;
    po.dump = &std::cerr;
    po.stats = &b.pass_stats;
    b.passes = run_pipeline(b.program, po);
    PlanOptions plo;
    plo.order = policy_named(order_policies(), o.order);
    plo.placement = policy_named(placement_policies(), o.placement);
    plo.inplace = !o.no_inplace;
    if (o.train) {
        if (graph)
            throw Error(ErrorKind::Usage, "--train compiles language models (a config.json); exported graphs train "
                                          "through torch.compile(backend=\"gcu\") later");
        plo.keep_all = true;  // the backward reads every activation of its section
        plo.inplace = false;
        // dropout: training in transformers applies it, ckc does not (its step is model.eval()'s math)
        std::ifstream f(o.input);
        nlohmann::json cfg = nlohmann::json::parse(f, nullptr, false);
        std::vector<std::string> drops;
        if (cfg.is_object() && cfg.value("model_type", "") == "gpt2")  // GPT2Config's defaults
            for (const char *key : {"attn_pdrop", "embd_pdrop", "resid_pdrop"})
                if (!cfg.contains(key)) cfg[key] = 0.1;
        if (cfg.is_object())
            for (const auto &[key, v] : cfg.items())
                if ((key.find("dropout") != std::string::npos || key.find("pdrop") != std::string::npos) &&
                    v.is_number() && v.get<double>() > 0)
                    drops.push_back(fmt::format("{} {}", key, v.get<double>()));
        if (!drops.empty())
            b.program.info.notes.push_back("--train: " + o.input + " uses dropout (" + join(drops, ", ") +
                                           "); ckc trains without dropout (the forward is model.eval()'s)");
    }
    b.plan = plan_program(b.program, plo);
    for (const auto &note : b.program.info.notes) std::cerr << "ckc: note: " << note << "\n";
    return b;
}

nlohmann::json plan_json(const Plan &plan)
{
    nlohmann::json j;
    j["arena_bytes_per_token"] = plan.arena_per_token;
    j["arena_bytes_fixed"] = plan.arena_fixed;
    for (Section s : kSections) {
        if (s == Section::Block2 && plan.section(s).order.empty()) continue;
        const SectionPlan &sp = plan.section(s);
        nlohmann::json allocs = nlohmann::json::array(), regions = nlohmann::json::object();
        for (const auto &[name, a] : sp.alloc)
            allocs.push_back({{"root", a.root}, {"offset", a.offset}, {"size", a.size}, {"per_token", a.per_token},
                              {"birth", a.birth}, {"death", a.death}});
        for (const auto &[t, r] : sp.region) regions[t] = {{"root", r.root}, {"offset", r.offset}, {"strided", r.strided}};
        j[Program::section_name(s)] = {{"order", sp.order},
                                       {"views", sp.views},
                                       {"allocations", allocs},
                                       {"regions", regions},
                                       {"arena_per_token", sp.per_token.arena},
                                       {"naive_per_token", sp.per_token.naive},
                                       {"lower_bound_per_token", sp.per_token.lower_bound},
                                       {"arena_fixed", sp.fixed.arena},
                                       {"naive_fixed", sp.fixed.naive},
                                       {"lower_bound_fixed", sp.fixed.lower_bound}};
    }
    return j;
}

std::string command_line(int argc, char **argv)
{
    std::vector<std::string> parts;
    for (int i = 0; i < argc; i++) {
        std::string a = argv[i];
        if (i == 0) a = "ckc";
        if (a.find_first_of(" \t'\"$") != std::string::npos) a = "'" + replace_all(a, "'", "'\\''") + "'";
        parts.push_back(a);
    }
    return join(parts, " ");
}

// ---- ckc compile ---------------------------------------------------------------------------
struct CompileArgs {
    CommonOptions common;
    std::string output;
    bool report = false;
    std::string target = "cpu";
    bool standalone = false;
    std::string embed;           // --embed-weights FILE ("" with the flag alone: the GGUF input)
    bool embed_given = false;
    bool static_memory = false;  // --static --max-tokens N [--kv K]
    int64_t max_tokens = 0;
    int64_t kv = -1;             // -1: N
};

// --embed-weights: files up to this size (its C text is ~4 bytes per byte; compilers take minutes past this)
constexpr int64_t kEmbedLimit = int64_t(32) << 20;

CLI::App *add_compile(CLI::App &app, CompileArgs &a)
{
    CLI::App *cmd = app.add_subcommand("compile", "compile INPUT to a C file (writes OUTPUT and OUTPUT.kernels)");
    add_common(cmd, a.common);
    cmd->add_option("-o,--output", a.output, "the C file to write, e.g. out/model.c")->required();
    cmd->add_option("--weights", a.common.weights,
                    "LLM from config.json: how the weight matrices are kept in memory. f32 (default: every weight "
                    "converted to float32 at load); " + join(stored_formats(), ", ") + ": the GEMM and embedding "
                    "matrices in that format (GGUF's blocks; converted at load when the checkpoint holds another; a "
                    "matrix whose rows are not whole blocks falls back as llama.cpp does, with a note). Norms and "
                    "biases stay float32")
        ->check(CLI::IsMember(stored_formats()));
    cmd->add_flag("--report", a.report,
                  "print node counts around each pass and the memory plan (arena vs naive sum vs max-live lower bound)");
    cmd->add_flag("--train", a.common.train,
                  "language models: also generate training (backward of every op, cross-entropy, AdamW; the "
                  "ck_model_enable_training ABI in ck_model.h). The forward then keeps every activation of a section "
                  "(no in-place reuse); --report adds saved activations, the gradient arena and optimizer state");
    cmd->add_option("--target", a.target,
                    "cpu (default): kernels run on the calling thread's OpenMP pool; gcu: on the gcu device "
                    "(runtime/include/gcu.h; the host implementation runs them on a stream's worker thread): the "
                    "weights and activations live in device memory, only inputs and outputs are copied. Both give "
                    "the same numbers, bit for bit, at the same thread count")
        ->check(CLI::IsMember({"cpu", "gcu"}));
    cmd->add_flag("--standalone", a.standalone,
                  "write ONE file: the runtime sources the model calls (kernels, loaders, tokenizer; with --target gcu "
                  "the host shim) pasted in, no OUTPUT.kernels. It builds with a C99 compiler and libm alone, for any "
                  "CPU (x86-64, ARM64, wasm32-wasi, ...): its GEMMs are ckc's own unless -DCK_BLAS=1 -lopenblas, its "
                  "kernels use threads with -fopenmp");
    cmd->add_option("--embed-weights", a.embed,
                    "language models: compile the weights FILE (a .safetensors or .gguf of at most 32 MiB; alone, with a "
                    "GGUF INPUT: that file) into OUTPUT as const bytes, so that ck_model_init(NULL) (the executable: "
                    "@embedded as WEIGHTS) runs with no file system; a GGUF brings its tokenizer")
        ->expected(0, 1);
    cmd->add_flag("--static", a.static_memory,
                  "language models: keep the model and every buffer (the activations of --max-tokens tokens, the KV "
                  "cache, the kernels' workspace, the RoPE tables) in ONE block whose size, CK_MODEL_MEMORY_BYTES, is "
                  "a constant of OUTPUT: a static array (ck_model_init) or the caller's (ck_model_init_with_memory). "
                  "Nothing is allocated after init; a call beyond the bounds fails with CK_ERANGE");
    cmd->add_option("--max-tokens", a.max_tokens,
                    "with --static: the most tokens one call takes (longer prompts are fed in parts by ck_generate)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--kv", a.kv,
                    "with --static: the positions the KV cache holds (default: --max-tokens; 0: no KV cache, so no "
                    "decoding). The model's context becomes the larger of the two")
        ->check(CLI::NonNegativeNumber);
    cmd->footer("Then build it (OUTPUT.kernels lists the runtime sources it needs, by absolute path):\n"
                "  cc -O3 -fPIC -shared -I \"$(ckc --include-dir)\" OUTPUT $(cat OUTPUT.kernels) -lopenblas -lm "
                "-fopenmp -o libmodel.so\n"
                "or, with --standalone, anywhere:\n"
                "  cc -O3 -fPIC -shared OUTPUT -lm -o libmodel.so                 (add -fopenmp for threads)\n"
                "  aarch64-linux-gnu-gcc -O3 -DCK_MODEL_MAIN OUTPUT -lm -static -o model\n"
                "  clang --target=wasm32-wasi --sysroot=/usr -O3 -DCK_MODEL_MAIN OUTPUT -lm -o model.wasm");
    return cmd;
}

int run_compile(const CompileArgs &a, const std::string &command)
{
    std::string home = find_home();
    Built b = build(a.common);
    CodegenOptions cg;
    cg.command_line = command;
    cg.passes = b.passes;
    cg.runtime_dir = home + "/runtime";
    cg.output_name = a.output.substr(a.output.rfind('/') == std::string::npos ? 0 : a.output.rfind('/') + 1);
    cg.templates_dir = home + "/templates";
    cg.target = a.target;
    cg.train = a.common.train;
    cg.standalone = a.standalone;
    if (a.embed_given) {
        std::string path = a.embed.empty() ? a.common.input : a.embed;
        if (b.program.info.kind == ModelKind::Graph)
            input_error("--embed-weights takes a language model's weights (an exported graph's come from its own "
                        "model.weights.safetensors)");
        if (is_directory(path)) path += "/model.safetensors";
        if (!ends_with(path, ".gguf") && !ends_with(path, ".safetensors"))
            input_error("--embed-weights " + path + ": not a .safetensors or .gguf file (a sharded model cannot be "
                        "compiled in)");
        std::ifstream f(path, std::ios::binary | std::ios::ate);
        if (!f) io_error(path + ": cannot open");
        const int64_t size = static_cast<int64_t>(f.tellg());
        if (size > kEmbedLimit)
            input_error(fmt::format("--embed-weights {}: {} is more than the {} a C file sensibly holds; keep the "
                                    "weights in a file (ck_model_init(path))",
                                    path, human_bytes(static_cast<double>(size)), human_bytes(kEmbedLimit)));
        cg.embed_bytes = read_file(path);
        cg.embed_name = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
    }
    if (a.static_memory || a.max_tokens || a.kv >= 0) {
        if (!a.static_memory) throw Error(ErrorKind::Usage, "--max-tokens and --kv size a --static build: add --static");
        if (!a.max_tokens)
            throw Error(ErrorKind::Usage, "--static needs --max-tokens N: the most tokens one call takes (its buffers "
                                          "are sized for them at compile time)");
        if (b.program.info.kind == ModelKind::Graph)
            throw Error(ErrorKind::Usage, "--static applies to language models (a graph's arena is already one "
                                          "planned block, allocated at init; a run allocates nothing)");
        const int64_t kv = a.kv < 0 ? a.max_tokens : a.kv, positions = std::max(a.max_tokens, kv);
        if (kv > 0 && kv < a.max_tokens)
            throw Error(ErrorKind::Usage, fmt::format("--kv {} is below --max-tokens {}: a call's tokens go into the KV "
                                                      "cache (give --kv at least {}, or 0 for none)",
                                                      kv, a.max_tokens, a.max_tokens));
        if (positions > b.program.info.context_length)
            input_error(fmt::format("--static: --max-tokens {} / --kv {} is more than {}'s context of {} positions",
                                    a.max_tokens, kv, a.common.input, b.program.info.context_length));
        b.program.info.context_length = positions;  // the RoPE tables and every bound follow
        cg.static_tokens = a.max_tokens;
        cg.static_kv = kv;
    }
    std::string training_report;
    AtomicFiles files;  // model.c, model.c.kernels (and a graph's weights) appear together or not at all
    // model.c and its runtime sources: listed by absolute path in the manifest, or pasted in (--standalone)
    auto add_model = [&](const CodegenResult &r) {
        std::set<std::string> sources = runtime_closure(cg.runtime_dir, {r.kernels.begin(), r.kernels.end()});
        if (a.standalone) {
            files.add(a.output, amalgamate(cg.runtime_dir, sources, r.source));
            return;
        }
        files.add(a.output, r.source);
        std::string manifest;
        for (const auto &k : sources) manifest += cg.runtime_dir + "/" + k + "\n";
        files.add(a.output + ".kernels", manifest);
    };
    if (b.program.info.kind == ModelKind::Graph) {
        GraphCodegenResult r = generate_graph_c(b.program, b.plan, cg);
        add_model(r);
        if (!r.weights.empty()) files.add(graph_weights_path(a.output), r.weights);
    } else {
        CodegenResult r = generate_llm_c(b.program, b.plan, cg);
        for (const auto &note : r.notes) std::cerr << "ckc: note: " << note << "\n";
        add_model(r);
        training_report = r.training_report;
    }
    files.commit();
    if (a.report) {
        std::cout << "passes (nodes in all sections, before -> after):\n";
        for (const auto &st : b.pass_stats)
            std::cout << fmt::format("  {:<24} {:>6} -> {:<6}{}\n", st.name, st.nodes_before, st.nodes_after,
                                     st.nodes_after == st.nodes_before ? "" : "  *");
        print_plan_report(b.program, b.plan, b.program.info.context_length, std::cout);
        std::cout << training_report;
    }
    if (a.standalone)
        std::cerr << fmt::format("ckc: wrote {}, standalone ({})\n", a.output, b.program.info.summary);
    else
        std::cerr << fmt::format("ckc: wrote {} and {}.kernels ({})\n", a.output, a.output, b.program.info.summary);
    return 0;
}

// ---- ckc inspect ---------------------------------------------------------------------------
struct InspectArgs {
    CommonOptions common;
    bool json = false, plan = false, weights = false;
};

CLI::App *add_inspect(CLI::App &app, InspectArgs &a)
{
    CLI::App *cmd = app.add_subcommand("inspect", "print the header/block/footer IR after the passes");
    add_common(cmd, a.common);
    cmd->add_flag("--json", a.json, "write the machine-readable map (IR + plan) as JSON");
    cmd->add_flag("--plan", a.plan, "also print the memory plan");
    cmd->add_flag("--weights", a.weights, "list the checkpoint tensors the model reads (name and shape)");
    return cmd;
}

int run_inspect(const InspectArgs &a)
{
    Built b = build(a.common);
    if (a.json) {
        nlohmann::json j = program_to_json(b.program);
        j["passes"] = b.passes;
        j["plan"] = plan_json(b.plan);
        std::cout << j.dump(2) << "\n";
    } else if (a.weights) {
        for (const auto &[name, shape] : required_tensors(b.program)) std::cout << name << " " << shape_str(shape) << "\n";
    } else {
        std::cout << "; passes: " << (b.passes.empty() ? "(none)" : join(b.passes, ", ")) << "\n";
        print_program(b.program, std::cout);
        if (a.plan) print_plan_report(b.program, b.plan, b.program.info.context_length, std::cout);
    }
    return 0;
}

// ---- ckc random-weights --------------------------------------------------------------------
struct RandomWeightsArgs {
    std::string config, out, dtype = "f32";
    uint64_t seed = 0, shard = 0;
    double std = 0.02;
};

CLI::App *add_random_weights(CLI::App &app, RandomWeightsArgs &a)
{
    CLI::App *cmd = app.add_subcommand("random-weights", "write a deterministic random checkpoint for CONFIG");
    cmd->add_option("CONFIG", a.config, "a Hugging Face config.json")->required();
    cmd->add_option("-o,--output", a.out, "folder to write model.safetensors (and config.json) into")->required();
    cmd->add_option("--seed", a.seed, "random seed (default 0)");
    cmd->add_option("--dtype", a.dtype, "f32, f16 or bf16")->check(CLI::IsMember({"f32", "f16", "bf16"}));
    cmd->add_option("--std", a.std, "standard deviation of matrix entries (default 0.02)");
    cmd->add_option("--shard-size", a.shard, "split into shards of at most this many bytes + an index.json");
    return cmd;
}

int run_random_weights(const RandomWeightsArgs &a)
{
    Program p = build_from_hf_config(a.config);
    RandomWeightOptions o;
    o.seed = a.seed;
    o.std = a.std;
    o.shard_bytes = a.shard;
    o.dtype = a.dtype == "bf16" ? DType::BF16 : a.dtype == "f16" ? DType::F16 : DType::F32;
    std::cerr << fmt::format("ckc: generating {} random weights (seed {})...\n", a.dtype, a.seed);
    auto tensors = random_tensors(p, o);
    write_checkpoint(a.out, tensors, o.shard_bytes);
    if (absolute_path(a.config) != absolute_path(a.out + "/config.json")) {
        AtomicFiles cfg;
        cfg.add(a.out + "/config.json", read_file(a.config));
        cfg.commit();
    }
    std::cerr << fmt::format("ckc: wrote {} tensors to {}\n", tensors.size(), a.out);
    return 0;
}

// ---- ckc quantize ---------------------------------------------------------------------------
struct QuantizeArgs {
    std::string input, out, type = "q8_0";
};

CLI::App *add_quantize(CLI::App &app, QuantizeArgs &a)
{
    CLI::App *cmd = app.add_subcommand("quantize", "write a Hugging Face model as a GGUF file (llama.cpp loads it)");
    cmd->add_option("MODEL", a.input, "a Hugging Face folder (config.json + safetensors) or its config.json")->required();
    cmd->add_option("-o,--output", a.out, "the .gguf file to write")->required();
    cmd->add_option("--type", a.type,
                    "format of the weight matrices (default q8_0): " + join(stored_formats(), ", ") +
                        " (llama.cpp's reference quantizers, so the bytes are llama-quantize's; rows that are not whole "
                        "blocks fall back as llama-quantize does). Norms and biases are written in f32")
        ->check(CLI::IsMember(stored_formats()));
    cmd->footer("Then: ckc compile OUTPUT -o model.c (the matrices are used in place from the mapped file).\n"
                "The tokenizer beside the weights (tokenizer.json, tokenizer.model) goes in as tokenizer.ggml.*, with\n"
                "the chat template: llama.cpp and ckc then run the file on text. Without one: token ids only.");
    return cmd;
}

int run_quantize(const QuantizeArgs &a)
{
    QuantizeOptions o;
    o.type = a.type;
    o.progress = isatty(2) ? &std::cerr : nullptr;  // a line rewritten per tensor: only on a terminal
    o.progress_notes = &std::cerr;
    size_t n = quantize_to_gguf(a.input, a.out, o);
    std::cerr << fmt::format("ckc: wrote {} tensors to {} ({})\n", n, a.out, a.type);
    return 0;
}

}  // namespace

struct ListArgs {
    std::string what = "all";
    bool json = false;
};

CLI::App *add_list(CLI::App &app, ListArgs &a)
{
    CLI::App *cmd = app.add_subcommand(
        "list", "what this ckc supports, from its own tables: model families (with their GGUF architecture), "
                "weight formats, IR ops, passes");
    cmd->add_option("WHAT", a.what, "families, formats, ops, passes or all (default)")
        ->check(CLI::IsMember({"families", "formats", "ops", "passes", "all"}));
    cmd->add_flag("--json", a.json, "one JSON document (what the tests iterate)");
    return cmd;
}

// The op's kind of table row (the elementwise and reduction tables of ck_kernels.h), or "op".
std::string op_kind(Op op)
{
    if (unary_row(op)) return "unary";
    if (binary_row(op)) return "binary";
    if (reduce_row(op)) return "reduce";
    return "op";
}

int run_list(const ListArgs &a)
{
    nlohmann::json doc = nlohmann::json::object();
    std::ostringstream text;
    auto want = [&](const char *w) { return a.what == "all" || a.what == w; };
    if (want("families")) {
        doc["families"] = nlohmann::json::array();
        text << "families (Hugging Face model_type, GGUF architecture):\n";
        for (const Family &f : families()) {
            const GgufArch *g = gguf_arch_for_model_type(f.model_type);
            doc["families"].push_back({{"model_type", f.model_type}, {"gguf", g ? nlohmann::json(g->arch) : nullptr}});
            text << fmt::format("  {:<12} {}\n", f.model_type, g ? g->arch : "(no GGUF architecture)");
        }
        doc["multimodal"] = nlohmann::json::array();
        text << "multimodal models (model_type: ckc compiles the language model, of the family shown):\n";
        for (const auto &[type, text_type] : multimodal_model_types()) {
            doc["multimodal"].push_back({{"model_type", type}, {"language_model", text_type}});
            text << fmt::format("  {:<12} {}\n", type, text_type);
        }
    }
    if (want("formats")) {
        doc["formats"] = nlohmann::json::array();
        text << "weight formats (name, elements and bytes per block, llama.cpp file type):\n";
        for (int i = 0; const ck_qtype_traits *t = ck_qtype_traits_at(i); i++) {
            if (!t->stored) continue;
            doc["formats"].push_back({{"name", t->name}, {"type", t->type}, {"block", t->block},
                                      {"block_bytes", t->block_bytes}, {"gguf_file_type", t->gguf_file_type},
                                      {"row_fallback", t->row_fallback < 0 ? "" : ck_qtype_name(t->row_fallback)}});
            text << fmt::format("  {:<6} {:>3} {:>4} {:>3}\n", t->name, t->block, t->block_bytes, t->gguf_file_type);
        }
    }
    if (want("ops")) {
        doc["ops"] = nlohmann::json::array();
        text << "IR ops (name, table, what makes them):\n";
        for (Op op : all_ops()) {
            const OpDef &d = op_def(op);
            doc["ops"].push_back({{"name", d.name}, {"kind", op_kind(op)}, {"made_by", made_by_name(d.made_by)},
                                  {"fold_only", d.fold_only}});
            text << fmt::format("  {:<14} {:<7} {}{}\n", d.name, op_kind(op), made_by_name(d.made_by),
                                d.fold_only ? " (fold-only)" : "");
        }
    }
    if (want("passes")) {
        doc["passes"] = nlohmann::json::array();
        text << "passes, in pipeline order:\n";
        for (const auto &p : default_pipeline()) {
            doc["passes"].push_back({{"name", p.name}, {"doc", p.doc}});
            text << fmt::format("  {:<24} {}\n", p.name, p.doc);
        }
    }
    std::cout << (a.json ? doc.dump(1) + "\n" : text.str());
    return 0;
}

int main(int argc, char **argv)
{
    CLI::App app{"ckc " CKC_VERSION " — compile a model to one standalone C file.\n"
                 "Exit codes: 0 ok, 1 invalid input, 2 usage, 3 I/O, 4 internal error."};
    app.require_subcommand(0, 1);
    bool list_passes = false, version = false, include_dir = false;
    app.add_flag("--list-passes", list_passes, "list the optimization passes, in pipeline order");
    app.add_flag("--version", version, "print the version");
    app.add_flag("--include-dir", include_dir,
                 "print the folder of the runtime headers, for cc -I \"$(ckc --include-dir)\"");
    CompileArgs compile_args;
    InspectArgs inspect_args;
    RandomWeightsArgs rw_args;
    CLI::App *compile = add_compile(app, compile_args);
    CLI::App *inspect = add_inspect(app, inspect_args);
    CLI::App *rw = add_random_weights(app, rw_args);
    QuantizeArgs q_args;
    CLI::App *quantize = add_quantize(app, q_args);
    ListArgs list_args;
    CLI::App *list = add_list(app, list_args);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : static_cast<int>(ErrorKind::Usage);
    }

    try {
        if (version) {
            std::cout << "ckc " CKC_VERSION "\n";
            return 0;
        }
        if (include_dir) {
            std::cout << find_home() << "/runtime/include\n";
            return 0;
        }
        if (list_passes) {
            for (const auto &p : default_pipeline()) std::cout << fmt::format("{:<24} {}\n", p.name, p.doc);
            return 0;
        }
        if (*compile) {
            compile_args.embed_given = compile->count("--embed-weights") > 0;
            return run_compile(compile_args, command_line(argc, argv));
        }
        if (*inspect) return run_inspect(inspect_args);
        if (*rw) return run_random_weights(rw_args);
        if (*quantize) return run_quantize(q_args);
        if (*list) return run_list(list_args);
        std::cout << app.help();
        return static_cast<int>(ErrorKind::Usage);
    } catch (const Error &e) {
        std::cerr << (e.kind() == ErrorKind::Internal ? "ckc: internal error: " : "ckc: error: ") << e.what() << "\n";
        return e.exit_code();
    } catch (const std::exception &e) {
        std::cerr << "ckc: internal error: " << e.what() << "\n";
        return static_cast<int>(ErrorKind::Internal);
    }
}
