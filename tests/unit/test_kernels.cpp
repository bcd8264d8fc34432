// Kernel tests: each optimized kernel against its *_ref twin, over several
// shapes including odd sizes, strided (column-view) operands and in-place use.
//
// How to add a row: write `kernel_case` lambdas below that fill inputs, run
// the fast kernel and the reference on copies, and call `close()`; add the
// shapes to its GENERATE list. Tolerances are relative to the data scale.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "ck_kernels.h"
#include "kernel_helpers.h"
#include "../../runtime/kernels/blas.h"

using namespace ckc_kernel_test;

TEST_CASE("ck_rmsnorm matches the reference", "[kernels]")
{
    auto [T, C] = GENERATE(std::pair{1, 1}, std::pair{1, 7}, std::pair{3, 64}, std::pair{17, 129}, std::pair{64, 2048});
    float w_offset = GENERATE(0.0f, 1.0f);
    Threads th(2);
    auto x = rnd(static_cast<size_t>(T) * C, 1, 3.0f), w = rnd(C, 2);
    std::vector<float> a(x.size()), b(x.size());
    ck_rmsnorm(a.data(), x.data(), w.data(), T, C, 1e-5f, w_offset);
    ck_rmsnorm_ref(b.data(), x.data(), w.data(), T, C, 1e-5f, w_offset);
    CHECK(max_abs_diff(a, b) < 1e-5);
    ck_rmsnorm(x.data(), x.data(), w.data(), T, C, 1e-5f, w_offset);  // in place
    CHECK(max_abs_diff(x, b) < 1e-5);
}

TEST_CASE("ck_linear matches the reference (GEMV, GEMM, bias, residual, strides)", "[kernels]")
{
    auto [T, K, N] = GENERATE(std::tuple{1, 1, 1}, std::tuple{1, 64, 96}, std::tuple{1, 77, 333}, std::tuple{5, 64, 64},
                              std::tuple{17, 129, 61}, std::tuple{32, 256, 1000}, std::tuple{3, 512, 2048},
                              std::tuple{130, 64, 48}, std::tuple{257, 96, 100});  // the last two: split by rows
    int mode = GENERATE(0, 1, 2, 3, 4);  // plain, bias, separate addend, in-place addend, addend + bias
    int nth = GENERATE(1, 2);
    Threads th(nth);
    int ldx = K + 3, ldo = N + 5;  // column views of wider tensors
    auto x = rnd(static_cast<size_t>(T) * ldx, 3), w = rnd(static_cast<size_t>(N) * K, 4, 0.1f), bias = rnd(N, 5);
    auto add = rnd(static_cast<size_t>(T) * ldo, 6);
    std::vector<float> a(static_cast<size_t>(T) * ldo, 7.0f), b(a);
    const float *bp = (mode == 1 || mode == 4) ? bias.data() : nullptr;
    if (mode == 3 || mode == 4) {
        a = add;
        b = add;
        ck_linear(a.data(), ldo, x.data(), ldx, w.data(), bp, a.data(), ldo, T, K, N);
        ck_linear_ref(b.data(), ldo, x.data(), ldx, w.data(), bp, add.data(), ldo, T, K, N);
    } else {
        const float *ap = mode == 2 ? add.data() : nullptr;
        ck_linear(a.data(), ldo, x.data(), ldx, w.data(), bp, ap, ldo, T, K, N);
        ck_linear_ref(b.data(), ldo, x.data(), ldx, w.data(), bp, ap, ldo, T, K, N);
    }
    CHECK(max_abs_diff(a, b) < 1e-4 * std::sqrt(static_cast<double>(K)));
    for (int t = 0; t < T; t++)  // columns past N are untouched
        for (int j = N; j < ldo; j++) CHECK(a[static_cast<size_t>(t) * ldo + j] == b[static_cast<size_t>(t) * ldo + j]);
}

