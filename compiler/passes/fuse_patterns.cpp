// fuse_patterns — linear chains of ops -> one fused op, by priority.
//
//   priority 0  MATMUL(q, k, transpose_b, alpha) -> SOFTMAX(last dim) -> MATMUL(., v)
//                 -> ATTENTION(q, k, v, scale = alpha)
//               MATMUL(q, k, transpose_b, alpha) -> CAUSAL_MASK -> SOFTMAX -> MATMUL(., v)
//                 -> ATTENTION(q, k, v, scale = alpha, causal)
//               ADD(x, b[N]) -> RELU  -> BIAS_RELU(x, b)
//   priority 1  (MATMUL + ADD: the fuse_matmul_add pass, which runs next)
//
// The sole-consumer rule: every value inside a chain must be read only by the
// next op of the chain (and not be a section output), since fusing removes
// it. Higher-priority patterns are matched over the whole graph first, so an
// ADD -> RELU becomes BIAS_RELU before MATMUL_ADD could claim the ADD.
//
// Left alone: attention whose scores are read elsewhere (e.g. returned
// attention weights), q @ k without transpose_b (absorb_blas had no
// transpose to absorb), v with a different head size, softmax over another dim.
#include "passes/match.h"
#include "passes/pass.h"

namespace ckc {

namespace {

void replace_chain(Graph &g, const Node &last, Node fused, const std::vector<std::string> &interior)
{
    fused.name = last.name;
    fused.output = last.output;
    fused.origin = last.origin;
    Storage st = g.tensor(last.output).storage;
    int at = g.node_index(last.name);
    g.remove_node(last.name);
    std::string before = at < static_cast<int>(g.nodes().size()) ? g.nodes()[at].name : "";
    g.insert_node(fused, before, st);
    for (const auto &name : interior) {
        std::string out = g.node(name)->output;
        g.remove_node(name);
        g.remove_tensor(out);
    }
}

bool attention(Graph &g, const Node &pv)
{
    if (pv.op != Op::MATMUL || pv.i("transpose_b", 0) || pv.f("alpha", 1.0) != 1.0) return false;
    const Node *sm = sole(g, pv.inputs[0], Op::SOFTMAX);
    if (!sm) return false;
    size_t rank = g.tensor(sm->output).shape.size();
    if (axis_attr(*sm, rank) != static_cast<int64_t>(rank) - 1) return false;
    std::vector<std::string> interior = {sm->name};
    std::string scores = sm->inputs[0];
    bool causal = false;
    if (const Node *cm = sole(g, scores, Op::CAUSAL_MASK)) {
        causal = true;
        interior.push_back(cm->name);
        scores = cm->inputs[0];
    }
    const Node *qk = sole(g, scores, Op::MATMUL);
    if (!qk || !qk->i("transpose_b", 0)) return false;
    interior.push_back(qk->name);
    const Shape &q = g.tensor(qk->inputs[0]).shape, &k = g.tensor(qk->inputs[1]).shape, &v = g.tensor(pv.inputs[1]).shape;
    if (q.size() < 2 || k.size() != q.size() || v != k) return false;  // per-head K and V of one shape
    if (causal && q[q.size() - 2] > k[k.size() - 2]) return false;
    Node att;
    att.op = Op::ATTENTION;
    att.inputs = {qk->inputs[0], qk->inputs[1], pv.inputs[1]};
    att.attrs["scale"] = qk->f("alpha", 1.0);
    att.attrs["causal"] = int64_t(causal ? 1 : 0);
    replace_chain(g, pv, att, interior);
    return true;
}

bool bias_relu(Graph &g, const Node &relu)
{
    if (relu.op != Op::RELU) return false;
    const Node *add = sole(g, relu.inputs[0], Op::ADD);
    if (!add || add->inputs.size() != 2) return false;
    const Shape &out = g.tensor(relu.output).shape;
    for (int b : {1, 0}) {
        if (g.tensor(add->inputs[b]).shape != Shape{out.back()} || g.tensor(add->inputs[1 - b]).shape != out) continue;
        Node f;
        f.op = Op::BIAS_RELU;
        f.inputs = {add->inputs[1 - b], add->inputs[b]};
        replace_chain(g, relu, f, {add->name});
        return true;
    }
    return false;
}

bool run_priority(Graph &g, bool (*pattern)(Graph &, const Node &))
{
    bool changed = false, again = true;
    while (again) {
        again = false;
        for (const Node &n0 : g.nodes()) {
            Node n = n0;
            if (pattern(g, n)) {
                changed = again = true;
                break;
            }
        }
    }
    return changed;
}

}  // namespace

bool fuse_patterns(Graph &g)
{
    bool changed = run_priority(g, attention);
    changed |= run_priority(g, bias_relu);
    return changed;
}

}  // namespace ckc
