// absorb_blas — work that sgemm does for free moves into the GEMM's flags.
//
//   MATMUL(a, TRANSPOSE(b) of the last two dims)     -> MATMUL(a, b, transpose_b)
//   MATMUL(TRANSPOSE(a) of the last two dims, b)     -> MATMUL(a, b, transpose_a)
//       (the backward's weight gradients, x^T @ dy: no transpose copy)
//   MATMUL(a, W) with W a 2-D constant [K, N]        -> MATMUL(a, W^T, transpose_b)
//       (W^T is the same file tensor, transposed when it is loaded: the
//        nn.Linear layout whose rows CblasTrans streams, seeds' note on
//        weight layout; GPT-2 Conv1D / addmm weights take this path)
//   MUL/DIV(MATMUL(..), s) and MATMUL(MUL/DIV(a, s), ..) -> MATMUL(.., alpha *= s or /= s)
//       (a 0-d constant operand counts as a scalar)
//   TRANSPOSE(MATMUL(a, b)) of the last two dims, a section output
//                                                    -> MATMUL(b, a) with both flags flipped: (AB)^T = B^T A^T
//       (a training graph's weight gradients, computed as dW^T and returned transposed)
//   PERMUTE(PERMUTE(x)) that cancel                  -> x
//       (a backward transposing back a transpose its forward saved)
//
// Must run before constant folding, which would otherwise materialize the
// transposes. Left alone: a transpose that is not of the last two dims, a
// transposed / scaled value something else also reads (sole-consumer rule), a
// GEMM whose product is a section output, B already transposed.
#include <algorithm>

#include "ir/op_rules.h"
#include "passes/match.h"
#include "passes/pass.h"
#include "ir/constants.h"

