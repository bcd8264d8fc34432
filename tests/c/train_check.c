/*
 * train_check.c — training through the C ABI (a model.c from `ckc compile --train`): a few AdamW steps on
 * one sequence make its loss fall, the misuse the ABI promises to refuse is refused, the trained model
 * saves and reloads to the same logits. Run under ASan + UBSan by tests/sanitized_model.sh.
 *   train_check WEIGHTS OUT_DIR    exits 0 when every check holds
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_model.h"

static int failures;
#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "train_check:%d: CHECK(%s) failed; last error: %s\n", __LINE__, #cond, ck_last_error()); \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

#define T 24

static int step(ck_model *m, const int32_t *x, const int32_t *y, float *loss)
{
    int rc;
    if ((rc = ck_model_zero_grad(m)) || (rc = ck_model_embed_tokens(m, x, T)) || (rc = ck_model_forward(m)) ||
        (rc = ck_model_backward(m, y, T, loss)))
        return rc;
    return ck_model_optimizer_step(m, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f);
}

int main(int argc, char **argv)
{
    int32_t seq[T + 1], bad[T];
    float first = 0, loss = 0, *logits_a, *buf;
    char saved[4096];
    ck_model *m, *m2;
    int i, n, vocab;
    long numel;
    if (argc != 3) {
        fprintf(stderr, "usage: train_check WEIGHTS OUT_DIR\n");
        return 2;
    }
    m = ck_model_init(argv[1]);
    if (!m) {
        fprintf(stderr, "init: %s\n", ck_last_error());
        return 1;
    }
    vocab = ck_model_get_vocab_size(m);
    for (i = 0; i <= T; i++) seq[i] = (i * 7 + 3) % vocab;

    /* refused before training is on */
    CHECK(ck_model_backward(m, seq + 1, T, &loss) == CK_ESTATE);
    CHECK(ck_model_optimizer_step(m, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f) == CK_ESTATE);
    CHECK(ck_model_enable_training(NULL, 8) == CK_EINVAL);
    CHECK(ck_model_enable_training(m, 0) == CK_ERANGE);
    CHECK(ck_model_kv_cache_enable(m, 8) == CK_OK);
    CHECK(ck_model_enable_training(m, T) == CK_ESTATE); /* the KV cache is on */
    ck_model_kv_cache_disable(m);

    CHECK(ck_model_enable_training(m, T) == CK_OK);
    CHECK(ck_model_is_training(m));
    CHECK(ck_model_decode(m, 1) == CK_ESTATE);
    CHECK(ck_model_kv_cache_enable(m, 8) == CK_ESTATE);
    CHECK(ck_model_backward(m, seq + 1, T, &loss) == CK_ESTATE); /* no forward yet */
    CHECK(ck_model_embed_tokens(m, seq, T) == CK_OK && ck_model_forward(m) == CK_OK);
    memcpy(bad, seq + 1, sizeof bad);
    bad[4] = vocab;
    CHECK(ck_model_backward(m, bad, T, &loss) == CK_EINVAL);
    bad[4] = -5;
    CHECK(ck_model_backward(m, bad, T, &loss) == CK_EINVAL);
    CHECK(ck_model_backward(m, seq + 1, T - 1, &loss) == CK_EINVAL);
    CHECK(ck_model_backward(m, NULL, T, &loss) == CK_EINVAL);
    CHECK(ck_model_optimizer_step(m, 1e-3f, 1.5f, 0.999f, 1e-8f, 0.0f, 0.0f) == CK_EINVAL);
    CHECK(ck_model_get_grad(m, "no.such.weight", NULL, 0) == CK_EINVAL);
    snprintf(saved, sizeof saved, "%s", ck_model_get_param_name(m, 0));
    CHECK(ck_model_set_weight_decay(m, saved, 0) == CK_OK);
    CHECK(ck_model_set_weight_decay(m, "no.such.weight", 0) == CK_EINVAL);

    /* training: the loss of the one sequence falls */
    for (i = 0; i < 30; i++) {
        CHECK(step(m, seq, seq + 1, &loss) == CK_OK);
        if (i == 0) first = loss;
    }
    printf("train_check: loss %.4f -> %.4f over 30 steps\n", first, loss);
    CHECK(isfinite(loss) && loss < 0.5f * first);
    CHECK(ck_model_get_grad_norm(m) > 0.0);
    n = ck_model_get_param_count(m);
    CHECK(n > 0);
    for (i = 0; i < n; i++) {
        const char *name = ck_model_get_param_name(m, i);
        CHECK(name != NULL);
        if (!name) continue;
        numel = ck_model_get_grad(m, name, NULL, 0);
        CHECK(numel > 0);
        buf = (float *)malloc(sizeof(float) * (size_t)(numel > 0 ? numel : 1));
        CHECK(ck_model_get_grad(m, name, buf, numel) == numel);
        CHECK(ck_model_get_grad(m, name, buf, numel - 1) == CK_EINVAL);
        CHECK(ck_model_get_weight(m, name, buf, numel) == numel);
        free(buf);
    }
    CHECK(ck_model_get_param_name(m, n) == NULL);

    /* save, then inference on the trained weights equals a fresh model on the saved file */
    snprintf(saved, sizeof saved, "%s/trained", argv[2]);
    CHECK(ck_model_save(m, saved) == CK_OK);
    ck_model_disable_training(m);
    CHECK(!ck_model_is_training(m));
    CHECK(ck_model_zero_grad(m) == CK_ESTATE);
    CHECK(ck_model_set_logits_all(m, 1) == CK_OK);
    CHECK(ck_model_embed_tokens(m, seq, T) == CK_OK && ck_model_forward(m) == CK_OK);
    logits_a = (float *)malloc(sizeof(float) * (size_t)T * vocab);
    memcpy(logits_a, ck_model_get_logits(m), sizeof(float) * (size_t)T * vocab);
    snprintf(saved, sizeof saved, "%s/trained/model.safetensors", argv[2]);
    m2 = ck_model_init(saved);
    CHECK(m2 != NULL);
    if (m2) {
        double worst = 0;
        CHECK(ck_model_set_logits_all(m2, 1) == CK_OK);
        CHECK(ck_model_embed_tokens(m2, seq, T) == CK_OK && ck_model_forward(m2) == CK_OK);
        for (i = 0; i < T * vocab; i++) {
            double d = fabs(ck_model_get_logits(m2)[i] - logits_a[i]);
            worst = d > worst ? d : worst;
        }
        CHECK(worst == 0.0);
        ck_model_free(m2);
    }
    /* training again after disabling starts from the trained weights */
    CHECK(ck_model_enable_training(m, T) == CK_OK);
    CHECK(step(m, seq, seq + 1, &loss) == CK_OK);
    CHECK(loss < 0.5f * first);
    free(logits_a);
    ck_model_free(m); /* with training on: frees it all */
    if (failures) fprintf(stderr, "train_check: %d failures\n", failures);
    else printf("train_check: all checks passed\n");
    return failures ? 1 : 0;
}