TEST_CASE("ck_rope matches the reference (in place, out of place, partial rotary)", "[kernels]")
{
    auto [T, H, D, rot] = GENERATE(std::tuple{1, 1, 2, 2}, std::tuple{4, 3, 16, 16}, std::tuple{9, 4, 64, 32},
                                   std::tuple{5, 2, 80, 80}, std::tuple{3, 2, 128, 64});
    int pos0 = GENERATE(0, 11);
    int n_pos = pos0 + T;
    std::vector<float> inv(rot / 2), cs(static_cast<size_t>(n_pos) * (rot / 2)), sn(cs.size());
    ck_rope_params p = {CK_ROPE_DEFAULT, 10000.0, 1.0, 1.0, 4.0, 8192.0};
    ck_rope_inv_freq(inv.data(), rot, &p);
    ck_rope_table(cs.data(), sn.data(), inv.data(), rot, n_pos);
    int ld = H * D + 6;
    auto x = rnd(static_cast<size_t>(T) * ld, 8);
    std::vector<float> a(x.size(), 0.0f), b(x.size(), 0.0f), c = x;
    int il = GENERATE(0, 1);
    ck_rope(a.data(), ld, x.data(), ld, T, H, D, rot, pos0, cs.data(), sn.data(), il, nullptr);
    ck_rope_ref(b.data(), ld, x.data(), ld, T, H, D, rot, pos0, cs.data(), sn.data(), il, nullptr);
    CHECK(max_abs_diff(a, b) < 1e-6);
    ck_rope(c.data(), ld, c.data(), ld, T, H, D, rot, pos0, cs.data(), sn.data(), il, nullptr);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H * D; i++) CHECK(c[static_cast<size_t>(t) * ld + i] == Approx(b[static_cast<size_t>(t) * ld + i]).margin(1e-6));
    if (il && rot == D) {
        // GGUF's llama permutation: row (2i + s) of a head holds HF's row (s * D/2 + i). Interleaved RoPE of the
        // permuted vector is the permuted HF RoPE of the original.
        auto perm = [&](const std::vector<float> &v) {
            std::vector<float> o(v);
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < D / 2; i++)
                        for (int s = 0; s < 2; s++)
                            o[static_cast<size_t>(t) * ld + h * D + 2 * i + s] = v[static_cast<size_t>(t) * ld + h * D + s * D / 2 + i];
            return o;
        };
        std::vector<float> hf(x.size(), 0.0f), ggml(x.size(), 0.0f);
        auto xp = perm(x);
        ck_rope_ref(hf.data(), ld, x.data(), ld, T, H, D, rot, pos0, cs.data(), sn.data(), 0, nullptr);
        ck_rope_ref(ggml.data(), ld, xp.data(), ld, T, H, D, rot, pos0, cs.data(), sn.data(), 1, nullptr);
        auto hfp = perm(hf);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < H * D; i++)
                REQUIRE(ggml[static_cast<size_t>(t) * ld + i] == Approx(hfp[static_cast<size_t>(t) * ld + i]).margin(1e-6));
    }
}

TEST_CASE("ck_rope_inv_freq: default, linear and llama3 scaling", "[kernels]")
{
    std::vector<float> d(32), l(32), l3(32);
    ck_rope_params pd = {CK_ROPE_DEFAULT, 500000.0, 1.0, 1.0, 4.0, 8192.0};
    ck_rope_params pl = {CK_ROPE_LINEAR, 500000.0, 4.0, 1.0, 4.0, 8192.0};
    ck_rope_params p3 = {CK_ROPE_LLAMA3, 500000.0, 8.0, 1.0, 4.0, 8192.0};
    ck_rope_inv_freq(d.data(), 64, &pd);
    ck_rope_inv_freq(l.data(), 64, &pl);
    ck_rope_inv_freq(l3.data(), 64, &p3);
    for (int i = 0; i < 32; i++) {
        CHECK(d[i] == Approx(std::pow(500000.0, -2.0 * i / 64)).epsilon(1e-6));
        CHECK(l[i] == Approx(d[i] / 4).epsilon(1e-6));
        double wavelen = 2 * M_PI / d[i];
        if (wavelen < 8192.0 / 4) CHECK(l3[i] == d[i]);                          // high frequencies untouched
        if (wavelen > 8192.0) CHECK(l3[i] == Approx(d[i] / 8).epsilon(1e-6));   // low frequencies / factor
        CHECK(l3[i] <= d[i]);
    }
}

