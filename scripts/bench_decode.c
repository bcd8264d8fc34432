/*
 * bench_decode.c — the worker of scripts/bench_decode.py: one token's matrix-vector products through every layer
 * of a model shape (ck_linear_q, as decode runs them), and a streaming read of the same machine, on commands
 * from stdin, so that the script can interleave formats, thread counts and kernel paths in one run.
 *
 *   bench_decode TYPE D F KV LAYERS      (TYPE: a ck_qtype name; D hidden, F intermediate, KV kv width)
 *   stdin: "gemv THREADS PATH"  -> seconds of one pass over all layers (the best of 3), on stdout
 *          "read THREADS"       -> GB/s of a streaming read of 1 GiB (the best of 3 passes of each loop the CPU
 *                                  runs: 128-bit loads with and without software prefetch, 256- and 512-bit)
 *          "bytes"              -> bytes of weights one pass reads
 *          "huge"               -> bytes of them mapped on 2 MiB pages (-1: not known)
 */
#define _GNU_SOURCE /* MADV_HUGEPAGE, posix_fadvise */
#include <fcntl.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ck_kernels.h"
#include "ck_quant.h"

static void *need(void *p, const char *what)
{
    if (!p) {
        fprintf(stderr, "bench_decode: out of memory for %s\n", what);
        exit(1);
    }
    return p;
}

/* A thread's share a[i0, i0 + per) of a streaming read, in loads of one vector type (128-, 256- or 512-bit; each
 * compiled for only the instructions it needs, so the narrow ones run on any x86), four independent sums so no add
 * latency binds, with software prefetch 4 KiB ahead when `pf`; the sums into t[0, 16) */
#define READ_LOOP(NAME, ATTR, VT, ZERO, LOAD, ADD, STORE, W)                                                   \
    ATTR static void NAME(const float *a, size_t i0, size_t per, int pf, float *t)                             \
    {                                                                                                          \
        VT a0 = ZERO(), a1 = a0, a2 = a0, a3 = a0;                                                             \
        size_t i;                                                                                              \
        for (i = i0; i < i0 + per; i += 4 * (W)) {                                                             \
            if (pf) _mm_prefetch((const char *)(a + i) + 4096, _MM_HINT_T0);                                   \
            a0 = ADD(a0, LOAD(a + i));                                                                         \
            a1 = ADD(a1, LOAD(a + i + (W)));                                                                   \
            a2 = ADD(a2, LOAD(a + i + 2 * (W)));                                                               \
            a3 = ADD(a3, LOAD(a + i + 3 * (W)));                                                               \
        }                                                                                                      \
        STORE(t, ADD(ADD(a0, a1), ADD(a2, a3)));                                                               \
    }
READ_LOOP(read128, , __m128, _mm_setzero_ps, _mm_load_ps, _mm_add_ps, _mm_storeu_ps, 4)
READ_LOOP(read256, __attribute__((target("avx2"))), __m256, _mm256_setzero_ps, _mm256_load_ps, _mm256_add_ps,
          _mm256_storeu_ps, 8)
READ_LOOP(read512, __attribute__((target("avx512f"))), __m512, _mm512_setzero_ps, _mm512_load_ps, _mm512_add_ps,
          _mm512_storeu_ps, 16)

/* one pass of a streaming read of a[0, n) by `threads` threads in `width`-bit loads; GB/s */
static double read_pass(const float *a, size_t n, int threads, int width, int pf)
{
    double t0 = omp_get_wtime(), s = 0;
#pragma omp parallel num_threads(threads) reduction(+ : s)
    {
        const size_t per = n / (size_t)omp_get_num_threads(), i0 = per * (size_t)omp_get_thread_num();
        float t[16] = {0};
        int j;
        (width == 512 ? read512 : width == 256 ? read256 : read128)(a, i0, per, pf, t);
        for (j = 0; j < 16; j++) s += t[j];
    }
    {
        const double gbs = (double)n * sizeof *a / (omp_get_wtime() - t0) / 1e9;
        if (s < 0) puts("");
        return gbs;
    }
}

/* The read bandwidth: the best of 3 passes of each loop this CPU runs (128-bit loads with and without software
 * prefetch, 256-bit where it has AVX2, 512-bit where it has AVX-512): on an AMD EPYC Zen 5 VM the 128-bit
 * loop alone read 75 GB/s with 2 threads where the 512-bit one read 83, so a narrow probe alone would flatter
 * every kernel's percentage */
