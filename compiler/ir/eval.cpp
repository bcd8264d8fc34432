// eval.cpp — reference evaluators for constant folding (see eval.h).
// Written for clarity, not speed: constants are small (masks, position ids,
// scalars) or folded once at compile time.
#include "ir/eval.h"
#include "ir/op_rules.h"
#include "ir/symbolic.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ck_quant.h"
#include "support/error.h"

namespace ckc {

namespace {

Shape aligned(const Shape &s, size_t rank)
{
    Shape out(rank - std::min(rank, s.size()), 1);
    out.insert(out.end(), s.begin(), s.end());
    return out;
}

// Flat index into `in` (broadcast to `out_shape`) for the flat output index i.
struct Broadcaster {
    Shape out;
    std::vector<int64_t> strides;  // per output dim; 0 where broadcast
    Broadcaster(const Shape &in_shape, const Shape &out_shape) : out(out_shape), strides(out_shape.size(), 0)
    {
        Shape a = aligned(in_shape, out_shape.size());
        int64_t st = 1;
        for (size_t d = out_shape.size(); d-- > 0;) {
            strides[d] = a[d] == 1 ? 0 : st;
            st *= a[d];
        }
    }
    int64_t operator()(int64_t i) const
    {
        int64_t idx = 0;
        for (size_t d = out.size(); d-- > 0;) {
            int64_t c = out[d] ? i % out[d] : 0;
            i = out[d] ? i / out[d] : 0;
            idx += c * strides[d];
        }
        return idx;
    }
};

void split_axis(const Shape &s, int64_t axis, int64_t &outer, int64_t &n, int64_t &inner)
{
    outer = inner = 1;
    for (int64_t i = 0; i < axis; i++) outer *= s[i];
    n = s.empty() ? 1 : s[axis];
    for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); i++) inner *= s[i];
}

int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + static_cast<int64_t>(rank) : a; }

double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(CK_GELU_TANH_C * (x + CK_GELU_TANH_A * x * x * x))); }

}  // namespace

double round_to_dtype(double v, DType t)
{
    switch (t) {
    case DType::F32: return static_cast<double>(static_cast<float>(v));
    case DType::I32:
    case DType::I64: return std::trunc(v);
    case DType::Bool: return v != 0 ? 1.0 : 0.0;
    case DType::F16: return ck_fp16_to_fp32(ck_fp32_to_fp16(static_cast<float>(v)));
    case DType::BF16: return ck_bf16_to_fp32(ck_fp32_to_bf16(static_cast<float>(v)));
    }
    internal_error("round_to_dtype: a DType outside the enum");
}

bool eval_binary(const Node &n, const ConstInputs &in, ConstData &out)
{
    const BinaryRow *row = binary_row(n.op);
    if (!row) internal_error(std::string("eval_binary: not a binary op: ") + op_name(n.op));
    int64_t N = out.numel();
    out.v.resize(N);
    if (in.size() == 1) {
        double s = n.f("scalar");
        bool rev = n.i("reverse", 0) != 0;
        for (int64_t i = 0; i < N; i++)
            out.v[i] = round_to_dtype(rev ? row->f(s, in[0]->v[i]) : row->f(in[0]->v[i], s), out.dtype);
        return true;
    }
    Broadcaster ba(in[0]->shape, out.shape), bb(in[1]->shape, out.shape);
    for (int64_t i = 0; i < N; i++) out.v[i] = round_to_dtype(row->f(in[0]->v[ba(i)], in[1]->v[bb(i)]), out.dtype);
    return true;
}

bool eval_unary(const Node &n, const ConstInputs &in, ConstData &out)
{
    const double p = n.f("exponent", 0.0);
    const UnaryRow *row = unary_row(n.op);
    if (!row && n.op != Op::GELU) internal_error(std::string("eval_unary: not a unary op: ") + op_name(n.op));
    bool tanh_gelu = n.op == Op::GELU && n.s("act") == "gelu_tanh";
    out.v.resize(in[0]->v.size());
    for (size_t i = 0; i < in[0]->v.size(); i++) {
        double x = in[0]->v[i];
        double y = row ? row->f(x, p) : tanh_gelu ? gelu_tanh(x) : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        out.v[i] = round_to_dtype(y, out.dtype);
    }
    return true;
}

