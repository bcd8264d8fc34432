/*
 * ck_model.h — the C ABI of a language model compiled by ckc from a Hugging
 * Face config.json. Every generated model.c implements exactly this.
 *
 *   ck_model *m = ck_model_init("path/to/hf-folder");   // NULL: see ck_last_error()
 *   ck_model_kv_cache_enable(m, 256);
 *   ck_model_embed_tokens(m, prompt, n);                 // then
 *   ck_model_forward(m);                                 // logits of the last position (all: set_logits_all)
 *   ck_model_decode(m, next_token);                      // one step through the cache
 *   ck_model_free(m);
 *
 * `int` results are 0 on success and a negative CK_E* code (ck_errors.h) on
 * failure, with a message from ck_last_error().
 * The handle is not thread-safe: use one handle per thread.
 */
#ifndef CK_MODEL_H
#define CK_MODEL_H

#include <stdint.h>
#include <stddef.h>

#include "ck_errors.h"
#include "ck_tokenizer.h"
#include "ck_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ck_model ck_model;

/* weights_path: a Hugging Face folder (model.safetensors or a sharded
 * model.safetensors.index.json), a .safetensors file, or an *.index.json.
 * Tensors are mapped, validated (present, shape, dtype F32/F16/BF16) and used
 * in place when possible. NULL: the weights compiled into the program (ckc
 * compile --embed-weights FILE), validated the same way; else an error. */
ck_model *ck_model_init(const char *weights_path);
void ck_model_free(ck_model *m);

/* A static build (ckc compile --static --max-tokens N [--kv K]) keeps the model and every buffer (N tokens per
 * call, a KV cache of K positions, the workspace, the RoPE tables) in one block of CK_MODEL_MEMORY_BYTES (a
 * constant of model.c; ck_model_memory_bytes() returns it), and allocates nothing after init. ck_model_init
 * uses a static array of that size (one model at a time); ck_model_init_with_memory the caller's block (at
 * least that many bytes; it must outlive the model). Other builds: ck_model_memory_bytes() is 0 and
 * ck_model_init_with_memory fails with CK_ENOTSUP. */
ck_model *ck_model_init_with_memory(const char *weights_path, void *memory, size_t bytes);
size_t ck_model_memory_bytes(void);

/* Stores the tokens for the next forward (1 <= n_tokens <= ck_model_get_max_tokens: the context length, or a
 * static build's --max-tokens). */
int ck_model_embed_tokens(ck_model *m, const int32_t *tokens, int n_tokens);
/* Runs the embedded tokens. Without the KV cache they are a fresh sequence
 * from position 0; with it they are appended to the cache. */
int ck_model_forward(ck_model *m);
/* [logits_rows][vocab] row-major logits, valid until the next call on the
 * handle: of the last position of the forward or decode (logits_rows 1, the
 * default), or of every position when ck_model_set_logits_all(m, 1) was
 * called (logits_rows == active_tokens). The lm_head GEMM of the positions
 * nobody reads is skipped: most of a short prompt's prefill work for a large
 * vocabulary. */
const float *ck_model_get_logits(const ck_model *m);
int ck_model_get_logits_rows(const ck_model *m);
int ck_model_get_active_tokens(const ck_model *m); /* tokens of the last forward or decode */
int ck_model_set_logits_all(ck_model *m, int on);

/* KV cache, layout [layer][kv_head][capacity][head_dim]; capacity <= context. */
int ck_model_kv_cache_enable(ck_model *m, int capacity);
void ck_model_kv_cache_disable(ck_model *m); /* frees it; forward starts from position 0 again */
void ck_model_kv_cache_reset(ck_model *m);
int ck_model_kv_cache_get_tokens(const ck_model *m);
int ck_model_kv_cache_get_capacity(const ck_model *m); /* 0 when the cache is off */
/* Forgets every cached token from position n_tokens on (0 <= n_tokens <= held): a chat whose new prompt
 * shares only a prefix with the cache reruns the rest. */
int ck_model_kv_cache_truncate(ck_model *m, int n_tokens);
/* One token through the cache; logits in row 0, active_tokens becomes 1. */
int ck_model_decode(ck_model *m, int32_t token);

/* Several sequences in one handle (a serving loop's batch). ck_model_kv_cache_enable_batch gives each of n_seqs
 * sequences `capacity` positions of one cache (n_seqs x capacity rows; the single-sequence calls above are then
 * refused until ck_model_kv_cache_enable). ck_model_batch appends tokens[i] to sequence seqs[i] for i < n, in one
 * pass through the model: the weights are read once for every token, so decoding B sequences in one call costs
 * little more than one. Any mix works: prompts of different lengths (a sequence's tokens in order), one new
 * token per live sequence, both. Logits: one row per sequence in the call, that of its last token, in the order
 * those last tokens appear (a decode step with each sequence once: the call's order). A sequence that stops is
 * forgotten with ck_model_seq_reset, and its positions serve a new prompt. CK_EINVAL for a sequence id outside
 * 0..n_seqs-1, CK_ERANGE when a sequence would outgrow its capacity (nothing is run then). CK_ENOTSUP in a
 * --static or --target gcu build. */
