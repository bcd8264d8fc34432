// The mask and index kernels (runtime/kernels/select.c) against the compiler's constant evaluator
// (ir/eval.cpp): an op computes the same values whether ckc folds it at compile time or runs it, for every
// dtype pair and broadcast the exporter can produce. Plus the edges: casts of NaN and out-of-range values,
// out-of-range indices (nothing written), tril in place.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ck_kernels.h"
#include "ir/eval.h"
#include "ir/graph.h"
#include "ir/op_rules.h"

using namespace ckc;

namespace {

ck_elem elem_of(DType t)
{
    switch (t) {
    case DType::F32: return CK_ELEM_F32;
    case DType::I64: return CK_ELEM_I64;
    case DType::I32: return CK_ELEM_I32;
    default: return CK_ELEM_BOOL;
    }
}

// A tensor as bytes of its runtime dtype and as the evaluator's doubles.
struct Buf {
    ConstData c;
    std::vector<unsigned char> bytes;
    Buf(DType t, Shape s, unsigned seed, bool small = false)
    {
        c.dtype = t;
        c.shape = std::move(s);
        c.v.resize(static_cast<size_t>(c.numel()));
        std::mt19937 rng(seed);
        for (auto &x : c.v) {
            int r = static_cast<int>(rng() % 7) - 3;  // -3..3: comparisons hit equality often
            x = t == DType::Bool ? (r > 0) : t == DType::F32 && !small ? r * 0.5 : r;
        }
        bytes.resize(c.v.size() * static_cast<size_t>(dtype_size(t)));
        store();
    }
    Buf(DType t, Shape s) : Buf(t, std::move(s), 0) {}
    void store()
    {
        for (size_t i = 0; i < c.v.size(); i++) {
            double x = c.v[i];
            switch (c.dtype) {
            case DType::F32: { float f = static_cast<float>(x); std::memcpy(&bytes[i * 4], &f, 4); break; }
            case DType::I64: { int64_t f = static_cast<int64_t>(x); std::memcpy(&bytes[i * 8], &f, 8); break; }
            case DType::I32: { int32_t f = static_cast<int32_t>(x); std::memcpy(&bytes[i * 4], &f, 4); break; }
            default: bytes[i] = x != 0; break;
            }
        }
    }
    std::vector<double> values() const  // the bytes read back
    {
        std::vector<double> out(c.v.size());
        for (size_t i = 0; i < out.size(); i++) {
            switch (c.dtype) {
            case DType::F32: { float f; std::memcpy(&f, &bytes[i * 4], 4); out[i] = f; break; }
            case DType::I64: { int64_t f; std::memcpy(&f, &bytes[i * 8], 8); out[i] = static_cast<double>(f); break; }
            case DType::I32: { int32_t f; std::memcpy(&f, &bytes[i * 4], 4); out[i] = f; break; }
            default: out[i] = bytes[i]; break;
            }
        }
        return out;
    }
    void *p() { return bytes.data(); }
};

Shape al(const Shape &s, size_t r) { return rules::aligned(s, r); }
Shape bcast(const Shape &a, const Shape &b)
{
    size_t r = std::max(a.size(), b.size());
    Shape A = al(a, r), B = al(b, r), out(r);
    for (size_t i = 0; i < r; i++) out[i] = A[i] == 1 ? B[i] : A[i];
    return out;
}

}  // namespace