TEST_CASE("ck_attention matches the reference (GQA, cache offset, window, softcap)", "[kernels]")
{
    // GQA groups of 2, 3 (a sub-group of one: attend_heads_512 in sub-groups), 5, 6, 7 and 8, with D a multiple of
    // 16, take the grouped kernels (AVX-512: passes of 4 heads and one of the rest, 64 columns and the last 16 at
    // a time; AVX2 with D a multiple of 8); the rest, and every shape on the portable path, attend_one. Ranges
    // past 128 keys: blocks of 32 with a partial last one, prefetched ahead when decoding. D 40 takes the AVX2
    // kernel on every x86 path, with its last 8 columns on their own. A prompt with up to 4 heads per KV head
    // (T > 1: 1, 2 and 3 here) runs the heads of up to 8 / group tokens together on the same kernels, each row to
    // its own position: with 13 cached positions, tokens 16-20 reach keys 29-33, so some rows have no key in the
    // last block.
    auto [T, pos0, H, KVH, D] = GENERATE(std::tuple{1, 0, 1, 1, 1}, std::tuple{1, 37, 4, 2, 16},
                                         std::tuple{7, 0, 4, 4, 32}, std::tuple{13, 5, 6, 2, 64},
                                         std::tuple{40, 0, 2, 1, 128}, std::tuple{3, 100, 8, 8, 80},
                                         std::tuple{1, 70, 32, 4, 64}, std::tuple{2, 20, 16, 2, 96},
                                         std::tuple{3, 40, 10, 2, 64}, std::tuple{5, 9, 14, 2, 48},
                                         std::tuple{2, 300, 12, 2, 64}, std::tuple{1, 290, 12, 2, 64},
                                         std::tuple{4, 30, 6, 2, 40}, std::tuple{1, 150, 16, 2, 40},
                                         std::tuple{21, 13, 3, 3, 64}, std::tuple{9, 30, 2, 2, 40});
    int window = GENERATE(0, 4);
    float softcap = GENERATE(0.0f, 5.0f);
    int nth = GENERATE(1, 2);
    const char *path = GENERATE(from_range(kernel_paths()));
    KernelPath forced(path);
    if (!forced.available) {
        WARN("skipped: this CPU has no " << path << " kernels");
        return;
    }
    Threads th(nth);
    int cap = pos0 + T + 3, ldq = H * D + 2, ldo = H * D + 1;
    auto q = rnd(static_cast<size_t>(T) * ldq, 9);
    auto kc = rnd(static_cast<size_t>(KVH) * cap * D, 10), vc = rnd(static_cast<size_t>(KVH) * cap * D, 11);
    std::vector<float> a(static_cast<size_t>(T) * ldo, 0.0f), b(a);
    float scale = 1.0f / std::sqrt(static_cast<float>(D));
    ck_attention(a.data(), ldo, q.data(), ldq, kc.data(), vc.data(), cap, T, pos0, H, KVH, D, scale, window, softcap, nullptr);
    ck_attention_ref(b.data(), ldo, q.data(), ldq, kc.data(), vc.data(), cap, T, pos0, H, KVH, D, scale, window, softcap, nullptr);
    CHECK(max_abs_diff(a, b) < 2e-6);
}

