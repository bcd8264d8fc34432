// Training kernels (runtime/kernels/train.c): every backward against finite
// differences of its forward reference (central differences at sampled
// coordinates, the loss sum(r * y) for a random r, so dy = r), then the fast
// kernel against its *_ref twin over shapes with column strides, accumulation
// and 1 and 2 threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "ck_kernels.h"
#include "ck_quant.h"
#include "kernel_helpers.h"

using namespace ckc_kernel_test;

namespace {

using Vec = std::vector<float>;

double weighted(const Vec &y, const Vec &r)
{
    double s = 0;
    for (size_t i = 0; i < y.size(); i++) s += static_cast<double>(y[i]) * r[i];
    return s;
}

// d loss / d x[i] by central differences at up to 24 coordinates of x, against `grad`.
template <class Loss>
void fd_check(Vec &x, const Vec &grad, Loss loss, const char *what, double h = 1e-2, double tol = 2e-3)
{
    REQUIRE(x.size() == grad.size());
    std::mt19937 rng(7);
    size_t n = std::min<size_t>(24, x.size());
    for (size_t s = 0; s < n; s++) {
        size_t i = x.size() <= 24 ? s : rng() % x.size();
        float keep = x[i];
        x[i] = keep + static_cast<float>(h);
        double up = loss();
        x[i] = keep - static_cast<float>(h);
        double down = loss();
        x[i] = keep;
        double num = (up - down) / (2 * h);
        INFO(what << "[" << i << "]: analytic " << grad[i] << ", numeric " << num);
        CHECK(std::fabs(num - grad[i]) <= tol * std::max(1.0, std::fabs(num)));
    }
}

Vec strided(int rows, int cols, int ld, unsigned seed, float scale = 1.0f)
{
    Vec v = rnd(static_cast<size_t>(rows) * ld, seed, scale);
    return v;
}

}  // namespace

TEST_CASE("ck_embedding_backward: finite differences, repeated tokens, fast = ref", "[train]")
{
    int T = 9, C = 37, V = 5;
    std::vector<int32_t> tok = {0, 3, 3, 1, 4, 3, 0, 2, 3};
    Vec table = rnd(static_cast<size_t>(V) * C, 1), r = rnd(static_cast<size_t>(T) * C, 2);
    Vec d(table.size(), 0.5f), d_ref(d);
    ck_embedding_backward_ref(d_ref.data(), r.data(), tok.data(), T, C);
    Vec grad(d_ref);
    for (auto &g : grad) g -= 0.5f;  // accumulated onto 0.5
    fd_check(table, grad, [&] {
        Vec y(static_cast<size_t>(T) * C);
        ck_embedding(y.data(), table.data(), tok.data(), T, C);
        return weighted(y, r);
    }, "dtable");
    for (int nth : {1, 2}) {
        Threads th(nth);
        Vec a(table.size(), 0.5f);
        ck_embedding_backward(a.data(), r.data(), tok.data(), T, C);
        CHECK(max_abs_diff(a, d_ref) < 1e-5);
    }
    Vec dp(static_cast<size_t>(20) * C, 1.0f), dp_ref(dp);
    ck_pos_embed_backward(dp.data(), r.data(), T, C, 4);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < C; i++) dp_ref[static_cast<size_t>(4 + t) * C + i] += r[static_cast<size_t>(t) * C + i];
    CHECK(max_abs_diff(dp, dp_ref) == 0);
}

