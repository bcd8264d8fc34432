// planner.cpp — glue for the three planner steps, statistics and the report.
#include "planner/planner.h"

#include <algorithm>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "support/util.h"

namespace ckc {

const std::vector<NamedPolicy<OrderPolicy>> &order_policies()
{
    static const std::vector<NamedPolicy<OrderPolicy>> t = {
        {"memory", OrderPolicy::MemoryAware, "memory-aware topological order (planner/order.cpp)"},
        {"fifo", OrderPolicy::Fifo, "the nodes' own order"},
    };
    return t;
}

const std::vector<NamedPolicy<PlacementPolicy>> &placement_policies()
{
    static const std::vector<NamedPolicy<PlacementPolicy>> t = {
        {"first-fit", PlacementPolicy::FirstFit, "largest first, into the lowest gap that fits (planner/placement.cpp)"},
        {"naive", PlacementPolicy::Naive, "every tensor its own memory (no reuse)"},
    };
    return t;
}

static void compute_stats(const Graph &g, SectionPlan &sp, int64_t align)
{
    int n_steps = static_cast<int>(sp.order.size());
    for (int cls = 0; cls < 2; cls++) {
        bool per_token = cls == 0;
        ClassStats &st = per_token ? sp.per_token : sp.fixed;
        st.naive = 0;
        for (const Node &n : g.nodes()) {
            if (sp.views.count(n.name)) continue;
            const Tensor &t = g.tensor(n.output);
            bool arena_copy = sp.alloc.count(n.output) && t.storage != Storage::Activation;
            if ((t.storage == Storage::Activation || arena_copy) && shape_has_tokens(t.shape) == per_token)
                st.naive += align_up(tensor_bytes(t), align);
        }
        for (const auto &[root, a] : sp.alloc)  // per-op scratch: its own slot in a naive plan too
            if (!g.has_tensor(root) && a.per_token == per_token) st.naive += align_up(a.size, align);
        // the most bytes alive at one step: a sweep over births (+size) and deaths (-size, a step later)
        std::vector<int64_t> delta(static_cast<size_t>(n_steps) + 2, 0);
        for (const auto &[name, a] : sp.alloc) {
            if (a.per_token != per_token) continue;
            delta[static_cast<size_t>(std::clamp(a.birth, 0, n_steps + 1))] += a.size;
            delta[static_cast<size_t>(std::clamp(a.death + 1, 0, n_steps + 1))] -= a.size;
        }
        st.lower_bound = 0;
        int64_t live = 0;
        for (int s = 0; s <= n_steps; s++) {
            live += delta[static_cast<size_t>(s)];
            st.lower_bound = std::max(st.lower_bound, live);
        }
    }
}

SectionPlan plan_section(const Graph &g, const PlanOptions &o)
{
    SectionPlan sp;
    compute_liveness(g, order_nodes(g, o.order), o, sp);
    place(sp, o);
    compute_stats(g, sp, o.align);
    return sp;
}

Plan plan_program(const Program &p, const PlanOptions &o)
{
    Plan plan;
    plan.options = o;
    for (Section s : p.sections()) {
        plan.section(s) = plan_section(p.section(s), o);
        plan.arena_per_token = std::max(plan.arena_per_token, plan.section(s).per_token.arena);
        plan.arena_fixed = std::max(plan.arena_fixed, plan.section(s).fixed.arena);
    }
    return plan;
}

void print_plan_report(const Program &p, const Plan &plan, int64_t tokens, std::ostream &os)
{
    const PlanOptions &o = plan.options;
    bool graph = p.info.kind == ModelKind::Graph;  // static shapes: every byte is fixed
    os << fmt::format("memory plan: {} placement, {} order, in-place {}\n",
                      o.placement == PlacementPolicy::FirstFit ? "first-fit" : "naive",
                      o.order == OrderPolicy::MemoryAware ? "memory-aware" : "fifo", o.inplace ? "on" : "off");
    os << fmt::format("  {:<8} {:>14} {:>14} {:>14} {:>6}{}\n", "section", "arena", "naive sum", "lower bound", "roots",
                      graph ? "" : "   (per token; x T at run time)");
    for (Section s : p.sections()) {
        const SectionPlan &sp = plan.section(s);
        if (graph) {
            os << fmt::format("  {:<8} {:>14} {:>14} {:>14} {:>6}\n", Program::section_name(s), human_bytes(sp.fixed.arena),
                              human_bytes(sp.fixed.naive), human_bytes(sp.fixed.lower_bound), sp.alloc.size());
            continue;
        }
        os << fmt::format("  {:<8} {:>14} {:>14} {:>14} {:>6}\n", Program::section_name(s),
                          human_bytes(sp.per_token.arena), human_bytes(sp.per_token.naive),
                          human_bytes(sp.per_token.lower_bound), sp.alloc.size());
        if (sp.fixed.arena || sp.fixed.naive)
            os << fmt::format("  {:<8} {:>14} {:>14} {:>14}   (fixed)\n", "", human_bytes(sp.fixed.arena),
                              human_bytes(sp.fixed.naive), human_bytes(sp.fixed.lower_bound));
    }
    // what lives outside the arena
    // each checkpoint tensor once (a tied embedding is read by the header and the footer), per layer that reads it
    double weights = weight_totals(p).bytes, kv = 0;
    double carry = static_cast<double>(shape_numel_fixed(p.carry_shape)) * 4.0;
    if (graph) {
        os << fmt::format("  arena: {}\n", human_bytes(plan.arena_fixed));
        os << fmt::format("  outside: weights and constants {}, the value between layers {}, inputs and outputs in the "
                          "caller's buffers\n",
                          human_bytes(weights), human_bytes(p.info.n_layers ? carry : 0.0));
        return;
    }
    double T = static_cast<double>(tokens);
    os << fmt::format("  arena: {}/token + {} fixed = {} at T = {}\n", human_bytes(plan.arena_per_token),
                      human_bytes(plan.arena_fixed), human_bytes(plan.arena_per_token * T + plan.arena_fixed), tokens);
    for (const Node &n : p.block.nodes())
        if (n.op == Op::KV_STORE)
            kv += 2.0 * 4.0 * static_cast<double>(n.i("kv_heads") * n.i("head_dim")) * static_cast<double>(p.info.n_layers);
    os << fmt::format("  outside: weights {} (f32), KV cache {}/token of capacity, residual stream {}/token, logits {}/token\n",
                      human_bytes(weights), human_bytes(kv), human_bytes(carry),
                      human_bytes(static_cast<double>(p.info.vocab_size) * 4.0));
}

}  // namespace ckc
