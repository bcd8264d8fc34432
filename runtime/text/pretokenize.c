/*
 * pretokenize.c — the pre-tokenizers' split rules (over the code points and classes of unicode.c).
 *
 * The byte-level BPE families split text with a regular expression before BPE (GPT-2's, Llama-3's,
 * Qwen2's). Those expressions are fixed strings in the tokenizer files, so each is coded here as the
 * matcher it amounts to (leftmost alternative first, greedy, with the one look-ahead `\s+(?!\S)`), the way
 * llama.cpp's unicode.cpp does: no regex engine at run time, and the same pieces as Hugging Face
 * `tokenizers` (tests/python/test_tokenizer.py checks that on a corpus).
 */
#include <stdlib.h>
#include <string.h>

#include "ck_errors.h"
#include "tokenizer_impl.h"
#include "unicode.h"

/* ---- the rules over decoded code points ---- */

typedef struct cps {
    uint32_t *cp;
    size_t *off; /* byte offset of each code point; off[n] = byte length */
    unsigned char *cls; /* 1 L, 2 N, 3 space, 0 other */
    size_t n;
} cps;

#define IS_L(i) (c->cls[i] == 1)
#define IS_N(i) (c->cls[i] == 2)
#define IS_S(i) (c->cls[i] == 3)
#define IS_NL(i) (c->cp[i] == '\r' || c->cp[i] == '\n')

static uint32_t lower_ascii(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

/* 's 't 're 've 'm 'll 'd at i (i is an apostrophe): the match length, 0 none */
static size_t contraction(const cps *c, size_t i, int fold)
{
    uint32_t a, b;
    if (c->cp[i] != '\'' || i + 1 >= c->n) return 0;
    a = fold ? lower_ascii(c->cp[i + 1]) : c->cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= c->n) return 0;
    b = fold ? lower_ascii(c->cp[i + 2]) : c->cp[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S) then \s+ at i (i is whitespace) */
static size_t spaces(const cps *c, size_t i)
{
    size_t j = i;
    while (j < c->n && IS_S(j)) j++;
    if (j < c->n && j - i > 1) return j - i - 1; /* leave the last one to the next word */
    return j - i;
}

static size_t match_gpt2(const cps *c, size_t i)
{
    size_t j, k = contraction(c, i, 0);
    if (k) return k;
    j = i + (c->cp[i] == ' ' && i + 1 < c->n);
    if (IS_L(j) && (j == i || c->cp[i] == ' ')) {
        while (j < c->n && IS_L(j)) j++;
        return j - i;
    }
    if (IS_N(j)) {
        while (j < c->n && IS_N(j)) j++;
        return j - i;
    }
    if (!IS_S(j) && !IS_L(j) && !IS_N(j)) {
        while (j < c->n && !IS_S(j) && !IS_L(j) && !IS_N(j)) j++;
        return j - i;
    }
    return spaces(c, i);
}

static size_t match_llama3(const cps *c, size_t i, int digits)
{
    size_t j, k = contraction(c, i, 1);
    if (k) return k;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    j = i;
    if (!IS_L(i) && !IS_N(i) && !IS_NL(i) && i + 1 < c->n && IS_L(i + 1)) j = i + 1;
    if (IS_L(j)) {
        while (j < c->n && IS_L(j)) j++;
        return j - i;
    }
    /* \p{N}{1,digits} */
    if (IS_N(i)) {
        for (j = i; j < c->n && j - i < (size_t)digits && IS_N(j); j++) {}
        return j - i;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    j = i + (c->cp[i] == ' ' && i + 1 < c->n);
    if (!IS_S(j) && !IS_L(j) && !IS_N(j)) {
        while (j < c->n && !IS_S(j) && !IS_L(j) && !IS_N(j)) j++;
        while (j < c->n && IS_NL(j)) j++;
        return j - i;
    }
    /* \s*[\r\n]+ : up to the last newline of the whitespace run */
    for (j = i, k = 0; j < c->n && IS_S(j); j++)
        if (IS_NL(j)) k = j + 1;
    if (k) return k - i;
    return spaces(c, i);
}

static int decode_all(const unsigned char *s, size_t n, cps *c)
{
    size_t i = 0, k = 0;
    c->cp = (uint32_t *)malloc((n + 1) * sizeof *c->cp);
    c->off = (size_t *)malloc((n + 1) * sizeof *c->off);
    c->cls = (unsigned char *)malloc(n + 1);
    if (!c->cp || !c->off || !c->cls) return CK_ENOMEM;
    while (i < n) {
        int len;
        uint32_t cp = ck_utf8_decode(s + i, n - i, &len);
        c->cp[k] = cp;
        c->off[k] = i;
        c->cls[k] = (unsigned char)(ck_unicode_is_space(cp) ? 3 : ck_unicode_class(cp));
        k++;
        i += (size_t)len;
    }
    c->off[k] = n;
    c->cp[k] = 0;
    c->cls[k] = 0; /* a sentinel that is no class: matchers may look one past the end */
    c->n = k;
    return 0;
}

int ck_split(ck_split_rule rule, const unsigned char *s, size_t n, ck_piece_fn fn, void *user)
{
    cps c = {0, 0, 0, 0};
    size_t i = 0, len;
    int rc = decode_all(s, n, &c);
    while (rc == 0 && i < c.n) {
        switch (rule) {
        case CK_SPLIT_GPT2: len = match_gpt2(&c, i); break;
        case CK_SPLIT_LLAMA3: len = match_llama3(&c, i, 3); break;
        case CK_SPLIT_QWEN2: len = match_llama3(&c, i, 1); break;
        case CK_SPLIT_DIGITS:
            for (len = 1; !(c.cls[i] == 2) && i + len < c.n && c.cls[i + len] != 2; len++) {}
            break;
        case CK_SPLIT_DIGIT_RUNS: {
            int digit = c.cls[i] == 2;
            for (len = 1; i + len < c.n && (c.cls[i + len] == 2) == digit; len++) {}
            break;
        }
        case CK_SPLIT_METASPACE: /* each piece starts at a U+2581 */
            for (len = 1; i + len < c.n && c.cp[i + len] != 0x2581; len++) {}
            break;
        default: len = c.n - i; break; /* not a ck_split_rule: the rest as one piece */
        }
        if (len == 0) len = 1;
        rc = fn(user, c.off[i], c.off[i + len] - c.off[i]);
        i += len;
    }
    free(c.cp);
    free(c.off);
    free(c.cls);
    return rc;
}

/* The patterns as they appear in the published tokenizer.json files (after JSON unescaping). */
int ck_split_rule_for_regex(const char *p)
{
    static const struct { const char *pattern; int rule; } known[] = {
        {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", CK_SPLIT_GPT2},
        {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", CK_SPLIT_LLAMA3},
        {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", CK_SPLIT_QWEN2},
    };
    size_t i;
    for (i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(p, known[i].pattern) == 0) return known[i].rule;
    return -1;
}
