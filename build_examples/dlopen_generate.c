/*
 * dlopen_generate.c — load a compiled model at run time and generate greedily.
 *
 * Build (from the ckc repository root; the model library is built separately):
 *   cc -O2 -o dlopen_generate build_examples/dlopen_generate.c -ldl
 * Run:
 *   ./dlopen_generate out/libmodel.so WEIGHTS STEPS TOKEN...
 * prints the prompt and STEPS generated token ids.
 *
 * Only <dlfcn.h> and the ABI's function names are needed: no header, no link
 * dependency on the model. The prototypes below match runtime/include/ck_model.h.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ck_model ck_model;
typedef ck_model *(*init_fn)(const char *);
typedef void (*free_fn)(ck_model *);
typedef const char *(*error_fn)(void);
typedef int (*embed_fn)(ck_model *, const int32_t *, int);
typedef int (*forward_fn)(ck_model *);
typedef const float *(*logits_fn)(const ck_model *);
typedef int (*int_fn)(const ck_model *);
typedef int (*kv_enable_fn)(ck_model *, int);
typedef int (*decode_fn)(ck_model *, int32_t);

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "error: %s: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

static int argmax(const float *row, int n)
{
    int i, best = 0;
    for (i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

int main(int argc, char **argv)
{
    void *lib;
    ck_model *m;
    int32_t *prompt;
    int n, i, steps, vocab, next;
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIBMODEL.so WEIGHTS STEPS TOKEN...\n", argv[0]);
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "error: %s\n", dlerror());
        return 1;
    }
    {
        init_fn init = (init_fn)sym(lib, "ck_model_init");
        free_fn release = (free_fn)sym(lib, "ck_model_free");
        error_fn last_error = (error_fn)sym(lib, "ck_last_error");
        embed_fn embed = (embed_fn)sym(lib, "ck_model_embed_tokens");
        forward_fn forward = (forward_fn)sym(lib, "ck_model_forward");
        logits_fn logits = (logits_fn)sym(lib, "ck_model_get_logits");
        int_fn vocab_size = (int_fn)sym(lib, "ck_model_get_vocab_size");
        kv_enable_fn kv_enable = (kv_enable_fn)sym(lib, "ck_model_kv_cache_enable");
        decode_fn decode = (decode_fn)sym(lib, "ck_model_decode");

        steps = atoi(argv[3]);
        n = argc - 4;
        prompt = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        for (i = 0; i < n; i++) prompt[i] = (int32_t)atol(argv[4 + i]);
        m = init(argv[2]);
        if (!m) {
            fprintf(stderr, "error: %s\n", last_error());
            return 1;
        }
        vocab = vocab_size(m);
        if (kv_enable(m, n + steps) || embed(m, prompt, n) || forward(m)) {
            fprintf(stderr, "error: %s\n", last_error());
            release(m);
            return 1;
        }
        for (i = 0; i < n; i++) printf("%d ", (int)prompt[i]);
        next = argmax(logits(m), vocab); /* the last position's (the default) */
        for (i = 0; i < steps; i++) {
            printf("%d ", next);
            if (i + 1 < steps) {
                if (decode(m, next)) {
                    fprintf(stderr, "error: %s\n", last_error());
                    break;
                }
                next = argmax(logits(m), vocab);
            }
        }
        printf("\n");
        release(m);
        free(prompt);
    }
    dlclose(lib);
    return 0;
}