TEST_CASE("ck_rmsnorm_backward: finite differences (x, w; w_offset 0 and 1), fast = ref", "[train]")
{
    float w_offset = GENERATE(0.0f, 1.0f);
    int T = 3, C = 19;
    Vec x = rnd(static_cast<size_t>(T) * C, 1, 2.0f), w = rnd(C, 2), r = rnd(x.size(), 3);
    Vec dx(x.size()), dw(C, 0.0f);
    ck_rmsnorm_backward_ref(dx.data(), 0, dw.data(), r.data(), x.data(), w.data(), T, C, 1e-5f, w_offset);
    auto loss = [&] {
        Vec y(x.size());
        ck_rmsnorm_ref(y.data(), x.data(), w.data(), T, C, 1e-5f, w_offset);
        return weighted(y, r);
    };
    fd_check(x, dx, loss, "dx");
    fd_check(w, dw, loss, "dw");

    auto [T2, C2] = GENERATE(std::pair{1, 5}, std::pair{17, 129}, std::pair{64, 1024});
    int nth = GENERATE(1, 2), acc = GENERATE(0, 1);
    Threads th(nth);
    Vec x2 = rnd(static_cast<size_t>(T2) * C2, 4, 2.0f), w2 = rnd(C2, 5), dy = rnd(x2.size(), 6);
    Vec a = rnd(x2.size(), 7), b(a), awg(C2, 0.25f), bwg(awg), scratch(T2);
    ck_rmsnorm_backward(a.data(), acc, awg.data(), dy.data(), x2.data(), w2.data(), T2, C2, 1e-5f, w_offset,
                        scratch.data());
    ck_rmsnorm_backward_ref(b.data(), acc, bwg.data(), dy.data(), x2.data(), w2.data(), T2, C2, 1e-5f, w_offset);
    CHECK(max_rel_diff(a, b) < 1e-4);
    CHECK(max_rel_diff(awg, bwg) < 1e-4 * std::sqrt(static_cast<double>(T2)));
}

TEST_CASE("ck_layernorm_backward: finite differences (x, w, b), fast = ref", "[train]")
{
    int T = 3, C = 21;
    Vec x = rnd(static_cast<size_t>(T) * C, 1, 2.0f), w = rnd(C, 2), bias = rnd(C, 8), r = rnd(x.size(), 3);
    Vec dx(x.size()), dw(C, 0.0f), db(C, 0.0f);
    ck_layernorm_backward_ref(dx.data(), 0, dw.data(), db.data(), r.data(), x.data(), w.data(), T, C, 1e-5f);
    auto loss = [&] {
        Vec y(x.size());
        ck_layernorm_ref(y.data(), x.data(), w.data(), bias.data(), T, C, 1e-5f);
        return weighted(y, r);
    };
    fd_check(x, dx, loss, "dx");
    fd_check(w, dw, loss, "dw");
    fd_check(bias, db, loss, "db");

    auto [T2, C2] = GENERATE(std::pair{1, 5}, std::pair{17, 129}, std::pair{64, 1024});
    int nth = GENERATE(1, 2), acc = GENERATE(0, 1);
    Threads th(nth);
    Vec x2 = rnd(static_cast<size_t>(T2) * C2, 4, 2.0f), w2 = rnd(C2, 5), dy = rnd(x2.size(), 6);
    Vec a = rnd(x2.size(), 7), b(a), aw(C2, 0.25f), bw(aw), ab(C2, -1.0f), bb(ab), scratch(2 * T2);
    ck_layernorm_backward(a.data(), acc, aw.data(), ab.data(), dy.data(), x2.data(), w2.data(), T2, C2, 1e-5f,
                          scratch.data());
    ck_layernorm_backward_ref(b.data(), acc, bw.data(), bb.data(), dy.data(), x2.data(), w2.data(), T2, C2, 1e-5f);
    CHECK(max_rel_diff(a, b) < 1e-4);
    CHECK(max_rel_diff(aw, bw) < 1e-4 * std::sqrt(static_cast<double>(T2)));
    CHECK(max_rel_diff(ab, bb) < 1e-4 * std::sqrt(static_cast<double>(T2)));
}

