/*
 * libFuzzer target: encode / decode / streaming decode of arbitrary bytes with real tokenizers (the families'
 * settings, trained by tests/python/tokenizer_cases.py; paths in $CK_FUZZ_TOKENIZERS, colon-separated).
 * Checks: no crash or sanitizer report; every id in range; a byte-level tokenizer without a normalizer gives
 * the input back exactly; the streaming decoder only ever writes valid UTF-8.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir, getpid */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_tokenizer.h"

#define MAX_TOK 8
static ck_tokenizer *toks[MAX_TOK];
static int exact[MAX_TOK]; /* decode(encode(x)) == x for any bytes */
static int n_toks;

static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0, k, need;
    while (i < n) {
        unsigned char c = s[i];
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) need = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) need = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) need = 3, cp = c & 0x07;
        else return 0;
        if (i + need >= n) return 0;
        for (k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += need + 1;
    }
    return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *env = getenv("CK_FUZZ_TOKENIZERS");
    char *list, *p;
    (void)argc;
    (void)argv;
    if (!env) {
        fprintf(stderr, "fuzz_tokenizer_encode: set CK_FUZZ_TOKENIZERS=path[:path...]\n");
        exit(2);
    }
    list = strdup(env);
    for (p = strtok(list, ":"); p && n_toks < MAX_TOK; p = strtok(NULL, ":")) {
        char err[256];
        ck_tokenizer *t = ck_tokenizer_load(p, err, sizeof err);
        if (!t) {
            fprintf(stderr, "fuzz_tokenizer_encode: %s\n", err);
            exit(2);
        }
        exact[n_toks] = strstr(ck_tokenizer_describe(t), "byte-level") != NULL && strstr(p, "qwen2") == NULL;
        toks[n_toks++] = t;
    }
    free(list);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int k;
    for (k = 0; k < n_toks; k++) {
        const ck_tokenizer *t = toks[k];
        long n = ck_tokenizer_encode(t, (const char *)data, size, 1, NULL, 0), i, m;
        int32_t *ids;
        char *text;
        ck_token_stream st;
        char piece[64];
        if (n < 0) abort();
        ids = (int32_t *)malloc(sizeof *ids * (size_t)(n + 1));
        if (ck_tokenizer_encode(t, (const char *)data, size, exact[k] ? 0 : 1, ids, n) > n) abort();
        if (exact[k]) n = ck_tokenizer_encode(t, (const char *)data, size, 0, ids, n);
        for (i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= ck_tokenizer_vocab_size(t)) abort();
        m = ck_tokenizer_decode(t, ids, n, 0, NULL, 0);
        text = (char *)malloc((size_t)m + 1);
        if (ck_tokenizer_decode(t, ids, n, 0, text, m + 1) != m) abort();
        if (exact[k] && (m != (long)size || memcmp(text, data, size) != 0)) abort();
        ck_token_stream_reset(&st);
        for (i = 0; i < n; i++) {
            long w = ck_token_stream_push(t, &st, ids[i], 0, piece, sizeof piece);
            if (w < 0 || w >= (long)sizeof piece) continue; /* a long piece: not consumed, nothing to check */
            if (!valid_utf8((const unsigned char *)piece, (size_t)w)) abort();
        }
        free(text);
        free(ids);
    }
    return 0;
}
