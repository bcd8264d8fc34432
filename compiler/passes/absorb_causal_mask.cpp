// absorb_causal_mask — a constant causal mask becomes the CAUSAL_MASK op.
//
// Recognized, with M a constant whose last two dims are [S, S] (equal to
// x's) and whose leading dims broadcast (every [S, S] slice the same):
//   MASKED_FILL(x, M, v)   M bool, true exactly above the diagonal (j > i)
//                          — nanoGPT's `masked_fill(tril == 0, -inf)`
//   WHERE(M, x, v)         M bool, true exactly on and below the diagonal
//                          — Hugging Face GPT-2's `where(causal, w, min)`
//   ADD(x, M)              M float, 0 on and below the diagonal, v above
// where v is -inf, or any value <= -1e30 (finfo.min) provided every reader of
// the result is a SOFTMAX over the last dim (where both give exactly 0).
// The mask tensor is then dead (DCE), and fuse_patterns can turn
// MATMUL -> CAUSAL_MASK -> SOFTMAX -> MATMUL into ATTENTION(causal).
//
// Left alone: masks that are not constants, not triangular (padding masks),
// or offset from the diagonal; finite fills feeding anything but softmax.
#include <cmath>

#include "passes/match.h"
#include "passes/pass.h"
#include "ir/constants.h"

namespace ckc {

namespace {

enum class Form { Above, OnOrBelow, AdditiveAbove };

// Is the constant `m` (broadcast against x [.., S, S]) the causal pattern `form`?
// For AdditiveAbove, *fill receives the value above the diagonal.
bool is_causal(Program &p, const Graph &g, const std::string &m, const Shape &x, Form form, double *fill)
{
    const Tensor &t = g.tensor(m);
    if (x.size() < 2 || t.shape.size() < 2 || t.shape.size() > x.size()) return false;
    int64_t S = x.back();
    if (x[x.size() - 2] != S || t.shape.back() != S || t.shape[t.shape.size() - 2] != S) return false;
    bool is_bool = t.dtype == DType::Bool;
    if ((form == Form::AdditiveAbove) == is_bool) return false;
    const ConstData *c = constant_value(p, t);
    if (!c) return false;
    int64_t slices = c->numel() / (S * S);
    double above = std::nan("");
    for (int64_t b = 0; b < slices; b++)
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < S; j++) {
                double v = c->v[(b * S + i) * S + j];
                switch (form) {
                case Form::Above: if ((v != 0) != (j > i)) return false; break;
                case Form::OnOrBelow: if ((v != 0) != (j <= i)) return false; break;
                case Form::AdditiveAbove:
                    if (j <= i && v != 0) return false;
                    if (j > i) {
                        if (std::isnan(above)) above = v;
                        if (v != above) return false;
                    }
                    break;
                }
            }
    if (fill) *fill = above;
    return S > 1 || form != Form::AdditiveAbove;
}

// -inf always works; a huge negative value only where softmax follows.
bool fill_ok(const Graph &g, const std::string &out, double v)
{
    if (v == -INFINITY) return true;
    if (!(v <= -1e30)) return false;
    size_t rank = g.tensor(out).shape.size();
    for (const Node *c : g.consumers(out))
        if (c->op != Op::SOFTMAX || axis_attr(*c, rank) != static_cast<int64_t>(rank) - 1) return false;
    return !g.is_output(out);
}

std::optional<double> scalar_value(Program &p, const Graph &g, const std::string &t)
{
    const Tensor &tt = g.tensor(t);
    if (shape_numel_fixed(tt.shape) != 1) return std::nullopt;
    const ConstData *c = constant_value(p, tt);
    if (!c) return std::nullopt;
    return c->v[0];
}

bool rewrite(Graph &g, const Node &n, const std::string &x)
{
    Node cm;
    cm.op = Op::CAUSAL_MASK;
    cm.inputs = {x};
    replace_node(g, n, cm);
    return true;
}

bool try_absorb(Graph &g, Program &p, const Node &n)
{
    if (g.tensor(n.output).dtype != DType::F32) return false;
    const Shape &out = g.tensor(n.output).shape;
    double fill = 0;
    if (n.op == Op::MASKED_FILL && g.tensor(n.inputs[0]).shape == out) {
        if (is_causal(p, g, n.inputs[1], out, Form::Above, nullptr) && fill_ok(g, n.output, n.f("value")))
            return rewrite(g, n, n.inputs[0]);
    }
    if (n.op == Op::WHERE && g.tensor(n.inputs[1]).shape == out) {
        auto v = scalar_value(p, g, n.inputs[2]);
        if (v && is_causal(p, g, n.inputs[0], out, Form::OnOrBelow, nullptr) && fill_ok(g, n.output, *v))
            return rewrite(g, n, n.inputs[1]);
    }
    if (n.op == Op::ADD && n.inputs.size() == 2) {
        for (int i : {1, 0}) {
            if (g.tensor(n.inputs[1 - i]).shape != out) continue;
            if (is_causal(p, g, n.inputs[i], out, Form::AdditiveAbove, &fill) && fill_ok(g, n.output, fill))
                return rewrite(g, n, n.inputs[1 - i]);
        }
    }
    return false;
}

}  // namespace

bool absorb_causal_mask(Graph &g, Program &p)
{
    return rewrite_all(g, [&p](Graph &gr, const Node &n) { return try_absorb(gr, p, n); });
}

}  // namespace ckc
