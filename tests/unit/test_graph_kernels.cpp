// Kernels of exported graphs against their *_ref twins (or an obvious loop):
// batched GEMM, whole-sequence attention (standard and flash), broadcast
// binary ops, unary ops, softmax / reductions, layout moves, int64 gathers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ck_kernels.h"
#include "kernel_helpers.h"

using namespace ckc_kernel_test;

TEST_CASE("ck_matmul matches the reference (shared / batched B, transposed, alpha, addend, bias)", "[kernels]")
{
    auto [batch, M, N, K] = GENERATE(std::tuple{1, 1, 1, 1}, std::tuple{1, 1, 96, 64}, std::tuple{3, 1, 40, 17},
                                     std::tuple{2, 16, 16, 64}, std::tuple{4, 33, 70, 29}, std::tuple{1, 128, 512, 512},
                                     std::tuple{1, 50, 75, 600},   // fgemm panels: 2 of columns, a partial one of rows
                                     std::tuple{3, 40, 56, 24});  // batched on the panels
    int b_batched = GENERATE(0, 1), trans_b = GENERATE(0, 1), trans_a = GENERATE(0, 1);
    int mode = GENERATE(0, 1, 2, 3);  // plain, bias, addend, in-place addend + bias
    int nth = GENERATE(1, 2);
    float alpha = mode == 0 ? 0.125f : 1.0f;
    Threads th(nth);
    size_t nout = static_cast<size_t>(batch) * M * N;
    auto a = rnd(static_cast<size_t>(batch) * M * K, 1), b = rnd((b_batched ? batch : 1) * static_cast<size_t>(K) * N, 2, 0.1f);
    auto bias = rnd(N, 3), add = rnd(nout, 4);
    std::vector<float> got(nout, 7.0f), want(nout, 5.0f);
    const float *bp = mode == 1 || mode == 3 ? bias.data() : nullptr;
    const float *ap = mode >= 2 ? add.data() : nullptr;
    if (mode == 3) got = add;
    ck_matmul(got.data(), a.data(), b.data(), mode == 3 ? got.data() : ap, bp, batch, M, N, K, b_batched, trans_a,
              trans_b, alpha);
    ck_matmul_ref(want.data(), a.data(), b.data(), ap, bp, batch, M, N, K, b_batched, trans_a, trans_b, alpha);
    CHECK(max_abs_diff(got, want) < 1e-4 * std::sqrt(static_cast<double>(K)));
}

TEST_CASE("sequence attention: standard and flash equal the reference, causal or not", "[kernels]")
{
    auto [BH, Sq, Sk, D] = GENERATE(std::tuple{1, 1, 1, 4}, std::tuple{2, 16, 16, 64}, std::tuple{8, 64, 64, 32},
                                    std::tuple{3, 5, 37, 16}, std::tuple{1, 100, 100, 8}, std::tuple{20, 33, 33, 24},
                                    std::tuple{2, 70, 70, 128});
    int causal = GENERATE(0, 1);
    int nth = GENERATE(1, 2);
    Threads th(nth);
    size_t nq = static_cast<size_t>(BH) * Sq * D, nk = static_cast<size_t>(BH) * Sk * D;
    auto q = rnd(nq, 1), k = rnd(nk, 2), v = rnd(nk, 3);
    float scale = 1.0f / std::sqrt(static_cast<float>(D));
    ck_seq lq = ck_seq_bhsd(BH, Sq, D), lk = ck_seq_bhsd(BH, Sk, D);
    std::vector<float> want(nq), std_out(nq, 9.0f), flash_out(nq, 9.0f);
    std::vector<float> s1(ck_attention_std_scratch(BH, Sq, Sk, D) / sizeof(float), NAN);
    std::vector<float> s2(ck_attention_flash_scratch(BH, Sq, Sk, D) / sizeof(float), NAN);
    ck_attention_seq_ref(want.data(), lq, q.data(), lq, k.data(), lk, v.data(), lk, 1, BH, Sq, Sk, D, scale, causal, ck_att_plain());
    ck_attention_std(std_out.data(), lq, q.data(), lq, k.data(), lk, v.data(), lk, 1, BH, Sq, Sk, D, scale, causal,
                     ck_att_plain(), s1.data());
    ck_attention_flash(flash_out.data(), lq, q.data(), lq, k.data(), lk, v.data(), lk, 1, BH, Sq, Sk, D, scale, causal,
                       ck_att_plain(), s2.data());
    CHECK(max_abs_diff(std_out, want) < 2e-5);
    CHECK(max_abs_diff(flash_out, want) < 2e-5);
    // the flash scratch stays tiny: O(tile), independent of the sequence
    CHECK(ck_attention_flash_scratch(BH, 4096, 4096, D) == ck_attention_flash_scratch(BH, 16, 16, D));
}