TEST_CASE("batched sequences: kv_store, attention, rope and pos_embed with a seqmap equal each sequence alone",
          "[kernels]")
{
    // one call: sequence 0 decodes at position 5, sequence 1 prefills positions 0..3, sequence 2 decodes at 9;
    // each sequence owns 16 rows of the cache (rows 16 s .. 16 s + 15)
    const int H = 4, KVH = 2, D = 16, per = 16, S = 3, cap = S * per, ld = H * D, kld = KVH * D, window = GENERATE(0, 3);
    const std::vector<int32_t> seq = {1, 0, 1, 2, 1, 1}, pos = {0, 5, 1, 9, 2, 3};
    const int T = static_cast<int>(seq.size());
    std::vector<int32_t> start(seq.size());
    for (size_t t = 0; t < seq.size(); t++) start[t] = seq[t] * per;
    ck_seqmap map = {pos.data(), start.data()};
    Threads th(2);
    auto q = rnd(static_cast<size_t>(T) * ld, 40), k = rnd(static_cast<size_t>(T) * kld, 41), v = rnd(static_cast<size_t>(T) * kld, 42);
    auto kc = rnd(static_cast<size_t>(KVH) * cap * D, 43), vc = rnd(static_cast<size_t>(KVH) * cap * D, 44);
    auto kc0 = kc, vc0 = vc;  // the earlier positions of every sequence
    std::vector<float> got(static_cast<size_t>(T) * ld), ref_got(got.size());
    ck_kv_store(kc.data(), vc.data(), cap, 0, k.data(), kld, v.data(), kld, T, KVH, D, &map);
    ck_attention(got.data(), ld, q.data(), ld, kc.data(), vc.data(), cap, T, 0, H, KVH, D, 0.25f, window, 0.0f, &map);
    ck_attention_ref(ref_got.data(), ld, q.data(), ld, kc.data(), vc.data(), cap, T, 0, H, KVH, D, 0.25f, window, 0.0f,
                     &map);
    CHECK(max_abs_diff(got, ref_got) < 2e-6);
    // each sequence alone: its own [KVH][per][D] cache holding its rows, its tokens in order from their first position
    for (int s = 0; s < S; s++) {
        std::vector<int> mine;
        for (int t = 0; t < T; t++)
            if (seq[static_cast<size_t>(t)] == s) mine.push_back(t);
        int n = static_cast<int>(mine.size()), p0 = pos[static_cast<size_t>(mine[0])];
        std::vector<float> ks(static_cast<size_t>(KVH) * per * D), vs(ks.size()), qs(static_cast<size_t>(n) * ld),
            kk(static_cast<size_t>(n) * kld), vv(kk.size()), out(static_cast<size_t>(n) * ld);
        for (int h = 0; h < KVH; h++)
            for (int j = 0; j < per * D; j++) {
                ks[static_cast<size_t>(h) * per * D + j] = kc0[(static_cast<size_t>(h) * cap + s * per) * D + j];
                vs[static_cast<size_t>(h) * per * D + j] = vc0[(static_cast<size_t>(h) * cap + s * per) * D + j];
            }
        for (int i = 0; i < n; i++) {
            int t = mine[static_cast<size_t>(i)];
            std::copy_n(q.begin() + static_cast<long>(t) * ld, ld, qs.begin() + static_cast<long>(i) * ld);
            std::copy_n(k.begin() + static_cast<long>(t) * kld, kld, kk.begin() + static_cast<long>(i) * kld);
            std::copy_n(v.begin() + static_cast<long>(t) * kld, kld, vv.begin() + static_cast<long>(i) * kld);
        }
        ck_kv_store(ks.data(), vs.data(), per, p0, kk.data(), kld, vv.data(), kld, n, KVH, D, nullptr);
        ck_attention(out.data(), ld, qs.data(), ld, ks.data(), vs.data(), per, n, p0, H, KVH, D, 0.25f, window, 0.0f,
                     nullptr);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < ld; j++)
                REQUIRE(got[static_cast<size_t>(mine[static_cast<size_t>(i)]) * ld + j] ==
                        Approx(out[static_cast<size_t>(i) * ld + j]).margin(1e-6));
    }
    // RoPE and learned positions: token t at pos[t], as a one-token call at that position
    const int rot = D, half = rot / 2, npos = 16;
    std::vector<float> cs(static_cast<size_t>(npos) * half), sn(cs.size());
    for (int p = 0; p < npos; p++)
        for (int i = 0; i < half; i++) {
            cs[static_cast<size_t>(p) * half + i] = std::cos(0.1f * p * (i + 1));
            sn[static_cast<size_t>(p) * half + i] = std::sin(0.1f * p * (i + 1));
        }
    std::vector<float> r(q.size()), one(static_cast<size_t>(ld)), pe(q.size()), pe1(static_cast<size_t>(ld));
    auto table = rnd(static_cast<size_t>(npos) * ld, 45);
    ck_rope(r.data(), ld, q.data(), ld, T, H, D, rot, 0, cs.data(), sn.data(), 0, &map);
    ck_pos_embed(pe.data(), q.data(), table.data(), T, ld, 0, &map);
    for (int t = 0; t < T; t++) {
        ck_rope(one.data(), ld, q.data() + static_cast<size_t>(t) * ld, ld, 1, H, D, rot, pos[static_cast<size_t>(t)],
                cs.data(), sn.data(), 0, nullptr);
        ck_pos_embed(pe1.data(), q.data() + static_cast<size_t>(t) * ld, table.data(), 1, ld, pos[static_cast<size_t>(t)],
                     nullptr);
        for (int j = 0; j < ld; j++) {
            REQUIRE(r[static_cast<size_t>(t) * ld + j] == one[static_cast<size_t>(j)]);
            REQUIRE(pe[static_cast<size_t>(t) * ld + j] == pe1[static_cast<size_t>(j)]);
        }
    }
}

