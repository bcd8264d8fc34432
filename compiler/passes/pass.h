// pass.h — graph-to-graph rewrites and the default pipeline.
//
// A pass is a plain function `bool pass(Graph &)` (true if it changed
// something), or `bool pass(Graph &, Program &)` when it works with constant
// values (Program::constants, ir/constants.h), or `pass(Program &)` when
// it moves nodes between sections (fold_layers); one per file, each opening
// with a note of what it does and what it leaves alone. The pipeline runs
// every pass on header, block and footer, in the order of default_pipeline(),
// and verifies the IR after each one. The same pipeline serves both front
// ends: a pass finding nothing to do is a no-op.
#pragma once

#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ckc {

struct Pass {
    const char *name;
    const char *doc;  // one line, shown by `ckc compile --list-passes`
    bool (*run)(Graph &g, Program &p);      // on each of header, block, footer
    bool (*run_program)(Program &p) = nullptr;  // or once on the whole program (when set)
};

bool eliminate_reshapes(Graph &g);
bool absorb_blas(Graph &g, Program &p);
bool constant_fold(Graph &g, Program &p);
bool absorb_causal_mask(Graph &g, Program &p);
bool fuse_dags(Graph &g);
bool fuse_patterns(Graph &g);
bool fuse_matmul_add(Graph &g);
bool fuse_parallel_linears(Graph &g, const Program &p);
bool fuse_elementwise(Graph &g, Program &p);
bool eliminate_dead_code(Graph &g);
// Repeated submodules of an exported graph (module paths with layers.N. / h.N.
// / blocks.N.) become the block, run once per layer, when every layer is the
// same computation on its own weights with one tensor (the carry) flowing from
// layer to layer. Returns the number of layers folded (0: left as it was).
int64_t fold_layers(Program &p);

const std::vector<Pass> &default_pipeline();
const Pass *find_pass(const std::string &name);

// Node counts (all sections) around one pass, for `ckc compile --report`.
struct PassStat {
    std::string name;
    size_t nodes_before = 0, nodes_after = 0;
};

struct PipelineOptions {
    std::set<std::string> disabled;  // pass names to skip
    std::string dump_after;          // print the program after this pass ("" = never)
    std::ostream *dump = nullptr;
    std::vector<PassStat> *stats = nullptr;  // filled with every pass that ran, when set
};

// Runs the enabled passes in order; returns the names of the passes that ran.
std::vector<std::string> run_pipeline(Program &p, const PipelineOptions &opts);

}  // namespace ckc