TEST_CASE("sequence attention: heads side by side in strided rows equal the per-head layout", "[kernels]")
{
    // q, k, v as column views of one [B, S, 3C] QKV tensor (row stride 3C), out [B, S, C]
    int B = 2, S = 19, H = 3, D = 8, C = H * D;
    int causal = GENERATE(0, 1), flash = GENERATE(0, 1);
    Threads th(2);
    auto qkv = rnd(static_cast<size_t>(B) * S * 3 * C, 4);
    std::vector<float> q4(static_cast<size_t>(B) * H * S * D), k4(q4.size()), v4(q4.size());
    for (int b = 0; b < B; b++)  // the same data, transposed to [B, H, S, D]
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    size_t src = (static_cast<size_t>(b) * S + s) * 3 * C + h * D + d;
                    size_t dst = ((static_cast<size_t>(b) * H + h) * S + s) * D + d;
                    q4[dst] = qkv[src];
                    k4[dst] = qkv[src + C];
                    v4[dst] = qkv[src + 2 * C];
                }
    ck_seq l4 = ck_seq_bhsd(H, S, D), rows = ck_seq_bshd(S, 3 * C, D), lo = ck_seq_bshd(S, C, D);
    std::vector<float> want(q4.size()), got(static_cast<size_t>(B) * S * C, 9.0f);
    std::vector<float> scratch(std::max(ck_attention_std_scratch(B * H, S, S, D), ck_attention_flash_scratch(B * H, S, S, D)));
    ck_attention_seq_ref(want.data(), l4, q4.data(), l4, k4.data(), l4, v4.data(), l4, B, H, S, S, D, 0.3f, causal, ck_att_plain());
    (flash ? ck_attention_flash : ck_attention_std)(got.data(), lo, qkv.data(), rows, qkv.data() + C, rows,
                                                     qkv.data() + 2 * C, rows, B, H, S, S, D, 0.3f, causal, ck_att_plain(),
                                                     scratch.data());
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++)
                    REQUIRE(got[(static_cast<size_t>(b) * S + s) * C + h * D + d] ==
                            Approx(want[((static_cast<size_t>(b) * H + h) * S + s) * D + d]).margin(2e-5));
}