TEST_CASE("ck_attention: a single visible key returns its value", "[kernels]")
{
    // position 0 sees only key 0, so the output is exactly v[0]
    int H = 2, KVH = 1, D = 4, cap = 8;
    std::vector<float> q(H * D, 1.0f), kc(KVH * cap * D, 0.5f), vc(KVH * cap * D);
    for (size_t i = 0; i < vc.size(); i++) vc[i] = static_cast<float>(i);
    std::vector<float> out(H * D);
    ck_attention(out.data(), H * D, q.data(), H * D, kc.data(), vc.data(), cap, 1, 0, H, KVH, D, 0.5f, 0, 0.0f, nullptr);
    for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) CHECK(out[h * D + d] == static_cast<float>(d));
}

TEST_CASE("ck_kv_store writes the [KVH][cap][D] layout", "[kernels]")
{
    int T = 3, KVH = 2, D = 4, cap = 10, pos0 = 5, ld = KVH * D + 3;
    auto k = rnd(static_cast<size_t>(T) * ld, 12), v = rnd(static_cast<size_t>(T) * ld, 13);
    std::vector<float> kc(static_cast<size_t>(KVH) * cap * D, -1.0f), vc(kc);
    ck_kv_store(kc.data(), vc.data(), cap, pos0, k.data(), ld, v.data(), ld, T, KVH, D, nullptr);
    for (int h = 0; h < KVH; h++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                CHECK(kc[(static_cast<size_t>(h) * cap + pos0 + t) * D + d] == k[static_cast<size_t>(t) * ld + h * D + d]);
                CHECK(vc[(static_cast<size_t>(h) * cap + pos0 + t) * D + d] == v[static_cast<size_t>(t) * ld + h * D + d]);
            }
    CHECK(kc[0] == -1.0f);  // untouched positions stay
}

