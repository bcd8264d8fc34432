/*
 * vec_dot_check.c — every stored weight format's dot product as this CPU runs it (ck_vec_dot: NEON on ARM64,
 * AVX2/AVX-512 on x86) against the scalar reference (ck_vec_dot_ref), over row lengths with and without a
 * whole 4-block group, random rows; built for another CPU and run under emulation by
 * tests/python/test_standalone.py. Prints the kernel path and the formats checked; exit 1 on a mismatch.
 *
 *   cc -O2 -I runtime/include tests/c/vec_dot_check.c (runtime/kernels' sources) runtime/io/quant.c -DCK_BLAS=0 -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_errors.h"
#include "ck_kernels.h"
#include "ck_quant.h"

static unsigned long long rng = 88172645463325252ull;
static float uniform(void) /* xorshift64: [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

int main(void)
{
    static const int64_t lengths[] = {256, 768, 1024 + 256};
    int i, checked = 0, bad = 0, with_body = 0;
    const ck_qtype_traits *t;
    printf("path %s\n", ck_cpu_path());
    for (i = 0; (t = ck_qtype_traits_at(i)) != NULL; i++) {
        size_t l;
        if (!t->stored || !ck_qtype_cpu_of(t->type)) continue;
        for (l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            const int64_t n = lengths[l];
            const int dt = ck_qtype_dot_type(t->type);
            float *w = (float *)malloc(sizeof(float) * (size_t)n), *x = (float *)malloc(sizeof(float) * (size_t)n);
            float *wd = (float *)malloc(sizeof(float) * (size_t)n);
            void *wq = malloc(ck_qtype_row_bytes(t->type, n) + 1), *xq = malloc(ck_qtype_row_bytes(dt, n) + 1);
            double mag = 0.0;
            float got, ref;
            int64_t k;
            if (!w || !x || !wd || !wq || !xq) return 2;
            for (k = 0; k < n; k++) w[k] = 0.5f * uniform(), x[k] = uniform();
            if (ck_quantize_row(t->type, w, wq, n) != CK_OK || ck_dequantize_row(t->type, wq, wd, n) != CK_OK) return 2;
            if (dt == CK_Q_F32)
                memcpy(xq, x, sizeof(float) * (size_t)n);
            else if (ck_quantize_row(dt, x, xq, n) != CK_OK)
                return 2;
            for (k = 0; k < n; k++) mag += fabs((double)wd[k] * x[k]);
            got = ck_vec_dot(t->type, n, wq, xq);
            ref = ck_vec_dot_ref(t->type, n, wq, xq);
            /* the K-quants' bodies keep the reference's integer sums and float order: its bits */
            if (!(fabs((double)got - ref) <= 2e-6 * mag + 1e-6) || (strstr(t->name, "_K") && got != ref)) {
                printf("MISMATCH %s n=%lld: %.9g, reference %.9g\n", t->name, (long long)n, (double)got, (double)ref);
                bad++;
            }
            if (ck_vec_dot_for(t->type) != ck_qtype_cpu_of(t->type)->dot_ref) with_body += l == 0;
            checked++;
            free(w), free(x), free(wd), free(wq), free(xq);
        }
    }
    printf("%d rows checked, %d formats with a body of this path, %d mismatches\n", checked, with_body, bad);
    return bad ? 1 : 0;
}
