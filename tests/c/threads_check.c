/*
 * threads_check.c — the documented rule "one handle per thread" (ck_model.h, ck_graph.h), checked: THREADS
 * threads, each with its own handle of the same library, run STEPS steps while the others do; each thread's
 * results must equal a single-threaded run's, bit for bit. Built with ThreadSanitizer by tests/sanitized_model.sh
 * (any report fails it) and at -O2 with OpenMP by tests/python/test_concurrency.py.
 *   threads_check WEIGHTS THREADS STEPS            a language model (cc ... model.c): greedy decode
 *   threads_check WEIGHTS THREADS STEPS VOCAB      -DCK_CHECK_GRAPH, a graph (cc ... graph model.c): STEPS runs
 * Exits 0 when every thread matched.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CK_CHECK_GRAPH
#include "ck_graph.h"
#else
#include "ck_model.h"
#endif

static const char *weights;
static int steps;
#ifdef CK_CHECK_GRAPH
static int vocab;
#endif

typedef struct job {
    uint64_t hash;  /* of every result, in order */
    int32_t *tokens; /* the language model: the greedy tokens */
    int failed;
} job;

#ifdef CK_CHECK_GRAPH
/* bytes of input (out = 0) or output (out = 1) i */
static size_t graph_bytes(int out, int i)
{
    int rank = out ? ck_graph_output_rank(i) : ck_graph_input_rank(i), d;
    const int64_t *shape = out ? ck_graph_output_shape(i) : ck_graph_input_shape(i);
    int dt = out ? ck_graph_output_dtype(i) : ck_graph_input_dtype(i);
    size_t n = dt == CK_GRAPH_BOOL ? 1 : dt == CK_GRAPH_I64 ? 8 : 4;
    for (d = 0; d < rank; d++) n *= (size_t)shape[d];
    return n;
}
#endif

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#ifndef CK_CHECK_GRAPH
/* the prompt 1 2 3, then `steps` greedy tokens, decoded one by one (the cache starting over when full); twice,
 * with a cache reset between */
static void *run(void *arg)
{
    job *j = (job *)arg;
    ck_model *m = ck_model_init(weights);
    int round, i, k, vocab_n;
    j->hash = 0xcbf29ce484222325ull;
    if (!m || ck_model_set_threads(m, 1) ||
        ck_model_kv_cache_enable(m, steps + 4 < ck_model_get_context_length(m) ? steps + 4 : ck_model_get_context_length(m))) {
        fprintf(stderr, "threads_check: %s\n", ck_last_error());
        j->failed = 1;
        ck_model_free(m);
        return NULL;
    }
    vocab_n = ck_model_get_vocab_size(m);
    for (round = 0; round < 2; round++) {
        int32_t next = 1;
        ck_model_kv_cache_reset(m);
        for (i = 0; i < steps + 3; i++) {
            const float *logits;
            int32_t tok = i < 3 ? (int32_t)(i + 1) : next;
            if (ck_model_kv_cache_get_tokens(m) == ck_model_kv_cache_get_capacity(m))
                ck_model_kv_cache_reset(m); /* a full cache starts over (steps beyond the context length) */
            if (ck_model_decode(m, tok) != 0 || !(logits = ck_model_get_logits(m))) {
                fprintf(stderr, "threads_check: decode: %s\n", ck_last_error());
                j->failed = 1;
                break;
            }
            j->hash = fnv(j->hash, logits, (size_t)vocab_n * sizeof(float));
            for (next = 0, k = 1; k < vocab_n; k++)
                if (logits[k] > logits[next]) next = k;
            if (i >= 2 && round == 0) j->tokens[i - 2] = next;
        }
    }
    ck_model_free(m);
    return NULL;
}
#else
/* `steps` runs on inputs that change with the step */
static void *run(void *arg)
{
    job *j = (job *)arg;
    ck_graph *g = ck_graph_init(weights);
    int ni = ck_graph_num_inputs(), no = ck_graph_num_outputs(), i, s;
    void *in[16], *out[16];
    size_t in_n[16], out_n[16];
    j->hash = 0xcbf29ce484222325ull;
    if (!g || ni > 16 || no > 16 || ck_graph_set_threads(g, 1)) {
        fprintf(stderr, "threads_check: %s\n", ck_last_error());
        j->failed = 1;
        ck_graph_free(g);
        return NULL;
    }
    for (i = 0; i < ni; i++) {
        in_n[i] = graph_bytes(0, i);
        in[i] = calloc(1, in_n[i] + 8);
    }
    for (i = 0; i < no; i++) {
        out_n[i] = graph_bytes(1, i);
        out[i] = calloc(1, out_n[i] + 8);
    }
    for (s = 0; s < steps && !j->failed; s++) {
        for (i = 0; i < ni; i++) {
            size_t e;
            if (ck_graph_input_dtype(i) == CK_GRAPH_I64) {
                for (e = 0; e < in_n[i] / 8; e++) ((int64_t *)in[i])[e] = (int64_t)((e * 7 + (size_t)s) % (size_t)vocab);
            } else if (ck_graph_input_dtype(i) == CK_GRAPH_F32) {
                for (e = 0; e < in_n[i] / 4; e++) ((float *)in[i])[e] = (float)((e * 13 + (size_t)s) % 17) * 0.125f - 1.0f;
            }
        }
        if (ck_graph_run(g, (const void *const *)in, out) != CK_OK) {
            fprintf(stderr, "threads_check: run: %s\n", ck_last_error());
            j->failed = 1;
        }
        for (i = 0; i < no; i++) j->hash = fnv(j->hash, out[i], out_n[i]);
    }
    for (i = 0; i < ni; i++) free(in[i]);
    for (i = 0; i < no; i++) free(out[i]);
    ck_graph_free(g);
    return NULL;
}
#endif

int main(int argc, char **argv)
{
    job ref, *jobs;
    pthread_t *th;
    int n, i, bad = 0;
    if (argc < 4) {
        fprintf(stderr, "usage: threads_check WEIGHTS THREADS STEPS [VOCAB]\n");
        return 2;
    }
    weights = argv[1];
    n = atoi(argv[2]);
    steps = atoi(argv[3]);
#ifdef CK_CHECK_GRAPH
    vocab = argc > 4 ? atoi(argv[4]) : 1;
#endif
    if (n < 1 || steps < 1) return 2;
    memset(&ref, 0, sizeof ref);
    ref.tokens = (int32_t *)calloc((size_t)steps + 1, sizeof(int32_t));
    run(&ref); /* alone first */
    if (ref.failed) return 1;
    jobs = (job *)calloc((size_t)n, sizeof *jobs);
    th = (pthread_t *)calloc((size_t)n, sizeof *th);
    for (i = 0; i < n; i++) {
        jobs[i].tokens = (int32_t *)calloc((size_t)steps + 1, sizeof(int32_t));
        if (pthread_create(&th[i], NULL, run, &jobs[i]) != 0) return 1;
    }
    for (i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (i = 0; i < n; i++) {
        if (jobs[i].failed || jobs[i].hash != ref.hash ||
            memcmp(jobs[i].tokens, ref.tokens, (size_t)steps * sizeof(int32_t)) != 0) {
            fprintf(stderr, "threads_check: thread %d differs from the single-threaded run\n", i);
            bad = 1;
        }
        free(jobs[i].tokens);
    }
    printf("threads_check: %d threads x %d steps, each with its own handle: %s (hash %016llx)\n", n, steps,
           bad ? "DIFFERENT" : "identical to one thread", (unsigned long long)ref.hash);
    free(ref.tokens);
    free(jobs);
    free(th);
    return bad;
}
