// order.cpp — planner step 1: a topological execution order.
//
// FIFO: Kahn's algorithm, ready nodes in program order.
// Memory-aware (the seeds' v2): Kahn's with a max-heap on the net memory
// delta of running a node now:
//     score = bytes freed (inputs whose last remaining reader it is)
//           - bytes allocated (its output, unless a view or likely in place)
//           + a small bonus (output/8) when a downstream op can take the
//             output over in place.
// Scores only go stale upwards (a tensor's remaining readers only shrink),
// so a popped node is re-scored and pushed back if its score changed: a lazy
// re-score. Ties go to program order, so the result is deterministic.
#include <map>
#include <queue>
#include <set>

#include "planner/planner.h"

namespace ckc {

namespace {

constexpr double kNominalTokens = 64.0;  // weighs per-token vs fixed bytes in scores

double nominal_bytes(const Tensor &t)
{
    double b = static_cast<double>(tensor_bytes(t));
    return shape_has_tokens(t.shape) ? b * kNominalTokens : b;
}

// graph-level alias root (views only), for counting readers of memory
std::string view_root(const Graph &g, std::string t)
{
    for (;;) {
        const Node *p = g.producer(t);
        if (!p || !potential_view(g, *p)) return t;
        t = p->inputs[0];
    }
}

}  // namespace

std::vector<std::string> order_nodes(const Graph &g, OrderPolicy policy)
{
    const auto &nodes = g.nodes();
    int n = static_cast<int>(nodes.size());
    std::vector<int> indeg(n, 0);
    std::vector<std::vector<int>> succ(n);
    for (int i = 0; i < n; i++) {
        std::set<int> preds;
        for (const auto &in : nodes[i].inputs)
            if (const Node *p = g.producer(in)) preds.insert(g.node_index(p->name));
        indeg[i] = static_cast<int>(preds.size());
        for (int p : preds) succ[p].push_back(i);
    }

    std::vector<std::string> order;
    if (policy == OrderPolicy::Fifo) {
        std::queue<int> ready;
        for (int i = 0; i < n; i++)
            if (!indeg[i]) ready.push(i);
        while (!ready.empty()) {
            int i = ready.front();
            ready.pop();
            order.push_back(nodes[i].name);
            for (int s : succ[i])
                if (--indeg[s] == 0) ready.push(s);
        }
        return order;
    }

    // remaining readers per memory root (views resolved)
    std::map<std::string, int> remaining;
    std::map<int, std::map<std::string, int>> uses;  // node -> root -> edges
    for (int i = 0; i < n; i++)
        for (const auto &in : nodes[i].inputs) {
            std::string r = view_root(g, in);
            if (g.tensor(r).storage != Storage::Activation) continue;
            remaining[r]++;
            uses[i][r]++;
        }
    auto score = [&](int i) {
        const Node &nd = nodes[i];
        const OpDef &d = op_def(nd.op);
        double freed = 0, alloc = 0, bonus = 0;
        bool frees_inplace_input = false;
        for (const auto &[r, k] : uses[i]) {
            if (remaining[r] != k || g.is_output(r)) continue;
            freed += nominal_bytes(g.tensor(r));
            for (int idx : d.inplace)
                if (idx < static_cast<int>(nd.inputs.size()) && view_root(g, nd.inputs[idx]) == r)
                    frees_inplace_input = true;
        }
        bool is_view = potential_view(g, nd).has_value();
        if (!is_view && !frees_inplace_input) alloc = nominal_bytes(g.tensor(nd.output));
        for (const Node *c : g.consumers(nd.output))
            for (int idx : op_def(c->op).inplace)
                if (idx < static_cast<int>(c->inputs.size()) && c->inputs[idx] == nd.output) bonus = alloc / 8;
        return freed - alloc + bonus;
    };
    using Item = std::tuple<double, int, int>;  // score, -index (program order tie-break), index
    std::priority_queue<Item> heap;
    for (int i = 0; i < n; i++)
        if (!indeg[i]) heap.push({score(i), -i, i});
    while (!heap.empty()) {
        auto [s, neg, i] = heap.top();
        heap.pop();
        double now = score(i);
        if (now != s) {  // stale: re-score and let a better candidate win
            heap.push({now, neg, i});
            continue;
        }
        order.push_back(nodes[i].name);
        for (const auto &[r, k] : uses[i]) remaining[r] -= k;
        for (int sx : succ[i])
            if (--indeg[sx] == 0) heap.push({score(sx), -sx, sx});
    }
    return order;
}

}  // namespace ckc
