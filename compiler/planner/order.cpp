// order.cpp — planner step 1: a topological execution order.
//
// FIFO: Kahn's algorithm, ready nodes in program order.
// Memory-aware (the seeds' v2): Kahn's with a max-heap on the net memory
// delta of running a node now:
//     score = bytes freed (inputs whose last remaining reader it is)
//           - bytes allocated (its output, unless a view, likely in place
//             or a section output: the caller's buffer)
//           + a small bonus (output/8) when a downstream op can take the
//             output over in place.
// Scores only go stale upwards (a tensor's remaining readers only shrink),
// so a popped node is re-scored and pushed back if its score changed: a lazy
// re-score. Ties go to program order, so the result is deterministic.
// Then a sinking sweep (sink_to_first_use): the greedy has no look-ahead, and
// between candidates that allocate the same it takes the earlier in program
// order, which runs precomputations far ahead of their use (AOTAutograd's
// backward graphs compute every layer's GELU-derivative terms from saved
// forward values at the top: 24 buffers of [T, 4*dim] live at once). A node
// moves down to just before its first reader when that cannot raise the
// memory in use at any step: the inputs whose lifetimes it would extend
// take no more bytes than its own output, whose lifetime shrinks.
#include <algorithm>
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

// Moves nodes later, each to just before its first reader, where the inputs
// it is the last reader of (their lifetimes grow) weigh no more than its
// output (its lifetime shrinks): pointwise in time, never more memory in use.
// Sweeps from the end, so a chain (pow -> mul -> its reader) follows its
// reader down; repeats until nothing moves. Still topological: a node only
// moves later and stays before its readers.
std::vector<int> sink_to_first_use(const Graph &g, std::vector<int> order)
{
    const std::vector<const Node *> nodes = g.node_list();
    int n = static_cast<int>(nodes.size());
    std::vector<std::vector<int>> readers(n);          // node -> nodes reading its output
    std::map<std::string, std::vector<int>> by_root;   // activation memory root -> nodes reading it
    std::vector<std::vector<std::string>> roots_of(n);  // node -> activation roots it reads
    for (int i = 0; i < n; i++) {
        for (const Node *c : g.consumers(nodes[i]->output)) readers[i].push_back(g.node_index(c->name));
        std::set<std::string> rs;
        for (const auto &in : nodes[i]->inputs) {
            std::string r = view_root(g, in);
            if (g.tensor(r).storage == Storage::Activation) rs.insert(r);
        }
        for (const auto &r : rs) by_root[r].push_back(i);
        roots_of[i].assign(rs.begin(), rs.end());
    }
    std::vector<int> pos(n);
    auto index = [&] {
        for (int k = 0; k < n; k++) pos[order[k]] = k;
    };
    index();
    for (int sweep = 0; sweep < 8; sweep++) {
        bool moved = false;
        for (int k = n - 1; k >= 0; k--) {
            int i = order[k];
            if (readers[i].empty() || g.is_output(nodes[i]->output)) continue;
            int first = n;
            for (int c : readers[i]) first = std::min(first, pos[c]);
            if (first <= k + 1) continue;  // already right before its first reader
            double extended = 0;
            for (const auto &r : roots_of[i]) {
                bool read_later = g.is_output(r);
                for (int o : by_root[r])
                    if (o != i && pos[o] > k) read_later = true;
                if (!read_later) extended += nominal_bytes(g.tensor(r));
            }
            double own = potential_view(g, *nodes[i]) ? 0 : nominal_bytes(g.tensor(nodes[i]->output));
            if (extended > own) continue;
            order.erase(order.begin() + k);
            order.insert(order.begin() + (first - 1), i);  // first shifted down by one: lands right before it
            index();
            moved = true;
        }
        if (!moved) break;
    }
    return order;
}

}  // namespace

std::vector<std::string> order_nodes(const Graph &g, OrderPolicy policy)
{
    const std::vector<const Node *> nodes = g.node_list();
    int n = static_cast<int>(nodes.size());
    std::vector<int> indeg(n, 0);
    std::vector<std::vector<int>> succ(n);
    for (int i = 0; i < n; i++) {
        std::set<int> preds;
        for (const auto &in : nodes[i]->inputs)
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
            order.push_back(nodes[i]->name);
            for (int s : succ[i])
                if (--indeg[s] == 0) ready.push(s);
        }
        return order;
    }

    // remaining readers per memory root (views resolved)
    std::map<std::string, int> remaining;
    std::map<int, std::map<std::string, int>> uses;  // node -> root -> edges
    for (int i = 0; i < n; i++)
        for (const auto &in : nodes[i]->inputs) {
            std::string r = view_root(g, in);
            if (g.tensor(r).storage != Storage::Activation) continue;
            remaining[r]++;
            uses[i][r]++;
        }
    auto score = [&](int i) {
        const Node &nd = *nodes[i];
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
        // an Output (the caller's buffer) or Carry tensor takes no arena: computing it early costs nothing here
        if (!is_view && !frees_inplace_input && g.tensor(nd.output).storage == Storage::Activation)
            alloc = nominal_bytes(g.tensor(nd.output));
        for (const Node *c : g.consumers(nd.output))
            for (int idx : op_def(c->op).inplace)
                if (idx < static_cast<int>(c->inputs.size()) && c->inputs[idx] == nd.output) bonus = alloc / 8;
        return freed - alloc + bonus;
    };
    using Item = std::tuple<double, int, int>;  // score, -index (program order tie-break), index
    std::priority_queue<Item> heap;
    for (int i = 0; i < n; i++)
        if (!indeg[i]) heap.push({score(i), -i, i});
    std::vector<int> greedy;
    while (!heap.empty()) {
        auto [s, neg, i] = heap.top();
        heap.pop();
        double now = score(i);
        if (now != s) {  // stale: re-score and let a better candidate win
            heap.push({now, neg, i});
            continue;
        }
        greedy.push_back(i);
        for (const auto &[r, k] : uses[i]) remaining[r] -= k;
        for (int sx : succ[i])
            if (--indeg[sx] == 0) heap.push({score(sx), -sx, sx});
    }
    for (int i : sink_to_first_use(g, greedy)) order.push_back(nodes[i]->name);
    return order;
}

}  // namespace ckc
