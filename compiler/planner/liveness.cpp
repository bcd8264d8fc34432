// liveness.cpp — planner step 2: regions (memory roots) and lifetimes.
//
// Walking the nodes in execution order, each output gets a Region:
//   * a view (RESHAPE, a SLICE of leading rows: contiguous; a SLICE of the
//     columns of a 2-D tensor: strided) -> its input's region, shifted, when
//     that is possible: a strided view needs a contiguous 2-D input and
//     readers that take a row stride; a contiguous view needs a contiguous
//     input; a pinned output cannot be a view. Otherwise the op runs its copy
//     kernel like any other;
//   * an in-place candidate input -> that input's region, when its memory is
//     writable (arena, carry, an output buffer), the shapes match, the output
//     may be strided if the input is a column view, and no tensor overlapping
//     that memory is read after this node (the seeds' memory_root mechanism:
//     chains like ROPE -> ... follow naturally);
//   * otherwise -> a new root (an arena allocation), except outputs pinned to
//     the carry / an output buffer, which are written there directly once
//     nothing else in that buffer is still needed, or copied there at the end.
// A root is born when its tensor is produced and dies at the last read of any
// tensor sharing it (section outputs live to the end). Ops that need scratch
// get a "<node>#scratch" allocation alive for their one step.
#include <algorithm>

#include <fmt/format.h>

#include "planner/planner.h"
#include "support/error.h"