bool eval_clamp(const Node &n, const ConstInputs &in, ConstData &out)
{
    out.v.resize(in[0]->v.size());
    for (size_t i = 0; i < in[0]->v.size(); i++) {
        double x = in[0]->v[i];
        if (n.has("min") && x < n.f("min")) x = n.f("min");  // NaN compares false: it stays NaN
        if (n.has("max") && x > n.f("max")) x = n.f("max");
        out.v[i] = round_to_dtype(x, out.dtype);
    }
    return true;
}

bool eval_reduce(const Node &n, const ConstInputs &in, ConstData &out)
{
    const ReduceRow *row = reduce_row(n.op);
    if (!row) internal_error(std::string("eval_reduce: not a reduction: ") + op_name(n.op));
    int64_t outer, len, inner;
    split_axis(in[0]->shape, norm_axis(n.i("axis", -1), in[0]->shape.size()), outer, len, inner);
    out.v.assign(outer * inner, 0.0);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double acc = row->identity;
            for (int64_t k = 0; k < len; k++) acc = row->combine(acc, in[0]->v[(o * len + k) * inner + j]);
            out.v[o * inner + j] = round_to_dtype(row->finish(acc, static_cast<double>(len)), out.dtype);
        }
    return true;
}

bool eval_slice(const Node &n, const ConstInputs &in, ConstData &out)
{
    int64_t outer, len, inner;
    split_axis(in[0]->shape, norm_axis(n.i("axis", -1), in[0]->shape.size()), outer, len, inner);
    int64_t start = rules::size_attr(n, "start"), length = rules::size_attr(n, "length"), step = n.i("step", 1);
    if (is_sym(start) || is_sym(length)) return false;  // (a symbolic slice is never a constant's)
    out.v.clear();
    out.v.reserve(outer * length * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < length; k++)
            for (int64_t j = 0; j < inner; j++) out.v.push_back(in[0]->v[(o * len + start + k * step) * inner + j]);
    return true;
}

bool eval_reshape(const Node &, const ConstInputs &in, ConstData &out)
{
    out.v = in[0]->v;
    return true;
}

bool eval_permute(const Node &n, const ConstInputs &in, ConstData &out)
{
    const Shape &s = in[0]->shape;
    size_t r = s.size();
    std::vector<int64_t> perm(r);
    for (size_t i = 0; i < r; i++) perm[i] = static_cast<int64_t>(i);
    if (n.op == Op::TRANSPOSE) {
        std::swap(perm[norm_axis(n.i("dim0"), r)], perm[norm_axis(n.i("dim1"), r)]);
    } else {
        const auto &p = n.ints("perm");
        for (size_t i = 0; i < r; i++) perm[i] = norm_axis(p[i], r);
    }
    std::vector<int64_t> in_strides(r, 1);
    for (size_t d = r; d-- > 1;) in_strides[d - 1] = in_strides[d] * s[d];
    int64_t N = out.numel();
    out.v.resize(N);
    for (int64_t i = 0; i < N; i++) {
        int64_t rem = i, src = 0;
        for (size_t d = r; d-- > 0;) {
            int64_t c = rem % out.shape[d];
            rem /= out.shape[d];
            src += c * in_strides[perm[d]];
        }
        out.v[i] = in[0]->v[src];
    }
    return true;
}

bool eval_expand(const Node &, const ConstInputs &in, ConstData &out)
{
    Broadcaster b(in[0]->shape, out.shape);
    int64_t N = out.numel();
    out.v.resize(N);
    for (int64_t i = 0; i < N; i++) out.v[i] = in[0]->v[b(i)];
    return true;
}

