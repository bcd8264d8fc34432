// fuse_matmul_add — fold an ADD into the GEMM that produces one of its operands.
//
//   ADD(MATMUL(x, W), b[N])            -> MATMUL_ADD(x, W, b)        bias
//   ADD(MATMUL(x, W), r[T,N])          -> MATMUL_ADD(x, W, r)        residual
//   ADD(MATMUL_ADD(x, W, b[N]), r)     -> MATMUL_ADD(x, W, r, b)     bias + residual
//
// The kernel pre-fills the output with the addend and runs sgemm with
// beta = 1; when the planner lets the output take over the dying residual's
// memory (in place), the addend costs nothing at all. This is the seeds'
// MATMUL_ADD trick and how the residual add is folded into o_proj/down_proj.
//
// Left alone: a GEMM output read by anything besides the ADD (the sole-
// consumer rule: the product itself must disappear), or kept as a graph
// output; an ADD whose operands are both non-GEMMs.
// The fused node takes over the ADD's output tensor (name and storage), so
// consumers and section outputs are untouched.
#include "passes/match.h"
#include "passes/pass.h"

namespace ckc {

namespace {

bool is_bias_shape(const Graph &g, const std::string &t, int64_t n)
{
    return g.tensor(t).shape == Shape{n};
}

// Tries to fuse `add` using its operand `which` (0 or 1) as the GEMM product.
bool try_fuse(Graph &g, const Node &add, int which)
{
    const std::string &prod = add.inputs[which];
    const std::string &other = add.inputs[1 - which];
    const Node *mm = g.producer(prod);
    if (!mm || (mm->op != Op::MATMUL && mm->op != Op::MATMUL_ADD)) return false;
    if (g.consumers(prod).size() != 1 || g.is_output(prod) || prod == other) return false;
    const Shape &out = g.tensor(prod).shape;
    bool other_full = g.tensor(other).shape == out;
    bool other_bias = is_bias_shape(g, other, out.back());
    if (!other_full && !other_bias) return false;

    Node fused;
    fused.op = Op::MATMUL_ADD;
    fused.origin = mm->origin;
    fused.attrs = mm->attrs;  // transpose_b, alpha
    fused.inputs = {mm->inputs[0], mm->inputs[1]};
    if (mm->op == Op::MATMUL) {
        fused.inputs.push_back(other);
    } else {
        // already carries an addend: only a bias plus a full residual combine
        bool mm_has_bias = mm->inputs.size() == 3 && is_bias_shape(g, mm->inputs[2], out.back());
        if (!mm_has_bias || !other_full) return false;
        fused.inputs.push_back(other);
        fused.inputs.push_back(mm->inputs[2]);
    }
    fused.output = add.output;
    fused.name = add.name;
    std::string mm_name = mm->name, add_name = add.name;
    g.remove_node(add_name);
    // The ADD ran after both operands existed; the fused node must too. Put it
    // where the later of (GEMM, other operand's producer) was, i.e. just
    // after the GEMM unless the addend is produced later. ("" = at the end)
    std::string before = g.next_node(mm_name);
    g.remove_node(mm_name);
    if (const Node *other_prod = g.producer(other)) {
        std::string after_other = g.next_node(other_prod->name);
        if (!before.empty() && (after_other.empty() || g.runs_before(before, after_other))) before = after_other;
    }
    g.insert_node(fused, before, g.tensor(add.output).storage);
    g.remove_tensor(prod);
    return true;
}

}  // namespace

bool fuse_matmul_add(Graph &g)
{
    return rewrite_all(g, [](Graph &gr, const Node &n) {
        return n.op == Op::ADD && n.inputs.size() == 2 && (try_fuse(gr, n, 1) || try_fuse(gr, n, 0));
    });
}

}  // namespace ckc
