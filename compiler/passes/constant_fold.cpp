// constant_fold — nodes whose inputs are all constants are evaluated now.
//
// The node's evaluator (OpDef::eval, ir/eval.cpp) computes the value, which
// becomes a new constant tensor, named after the node's first input and the op
// (const.NODE for an op without inputs), (written to model.weights.safetensors, or
// inlined in model.c when it is not float32) and the node disappears; dead
// inputs go in DCE. This is how a causal mask built from arange / tril / a
// registered buffer becomes one constant that absorb_causal_mask can
// recognize, and why the mask ops (ARANGE, CMP, CAST, WHERE, TRIL) run as kernels
// only on run-time data or sizes (an attention_mask input, a symbolic length), and
// the fold-only op (FULL) needs none: one reaching codegen is reported as an error.
//
// A fold-only op producing a section output (a constant the graph returns)
// folds into a constant COPYed to the output's buffer.
//
// Left alone: other section outputs, nodes without an evaluator, and results
// much larger than their inputs unless the op is fold-only (folding an EXPAND
// of a bias would only inflate the weights file).
#include <fmt/format.h>

#include "passes/match.h"
#include "passes/pass.h"
#include "support/util.h"
#include "ir/constants.h"

namespace ckc {

namespace {

constexpr int64_t kSmall = 1 << 16;  // results up to this many elements always fold

bool try_fold(Graph &g, Program &p, const Node &n)
{
    const OpDef &d = op_def(n.op);
    bool pinned = g.is_output(n.output) || g.tensor(n.output).storage != Storage::Activation;
    if (!d.eval || (pinned && !d.fold_only)) return false;
    std::vector<const ConstData *> in;
    int64_t largest = 0;
    for (const auto &i : n.inputs) {
        const Tensor &t = g.tensor(i);
        if (t.storage != Storage::Weight) return false;
        largest = std::max(largest, shape_numel_fixed(t.shape));
    }
    const Tensor &out_t = g.tensor(n.output);
    if (!shape_is_static(out_t.shape)) return false;
    int64_t out_n = shape_numel_fixed(out_t.shape);
    if (!d.fold_only && out_n > kSmall && out_n > largest) return false;
    for (const auto &i : n.inputs) {
        const ConstData *c = constant_value(p, g.tensor(i));
        if (!c) return false;
        in.push_back(c);
    }
    ConstData out;
    out.dtype = out_t.dtype;
    out.shape = out_t.shape;
    out.v.assign(static_cast<size_t>(out_n), 0.0);
    if (!d.eval(n, in, out)) return false;
    std::string old = n.output, name = n.name;
    // named after the first input and the op ("model.layers.3.norm.weight.add" for Gemma's 1 + w), so
    // that a value derived from a layer's weight keeps the layer in its name and the layers still fold
    std::string base = n.inputs.empty() ? "const." + name : fmt::format("{}.{}", n.inputs[0], to_lower(op_name(n.op)));
    std::string c = add_constant(p, g, base, std::move(out));
    if (pinned) {  // the caller's buffer still receives the value
        Node copy;
        copy.op = Op::COPY;
        copy.inputs = {c};
        replace_node(g, n, copy);
        return true;
    }
    g.replace_uses(old, c);
    std::vector<std::string> inputs = n.inputs;
    g.remove_node(name);
    g.remove_tensor(old);
    for (const auto &i : inputs) remove_if_dead(g, i);
    return true;
}

}  // namespace

bool constant_fold(Graph &g, Program &p)
{
    return rewrite_all(g, [&p](Graph &gr, const Node &n) { return try_fold(gr, p, n); });
}

}  // namespace ckc
