// eliminate_reshapes — reshapes that do nothing, or that only flatten a batch
// around a GEMM, disappear.
//
//   RESHAPE/EXPAND(x) to x's own shape            -> x
//   RESHAPE(RESHAPE(x))                           -> RESHAPE(x)
//   MATMUL(RESHAPE(a), RESHAPE(b)) where the reshapes only merge / split the
//     batch dims (the last two dims unchanged)    -> RESHAPE(MATMUL(a, b))
//   MATMUL(RESHAPE(a) = [M, K], W) with W 2-D and a's leading dims
//     multiplying to M                            -> RESHAPE(MATMUL(a as [.., K], W))
//   op(RESHAPE(y)) for an elementwise op (unary, scalar, or with a [N] vector
//     along an unchanged last dim)                -> RESHAPE(op(y))
//
// torch flattens activations around every GEMM (view to [B*S, C], addmm,
// view back) and around batched matmuls ([B*H, S, D], bmm, view back). The
// GEMM rules run them on the unflattened tensors instead and push the
// reshape outwards, where it meets its inverse and both vanish: the GEMM, its
// bias ADD and the residual ADD then see one shape and fuse (MATMUL_ADD), and
// attention sees the [B, H, S, D] tensors its pattern is written in. A
// reshape of a graph input is just a view of the caller's buffer (the
// planner aliases it), so nothing is copied.
//
// An identity reshape producing a section output hands the output over to
// the node that computed its input (which then writes the caller's buffer).
//
// Left alone: other reshapes producing section outputs (they own the buffer),
// reshapes read by several nodes when sinking, and reshapes that move data
// between the dims a GEMM contracts.
#include <numeric>

#include "ir/symbolic.h"
#include "passes/match.h"
#include "passes/pass.h"

