/*
 * cpu.c — which vector body the kernels use (see ck_simd.h). Detected once;
 * tests can force the portable bodies so both paths are checked on an AVX2
 * machine.
 */
#include "ck_kernels.h"

static int ck_cpu_level = -1; /* -1 unknown, 0 portable (SSE2 / scalar), 1 AVX2 + FMA */

int ck_cpu_avx2(void)
{
    if (ck_cpu_level < 0) {
#if defined(__x86_64__) && defined(__GNUC__)
        ck_cpu_level = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
        ck_cpu_level = 0;
#endif
    }
    return ck_cpu_level;
}

void ck_cpu_force_portable(int on)
{
    ck_cpu_level = on ? 0 : -1;
}

static int ck_vnni_level = -1; /* -1 unknown, 0 off (absent or forced), 1 AVX-VNNI */

int ck_cpu_vnni(void)
{
    if (!ck_cpu_avx2()) return 0;
    if (ck_vnni_level < 0) {
#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 11
        ck_vnni_level = __builtin_cpu_supports("avxvnni");
#else
        ck_vnni_level = 0;
#endif
    }
    return ck_vnni_level;
}

void ck_cpu_force_no_vnni(int on)
{
    ck_vnni_level = on ? 0 : -1;
}

static int ck_avx512_level = -1; /* -1 unknown, 0 off (absent or forced), 1 AVX-512 F/BW/VL + VNNI */

int ck_cpu_avx512vnni(void)
{
    if (!ck_cpu_avx2()) return 0;
    if (ck_avx512_level < 0) {
#if defined(__x86_64__) && defined(__GNUC__)
        ck_avx512_level = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
        ck_avx512_level = 0;
#endif
    }
    return ck_avx512_level;
}

void ck_cpu_force_no_avx512(int on)
{
    ck_avx512_level = on ? 0 : -1;
}
