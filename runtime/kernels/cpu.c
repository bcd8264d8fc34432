/*
 * cpu.c — which vector body the kernels use (see ck_simd.h). Detected once.
 *
 * The x86 paths, each on top of the one before it:
 *   portable     SSE2 / scalar bodies (every CPU; the only ones off x86)
 *   avx2         AVX2 + FMA + F16C
 *   avx2-vnni    + AVX-VNNI (VEX vpdpbusd: Alder Lake and later, Zen 5)
 *   avx512       AVX-512 F/BW/VL + VNNI (the int8 prefill GEMM, the 512-bit decode bodies)
 *   avx512-vbmi  + AVX512_VBMI and AVX512_BITALG (vpermt2b: the 4-bit decode bodies that gather 4 blocks' quants
 *                  in one shuffle; vpshufbitqmb: q5's fifth bits as masks). Every CPU with VBMI but Cannon Lake
 *                  has both (Ice Lake and later, Zen 4 and later)
 *   amx          + AMX-TILE / AMX-INT8 with the OS's permission (the int8 prefill GEMM on tiles, qgemm.c), and
 *                  where the CPU also has AMX-BF16 + AVX512_BF16, the f16 / bf16 prefill on tiles (fgemm.c)
 * and on ARM64:
 *   neon         the NEON decode bodies (qdot_neon.c; every ARMv8-A has NEON)
 * A path runs when the CPU has it and nothing caps it. CK_KERNELS=<path> caps the dispatch at that path
 * (e.g. CK_KERNELS=avx2 on an AVX-512 machine runs what an AVX2-only CPU runs); a path the CPU lacks
 * runs the best one below it, said once on stderr. Tests force each path through the ck_cpu_force_*
 * switches and skip, by name, the ones the CPU lacks.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* syscall(), for the tile permission */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "ck_kernels.h"

enum { L_PORTABLE, L_AVX2, L_AVX2_VNNI, L_AVX512, L_AVX512_VBMI, L_AMX, L_NEON, L_COUNT };
static const char *const kLevelName[L_COUNT] = {"portable", "avx2", "avx2-vnni", "avx512", "avx512-vbmi", "amx", "neon"};

static int ck_detected = 0;
static int ck_has[L_COUNT]; /* what the CPU has (portable always) */
static int ck_cap = L_COUNT - 1; /* CK_KERNELS */
static int ck_forced_portable, ck_forced_no_vnni, ck_forced_no_avx512, ck_forced_no_vbmi, ck_forced_no_amx;
static int ck_has_avx512bf16; /* AVX512_BF16 beside the avx512 path (fgemm.c's bf16 splitting for the tiles) */
static int ck_has_amx_bf16;   /* the amx path's tiles also take bf16 (AMX-BF16 and AVX512_BF16) */

/* AMX: the CPU's AMX-TILE and AMX-INT8 (CPUID 7.0 EDX bits 24, 25), the OS's tile state enabled (XCR0 bits 17,
 * 18), and Linux's permission for this process to use it (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA; without
 * it the first tile instruction faults). Where the CPU has AMX but the OS refuses, the int8 prefill stays on
 * AVX-512 VNNI, and the reason is printed once when CK_DEBUG is set. */
#if defined(__x86_64__) && defined(__GNUC__)
static int amx_usable(void)
{
    unsigned a, b, c, d, lo, hi;
    const char *why = NULL;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return 0;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & (1u << 27))) { /* OSXSAVE: xgetbv is allowed */
        why = "the OS does not enable XSAVE";
    } else {
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        (void)hi;
        if ((lo & (3u << 17)) != (3u << 17)) why = "the OS does not enable the tile state (XCR0 bits 17, 18)";
    }
#if defined(__linux__)
    if (!why && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0)
        why = strerror(errno);
#else
    if (!why) why = "no way to request the tile permission on this OS";
#endif
    if (why) {
        if (getenv("CK_DEBUG"))
            fprintf(stderr, "ckc: AMX: not used (%s); the int8 prefill runs on AVX-512 VNNI, f16 / bf16 on FMAs\n",
                    why);
        return 0;
    }
    return 1;
}
#endif

