/*
 * alloc_check.c — no allocator call after init: the C library's malloc, calloc, realloc and free are wrapped
 * (GNU ld's --wrap) and counted while a language model decodes 32 tokens (-DCHECK_LLM), a static build prefills
 * and decodes (-DCHECK_STATIC) or a graph runs 3 times (-DCHECK_GRAPH); the kernels' temporaries come from the
 * workspace the model allocated at init (a static build: its one block). Built with a
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

#ifdef CHECK_STATIC
#include "ck_model.h"
/* a static build (ckc compile --static --max-tokens N --kv K) in the caller's block: after init, a prefill of N
 * tokens and 32 decode steps call no allocator, on one thread (a model run by more takes per-thread panels from
 * the allocator when it prefills); then the bounds: N + 1 tokens in a call, a KV cache past K, too small a block,
 * a second model in the static array */
int main(int argc, char **argv)
{
    int32_t prompt[4097];
    size_t bytes = ck_model_memory_bytes();
    unsigned char *block = (unsigned char *)malloc(bytes);
    int i, n, kv;
    ck_model *m = argc > 1 ? ck_model_init_with_memory(argv[1], block, bytes) : NULL;
    if (!m) return fprintf(stderr, "error: %s\n", argc > 1 ? ck_last_error() : "usage: check WEIGHTS"), 2;
    n = ck_model_get_max_tokens(m), kv = ck_model_get_context_length(m);
    if (n > 4096 || kv < n + 32) return fprintf(stderr, "compile with --max-tokens N --kv K: N <= 4096, K >= N + 32\n"), 2;
    for (i = 0; i <= n; i++) prompt[i] = (i * 5 + 1) % 50;
    if (ck_model_set_threads(m, 1)) return 2;
    counting = 1;
    if (ck_model_kv_cache_enable(m, kv) || ck_model_embed_tokens(m, prompt, n) || ck_model_forward(m))
        return fprintf(stderr, "error: %s\n", ck_last_error()), 2;
    for (i = 0; i < 32; i++)
        if (ck_model_decode(m, (i * 7) % 50)) return fprintf(stderr, "error: %s\n", ck_last_error()), 2;
    counting = 0;
    { /* the buffers are the block's: the logits lie in it */
        const unsigned char *l = (const unsigned char *)ck_model_get_logits(m);
        if (!l || l < block || l >= block + bytes) return fprintf(stderr, "the logits are not in the block\n"), 1;
    }
    printf("CK_MODEL_MEMORY_BYTES %zu\n", bytes);
    printf("%d-token prefill and 32 decode steps: %ld allocator calls\n", n, calls);
    while (ck_model_kv_cache_get_tokens(m) < kv)
        if (ck_model_decode(m, 1)) return fprintf(stderr, "error: %s\n", ck_last_error()), 2;
    if (ck_model_decode(m, 1) != CK_ERANGE) return fprintf(stderr, "decoding past the KV cache did not fail\n"), 1;
    printf("past the KV cache: %d %s\n", ck_last_error_code(), ck_last_error());
    if (ck_model_embed_tokens(m, prompt, n + 1) != CK_ERANGE) return fprintf(stderr, "N + 1 tokens did not fail\n"), 1;
    printf("N + 1 tokens: %d %s\n", ck_last_error_code(), ck_last_error());
    if (ck_model_kv_cache_enable(m, kv + 1) != CK_ERANGE) return fprintf(stderr, "K + 1 KV positions did not fail\n"), 1;
    printf("K + 1 KV positions: %d %s\n", ck_last_error_code(), ck_last_error());
    ck_model_free(m);
    if (ck_model_init_with_memory(argv[1], block, bytes - 1)) return fprintf(stderr, "a short block was taken\n"), 1;
    printf("short block: %d %s\n", ck_last_error_code(), ck_last_error());
    free(block);
    /* ck_model_init: the static array, one model at a time */
    if (!(m = ck_model_init(argv[1]))) return fprintf(stderr, "error: %s\n", ck_last_error()), 2;
    if (ck_model_init(argv[1])) return fprintf(stderr, "a second model took the static array\n"), 1;
    printf("second model: %d %s\n", ck_last_error_code(), ck_last_error());
    ck_model_free(m);
    if (!(m = ck_model_init(argv[1]))) return fprintf(stderr, "error after free: %s\n", ck_last_error()), 2;
    ck_model_free(m);
    return calls ? 1 : 0;
}
#endif

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