TEST_CASE("ck_linear_backward: finite differences (x, w, b), fast = ref with strides", "[train]")
{
    int T = 4, K = 7, N = 5, ldx = 9, ldy = 6;
    Vec x = strided(T, K, ldx, 1), w = rnd(static_cast<size_t>(N) * K, 2), bias = rnd(N, 3);
    Vec r = strided(T, N, ldy, 4);
    Vec dx(static_cast<size_t>(T) * ldx, 0.0f), dw(w.size(), 0.0f), db(N, 0.0f);
    ck_linear_backward_ref(dx.data(), ldx, 0, dw.data(), db.data(), r.data(), ldy, x.data(), ldx, w.data(), T, K, N);
    auto loss = [&] {
        Vec y(static_cast<size_t>(T) * ldy, 0.0f);
        ck_linear_ref(y.data(), ldy, x.data(), ldx, w.data(), bias.data(), nullptr, 0, T, K, N);
        double s = 0;
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) s += static_cast<double>(y[t * ldy + n]) * r[t * ldy + n];
        return s;
    };
    // columns past K of each x row are not read: their gradient stays 0, which FD agrees with
    fd_check(x, dx, loss, "dx");
    fd_check(w, dw, loss, "dw");
    fd_check(bias, db, loss, "db");

    auto [T2, K2, N2] = GENERATE(std::tuple{1, 16, 24}, std::tuple{17, 129, 61}, std::tuple{64, 96, 300},
                                 std::tuple{130, 64, 48});
    int nth = GENERATE(1, 2), acc = GENERATE(0, 1);
    Threads th(nth);
    int lx = K2 + 3, ly = N2 + 5;
    Vec x2 = strided(T2, K2, lx, 5), w2 = rnd(static_cast<size_t>(N2) * K2, 6, 0.1f), dy = strided(T2, N2, ly, 7);
    Vec a = rnd(static_cast<size_t>(T2) * lx, 8), b(a), aw = rnd(w2.size(), 9), bw(aw), ab = rnd(N2, 10), bb(ab);
    ck_linear_backward(a.data(), lx, acc, aw.data(), ab.data(), dy.data(), ly, x2.data(), lx, w2.data(), T2, K2, N2);
    ck_linear_backward_ref(b.data(), lx, acc, bw.data(), bb.data(), dy.data(), ly, x2.data(), lx, w2.data(), T2, K2,
                           N2);
    CHECK(max_rel_diff(a, b) < 1e-4 * std::sqrt(static_cast<double>(N2)));
    CHECK(max_rel_diff(aw, bw) < 1e-4 * std::sqrt(static_cast<double>(T2)));
    CHECK(max_rel_diff(ab, bb) < 1e-4 * std::sqrt(static_cast<double>(T2)));
    for (int t = 0; t < T2; t++)  // columns past K of dx are untouched
        for (int k = K2; k < lx; k++) CHECK(a[static_cast<size_t>(t) * lx + k] == b[static_cast<size_t>(t) * lx + k]);
}

TEST_CASE("ck_rope_backward: finite differences (full and partial rotary), fast = ref, in place", "[train]")
{
    int rot = GENERATE(16, 8);
    int T = 5, H = 3, D = 16, ld = H * D + 4, pos0 = 2;
    ck_rope_params p = {CK_ROPE_DEFAULT, 10000.0, 1, 1, 4, 8192};
    Vec inv(rot / 2), cs(static_cast<size_t>(32) * rot / 2), sn(cs.size());
    ck_rope_inv_freq(inv.data(), rot, &p);
    ck_rope_table(cs.data(), sn.data(), inv.data(), rot, 32);
    Vec x = strided(T, H * D, ld, 1), r = rnd(static_cast<size_t>(T) * H * D, 2);
    Vec dx(x.size(), 0.0f);
    ck_rope_backward_ref(dx.data(), ld, 0, r.data(), H * D, T, H, D, rot, pos0, cs.data(), sn.data());
    fd_check(x, dx, [&] {
        Vec y(r.size());
        ck_rope_ref(y.data(), H * D, x.data(), ld, T, H, D, rot, pos0, cs.data(), sn.data(), 0, nullptr);
        return weighted(y, r);
    }, "dx");
    int acc = GENERATE(0, 1);
    Vec a = rnd(x.size(), 3), b(a);
    ck_rope_backward(a.data(), ld, acc, r.data(), H * D, T, H, D, rot, pos0, cs.data(), sn.data());
    ck_rope_backward_ref(b.data(), ld, acc, r.data(), H * D, T, H, D, rot, pos0, cs.data(), sn.data());
    CHECK(max_abs_diff(a, b) < 1e-5);
    Vec in_place(r);  // dx == dy
    ck_rope_backward(in_place.data(), H * D, 0, in_place.data(), H * D, T, H, D, rot, pos0, cs.data(), sn.data());
    Vec c(r.size());
    ck_rope_backward_ref(c.data(), H * D, 0, r.data(), H * D, T, H, D, rot, pos0, cs.data(), sn.data());
    CHECK(max_abs_diff(in_place, c) < 1e-5);
}