static void detect(void)
{
    const char *env;
    int i;
    if (ck_detected) return;
    ck_has[L_PORTABLE] = 1;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    ck_has[L_AVX2] = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#if __GNUC__ >= 11
    ck_has[L_AVX2_VNNI] = ck_has[L_AVX2] && __builtin_cpu_supports("avxvnni");
#endif
    ck_has[L_AVX512] = ck_has[L_AVX2] && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    ck_has[L_AVX512_VBMI] = ck_has[L_AVX512] && __builtin_cpu_supports("avx512vbmi") &&
                            __builtin_cpu_supports("avx512bitalg");
    ck_has[L_AMX] = ck_has[L_AVX512_VBMI] && amx_usable();
    {
        unsigned a, b, c, d;
        /* AVX512_BF16: CPUID 7.1 EAX bit 5; AMX-BF16: 7.0 EDX bit 22 */
        ck_has_avx512bf16 = ck_has[L_AVX512] && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
        ck_has_amx_bf16 = ck_has[L_AMX] && ck_has_avx512bf16 && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
                          (d & (1u << 22));
    }
    if (ck_has[L_AMX]) {
        if (!ck_has_amx_bf16 && getenv("CK_DEBUG"))
            fprintf(stderr, "ckc: AMX-BF16: not on this CPU; the f16 / bf16 prefill runs on AVX-512 FMAs\n");
    }
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
    ck_has[L_NEON] = 1;
#endif
    env = getenv("CK_KERNELS");
    if (env && *env && strcmp(env, "auto") != 0) {
        for (i = 0; i < L_COUNT && strcmp(env, kLevelName[i]) != 0; i++) {}
        if (i == L_COUNT) {
            fprintf(stderr, "ckc: CK_KERNELS=%s is not a kernel path (portable, avx2, avx2-vnni, avx512, avx512-vbmi, "
                            "amx, neon, auto); using auto\n", env);
        } else {
            ck_cap = i;
            if (!ck_has[i]) fprintf(stderr, "ckc: CK_KERNELS=%s: this CPU has no %s; the best path below it runs\n", env, env);
        }
    }
    ck_detected = 1;
}

#if defined(__GNUC__)
__attribute__((constructor)) static void detect_at_load(void) { detect(); } /* before any thread can race it */
#endif

static int level_on(int level) { return ck_has[level] && ck_cap >= level; }

int ck_cpu_has_path(const char *name)
{
    int i;
    detect();
    for (i = 0; i < L_COUNT; i++)
        if (strcmp(name, kLevelName[i]) == 0) return ck_has[i];
    return 0;
}

const char *ck_cpu_path(void)
{
    if (ck_cpu_neon()) return kLevelName[L_NEON];
    if (!ck_cpu_avx2()) return kLevelName[L_PORTABLE];
    if (ck_cpu_amx()) return kLevelName[L_AMX];
    if (ck_cpu_avx512vbmi()) return kLevelName[L_AVX512_VBMI];
    if (ck_cpu_avx512vnni()) return kLevelName[L_AVX512];
    return ck_cpu_vnni() ? kLevelName[L_AVX2_VNNI] : kLevelName[L_AVX2];
}

int ck_cpu_avx2(void)
{
    detect();
    return !ck_forced_portable && level_on(L_AVX2);
}

void ck_cpu_force_portable(int on) { ck_forced_portable = on; }

int ck_cpu_neon(void)
{
    detect();
    return !ck_forced_portable && level_on(L_NEON);
}

int ck_cpu_vnni(void)
{
    /* AVX-VNNI is a separate extension, not a step of AVX-512: capped only by CK_KERNELS=avx2 / portable */
    return ck_cpu_avx2() && !ck_forced_no_vnni && ck_has[L_AVX2_VNNI] && ck_cap >= L_AVX2_VNNI;
}

void ck_cpu_force_no_vnni(int on) { ck_forced_no_vnni = on; }

int ck_cpu_avx512vnni(void) { return ck_cpu_avx2() && !ck_forced_no_avx512 && level_on(L_AVX512); }

void ck_cpu_force_no_avx512(int on) { ck_forced_no_avx512 = on; }

int ck_cpu_avx512vbmi(void) { return ck_cpu_avx512vnni() && !ck_forced_no_vbmi && level_on(L_AVX512_VBMI); }

void ck_cpu_force_no_vbmi(int on) { ck_forced_no_vbmi = on; }

int ck_cpu_amx(void) { return ck_cpu_avx512vbmi() && !ck_forced_no_amx && level_on(L_AMX); }

void ck_cpu_force_no_amx(int on) { ck_forced_no_amx = on; }

int ck_cpu_amx_bf16(void) { return ck_cpu_amx() && ck_has_amx_bf16; }

int ck_cpu_avx512bf16(void) { return ck_cpu_avx512vnni() && ck_has_avx512bf16; }