bool eval_cat(const Node &n, const ConstInputs &in, ConstData &out)
{
    int64_t axis = norm_axis(n.i("axis", -1), out.shape.size()), outer, len, inner;
    split_axis(out.shape, axis, outer, len, inner);
    out.v.assign(out.numel(), 0.0);
    int64_t at = 0;
    for (const ConstData *c : in) {
        int64_t ni = c->shape[axis];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < ni; k++)
                for (int64_t j = 0; j < inner; j++) out.v[(o * len + at + k) * inner + j] = c->v[(o * ni + k) * inner + j];
        at += ni;
    }
    return true;
}

bool eval_masked_fill(const Node &n, const ConstInputs &in, ConstData &out)
{
    Broadcaster bm(in[1]->shape, out.shape);
    double value = n.f("value");
    out.v.resize(out.numel());
    for (int64_t i = 0; i < out.numel(); i++) out.v[i] = in[1]->v[bm(i)] != 0 ? round_to_dtype(value, out.dtype) : in[0]->v[i];
    return true;
}

bool eval_embedding(const Node &, const ConstInputs &in, ConstData &out)
{
    int64_t V = in[1]->shape[0], C = in[1]->shape[1];
    out.v.clear();
    for (double id : in[0]->v) {
        if (id < 0 || id >= static_cast<double>(V)) return false;  // leave it to fail at run time with a message
        int64_t r = static_cast<int64_t>(id);
        out.v.insert(out.v.end(), in[1]->v.begin() + r * C, in[1]->v.begin() + (r + 1) * C);
    }
    return true;
}

bool eval_arange(const Node &n, const ConstInputs &, ConstData &out)
{
    double start = n.f("start"), step = n.f("step", 1.0);
    out.v.resize(out.numel());
    for (int64_t i = 0; i < out.numel(); i++) out.v[i] = round_to_dtype(start + step * static_cast<double>(i), out.dtype);
    return true;
}

bool eval_full(const Node &n, const ConstInputs &, ConstData &out)
{
    out.v.assign(out.numel(), round_to_dtype(n.f("value"), out.dtype));
    return true;
}

bool eval_cmp(const Node &n, const ConstInputs &in, ConstData &out)
{
    const std::string &fn = n.s("fn");
    auto cmp = [&](double a, double b) {
        if (fn == "eq") return a == b;
        if (fn == "ne") return a != b;
        if (fn == "lt") return a < b;
        if (fn == "le") return a <= b;
        if (fn == "gt") return a > b;
        return a >= b;
    };
    out.v.resize(out.numel());
    if (in.size() == 1) {
        double s = n.f("scalar");
        for (int64_t i = 0; i < out.numel(); i++) out.v[i] = cmp(in[0]->v[i], s);
        return true;
    }
    Broadcaster ba(in[0]->shape, out.shape), bb(in[1]->shape, out.shape);
    for (int64_t i = 0; i < out.numel(); i++) out.v[i] = cmp(in[0]->v[ba(i)], in[1]->v[bb(i)]);
    return true;
}

bool eval_cast(const Node &, const ConstInputs &in, ConstData &out)
{
    out.v.resize(in[0]->v.size());
    for (size_t i = 0; i < out.v.size(); i++) out.v[i] = round_to_dtype(in[0]->v[i], out.dtype);
    return true;
}

bool eval_where(const Node &, const ConstInputs &in, ConstData &out)
{
    Broadcaster bc(in[0]->shape, out.shape), ba(in[1]->shape, out.shape), bb(in[2]->shape, out.shape);
    out.v.resize(out.numel());
    for (int64_t i = 0; i < out.numel(); i++) out.v[i] = in[0]->v[bc(i)] != 0 ? in[1]->v[ba(i)] : in[2]->v[bb(i)];
    return true;
}

