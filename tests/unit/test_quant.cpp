// The stored weight formats (ck_quant.h): quantize -> dequantize error per
// type, the fast dot products against their scalar twins and against the
// dequantized values, the int8 prefill GEMM (qgemm.c) and the f16 / bf16 one
// (fgemm.c) against their scalar twins bit for bit, and ck_linear_q (dot, int8 GEMM and float-tile paths,
// mixed-type parts, bias, residual, threads) against the float GEMM of the
// dequantized matrix.
// Bit-exactness with GGUF / llama.cpp is tests/python/test_quant.py's job.
#include <cstring>
#include <map>
#include <string>

#include "ck_errors.h"
#include "ck_quant.h"
#include "kernel_helpers.h"
#include "../../runtime/kernels/fgemm.h"
#include "../../runtime/kernels/qgemm.h"

using namespace ckc_kernel_test;

namespace {

// every type a model may be stored in: the rows of the traits table (a new format is tested by being added)
std::vector<int> stored_types()
{
    std::vector<int> out;
    for (int i = 0; const ck_qtype_traits *t = ck_qtype_traits_at(i); i++)
        if (t->stored) out.push_back(t->type);
    return out;
}
const std::vector<int> kStored = stored_types();

std::vector<uint8_t> quantize(int type, const std::vector<float> &x)
{
    std::vector<uint8_t> q(ck_qtype_row_bytes(type, static_cast<int64_t>(x.size())));
    REQUIRE(!q.empty());
    REQUIRE(ck_quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size())) == 0);
    return q;
}

std::vector<float> dequantize(int type, const std::vector<uint8_t> &q, size_t n)
{
    std::vector<float> y(n);
    ck_dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(n));
    return y;
}

// worst relative RMS error a type may have on Gaussian data (measured, with margin); a type without a row fails
const std::map<std::string, double> kRmsBound = {
    {"f32", 0},        {"f16", 1e-3},     {"bf16", 4e-3},  {"q8_0", 8e-3},  {"q6_K", 2e-2}, {"q5_0", 4.5e-2},
    {"q5_1", 4.5e-2},  {"q5_K", 4.5e-2},  {"q4_0", 9e-2},  {"q4_1", 9e-2},  {"q4_K", 9e-2},
};
double rms_bound(int type)
{
    auto it = kRmsBound.find(ck_qtype_name(type));
    INFO("format " << ck_qtype_name(type) << " has no error bound in kRmsBound");
    REQUIRE(it != kRmsBound.end());
    return it->second;
}

}  // namespace

TEST_CASE("quant: every stored format has every function, and kernels that multiply it", "[quant]")
{
    REQUIRE(kStored.size() >= 11);
    for (int i = 0; const ck_qtype_traits *t = ck_qtype_traits_at(i); i++) {
        INFO("row " << i << ": " << t->name);
        CHECK(ck_qtype_traits_of(t->type) == t);      // one row per type number
        CHECK(ck_qtype_from_name(t->name) == (t->stored ? t->type : -1));
        if (!t->block) {  // a GGML type ckc does not read: named only, every function missing
            CHECK((!t->quantize && !t->dequantize && !t->stored));
            CHECK(ck_quantize_row(t->type, nullptr, nullptr, 0) == CK_ENOTSUP);
            CHECK(ck_dequantize_row(t->type, nullptr, nullptr, 0) == CK_ENOTSUP);
            CHECK(std::isnan(ck_vec_dot(t->type, 0, nullptr, nullptr)));  // never a silent 0
            continue;
        }
        CHECK(t->quantize);
        CHECK(t->dequantize);
        if (!t->stored) continue;  // q8_1, q8_K: activations only
        const ck_qtype_traits *dot = ck_qtype_traits_of(t->dot_type);
        REQUIRE(dot);
        CHECK(dot->quantize);
        CHECK(t->gguf_file_type >= 0);
        CHECK(ck_qtype_for_rows(t->type, t->block) == t->type);
        if (t->block > 1) CHECK(ck_qtype_row_bytes(ck_qtype_for_rows(t->type, t->block + 16), t->block + 16) > 0);
        const ck_qtype_cpu *cpu = ck_qtype_cpu_of(t->type);
        REQUIRE(cpu);
        CHECK(cpu->dot_ref);
        CHECK(ck_vec_dot_for(t->type));
        // the int8 GEMM's own table agrees with the kernels' row
        CHECK((cpu->gemm == CK_GEMM_INT8) == (ck_qgemm_type(t->type) != 0));
        CHECK((cpu->gemm == CK_GEMM_FLOAT) == (ck_fgemm_type(t->type) != 0));
    }
    CHECK(ck_quantize_row(CK_Q_Q8_0, nullptr, nullptr, 31) == CK_EINVAL);  // not a whole block
}

TEST_CASE("quant: llama.cpp's fallback for rows that are not whole blocks", "[quant]")
{
    CHECK(ck_qtype_for_rows(CK_Q_Q4_K, 512) == CK_Q_Q4_K);
    CHECK(ck_qtype_for_rows(CK_Q_Q4_K, 96) == CK_Q_Q5_0);
    CHECK(ck_qtype_for_rows(CK_Q_Q5_K, 96) == CK_Q_Q5_1);
    CHECK(ck_qtype_for_rows(CK_Q_Q6_K, 96) == CK_Q_Q8_0);
    CHECK(ck_qtype_for_rows(CK_Q_Q4_K, 40) == CK_Q_F16);  // nor whole blocks of the fallback
    CHECK(ck_qtype_for_rows(CK_Q_Q8_0, 40) == CK_Q_F16);
    CHECK(ck_qtype_for_rows(99, 64) == -1);
}

TEST_CASE("quant: the type table and row sizes", "[quant]")
{
    CHECK(ck_qtype_row_bytes(CK_Q_Q4_0, 64) == 36);
    CHECK(ck_qtype_row_bytes(CK_Q_Q4_K, 512) == 288);
    CHECK(ck_qtype_row_bytes(CK_Q_Q6_K, 256) == 210);
    CHECK(ck_qtype_row_bytes(CK_Q_Q8_0, 48) == 0);  // not a multiple of the block
    CHECK(ck_qtype_from_name("q4_k") == CK_Q_Q4_K);
    CHECK(ck_qtype_from_name("Q8_0") == CK_Q_Q8_0);
    CHECK(ck_qtype_from_name("q8_K") == -1);  // activations only
    CHECK(ck_qtype_from_name("q3_K") == -1);
    CHECK(std::string(ck_qtype_name(CK_Q_BF16)) == "bf16");
    CHECK(ck_qtype_dot_type(CK_Q_Q4_1) == CK_Q_Q8_1);
    CHECK(ck_qtype_dot_type(CK_Q_Q6_K) == CK_Q_Q8_K);
}