static double read_gbs(int threads)
{
    static float *a;
    const size_t n = (size_t)1 << 28;
    double best = 0;
    int rep, k;
    if (!a) {
        a = (float *)need(aligned_alloc(64, n * sizeof *a), "the 1 GiB of the read probe"); /* (never a 0 GB/s) */
        for (size_t i = 0; i < n; i++) a[i] = (float)(i & 7);
    }
    for (k = 0; k < 4; k++) {
        const int width = k < 2 ? 128 : k == 2 ? 256 : 512;
        if ((width == 256 && !ck_cpu_has_path("avx2")) || (width == 512 && !ck_cpu_has_path("avx512"))) continue;
        for (rep = 0; rep < 3; rep++) {
            const double gbs = read_pass(a, n, threads, width, k == 1);
            if (gbs > best) best = gbs;
        }
    }
    return best;
}

/* The file's pages as the runtime's loader leaves a model's weights (runtime/io/huge_pages.c): dropped from the
 * page cache and faulted in again through a mapping advised onto huge pages, so that they are read cold onto 2 MiB
 * folios where the file system can (a file just written sits on small ones: 4 KiB TLB entries that the models'
 * decode no longer pays). Best effort, as the loader's; Linux only. */
static void settle_huge(char *map, size_t size, int fd)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(map, size, MADV_HUGEPAGE);
    if (fdatasync(fd) == 0 && posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_DONTNEED) == 0) {
        size_t i;
        volatile char sum = 0;
        for (i = 0; i < size; i += 4096) sum += map[i];
    }
#else
    (void)map, (void)size, (void)fd;
#endif
}

/* bytes of the mapping at `map` on 2 MiB page-table entries (smaps' FilePmdMapped), -1 where not known */
static long long huge_bytes(const void *map)
{
    char line[512], head[32];
    long long kb, got = -1;
    int in = 0;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return -1;
    snprintf(head, sizeof head, "%08lx-", (unsigned long)(uintptr_t)map);
    while (fgets(line, sizeof line, fp)) {
        if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) /* a mapping's first line */
            in = strncmp(line, head, strlen(head)) == 0;
        else if (in && sscanf(line, "FilePmdMapped: %lld kB", &kb) == 1)
            got = kb * 1024;
    }
    fclose(fp);
    return got;
}

static void force_path(const char *p)
{
    ck_cpu_force_portable(strcmp(p, "portable") == 0);
    const int amx = strcmp(p, "amx") == 0 || strcmp(p, "auto") == 0;
    ck_cpu_force_no_vnni(strcmp(p, "avx2-vnni") && strcmp(p, "avx512") && strcmp(p, "avx512-vbmi") && !amx);
    ck_cpu_force_no_avx512(strcmp(p, "avx512") && strcmp(p, "avx512-vbmi") && !amx);
    ck_cpu_force_no_vbmi(strcmp(p, "avx512-vbmi") && !amx);
    ck_cpu_force_no_amx(!amx);
}

