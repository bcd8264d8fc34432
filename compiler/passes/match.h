// match.h — small pattern-matching helpers shared by the rewrite passes.
#pragma once

#include <cmath>
#include <optional>
#include <string>

#include "ir/graph.h"

namespace ckc {

// The producer of `t` when it is an `op` node whose output only one node reads
// and that is not a section output: the intermediate a fusion may remove.
inline const Node *sole(const Graph &g, const std::string &t, Op op)
{
    const Node *p = g.producer(t);
    if (!p || p->op != op || g.is_output(t) || g.consumers(t).size() != 1) return nullptr;
    return p;
}

// The one node reading `t`, when it is an `op` node and `t` is no section output.
inline const Node *only_reader(const Graph &g, const std::string &t, Op op)
{
    auto c = g.consumers(t);
    if (c.size() != 1 || c[0]->op != op || g.is_output(t)) return nullptr;
    return c[0];
}

// The producer of `t` if it is an `op` node (any number of readers).
inline const Node *made_by(const Graph &g, const std::string &t, Op op)
{
    const Node *p = g.producer(t);
    return p && p->op == op ? p : nullptr;
}

// The scalar of a one-input ADD / SUB / MUL / DIV (x op s, not s op x).
inline std::optional<double> scalar_of(const Node &n, Op op)
{
    if (n.op != op || n.inputs.size() != 1 || !n.has("scalar") || n.i("reverse", 0)) return std::nullopt;
    return n.f("scalar");
}

// Removes the producer of `t` when nothing reads `t` any more (and it is no
// output, has no side effects), then the producers that die with it: the
// garbage a rewrite leaves, cleared at once so that later matches in the same
// pass see true consumer counts.
inline void remove_if_dead(Graph &g, const std::string &t)
{
    const Node *p = g.producer(t);
    if (!p || g.is_output(t) || !g.consumers(t).empty() || op_def(p->op).side_effects) return;
    std::vector<std::string> inputs = p->inputs;
    std::string name = p->name;
    g.remove_node(name);
    g.remove_tensor(t);
    for (const auto &in : inputs)
        if (g.has_tensor(in)) remove_if_dead(g, in);
}

// Rewrites until nothing matches: `rule(g, node)` is tried on every node in
// order (on a copy: the graph may change under it) and returns true when it
// rewrote something. A sweep goes on past a rewrite (the nodes it removed are
// skipped, those it made are tried in the next sweep), and sweeps repeat until
// one changes nothing: a pass costs a few sweeps, not one per rewrite. True if
// anything changed.
template <typename Rule>
bool rewrite_all(Graph &g, Rule rule)
{
    bool changed = false;
    for (bool again = true; again;) {
        again = false;
        std::vector<std::string> names;
        names.reserve(g.nodes().size());
        for (const Node &n : g.nodes()) names.push_back(n.name);
        for (const std::string &name : names) {
            const Node *n0 = g.node(name);
            if (!n0) continue;  // removed by a rewrite earlier in this sweep
            Node n = *n0;
            if (rule(g, n)) changed = again = true;
        }
    }
    return changed;
}

// Puts `repl` in the place of node `old` (its position in the order, its
// output tensor with that tensor's storage, its name and origin), then
// removes what only `old` was reading and is dead now.
inline void replace_node(Graph &g, const Node &old, Node repl)
{
    repl.name = old.name;
    repl.output = old.output;
    if (repl.origin.empty()) repl.origin = old.origin;
    std::vector<std::string> inputs = old.inputs;
    Storage st = g.tensor(old.output).storage;
    std::string before = g.next_node(old.name);
    g.remove_node(old.name);
    g.insert_node(repl, before, st);
    for (const auto &in : inputs)
        if (g.has_tensor(in)) remove_if_dead(g, in);
}

inline bool near(double a, double b, double rel = 1e-4) { return std::fabs(a - b) <= rel * std::max(1.0, std::fabs(b)); }

// An axis attribute normalized to [0, rank).
inline int64_t axis_attr(const Node &n, size_t rank, const std::string &key = "axis")
{
    int64_t a = n.i(key, -1);
    return a < 0 ? a + static_cast<int64_t>(rank) : a;
}

}  // namespace ckc
