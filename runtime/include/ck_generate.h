/*
 * ck_generate.h — sampling and text generation over a compiled language model (runtime/text/generate.c).
 *
 *   ck_generate_opts o;
 *   ck_generate_opts_default(&o);                 // greedy, 128 new tokens, stop at EOS / end of turn
 *   o.sampling.temperature = 0.7f; o.sampling.top_p = 0.9f; o.sampling.seed = 42;
 *   ck_generate_result r;
 *   ck_generate(m, ck_model_get_tokenizer(m), prompt, n, &o, out, cap, on_token, user, &r);
 *
 * The sampler applies, in Hugging Face generate()'s order: repetition penalty over the last repeat_last_n
 * tokens (prompt included), temperature, top-k, top-p, min-p; then draws from the distribution with a
 * seeded generator (the same seed gives the same tokens). temperature <= 0 is greedy (argmax).
 */
#ifndef CK_GENERATE_H
#define CK_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "ck_model.h"
#include "ck_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ck_sampling {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* keep the k most likely (0: all) */
    float top_p;          /* keep the smallest set with probability >= top_p (>= 1: all) */
    float min_p;          /* drop tokens below min_p x the most likely one's probability (0: none) */
    float repeat_penalty; /* > 1 discourages tokens already seen (CTRL / HF: logit / p if > 0, else * p); 1: off */
    int repeat_last_n;    /* how many of the latest tokens count as seen (0: all) */
    uint64_t seed;
} ck_sampling;

typedef struct ck_sampler ck_sampler;
ck_sampler *ck_sampler_new(const ck_sampling *p, int vocab_size); /* NULL: bad parameters or out of memory */
void ck_sampler_free(ck_sampler *s);
/* The next token for logits[vocab_size]; history: the tokens so far (prompt + generated) for the penalty. */
int32_t ck_sampler_sample(ck_sampler *s, const float *logits, const int32_t *history, int n_history);

enum {
    CK_STOP_LENGTH = 0,   /* max_new_tokens reached */
    CK_STOP_EOG = 1,      /* an end-of-generation token (EOS, end of turn); it is not in the output */
    CK_STOP_STRING = 2,   /* a stop string appeared; the text stops before it */
    CK_STOP_CALLBACK = 3, /* the callback returned non-zero */
    CK_STOP_CONTEXT = 4   /* the context (or the KV cache) is full: fewer tokens than asked */
};

/* Called for each generated token with the text it completes (whole UTF-8 characters; text held back while
 * it may be the start of a stop string comes with a later token). text is NULL without a tokenizer.
 * Return non-zero to stop. */
typedef int (*ck_token_callback)(void *user, int32_t token, const char *text, size_t len);

typedef struct ck_generate_opts {
    int max_new_tokens;
    ck_sampling sampling;
    const char *const *stop; /* stop strings (need a tokenizer), n_stop of them */
    int n_stop;
    int ignore_eos;          /* do not stop at EOS / end of turn */
    int keep_cache;          /* 0: a fresh sequence (the KV cache is enabled for it and released after);
                                1: the prompt continues what the KV cache holds (chat), which stays on */
} ck_generate_opts;

typedef struct ck_generate_result {
    int n_prompt, n_new; /* tokens read / generated (the stop token not counted) */
    int stop;            /* CK_STOP_* */
    double prefill_seconds, decode_seconds;
} ck_generate_result;

void ck_generate_opts_default(ck_generate_opts *o);
void ck_sampling_default(ck_sampling *s);

/* Generates after prompt[n_prompt] (at least one token unless keep_cache continues a cache). The new ids go
 * to out[cap] (cap may be 0). Returns 0, or a negative CK_E* code: a prompt longer than the context is
 * CK_ERANGE before anything runs (nothing is truncated silently: running out of room while generating is
 * CK_STOP_CONTEXT in result). tok may be NULL (no stop strings, no text, EOS unknown). */
int ck_generate(ck_model *m, const ck_tokenizer *tok, const int32_t *prompt, int n_prompt, const ck_generate_opts *o,
                int32_t *out, int cap, ck_token_callback fn, void *user, ck_generate_result *result);

/* ---- chat (runtime/text/chat.c) ---------------------------------------------------------------------------
 * The chat templates of the supported families, rendered exactly as transformers' apply_chat_template renders
 * their Jinja: ChatML (SmolLM2, Qwen2; with the template's default system prompt), Qwen3, SmolLM3, Llama-2,
 * Llama-3, Mistral, Gemma, Gemma 3, Phi-3. The template is recognized from the model's own template text. */
typedef struct ck_chat_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} ck_chat_message;

/* The format name for a template ("chatml", "qwen3", "smollm3", "llama2", "llama3", "mistral", "gemma", "gemma3",
 * "phi3"), or NULL. */
const char *ck_chat_format_name(const char *chat_template);
/* Renders messages; bos / eos: the tokenizer's texts for bos_token / eos_token. Returns the byte count (at
 * most cap - 1 written, NUL-terminated), or CK_ENOTSUP (template not recognized) / CK_EINVAL (a role the
 * template refuses: unknown roles, a system prompt where the family has none, roles not alternating), with
 * the reason in err. */
long ck_chat_render(const char *chat_template, const ck_chat_message *msgs, int n, int add_generation_prompt,
                    const char *bos, const char *eos, char *out, long cap, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* CK_GENERATE_H */