bool eval_tril(const Node &n, const ConstInputs &in, ConstData &out)
{
    int64_t R = out.shape[out.shape.size() - 2], C = out.shape.back(), diag = n.i("diagonal", 0);
    out.v = in[0]->v;
    for (int64_t i = 0; i < out.numel(); i++) {
        int64_t c = i % C, r = (i / C) % R;
        if (c - r > diag) out.v[i] = 0;
    }
    return true;
}

bool eval_cumsum(const Node &n, const ConstInputs &in, ConstData &out)
{
    int64_t outer, len, inner;
    split_axis(in[0]->shape, norm_axis(n.i("axis", -1), in[0]->shape.size()), outer, len, inner);
    out.v.assign(in[0]->v.size(), 0.0);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double acc = 0;  // (torch accumulates float32 in double on the CPU)
            for (int64_t k = 0; k < len; k++) {
                size_t at = static_cast<size_t>((o * len + k) * inner + j);
                acc += in[0]->v[at];
                out.v[at] = round_to_dtype(acc, out.dtype);
            }
        }
    return true;
}

bool eval_index(const Node &, const ConstInputs &in, ConstData &out)
{
    const Shape &x = in[0]->shape;
    size_t k = in.size() - 1, b_rank = out.shape.size() - (x.size() - k);
    Shape b(out.shape.begin(), out.shape.begin() + static_cast<std::ptrdiff_t>(b_rank));
    int64_t inner = 1, nb = 1;
    for (size_t d = k; d < x.size(); d++) inner *= x[d];
    for (int64_t d : b) nb *= d;
    std::vector<Broadcaster> bc;
    for (size_t j = 1; j < in.size(); j++) bc.emplace_back(in[j]->shape, b);
    out.v.resize(out.numel());
    for (int64_t p = 0; p < nb; p++) {
        int64_t src = 0;
        for (size_t j = 0; j < k; j++) {
            int64_t v = static_cast<int64_t>(in[j + 1]->v[bc[j](p)]);
            if (v < 0) v += x[j];
            if (v < 0 || v >= x[j]) return false;  // left to run time, which reports it
            src = src * x[j] + v;
        }
        for (int64_t i = 0; i < inner; i++) out.v[p * inner + i] = in[0]->v[src * inner + i];
    }
    return true;
}

bool eval_index_put(const Node &n, const ConstInputs &in, ConstData &out)
{
    const ConstData &idx = *in[0], &vals = *in[1];
    int64_t rows = out.shape[0], inner = out.numel() / std::max<int64_t>(rows, 1), count = idx.numel();
    if (in.size() == 3)
        out.v = in[2]->v;
    else
        out.v.assign(static_cast<size_t>(out.numel()), 0.0);
    bool acc = n.i("accumulate", 0) != 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t r = static_cast<int64_t>(idx.v[static_cast<size_t>(i)]);
        if (r < 0) r += rows;
        if (r < 0 || r >= rows) return false;  // left to run time, which reports it
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t r = static_cast<int64_t>(idx.v[static_cast<size_t>(i)]);
        if (r < 0) r += rows;
        for (int64_t j = 0; j < inner; j++) {
            double v = vals.v[static_cast<size_t>(i * inner + j)];
            double &o = out.v[static_cast<size_t>(r * inner + j)];
            o = acc ? static_cast<double>(static_cast<float>(o) + static_cast<float>(v)) : v;
        }
    }
    return true;
}

bool eval_rotate_half(const Node &, const ConstInputs &in, ConstData &out)
{
    const ConstData &x = *in[0];
    int64_t D = x.shape.back(), h = D / 2, n = x.numel();
    out.v.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; r += D)
        for (int64_t j = 0; j < h; j++) {
            out.v[static_cast<size_t>(r + j)] = -x.v[static_cast<size_t>(r + j + h)];
            out.v[static_cast<size_t>(r + j + h)] = x.v[static_cast<size_t>(r + j)];
        }
    return true;
}

}  // namespace ckc