TEST_CASE("quant: fp16 and bf16 conversions round to nearest even", "[quant]")
{
    CHECK(ck_fp32_to_fp16(1.0f) == 0x3C00);
    CHECK(ck_fp32_to_fp16(65504.0f) == 0x7BFF);
    CHECK(ck_fp32_to_fp16(65520.0f) == 0x7C00);               // rounds up to inf
    CHECK(ck_fp32_to_fp16(1.0f + 1.0f / 2048) == 0x3C00);     // tie -> even
    CHECK(ck_fp32_to_fp16(1.0f + 3.0f / 2048) == 0x3C02);     // tie -> even (up)
    CHECK(ck_fp32_to_fp16(5.960464477539063e-08f) == 0x0001); // smallest subnormal
    CHECK((ck_fp32_to_fp16(std::nanf("")) & 0x7C00) == 0x7C00);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = ck_fp16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        REQUIRE(ck_fp32_to_fp16(f) == h);  // every half survives the round trip
    }
    CHECK(ck_fp32_to_bf16(1.0f) == 0x3F80);
    CHECK(ck_fp32_to_bf16(1.00390625f) == 0x3F80);  // tie -> even
    CHECK(ck_fp32_to_bf16(1.01171875f) == 0x3F82);  // tie -> even (up)
}

TEST_CASE("quant: quantize -> dequantize error per type, incl. zeros and extremes", "[quant]")
{
    const size_t n = 4 * CK_QK_K;
    for (int type : kStored) {
        INFO("type " << ck_qtype_name(type));
        std::vector<float> x = rnd(n, 7u + type);
        auto y = dequantize(type, quantize(type, x), n);
        double err = 0, ref = 0;
        for (size_t i = 0; i < n; i++) {
            err += (y[i] - x[i]) * (y[i] - x[i]);
            ref += x[i] * x[i];
        }
        CHECK(std::sqrt(err / ref) <= rms_bound(type));
        // all zeros, one huge value among tiny ones, all equal, negative extremes
        std::vector<float> z(n, 0.0f);
        CHECK(max_abs_diff(dequantize(type, quantize(type, z), n), z) == 0.0);
        std::vector<float> spike(n, 1e-6f);
        spike[5] = -3e4f;
        auto ys = dequantize(type, quantize(type, spike), n);
        CHECK(std::fabs(ys[5] - spike[5]) <= 3e4 * (type == CK_Q_BF16 ? 4e-3 : 1e-3) + 1);
        std::vector<float> flat(n, -0.75f);
        auto yf = dequantize(type, quantize(type, flat), n);
        CHECK(max_abs_diff(yf, flat) <= 2e-3);
    }
}

TEST_CASE("quant: fast dot products equal their scalar twins and the dequantized dot", "[quant]")
{
    for (int64_t n : {int64_t(CK_QK_K), int64_t(3 * CK_QK_K)})
        for (int type : kStored) {
            INFO("type " << ck_qtype_name(type) << " n " << n);
            auto w = rnd(static_cast<size_t>(n), 11u + type, 0.5f);
            auto a = rnd(static_cast<size_t>(n), 23u + type, 2.0f);
            auto wq = quantize(type, w);
            int dt = ck_qtype_dot_type(type);
            auto aq = quantize(dt, a);
            float fast = ck_vec_dot(type, n, wq.data(), aq.data());
            float ref = ck_vec_dot_ref(type, n, wq.data(), aq.data());
            ck_cpu_force_no_avx512(1);  // the AVX2 bodies too, on a machine with AVX-512 VNNI
            float avx2 = ck_vec_dot(type, n, wq.data(), aq.data());
            ck_cpu_force_no_vnni(1);  // and without AVX-VNNI
            float plain = ck_vec_dot(type, n, wq.data(), aq.data());
            ck_cpu_force_no_vnni(0);
            ck_cpu_force_no_avx512(0);
            CHECK(std::fabs(avx2 - fast) <= 1e-5 * std::max(1.0f, std::fabs(fast)) + 1e-6);
            CHECK(std::fabs(plain - fast) <= 1e-5 * std::max(1.0f, std::fabs(fast)) + 1e-6);
            {
                Portable scalar(true);
                CHECK(ck_vec_dot(type, n, wq.data(), aq.data()) == ref);
            }
            auto wd = dequantize(type, wq, static_cast<size_t>(n));
            auto ad = dequantize(dt, aq, static_cast<size_t>(n));
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += static_cast<double>(wd[i]) * ad[i];
                mag += std::fabs(static_cast<double>(wd[i]) * ad[i]);
            }
            CHECK(std::fabs(fast - ref) <= 1e-5 * mag);
            // the _1 types add min * s, where s = d sum(q) of the activations is stored as f16 (llama.cpp's layout)
            bool one = type == CK_Q_Q4_1 || type == CK_Q_Q5_1;
            CHECK(std::fabs(ref - exact) <= (one ? 2e-3 : 2e-5) * mag);
        }
}

