// dce — dead-code elimination.
//
// Removes nodes whose output nobody reads and that are not section outputs,
// from the last node to the first (a node dies with its last reader, which
// comes after it: one sweep finds them all), then drops tensors (weights included) that
// are no longer referenced (caller inputs stay: they are the ABI). Nodes whose op has side effects (KV_STORE writes
// the cache) are kept even when their output is unread.
#include "passes/pass.h"

namespace ckc {

bool eliminate_dead_code(Graph &g)
{
    bool changed = false;
    std::vector<std::string> names;
    for (const Node &n : g.nodes()) names.push_back(n.name);
    for (auto it = names.rbegin(); it != names.rend(); ++it) {
        const Node &n = *g.node(*it);
        if (op_def(n.op).side_effects || g.is_output(n.output) || !g.consumers(n.output).empty()) continue;
        std::string out = n.output;
        g.remove_node(*it);
        g.remove_tensor(out);
        changed = true;
    }
    for (const auto &t : g.unused_tensors()) {
        if (g.tensor(t).storage == Storage::Input) continue;  // part of the caller's ABI, read or not
        g.remove_tensor(t);
        changed = true;
    }
    return changed;
}

}  // namespace ckc