TEST_CASE("sequence attention with a mask and grouped K/V heads: standard and flash equal the reference, the "
          "groups equal repeated heads, a query with no key left is 0", "[kernels]")
{
    auto [B, H, G, Sq, Sk, D] = GENERATE(std::tuple{2, 4, 2, 16, 16, 8}, std::tuple{3, 6, 3, 37, 37, 16},
                                         std::tuple{1, 2, 1, 5, 70, 32}, std::tuple{2, 8, 4, 70, 70, 64});
    int kind = GENERATE(CK_MASK_KEEP, CK_MASK_DROP, CK_MASK_ADD);
    bool per_head = GENERATE(false, true);  // a [B,1,Sq,Sk] mask (heads broadcast) or [B,H,Sq,Sk]
    int causal = GENERATE(0, 1);
    Threads th(2);
    int KVH = H / G;
    auto q = rnd(static_cast<size_t>(B) * H * Sq * D, 5), k = rnd(static_cast<size_t>(B) * KVH * Sk * D, 6),
         v = rnd(static_cast<size_t>(B) * KVH * Sk * D, 7);
    int64_t MH = per_head ? H : 1;
    size_t nm = static_cast<size_t>(B) * MH * Sq * Sk;
    std::vector<uint8_t> bmask(nm);
    std::vector<float> fmask(nm);
    std::mt19937 rng(9);
    for (size_t i = 0; i < nm; i++) {
        bmask[i] = rng() % 4 != 0;
        fmask[i] = bmask[i] ? 0.25f * static_cast<float>(rng() % 5) - 0.5f : -INFINITY;
    }
    // batch 0's query row 1: no key at all
    for (int64_t h = 0; h < MH; h++)
        for (int j = 0; j < Sk; j++) {
            size_t at = (static_cast<size_t>(h) * Sq + 1) * Sk + j;
            bmask[at] = kind == CK_MASK_DROP;
            fmask[at] = -INFINITY;
        }
    ck_att_extra x{};
    x.mask = kind == CK_MASK_ADD ? static_cast<const void *>(fmask.data()) : bmask.data();
    x.kind = static_cast<ck_mask_kind>(kind);
    x.mb = MH * Sq * Sk;
    x.mh = per_head ? Sq * Sk : 0;
    x.mr = Sk;
    x.kv_group = G;
    ck_seq lq = ck_seq_bhsd(H, Sq, D), lk = ck_seq_bhsd(KVH, Sk, D);
    size_t nq = q.size();
    std::vector<float> want(nq), got_std(nq, 9.0f), got_flash(nq, 9.0f);
    std::vector<float> s1(ck_attention_std_scratch(B * H, Sq, Sk, D) / sizeof(float), NAN);
    std::vector<float> s2(ck_attention_flash_scratch(B * H, Sq, Sk, D) / sizeof(float), NAN);
    ck_attention_seq_ref(want.data(), lq, q.data(), lq, k.data(), lk, v.data(), lk, B, H, Sq, Sk, D, 0.3f, causal, x);
    ck_attention_std(got_std.data(), lq, q.data(), lq, k.data(), lk, v.data(), lk, B, H, Sq, Sk, D, 0.3f, causal, x,
                     s1.data());
    ck_attention_flash(got_flash.data(), lq, q.data(), lq, k.data(), lk, v.data(), lk, B, H, Sq, Sk, D, 0.3f, causal,
                       x, s2.data());
    CHECK(max_abs_diff(got_std, want) < 2e-5);
    CHECK(max_abs_diff(got_flash, want) < 2e-5);
    for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) {  // the query with no key: 0 in batch 0, every head
            size_t at = (static_cast<size_t>(h) * Sq + 1) * D + d;
            REQUIRE(want[at] == 0.0f);
            REQUIRE(got_std[at] == 0.0f);
            REQUIRE(got_flash[at] == 0.0f);
        }
    // the groups read what repeat_kv's copies would hold
    std::vector<float> k_rep(static_cast<size_t>(B) * H * Sk * D), v_rep(k_rep.size()), rep_out(nq);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < Sk * D; j++) {
                k_rep[(static_cast<size_t>(b) * H + h) * Sk * D + j] = k[(static_cast<size_t>(b) * KVH + h / G) * Sk * D + j];
                v_rep[(static_cast<size_t>(b) * H + h) * Sk * D + j] = v[(static_cast<size_t>(b) * KVH + h / G) * Sk * D + j];
            }
    ck_att_extra ungrouped = x;
    ungrouped.kv_group = 1;
    ck_seq lr = ck_seq_bhsd(H, Sk, D);
    ck_attention_seq_ref(rep_out.data(), lq, q.data(), lq, k_rep.data(), lr, v_rep.data(), lr, B, H, Sq, Sk, D, 0.3f,
                         causal, ungrouped);
    CHECK(max_abs_diff(rep_out, want) == 0.0f);
}

TEST_CASE("sequence attention: causal row 0 sees only key 0", "[kernels]")
{
    int D = 8, S = 40;
    auto q = rnd(S * D, 1), k = rnd(S * D, 2), v = rnd(S * D, 3);
    ck_seq l = ck_seq_bhsd(1, S, D);
    std::vector<float> out(S * D), sc(ck_attention_std_scratch(1, S, S, D) / sizeof(float));
    for (int impl = 0; impl < 2; impl++) {
        std::vector<float> fs(ck_attention_flash_scratch(1, S, S, D) / sizeof(float));
        if (impl == 0)
            ck_attention_std(out.data(), l, q.data(), l, k.data(), l, v.data(), l, 1, 1, S, S, D, 1.0f, 1, ck_att_plain(), sc.data());
        else
            ck_attention_flash(out.data(), l, q.data(), l, k.data(), l, v.data(), l, 1, 1, S, S, D, 1.0f, 1, ck_att_plain(), fs.data());
        for (int d = 0; d < D; d++) CHECK(out[d] == Approx(v[d]).margin(1e-6));
    }
}

TEST_CASE("ck_binary broadcasts like numpy (fast paths and odometer)", "[kernels]")
{
    using S = std::vector<int64_t>;
    auto [o, sa, sb] = GENERATE(std::tuple{S{4, 5}, S{4, 5}, S{4, 5}}, std::tuple{S{4, 5}, S{4, 5}, S{1, 1}},
                                std::tuple{S{4, 5}, S{1, 1}, S{4, 5}}, std::tuple{S{3, 4, 5}, S{3, 4, 5}, S{1, 1, 5}},
                                std::tuple{S{3, 4, 5}, S{3, 1, 5}, S{1, 4, 1}}, std::tuple{S{2, 3, 4, 5}, S{2, 1, 4, 1}, S{1, 3, 1, 5}},
                                std::tuple{S{300, 300}, S{300, 300}, S{300, 1}});
    int op = GENERATE(range(0, static_cast<int>(CK_BIN_COUNT)));
    Threads th(2);
    auto n = [](const S &s) { return static_cast<size_t>(std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>())); };
    auto a = rnd(n(sa), 1), b = rnd(n(sb), 2);
    for (auto &x : b) x += x > 0 ? 0.5f : -0.5f;  // away from 0 for DIV
    std::vector<float> got(n(o)), want(n(o));
    int r = static_cast<int>(o.size());
    ck_binary(got.data(), o.data(), r, a.data(), sa.data(), b.data(), sb.data(), static_cast<ck_binop>(op));
    ck_binary_ref(want.data(), o.data(), r, a.data(), sa.data(), b.data(), sb.data(), static_cast<ck_binop>(op));
    CHECK(max_rel_diff(got, want) < 1e-6);
}