TEST_CASE("quant: ck_linear_q (dot and tile paths, mixed parts, bias, residual, threads)", "[quant]")
{
    const int K = 512;
    // e.g. q | k | v of different types; row counts that are not multiples of the 4-row kernels' 4
    auto [types, rows] = GENERATE(std::pair{std::vector<int>{CK_Q_Q4_K, CK_Q_Q8_0, CK_Q_F32}, std::vector<int64_t>{48, 32, 80}},
                                  std::pair{std::vector<int>{CK_Q_Q4_0, CK_Q_Q4_1, CK_Q_Q6_K}, std::vector<int64_t>{38, 97, 25}},
                                  std::pair{std::vector<int>{CK_Q_F16, CK_Q_BF16, CK_Q_Q5_K}, std::vector<int64_t>{70, 9, 33}});
    const int N = static_cast<int>(rows[0] + rows[1] + rows[2]);
    std::vector<std::vector<uint8_t>> parts;
    std::vector<float> wd(static_cast<size_t>(N) * K);
    ck_qmat m{};
    m.n_parts = 3;
    int64_t r0 = 0;
    for (int p = 0; p < 3; p++) {
        auto w = rnd(static_cast<size_t>(rows[p]) * K, 100u + p, 0.3f);
        parts.push_back(quantize(types[p], w));
        m.type[p] = types[p];
        m.rows[p] = rows[p];
        m.data[p] = parts[p].data();
        ck_dequantize_row(types[p], parts[p].data(), wd.data() + r0 * K, rows[p] * K);
        r0 += rows[p];
    }
    auto bias = rnd(N, 5u);
    std::vector<float> wabs(wd);
    for (auto &v : wabs) v = std::fabs(v);
    for (int T : {1, 3, 5, 9, 21}) {
        for (int threads : {1, 2}) {
            INFO("T " << T << " threads " << threads);
            Threads th(threads);
            const int ldx = K + 8, ldo = N + 4;
            auto x = rnd(static_cast<size_t>(T) * ldx, 40u + T);
            auto add = rnd(static_cast<size_t>(T) * ldo, 60u + T);
            std::vector<float> out(static_cast<size_t>(T) * ldo, 0.0f), ref(out), exact(out);
            REQUIRE(ck_linear_q(out.data(), ldo, x.data(), ldx, &m, bias.data(), add.data(), ldo, T, K, N) == 0);
            REQUIRE(ck_linear_q_ref(ref.data(), ldo, x.data(), ldx, &m, bias.data(), add.data(), ldo, T, K, N) == 0);
            std::vector<float> plain(out.size(), 0.0f);  // the AVX2 bodies without VNNI, on a machine that has it
            ck_cpu_force_no_vnni(1);
            REQUIRE(ck_linear_q(plain.data(), ldo, x.data(), ldx, &m, bias.data(), add.data(), ldo, T, K, N) == 0);
            ck_cpu_force_no_vnni(0);
            for (size_t i = 0; i < out.size(); i++) REQUIRE(std::fabs(plain[i] - out[i]) <= 1e-5 * (1.0 + std::fabs(out[i])));
            // what a CPU without AVX-512 runs: the AVX2 int8 GEMM for integer parts (8-bit activations), float tiles
            // for the float ones (and for all on a CPU without AVX2)
            std::vector<float> tiles(out.size(), 0.0f);
            ck_cpu_force_no_avx512(1);
            REQUIRE(ck_linear_q(tiles.data(), ldo, x.data(), ldx, &m, bias.data(), add.data(), ldo, T, K, N) == 0);
            ck_cpu_force_no_avx512(0);
            ck_linear_ref(exact.data(), ldo, x.data(), ldx, wd.data(), bias.data(), add.data(), ldo, T, K, N);
            std::vector<float> xabs(x), mag(out);
            for (auto &v : xabs) v = std::fabs(v);
            ck_linear_ref(mag.data(), ldo, xabs.data(), ldx, wabs.data(), nullptr, nullptr, 0, T, K, N);
            // 8-bit activations (the dot path, and the int8 GEMM of many tokens): well under 1% of sum |w x|, and
            // the same integers as the scalar dot products (the reference twin); float tiles: exact
            // the dot path (8-bit activations on every CPU): a few tokens, or fewer than CK_LINEAR_Q_TILE_MIN_T when
            // an integer part has no int8 GEMM on the CPU (it would be dequantized into tiles)
            bool any_int = false;
            for (int p = 0; p < 3; p++) any_int = any_int || (types[p] >= CK_Q_Q4_0 && types[p] != CK_Q_BF16);
            const bool few = T <= CK_LINEAR_Q_DECODE_T, no_gemm_dots = few || (any_int && T < CK_LINEAR_Q_TILE_MIN_T);
            const bool dots = few || (no_gemm_dots && !ck_cpu_avx512vnni());
            const bool int8 = dots || ck_cpu_avx512vnni();
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    size_t i = static_cast<size_t>(t) * ldo + n;
                    const bool float_part = n < rows[0] ? types[0] < CK_Q_Q4_0 || types[0] == CK_Q_BF16
                                          : n < rows[0] + rows[1] ? types[1] < CK_Q_Q4_0 || types[1] == CK_Q_BF16
                                                                  : types[2] < CK_Q_Q4_0 || types[2] == CK_Q_BF16;
                    REQUIRE(std::fabs(out[i] - exact[i]) <= (int8 ? 1e-2 : 1e-5) * (1.0 + mag[i]));
                    if (int8 && (dots || !float_part))
                        REQUIRE(std::fabs(out[i] - ref[i]) <= 1e-4 * std::max(1.0f, std::fabs(ref[i])));
                    const bool tiles_int8 = no_gemm_dots || (!float_part && ck_cpu_avx2());
                    REQUIRE(std::fabs(tiles[i] - exact[i]) <= (tiles_int8 ? 1e-2 : 1e-5) * (1.0 + mag[i]));
                }
            // in place: the residual is the output (the planner's MATMUL_ADD trick)
            std::vector<float> inplace(add);
            REQUIRE(ck_linear_q(inplace.data(), ldo, x.data(), ldx, &m, bias.data(), inplace.data(), ldo, T, K, N) == 0);
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    size_t i = static_cast<size_t>(t) * ldo + n;
                    REQUIRE(inplace[i] == out[i]);
                }
        }
    }
}

TEST_CASE("quant: embedding rows dequantize from any part", "[quant]")
{
    const int C = 256, V = 12;
    auto w = rnd(static_cast<size_t>(V) * C, 3u);
    auto q = quantize(CK_Q_Q6_K, w);
    ck_qmat m{};
    m.n_parts = 1;
    m.type[0] = CK_Q_Q6_K;
    m.rows[0] = V;
    m.data[0] = q.data();
    std::vector<int32_t> ids = {11, 0, 5};
    std::vector<float> out(ids.size() * C);
    ck_embedding_q(out.data(), &m, ids.data(), 3, C);
    auto all = dequantize(CK_Q_Q6_K, q, static_cast<size_t>(V) * C);
    for (size_t t = 0; t < ids.size(); t++)
        for (int c = 0; c < C; c++) REQUIRE(out[t * C + c] == all[static_cast<size_t>(ids[t]) * C + c]);
}