namespace ckc {

int64_t tensor_bytes(const Tensor &t) { return shape_numel_fixed(t.shape) * dtype_size(t.dtype); }

std::string source_root(const Tensor &t) { return t.storage == Storage::Carry ? kCarryRoot : t.name; }

std::optional<ViewOf> potential_view(const Graph &g, const Node &n)
{
    const OpDef &d = op_def(n.op);
    if (!d.view) return std::nullopt;
    Inputs in;
    for (const auto &i : n.inputs) in.push_back(&g.tensor(i));
    return d.view(n, in);
}

namespace {

bool writable_root(const Graph &g, const std::string &root)
{
    if (root == kCarryRoot) return true;
    return g.has_tensor(root) &&
           (g.tensor(root).storage == Storage::Activation || g.tensor(root).storage == Storage::Output);
}

bool readers_take_stride(const Graph &g, const std::string &t)
{
    for (const Node *c : g.consumers(t))
        for (size_t i = 0; i < c->inputs.size(); i++)
            if (c->inputs[i] == t && !(op_def(c->op).strided & (1u << i))) return false;
    return true;
}

// The memory a tensor occupies inside its root: columns [lo, hi) of every row
// when strided, else the flat elements [lo, hi).
struct Span {
    bool strided;
    int64_t lo, hi;
};

bool overlap(const Span &a, const Span &b)
{
    if (a.strided != b.strided) return true;  // rows vs flat ranges: assume they meet
    return a.lo < b.hi && b.lo < a.hi;
}

}  // namespace

void compute_liveness(const Graph &g, const std::vector<std::string> &order, const PlanOptions &o, SectionPlan &sp)
{
    const int n_steps = static_cast<int>(order.size());
    const int kEnd = n_steps;  // "read after the last node": section outputs
    sp.order = order;
    sp.region.clear();
    sp.alloc.clear();
    sp.copies.clear();
    sp.last_use.clear();
    sp.views.clear();
    sp.scratch.clear();

    Shape carry_shape;
    for (const auto &[name, t] : g.tensors())
        if (t.storage == Storage::Carry) carry_shape = t.shape;

    auto root_shape = [&](const std::string &root) -> const Shape & {
        return root == kCarryRoot ? carry_shape : g.tensor(root).shape;
    };
    auto span = [&](const std::string &t) {
        const Region &r = sp.region.at(t);
        const Shape &s = g.tensor(t).shape;
        if (r.strided) return Span{true, r.offset, r.offset + (s.empty() ? 1 : s.back())};
        return Span{false, r.offset, r.offset + shape_numel_fixed(s)};
    };

    std::map<std::string, int> step_of;
    for (int s = 0; s < n_steps; s++) step_of[order[s]] = s;
    for (const auto &[name, t] : g.tensors()) {
        int last = -1;
        if (const Node *p = g.producer(name)) last = step_of.at(p->name);
        for (const Node *c : g.consumers(name)) last = std::max(last, step_of.at(c->name));
        if (g.is_output(name) || o.keep_all) last = kEnd;
        sp.last_use[name] = last;
        if (!g.producer(name)) sp.region[name] = {source_root(t), 0, false};
    }

    // No tensor living in `root` over memory overlapping `sp_` is read after step s.
    auto dead_after = [&](const std::string &root, const Span &sp_, int s) {
        for (const auto &[t, r] : sp.region) {
            if (r.root != root) continue;
            if (!overlap(span(t), sp_)) continue;
            if (sp.last_use.at(t) > s) return false;
        }
        return true;
    };
    auto whole = [&](const std::string &root) { return Span{false, 0, shape_numel_fixed(root_shape(root))}; };

    // Pin preferences flow backwards through in-place producers: when a pinned
    // output (carry, logits) is made in place from an input that nothing else
    // reads, that input prefers the pinned buffer too, so e.g. the GEMM before
    // Gemma-2's final SOFTCAP writes the logits buffer directly instead of a
    // [T, vocab] arena slot. A preference is taken only when the buffer holds
    // nothing still needed; otherwise the tensor is planned as usual.
    std::map<std::string, std::string> preferred;
    if (o.inplace && !o.keep_all) {
        for (int s = n_steps - 1; s >= 0; s--) {
            const Node &nd = *g.node(order[s]);
            const Tensor &out = g.tensor(nd.output);
            std::string pin = out.storage == Storage::Carry    ? std::string(kCarryRoot)
                              : out.storage == Storage::Output ? out.name
                              : preferred.count(out.name)       ? preferred.at(out.name)
                                                                : "";
            if (pin.empty()) continue;
            for (int idx : op_def(nd.op).inplace) {
                if (idx >= static_cast<int>(nd.inputs.size())) continue;
                const std::string &x = nd.inputs[idx];
                const Tensor &tx = g.tensor(x);
                const Node *px = g.producer(x);
                if (tx.storage != Storage::Activation || !px || potential_view(g, *px) || tx.shape != out.shape ||
                    tx.dtype != out.dtype || g.consumers(x).size() != 1 || g.is_output(x))
                    continue;
                preferred[x] = pin;
                break;
            }
        }
    }

    std::vector<std::string> roots;  // arena allocations, in birth order
    for (int s = 0; s < n_steps; s++) {
        const Node &nd = *g.node(order[s]);
        const OpDef &d = op_def(nd.op);
        const Tensor &out = g.tensor(nd.output);
        for (size_t i = 0; i < nd.inputs.size(); i++)
            if (sp.region.at(nd.inputs[i]).strided && !(d.strided & (1u << i)))
                internal_error(fmt::format("planner: node '{}' ({}) reads column view '{}' at input {}, which takes no "
                                           "row stride", nd.name, op_name(nd.op), nd.inputs[i], i));
        std::string pin;  // an output that must end up in the carry or a caller buffer
        if (out.storage == Storage::Carry) pin = kCarryRoot;
        if (out.storage == Storage::Output) pin = out.name;

        if (auto v = potential_view(g, nd); v && pin.empty()) {
            const Region &ri = sp.region.at(nd.inputs[0]);
            const Shape &rs = root_shape(ri.root);
            bool ok;
            if (v->strided)  // columns of a tensor that is a whole root or a column view itself
                ok = rs.size() >= 2 && (ri.strided || (ri.offset == 0 && g.tensor(nd.inputs[0]).shape == rs)) &&
                     readers_take_stride(g, nd.output) && !g.is_output(nd.output);
            else
                ok = !ri.strided;
            if (ok) {
                sp.region[nd.output] = {ri.root, ri.offset + v->offset, v->strided || ri.strided};
                sp.views.insert(nd.name);
                continue;
            }
        }

        bool placed = false;
        if (o.inplace && !o.keep_all) {
            for (int idx : d.inplace) {
                if (idx >= static_cast<int>(nd.inputs.size())) continue;
                const std::string &x = nd.inputs[idx];
                const Region &rx = sp.region.at(x);
                if (!writable_root(g, rx.root) || g.tensor(x).shape != out.shape || g.tensor(x).dtype != out.dtype)
                    continue;
                if (!pin.empty() && rx.root != pin) continue;
                // Taking over a column view makes the output a view too: the op
                // must write with a row stride and every reader accept one.
                if (rx.strided && !(d.strided & kStridedOut && readers_take_stride(g, nd.output))) continue;
                if (!dead_after(rx.root, span(x), s)) continue;
                sp.region[nd.output] = rx;
                placed = true;
                break;
            }
        }
        if (!placed) {
            // A pinned output goes straight to its buffer unless the buffer still
            // holds something read at or after this step; so does a preferred one.
            std::string target = !pin.empty() ? pin : preferred.count(nd.output) ? preferred.at(nd.output) : "";
            if (!target.empty() && dead_after(target, whole(target), s - 1)) {
                sp.region[nd.output] = {target, 0, false};
            } else {
                sp.region[nd.output] = {nd.output, 0, false};
                roots.push_back(nd.output);
                if (!pin.empty()) sp.copies.push_back({nd.output, pin});
            }
        }
        if (d.scratch) {
            Inputs in;
            for (const auto &i : nd.inputs) in.push_back(&g.tensor(i));
            int64_t bytes = d.scratch(nd, in);
            if (bytes > 0) {
                Allocation a;
                a.root = nd.name + "#scratch";
                a.per_token = false;
                a.size = align_up(bytes, o.align);
                a.birth = a.death = s;
                sp.alloc[a.root] = a;
                sp.scratch[nd.name] = a.root;
            }
        }
    }

    for (const auto &t : roots) {
        const Tensor &tt = g.tensor(t);
        Allocation a;
        a.root = t;
        a.per_token = shape_has_tokens(tt.shape);
        a.size = align_up(tensor_bytes(tt), o.align);
        a.birth = step_of.at(g.producer(t)->name);
        a.death = a.birth;
        for (const auto &[u, ru] : sp.region)
            if (ru.root == t) a.death = std::max(a.death, sp.last_use.at(u));
        sp.alloc[t] = a;
    }
}

}  // namespace ckc
