/*
 * pretokenize.c — UTF-8, character classes, and the pre-tokenizers' split rules.
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
#include "unicode_data.h"

uint32_t ck_utf8_decode(const unsigned char *s, size_t n, int *len)
{
    uint32_t cp;
    int need, i;
    unsigned char c = s[0];
    *len = 1;
    if (c < 0x80) return c;
    if (c >= 0xC2 && c <= 0xDF) need = 1, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, cp = c & 0x07;
    else return CK_CP_INVALID;
    if ((size_t)need >= n) return CK_CP_INVALID;
    for (i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) return CK_CP_INVALID;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* overlong, surrogates, beyond U+10FFFF */
    if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return CK_CP_INVALID;
    *len = need + 1;
    return cp;
}

int ck_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int ck_unicode_class(uint32_t cp)
{
    size_t lo = 0, hi = sizeof ck_unicode_ranges / sizeof ck_unicode_ranges[0];
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return 1;
        return cp >= '0' && cp <= '9' ? 2 : 0;
    }
    if (cp == CK_CP_INVALID) return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < ck_unicode_ranges[mid].first) hi = mid;
        else if (cp > ck_unicode_ranges[mid].last) lo = mid + 1;
        else return ck_unicode_ranges[mid].cls;
    }
    return 0;
}

int ck_unicode_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

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
        default: /* CK_SPLIT_METASPACE: each piece starts at a U+2581 */
            for (len = 1; i + len < c.n && c.cp[i + len] != 0x2581; len++) {}
            break;
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

/* ---- the NFC tables' lookups (normalize.c) ---- */

int ck_unicode_ccc(uint32_t cp)
{
    size_t lo = 0, hi = sizeof ck_unicode_ccc_ranges / sizeof ck_unicode_ccc_ranges[0];
    if (cp < 0x300 || cp == CK_CP_INVALID) return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < ck_unicode_ccc_ranges[mid].first) hi = mid;
        else if (cp > ck_unicode_ccc_ranges[mid].last) lo = mid + 1;
        else return ck_unicode_ccc_ranges[mid].ccc;
    }
    return 0;
}

int ck_unicode_decompose1(uint32_t cp, uint32_t *a, uint32_t *b)
{
    size_t lo = 0, hi = sizeof ck_unicode_decomp / sizeof ck_unicode_decomp[0];
    if (cp < 0xC0) return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < ck_unicode_decomp[mid].cp) hi = mid;
        else if (cp > ck_unicode_decomp[mid].cp) lo = mid + 1;
        else {
            *a = ck_unicode_decomp[mid].a;
            *b = ck_unicode_decomp[mid].b;
            return 1;
        }
    }
    return 0;
}

uint32_t ck_unicode_compose(uint32_t a, uint32_t b)
{
    size_t lo = 0, hi = sizeof ck_unicode_comp / sizeof ck_unicode_comp[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a < ck_unicode_comp[mid].a || (a == ck_unicode_comp[mid].a && b < ck_unicode_comp[mid].b)) hi = mid;
        else if (a > ck_unicode_comp[mid].a || b > ck_unicode_comp[mid].b) lo = mid + 1;
        else return ck_unicode_comp[mid].cp;
    }
    return 0;
}