TEST_CASE("quant: the int8 prefill GEMM equals its scalar twin bit for bit", "[quant]")
{
    const int types[] = {CK_Q_Q8_0, CK_Q_Q4_0, CK_Q_Q4_1, CK_Q_Q5_0, CK_Q_Q5_1, CK_Q_Q4_K, CK_Q_Q5_K, CK_Q_Q6_K};
    for (int K : {512, 288})  // 288: the panel's 4-byte columns end in a part under 16 (the transposes' tail)
    for (int type : types) {
        if (K % ck_qtype_block(type)) continue;
        const int N = 45;  // two full panels of 16 rows and a partial one
        auto w = rnd(static_cast<size_t>(N) * K, 300u + type, 0.3f);
        w[7] = 40.0f;  // an outlier row block: large scales next to small ones
        auto wq = quantize(type, w);
        auto bias = rnd(N, 7u);
        for (int T : {1, 7, 8, 19, 32, 37}) {  // AMX: one tile of 16 tokens, two, and a partial third
            INFO("type " << ck_qtype_name(type) << " K " << K << " T " << T);
            const int ldx = K + 4, ldo = N + 3;
            auto x = rnd(static_cast<size_t>(T) * ldx, 90u + T, 2.0f);
            x[3] = 0.0f;
            for (int k = 32; k < 64; k++) x[k] = 0.0f;  // an all-zero activation block (scale 0)
            x[ldx - 4 - 40] = -50.0f, x[ldx - 4 - 20] = 50.0f;  // q8_K: the largest magnitude twice, the first negative
            const int dt = ck_qtype_dot_type(type) == CK_Q_Q8_K ? CK_Q_Q8_K : CK_Q_Q8_0;
            for (int t = 0; t < T && dt == CK_Q_Q8_0; t++)  // a tiny block of 32: its scale an f16 subnormal
                for (int k = 96; k < 128; k++) x[static_cast<size_t>(t) * ldx + k] = 1e-6f * static_cast<float>(k - 100 - t);
            ck_qgemm_acts a{}, b{};
            REQUIRE(ck_qgemm_acts_init(&a, dt, T, K) == 0);
            REQUIRE(ck_qgemm_acts_init(&b, dt, T, K) == 0);
            ck_qgemm_acts_quantize(&a, x.data(), ldx, 0, T, 0);
            // each vector quantizer the CPU has (AVX2, AVX-512): the same bytes
            for (const char *path : {"avx2", "avx512"}) {
                KernelPath forced(path);
                if (!forced.available) continue;
                INFO("quantizer " << path);
                std::memset(b.q, 0x55, static_cast<size_t>(T) * K);
                ck_qgemm_acts_quantize(&b, x.data(), ldx, 0, T, 1);
                REQUIRE(std::memcmp(a.q, b.q, static_cast<size_t>(T) * K) == 0);
                REQUIRE(std::memcmp(a.d, b.d, sizeof(float) * T * (K / 32)) == 0);
                REQUIRE(std::memcmp(a.sum16, b.sum16, sizeof(int32_t) * T * (K / 16)) == 0);
                if (dt == CK_Q_Q8_0) REQUIRE(std::memcmp(a.s, b.s, sizeof(float) * T * (K / 32)) == 0);
            }
            auto add = rnd(static_cast<size_t>(T) * ldo, 60u + T);
            std::vector<float> twin(static_cast<size_t>(T) * ldo, -1.0f), fast(twin), dots(twin);
            // rows [5, 45): panels starting off the matrix's first row, the last one partial
            REQUIRE(ck_qgemm_rows(twin.data(), ldo, &a, type, wq.data(), bias.data(), add.data(), ldo, 5, N, 0,
                                  CK_QGEMM_REF) == 0);
            // every other body, bit for bit: AVX-512 VNNI and AMX where the CPU has them, the AMX tile program on
            // emulated tiles everywhere (its loads, strides and shapes checked as the hardware checks them)
            struct Body {
                int id;
                const char *name;
                bool here;
            };
            const Body bodies[] = {{CK_QGEMM_VNNI, "avx512", ck_cpu_avx512vnni() != 0},
                                   {CK_QGEMM_AMX, "amx", ck_cpu_amx() != 0},
                                   {CK_QGEMM_AVXVNNI, "avx2-vnni", ck_cpu_vnni() != 0},
                                   {CK_QGEMM_AVX2, "avx2", ck_cpu_avx2() != 0},
                                   {CK_QGEMM_AMX_EMU, "amx (emulated tiles)", true}};
            for (const Body &body : bodies) {
                if (!body.here) {
                    if (type == CK_Q_Q8_0 && T == 1 && K == 512) WARN("skipped: this CPU has no " << body.name);
                    continue;
                }
                INFO("body " << body.name);
                std::fill(fast.begin(), fast.end(), -1.0f);
                REQUIRE(ck_qgemm_rows(fast.data(), ldo, &a, type, wq.data(), bias.data(), add.data(), ldo, 5, N, 0,
                                      body.id) == 0);
                for (size_t i = 0; i < twin.size(); i++) REQUIRE(fast[i] == twin[i]);
            }
            // the same integers as the decode path's scalar dot products (its quantized activations are these)
            ck_qmat m{};
            m.n_parts = 1, m.type[0] = type, m.rows[0] = N, m.data[0] = wq.data();
            REQUIRE(ck_linear_q_ref(dots.data(), ldo, x.data(), ldx, &m, bias.data(), add.data(), ldo, T, K, N) == 0);
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    const size_t i = static_cast<size_t>(t) * ldo + n;
                    if (n < 5) {
                        REQUIRE(twin[i] == -1.0f);  // rows outside [r0, r1) untouched
                        continue;
                    }
                    REQUIRE(std::fabs(twin[i] - dots[i]) <= 1e-5 * std::max(1.0f, std::fabs(dots[i])));
                }
            ck_qgemm_acts_free(&a);
            ck_qgemm_acts_free(&b);
        }
    }
}

TEST_CASE("fgemm: W stored [K][N] and a transposed A equal the scalar twin bit for bit", "[quant]")
{
    // a partial tile of tokens, 2 panels of columns, a partial panel of rows; then activations run in blocks
    // of tokens x columns (past CK_FGEMM_BLOCKED_BYTES_T transposed: 2 token blocks and a partial one, more
    // than one column block; past CK_FGEMM_BLOCKED_BYTES as rows), sized from the build's thresholds
    const int t_tb = 2 * CK_FGEMM_TB + 76;
    const int k_t = std::max(CK_FGEMM_KC + 18, static_cast<int>(CK_FGEMM_BLOCKED_BYTES_T / (4 * t_tb)) + 18);
    const int k_rows = static_cast<int>(CK_FGEMM_BLOCKED_BYTES / (4 * 600)) + 80;
    REQUIRE(4.0 * t_tb * k_t <= CK_FGEMM_BLOCKED_BYTES);  // the rows of the transposed case are not blocked
    auto [T, K, N] = GENERATE_COPY(std::tuple{21, 530, 70}, std::tuple{t_tb, k_t, 20}, std::tuple{600, k_rows, 20});
    auto x = rnd(static_cast<size_t>(T) * K, 31u, 1.0f), w = rnd(static_cast<size_t>(K) * N, 32u, 0.3f);
    auto bias = rnd(N, 33u), add = rnd(static_cast<size_t>(T) * N, 34u);
    std::vector<float> xt(x.size()), want(add.size());
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) xt[static_cast<size_t>(k) * T + t] = x[static_cast<size_t>(t) * K + k];
    // the reference: [N][K] weights, rows of activations
    std::vector<float> wnk(w.size());
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) wnk[static_cast<size_t>(n) * K + k] = w[static_cast<size_t>(k) * N + n];
    REQUIRE(ck_fgemm_rows(want.data(), N, x.data(), K, CK_Q_F32, wnk.data(), bias.data(), add.data(), N, T, K, 0, N,
                          0, 0) == 0);
    for (int trans_a : {0, 1})
        for (int fast : {CK_FGEMM_REF, CK_FGEMM_AVX512, CK_FGEMM_AVX2}) {
            if ((fast == CK_FGEMM_AVX512 && !ck_fgemm_fast()) || (fast == CK_FGEMM_AVX2 && !ck_cpu_avx2())) continue;
            INFO("trans_a " << trans_a << " fast " << fast);
            std::vector<float> got(add.size(), -1.0f);
            REQUIRE(ck_fgemm_general(got.data(), N, trans_a ? xt.data() : x.data(), trans_a ? 1 : K, trans_a ? T : 1,
                                     CK_Q_F32, w.data(), N, 1, bias.data(), add.data(), N, T, K, 0, N, 0, fast) == 0);
            for (size_t i = 0; i < got.size(); i++) REQUIRE(got[i] == want[i]);
        }
    std::vector<float> f16(add.size());
    REQUIRE(ck_fgemm_general(f16.data(), N, x.data(), K, 1, CK_Q_F16, w.data(), N, 1, nullptr, nullptr, 0, T, K, 0, N,
                             0, 0) == -1);  // [K][N] only for f32
}