TEST_CASE("ck_glu matches the reference (SwiGLU, GeGLU, strided halves, in place)", "[kernels]")
{
    auto [T, F] = GENERATE(std::pair{1, 1}, std::pair{3, 17}, std::pair{16, 2048}, std::pair{7, 5632});
    ck_act act = GENERATE(CK_ACT_SILU, CK_ACT_GELU_TANH, CK_ACT_GELU);
    bool portable = GENERATE(false, true);
    Portable simd(portable);
    Threads th(2);
    int ld = 2 * F;  // gate | up halves of one fused GEMM output
    auto gu = rnd(static_cast<size_t>(T) * ld, 14, 4.0f);
    std::vector<float> a(static_cast<size_t>(T) * F), b(a);
    ck_glu(a.data(), F, gu.data(), ld, gu.data() + F, ld, T, F, act);
    ck_glu_ref(b.data(), F, gu.data(), ld, gu.data() + F, ld, T, F, act);
    CHECK(max_rel_diff(a, b) < 1e-5);  // act error ~2e-7 times |up| up to ~16
    ck_glu(gu.data(), ld, gu.data(), ld, gu.data() + F, ld, T, F, act);  // in place over the gate half
    for (int t = 0; t < T; t++)
        for (int f = 0; f < F; f++) CHECK(gu[static_cast<size_t>(t) * ld + f] == a[static_cast<size_t>(t) * F + f]);
}

TEST_CASE("ck_gelu and ck_softcap match the reference", "[kernels]")
{
    size_t n = GENERATE(1, 255, 257, 100000);
    bool portable = GENERATE(false, true);
    Portable simd(portable);
    Threads th(2);
    auto x = rnd(n, 19, 8.0f);
    for (ck_act act : {CK_ACT_GELU_TANH, CK_ACT_GELU}) {
        std::vector<float> a(n), b(n);
        ck_gelu(a.data(), x.data(), n, act);
        ck_gelu_ref(b.data(), x.data(), n, act);
        CHECK(max_rel_diff(a, b) < 2e-6);
    }
    std::vector<float> c(n), d(n);
    ck_softcap(c.data(), x.data(), n, 5.0f);
    ck_softcap_ref(d.data(), x.data(), n, 5.0f);
    CHECK(max_rel_diff(c, d) < 1e-6);
    for (float v : c) CHECK(std::fabs(v) <= 5.0f);
}

TEST_CASE("ck_clamp matches the reference and torch.clamp's edges", "[kernels]")
{
    size_t n = GENERATE(1, 257, 100000);
    Threads th(2);
    auto x = rnd(n, 23, 8.0f);
    x[0] = NAN;
    if (n > 2) x[1] = INFINITY, x[2] = -INFINITY;
    for (int bounds = 0; bounds < 4; bounds++) {
        std::vector<float> a(n), b(n);
        ck_clamp(a.data(), x.data(), n, -2.0f, 3.0f, bounds);
        ck_clamp_ref(b.data(), x.data(), n, -2.0f, 3.0f, bounds);
        for (size_t i = 0; i < n; i++) {
            INFO("bounds " << bounds << " i " << i << " x " << x[i]);
            if (std::isnan(x[i])) {  // NaN stays NaN
                CHECK(std::isnan(a[i]));
                CHECK(std::isnan(b[i]));
                continue;
            }
            float want = x[i];
            if ((bounds & 1) && want < -2.0f) want = -2.0f;
            if ((bounds & 2) && want > 3.0f) want = 3.0f;
            CHECK(a[i] == want);
            CHECK(b[i] == want);
        }
    }
    std::vector<float> y(x);  // in place
    ck_clamp(y.data(), y.data(), n, -1.0f, 1.0f, 3);
    for (size_t i = 1; i < n; i++) CHECK(std::fabs(y[i]) <= 1.0f);
}

