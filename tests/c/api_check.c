/*
 * api_check.c — drives a generated model through its ABI, including every
 * misuse the ABI promises to survive (NULL handles, bad token ids, a full KV
 * cache, decode before the cache is on). Linked against the tiny Llama's
 * model.c and run under ASan + UBSan by tests/sanitized_model.sh, with and
 * without -DCK_TRACE (the trace callback reads every element it is given).
 *   api_check WEIGHTS    exits 0 when every check holds
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_model.h"

static int failures;
#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "api_check:%d: CHECK(%s) failed; last error: %s\n", __LINE__, #cond, \
                    ck_last_error());                                                 \
            failures++;                                                               \
        }                                                                             \
    } while (0)

static long trace_events;
static double trace_sum;

static void on_trace(void *user, const ck_trace_event *e)
{
    int64_t r, c;
    (void)user;
    trace_events++;
    for (r = 0; r < e->rows; r++)
        for (c = 0; c < e->cols; c++) trace_sum += e->data[r * e->ld + c];
}

int main(int argc, char **argv)
{
    int32_t toks[3] = {1, 2, 3}, bad[2] = {5, 100000}, many[200];
    ck_model *m;
    int i;
    if (argc != 2) {
        fprintf(stderr, "usage: %s WEIGHTS\n", argv[0]);
        return 2;
    }
    for (i = 0; i < 200; i++) many[i] = 1;

    CHECK(ck_model_init(NULL) == NULL && strstr(ck_last_error(), "NULL"));
    CHECK(ck_model_init("/nonexistent") == NULL);
    CHECK(ck_model_forward(NULL) == CK_EINVAL);
    CHECK(ck_model_embed_tokens(NULL, toks, 3) == CK_EINVAL);
    CHECK(ck_model_decode(NULL, 1) == CK_EINVAL);
    CHECK(ck_model_get_logits(NULL) == NULL);
    CHECK(ck_model_get_logits_rows(NULL) == CK_EINVAL && ck_model_set_logits_all(NULL, 1) == CK_EINVAL);
    ck_model_kv_cache_reset(NULL);
    ck_model_free(NULL);

    m = ck_model_init(argv[1]);
    CHECK(m != NULL);
    if (!m) return 1;
    CHECK(ck_model_get_logits(m) == NULL);
    CHECK(ck_model_forward(m) == CK_ESTATE);
    CHECK(ck_model_embed_tokens(m, bad, 2) == CK_EINVAL);
    CHECK(ck_model_embed_tokens(m, many, 200) == CK_ERANGE);
    CHECK(ck_model_decode(m, 1) == CK_ESTATE);
    CHECK(ck_model_embed_tokens(m, toks, 3) == CK_OK && ck_model_forward(m) == CK_OK);
    CHECK(ck_model_get_active_tokens(m) == 3 && ck_model_get_logits_rows(m) == 1); /* the last position's only */
    {
        int v = ck_model_get_vocab_size(m), j;
        float *last = (float *)malloc(sizeof(float) * (size_t)v), worst = 0.0f;
        CHECK(last != NULL);
        if (last) {
            memcpy(last, ck_model_get_logits(m), sizeof(float) * (size_t)v);
            CHECK(ck_model_set_logits_all(m, 1) == CK_OK);
            CHECK(ck_model_embed_tokens(m, toks, 3) == CK_OK && ck_model_forward(m) == CK_OK);
            CHECK(ck_model_get_logits_rows(m) == 3);
            for (j = 0; j < v; j++) {
                float d = fabsf(ck_model_get_logits(m)[2 * v + j] - last[j]);
                if (d > worst) worst = d;
            }
            CHECK(worst < 1e-4f);
            CHECK(ck_model_set_logits_all(m, 0) == CK_OK);
            free(last);
        }
    }
    CHECK(ck_model_embed_tokens(m, many, 128) == CK_OK && ck_model_forward(m) == CK_OK); /* full context */
    CHECK(ck_model_kv_cache_enable(m, 0) == CK_ERANGE);
    CHECK(ck_model_kv_cache_enable(m, 5) == CK_OK);
    CHECK(ck_model_embed_tokens(m, toks, 3) == CK_OK && ck_model_forward(m) == CK_OK);
    CHECK(ck_model_decode(m, 4) == CK_OK && ck_model_decode(m, 5) == CK_OK);
    CHECK(ck_model_decode(m, 6) == CK_ERANGE);
    CHECK(ck_model_embed_tokens(m, toks, 3) == CK_OK && ck_model_forward(m) == CK_ERANGE);
    ck_model_kv_cache_reset(m);
    CHECK(ck_model_kv_cache_get_tokens(m) == 0);
    CHECK(ck_model_decode(m, 6) == CK_OK && ck_model_get_active_tokens(m) == 1);
    ck_model_kv_cache_disable(m);
    ck_model_kv_cache_disable(NULL);
    CHECK(ck_model_decode(m, 6) == CK_ESTATE);
    CHECK(ck_model_kv_cache_enable(m, 64) == CK_OK); /* re-enable: reallocates */
    for (i = 0; i < 64; i++) CHECK(ck_model_decode(m, i % 7) == CK_OK);
    CHECK(ck_model_set_threads(m, 1) == CK_OK && ck_model_get_threads(m) == 1);
    CHECK(ck_model_set_threads(m, 0) == CK_OK && ck_model_get_threads(m) >= 1);
    CHECK(ck_model_set_threads(m, -2) == CK_EINVAL && ck_model_get_threads(m) >= 1);  /* as ck_graph_set_threads */

    CHECK(ck_model_set_trace(NULL, on_trace, NULL) == CK_EINVAL);
#ifdef CK_TRACE
    ck_model_kv_cache_reset(m);
    CHECK(ck_model_set_trace(m, on_trace, NULL) == CK_OK);
    CHECK(ck_model_embed_tokens(m, toks, 3) == CK_OK && ck_model_forward(m) == CK_OK);
    CHECK(trace_events > 3 * ck_model_get_num_layers(m) && trace_sum == trace_sum);
    CHECK(ck_model_decode(m, 2) == CK_OK);
    CHECK(ck_model_set_trace(m, NULL, NULL) == CK_OK);
    i = (int)trace_events;
    CHECK(ck_model_decode(m, 3) == CK_OK && trace_events == i);
#else
    CHECK(ck_model_set_trace(m, on_trace, NULL) == CK_ENOTSUP && strstr(ck_last_error(), "CK_TRACE"));
#endif
    ck_model_free(m);
    if (failures) fprintf(stderr, "api_check: %d failures\n", failures);
    else printf("api_check: all checks passed\n");
    return failures ? 1 : 0;
}