// One known value per row of CK_BINARY_OPS (a test fails for a row without one), through every entry point:
// ck_binary (equal shapes and broadcast), ck_binary_scalar both ways, ck_binary_ref, and a one-instruction ck_ew.
struct BinaryPoint {
    ck_binop op;
    float a, b, want;
};
const BinaryPoint kBinaryPoints[] = {
    {CK_BIN_ADD, 1.5f, 2.25f, 3.75f}, {CK_BIN_SUB, 1.5f, 2.25f, -0.75f},
    {CK_BIN_MUL, 1.5f, -2.0f, -3.0f}, {CK_BIN_DIV, 3.0f, -1.5f, -2.0f},
};

TEST_CASE("every binary op has a test row, and gives its value there", "[kernels]")
{
    for (int op = 0; op < CK_BIN_COUNT; op++) {
        int rows = 0;
        for (const auto &r : kBinaryPoints) {
            if (r.op != op) continue;
            rows++;
            const int64_t one[] = {1}, three[] = {3};
            const float as[] = {r.a, r.a, r.a};
            float got[3] = {0, 0, 0}, ref = 0, s1 = 0, s2 = 0, ew = 0;
            ck_binary(got, three, 1, as, three, &r.b, one, r.op);
            ck_binary_ref(&ref, one, 1, &r.a, one, &r.b, one, r.op);
            ck_binary_scalar(&s1, &r.a, 1, r.b, r.op, 0);
            ck_binary_scalar(&s2, &r.b, 1, r.a, r.op, 1);
            const float *in[] = {&r.a, &r.b};
            const int64_t dv[] = {1, 1}, md[] = {1, 1};
            const ck_ew_insn prog[] = {{static_cast<int>(r.op), 0, 1, 0.0f}};
            ck_ew(&ew, 1, 2, in, dv, md, 1, prog);
            for (float v : {got[0], got[2], ref, s1, s2, ew}) CHECK(v == Approx(r.want).epsilon(1e-6));
        }
        INFO("ck_binop " << op << " has no row in kBinaryPoints");
        CHECK(rows > 0);
    }
}

// One known value per row of CK_REDUCE_OPS over {3, -1, 4, 1.5}.
struct ReducePoint {
    ck_redop op;
    float want;
};
const ReducePoint kReducePoints[] = {{CK_RED_SUM, 7.5f}, {CK_RED_MEAN, 1.875f}, {CK_RED_MAX, 4.0f}};

TEST_CASE("every reduction has a test row, and gives its value there (a row and a column)", "[kernels]")
{
    const float x[] = {3.0f, -1.0f, 4.0f, 1.5f};
    for (int op = 0; op < CK_RED_COUNT; op++) {
        int rows = 0;
        for (const auto &r : kReducePoints) {
            if (r.op != op) continue;
            rows++;
            float row = 0, ref = 0, cols[2] = {0, 0};
            const float x2[] = {3.0f, 0.0f, -1.0f, 0.0f, 4.0f, 0.0f, 1.5f, 0.0f};  // x as column 0 of [4, 2]
            ck_reduce(&row, x, 1, 4, 1, r.op);   // a contiguous row
            ck_reduce(cols, x2, 1, 4, 2, r.op);  // a column
            ck_reduce_ref(&ref, x, 1, 4, 1, r.op);
            for (float v : {row, cols[0], ref}) CHECK(v == Approx(r.want).epsilon(1e-6));
        }
        INFO("ck_redop " << op << " has no row in kReducePoints");
        CHECK(rows > 0);
    }
}

TEST_CASE("ck_binary_scalar and ck_masked_fill", "[kernels]")
{
    std::vector<float> a = {1, 2, 4}, out(3);
    ck_binary_scalar(out.data(), a.data(), 3, 8.0f, CK_BIN_DIV, 1);  // 8 / a
    CHECK(out == std::vector<float>{8, 4, 2});
    ck_binary_scalar(out.data(), a.data(), 3, 1.0f, CK_BIN_SUB, 0);
    CHECK(out == std::vector<float>{0, 1, 3});
    std::vector<float> x = {1, 2, 3, 4, 5, 6};
    int64_t sx[] = {2, 3}, sm[] = {1, 3};
    uint8_t mask[] = {0, 1, 0};
    ck_masked_fill(x.data(), sx, 2, x.data(), mask, sm, -1.0f);
    CHECK(x == std::vector<float>{1, -1, 3, 4, -1, 6});
}