TEST_CASE("quant: the f32 / f16 / bf16 prefill GEMM equals its scalar twin bit for bit", "[quant]")
{
    for (int type : {CK_Q_F32, CK_Q_F16, CK_Q_BF16})
        for (int K : {524, 96}) {  // 524: two panels of columns and a last part under 16 (AVX2: 8 and 4); 96: one short
            const int N = 80;       // rows [3, 80): a 48-row panel and one of 29 (the AVX2 body's last 8 rows: 5)
            auto w = rnd(static_cast<size_t>(N) * K, 500u + type + K, 0.3f);
            auto wq = quantize(type, w);
            auto wd = dequantize(type, wq, w.size());
            auto bias = rnd(N, 8u);
            for (int T : {1, 8, 13}) {
                INFO("type " << ck_qtype_name(type) << " K " << K << " T " << T);
                const int ldx = K + 4, ldo = N + 3;
                auto x = rnd(static_cast<size_t>(T) * ldx, 70u + T, 2.0f);
                auto add = rnd(static_cast<size_t>(T) * ldo, 80u + T);
                std::vector<float> twin(static_cast<size_t>(T) * ldo, -1.0f), fast(twin), exact(twin), inplace(add);
                // rows [3, 80): panels starting off the matrix's first row, the last one partial
                REQUIRE(ck_fgemm_rows(twin.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), add.data(), ldo, T,
                                      K, 3, N, 0, 0) == 0);
                // each vector body the CPU has: AVX-512, AVX2
                const int body = ck_fgemm_fast() ? CK_FGEMM_AVX512 : CK_FGEMM_AVX2;
                const bool vec = ck_fgemm_fast() || ck_cpu_avx2();
                if (ck_cpu_avx2() && ck_fgemm_fast()) {
                    std::vector<float> avx2(twin.size(), -1.0f), inplace2(add);
                    REQUIRE(ck_fgemm_rows(avx2.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), add.data(), ldo,
                                          T, K, 3, N, 0, CK_FGEMM_AVX2) == 0);
                    for (size_t i = 0; i < twin.size(); i++) REQUIRE(avx2[i] == twin[i]);
                    REQUIRE(ck_fgemm_rows(inplace2.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), inplace2.data(),
                                          ldo, T, K, 3, N, 0, CK_FGEMM_AVX2) == 0);
                    for (size_t i = 0; i < twin.size(); i++) {  // (columns outside [3, N) keep the residual)
                        const size_t n = i % static_cast<size_t>(ldo);
                        REQUIRE(inplace2[i] == (n < 3 || n >= static_cast<size_t>(N) ? add[i] : twin[i]));
                    }
                }
                if (vec) {
                    REQUIRE(ck_fgemm_rows(fast.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), add.data(), ldo,
                                          T, K, 3, N, 0, body) == 0);
                    for (size_t i = 0; i < twin.size(); i++) REQUIRE(fast[i] == twin[i]);
                    // the residual is the output (the planner's MATMUL_ADD trick)
                    REQUIRE(ck_fgemm_rows(inplace.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), inplace.data(),
                                          ldo, T, K, 3, N, 0, body) == 0);
                }
                ck_linear_ref(exact.data(), ldo, x.data(), ldx, wd.data(), bias.data(), add.data(), ldo, T, K, N);
                std::vector<float> xabs(x), wabs(wd), mag(exact);  // sum |w x|: the scale of float32's rounding
                for (auto &v : xabs) v = std::fabs(v);
                for (auto &v : wabs) v = std::fabs(v);
                ck_linear_ref(mag.data(), ldo, xabs.data(), ldx, wabs.data(), nullptr, nullptr, 0, T, K, N);
                for (int t = 0; t < T; t++)
                    for (int n = 0; n < N; n++) {
                        const size_t i = static_cast<size_t>(t) * ldo + n;
                        if (n < 3) {
                            REQUIRE(twin[i] == -1.0f);  // rows outside [r0, r1) untouched
                            continue;
                        }
                        REQUIRE(std::fabs(twin[i] - exact[i]) <= 2e-6 * (1.0 + mag[i]));
                        if (vec) REQUIRE(inplace[i] == fast[i]);
                    }
            }
        }
}

