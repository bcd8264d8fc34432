// fuse_dags — subgraphs whose paths fork and meet again become one op.
//
// The chain matcher (fuse_patterns) cannot see these: a value fans out and
// the branches recombine, so no intermediate has a single consumer chain.
// Each pattern is matched from its last node backwards; every interior
// value must be read only inside the pattern.
//
//   GELU (tanh):  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//                 8 nodes (nanoGPT / HF NewGELU) -> GELU(x, gelu_tanh)
//   softmax:      e = exp(s - max(s, d, keepdim)); e / sum(e, d, keepdim)
//                 (also without the max) -> SOFTMAX(s, d)
//                 — the hand-written attention softmax the seeds left
//                 unsolved; once it is one SOFTMAX the attention chain
//                 fuses like F.softmax.
//
// Left alone: the same shapes with other constants, reductions over a
// different axis or without keepdim, interior values read elsewhere.
#include <set>

#include "passes/match.h"
#include "passes/pass.h"

namespace ckc {

namespace {

// `t` made by `op` and read only by nodes in `inside`.
const Node *interior(const Graph &g, const std::string &t, Op op, const std::set<std::string> &inside)
{
    const Node *p = made_by(g, t, op);
    if (!p || g.is_output(t)) return nullptr;
    for (const Node *c : g.consumers(t))
        if (!inside.count(c->name)) return nullptr;
    return p;
}

// x * s (either input order for a two-input MUL by a scalar attribute only).
std::optional<std::string> times(const Node &n, double s)
{
    auto v = scalar_of(n, Op::MUL);
    if (v && near(*v, s)) return n.inputs[0];
    return std::nullopt;
}

bool gelu_tanh(Graph &g, const Node &out)
{
    // out = MUL(half, a1) with half = x * 0.5 and a1 = tanh(..) + 1
    if (out.op != Op::MUL || out.inputs.size() != 2) return false;
    for (int h : {0, 1}) {
        std::set<std::string> in = {out.name};
        const Node *half = g.producer(out.inputs[h]);
        const Node *a1 = g.producer(out.inputs[1 - h]);
        if (!half || !a1) continue;
        auto x = times(*half, 0.5);
        auto one = scalar_of(*a1, Op::ADD);
        if (!x || !one || !near(*one, 1.0)) continue;
        in.insert(half->name);
        in.insert(a1->name);
        const Node *th = interior(g, a1->inputs[0], Op::TANH, {a1->name});
        if (!th || !interior(g, out.inputs[h], Op::MUL, in) || !interior(g, out.inputs[1 - h], Op::ADD, in)) continue;
        const Node *u = interior(g, th->inputs[0], Op::MUL, {th->name});
        if (!u || !times(*u, CK_GELU_TANH_C)) continue;
        const Node *v = interior(g, u->inputs[0], Op::ADD, {u->name});
        if (!v || v->inputs.size() != 2) continue;
        int xi = v->inputs[0] == *x ? 0 : v->inputs[1] == *x ? 1 : -1;
        if (xi < 0) continue;
        const Node *w = interior(g, v->inputs[1 - xi], Op::MUL, {v->name});
        if (!w || !times(*w, CK_GELU_TANH_A)) continue;
        const Node *p3 = interior(g, w->inputs[0], Op::POW, {w->name});
        if (!p3 || p3->inputs[0] != *x || !near(p3->f("exponent", 0), 3.0)) continue;
        Node gelu;
        gelu.op = Op::GELU;
        gelu.inputs = {*x};
        gelu.attrs["act"] = std::string("gelu_tanh");
        replace_node(g, out, gelu);  // the interior, read only inside, dies with it
        return true;
    }
    return false;
}

bool softmax(Graph &g, const Node &out)
{
    // out = DIV(e, z), z = REDUCE_SUM(e, d, keepdim), e = EXP(s - REDUCE_MAX(s, d, keepdim)) or EXP(s)
    if (out.op != Op::DIV || out.inputs.size() != 2) return false;
    const std::string &e = out.inputs[0];
    const Node *z = made_by(g, out.inputs[1], Op::REDUCE_SUM);
    if (!z || z->inputs[0] != e || !z->i("keepdim", 0) || g.consumers(out.inputs[1]).size() != 1) return false;
    std::set<std::string> in = {out.name, z->name};
    const Node *ex = interior(g, e, Op::EXP, in);
    if (!ex) return false;
    size_t rank = g.tensor(e).shape.size();
    int64_t axis = axis_attr(*z, rank);
    std::string s = ex->inputs[0];
    if (const Node *sub = interior(g, s, Op::SUB, {ex->name}); sub && sub->inputs.size() == 2) {
        const Node *mx = made_by(g, sub->inputs[1], Op::REDUCE_MAX);
        if (mx && mx->inputs[0] == sub->inputs[0] && mx->i("keepdim", 0) && axis_attr(*mx, rank) == axis &&
            g.consumers(sub->inputs[1]).size() == 1 && !g.is_output(sub->inputs[1])) {
            s = sub->inputs[0];
        }
    }
    if (g.tensor(s).shape != g.tensor(out.output).shape) return false;
    Node sm;
    sm.op = Op::SOFTMAX;
    sm.inputs = {s};
    sm.attrs["axis"] = axis;
    replace_node(g, out, sm);
    return true;
}

}  // namespace

bool fuse_dags(Graph &g)
{
    return rewrite_all(g, [](Graph &gr, const Node &n) { return gelu_tanh(gr, n) || softmax(gr, n); });
}

}  // namespace ckc