namespace ckc {

namespace {

bool last_two_swap(const Graph &g, const Node &t)
{
    size_t r = g.tensor(t.inputs[0]).shape.size();
    if (r < 2) return false;
    if (t.op == Op::TRANSPOSE) {
        int64_t a = axis_attr(t, r, "dim0"), b = axis_attr(t, r, "dim1");
        return std::min(a, b) == static_cast<int64_t>(r) - 2 && std::max(a, b) == static_cast<int64_t>(r) - 1;
    }
    if (t.op == Op::PERMUTE) {
        const auto &p = t.ints("perm");
        for (size_t i = 0; i + 2 < r; i++)
            if (p[i] != static_cast<int64_t>(i)) return false;
        return p[r - 2] == static_cast<int64_t>(r) - 1 && p[r - 1] == static_cast<int64_t>(r) - 2;
    }
    return false;
}

// Operand `which` (0: A, 1: B) read through a transpose of its last two dims -> the GEMM's transpose flag.
bool absorb_transpose(Graph &g, const Node &mm, size_t which)
{
    const char *flag = which == 0 ? "transpose_a" : "transpose_b";
    if (mm.i(flag, 0)) return false;
    const Node *t = g.producer(mm.inputs[which]);
    if (!t || (t->op != Op::TRANSPOSE && t->op != Op::PERMUTE) || !last_two_swap(g, *t)) return false;
    if (g.is_output(mm.inputs[which])) return false;
    // other readers of the transpose keep it; this GEMM reads the original
    std::string src = t->inputs[0], name = mm.name, tr = mm.inputs[which];
    g.set_input(name, which, src);
    g.edit(name).attrs[flag] = int64_t(1);
    remove_if_dead(g, tr);
    return true;
}

bool pretranspose(Graph &g, const Node &mm)
{
    if (mm.i("transpose_b", 0)) return false;
    const Tensor &w = g.tensor(mm.inputs[1]);
    if (w.storage != Storage::Weight || w.shape.size() != 2 || w.source.parts.size() != 1 || w.source.transposed ||
        w.dtype != DType::F32)
        return false;
    std::string tname = w.name + ".T";
    if (!g.has_tensor(tname)) {
        Tensor t = w;
        t.name = tname;
        t.shape = {w.shape[1], w.shape[0]};
        t.source.transposed = true;  // part_shapes stay as in the file
        g.add_tensor(t);
    }
    std::string name = mm.name;
    g.set_input(name, 1, tname);
    g.edit(name).attrs["transpose_b"] = int64_t(1);
    return true;
}

// s when `n` is x * s or x / s (then 1 / s) with a scalar s: an attribute or a 0-d constant.
std::optional<double> scale_of(const Graph &g, Program &p, const Node &n, std::string &x)
{
    if (n.op != Op::MUL && n.op != Op::DIV) return std::nullopt;
    std::optional<double> s;
    if (n.inputs.size() == 1) {
        s = scalar_of(n, n.op);
        x = n.inputs[0];
    } else {
        for (int i : {1, 0}) {
            if (n.op == Op::DIV && i == 0) break;  // s / x is not a scale
            const Tensor &t = g.tensor(n.inputs[i]);
            const ConstData *c = shape_numel_fixed(t.shape) == 1 ? constant_value(p, t) : nullptr;
            const Tensor &other = g.tensor(n.inputs[1 - i]);
            if (c && other.shape == g.tensor(n.output).shape) {
                s = c->v[0];
                x = n.inputs[1 - i];
                break;
            }
        }
    }
    if (!s || *s == 0.0 || !std::isfinite(*s)) return std::nullopt;
    return n.op == Op::DIV ? 1.0 / *s : *s;
}

void scale_alpha(Graph &g, const std::string &mm, double s)
{
    Node &m = g.edit(mm);
    m.attrs["alpha"] = m.f("alpha", 1.0) * s;
}

bool absorb_output_scale(Graph &g, Program &p, const Node &mm)
{
    if (g.is_output(mm.output) || g.consumers(mm.output).size() != 1) return false;
    const Node &sc = *g.consumers(mm.output)[0];
    std::string x;
    auto s = scale_of(g, p, sc, x);
    if (!s || x != mm.output || g.tensor(sc.output).storage != Storage::Activation || g.is_output(sc.output))
        return false;
    std::string mm_name = mm.name, out = sc.output, sc_name = sc.name;
    std::vector<std::string> sc_inputs = sc.inputs;
    scale_alpha(g, mm_name, *s);
    g.replace_uses(out, g.node(mm_name)->output);
    g.remove_node(sc_name);
    g.remove_tensor(out);
    for (const auto &in : sc_inputs) remove_if_dead(g, in);
    return true;
}

bool absorb_input_scale(Graph &g, Program &p, const Node &mm)
{
    for (size_t i = 0; i < 2; i++) {
        const std::string &in = mm.inputs[i];
        const Node *sc = g.producer(in);
        if (!sc || g.is_output(in) || g.consumers(in).size() != 1) continue;
        std::string x;
        auto s = scale_of(g, p, *sc, x);
        if (!s || g.tensor(x).shape != g.tensor(in).shape) continue;
        std::string mm_name = mm.name;
        g.set_input(mm_name, i, x);
        scale_alpha(g, mm_name, *s);
        remove_if_dead(g, in);
        return true;
    }
    return false;
}

// A transpose of a plain product (no addend, operands of one rank: no broadcast 2-D operand) that the section
// returns -> the product of the swapped operands, written in the transposed layout. (Inside a section the
// transpose stays: attention's patterns are written with it.)
bool absorb_output_transpose(Graph &g, const Node &t)
{
    if (!g.is_output(t.output) || !last_two_swap(g, t)) return false;
    const Node *mm = sole(g, t.inputs[0], Op::MATMUL);
    if (!mm || mm->inputs.size() != 2) return false;
    const Shape &a = g.tensor(mm->inputs[0]).shape, &b = g.tensor(mm->inputs[1]).shape;
    if (a.size() != b.size() || !std::equal(a.begin(), a.end() - 2, b.begin())) return false;
    Node n = *mm;
    n.inputs = {mm->inputs[1], mm->inputs[0]};
    n.attrs["transpose_a"] = int64_t(mm->i("transpose_b", 0) ? 0 : 1);
    n.attrs["transpose_b"] = int64_t(mm->i("transpose_a", 0) ? 0 : 1);
    n.origin = t.origin;
    replace_node(g, t, n);  // the old product dies with the transpose (its only reader)
    return true;
}

bool compose_permutes(Graph &g, const Node &outer)
{
    const Node *inner = g.producer(outer.inputs[0]);
    if (!inner || (inner->op != Op::PERMUTE && inner->op != Op::TRANSPOSE)) return false;
    size_t r = g.tensor(inner->inputs[0]).shape.size();
    std::vector<int> pi = rules::perm_of(*inner, r), po = rules::perm_of(outer, r);
    bool identity = true;
    for (size_t i = 0; i < r; i++) identity = identity && pi[static_cast<size_t>(po[i])] == static_cast<int>(i);
    // (other compositions stay two nodes: a GEMM absorbs a last-two-dims transpose, not a composed permute)
    if (!identity || g.is_output(outer.output)) return false;  // an output owns its buffer: left as it is
    std::string x = inner->inputs[0], mid = outer.inputs[0], out = outer.output, name = outer.name;
    g.replace_uses(out, x);
    g.remove_node(name);
    g.remove_tensor(out);
    remove_if_dead(g, mid);
    return true;
}

}  // namespace

bool absorb_blas(Graph &g, Program &p)
{
    return rewrite_all(g, [&p](Graph &gr, const Node &n) {
        if (n.op == Op::PERMUTE || n.op == Op::TRANSPOSE) return compose_permutes(gr, n) || absorb_output_transpose(gr, n);
        return n.op == Op::MATMUL && (absorb_transpose(gr, n, 1) || absorb_transpose(gr, n, 0) || pretranspose(gr, n) ||
                                      absorb_output_scale(gr, p, n) || absorb_input_scale(gr, p, n));
    });
}

}  // namespace ckc
