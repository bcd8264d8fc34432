// fuse_patterns — linear chains of ops -> one fused op, by priority.
//
//   priority 0  MATMUL(q, k, transpose_b, alpha) -> SOFTMAX(last dim) -> MATMUL(., v)
//                 -> ATTENTION(q, k, v, scale = alpha)
//               MATMUL(q, k, transpose_b, alpha) -> CAUSAL_MASK -> SOFTMAX -> MATMUL(., v)
//                 -> ATTENTION(q, k, v, scale = alpha, causal)
//               ADD(x, b[N]) -> RELU  -> BIAS_RELU(x, b)
//               ATTENTION over TRANSPOSE(RESHAPE(x [B,S,H*D]) -> [B,S,H,D], 1, 2) inputs whose
//               output goes back through TRANSPOSE(1, 2) + RESHAPE to [B,S,H*D]
//                 -> ATTENTION(xq, xk, xv, heads = H) on the [B,S,H*D] tensors directly:
//               the kernel addresses heads by stride, so the four head transposes
//               (copies) vanish, and q/k/v may stay column views of the QKV GEMM
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
#include "ir/symbolic.h"
#include "passes/match.h"
#include "passes/pass.h"

namespace ckc {

namespace {

bool attention(Graph &g, const Node &pv)
{
    if (pv.op != Op::MATMUL || pv.i("transpose_b", 0) || pv.i("transpose_a", 0) || pv.f("alpha", 1.0) != 1.0)
        return false;
    const Node *sm = sole(g, pv.inputs[0], Op::SOFTMAX);
    if (!sm) return false;
    size_t rank = g.tensor(sm->output).shape.size();
    if (axis_attr(*sm, rank) != static_cast<int64_t>(rank) - 1) return false;
    std::string scores = sm->inputs[0];
    bool causal = false;
    if (const Node *cm = sole(g, scores, Op::CAUSAL_MASK)) {
        causal = true;
        scores = cm->inputs[0];
    }
    const Node *qk = sole(g, scores, Op::MATMUL);
    if (!qk || !qk->i("transpose_b", 0) || qk->i("transpose_a", 0)) return false;
    const Shape &q = g.tensor(qk->inputs[0]).shape, &k = g.tensor(qk->inputs[1]).shape, &v = g.tensor(pv.inputs[1]).shape;
    if (q.size() < 2 || k.size() != q.size() || v != k) return false;  // per-head K and V of one shape
    if (causal && q[q.size() - 2] > k[k.size() - 2]) return false;
    Node att;
    att.op = Op::ATTENTION;
    att.inputs = {qk->inputs[0], qk->inputs[1], pv.inputs[1]};
    att.attrs["scale"] = qk->f("alpha", 1.0);
    att.attrs["causal"] = int64_t(causal ? 1 : 0);
    replace_node(g, pv, att);  // the chain, read only by its next op, dies with it
    return true;
}

// x when `t` = TRANSPOSE(RESHAPE(x [B,S,C] -> [B,S,H,D]), 1, 2), each step read only once.
std::optional<std::string> heads_of(const Graph &g, const std::string &t, int64_t H)
{
    const Node *tr = sole(g, t, Op::TRANSPOSE);
    if (!tr) return std::nullopt;
    const Shape &s4 = g.tensor(tr->inputs[0]).shape;
    if (s4.size() != 4 || s4[2] != H || std::min(axis_attr(*tr, 4, "dim0"), axis_attr(*tr, 4, "dim1")) != 1 ||
        std::max(axis_attr(*tr, 4, "dim0"), axis_attr(*tr, 4, "dim1")) != 2)
        return std::nullopt;
    const Node *rs = sole(g, tr->inputs[0], Op::RESHAPE);
    if (!rs) return std::nullopt;
    const Shape &x = g.tensor(rs->inputs[0]).shape;
    if (x != Shape{s4[0], s4[1], dim_mul(s4[2], s4[3])}) return std::nullopt;
    return rs->inputs[0];
}

bool attention_heads(Graph &g, const Node &att)
{
    if (att.op != Op::ATTENTION || att.i("heads", 0) != 0) return false;
    const Shape &o = g.tensor(att.output).shape;
    if (o.size() != 4) return false;
    int64_t H = o[1];
    std::vector<std::string> x;
    for (const auto &in : att.inputs) {
        auto xi = heads_of(g, in, H);
        if (!xi) return false;
        x.push_back(*xi);
    }
    const Node *tr = only_reader(g, att.output, Op::TRANSPOSE);
    if (!tr || std::min(axis_attr(*tr, 4, "dim0"), axis_attr(*tr, 4, "dim1")) != 1 ||
        std::max(axis_attr(*tr, 4, "dim0"), axis_attr(*tr, 4, "dim1")) != 2)
        return false;
    const Node *rs = only_reader(g, tr->output, Op::RESHAPE);
    if (!rs || g.tensor(rs->output).shape != Shape{o[0], o[2], dim_mul(o[1], o[3])}) return false;
    Node fused;
    fused.op = Op::ATTENTION;
    fused.inputs = x;
    fused.attrs = att.attrs;
    fused.attrs["heads"] = H;
    fused.origin = att.origin;
    replace_node(g, *rs, fused);  // the transposes, reshapes and the per-head attention die with it
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
        replace_node(g, relu, f);
        return true;
    }
    return false;
}

}  // namespace

bool fuse_patterns(Graph &g)
{
    bool changed = rewrite_all(g, attention);
    changed |= rewrite_all(g, attention_heads);
    changed |= rewrite_all(g, bias_relu);
    return changed;
}

}  // namespace ckc