TEST_CASE("ck_masked_fill broadcasts a mask over leading and inner dims, in parallel", "[kernels]")
{
    using S = std::vector<int64_t>;
    S shape = {3, 4, 90, 70};
    auto ms = GENERATE(S{3, 4, 90, 70}, S{1, 1, 90, 70}, S{3, 1, 1, 70}, S{1, 4, 90, 1});
    Threads th(2);
    auto n = [](const S &s) { return static_cast<size_t>(std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>())); };
    auto x = rnd(n(shape), 3);
    std::vector<uint8_t> mask(n(ms));
    for (size_t i = 0; i < mask.size(); i++) mask[i] = static_cast<uint8_t>((i * 7919u) % 3 == 0);
    std::vector<float> got(n(shape));
    ck_masked_fill(got.data(), shape.data(), 4, x.data(), mask.data(), ms.data(), -9.0f);
    size_t bad = 0;
    for (int64_t a = 0; a < 3; a++)
        for (int64_t b = 0; b < 4; b++)
            for (int64_t c = 0; c < 90; c++)
                for (int64_t d = 0; d < 70; d++) {
                    size_t i = static_cast<size_t>(((a * 4 + b) * 90 + c) * 70 + d);
                    int64_t idx[4] = {a, b, c, d}, m = 0;
                    for (int k = 0; k < 4; k++) m = m * ms[k] + (ms[k] == 1 ? 0 : idx[k]);
                    bad += got[i] != (mask[static_cast<size_t>(m)] ? -9.0f : x[i]);
                }
    CHECK(bad == 0);
}

// One row per op of CK_UNARY_OPS (runtime/include/ck_kernels.h): an input, the op's parameter and the
// value it must give (PyTorch's). The first test fails for an op without a row.
struct UnaryPoint {
    ck_unop op;
    float x, param, want;
};
const UnaryPoint kUnaryPoints[] = {
    {CK_UN_RELU, -1.5f, 0, 0.0f},         {CK_UN_SILU, 1.0f, 0, 0.7310586f},  {CK_UN_TANH, 0.5f, 0, 0.46211716f},
    {CK_UN_EXP, 1.0f, 0, 2.7182817f},     {CK_UN_RSQRT, 4.0f, 0, 0.5f},        {CK_UN_NEG, 2.0f, 0, -2.0f},
    {CK_UN_POW, 3.0f, 2.0f, 9.0f},        {CK_UN_SIGMOID, 1.0f, 0, 0.7310586f}, {CK_UN_ABS, -2.5f, 0, 2.5f},
    {CK_UN_COS, 1.0f, 0, 0.5403023f},     {CK_UN_SIN, 1.0f, 0, 0.84147098f}, {CK_UN_ERF, 0.5f, 0, 0.52049988f},
};

TEST_CASE("every unary op has a test row, and gives its value there", "[kernels]")
{
    for (int op = 0; op < CK_UN_COUNT; op++) {
        int rows = 0;
        for (const auto &r : kUnaryPoints) {
            if (r.op != op) continue;
            rows++;
            float got = 0, want = 0;
            ck_unary(&got, &r.x, 1, r.op, r.param);
            ck_unary_ref(&want, &r.x, 1, r.op, r.param);
            CHECK(got == Approx(r.want).epsilon(1e-6));
            CHECK(want == Approx(r.want).epsilon(1e-6));
        }
        INFO("ck_unop " << op << " has no row in kUnaryPoints");
        CHECK(rows > 0);
    }
}

