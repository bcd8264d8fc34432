// dce — dead-code elimination.
//
// Removes nodes whose output nobody reads and that are not section outputs,
// repeating until nothing changes, then drops tensors (weights included) that
// are no longer referenced (caller inputs stay: they are the ABI). Nodes whose op has side effects (KV_STORE writes
// the cache) are kept even when their output is unread.
#include "passes/pass.h"

namespace ckc {

bool eliminate_dead_code(Graph &g)
{
    bool changed = false, again = true;
    while (again) {
        again = false;
        for (const Node &n : g.nodes()) {
            if (op_def(n.op).side_effects || g.is_output(n.output) || !g.consumers(n.output).empty()) continue;
            std::string name = n.name, out = n.output;
            g.remove_node(name);
            g.remove_tensor(out);
            changed = again = true;
            break;
        }
    }
    for (const auto &t : g.unused_tensors()) {
        if (g.tensor(t).storage == Storage::Input) continue;  // part of the caller's ABI, read or not
        g.remove_tensor(t);
        changed = true;
    }
    return changed;
}

}  // namespace ckc