TEST_CASE("ck_attention_backward: finite differences (q, k, v; GQA, window, softcap), fast = ref", "[train]")
{
    // (window 150: wider than the kernel's 128-key blocks, in the 300-token case below)
    auto [window, softcap] = GENERATE(std::pair{0, 0.0f}, std::pair{3, 0.0f}, std::pair{0, 2.0f}, std::pair{150, 0.0f});
    int T = 6, H = 4, KVH = 2, D = 8, ldq = H * D + 3, cap = T;
    float scale = 0.5f;
    Vec q = strided(T, H * D, ldq, 1), kc = rnd(static_cast<size_t>(KVH) * cap * D, 2),
        vc = rnd(static_cast<size_t>(KVH) * cap * D, 3);
    Vec r = rnd(static_cast<size_t>(T) * H * D, 4);
    Vec dq(q.size(), 0.0f), dk(static_cast<size_t>(T) * KVH * D), dv(dk.size());
    ck_attention_backward_ref(dq.data(), ldq, dk.data(), KVH * D, dv.data(), KVH * D, 0, r.data(), H * D, q.data(), ldq,
                              kc.data(), vc.data(), cap, T, H, KVH, D, scale, window, softcap);
    auto loss = [&] {
        Vec y(r.size());
        ck_attention_ref(y.data(), H * D, q.data(), ldq, kc.data(), vc.data(), cap, T, 0, H, KVH, D, scale, window,
                         softcap, nullptr);
        return weighted(y, r);
    };
    fd_check(q, dq, loss, "dq");
    // dk/dv come back in row layout [T][KVH*D]; the cache holds them [KVH][T][D]
    Vec dk_cache(kc.size()), dv_cache(vc.size());
    for (int t = 0; t < T; t++)
        for (int g = 0; g < KVH; g++)
            for (int d = 0; d < D; d++) {
                dk_cache[(static_cast<size_t>(g) * cap + t) * D + d] = dk[static_cast<size_t>(t) * KVH * D + g * D + d];
                dv_cache[(static_cast<size_t>(g) * cap + t) * D + d] = dv[static_cast<size_t>(t) * KVH * D + g * D + d];
            }
    fd_check(kc, dk_cache, loss, "dk");
    fd_check(vc, dv_cache, loss, "dv");

    auto [T2, H2, KVH2, D2] = GENERATE(std::tuple{1, 2, 1, 16}, std::tuple{37, 4, 2, 16}, std::tuple{70, 6, 6, 8},
                                           std::tuple{300, 4, 2, 48});  // 3 blocks of keys / queries
    int nth = GENERATE(1, 2), acc = GENERATE(0, 1);
    Threads th(nth);
    int lq = H2 * D2 + 5, lk = KVH2 * D2 * 3;  // dk, dv: column views of a wider gradient (the fused QKV's)
    Vec q2 = strided(T2, H2 * D2, lq, 5), k2 = rnd(static_cast<size_t>(KVH2) * T2 * D2, 6),
        v2 = rnd(static_cast<size_t>(KVH2) * T2 * D2, 7), go = rnd(static_cast<size_t>(T2) * H2 * D2, 8);
    Vec out(static_cast<size_t>(T2) * H2 * D2);
    ck_attention_ref(out.data(), H2 * D2, q2.data(), lq, k2.data(), v2.data(), T2, T2, 0, H2, KVH2, D2, 0.25f, window,
                     softcap, nullptr);
    Vec aq = rnd(q2.size(), 9), bq(aq), akv = rnd(static_cast<size_t>(T2) * lk, 10), bkv(akv);
    Vec scratch(static_cast<size_t>(2) * T2 * H2);
    ck_attention_backward(aq.data(), lq, akv.data(), lk, akv.data() + KVH2 * D2, lk, acc, go.data(), H2 * D2, q2.data(),
                          lq, k2.data(), v2.data(), T2, out.data(), H2 * D2, T2, H2, KVH2, D2, 0.25f, window, softcap,
                          scratch.data());
    ck_attention_backward_ref(bq.data(), lq, bkv.data(), lk, bkv.data() + KVH2 * D2, lk, acc, go.data(), H2 * D2,
                              q2.data(), lq, k2.data(), v2.data(), T2, T2, H2, KVH2, D2, 0.25f, window, softcap);
    CHECK(max_rel_diff(aq, bq) < 2e-5);
    CHECK(max_rel_diff(akv, bkv) < 2e-5);
}