namespace ckc {

namespace {

// A reshape keeps the values in order: a tensor that now stands for a removed one takes its trace reference.
void inherit_reference(Graph &g, const std::string &to, const std::string &from)
{
    if (g.tensor(to).reference.empty()) g.tensor(to).reference = g.tensor(from).reference;
}

// n = RESHAPE(x) with x's shape is an output: x's producer writes it directly.
bool retarget_output(Graph &g, const Node &n)
{
    const std::string &x = n.inputs[0];
    const Node *p = g.producer(x);
    if (!p || g.is_output(x) || g.consumers(x).size() != 1 || g.tensor(x).storage != Storage::Activation ||
        g.tensor(x).dtype != g.tensor(n.output).dtype || potential_view(g, *p))
        return false;
    Node moved = *p;
    moved.output = n.output;
    inherit_reference(g, n.output, x);
    std::string reshape = n.name, prod = p->name;
    Storage st = g.tensor(n.output).storage;
    g.remove_node(reshape);
    std::string before = g.next_node(prod);
    g.remove_node(prod);
    g.remove_tensor(x);
    g.insert_node(moved, before, st);
    return true;
}

bool replace_by_input(Graph &g, const Node &n)
{
    if (g.is_output(n.output) || g.tensor(n.output).storage != Storage::Activation) return retarget_output(g, n);
    std::string out = n.output, in = n.inputs[0], name = n.name;
    inherit_reference(g, in, out);
    g.replace_uses(out, in);
    g.remove_node(name);
    g.remove_tensor(out);
    remove_if_dead(g, in);
    return true;
}

// A RESHAPE of `x` to `shape` inserted before node `before` (x itself when the shape is x's).
std::string reshape_to(Graph &g, const std::string &x, const Shape &shape, const std::string &before,
                       const Origin &origin)
{
    if (g.tensor(x).shape == shape) return x;
    Node r;
    r.op = Op::RESHAPE;
    r.name = g.unique_name(x + "_as");
    r.output = r.name;
    r.inputs = {x};
    r.attrs["shape"] = shape;
    r.origin = origin;
    g.insert_node(r, before);
    return r.output;
}

// Rewrites node `n` to read `inputs` (its output gets the shape these give),
// followed by a RESHAPE to n's old output shape under n's old output name.
void rewrite_through(Graph &g, const Node &n, const std::vector<std::string> &inputs)
{
    Node nn = n;
    nn.name = g.unique_name(n.name + "_nd");
    nn.output = nn.name;
    nn.inputs = inputs;
    g.insert_node(nn, n.name);
    Node back;
    back.op = Op::RESHAPE;
    back.name = g.unique_name(n.name + "_flat");
    back.output = back.name;
    back.inputs = {nn.output};
    back.attrs["shape"] = g.tensor(n.output).shape;
    back.origin = n.origin;
    g.insert_node(back, n.name);
    std::string old = n.output, old_name = n.name;
    std::vector<std::string> old_inputs = n.inputs;
    inherit_reference(g, nn.output, old);
    g.replace_uses(old, back.output);
    g.remove_node(old_name);
    g.remove_tensor(old);
    for (const auto &in : old_inputs) remove_if_dead(g, in);
}

bool rewritable(const Graph &g, const Node &n)
{
    return !g.is_output(n.output) && g.tensor(n.output).storage == Storage::Activation;
}

// The RESHAPE producing `t` if it keeps the last two dims (only the batch changes).
const Node *batch_reshape(const Graph &g, const std::string &t)
{
    const Node *r = made_by(g, t, Op::RESHAPE);
    if (!r) return nullptr;
    const Shape &from = g.tensor(r->inputs[0]).shape, &to = g.tensor(t).shape;
    if (from.size() < 2 || to.size() < 2 || from == to) return nullptr;
    if (from[from.size() - 1] != to[to.size() - 1] || from[from.size() - 2] != to[to.size() - 2]) return nullptr;
    return r;
}

bool unflatten_matmul(Graph &g, const Node &mm)
{
    if ((mm.op != Op::MATMUL && mm.op != Op::MATMUL_ADD) || !rewritable(g, mm)) return false;
    if (mm.op == Op::MATMUL_ADD && g.tensor(mm.inputs[2]).shape.size() != 1) return false;  // a full addend is flat
    const Shape &bs = g.tensor(mm.inputs[1]).shape;
    const Node *ra = made_by(g, mm.inputs[0], Op::RESHAPE);
    if (!ra) return false;
    const Shape &a = g.tensor(ra->inputs[0]).shape, &flat = g.tensor(mm.inputs[0]).shape;
    std::vector<std::string> inputs = mm.inputs;
    if (bs.size() == 2 && flat.size() == 2) {
        // shared B: rows M = a product of a's leading dims, the rest is K
        int64_t rows = 1;
        size_t k = 0;
        while (k < a.size() && rows != flat[0] && (is_sym(rows) || is_sym(flat[0]) || rows < flat[0]))
            rows = dim_mul(rows, a[k++]);
        if (rows != flat[0] || k < 2) return false;  // no batch to recover
        Shape target(a.begin(), a.begin() + static_cast<long>(k));
        target.push_back(flat[1]);
        inputs[0] = reshape_to(g, ra->inputs[0], target, mm.name, ra->origin);
    } else {
        if (!batch_reshape(g, mm.inputs[0])) return false;
        inputs[0] = ra->inputs[0];
        if (bs.size() > 2) {  // a batched B must un-flatten to the same batch dims
            const Node *rb = batch_reshape(g, mm.inputs[1]);
            if (!rb) return false;
            const Shape &b0 = g.tensor(rb->inputs[0]).shape;
            if (b0.size() != a.size() || !std::equal(a.begin(), a.end() - 2, b0.begin())) return false;
            inputs[1] = rb->inputs[0];
        }
    }
    rewrite_through(g, mm, inputs);
    return true;
}

// op(RESHAPE(y), [v]) -> RESHAPE(op(y, [v])) for elementwise ops.
bool sink(Graph &g, const Node &n)
{
    if (!op_def(n.op).elementwise || !rewritable(g, n)) return false;
    const Node *r = sole(g, n.inputs[0], Op::RESHAPE);
    if (!r) return false;
    const Shape &y = g.tensor(r->inputs[0]).shape, &out = g.tensor(n.output).shape;
    if (g.tensor(n.inputs[0]).shape != out) return false;
    if (n.inputs.size() == 2) {  // the other operand: a scalar, or a vector along an unchanged last dim
        const Shape &v = g.tensor(n.inputs[1]).shape;
        bool scalar = shape_numel_fixed(v) == 1 && v.size() <= 1;
        bool vector = v.size() == 1 && !y.empty() && y.back() == out.back() && v[0] == out.back();
        if (!scalar && !vector) return false;
    }
    std::vector<std::string> inputs = n.inputs;
    inputs[0] = r->inputs[0];
    rewrite_through(g, n, inputs);
    return true;
}

bool rewrite(Graph &g, const Node &n)
{
    if ((n.op == Op::RESHAPE || n.op == Op::EXPAND) && g.tensor(n.inputs[0]).shape == g.tensor(n.output).shape &&
        replace_by_input(g, n))
        return true;
    if (n.op == Op::RESHAPE) {
        if (const Node *inner = made_by(g, n.inputs[0], Op::RESHAPE)) {
            std::string mid = n.inputs[0];
            g.set_input(n.name, 0, inner->inputs[0]);
            remove_if_dead(g, mid);
            return true;
        }
    }
    return unflatten_matmul(g, n) || sink(g, n);
}

}  // namespace

bool eliminate_reshapes(Graph &g)
{
    return rewrite_all(g, rewrite);
}

}  // namespace ckc
