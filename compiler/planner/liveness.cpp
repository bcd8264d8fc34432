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
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "planner/planner.h"
#include "support/error.h"

namespace ckc {

int64_t tensor_bytes(const Tensor &t) { return shape_numel_fixed(t.shape) * dtype_size(t.dtype); }

std::string source_root(const Tensor &t) { return t.storage == Storage::Carry ? kCarryRoot : t.name; }

namespace {

// `updated`: the inputs an output is written into (Tensor::into)
bool writable_root(const Graph &g, const std::string &root, const std::set<std::string> &updated)
{
    if (root == kCarryRoot) return true;
    if (!g.has_tensor(root)) return false;
    Storage s = g.tensor(root).storage;
    return s == Storage::Activation || s == Storage::Output || (s == Storage::Input && updated.count(root));
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

// One section's liveness, step by step: each node's output becomes a view, takes over an input's memory,
// goes to its pinned buffer, or gets a new root (see the top of the file).
class Liveness {
public:
    Liveness(const Graph &g, const std::vector<std::string> &order, const PlanOptions &o, SectionPlan &sp)
        : g_(g), order_(order), o_(o), sp_(sp), n_steps_(static_cast<int>(order.size()))
    {
        sp_.order = order;
        sp_.region.clear();
        sp_.alloc.clear();
        sp_.copies.clear();
        sp_.last_use.clear();
        sp_.views.clear();
        sp_.scratch.clear();
        for (const auto &[name, t] : g.tensors())
            if (t.storage == Storage::Carry) carry_shape_ = t.shape;
        for (const auto &o : g.outputs())
            if (!g.tensor(o).into.empty()) updated_.insert(g.tensor(o).into);
        for (int s = 0; s < n_steps_; s++) step_of_[order[s]] = s;
    }

    void run()
    {
        last_uses();
        if (o_.inplace && !o_.keep_all) prefer_pins();
        for (int s = 0; s < n_steps_; s++) {
            dead_before_ = s - 1;  // what no step from here on reads (dead_after asks about s - 1 at the earliest)
            const Node &nd = *g_.node(order_[s]);
            check_strided_reads(nd);
            if (!as_view(nd) && !in_place(nd, s)) new_or_pinned(nd, s);
            scratch(nd, s);
        }
        allocations();
    }

private:
    const Shape &root_shape(const std::string &root) const
    {
        return root == kCarryRoot ? carry_shape_ : g_.tensor(root).shape;
    }
    Span span(const std::string &t) const
    {
        const Region &r = sp_.region.at(t);
        const Shape &s = g_.tensor(t).shape;
        if (r.strided) return Span{true, r.offset, r.offset + (s.empty() ? 1 : s.back())};
        return Span{false, r.offset, r.offset + shape_numel_fixed(s)};
    }
    Span whole(const std::string &root) const { return Span{false, 0, shape_numel_fixed(root_shape(root))}; }
    // The output must end up in the carry or a caller buffer (its own, or the input it is written into):
    // that buffer's root, else "".
    static std::string pin_of(const Tensor &out)
    {
        if (out.storage == Storage::Carry) return kCarryRoot;
        if (out.storage == Storage::Output) return out.into.empty() ? out.name : out.into;
        return "";
    }

    // The last step reading each tensor (kEnd: read after the section); inputs and weights are their own roots.
    void last_uses()
    {
        for (const auto &[name, t] : g_.tensors()) {
            int last = -1;
            if (const Node *p = g_.producer(name)) last = step_of_.at(p->name);
            for (const Node *c : g_.consumers(name)) last = std::max(last, step_of_.at(c->name));
            if (g_.is_output(name) || o_.keep_all) last = n_steps_;
            sp_.last_use[name] = last;
            if (!g_.producer(name)) set_region(name, {source_root(t), 0, false});
        }
    }

    void set_region(const std::string &t, const Region &r)
    {
        sp_.region[t] = r;
        members_[r.root].push_back(t);
    }

    // No tensor living in `root` over memory overlapping `span` is read after step s. A root's tensors that
    // no later step reads leave its list as they are met: a query costs what is alive in the root, so a
    // section of n nodes is planned in O(n log n), not O(n^2).
    bool dead_after(const std::string &root, const Span &span_, int s)
    {
        auto it = members_.find(root);
        if (it == members_.end()) return true;
        std::vector<std::string> &m = it->second;
        bool dead = true;
        for (size_t i = 0; i < m.size();) {
            int last = sp_.last_use.at(m[i]);
            if (last <= dead_before_) {
                m[i] = std::move(m.back());
                m.pop_back();
                continue;
            }
            if (last > s && overlap(span(m[i]), span_)) dead = false;
            i++;
        }
        return dead;
    }

    // Pin preferences flow backwards through in-place producers: when a pinned
    // output (carry, logits) is made in place from an input that nothing else
    // reads, that input prefers the pinned buffer too, so e.g. the GEMM before
    // Gemma-2's final SOFTCAP writes the logits buffer directly instead of a
    // [T, vocab] arena slot. A preference is taken only when the buffer holds
    // nothing still needed; otherwise the tensor is planned as usual.
    void prefer_pins()
    {
        for (int s = n_steps_ - 1; s >= 0; s--) {
            const Node &nd = *g_.node(order_[s]);
            const Tensor &out = g_.tensor(nd.output);
            std::string pin = pin_of(out);
            if (pin.empty() && preferred_.count(out.name)) pin = preferred_.at(out.name);
            if (pin.empty()) continue;
            for (int idx : op_def(nd.op).inplace) {
                if (idx >= static_cast<int>(nd.inputs.size())) continue;
                const std::string &x = nd.inputs[idx];
                const Tensor &tx = g_.tensor(x);
                const Node *px = g_.producer(x);
                if (tx.storage != Storage::Activation || !px || potential_view(g_, *px) || tx.shape != out.shape ||
                    tx.dtype != out.dtype || g_.consumers(x).size() != 1 || g_.is_output(x))
                    continue;
                preferred_[x] = pin;
                break;
            }
        }
    }

    void check_strided_reads(const Node &nd) const
    {
        const OpDef &d = op_def(nd.op);
        for (size_t i = 0; i < nd.inputs.size(); i++)
            if (sp_.region.at(nd.inputs[i]).strided && !(d.strided & (1u << i)))
                internal_error(fmt::format("planner: node '{}' ({}) reads column view '{}' at input {}, which takes no "
                                           "row stride", nd.name, op_name(nd.op), nd.inputs[i], i));
    }

    // A view op whose output can alias its input: no kernel runs.
    bool as_view(const Node &nd)
    {
        auto v = potential_view(g_, nd);
        if (!v || !pin_of(g_.tensor(nd.output)).empty()) return false;
        const Region &ri = sp_.region.at(nd.inputs[0]);
        const Shape &rs = root_shape(ri.root);
        bool ok;
        if (v->strided)  // columns of a tensor that is a whole root or a column view itself
            ok = rs.size() >= 2 && (ri.strided || (ri.offset == 0 && g_.tensor(nd.inputs[0]).shape == rs)) &&
                 readers_take_stride(g_, nd.output) && !g_.is_output(nd.output);
        else
            ok = !ri.strided;
        if (!ok) return false;
        set_region(nd.output, {ri.root, ri.offset + v->offset, v->strided || ri.strided});
        sp_.views.insert(nd.name);
        return true;
    }

    // The output takes over the memory of an input that dies here.
    bool in_place(const Node &nd, int s)
    {
        if (!o_.inplace || o_.keep_all) return false;
        const OpDef &d = op_def(nd.op);
        const Tensor &out = g_.tensor(nd.output);
        std::string pin = pin_of(out);
        for (int idx : d.inplace) {
            if (idx >= static_cast<int>(nd.inputs.size())) continue;
            const std::string &x = nd.inputs[idx];
            const Region &rx = sp_.region.at(x);
            if (!writable_root(g_, rx.root, updated_) || g_.tensor(x).shape != out.shape || g_.tensor(x).dtype != out.dtype)
                continue;
            if (!pin.empty() && rx.root != pin) continue;
            // Taking over a column view makes the output a view too: the op
            // must write with a row stride and every reader accept one.
            if (rx.strided && !(d.strided & kStridedOut && readers_take_stride(g_, nd.output))) continue;
            if (!dead_after(rx.root, span(x), s)) continue;
            set_region(nd.output, rx);
            return true;
        }
        return false;
    }

    // A pinned output goes straight to its buffer unless the buffer still
    // holds something read at or after this step; so does a preferred one.
    // Otherwise a new root (and, when pinned, a copy into the buffer at the end).
    void new_or_pinned(const Node &nd, int s)
    {
        std::string pin = pin_of(g_.tensor(nd.output));
        std::string target = !pin.empty() ? pin : preferred_.count(nd.output) ? preferred_.at(nd.output) : "";
        if (!target.empty() && dead_after(target, whole(target), s - 1)) {
            set_region(nd.output, {target, 0, false});
            return;
        }
        set_region(nd.output, {nd.output, 0, false});
        roots_.push_back(nd.output);
        if (!pin.empty()) sp_.copies.push_back({nd.output, pin});
    }

    void scratch(const Node &nd, int s)
    {
        const OpDef &d = op_def(nd.op);
        if (!d.scratch) return;
        Inputs in;
        for (const auto &i : nd.inputs) in.push_back(&g_.tensor(i));
        int64_t bytes = d.scratch(nd, in);
        if (bytes <= 0) return;
        Allocation a;
        a.root = nd.name + "#scratch";
        a.per_token = d.scratch_per_token;
        a.size = align_up(bytes, o_.align);
        a.birth = a.death = s;
        sp_.alloc[a.root] = a;
        sp_.scratch[nd.name] = a.root;
    }

    // Every new root lives from its producer to the last read of any tensor sharing it.
    void allocations()
    {
        std::unordered_map<std::string, int> death;  // root -> the last read of any tensor in it
        for (const auto &[u, ru] : sp_.region) {
            auto [it, fresh] = death.emplace(ru.root, sp_.last_use.at(u));
            if (!fresh) it->second = std::max(it->second, sp_.last_use.at(u));
        }
        for (const auto &t : roots_) {
            const Tensor &tt = g_.tensor(t);
            Allocation a;
            a.root = t;
            a.per_token = shape_has_tokens(tt.shape);
            a.size = align_up(tensor_bytes(tt), o_.align);
            a.birth = step_of_.at(g_.producer(t)->name);
            a.death = std::max(a.birth, death.count(t) ? death.at(t) : a.birth);
            sp_.alloc[t] = a;
        }
    }

    const Graph &g_;
    const std::vector<std::string> &order_;
    const PlanOptions &o_;
    SectionPlan &sp_;
    const int n_steps_;
    Shape carry_shape_;
    std::map<std::string, int> step_of_;
    std::map<std::string, std::string> preferred_;
    std::set<std::string> updated_;                                      // inputs written into (Tensor::into)
    std::unordered_map<std::string, std::vector<std::string>> members_;  // root -> its tensors still read
    int dead_before_ = -1;
    std::vector<std::string> roots_;  // arena allocations, in birth order
};

}  // namespace

void compute_liveness(const Graph &g, const std::vector<std::string> &order, const PlanOptions &o, SectionPlan &sp)
{
    Liveness(g, order, o, sp).run();
}

}  // namespace ckc