TEST_CASE("exp is 0 below the float range and NaN for NaN; a masked score's probability is exactly 0", "[kernels]")
{
    bool portable = GENERATE(false, true);  // the AVX2 body, then SSE2 / scalar
    Portable p(portable);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // 19 values: two 8-wide vector blocks (or four of 4) and a scalar tail, each kind in each
    std::vector<float> x = {-inf, -100.0f, 1.0f, nan, -87.5f, 0.0f, -1.0f, -inf, 2.0f,  -inf, -100.0f,
                            nan,  0.5f,    -90.0f, 3.0f, -inf, nan,  -200.0f, 1.0f};
    std::vector<float> y(x.size(), 7.0f);
    ck_unary(y.data(), x.data(), x.size(), CK_UN_EXP, 0.0f);
    for (size_t i = 0; i < x.size(); i++) {
        INFO("exp(" << x[i] << ") = " << y[i]);
        if (std::isnan(x[i]))
            CHECK(std::isnan(y[i]));
        else if (x[i] < -87.0f)
            CHECK(y[i] == 0.0f);
        else
            CHECK(y[i] == Approx(std::exp(x[i])).epsilon(1e-6));
    }
    // a causal row: the masked scores' probabilities are 0 (not denormals), the rest sum to 1
    std::vector<float> row(20), out(20);
    for (int j = 0; j < 20; j++) row[static_cast<size_t>(j)] = j < 11 ? 0.1f * static_cast<float>(j) : -inf;
    ck_softmax(out.data(), row.data(), 1, 20, 1, 0);
    double sum = 0;
    for (int j = 0; j < 20; j++) {
        if (j >= 11) CHECK(out[static_cast<size_t>(j)] == 0.0f);
        sum += out[static_cast<size_t>(j)];
    }
    CHECK(sum == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("ck_unary and ck_bias_relu match the reference", "[kernels]")
{
    int op = GENERATE(range(0, static_cast<int>(CK_UN_COUNT)));
    bool portable = GENERATE(false, true);
    Portable p(portable);
    Threads th(2);
    size_t n = GENERATE(size_t{1}, size_t{13}, size_t{70000});
    auto x = rnd(n, 1, 2.0f);
    if (op == CK_UN_RSQRT)
        for (auto &v : x) v = std::fabs(v) + 0.1f;
    float param = op == CK_UN_POW ? GENERATE(2.0f, 3.0f, 0.5f, 1.7f) : 0.0f;
    if (op == CK_UN_POW && (param == 0.5f || param == 1.7f))
        for (auto &v : x) v = std::fabs(v);
    std::vector<float> got(n), want(n);
    ck_unary(got.data(), x.data(), n, static_cast<ck_unop>(op), param);
    ck_unary_ref(want.data(), x.data(), n, static_cast<ck_unop>(op), param);
    CHECK(max_rel_diff(got, want) < 2e-6);
    ck_unary(x.data(), x.data(), n, static_cast<ck_unop>(op), param);  // in place
    CHECK(max_rel_diff(x, want) < 2e-6);

    std::vector<float> y = {-1, 2, -3, 4}, bias = {0.5f, -3};
    ck_bias_relu(y.data(), y.data(), bias.data(), 2, 2);
    CHECK(y == std::vector<float>{0, 0, 0, 1});
}

TEST_CASE("ck_softmax and ck_reduce match the reference over any axis", "[kernels]")
{
    auto [outer, n, inner] = GENERATE(std::tuple{1, 1, 1}, std::tuple{7, 33, 1}, std::tuple{512, 128, 1},
                                      std::tuple{3, 10, 4}, std::tuple{1, 5, 9}, std::tuple{1, 256, 3072},
                                      std::tuple{2, 37, 300}, std::tuple{3, 1001, 1});
    Threads th(2);
    size_t total = static_cast<size_t>(outer) * n * inner;
    auto x = rnd(total, 1, 3.0f);
    int masked = GENERATE(0, 1);
    // slice 0 (every column): only -inf, a query that may attend to nothing
    auto xs = x;
    for (int k = 0; k < n && n > 1; k++)
        for (int j = 0; j < inner; j++) xs[static_cast<size_t>(k) * inner + j] = -std::numeric_limits<float>::infinity();
    std::vector<float> got(total), want(total);
    ck_softmax(got.data(), xs.data(), outer, n, inner, masked);
    ck_softmax_ref(want.data(), xs.data(), outer, n, inner, masked);
    for (int k = 0; k < n && n > 1; k++)
        for (int j = 0; j < inner; j++) {
            size_t i = static_cast<size_t>(k) * inner + j;
            CHECK((masked ? got[i] == 0.0f : std::isnan(got[i])));  // SDPA's 0, softmax's NaN
            CHECK((masked ? want[i] == 0.0f : std::isnan(want[i])));
            got[i] = want[i] = 0;
        }
    CHECK(max_abs_diff(got, want) < 1e-6);
    for (int op = 0; op < CK_RED_COUNT; op++) {
        std::vector<float> r1(static_cast<size_t>(outer) * inner), r2(r1.size());
        ck_reduce(r1.data(), x.data(), outer, n, inner, static_cast<ck_redop>(op));
        ck_reduce_ref(r2.data(), x.data(), outer, n, inner, static_cast<ck_redop>(op));
        if (op == CK_RED_MAX) {
            CHECK(r1 == r2);
            continue;
        }
        // against the sum of the magnitudes (a sum near 0 has no relative precision)
        double worst = 0;
        for (int o = 0; o < outer; o++)
            for (int j = 0; j < inner; j++) {
                double mag = 0;
                for (int k = 0; k < n; k++) mag += std::fabs(x[(static_cast<size_t>(o) * n + k) * inner + j]);
                size_t i = static_cast<size_t>(o) * inner + j;
                worst = std::max(worst, std::fabs(r1[i] - r2[i]) / (op == CK_RED_MEAN ? mag / n : mag + 1e-30));
            }
        CHECK(worst < 1e-6);
    }
}

TEST_CASE("ck_causal_mask puts -inf above the diagonal", "[kernels]")
{
    std::vector<float> x(2 * 3 * 3, 1.0f);
    ck_causal_mask(x.data(), x.data(), 2, 3);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) CHECK((x[(b * 3 + i) * 3 + j] == -INFINITY) == (j > i));
}

TEST_CASE("ck_permute matches the reference (row-run and element paths, any elem size)", "[kernels]")
{
    using S = std::vector<int64_t>;
    using P = std::vector<int>;
    auto [shape, perm] = GENERATE(std::pair{S{5}, P{0}}, std::pair{S{3, 4}, P{1, 0}}, std::pair{S{2, 3, 4, 5}, P{0, 2, 1, 3}},
                                  std::pair{S{2, 3, 4, 5}, P{0, 2, 3, 1}}, std::pair{S{2, 3, 4, 5}, P{3, 2, 1, 0}},
                                  std::pair{S{1, 7, 1, 3, 2}, P{4, 0, 3, 1, 2}},
                                  // the last two swapped (tiled transpose): partial tiles, batches, a large one
                                  std::pair{S{37, 45}, P{1, 0}}, std::pair{S{3, 33, 65}, P{0, 2, 1}},
                                  std::pair{S{300, 700}, P{1, 0}});
    int rank = static_cast<int>(shape.size());
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    std::vector<float> x(n), got(n), want(n);
    std::iota(x.begin(), x.end(), 0.0f);
    ck_permute(got.data(), x.data(), rank, shape.data(), perm.data(), sizeof(float));
    ck_permute_ref(want.data(), x.data(), rank, shape.data(), perm.data(), sizeof(float));
    CHECK(got == want);
    std::vector<int64_t> xi(n), gi(n);
    std::iota(xi.begin(), xi.end(), 0);
    ck_permute(gi.data(), xi.data(), rank, shape.data(), perm.data(), sizeof(int64_t));
    for (size_t i = 0; i < n; i++) CHECK(gi[i] == static_cast<int64_t>(want[i]));
    if (shape == S{3, 4}) CHECK(want == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
}

TEST_CASE("slice, cat, expand and row copies move the right elements", "[kernels]")
{
    std::vector<float> x(2 * 5 * 2);
    std::iota(x.begin(), x.end(), 0.0f);
    std::vector<float> s(2 * 2 * 2);
    ck_slice_copy(s.data(), x.data(), 2, 5, 2, 1, 2, 2, sizeof(float));  // rows 1, 3 of each outer
    CHECK(s == std::vector<float>{2, 3, 6, 7, 12, 13, 16, 17});

    std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, c(6);
    ck_cat_part(c.data(), a.data(), 2, 3, 2, 0, 1, sizeof(float));
    ck_cat_part(c.data(), b.data(), 2, 3, 1, 2, 1, sizeof(float));
    CHECK(c == std::vector<float>{1, 2, 5, 3, 4, 6});

    std::vector<float> e(2 * 3), v = {7, 8, 9};
    int64_t so[] = {2, 3}, sx[] = {1, 3};
    ck_expand(e.data(), so, 2, v.data(), sx, sizeof(float));
    CHECK(e == std::vector<float>{7, 8, 9, 7, 8, 9});

    std::vector<float> r(2 * 2);
    ck_copy_rows(r.data(), x.data(), 5, 2, 2);
    CHECK(r == std::vector<float>{0, 1, 5, 6});
}

TEST_CASE("ck_embedding_i64 gathers rows and rejects out-of-range ids without writing", "[kernels]")
{
    std::vector<float> table = {0, 1, 10, 11, 20, 21};
    int64_t ok[] = {2, 0}, bad[] = {1, 3}, neg[] = {-1};
    std::vector<float> out(4, -5.0f);
    CHECK(ck_embedding_i64(out.data(), table.data(), ok, 2, 2, 3) == -1);
    CHECK(out == std::vector<float>{20, 21, 0, 1});
    std::vector<float> untouched(4, -5.0f);
    CHECK(ck_embedding_i64(untouched.data(), table.data(), bad, 2, 2, 3) == 1);
    CHECK(ck_embedding_i64(untouched.data(), table.data(), neg, 1, 2, 3) == 0);
    CHECK(untouched == std::vector<float>(4, -5.0f));
}

TEST_CASE("ck_ew: a fused program equals its ops run one by one, with broadcast inputs, in place", "[kernels]")
{
    // out[R][C] = tanh((x - m) * r * g + 0.5) * (1 - x) / 2, pow(y, 2) + exp(-s); m, r columns [R,1], g a row [C],
    // s a scalar: every index pattern, a reused value (x), immediates on either side, every op kind
    bool portable = GENERATE(false, true);
    Portable p(portable);
    Threads th(2);
    size_t R = GENERATE(size_t{3}, size_t{300}), C = GENERATE(size_t{5}, size_t{257});
    size_t n = R * C;
    auto x = rnd(n, 1), m = rnd(R, 2), r = rnd(R, 3), g = rnd(C, 4), s = rnd(1, 5);
    const float *in[] = {x.data(), m.data(), r.data(), g.data(), s.data()};
    const int64_t div[] = {1, (int64_t)C, (int64_t)C, 1, 1}, mod[] = {(int64_t)n, (int64_t)R, (int64_t)R, (int64_t)C, 1};
    const ck_ew_insn prog[] = {
        {CK_EW_SUB, 0, 1, 0.0f},                 // v0 = x - m        (slot 5)
        {CK_EW_MUL, 5, 2, 0.0f},                 // v1 = v0 * r       (6)
        {CK_EW_MUL, 6, 3, 0.0f},                 // v2 = v1 * g       (7)
        {CK_EW_ADD, 7, -1, 0.5f},                // v3 = v2 + 0.5     (8)
        {CK_EW_UNARY + CK_UN_TANH, 8, -1, 0.0f}, // v4 = tanh(v3)     (9)
        {CK_EW_SUB, -1, 0, 1.0f},                // v5 = 1 - x        (10)
        {CK_EW_MUL, 9, 10, 0.0f},                // v6 = v4 * v5      (11)
        {CK_EW_DIV, 11, -1, 2.0f},               // v7 = v6 / 2       (12)
        {CK_EW_UNARY + CK_UN_POW, 12, -1, 2.0f}, // v8 = v7^2         (13)
        {CK_EW_UNARY + CK_UN_NEG, 4, -1, 0.0f},  // v9 = -s           (14)
        {CK_EW_UNARY + CK_UN_EXP, 14, -1, 0.0f}, // v10 = exp(v9)     (15)
        {CK_EW_ADD, 13, 15, 0.0f},               // out = v8 + v10
    };
    const int ninsn = sizeof prog / sizeof prog[0];
    std::vector<float> got(n), want(n), steps(n), tmp(n), one(n);
    ck_ew(got.data(), n, 5, in, div, mod, ninsn, prog);
    ck_ew_ref(want.data(), n, 5, in, div, mod, ninsn, prog);
    // the same through the unfused kernels
    const int64_t so[] = {(int64_t)R, (int64_t)C}, sc[] = {(int64_t)R, 1}, sr[] = {1, (int64_t)C};
    ck_binary(steps.data(), so, 2, x.data(), so, m.data(), sc, CK_BIN_SUB);
    ck_binary(steps.data(), so, 2, steps.data(), so, r.data(), sc, CK_BIN_MUL);
    ck_binary(steps.data(), so, 2, steps.data(), so, g.data(), sr, CK_BIN_MUL);
    ck_binary_scalar(steps.data(), steps.data(), n, 0.5f, CK_BIN_ADD, 0);
    ck_unary(steps.data(), steps.data(), n, CK_UN_TANH, 0.0f);
    ck_binary_scalar(tmp.data(), x.data(), n, 1.0f, CK_BIN_SUB, 1);
    ck_binary(steps.data(), so, 2, steps.data(), so, tmp.data(), so, CK_BIN_MUL);
    ck_binary_scalar(steps.data(), steps.data(), n, 2.0f, CK_BIN_DIV, 0);
    ck_unary(steps.data(), steps.data(), n, CK_UN_POW, 2.0f);
    float e = std::exp(-s[0]);
    for (size_t i = 0; i < n; i++) steps[i] += e;
    CHECK(max_abs_diff(got, steps) < 1e-6);
    CHECK(max_abs_diff(want, steps) < 1e-5);  // the reference's tanh in double
    // in place: the output over input 0 (x), which later instructions still read (1 - x)
    std::vector<float> alias = x;
    const float *in2[] = {alias.data(), m.data(), r.data(), g.data(), s.data()};
    ck_ew(alias.data(), n, 5, in2, div, mod, ninsn, prog);
    CHECK(max_abs_diff(alias, got) == 0.0);
}
