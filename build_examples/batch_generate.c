/*
 * batch_generate.c — several prompts decoded together in one model handle (ck_model_batch).
 *
 * Build (from the ckc repository root, after `ckc compile ... -o out/model.c`):
 *   cc -O3 -I runtime/include -o batch_generate build_examples/batch_generate.c \
 *      out/model.c $(cat out/model.c.kernels) -lopenblas -lm -fopenmp
 * Run (each prompt one argument, its token ids separated by commas):
 *   ./batch_generate WEIGHTS STEPS 1,2,3 4,5 6,7,8,9
 * Prints each prompt's greedy continuation of STEPS tokens on its own line. One call prefills every prompt; then
 * each call advances every sequence by one token, the weights read once per step for all of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int n_seqs, steps, vocab, s, step, n = 0, total = 0, longest = 0, rc = 1;
    int32_t *tokens, *seqs, *out;
    if (argc < 4 || (steps = atoi(argv[2])) < 1) {
        fprintf(stderr, "usage: %s WEIGHTS STEPS PROMPT... (STEPS >= 1; a prompt: ids separated by commas)\n", argv[0]);
        return 2;
    }
    n_seqs = argc - 3;
    for (s = 0; s < n_seqs; s++) {
        const char *p = argv[3 + s];
        int len = 1;
        for (; *p; p++) len += *p == ',';
        total += len;
        if (len > longest) longest = len;
    }
    /* every prompt's ids in one call, tokens[i] going to sequence seqs[i]; later calls: one token each */
    tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)(total > n_seqs ? total : n_seqs));
    seqs = (int32_t *)malloc(sizeof(int32_t) * (size_t)(total > n_seqs ? total : n_seqs));
    out = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_seqs * (size_t)steps);
    if (!tokens || !seqs || !out) return 1;
    for (s = 0; s < n_seqs; s++) {
        char *p = argv[3 + s];
        do {
            tokens[n] = (int32_t)strtol(p, &p, 10);
            seqs[n++] = s;
        } while (*p++ == ',');
    }
    m = ck_model_init(argv[1]);
    if (!m) {
        fprintf(stderr, "error: %s\n", ck_last_error());
        return 1;
    }
    vocab = ck_model_get_vocab_size(m);
    if (ck_model_kv_cache_enable_batch(m, longest + steps, n_seqs) || ck_model_batch(m, tokens, seqs, n)) goto done;
    for (step = 0; step < steps; step++) {
        /* the logits: one row per sequence, in the order of its last token in the call (here 0, 1, ...) */
        for (s = 0; s < n_seqs; s++) {
            out[(size_t)s * steps + step] = tokens[s] = argmax(ck_model_get_logits(m) + (size_t)s * vocab, vocab);
            seqs[s] = s;
        }
        if (step + 1 < steps && ck_model_batch(m, tokens, seqs, n_seqs)) goto done;
    }
    for (s = 0; s < n_seqs; s++)
        for (step = 0; step < steps; step++) printf(step + 1 < steps ? "%d " : "%d\n", (int)out[(size_t)s * steps + step]);
    rc = 0;
done:
    if (rc) fprintf(stderr, "error: %s\n", ck_last_error());
    ck_model_free(m);
    free(tokens);
    free(seqs);
    free(out);
    return rc;
}
