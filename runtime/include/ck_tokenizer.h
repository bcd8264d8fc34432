/*
 * ck_tokenizer.h — text to token ids and back, in plain C99 (runtime/text/).
 *
 *   char err[256];
 *   ck_tokenizer *t = ck_tokenizer_load("path/to/hf-folder", err, sizeof err);   // or a .gguf file
 *   int32_t ids[512];
 *   long n = ck_tokenizer_encode(t, text, strlen(text), 1, ids, 512);             // 1: BOS/EOS as configured
 *   char out[4096];
 *   ck_tokenizer_decode(t, ids, n, 0, out, sizeof out);
 *   ck_tokenizer_free(t);
 *
 * What it reads:
 *   - tokenizer.json (Hugging Face `tokenizers`): a BPE model (merges; byte_fallback, ignore_merges, unk),
 *     added tokens (matched before anything else, leftmost-longest, with lstrip/rstrip), the normalizers
 *     Prepend / Replace (literal) / Sequence, the pre-tokenizers ByteLevel, Split with the GPT-2, Llama-3
 *     and Qwen2 patterns (the rules are coded, not interpreted by a regex engine), Digits, Metaspace and
 *     Sequence, the decoders ByteLevel / Replace / ByteFallback / Fuse / Strip / Metaspace, and the BOS/EOS
 *     of a TemplateProcessing post-processor. tokenizer_config.json beside it gives the chat template and
 *     the end-of-turn token.
 *   - tokenizer.model (SentencePiece, where there is no tokenizer.json): BPE pieces, scores and byte
 *     fallback.
 *   - GGUF metadata (tokenizer.ggml.*): "gpt2" (byte-level BPE with merges; the pre-tokenizer from
 *     tokenizer.ggml.pre) and "llama" (SentencePiece BPE by scores).
 * Anything else is an error that names the file and the key.
 *
 * Text is UTF-8; bytes that are not valid UTF-8 are tokenized as bytes (byte-level BPE, byte fallback),
 * never rejected. decode returns the exact bytes the tokens stand for, so decode(encode(x)) == x wherever
 * the tokenizer round-trips. \p{L} / \p{N} come from a generated table (CK_UNICODE_VERSION).
 *
 * A tokenizer is read-only after load: one may be shared by threads.
 */
#ifndef CK_TOKENIZER_H
#define CK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ck_tokenizer ck_tokenizer;

/* Limits the loaders check before they allocate (a file from a stranger cannot make them allocate more):
 * a vocabulary has at most CK_TOKENIZER_MAX_VOCAB ids, and a tokenizer.json's largest id is at most twice its
 * number of pieces plus CK_TOKENIZER_MAX_ID_GAP (ids are dense in real vocabularies). */
#define CK_TOKENIZER_MAX_VOCAB (1 << 24)
#define CK_TOKENIZER_MAX_ID_GAP 65536

/* path: a model folder (tokenizer.json, else tokenizer.model), one of those files, or a .gguf file.
 * NULL on failure, with the reason (naming the file and key) in err. */
ck_tokenizer *ck_tokenizer_load(const char *path, char *err, size_t errlen);
/* The tokenizer of an open GGUF checkpoint's metadata (ck_checkpoint.h; weights compiled into the program),
 * `name` the file in messages. */
struct ck_checkpoint;
ck_tokenizer *ck_tokenizer_load_gguf_metadata(const struct ck_checkpoint *ck, const char *name, char *err,
                                              size_t errlen);
void ck_tokenizer_free(ck_tokenizer *t);

int ck_tokenizer_vocab_size(const ck_tokenizer *t);

/* text[0..len) to ids. add_special: add the BOS / EOS the tokenizer's configuration adds (what Hugging
 * Face's tok(text) does). Special tokens written in the text are matched. Returns the number of ids, of
 * which at most cap are written (cap 0: only count), or a negative CK_E* code (CK_ENOMEM). */
long ck_tokenizer_encode(const ck_tokenizer *t, const char *text, size_t len, int add_special, int32_t *ids,
                         long cap);

/* ids to text: the bytes the tokens stand for (special tokens as their text unless skip_special), after
 * the decoder's rules (e.g. SentencePiece's leading space is dropped). Returns the byte count, of which at
 * most cap - 1 are written and NUL-terminated (cap 0: only count). Ids outside the vocabulary (the padded
 * rows of a model whose vocab_size exceeds its tokenizer's) stand for nothing, as in Hugging Face tokenizers. */
long ck_tokenizer_decode(const ck_tokenizer *t, const int32_t *ids, long n, int skip_special, char *out, long cap);

/* The bytes one token stands for (not NUL-terminated; may be part of a UTF-8 character), or NULL. */
const char *ck_tokenizer_piece(const ck_tokenizer *t, int32_t id, size_t *len);
int ck_tokenizer_is_special(const ck_tokenizer *t, int32_t id);
/* An id by its text (a vocabulary entry or an added token, as the files spell it), or -1. */
int32_t ck_tokenizer_find(const ck_tokenizer *t, const char *text);

/* -1 when the tokenizer has none. end-of-turn: the chat format's (<|im_end|>, <|eot_id|>, <end_of_turn>,
 * <|end|>), else EOS. */
int32_t ck_tokenizer_bos(const ck_tokenizer *t);
int32_t ck_tokenizer_eos(const ck_tokenizer *t);
int32_t ck_tokenizer_eot(const ck_tokenizer *t);
/* 1 when generation should stop at id: EOS, end-of-turn, or another end id the configuration lists. */
int ck_tokenizer_is_eog(const ck_tokenizer *t, int32_t id);
/* The Jinja chat template of the model (tokenizer_config.json or tokenizer.chat_template), or NULL. */
const char *ck_tokenizer_chat_template(const ck_tokenizer *t);
/* "byte-level BPE (gpt2)" and the like, for messages. */
const char *ck_tokenizer_describe(const ck_tokenizer *t);

/* Streaming decode: feed ids one at a time and get only whole UTF-8 characters; a character split across
 * tokens comes out with its last byte. Bytes that can never form a character come out as U+FFFD.
 * Zero-initialise (or ck_token_stream_reset) before the first token. */
typedef struct ck_token_stream {
    unsigned char pending[4];
    int npending;
    int started; /* a token was emitted (SentencePiece drops the first leading space) */
} ck_token_stream;

void ck_token_stream_reset(ck_token_stream *s);
/* Appends the text that id completes to out (at most cap bytes, NUL-terminated when room; cap >= 16 is
 * always enough for one token's worth of pending bytes plus a replacement). Returns the bytes written, or
 * the bytes needed when cap is too small (nothing is consumed then), or CK_EINVAL. An id outside the
 * vocabulary writes nothing. */
long ck_token_stream_push(const ck_tokenizer *t, ck_token_stream *s, int32_t id, int skip_special, char *out,
                          long cap);
/* Whatever is still pending at the end of generation (as U+FFFD). */
long ck_token_stream_flush(ck_token_stream *s, char *out, long cap);

#ifdef __cplusplus
}
#endif
#endif /* CK_TOKENIZER_H */