TEST_CASE("ck_compare equals the compiler's CMP for every fn, dtype pair and broadcast", "[kernels]")
{
    const char *fns[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    ck_cmpop ops[] = {CK_CMP_EQ, CK_CMP_NE, CK_CMP_LT, CK_CMP_LE, CK_CMP_GT, CK_CMP_GE};
    auto [sa, sb] = GENERATE(std::pair{Shape{2, 3, 4}, Shape{2, 3, 4}}, std::pair{Shape{2, 1, 4}, Shape{3, 1}},
                             std::pair{Shape{1, 5}, Shape{4, 1}}, std::pair{Shape{6}, Shape{}});
    DType ta = GENERATE(DType::F32, DType::I64, DType::I32, DType::Bool), tb = GENERATE(DType::F32, DType::I64, DType::Bool);
    Buf a(ta, sa, 1), b(tb, sb, 2);
    Shape so = bcast(sa, sb);
    for (int f = 0; f < 6; f++) {
        Node n;
        n.op = Op::CMP;
        n.attrs["fn"] = std::string(fns[f]);
        ConstData want;
        want.dtype = DType::Bool;
        want.shape = so;
        REQUIRE(eval_cmp(n, {&a.c, &b.c}, want));
        Buf got(DType::Bool, so);
        ck_compare(static_cast<uint8_t *>(got.p()), so.data(), static_cast<int>(so.size()), a.p(), elem_of(ta),
                   al(sa, so.size()).data(), b.p(), elem_of(tb), al(sb, so.size()).data(), 0.0, ops[f]);
        CHECK(got.values() == want.v);
        // against a scalar
        n.attrs["scalar"] = 1.0;
        ConstData want_s;
        want_s.dtype = DType::Bool;
        want_s.shape = sa;
        REQUIRE(eval_cmp(n, {&a.c}, want_s));
        Buf got_s(DType::Bool, sa);
        ck_compare(static_cast<uint8_t *>(got_s.p()), sa.data(), static_cast<int>(sa.size()), a.p(), elem_of(ta),
                   sa.data(), nullptr, CK_ELEM_F32, nullptr, 1.0, ops[f]);
        CHECK(got_s.values() == want_s.v);
    }
}

TEST_CASE("ck_cast equals the compiler's CAST between every dtype; NaN and out-of-range values are defined",
          "[kernels]")
{
    DType from = GENERATE(DType::F32, DType::I64, DType::I32, DType::Bool), to = GENERATE(DType::F32, DType::I64, DType::I32, DType::Bool);
    Buf x(from, {3, 7}, 5);
    if (from == DType::F32) {
        x.c.v[0] = 2.75, x.c.v[1] = -2.75, x.c.v[2] = 0.25;  // truncation toward 0
        x.store();
    }
    ConstData want;
    want.dtype = to;
    want.shape = x.c.shape;
    Node n;
    n.op = Op::CAST;
    REQUIRE(eval_cast(n, {&x.c}, want));
    Buf got(to, x.c.shape);
    ck_cast(got.p(), elem_of(to), x.p(), elem_of(from), 21);
    CHECK(got.values() == want.v);

    const float nan = std::numeric_limits<float>::quiet_NaN();
    float edge[] = {nan, 1e30f, -1e30f, -0.5f};
    int64_t i64[4];
    int32_t i32[4];
    uint8_t b[4];
    ck_cast(i64, CK_ELEM_I64, edge, CK_ELEM_F32, 4);
    ck_cast(i32, CK_ELEM_I32, edge, CK_ELEM_F32, 4);
    ck_cast(b, CK_ELEM_BOOL, edge, CK_ELEM_F32, 4);
    CHECK(i64[0] == 0);
    CHECK(i64[1] == std::numeric_limits<int64_t>::max() - 1023);  // the largest double below 2^63
    CHECK(i64[2] == std::numeric_limits<int64_t>::min());
    CHECK(i64[3] == 0);
    CHECK((i32[0] == 0 && i32[1] == std::numeric_limits<int32_t>::max() && i32[2] == std::numeric_limits<int32_t>::min()));
    CHECK((b[0] == 1 && b[1] == 1 && b[2] == 1 && b[3] == 1));  // NaN is true, as bool(nan) in torch
}

TEST_CASE("ck_arange equals the compiler's ARANGE (the fold of a static one) for every dtype", "[kernels]")
{
    DType to = GENERATE(DType::F32, DType::I64, DType::I32);
    const double starts[] = {0.0, -1.5, 7.0}, steps[] = {1.0, 0.1, -2.0};
    for (int k = 0; k < 3; k++) {
        ConstData want;
        want.dtype = to;
        want.shape = {37};
        Node n;
        n.op = Op::ARANGE;
        n.attrs["start"] = starts[k];
        n.attrs["step"] = steps[k];
        REQUIRE(eval_arange(n, {}, want));
        Buf got(to, want.shape);
        std::fill(got.bytes.begin(), got.bytes.end(), 0xAB);
        ck_arange(got.p(), elem_of(to), starts[k], steps[k], 37);
        CHECK(got.values() == want.v);
    }
}

TEST_CASE("ck_cumsum equals the compiler's CUMSUM along every axis, f32 and i64, in place too", "[kernels]")
{
    DType t = GENERATE(DType::F32, DType::I64);
    const Shape shape = {3, 5, 4};
    for (int64_t axis = 0; axis < 3; axis++) {
        Buf x(t, shape, static_cast<unsigned>(11 + axis));
        ConstData want;
        want.dtype = t;
        want.shape = shape;
        Node n;
        n.op = Op::CUMSUM;
        n.attrs["axis"] = axis;
        REQUIRE(eval_cumsum(n, {&x.c}, want));
        int64_t outer, len, inner;
        rules::split_axis(shape, axis, outer, len, inner);
        Buf got(t, shape);
        ck_cumsum(got.p(), x.p(), elem_of(t), outer, len, inner);
        CHECK(got.values() == want.v);
        ck_cumsum(x.p(), x.p(), elem_of(t), outer, len, inner);  // in place
        CHECK(x.values() == want.v);
    }
    int64_t big[] = {std::numeric_limits<int64_t>::max(), 1};  // wraps as torch's does
    ck_cumsum(big, big, CK_ELEM_I64, 1, 2, 1);
    CHECK(big[1] == std::numeric_limits<int64_t>::min());
}

TEST_CASE("ck_binary_i64 equals the compiler's integer ADD / SUB / MUL (broadcast, scalar, reversed, wrapping)",
          "[kernels]")
{
    const Op ops[] = {Op::ADD, Op::SUB, Op::MUL};
    const ck_binop kops[] = {CK_BIN_ADD, CK_BIN_SUB, CK_BIN_MUL};
    for (int k = 0; k < 3; k++) {
        Buf a(DType::I64, {3, 1, 5}, 3), b(DType::I64, {4, 1}, 4);
        Node n;
        n.op = ops[k];
        ConstData want;
        want.dtype = DType::I64;
        want.shape = {3, 4, 5};
        REQUIRE(eval_binary(n, {&a.c, &b.c}, want));
        Buf got(DType::I64, want.shape);
        const int64_t so[] = {3, 4, 5}, sa[] = {3, 1, 5}, sb[] = {1, 4, 1};
        ck_binary_i64(reinterpret_cast<int64_t *>(got.p()), so, 3, reinterpret_cast<const int64_t *>(a.p()), sa,
                      reinterpret_cast<const int64_t *>(b.p()), sb, 0, 0, kops[k]);
        CHECK(got.values() == want.v);
        for (int reverse = 0; reverse < 2; reverse++) {  // a op 7, 7 op a
            Node ns = n;
            ns.attrs["scalar"] = 7.0;
            ns.attrs["reverse"] = static_cast<int64_t>(reverse);
            ConstData ws;
            ws.dtype = DType::I64;
            ws.shape = a.c.shape;
            REQUIRE(eval_binary(ns, {&a.c}, ws));
            Buf gs(DType::I64, a.c.shape);
            ck_binary_i64(reinterpret_cast<int64_t *>(gs.p()), sa, 3, reinterpret_cast<const int64_t *>(a.p()), sa,
                          nullptr, sa, 7, reverse, kops[k]);
            CHECK(gs.values() == ws.v);
        }
    }
    int64_t big = std::numeric_limits<int64_t>::max(), one = 1, r = 0;
    const int64_t s1[] = {1};
    ck_binary_i64(&r, s1, 1, &big, s1, &one, s1, 0, 0, CK_BIN_ADD);
    CHECK(r == std::numeric_limits<int64_t>::min());
}

TEST_CASE("ck_where equals the compiler's WHERE (any dtype, every operand broadcast)", "[kernels]")
{
    DType t = GENERATE(DType::F32, DType::I64, DType::Bool), tc = GENERATE(DType::Bool, DType::I64);
    auto [sc, sa, sb] = GENERATE(std::tuple{Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},
                                 std::tuple{Shape{2, 1, 4}, Shape{3, 1}, Shape{}}, std::tuple{Shape{1}, Shape{4, 2}, Shape{2}});
    Buf c(tc, sc, 7), a(t, sa, 8), b(t, sb, 9);
    Shape so = bcast(bcast(sc, sa), sb);
    ConstData want;
    want.dtype = t;
    want.shape = so;
    Node n;
    n.op = Op::WHERE;
    REQUIRE(eval_where(n, {&c.c, &a.c, &b.c}, want));
    Buf got(t, so);
    size_t r = so.size();
    ck_where(got.p(), so.data(), static_cast<int>(r), c.p(), elem_of(tc), al(sc, r).data(), a.p(), al(sa, r).data(), b.p(),
             al(sb, r).data(), static_cast<size_t>(dtype_size(t)));
    CHECK(got.values() == want.v);
}

TEST_CASE("ck_tril equals the compiler's TRIL for any diagonal, in place too", "[kernels]")
{
    int64_t diag = GENERATE(-5, -1, 0, 2, 9);
    DType t = GENERATE(DType::F32, DType::Bool, DType::I64);
    Buf x(t, {2, 4, 6}, 11);
    ConstData want;
    want.dtype = t;
    want.shape = x.c.shape;
    Node n;
    n.op = Op::TRIL;
    n.attrs["diagonal"] = diag;
    REQUIRE(eval_tril(n, {&x.c}, want));
    Buf got(t, x.c.shape);
    size_t e = static_cast<size_t>(dtype_size(t));
    ck_tril(got.p(), x.p(), 2, 4, 6, diag, e);
    CHECK(got.values() == want.v);
    ck_tril(x.p(), x.p(), 2, 4, 6, diag, e);
    CHECK(x.values() == want.v);
}

TEST_CASE("ck_index equals the compiler's INDEX (broadcast indices, negative ones); out of range writes nothing",
          "[kernels]")
{
    // transformers' padding mask: mask[batch_idx [B,1,1,1], kv_idx [1,1,1,S]] -> [B,1,1,S]
    auto [sx, si] = GENERATE(std::pair{Shape{3, 5}, std::vector<Shape>{{3, 1, 1, 1}, {1, 1, 1, 5}}},
                             std::pair{Shape{4, 3, 2}, std::vector<Shape>{{2, 3}}},
                             std::pair{Shape{4, 3, 2}, std::vector<Shape>{{5}, {1}}});
    DType t = GENERATE(DType::F32, DType::Bool, DType::I64);
    Buf x(t, sx, 13);
    std::vector<Buf> idx;
    std::vector<const ConstData *> in = {&x.c};
    for (size_t j = 0; j < si.size(); j++) {
        idx.emplace_back(DType::I64, si[j], 20 + static_cast<unsigned>(j));
        for (size_t i = 0; i < idx[j].c.v.size(); i++)  // in range, negatives too
            idx[j].c.v[i] = static_cast<double>(static_cast<int64_t>(i * 7 + j) % (2 * sx[j]) - sx[j]);
        idx[j].store();
    }
    for (auto &b : idx) in.push_back(&b.c);
    Shape b_shape = si[0];
    for (auto &s : si) b_shape = bcast(b_shape, s);
    Shape so = b_shape;
    so.insert(so.end(), sx.begin() + static_cast<std::ptrdiff_t>(si.size()), sx.end());
    ConstData want;
    want.dtype = t;
    want.shape = so;
    Node n;
    n.op = Op::INDEX;
    REQUIRE(eval_index(n, in, want));
    std::vector<const int64_t *> ptrs;
    std::vector<int64_t> shapes;
    for (auto &b : idx) {
        ptrs.push_back(reinterpret_cast<const int64_t *>(b.bytes.data()));
        Shape s = al(b.c.shape, b_shape.size());
        shapes.insert(shapes.end(), s.begin(), s.end());
    }
    Buf got(t, so);
    size_t e = static_cast<size_t>(dtype_size(t));
    CHECK(ck_index(got.p(), x.p(), sx.data(), static_cast<int>(sx.size()), static_cast<int>(si.size()), ptrs.data(),
                   shapes.data(), static_cast<int>(b_shape.size()), e) == -1);
    CHECK(got.values() == want.v);

    // one index past the end (and one before the start): -1 never, nothing written
    for (int64_t badv : {sx[0], -sx[0] - 1}) {
        int64_t *first = reinterpret_cast<int64_t *>(idx[0].bytes.data());
        int64_t keep = first[idx[0].c.v.size() - 1];
        first[idx[0].c.v.size() - 1] = badv;
        Buf untouched(t, so, 99);
        auto before = untouched.values();
        CHECK(ck_index(untouched.p(), x.p(), sx.data(), static_cast<int>(sx.size()), static_cast<int>(si.size()),
                       ptrs.data(), shapes.data(), static_cast<int>(b_shape.size()), e) >= 0);
        CHECK(untouched.values() == before);
        first[idx[0].c.v.size() - 1] = keep;
    }
}

TEST_CASE("ck_index_put equals the compiler's INDEX_PUT (zero base or a tensor, added or put, duplicate and negative "
          "indices); out of range writes nothing", "[kernels]")
{
    bool acc = GENERATE(true, false);
    bool zero_base = GENERATE(true, false);
    DType t = acc ? DType::F32 : GENERATE(DType::F32, DType::I64, DType::Bool);
    const int64_t rows = 5, inner = 3;
    Buf idx(DType::I64, {2, 4});
    const double ids[] = {1, -1, 3, 1, 0, 4, -5, 1};  // 1 four times (-5 is 0, -1 is 4)
    for (size_t i = 0; i < 8; i++) idx.c.v[i] = ids[i];
    idx.store();
    Buf vals(t, {2, 4, inner}, 31), base(t, {rows, inner}, 32);
    ConstData want;
    want.dtype = t;
    want.shape = {rows, inner};
    Node n;
    n.op = Op::INDEX_PUT;
    n.attrs["accumulate"] = static_cast<int64_t>(acc);
    std::vector<const ConstData *> in = {&idx.c, &vals.c};
    if (!zero_base) in.push_back(&base.c);
    REQUIRE(eval_index_put(n, in, want));
    Buf got(t, {rows, inner}, 77);
    size_t e = static_cast<size_t>(dtype_size(t));
    const int64_t *ip = reinterpret_cast<const int64_t *>(idx.bytes.data());
    CHECK(ck_index_put(got.p(), zero_base ? nullptr : base.p(), rows, inner, ip, 8, vals.p(), acc, e) == -1);
    CHECK(got.values() == want.v);
    if (!zero_base) {  // in place: out is the base
        Buf same = base;
        CHECK(ck_index_put(same.p(), same.p(), rows, inner, ip, 8, vals.p(), acc, e) == -1);
        CHECK(same.values() == want.v);
    }
    for (int64_t bad : {rows, -rows - 1}) {
        int64_t *first = reinterpret_cast<int64_t *>(idx.bytes.data());
        first[6] = bad;
        Buf untouched(t, {rows, inner}, 99);
        auto before = untouched.values();
        CHECK(ck_index_put(untouched.p(), zero_base ? nullptr : base.p(), rows, inner, ip, 8, vals.p(), acc, e) == 6);
        CHECK(untouched.values() == before);
        first[6] = -5;
    }
}

TEST_CASE("ck_rotate_half equals the compiler's ROTATE_HALF: cat(-x[.., D/2:], x[.., :D/2]) per row", "[kernels]")
{
    auto [rows, D] = GENERATE(std::pair<int64_t, int64_t>{1, 2}, std::pair<int64_t, int64_t>{7, 64},
                              std::pair<int64_t, int64_t>{3000, 32});  // (the last one: past CK_PAR_MIN, threaded)
    Buf x(DType::F32, {rows, D}, 41);
    ConstData want;
    want.dtype = DType::F32;
    want.shape = {rows, D};
    Node n;
    n.op = Op::ROTATE_HALF;
    REQUIRE(eval_rotate_half(n, {&x.c}, want));
    CHECK(want.v[0] == -x.c.v[static_cast<size_t>(D / 2)]);
    CHECK(want.v[static_cast<size_t>(D / 2)] == x.c.v[0]);
    Buf got(DType::F32, {rows, D}, 42);
    ck_rotate_half(static_cast<float *>(got.p()), static_cast<const float *>(x.p()), static_cast<size_t>(rows * D), D);
    CHECK(got.values() == want.v);
}
