#include <ostream>

#include "ir/printer.h"
#include "passes/pass.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

const std::vector<Pass> &default_pipeline()
{
    // Order matters: reshapes go first so patterns see through them; BLAS
    // absorption runs before constant folding (folding would materialize the
    // transposes it absorbs); the causal mask is recognized once folding has
    // made it a constant; DAG fusion (GELU, hand softmax) before the chain
    // patterns that consume SOFTMAX; the GEMM + ADD fusion last, for what the
    // patterns left; elementwise fusion after dead code is gone (true reader
    // counts), taking what no pattern did; layers fold once every layer has
    // reached its final form.
    static const std::vector<Pass> passes = {
        {"eliminate_reshapes", "drop identity reshapes/expands, collapse reshape chains, run GEMMs on un-flattened batches",
         [](Graph &g, Program &) { return eliminate_reshapes(g); }},
        {"absorb_blas", "transposes into transpose_b, constant B pre-transposed, scalar MUL/DIV into alpha", absorb_blas},
        {"constant_fold", "evaluate nodes whose inputs are all constants (fold-only ops must vanish here)", constant_fold},
        {"absorb_causal_mask", "a constant causal mask (bool lower-triangular or float -inf) -> CAUSAL_MASK",
         absorb_causal_mask},
        {"fuse_dags", "multi-path subgraphs -> one op: tanh-GELU, hand-written softmax",
         [](Graph &g, Program &) { return fuse_dags(g); }},
        {"fuse_patterns", "chains with sole consumers -> ATTENTION (causal or not), BIAS_RELU",
         [](Graph &g, Program &) { return fuse_patterns(g); }},
        {"fuse_matmul_add", "fold a bias or residual ADD into the GEMM that feeds it (sgemm beta = 1)",
         [](Graph &g, Program &) { return fuse_matmul_add(g); }},
        {"fuse_parallel_linears", "one GEMM over concatenated weights for projections of the same input (QKV, gate|up)",
         [](Graph &g, Program &p) { return fuse_parallel_linears(g, p); }},
        {"dce", "remove nodes and weights nothing reads", [](Graph &g, Program &) { return eliminate_dead_code(g); }},
        {"fuse_elementwise", "exported graphs: connected elementwise ops -> one EW program (no intermediates in memory)",
         fuse_elementwise},
        {"fold_layers", "exported graphs: repeated submodules (layers.N, h.N, blocks.N) -> one block run N times",
         nullptr, [](Program &p) { return p.info.kind == ModelKind::Graph && fold_layers(p) > 0; }},
    };
    return passes;
}

const Pass *find_pass(const std::string &name)
{
    for (const auto &p : default_pipeline())
        if (name == p.name) return &p;
    return nullptr;
}

std::vector<std::string> run_pipeline(Program &prog, const PipelineOptions &opts)
{
    std::vector<std::string> known;
    for (const auto &p : default_pipeline()) known.push_back(p.name);
    for (const auto &d : opts.disabled)
        if (!find_pass(d))
            throw Error(ErrorKind::Usage,
                        "unknown pass '" + d + "'" + did_you_mean(d, known) + "; passes: " + join(known, ", "));
    if (!opts.dump_after.empty() && !find_pass(opts.dump_after))
        throw Error(ErrorKind::Usage, "unknown pass '" + opts.dump_after + "'" + did_you_mean(opts.dump_after, known) +
                                          "; passes: " + join(known, ", "));

    auto node_count = [&prog] {
        size_t n = 0;
        for (Section s : prog.sections()) n += prog.section(s).nodes().size();
        return n;
    };
    std::vector<std::string> ran;
    for (const auto &pass : default_pipeline()) {
        if (opts.disabled.count(pass.name)) continue;
        size_t before = node_count();
        bool program_changed = pass.run_program && pass.run_program(prog);
        for (Section s : prog.sections()) {
            bool changed = program_changed || (!pass.run_program && pass.run(prog.section(s), prog));
            // the invariants after every pass that changed a section (each verify walks the whole graph: after
            // the passes that did nothing it would only repeat the last one)
            if (changed) prog.section(s).verify(std::string("after pass ") + pass.name + ", " + Program::section_name(s));
        }
        ran.push_back(pass.name);
        if (opts.stats) opts.stats->push_back({pass.name, before, node_count()});
        if (opts.dump && opts.dump_after == pass.name) {
            *opts.dump << "; IR after " << pass.name << "\n";
            print_program(prog, *opts.dump);
        }
    }
    for (Section s : prog.sections()) prog.section(s).verify(std::string("after the pipeline, ") + Program::section_name(s));
    return ran;
}

}  // namespace ckc
