/*
 * tokenizer_impl.h — the tokenizer's insides, shared by its loaders (tokenizer_load.c), the encoder and
 * decoder (tokenizer.c) and the pre-tokenizer rules (pretokenize.c). Not an API.
 */
#ifndef CK_TOKENIZER_IMPL_H
#define CK_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "ck_tokenizer.h"

#ifdef __cplusplus
extern "C" { /* ckc quantize reads the tables (compiler/weights/gguf_tokenizer.cpp) */
#endif

/* ---- normalize.c ---- */
/* NFC of s[0..n) (normalize.c), malloc'd and NUL-terminated; NULL when out of memory */
char *ck_utf8_nfc(const char *s, size_t n, size_t *out_len);

/* ---- pre-tokenizer rules ---- */
typedef enum ck_split_rule {
    CK_SPLIT_GPT2,       /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    CK_SPLIT_LLAMA3,     /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|... */
    CK_SPLIT_QWEN2,      /* the Llama-3 rules with \p{N} one digit at a time */
    CK_SPLIT_DIGITS,     /* each \p{N} on its own (Digits, individual_digits) */
    CK_SPLIT_DIGIT_RUNS, /* runs of \p{N} (Digits, individual_digits false) */
    CK_SPLIT_METASPACE   /* before each U+2581 (Metaspace with split) */
} ck_split_rule;

/* Calls word(user, offset, length) for each piece of s[0..n) in order (pieces cover s exactly). */
typedef int (*ck_piece_fn)(void *user, size_t off, size_t len);
int ck_split(ck_split_rule rule, const unsigned char *s, size_t n, ck_piece_fn fn, void *user);
/* The rule a Split pre-tokenizer's regex is, or -1 when it is none of the known ones. */
int ck_split_rule_for_regex(const char *pattern);

/* ---- the tokenizer ---- */
enum { CK_TOK_BYTE_LEVEL = 1, CK_TOK_CHARS = 2 };       /* BPE over bytes (GPT-2) / over characters (SPM) */
enum { CK_MERGE_RANKS = 1, CK_MERGE_SCORES = 2 };        /* merges list / SentencePiece scores */
enum { CK_NORM_PREPEND = 1, CK_NORM_REPLACE = 2, CK_NORM_SQUEEZE = 3, CK_NORM_NFC = 4 }; /* SQUEEZE: trim, collapse space runs */
enum { CK_TT_NORMAL = 1, CK_TT_UNKNOWN = 2, CK_TT_CONTROL = 3, CK_TT_USER = 4, CK_TT_UNUSED = 5, CK_TT_BYTE = 6 };

#define CK_TOK_MAX_STEPS 8

typedef struct ck_norm_step {
    int kind;
    char *from, *to; /* REPLACE: from -> to; PREPEND: to */
} ck_norm_step;

typedef struct ck_added_token {
    int32_t id;
    char *text;
    size_t len;
    int special, lstrip, rstrip;
} ck_added_token;

typedef struct ck_strmap { /* open addressing: bytes -> int32 */
    uint32_t cap;          /* power of two */
    int32_t *slot;         /* id or -1 */
} ck_strmap;

typedef struct ck_merge_entry {
    uint64_t key; /* (left id << 32) | right id, ~0 empty */
    int32_t rank, id;
} ck_merge_entry;

struct ck_tokenizer {
    char describe[96];
    int kind, merge_mode;
    int32_t n_vocab;
    char **piece;       /* each id's bytes (byte-level: after the byte map; SPM: as spelled, U+2581 kept) */
    uint32_t *piece_len;
    char **text;        /* what each id decodes to (added tokens: their text; <0xXX>: the byte; U+2581: ' ') */
    uint32_t *text_len;
    float *score;       /* CK_MERGE_SCORES */
    unsigned char *type; /* CK_TT_* */
    ck_strmap vocab;    /* piece -> id (pieces of regular tokens; added tokens separately) */
    ck_merge_entry *merges;
    uint32_t merges_cap;
    int32_t byte_id[256]; /* byte-level: the token of each byte; SPM: <0xXX> (byte fallback), -1 none */
    int byte_fallback, ignore_merges, fuse_unk;
    int32_t unk;

    ck_norm_step norm[CK_TOK_MAX_STEPS];
    int n_norm;
    int split[CK_TOK_MAX_STEPS]; /* ck_split_rule, in order */
    int n_split;
    int byte_level_prefix_space; /* ByteLevel add_prefix_space */
    int metaspace;               /* Metaspace pre-tokenizer: ' ' -> U+2581 */
    int metaspace_prepend;       /* 0 never, 1 first, 2 always */

    ck_added_token *added;  /* sorted by length, longest first */
    int n_added;
    int32_t *added_by_id;   /* id -> index in added, or -1 (n_vocab entries) */

    int normalize_first;    /* SentencePiece: normalize the whole text, then match user-defined pieces */
    int decode_strip_space; /* SentencePiece: drop one leading space of the decoded text */
    int decode_metaspace;   /* U+2581 -> ' ' */
    int add_bos, add_eos;
    int32_t bos, eos, eot;
    int32_t eog[8];
    int n_eog;
    char *chat_template;
};

/* building (tokenizer.c) */
ck_tokenizer *ck_tok_new(int32_t n_vocab);
int ck_tok_set_piece(ck_tokenizer *t, int32_t id, const char *bytes, size_t len);
int ck_tok_index(ck_tokenizer *t); /* after every piece is set: the vocab map, byte ids */
int ck_tok_add_norm(ck_tokenizer *t, int kind, const char *from, const char *to); /* CK_ERANGE: too many */
int ck_tok_add_merge(ck_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t merged);
int ck_tok_add_added(ck_tokenizer *t, int32_t id, const char *text, size_t len, int special, int lstrip, int rstrip);
int ck_tok_finish(ck_tokenizer *t); /* sorts added tokens, picks end-of-turn ids */
void ck_tok_add_eog(ck_tokenizer *t, int32_t id); /* another id that ends generation */
int32_t ck_tok_lookup(const ck_tokenizer *t, const char *bytes, size_t len);
/* GPT-2's byte <-> printable character map: the byte a code point stands for, or -1 */
int ck_byte_level_decode_cp(uint32_t cp);
uint32_t ck_byte_level_cp(unsigned char b);

#ifdef __cplusplus
}
#endif
#endif /* CK_TOKENIZER_IMPL_H */