int main(int argc, char **argv)
{
    int type = -1, t, m, l, L, D, F, KV;
    int Ns[4], Ks[4];
    void *ws;
    size_t ws_bytes;
    void **w;
    float *x, *y;
    size_t bytes = 0;
    const char *weights = NULL;
    char cmd[64], path[32];
    if (argc != 6) {
        fprintf(stderr, "usage: bench_decode TYPE D F KV LAYERS\n");
        return 2;
    }
    for (t = 0; t < 64; t++)
        if (strcmp(ck_qtype_name(t), argv[1]) == 0) type = t;
    D = atoi(argv[2]), F = atoi(argv[3]), KV = atoi(argv[4]), L = atoi(argv[5]);
    if (type < 0 || D <= 0 || F <= 0 || KV <= 0 || L <= 0 || D > (1 << 20) || F > (1 << 20) || KV > (1 << 20) ||
        L > 4096) {
        fprintf(stderr, "bench_decode: bad arguments (TYPE a ck_qtype name; D, F, KV in 1..2^20; LAYERS in 1..4096)\n");
        return 2;
    }
    /* a layer: q|k|v, o, gate|up, down */
    Ns[0] = D + 2 * KV, Ks[0] = D, Ns[1] = D, Ks[1] = D, Ns[2] = 2 * F, Ks[2] = D, Ns[3] = D, Ks[3] = F;
    w = (void **)need(calloc((size_t)L * 4, sizeof *w), "the layer table");
    {
        const int kmax = D > F ? D : F, nmax = D + 2 * KV > 2 * F ? D + 2 * KV : 2 * F;
        x = (float *)need(malloc(sizeof(float) * (size_t)kmax), "the activations");
        y = (float *)need(malloc(sizeof(float) * (size_t)nmax), "the outputs");
        for (t = 0; t < kmax; t++) x[t] = sinf((float)t * 0.37f);
    }
    { /* one layer quantized, copied to every layer (distinct memory, the same values), and read in place from one
       * mapped file as a model reads a GGUF: layer by layer, each matrix 64-byte aligned, put on huge pages where
       * the file system can (settle_huge) */
        char name[] = "/tmp/ckc_bench_decode_XXXXXX";
        char *first[4];
        size_t size[4], at[4], per_layer = 0, total;
        char *map;
        const int fd = mkstemp(name);
        if (fd < 0) return fprintf(stderr, "bench_decode: cannot make a file in /tmp\n"), 1;
        unlink(name);
        for (m = 0; m < 4; m++) {
            const size_t rb = ck_qtype_row_bytes(type, Ks[m]);
            float *row = (float *)need(malloc(sizeof(float) * (size_t)Ks[m]), "a row");
            int n, k;
            size[m] = rb * (size_t)Ns[m];
            at[m] = per_layer;
            per_layer += (size[m] + 63) / 64 * 64;
            first[m] = (char *)need(calloc(1, (size[m] + 63) / 64 * 64), "a layer's weights");
            for (n = 0; n < Ns[m]; n++) {
                for (k = 0; k < Ks[m]; k++) row[k] = sinf((float)(n * 131 + k * 7) * 0.01f) * (1.0f + (float)(k % 17) * 0.1f);
                if (ck_quantize_row(type, row, first[m] + rb * (size_t)n, Ks[m])) {
                    fprintf(stderr, "bench_decode: cannot quantize to %s\n", argv[1]);
                    return 1;
                }
            }
            free(row);
            bytes += size[m] * (size_t)L;
        }
        total = per_layer * (size_t)L;
        for (l = 0; l < L; l++)
            for (m = 0; m < 4; m++) {
                const size_t n = (size[m] + 63) / 64 * 64;
                size_t put = 0;
                while (put < n) { /* (write may take less than asked) */
                    const ssize_t got = write(fd, first[m] + put, n - put);
                    if (got <= 0) return fprintf(stderr, "bench_decode: cannot write %zu bytes of weights to /tmp\n", total), 1;
                    put += (size_t)got;
                }
            }
        map = (char *)mmap(NULL, total, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) return fprintf(stderr, "bench_decode: cannot map the weights\n"), 1;
        settle_huge(map, total, fd);
        close(fd);
        for (l = 0; l < L; l++)
            for (m = 0; m < 4; m++) w[4 * l + m] = map + per_layer * (size_t)l + at[m];
        for (m = 0; m < 4; m++) free(first[m]);
        weights = map;
    }
    ws_bytes = ck_linear_q_workspace(1, D > F ? D : F);
    ws = need(aligned_alloc(64, (ws_bytes + 63) / 64 * 64), "the workspace");
    puts("ready");
    fflush(stdout);
    while (fgets(cmd, sizeof cmd, stdin)) {
        int threads = 1;
        if (strncmp(cmd, "bytes", 5) == 0) {
            printf("%zu\n", bytes);
        } else if (strncmp(cmd, "huge", 4) == 0) {
            printf("%lld\n", huge_bytes(weights));
        } else if (sscanf(cmd, "read %d", &threads) == 1) {
            printf("%f\n", read_gbs(threads));
        } else if (sscanf(cmd, "gemv %d %31s", &threads, path) == 2) {
            double best = 1e30;
            int rep;
            ck_threads_saved saved;
            force_path(path);
            ck_threads_enter(&saved, threads);
            ck_ws_use(ws, ws_bytes); /* the kernels' temporaries in a workspace, as a model hands them one */
            for (rep = 0; rep < 3; rep++) {
                const double t0 = omp_get_wtime();
                for (l = 0; l < L; l++)
                    for (m = 0; m < 4; m++) {
                        ck_qmat q;
                        memset(&q, 0, sizeof q);
                        q.n_parts = 1, q.type[0] = type, q.rows[0] = Ns[m], q.data[0] = w[4 * l + m];
                        ck_linear_q(y, Ns[m], x, Ks[m], &q, NULL, NULL, 0, 1, Ks[m], Ns[m]);
                    }
                if (omp_get_wtime() - t0 < best) best = omp_get_wtime() - t0;
            }
            ck_ws_use(NULL, 0);
            ck_threads_leave(&saved);
            printf("%.9f %s\n", best, ck_cpu_path());
        } else {
            break;
        }
        fflush(stdout);
    }
    return 0;
}