TEST_CASE("ck_glu_backward, ck_gelu_backward, ck_softcap_backward: finite differences, fast = ref", "[train]")
{
    ck_act act = GENERATE(CK_ACT_SILU, CK_ACT_GELU_TANH, CK_ACT_GELU);
    int T = 3, F = 11, ldg = 13;
    Vec g = strided(T, F, ldg, 1, 2.0f), u = strided(T, F, ldg, 2), r = rnd(static_cast<size_t>(T) * F, 3);
    Vec dg(g.size(), 0.0f), du(u.size(), 0.0f);
    ck_glu_backward_ref(dg.data(), ldg, du.data(), ldg, 0, r.data(), F, g.data(), ldg, u.data(), ldg, T, F, act);
    auto glu_loss = [&] {
        Vec y(r.size());
        ck_glu_ref(y.data(), F, g.data(), ldg, u.data(), ldg, T, F, act);
        return weighted(y, r);
    };
    fd_check(g, dg, glu_loss, "dgate", 1e-3);
    fd_check(u, du, glu_loss, "dup", 1e-3);
    Vec a(dg), b(dg), a2(du), b2(du);
    for (int acc : {0, 1}) {
        ck_glu_backward(a.data(), ldg, a2.data(), ldg, acc, r.data(), F, g.data(), ldg, u.data(), ldg, T, F, act);
        ck_glu_backward_ref(b.data(), ldg, b2.data(), ldg, acc, r.data(), F, g.data(), ldg, u.data(), ldg, T, F, act);
        CHECK(max_rel_diff(a, b) < 1e-5);
        CHECK(max_rel_diff(a2, b2) < 1e-5);
    }
    if (act != CK_ACT_SILU) {
        Vec x = rnd(40, 4, 2.0f), rg = rnd(40, 5), dx(40);
        ck_gelu_backward_ref(dx.data(), 0, rg.data(), x.data(), 40, act);
        fd_check(x, dx, [&] {
            Vec y(40);
            ck_gelu_ref(y.data(), x.data(), 40, act);
            return weighted(y, rg);
        }, "gelu dx", 1e-3);
        Vec fa(40, 1.0f), fb(fa);
        ck_gelu_backward(fa.data(), 1, rg.data(), x.data(), 40, act);
        ck_gelu_backward_ref(fb.data(), 1, rg.data(), x.data(), 40, act);
        CHECK(max_rel_diff(fa, fb) < 1e-5);
    }
    Vec x = rnd(40, 6, 8.0f), rs = rnd(40, 7), dx(40);
    ck_softcap_backward_ref(dx.data(), 0, rs.data(), x.data(), 40, 5.0f);
    fd_check(x, dx, [&] {
        Vec y(40);
        ck_softcap_ref(y.data(), x.data(), 40, 5.0f);
        return weighted(y, rs);
    }, "softcap dx", 1e-3);
    Vec sa(dx), sb(dx);
    ck_softcap_backward(sa.data(), 1, rs.data(), x.data(), 40, 5.0f);
    ck_softcap_backward_ref(sb.data(), 1, rs.data(), x.data(), 40, 5.0f);
    CHECK(max_rel_diff(sa, sb) < 1e-5);
    // clamp: the gradient passes inside [lo, hi] (the bounds included, as torch's) and nowhere else
    for (int bounds = 0; bounds < 4; bounds++) {
        Vec cx = rnd(40, 8, 4.0f), cd(40);
        cx[3] = -1.5f, cx[4] = 2.5f, cx[5] = NAN;  // on each bound, and NaN (no gradient)
        ck_clamp_backward_ref(cd.data(), 0, rs.data(), cx.data(), 40, -1.5f, 2.5f, bounds);
        for (size_t i = 0; i < 40; i++) {
            const bool in = !std::isnan(cx[i]) && (!(bounds & 1) || cx[i] >= -1.5f) && (!(bounds & 2) || cx[i] <= 2.5f);
            CHECK(cd[i] == (in ? rs[i] : 0.0f));
        }
        cx[5] = 0.0f;
        Vec fx(cx);  // finite differences away from the bounds (the clamp is not differentiable on them)
        for (float &v : fx)
            if (std::fabs(v + 1.5f) < 0.01f || std::fabs(v - 2.5f) < 0.01f) v += 0.05f;
        ck_clamp_backward_ref(cd.data(), 0, rs.data(), fx.data(), 40, -1.5f, 2.5f, bounds);
        fd_check(fx, cd, [&] {
            Vec y(40);
            ck_clamp_ref(y.data(), fx.data(), 40, -1.5f, 2.5f, bounds);
            return weighted(y, rs);
        }, "clamp dx", 1e-3);
        Vec ca(40, 1.0f), cb(ca);
        cx[5] = NAN;
        ck_clamp_backward(ca.data(), 1, rs.data(), cx.data(), 40, -1.5f, 2.5f, bounds);
        ck_clamp_backward_ref(cb.data(), 1, rs.data(), cx.data(), 40, -1.5f, 2.5f, bounds);
        CHECK(ca == cb);
    }
}

