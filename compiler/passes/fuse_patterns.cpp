// fuse_patterns — linear chains of ops -> one fused op, by priority.
//
//   priority 0  MATMUL(q, k, transpose_b, alpha) -> SOFTMAX(last dim) -> MATMUL(., v)
//                 -> ATTENTION(q, k, v, scale = alpha)
//               MATMUL(q, k, transpose_b, alpha) -> CAUSAL_MASK -> SOFTMAX -> MATMUL(., v)
//                 -> ATTENTION(q, k, v, scale = alpha, causal)
//               ... -> MASKED_FILL(., off, -inf) or ADD(., m f32) -> SOFTMAX(masked) -> ...
//                 -> ATTENTION(q, k, v, mask, mask = keep | drop | add): a padding mask, read per row
//               k and v through transformers' repeat_kv (RESHAPE, EXPAND, RESHAPE of [B, KVH, S, D])
//                 -> ATTENTION(q, kv_k, kv_v, kv_groups = G): no copies of the K/V heads
//               ADD(x, b[N]) -> RELU  -> BIAS_RELU(x, b)
//               CAT(NEG(SLICE(x, D/2..)), SLICE(x, ..D/2)) on the last dim -> ROTATE_HALF(x) (RoPE)
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
#include "ir/op_rules.h"
#include "ir/symbolic.h"
#include "passes/match.h"
#include "passes/pass.h"