int ck_model_kv_cache_enable_batch(ck_model *m, int capacity, int n_seqs);
int ck_model_batch(ck_model *m, const int32_t *tokens, const int32_t *seqs, int n);
int ck_model_seq_reset(ck_model *m, int seq);
int ck_model_seq_get_tokens(const ck_model *m, int seq); /* positions sequence seq holds */

/* The tokenizer init loaded from beside the weights (tokenizer.json, tokenizer.model, or the GGUF's
 * tokenizer.ggml.* keys; ck_tokenizer.h), or NULL: then get_tokenizer_error says why, and the model still
 * works on token ids. Generation and chat over it: ck_generate.h. */
const ck_tokenizer *ck_model_get_tokenizer(const ck_model *m);
const char *ck_model_get_tokenizer_error(const ck_model *m);

/* Model facts (the compiled constants; m may be NULL). */
int ck_model_get_vocab_size(const ck_model *m);
int ck_model_get_context_length(const ck_model *m);
int ck_model_get_max_tokens(const ck_model *m); /* tokens one embed/forward takes (ck_generate feeds longer prompts in parts) */
int ck_model_get_num_layers(const ck_model *m);
/* Threads used by forward/decode; 0 means all available cores, negative is CK_EINVAL (as ck_graph_set_threads). */
int ck_model_set_threads(ck_model *m, int n_threads);
int ck_model_get_threads(const ck_model *m);

/* Calls fn(user, event) after every node of every forward and decode (ck_trace.h); fn NULL stops.
 * CK_ENOTSUP unless model.c was compiled with -DCK_TRACE. */
int ck_model_set_trace(ck_model *m, ck_trace_fn fn, void *user);

/* ---- training (a model.c from `ckc compile --train`; every other build returns CK_ENOTSUP) ----------
 * enable_training(m, max_tokens) copies the weights into writable float32 memory (a 16-bit checkpoint is
 * trained in float32 from then on; the checkpoint file is closed) and allocates what one step needs at up to max_tokens tokens: every
 * layer's saved activations, the gradient arena and a gradient per parameter. While it is on, forward runs
 * the whole sequence from position 0 and keeps its activations; decode and the KV cache are refused.
 * A step: embed_tokens + forward, backward(targets) (mean cross-entropy over the targets that are not
 * CK_IGNORE_INDEX; gradients are ADDED to the parameters' .grad, as in PyTorch), optimizer_step.
 * disable_training frees all of it but the trained weights, which inference then uses. */
#define CK_IGNORE_INDEX (-100)
int ck_model_enable_training(ck_model *m, int max_tokens);
void ck_model_disable_training(ck_model *m);
int ck_model_is_training(const ck_model *m);
/* targets[n], n == the tokens of the last forward; loss (may be NULL) receives the mean loss. A loss that is
 * NaN or Inf is CK_ERANGE, and nothing is accumulated. */
int ck_model_backward(ck_model *m, const int32_t *targets, int n, float *loss);
int ck_model_zero_grad(ck_model *m);
/* AdamW (torch.optim.AdamW's update, bias-corrected, decoupled weight decay) on every parameter, after
 * clipping the gradients' global norm to clip (clip <= 0: no clipping). A non-finite gradient norm is
 * CK_ERANGE and the step is skipped (weights and optimizer state unchanged). */
int ck_model_optimizer_step(ck_model *m, float lr, float beta1, float beta2, float eps, float weight_decay, float clip);
double ck_model_get_grad_norm(const ck_model *m); /* of the last optimizer_step, before clipping */
/* Weight decay per parameter (by any of its checkpoint names); by default 2-D weights decay, norms and
 * biases (1-D) do not. */
int ck_model_set_weight_decay(ck_model *m, const char *name, int on);
/* The parameters by checkpoint name (Hugging Face names, as saved), index 0 .. count-1. */
int ck_model_get_param_count(const ck_model *m);
const char *ck_model_get_param_name(const ck_model *m, int index);
/* Copies a parameter (get_weight) or its gradient (get_grad) in the checkpoint's layout into out[n];
 * returns its element count (n may be larger; out NULL: only the count), or a negative CK_E* code. */
long ck_model_get_weight(const ck_model *m, const char *name, float *out, long n);
long ck_model_get_grad(const ck_model *m, const char *name, float *out, long n);
/* Writes every parameter as float32 safetensors under its checkpoint name: PATH if it ends in
 * .safetensors, else PATH/model.safetensors (the folder is created). Written to a temporary name and
 * renamed: a failed save leaves no partial file. */
int ck_model_save(const ck_model *m, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* CK_MODEL_H */
