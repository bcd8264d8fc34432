/*
 * alloc_check.c — no allocator call after init: the C library's malloc, calloc, realloc and free are wrapped
 * (GNU ld's --wrap) and counted while a language model decodes 32 tokens (-DCHECK_LLM) or a graph runs 3 times
 * (-DCHECK_GRAPH); the kernels' temporaries come from the workspace the model allocated at init. Built with a
 * generated model.c by tests/python/test_standalone.py:
 *
 *   cc -DCHECK_LLM -I runtime/include tests/c/alloc_check.c model.c -lm -fopenmp \
 *      -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free -o check && ./check WEIGHTS
 * Prints the counts; exit 1 when any is not zero.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int counting;
static long calls;
void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n)
{
    calls += counting;
    return __real_malloc(n);
}
void *__wrap_calloc(size_t a, size_t b)
{
    calls += counting;
    return __real_calloc(a, b);
}
void *__wrap_realloc(void *p, size_t n)
{
    calls += counting;
    return __real_realloc(p, n);
}
void __wrap_free(void *p)
{
    calls += counting && p;
    __real_free(p);
}

#ifdef CHECK_LLM
#include "ck_model.h"
int main(int argc, char **argv)
{
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int i, threads;
    ck_model *m = argc > 1 ? ck_model_init(argv[1]) : NULL;
    if (!m) return fprintf(stderr, "error: %s\n", argc > 1 ? ck_last_error() : "usage: check WEIGHTS"), 2;
    for (threads = 1; threads <= 2; threads++) {
        if (ck_model_set_threads(m, threads) || ck_model_kv_cache_enable(m, 64) || ck_model_embed_tokens(m, prompt, 8) ||
            ck_model_forward(m))
            return fprintf(stderr, "error: %s\n", ck_last_error()), 2;
        counting = 1;
        for (i = 0; i < 32; i++)
            if (ck_model_decode(m, (i * 7) % 50)) return fprintf(stderr, "error: %s\n", ck_last_error()), 2;
        counting = 0;
        printf("%d thread(s), 32 decode steps: %ld allocator calls\n", threads, calls);
        if (calls) return 1;
    }
    ck_model_free(m);
    return 0;
}
#endif

#ifdef CHECK_GRAPH
#include "ck_graph.h"
int main(int argc, char **argv)
{
    void *in[16], *out[16];
    int i, r;
    ck_graph *g = ck_graph_init(argc > 1 ? argv[1] : NULL);
    if (!g || ck_graph_num_inputs() > 16 || ck_graph_num_outputs() > 16)
        return fprintf(stderr, "error: %s\n", g ? "too many inputs" : ck_last_error()), 2;
    for (i = 0; i < ck_graph_num_inputs(); i++) { /* zeros: any valid input (ids 0) */
        size_t n = 8;
        int d;
        for (d = 0; d < ck_graph_input_rank(i); d++) n *= (size_t)ck_graph_input_shape(i)[d];
        in[i] = calloc(n, 1);
    }
    for (i = 0; i < ck_graph_num_outputs(); i++) {
        size_t n = 8;
        int d;
        for (d = 0; d < ck_graph_output_rank(i); d++) n *= (size_t)ck_graph_output_shape(i)[d];
        out[i] = ck_graph_output_into(i) >= 0 ? in[ck_graph_output_into(i)] : calloc(n, 1);
    }
    if (ck_graph_set_threads(g, 2) || ck_graph_run(g, (const void *const *)in, (void *const *)out))
        return fprintf(stderr, "error: %s\n", ck_last_error()), 2;
    counting = 1;
    for (r = 0; r < 3; r++)
        if (ck_graph_run(g, (const void *const *)in, (void *const *)out)) return 2;
    counting = 0;
    printf("3 graph runs: %ld allocator calls\n", calls);
    ck_graph_free(g);
    return calls ? 1 : 0;
}
#endif
