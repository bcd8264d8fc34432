/*
 * linked_generate.c — link a compiled model straight into a program.
 *
 * Build (from the ckc repository root, after `ckc compile ... -o out/model.c`):
 *   cc -O3 -I runtime/include -o linked_generate build_examples/linked_generate.c \
 *      out/model.c $(cat out/model.c.kernels) -lopenblas -lm -fopenmp
 * Run:
 *   ./linked_generate WEIGHTS STEPS TOKEN...
 */
#include <stdio.h>
#include <stdlib.h>

#include "ck_model.h"

static int argmax(const float *row, int n)
{
    int i, best = 0;
    for (i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

int main(int argc, char **argv)
{
    ck_model *m;
    int32_t *prompt;
    int n, i, steps, vocab, next;
    if (argc < 4) {
        fprintf(stderr, "usage: %s WEIGHTS STEPS TOKEN...\n", argv[0]);
        return 2;
    }
    steps = atoi(argv[2]);
    n = argc - 3;
    prompt = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    for (i = 0; i < n; i++) prompt[i] = (int32_t)atol(argv[3 + i]);
    m = ck_model_init(argv[1]);
    if (!m) {
        fprintf(stderr, "error: %s\n", ck_last_error());
        return 1;
    }
    vocab = ck_model_get_vocab_size(m);
    if (ck_model_kv_cache_enable(m, n + steps) || ck_model_embed_tokens(m, prompt, n) || ck_model_forward(m)) {
        fprintf(stderr, "error: %s\n", ck_last_error());
        ck_model_free(m);
        return 1;
    }
    for (i = 0; i < n; i++) printf("%d ", (int)prompt[i]);
    next = argmax(ck_model_get_logits(m), vocab); /* the last position's (the default) */
    for (i = 0; i < steps; i++) {
        printf("%d ", next);
        if (i + 1 < steps) {
            if (ck_model_decode(m, next)) {
                fprintf(stderr, "error: %s\n", ck_last_error());
                break;
            }
            next = argmax(ck_model_get_logits(m), vocab);
        }
    }
    printf("\n");
    ck_model_free(m);
    free(prompt);
    return 0;
}