TEST_CASE("ck_cross_entropy: the loss, finite differences, ignored rows, fast = ref in place", "[train]")
{
    int T = 5, V = 13;
    Vec l = rnd(static_cast<size_t>(T) * V, 1, 3.0f);
    std::vector<int32_t> tgt = {3, -100, 12, 0, 3};
    Vec d(l.size());
    int n = 0;
    double loss = ck_cross_entropy_ref(d.data(), l.data(), tgt.data(), T, V, -100, &n);
    CHECK(n == 4);
    double expect = 0;  // -log softmax at the target, averaged over counted rows
    for (int t = 0; t < T; t++) {
        if (tgt[t] == -100) continue;
        double mx = -1e30, s = 0;
        for (int v = 0; v < V; v++) mx = std::max(mx, static_cast<double>(l[t * V + v]));
        for (int v = 0; v < V; v++) s += std::exp(l[t * V + v] - mx);
        expect += mx + std::log(s) - l[t * V + tgt[t]];
    }
    CHECK(loss == Approx(expect / 4).epsilon(1e-12));
    for (int v = 0; v < V; v++) CHECK(d[V + v] == 0.0f);  // the ignored row
    fd_check(l, d, [&] {
        Vec scratch(l.size());
        int k;
        return ck_cross_entropy_ref(scratch.data(), l.data(), tgt.data(), T, V, -100, &k);
    }, "dlogits", 1e-3, 1e-3);
    for (int nth : {1, 2}) {
        Threads th(nth);
        int T2 = 33, V2 = 5000, k1, k2;
        Vec l2 = rnd(static_cast<size_t>(T2) * V2, 2, 4.0f), a(l2), b(l2.size());
        std::vector<int32_t> t2(T2);
        for (int t = 0; t < T2; t++) t2[t] = t % 7 == 3 ? -1 : (t * 977) % V2;
        double la = ck_cross_entropy(a.data(), a.data(), t2.data(), T2, V2, -1, &k1);  // in place
        double lb = ck_cross_entropy_ref(b.data(), l2.data(), t2.data(), T2, V2, -1, &k2);
        CHECK(k1 == k2);
        CHECK(la == Approx(lb).epsilon(1e-5));
        CHECK(max_abs_diff(a, b) < 1e-6);  // values up to 1 / n_counted
    }
}