namespace ckc {

namespace {

// The mask a scores tensor goes through before the softmax: MASKED_FILL(scores, off, -inf) (keep = off's
// negation when off is CMP(m, eq 0) of a bool m, else drop = off) or ADD(scores, m f32): (node, mask, kind).
struct ScoreMask {
    const Node *node = nullptr;
    std::string mask, kind;
};
ScoreMask score_mask(const Graph &g, const std::string &t)
{
    ScoreMask m;
    if (const Node *mf = sole(g, t, Op::MASKED_FILL)) {
        if (!std::isinf(mf->f("value", 0.0)) || mf->f("value", 0.0) > 0) return m;
        m.node = mf;
        m.mask = mf->inputs[1];
        m.kind = "drop";
        const Node *cmp = made_by(g, m.mask, Op::CMP);
        if (cmp && cmp->inputs.size() == 1 && cmp->s("fn") == "eq" && cmp->f("scalar", 1.0) == 0.0 &&
            g.tensor(cmp->inputs[0]).dtype == DType::Bool) {
            m.mask = cmp->inputs[0];
            m.kind = "keep";
        }
    } else if (const Node *add = sole(g, t, Op::ADD)) {
        if (add->inputs.size() != 2) return m;
        const Shape &out = g.tensor(add->output).shape;
        for (int b : {1, 0})
            if (g.tensor(add->inputs[1 - b]).shape == out && g.tensor(add->inputs[b]).dtype == DType::F32) {
                m = {add, add->inputs[b], "add"};
                break;
            }
    }
    return m;
}

// Whether mask shape m broadcasts to the scores [..., Sq, Sk] of rank 4 along every dim but the keys
bool mask_fits(const Shape &m, const Shape &scores)
{
    if (scores.size() != 4 || m.empty() || m.size() > 4 || m.back() != scores.back()) return false;
    for (size_t d = 0; d + 1 < m.size(); d++) {
        int64_t md = m[m.size() - 1 - 1 - d], sd = scores[scores.size() - 2 - d];
        if (md != 1 && md != sd) return false;
    }
    return true;
}

// kv [B, KVH, S, D] and the group G when `t` = RESHAPE(EXPAND(RESHAPE(kv -> [B, KVH, 1, S, D]) -> [B, KVH, G, S,
// D]) -> [B, KVH*G, S, D]): transformers' repeat_kv, whose copies grouped-query attention reads without
std::optional<std::pair<std::string, int64_t>> repeated_kv(const Graph &g, const std::string &t)
{
    const Node *r2 = made_by(g, t, Op::RESHAPE);
    const Node *ex = r2 ? made_by(g, r2->inputs[0], Op::EXPAND) : nullptr;
    const Node *r1 = ex ? made_by(g, ex->inputs[0], Op::RESHAPE) : nullptr;
    if (!r1) return std::nullopt;
    const Shape &kv = g.tensor(r1->inputs[0]).shape, &u = g.tensor(r1->output).shape, &e = g.tensor(ex->output).shape,
                &o = g.tensor(t).shape;
    if (kv.size() != 4 || u != Shape{kv[0], kv[1], 1, kv[2], kv[3]} || e.size() != 5 ||
        e != Shape{kv[0], kv[1], e[2], kv[2], kv[3]} || o != Shape{kv[0], dim_mul(kv[1], e[2]), kv[2], kv[3]} ||
        !shape_is_static(Shape{e[2]}) || e[2] < 2)
        return std::nullopt;
    return std::make_pair(r1->inputs[0], e[2]);
}

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
    // a mask (a padding mask, transformers' 4-D one): its softmax gives 0 to a query with no key left, as the
    // kernels do; one without that rule would give NaN there
    ScoreMask mask = score_mask(g, scores);
    if (mask.node) {
        if (!sm->i("masked", 0) || !mask_fits(g.tensor(mask.mask).shape, g.tensor(scores).shape)) return false;
        scores = mask.node->inputs[mask.node->inputs[0] == mask.mask ? 1 : 0];
    }
    const Node *qk = sole(g, scores, Op::MATMUL);
    if (!qk || !qk->i("transpose_b", 0) || qk->i("transpose_a", 0)) return false;
    std::string kt = qk->inputs[1], vt = pv.inputs[1];
    const Shape &q = g.tensor(qk->inputs[0]).shape, &k = g.tensor(kt).shape, &v = g.tensor(vt).shape;
    if (q.size() < 2 || k.size() != q.size() || v != k) return false;  // per-head K and V of one shape
    if (causal && q[q.size() - 2] > k[k.size() - 2]) return false;
    int64_t groups = 1;
    auto rk = repeated_kv(g, kt), rv = repeated_kv(g, vt);
    if (q.size() == 4 && rk && rv && rk->second == rv->second &&
        g.tensor(rk->first).shape == g.tensor(rv->first).shape) {
        kt = rk->first;
        vt = rv->first;
        groups = rk->second;
    }
    Node att;
    att.op = Op::ATTENTION;
    att.inputs = {qk->inputs[0], kt, vt};
    att.attrs["scale"] = qk->f("alpha", 1.0);
    att.attrs["causal"] = int64_t(causal ? 1 : 0);
    if (groups > 1) att.attrs["kv_groups"] = groups;
    if (mask.node) {
        att.inputs.push_back(mask.mask);
        att.attrs["mask"] = mask.kind;
    }
    replace_node(g, pv, att);  // the chain, read only by its next op, dies with it (repeat_kv's copies too)
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
    int64_t H = o[1], groups = att.i("kv_groups", 1);
    std::vector<std::string> x;
    for (size_t i = 0; i < 3; i++) {  // (k and v have H / kv_groups heads; a mask stays as it is)
        auto xi = heads_of(g, att.inputs[i], i == 0 || groups == 1 ? H : H / groups);
        if (!xi) return false;
        x.push_back(*xi);
    }
    if (att.inputs.size() == 4) x.push_back(att.inputs[3]);
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

// CAT(NEG(SLICE(x, D/2..D)), SLICE(x, 0..D/2)) along the last dim -> ROTATE_HALF(x): transformers' RoPE
// (rotate_half) in one pass over x instead of two slice copies, a negation and a cat
bool rotate_half(Graph &g, const Node &cat)
{
    if (cat.op != Op::CAT || cat.inputs.size() != 2) return false;
    const Shape &o = g.tensor(cat.output).shape;
    if (o.empty() || is_sym(o.back()) || o.back() % 2 || axis_attr(cat, o.size()) != static_cast<int64_t>(o.size()) - 1 ||
        g.tensor(cat.output).dtype != DType::F32)
        return false;
    int64_t D = o.back(), h = D / 2;
    const Node *neg = sole(g, cat.inputs[0], Op::NEG);
    const Node *hi = neg ? sole(g, neg->inputs[0], Op::SLICE) : nullptr;
    const Node *lo = sole(g, cat.inputs[1], Op::SLICE);
    auto part = [&](const Node *s, int64_t start) {
        const Shape &x = g.tensor(s->inputs[0]).shape;
        return x == o && axis_attr(*s, x.size()) == static_cast<int64_t>(x.size()) - 1 && s->i("step", 1) == 1 &&
               rules::size_attr(*s, "start") == start && rules::size_attr(*s, "length") == h;
    };
    if (!hi || !lo || hi->inputs[0] != lo->inputs[0] || !part(hi, h) || !part(lo, 0)) return false;
    Node f;
    f.op = Op::ROTATE_HALF;
    f.inputs = {lo->inputs[0]};
    replace_node(g, cat, f);
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
    changed |= rewrite_all(g, rotate_half);
    return changed;
}

}  // namespace ckc