TEST_CASE("ck_layernorm matches the reference", "[kernels]")
{
    auto [T, C] = GENERATE(std::pair{1, 1}, std::pair{1, 7}, std::pair{3, 64}, std::pair{17, 129}, std::pair{32, 2560});
    Threads th(2);
    auto x = rnd(static_cast<size_t>(T) * C, 20, 3.0f), w = rnd(C, 21), bias = rnd(C, 22);
    for (size_t i = 0; i < x.size(); i++) x[i] += 5.0f;  // a large mean: variance must not cancel
    std::vector<float> a(x.size()), b(x.size());
    ck_layernorm(a.data(), x.data(), w.data(), bias.data(), T, C, 1e-5f);
    ck_layernorm_ref(b.data(), x.data(), w.data(), bias.data(), T, C, 1e-5f);
    CHECK(max_abs_diff(a, b) < 2e-5);
}

TEST_CASE("ck_pos_embed and ck_scale", "[kernels]")
{
    int T = 3, C = 4, pos0 = 2;
    std::vector<float> x(T * C, 1.0f), table(8 * C), out(T * C);
    for (size_t i = 0; i < table.size(); i++) table[i] = static_cast<float>(i);
    ck_pos_embed(out.data(), x.data(), table.data(), T, C, pos0, nullptr);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) CHECK(out[t * C + c] == 1.0f + table[(pos0 + t) * C + c]);
    ck_scale(out.data(), out.data(), out.size(), 0.5f);
    CHECK(out[0] == 0.5f * (1.0f + table[pos0 * C]));
}

TEST_CASE("ck_add and ck_add_bias", "[kernels]")
{
    size_t n = GENERATE(1, 7, 100000);
    Threads th(2);
    auto a = rnd(n, 15), b = rnd(n, 16);
    std::vector<float> x(n), y(n);
    ck_add(x.data(), a.data(), b.data(), n);
    ck_add_ref(y.data(), a.data(), b.data(), n);
    CHECK(max_abs_diff(x, y) == 0.0);
    int T = 3, N = 5;
    auto m = rnd(T * N, 17), bias = rnd(N, 18);
    std::vector<float> o(T * N);
    ck_add_bias(o.data(), m.data(), bias.data(), T, N);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < N; j++) CHECK(o[t * N + j] == m[t * N + j] + bias[j]);
}

TEST_CASE("vector exp: accurate over the whole float range, both bodies", "[kernels]")
{
    bool portable = GENERATE(false, true);
    Portable simd(portable);
    // softmax of scores spanning exp's range: a saturated row still sums to 1
    int H = 1, D = 8, n = 40, cap = 40;
    std::vector<float> q(D, 0.0f), kc(static_cast<size_t>(cap) * D, 0.0f), vc(static_cast<size_t>(cap) * D, 1.0f);
    q[0] = 1.0f;
    for (int j = 0; j < n; j++) kc[static_cast<size_t>(j) * D] = -90.0f + 4.5f * j;  // scores -90 .. 85.5
    std::vector<float> out(D), ref(D);
    ck_attention(out.data(), D, q.data(), D, kc.data(), vc.data(), cap, 1, n - 1, H, H, D, 1.0f, 0, 0.0f, nullptr);
    ck_attention_ref(ref.data(), D, q.data(), D, kc.data(), vc.data(), cap, 1, n - 1, H, H, D, 1.0f, 0, 0.0f, nullptr);
    for (int d = 0; d < D; d++) CHECK(out[d] == Approx(1.0f).epsilon(1e-6));
    CHECK(ck_cpu_avx2() == (portable ? 0 : ck_cpu_avx2()));
}

TEST_CASE("ck_embedding gathers rows", "[kernels]")
{
    int V = 10, C = 3;
    std::vector<float> table(V * C);
    for (size_t i = 0; i < table.size(); i++) table[i] = static_cast<float>(i);
    int32_t tokens[] = {9, 0, 4};
    std::vector<float> out(3 * C);
    ck_embedding(out.data(), table.data(), tokens, 3, C);
    CHECK(out == std::vector<float>{27, 28, 29, 0, 1, 2, 12, 13, 14});
}

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