TEST_CASE("ck_adamw and ck_sum_squares: fast = ref over steps, weight decay, clipping scale", "[train]")
{
    size_t n = 1000;
    Vec w = rnd(n, 1), wr(w), m(n, 0.0f), v(n, 0.0f), mr(m), vr(v);
    for (int step = 1; step <= 5; step++) {
        Vec g = rnd(n, 10 + step, 0.1f);
        ck_adamw(w.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
        ck_adamw_ref(wr.data(), g.data(), mr.data(), vr.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
    }
    CHECK(max_abs_diff(w, wr) < 1e-5);
    CHECK(max_abs_diff(m, mr) < 1e-6);
    // the first step of Adam moves every weight by lr (times sign of g) after decay
    Vec w1(4, 1.0f), g1 = {0.5f, -2.0f, 1e-3f, 7.0f}, m1(4, 0.0f), v1(4, 0.0f);
    ck_adamw(w1.data(), g1.data(), m1.data(), v1.data(), 4, 0.1f, 0.9f, 0.999f, 1e-12f, 0.0f, 1.0f, 1);
    CHECK(w1[0] == Approx(0.9f));
    CHECK(w1[1] == Approx(1.1f));
    CHECK(w1[3] == Approx(0.9f));
    // past one 4096-block and CK_PAR_MIN: the blocks and their threads, a partial last block
    Threads th(2);
    size_t big = 70001;
    Vec wb = rnd(big, 2), wbr(wb), mb(big, 0.0f), vb(big, 0.0f), mbr(mb), vbr(vb), gb = rnd(big, 3, 0.1f);
    ck_adamw(wb.data(), gb.data(), mb.data(), vb.data(), big, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
    ck_adamw_ref(wbr.data(), gb.data(), mbr.data(), vbr.data(), big, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
    CHECK(max_abs_diff(wb, wbr) < 1e-5);
    CHECK(max_abs_diff(vb, vbr) < 1e-8);
    double want = 0;
    for (float x : gb) want += static_cast<double>(x) * x;
    CHECK(ck_sum_squares(gb.data(), big) == Approx(want).epsilon(1e-12));
    Vec s = {1.0f, -2.0f, 3.0f};
    CHECK(ck_sum_squares(s.data(), 3) == 14.0);
    s[1] = NAN;
    CHECK(std::isnan(ck_sum_squares(s.data(), 3)));
}

TEST_CASE("ck_moe_route_backward, ck_moe_experts_backward: finite differences, acc", "[train][moe]")
{
    const int T = 3, E = 6, k = 2, C = 8, F = 12, ld = E + 2;
    for (int norm : {0, 1}) {
        INFO("norm_topk " << norm);
        // logits far from ties, so that the central differences keep the choice
        Vec logits(static_cast<size_t>(T) * ld, 0.0f);
        for (int t = 0; t < T; t++)
            for (int e = 0; e < E; e++) logits[t * ld + e] = 0.9f * static_cast<float>((e * 5 + t * 3) % E) - 1.5f;
        Vec r = rnd(static_cast<size_t>(T) * ld, 11), dl(logits.size(), 0.0f);
        auto route_loss = [&] {
            Vec y(logits.size(), 0.0f);
            ck_moe_route_ref(y.data(), ld, logits.data(), ld, T, E, k, norm);
            double s = 0;
            for (int t = 0; t < T; t++)
                for (int e = 0; e < E; e++) s += static_cast<double>(y[t * ld + e]) * r[t * ld + e];
            return s;
        };
        ck_moe_route_backward(dl.data(), ld, 0, r.data(), ld, logits.data(), ld, T, E, k, norm, nullptr, 0.0f);
        fd_check(logits, dl, route_loss, "d logits", 1e-3);
        Vec twice(dl);
        ck_moe_route_backward(twice.data(), ld, 1, r.data(), ld, logits.data(), ld, T, E, k, norm, nullptr, 0.0f);
        for (size_t i = 0; i < dl.size(); i++) CHECK(twice[i] == Approx(2 * dl[i]).margin(1e-7));
        // with the load-balancing loss (two "layers": the rows twice), its gradient joins the route's
        const float coef = 0.5f;
        auto aux_of = [&](std::vector<double> &aux) {
            aux.assign(2 * E + 1, 0.0);
            ck_moe_aux_stats(aux.data(), logits.data(), ld, T, E, k);
            ck_moe_aux_stats(aux.data(), logits.data(), ld, T, E, k);
            return ck_moe_aux_loss(aux.data(), E, coef);
        };
        std::vector<double> aux;
        aux_of(aux);
        Vec dla(logits.size(), 0.0f);
        ck_moe_route_backward(dla.data(), ld, 0, r.data(), ld, logits.data(), ld, T, E, k, norm, aux.data(), coef);
        for (size_t i = 0; i < dla.size(); i++) dla[i] *= 2;  // the same rows in both layers
        for (size_t i = 0; i < dla.size(); i++) dla[i] -= dl[i];  // d (2 route_loss + aux) - d route_loss
        fd_check(logits, dla, [&] {
            std::vector<double> a2;
            return route_loss() + aux_of(a2);
        }, "d logits (load-balancing loss)", 1e-3);
    }
    {  // the loss's value: coef E sum_e (count_e / R)(P_e / R), by hand for 2 rows of 3 experts, top 1
        const float l2[6] = {0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 0.0f};
        std::vector<double> aux(7, 0.0);
        ck_moe_aux_stats(aux.data(), l2, 3, 2, 3, 1);
        double p0[3] = {std::exp(0.0), std::exp(1.0), std::exp(2.0)}, p1[3] = {std::exp(3.0), 1.0, 1.0};
        double s0 = p0[0] + p0[1] + p0[2], s1 = p1[0] + p1[1] + p1[2];
        double want = 0.1 * 3 * ((0.5) * (p0[0] / s0 + p1[0] / s1) / 2 + 0.5 * (p0[2] / s0 + p1[2] / s1) / 2);
        CHECK(aux[0] == 1.0);
        CHECK(aux[1] == 0.0);
        CHECK(aux[2] == 1.0);
        CHECK(aux[6] == 2.0);
        CHECK(ck_moe_aux_loss(aux.data(), 3, 0.1) == Approx(want).epsilon(1e-6));
    }
    // the experts: route fixed (two of E per token, one expert unused)
    Vec x = strided(T, C, C + 1, 21), route(static_cast<size_t>(T) * E, 0.0f);
    for (int t = 0; t < T; t++) {
        route[t * E + t % 3] = 0.6f;
        route[t * E + 3 + t % 2] = 0.4f;
    }
    Vec gate = rnd(static_cast<size_t>(E) * F * C, 22, 0.4f), up = rnd(gate.size(), 23, 0.4f),
        down = rnd(static_cast<size_t>(E) * C * F, 24, 0.4f), r = rnd(static_cast<size_t>(T) * C, 25);
    Vec fwd_scratch(CK_MOE_EXPERTS_SCRATCH(T, C, F) / 4 + 1), bwd_scratch(CK_MOE_EXPERTS_BACKWARD_SCRATCH(T, C, F) / 4 + 1);
    auto loss = [&] {
        Vec y(static_cast<size_t>(T) * C);
        REQUIRE(ck_moe_experts_f32(y.data(), C, x.data(), C + 1, route.data(), E, T, E, C, F, gate.data(), up.data(),
                                   down.data(), CK_ACT_SILU, fwd_scratch.data()) == 0);
        return weighted(y, r);
    };
    Vec dx(x.size(), 0.0f), droute(route.size(), 5.0f), dg(gate.size(), 0.0f), du(up.size(), 0.0f), dd(down.size(), 0.0f);
    ck_moe_experts_backward(dx.data(), C + 1, 0, droute.data(), E, dg.data(), du.data(), dd.data(), r.data(), C, x.data(),
                            C + 1, route.data(), E, T, E, C, F, gate.data(), up.data(), down.data(), CK_ACT_SILU,
                            bwd_scratch.data());
    for (int t = 0; t < T; t++) dx[t * (C + 1) + C] = 0.0f;  // the stride's gap: no gradient (x's gap is data)
    fd_check(x, dx, loss, "dx", 1e-2);
    fd_check(gate, dg, loss, "d gate", 1e-2);
    fd_check(up, du, loss, "d up", 1e-2);
    fd_check(down, dd, loss, "d down", 1e-2);
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++)
            if (route[t * E + e] == 0.0f) CHECK(droute[t * E + e] == 0.0f);  // not chosen: written 0
    // d route of a chosen expert: the expert's output against r (finite differences keep the choice: > 0)
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            if (route[t * E + e] == 0.0f) continue;
            float keep = route[t * E + e];
            route[t * E + e] = keep + 1e-2f;
            double a = loss();
            route[t * E + e] = keep - 1e-2f;
            double b = loss();
            route[t * E + e] = keep;
            CHECK(std::fabs((a - b) / 2e-2 - droute[t * E + e]) <= 2e-3 * std::max(1.0, std::fabs((a - b) / 2e-2)));
        }
    Vec dx2(dx), dg2(dg);  // acc: dx adds; the weights' gradients always add
    ck_moe_experts_backward(dx2.data(), C + 1, 1, droute.data(), E, dg2.data(), du.data(), dd.data(), r.data(), C,
                            x.data(), C + 1, route.data(), E, T, E, C, F, gate.data(), up.data(), down.data(),
                            CK_ACT_SILU, bwd_scratch.data());
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) CHECK(dx2[t * (C + 1) + c] == Approx(2 * dx[t * (C + 1) + c]).margin(1e-6));
    for (size_t i = 0; i < dg.size(); i++) CHECK(dg2[i] == Approx(2 * dg[i]).margin(1e-6));
}