TEST_CASE("quant: the f16 / bf16 prefill GEMM on AMX-BF16 tiles keeps float32's accuracy", "[quant]")
{
    // The tile program on emulated tiles (every machine; amx_tiles.h's TDPBF16PS) and on the real ones where the
    // CPU has AMX-BF16, against the product of the dequantized weights in double: within the FMA body's bound of
    // sum |x w| (the operands split exactly into bf16 parts; activations rounded to bf16 would be ~1e-3 off, and
    // any part left out ~1e-5)
    const bool real = ck_cpu_amx_bf16() != 0;
    if (!real) WARN("no AMX-BF16 on this CPU (or the OS refuses the tiles): the real tiles are not run here");
    for (int type : {CK_Q_F16, CK_Q_BF16})
        for (int K : {520, 96, 1024}) {  // 520: a last k tile of 8 and a second column panel; 1024: two full panels
            const int N = 75;              // rows [3, 75): row blocks of 16 off the matrix's first row, one partial
            auto w = rnd(static_cast<size_t>(N) * K, 900u + type + K, 0.3f);
            auto wq = quantize(type, w);
            auto wd = dequantize(type, wq, w.size());
            auto bias = rnd(N, 9u);
            for (int T : {1, 13, 16, 37, 270}) {  // 270: two blocks of split activations (FAMX_TB), a partial tile
                if (T == 270 && K != 96) continue;
                INFO("type " << ck_qtype_name(type) << " K " << K << " T " << T);
                const int ldx = K + 4, ldo = N + 3;
                auto x = rnd(static_cast<size_t>(T) * ldx, 170u + T, 2.0f);
                auto add = rnd(static_cast<size_t>(T) * ldo, 180u + T);
                std::vector<float> emu(static_cast<size_t>(T) * ldo, -1.0f), tiles(emu), inplace(add);
                REQUIRE(ck_fgemm_rows(emu.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), add.data(), ldo, T,
                                      K, 3, N, 0, CK_FGEMM_AMX_EMU) == 0);
                // the residual is the output (the planner's MATMUL_ADD trick)
                REQUIRE(ck_fgemm_rows(inplace.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), inplace.data(),
                                      ldo, T, K, 3, N, 0, CK_FGEMM_AMX_EMU) == 0);
                if (real)
                    REQUIRE(ck_fgemm_rows(tiles.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), add.data(),
                                          ldo, T, K, 3, N, 0, CK_FGEMM_AMX) == 0);
                // the FMA body's scalar twin: the accuracy to keep
                std::vector<float> fma(emu.size(), -1.0f);
                REQUIRE(ck_fgemm_rows(fma.data(), ldo, x.data(), ldx, type, wq.data(), bias.data(), add.data(), ldo, T,
                                      K, 3, N, 0, CK_FGEMM_REF) == 0);
                double worst = 0, sq_tiles = 0, sq_fma = 0;
                for (int t = 0; t < T; t++)
                    for (int n = 0; n < N; n++) {
                        const size_t i = static_cast<size_t>(t) * ldo + n;
                        if (n < 3) {
                            REQUIRE(emu[i] == -1.0f);  // rows outside [r0, r1) untouched
                            continue;
                        }
                        double exact = static_cast<double>(bias[n]) + add[i], mag = 0;
                        for (int k = 0; k < K; k++) {
                            const double p = static_cast<double>(x[static_cast<size_t>(t) * ldx + k]) *
                                             wd[static_cast<size_t>(n) * K + k];
                            exact += p, mag += std::fabs(p);
                        }
                        worst = std::max(worst, std::fabs(emu[i] - exact) / (1.0 + mag));
                        sq_tiles += (emu[i] - exact) * (emu[i] - exact) / ((1.0 + mag) * (1.0 + mag));
                        sq_fma += (fma[i] - exact) * (fma[i] - exact) / ((1.0 + mag) * (1.0 + mag));
                        REQUIRE(inplace[i] == emu[i]);
                        if (real) REQUIRE(std::fabs(tiles[i] - emu[i]) <= 1e-6 * (1.0 + mag));
                    }
                INFO("worst difference from the exact sum, per (1 + sum |x w|): " << worst << "; RMS tiles "
                                                                                   << std::sqrt(sq_tiles) << " FMAs "
                                                                                   << std::sqrt(sq_fma));
                REQUIRE(worst <= 1e-6);
                // as accurate as the FMAs (measured 1.1-1.7x their RMS error: the sums' order; a part of an operand
                // left out gives 6-16x)
                REQUIRE(sq_tiles <= 2.5 * 2.5 * sq_fma);
            }
        }
    // f32 weights are not the tiles' type: the emulated body is the scalar twin there, and the real one the FMAs
    const int T = 9, K = 64, N = 20;
    auto w = rnd(static_cast<size_t>(N) * K, 77u, 0.3f), x = rnd(static_cast<size_t>(T) * K, 78u);
    std::vector<float> ref(static_cast<size_t>(T) * N), emu(ref);
    REQUIRE(ck_fgemm_rows(ref.data(), N, x.data(), K, CK_Q_F32, w.data(), nullptr, nullptr, 0, T, K, 0, N, 0, 0) == 0);
    REQUIRE(ck_fgemm_rows(emu.data(), N, x.data(), K, CK_Q_F32, w.data(), nullptr, nullptr, 0, T, K, 0, N, 0,
                          CK_FGEMM_AMX_EMU) == 0);
    REQUIRE(emu == ref);
    CHECK(ck_fgemm_body(CK_Q_F32) != CK_FGEMM_AMX);
    CHECK((ck_fgemm_body(CK_Q_F16) == CK_FGEMM_AMX) == real);
}

TEST_CASE("quant: the few-token f32 GEMM equals its scalar twin bit for bit", "[quant]")
{
    for (int K : {512, 100}) {  // 100: the transposes' tail under 16 columns
        const int N = 45;         // five tiles of 8 rows and a partial one
        auto w = rnd(static_cast<size_t>(N) * K, 700u + K, 0.3f);
        auto bias = rnd(N, 9u);
        for (int T : {24, 29, 32}) {
            INFO("K " << K << " T " << T);
            const int ldx = K + 4, ldo = N + 3;
            auto x = rnd(static_cast<size_t>(T) * ldx, 40u + T, 2.0f);
            auto add = rnd(static_cast<size_t>(T) * ldo, 50u + T);
            std::vector<float> xt(static_cast<size_t>(K) * 32 + 16), xt2(xt);
            float *a = xt.data() + (16 - reinterpret_cast<uintptr_t>(xt.data()) / 4 % 16) % 16;  // 64-byte aligned
            float *b = xt2.data() + (16 - reinterpret_cast<uintptr_t>(xt2.data()) / 4 % 16) % 16;
            ck_fgemm_small_pack(a, x.data(), ldx, T, K, 0);
            ck_fgemm_small_pack(b, x.data(), ldx, T, K, ck_fgemm_fast());
            REQUIRE(std::memcmp(a, b, sizeof(float) * static_cast<size_t>(K) * 32) == 0);
            std::vector<float> twin(static_cast<size_t>(T) * ldo, -1.0f), fast(twin), exact(twin);
            // rows [3, 45): tiles starting off the matrix's first row
            REQUIRE(ck_fgemm_small(twin.data(), ldo, a, w.data(), bias.data(), add.data(), ldo, T, K, 3, N, 0) == 0);
            if (ck_fgemm_fast()) {
                REQUIRE(ck_fgemm_small(fast.data(), ldo, a, w.data(), bias.data(), add.data(), ldo, T, K, 3, N, 1) == 0);
                for (size_t i = 0; i < twin.size(); i++) REQUIRE(fast[i] == twin[i]);
            }
            ck_linear_ref(exact.data(), ldo, x.data(), ldx, w.data(), bias.data(), add.data(), ldo, T, K, N);
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    const size_t i = static_cast<size_t>(t) * ldo + n;
                    if (n < 3)
                        REQUIRE(twin[i] == -1.0f);
                    else
                        REQUIRE(std::fabs(twin[i] - exact[i]) <= 1e-5 * (1.0 + std::fabs(exact[i])) * std::sqrt(K / 64.0));
                }
        }
    }
}

