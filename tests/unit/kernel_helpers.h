// kernel_helpers.h — shared fixtures of the kernel tests: random data,
// error measures, and the threading / CPU-path scopes a model call uses.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ck_kernels.h"

namespace ckc_kernel_test {

inline std::vector<float> rnd(size_t n, unsigned seed, float scale = 1.0f)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto &x : v) x = d(rng);
    return v;
}

inline double max_abs_diff(const std::vector<float> &a, const std::vector<float> &b)
{
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); i++) {
        REQUIRE(std::isfinite(a[i]));
        m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    return m;
}

// max |a - b| / max(1, |b|): for outputs whose magnitude varies widely
inline double max_rel_diff(const std::vector<float> &a, const std::vector<float> &b)
{
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); i++)
        m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(static_cast<double>(b[i]))));
    return m;
}

// Runs with the OpenMP team / single-threaded OpenBLAS a model call uses.
struct Threads {
    ck_threads_saved saved;
    explicit Threads(int n) { ck_threads_enter(&saved, n); }
    ~Threads() { ck_threads_leave(&saved); }
};

// Forces the portable (SSE2 / scalar) vector bodies for its lifetime.
struct Portable {
    explicit Portable(bool on) { ck_cpu_force_portable(on ? 1 : 0); }
    ~Portable() { ck_cpu_force_portable(0); }
};

// Runs what a CPU whose best kernels are `path` runs (cpu.c's paths), for its lifetime; `available` says
// whether this CPU has that path at all (a test skips it by name when not).
struct KernelPath {
    bool available;
    explicit KernelPath(const char *path) : available(ck_cpu_has_path(path) != 0)
    {
        const std::string p(path);
        ck_cpu_force_portable(p == "portable");
        ck_cpu_force_no_vnni(p != "avx2-vnni" && p != "avx512" && p != "avx512-vbmi" && p != "amx");
        ck_cpu_force_no_avx512(p != "avx512" && p != "avx512-vbmi" && p != "amx");
        ck_cpu_force_no_vbmi(p != "avx512-vbmi" && p != "amx");
        ck_cpu_force_no_amx(p != "amx");
    }
    ~KernelPath()
    {
        ck_cpu_force_portable(0);
        ck_cpu_force_no_vnni(0);
        ck_cpu_force_no_avx512(0);
        ck_cpu_force_no_vbmi(0);
        ck_cpu_force_no_amx(0);
    }
};

inline const std::vector<const char *> &kernel_paths()
{
    static const std::vector<const char *> paths = {"portable", "avx2", "avx2-vnni", "avx512", "avx512-vbmi", "amx", "neon"};
    return paths;
}

}  // namespace ckc_kernel_test