TEST_CASE("threads: enter sets OpenBLAS to one thread and leave restores it", "[kernels]")
{
    openblas_set_num_threads(2);
    {
        Threads th(2);
        CHECK(openblas_get_num_threads() == 1);
    }
    CHECK(openblas_get_num_threads() == 2);
    CHECK(ck_threads_available() >= 1);
}

TEST_CASE("blas: ckc's own GEMM and GEMV equal a double-precision reference on every path, any layout", "[kernels]")
{
    // what a --standalone model.c runs instead of OpenBLAS: both transposes, alpha, beta (0: C not read, NaN
    // there stays out), sizes that are not multiples of the 4 x 16 block (6 x 16 on AVX2) or the 256-deep panel, row strides
    // wider than the matrix. Each kernel path the CPU has runs; the others are reported as skipped.
    for (const char *path : kernel_paths()) {
        KernelPath forced(path);
        if (!forced.available) {
            WARN("skipped: this CPU has no " << path << " kernels");
            continue;
        }
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (auto [M, N, K] : {std::tuple{1, 1, 1}, {5, 17, 3}, {7, 33, 300}, {16, 48, 513}}) {
                    for (float beta : {0.0f, 1.0f, -0.5f}) {
                        INFO("path " << path << " ta " << ta << " tb " << tb << " M " << M << " N " << N << " K " << K
                                     << " beta " << beta);
                        const int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 3, ldc = N + 1;
                        auto A = rnd(static_cast<size_t>(ta ? K : M) * lda, 11u);
                        auto B = rnd(static_cast<size_t>(tb ? N : K) * ldb, 12u);
                        auto C = rnd(static_cast<size_t>(M) * ldc, 13u);
                        if (beta == 0.0f) std::fill(C.begin(), C.end(), NAN);
                        std::vector<float> got(C);
                        const float alpha = 0.75f;
                        ck_sgemm_builtin(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
                        for (int i = 0; i < M; i++)
                            for (int j = 0; j < N; j++) {
                                double acc = 0;
                                for (int k = 0; k < K; k++)
                                    acc += static_cast<double>(ta ? A[static_cast<size_t>(k) * lda + i]
                                                                  : A[static_cast<size_t>(i) * lda + k]) *
                                           (tb ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j]);
                                double want = alpha * acc + (beta == 0.0f ? 0.0 : beta * C[static_cast<size_t>(i) * ldc + j]);
                                REQUIRE(got[static_cast<size_t>(i) * ldc + j] == Approx(want).margin(1e-4).epsilon(1e-5));
                            }
                        for (int i = 0; i < M; i++)  // the stride's padding is not written
                            REQUIRE(std::isnan(got[static_cast<size_t>(i) * ldc + N]) == std::isnan(C[static_cast<size_t>(i) * ldc + N]));
                    }
                    // GEMV, both ways, against the GEMM with one column
                    const int lda = N + 2;
                    auto A = rnd(static_cast<size_t>(M) * lda, 21u);
                    auto x = rnd(static_cast<size_t>(ta ? M : N), 22u);
                    auto y = rnd(static_cast<size_t>(ta ? N : M), 23u);
                    std::vector<float> got(y), want(y);
                    ck_sgemv_builtin(ta, M, N, 0.5f, A.data(), lda, x.data(), 2.0f, got.data());
                    if (ta)
                        ck_sgemm_builtin(1, 0, N, 1, M, 0.5f, A.data(), lda, x.data(), 1, 2.0f, want.data(), 1);
                    else
                        ck_sgemm_builtin(0, 0, M, 1, N, 0.5f, A.data(), lda, x.data(), 1, 2.0f, want.data(), 1);
                    REQUIRE(max_abs_diff(got, want) < 1e-4);
                }
    }
    CHECK(std::string(ck_blas_name()) == "openblas");  // this library: the separate runtime sources' default
}