TEST_CASE("quant: one token's rows shared between threads (pieces, and rows taken from another's share) give "
          "the one-thread bits", "[quant]")
{
    // three parts of different bodies (the 4-bit VBMI rows, q4_K's, q8_0's or q6_K's, f16's chunks), 1377 rows:
    // shares of several pieces each, split across parts, and a last share that is shorter
    const int K = 1024;
    auto [types, rows] = GENERATE(std::pair{std::vector<int>{CK_Q_Q4_0, CK_Q_Q4_K, CK_Q_Q8_0}, std::vector<int64_t>{1000, 300, 77}},
                                  std::pair{std::vector<int>{CK_Q_F16, CK_Q_Q6_K, CK_Q_Q5_1}, std::vector<int64_t>{77, 1000, 300}});
    const int N = static_cast<int>(rows[0] + rows[1] + rows[2]);
    std::vector<std::vector<uint8_t>> parts;
    ck_qmat m{};
    m.n_parts = 3;
    for (int p = 0; p < 3; p++) {
        parts.push_back(quantize(types[p], rnd(static_cast<size_t>(rows[p]) * K, 200u + p, 0.3f)));
        m.type[p] = types[p];
        m.rows[p] = rows[p];
        m.data[p] = parts[p].data();
    }
    auto bias = rnd(N, 9u);
    auto x = rnd(K, 41u);
    auto add = rnd(N, 61u);
    std::vector<float> one(add);
    {
        Threads th(1);
        REQUIRE(ck_linear_q(one.data(), N, x.data(), K, &m, bias.data(), one.data(), N, 1, K, N) == 0);
    }
    const unsigned long before = ck_linear_q_steals();
    for (int threads : {2, 3, 4}) {  // (more threads than this machine's cores: they finish far apart)
        Threads th(threads);
        for (int rep = 0; rep < 40; rep++) {
            INFO("threads " << threads << " rep " << rep);
            std::vector<float> got(add);
            REQUIRE(ck_linear_q(got.data(), N, x.data(), K, &m, bias.data(), got.data(), N, 1, K, N) == 0);
            REQUIRE(std::memcmp(got.data(), one.data(), sizeof(float) * static_cast<size_t>(N)) == 0);
        }
    }
    // (a thread done first takes rows from another's share: in 120 calls, some)
    INFO("steals " << ck_linear_q_steals() - before);
    CHECK(ck_linear_q_steals() > before);
}

TEST_CASE("quant: every kernel path's decode gives the reference's integers (tails, bias, in place)", "[quant]")
{
    // K = 352: 11 blocks of 32, i.e. 2 groups of the 4-block bodies (qdot4.c) and a 3-block tail; 800: 6 + 1;
    // 480: 3 + 3 and 160: 1 + 1 (the AVX2 bodies take groups in pairs: an odd last group by the one-group step);
    // 768 for the K-quants (3 blocks of 256); 1024: the rows in 512-element chunks with the prefetch stream between
    // them (the bodies without one of their own). Each path the CPU has runs; the others are reported as skipped.
    for (const char *path : kernel_paths()) {
        KernelPath forced(path);
        if (!forced.available) {
            WARN("skipped: this CPU has no " << path << " kernels");
            continue;
        }
        CHECK(std::string(ck_cpu_path()) == path);
        for (int type : kStored)
            for (int K : {352, 800, 480, 160, 768, 1024}) {
                if ((K % ck_qtype_block(type)) != 0) continue;
                const int N = 37, ldo = N + 3;
                INFO("path " << path << " type " << ck_qtype_name(type) << " K " << K);
                auto wq = quantize(type, rnd(static_cast<size_t>(N) * K, 300u + type, 0.3f));
                ck_qmat m{};
                m.n_parts = 1;
                m.type[0] = type;
                m.rows[0] = N;
                m.data[0] = wq.data();
                auto bias = rnd(N, 7u);
                for (int T : {1, 2, 3, 5, 6}) {  // (pairs of tokens share a weight group's unpacking: q4_0 VBMI)
                    auto x = rnd(static_cast<size_t>(T) * K, 50u + T);
                    auto add = rnd(static_cast<size_t>(T) * ldo, 60u + T);
                    std::vector<float> ref(add), got(add);
                    REQUIRE(ck_linear_q_ref(ref.data(), ldo, x.data(), K, &m, bias.data(), ref.data(), ldo, T, K, N) == 0);
                    REQUIRE(ck_linear_q(got.data(), ldo, x.data(), K, &m, bias.data(), got.data(), ldo, T, K, N) == 0);
                    for (size_t i = 0; i < got.size(); i++)
                        REQUIRE(std::fabs(got[i] - ref[i]) <= 2e-5 * std::max(1.0f, std::fabs(ref[i])));
                    // each token exactly as alone: a batch of sequences decodes as each sequence would by itself
                    for (int t = 0; t < T && T > 1; t++) {
                        std::vector<float> one(add.begin() + static_cast<long>(t) * ldo, add.begin() + static_cast<long>(t + 1) * ldo);
                        REQUIRE(ck_linear_q(one.data(), ldo, x.data() + static_cast<size_t>(t) * K, K, &m, bias.data(), one.data(),
                                            ldo, 1, K, N) == 0);
                        for (int n = 0; n < N; n++) REQUIRE(one[static_cast<size_t>(n)] == got[static_cast<size_t>(t) * ldo + n]);
                    }
                }
            }
    }
}

TEST_CASE("moe: the router keeps the top k of the softmax; a NaN chooses k experts all the same", "[quant][moe]")
{
    const int T = 5, E = 8, ld = E + 3;
    auto logits = rnd(static_cast<size_t>(T) * ld, 7u, 2.0f);
    logits[ld + 2] = logits[ld + 5] = 3.0f;  // a tie: the lower index first
    logits[ld + 0] = logits[ld + 1] = logits[ld + 3] = logits[ld + 4] = logits[ld + 6] = logits[ld + 7] = -1.0f;
    for (int norm : {0, 1})
        for (int k : {1, 2, 3, 8}) {
            std::vector<float> r(static_cast<size_t>(T) * ld, -7.0f), ref(r);
            ck_moe_route(r.data(), ld, logits.data(), ld, T, E, k, norm);
            ck_moe_route_ref(ref.data(), ld, logits.data(), ld, T, E, k, norm);
            for (int t = 0; t < T; t++) {
                double mx = -1e30, sum = 0, kept = 0;
                for (int e = 0; e < E; e++) mx = std::max<double>(mx, logits[t * ld + e]);
                for (int e = 0; e < E; e++) sum += std::exp(logits[t * ld + e] - mx);
                int chosen = 0;
                for (int e = 0; e < E; e++) {
                    double p = std::exp(logits[t * ld + e] - mx) / sum;
                    int above = 0;  // experts that beat e: larger, or as large at a lower index
                    for (int j = 0; j < E; j++) {
                        float lj = logits[t * ld + j], le = logits[t * ld + e];
                        above += lj > le || (lj == le && j < e);
                    }
                    if (above < k) {
                        chosen++;
                        kept += p;
                        REQUIRE(r[t * ld + e] > 0.0f);
                    } else {
                        REQUIRE(r[t * ld + e] == 0.0f);
                    }
                    REQUIRE(std::fabs(r[t * ld + e] - ref[t * ld + e]) <= 1e-6f);
                }
                REQUIRE(chosen == k);
                double total = 0;
                for (int e = 0; e < E; e++) total += r[t * ld + e];
                REQUIRE(std::fabs(total - (norm ? 1.0 : kept)) < 1e-5);
                REQUIRE(r[t * ld + E] == -7.0f);  // the row stride's gap untouched
            }
            if (k == 2) {  // the tie at token 1: experts 2 and 5, not 5 and 2 or a third
                REQUIRE(r[ld + 2] > 0.0f);
                REQUIRE(r[ld + 5] > 0.0f);
            }
        }
    // NaN and infinite logits: exactly k experts chosen (in range by construction), their weights NaN
    std::vector<float> bad(E, std::nanf("")), r(E, 1.0f);
    bad[3] = INFINITY;
    ck_moe_route(r.data(), E, bad.data(), E, 1, E, 2, 1);
    int nonzero = 0;
    for (float v : r) nonzero += v != 0.0f;
    REQUIRE(nonzero == 2);
}

TEST_CASE("moe: the experts over the rows routed to them equal a dense loop, in every format", "[quant][moe]")
{
    const int T = 7, E = 4, C = 64, F = 96, ldx = C + 4, ldo = C + 2, ldr = E;
    auto type = GENERATE(CK_Q_F32, CK_Q_Q8_0, CK_Q_Q4_K);
    INFO("type " << ck_qtype_name(type));
    std::vector<std::vector<uint8_t>> store;
    std::vector<ck_qmat> gate(E), up(E), down(E);
    std::vector<std::vector<float>> gd(E), ud(E), dd(E);  // dequantized
    auto make = [&](ck_qmat &m, std::vector<float> &deq, int rows, int K, unsigned seed) {
        auto w = rnd(static_cast<size_t>(rows) * K, seed, 0.2f);
        int t = ck_qtype_for_rows(type, K);
        store.push_back(quantize(t, w));
        m = ck_qmat{};
        m.n_parts = 1;
        m.type[0] = t;
        m.rows[0] = rows;
        m.data[0] = store.back().data();
        deq.resize(w.size());
        ck_dequantize_row(t, store.back().data(), deq.data(), static_cast<int64_t>(w.size()));
    };
    store.reserve(3 * E);
    for (int e = 0; e < E; e++) {
        make(gate[e], gd[e], F, C, 10u + e);
        make(up[e], ud[e], F, C, 20u + e);
        make(down[e], dd[e], C, F, 30u + e);
    }
    auto x = rnd(static_cast<size_t>(T) * ldx, 3u);
    std::vector<float> route(static_cast<size_t>(T) * ldr, 0.0f);
    for (int t = 0; t < T; t++) {  // two experts per token, expert 3 never (skipped), some tokens share
        route[t * ldr + t % 3] = 0.25f + 0.1f * t;
        route[t * ldr + (t + 1) % 3] = 0.5f;
    }
    std::vector<float> scratch(CK_MOE_EXPERTS_SCRATCH(T, C, F) / sizeof(float) + 1);
    std::vector<float> out(static_cast<size_t>(T) * ldo, 9.0f), ref(out);
    for (int threads : {1, 2}) {
        Threads th(threads);
        REQUIRE(ck_moe_experts(out.data(), ldo, x.data(), ldx, route.data(), ldr, T, E, C, F, gate.data(), up.data(),
                               down.data(), CK_ACT_SILU, scratch.data()) == CK_OK);
        REQUIRE(ck_moe_experts_ref(ref.data(), ldo, x.data(), ldx, route.data(), ldr, T, E, C, F, gate.data(),
                                   up.data(), down.data(), CK_ACT_SILU, scratch.data()) == CK_OK);
        for (int t = 0; t < T; t++) {
            std::vector<double> want(C, 0.0), mag(C, 0.0);
            for (int e = 0; e < E; e++) {
                double w = route[t * ldr + e];
                if (w == 0) continue;
                std::vector<double> h(F);
                for (int f = 0; f < F; f++) {
                    double g = 0, u = 0;
                    for (int c = 0; c < C; c++) {
                        g += gd[e][f * C + c] * x[t * ldx + c];
                        u += ud[e][f * C + c] * x[t * ldx + c];
                    }
                    h[f] = g / (1 + std::exp(-g)) * u;
                }
                for (int c = 0; c < C; c++) {
                    double y = 0, a = 0;
                    for (int f = 0; f < F; f++) {
                        y += dd[e][c * F + f] * h[f];
                        a += std::fabs(dd[e][c * F + f] * h[f]);
                    }
                    want[c] += w * y;
                    mag[c] += w * a;
                }
            }
            // 8-bit activations in the quantized formats: within 2% of sum |w x|
            double tol = type == CK_Q_F32 ? 1e-4 : 2e-2;
            for (int c = 0; c < C; c++) {
                REQUIRE(std::fabs(out[t * ldo + c] - want[c]) <= tol * (1e-3 + mag[c]));
                REQUIRE(std::fabs(ref[t * ldo + c] - want[c]) <= tol * (1e-3 + mag[c]));
            }
            REQUIRE(out[t * ldo + C] == 9.0f);  // the row stride's gap untouched
        }
    }
}

TEST_CASE("workspace: every piece is 64-byte aligned, from the workspace or from malloc", "[quant][workspace]")
{
    // The decode bodies load their activations 64 bytes at a time: from malloc's 16-byte alignment every such load
    // spanned two cache lines (ck_linear_q without a workspace read q4_1 at 25 GB/s where a model, with one, read
    // 37 on an AMD EPYC Zen 5). Pieces of odd sizes, with and without a workspace, and past a full one.
    alignas(64) static unsigned char buf[4096 + 64];
    for (int with : {0, 1}) {
        ck_ws_use(with ? buf + 8 : nullptr, with ? 4096 : 0);  // (a misaligned workspace start too)
        std::vector<void *> got;
        for (size_t bytes : {1u, 17u, 100u, 1000u, 3000u, 5000u, 70000u}) {
            void *p = ck_ws_alloc(bytes);
            REQUIRE(p != nullptr);
            CHECK((reinterpret_cast<uintptr_t>(p) & 63) == 0);
            std::memset(p, 0xA5, bytes);
            got.push_back(p);
        }
        for (void *p : got) ck_ws_free(p);
        ck_ws_use(nullptr, 0);
    }
}
