/*
 * libFuzzer target: chat templates (runtime/text/chat.c). The input, split at NUL bytes, is a template text (a
 * tokenizer_config.json's chat_template comes from the model's uploader), then role / content pairs. Checks: no
 * crash or sanitizer report; a render into a small buffer gives the same count as into one large enough, and
 * both are NUL-terminated; a refusal says why. Seeds: the families' real templates (tests/fuzz/seeds.py).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir, getpid */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_errors.h"
#include "ck_generate.h"

#define MAX_PARTS 17

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = (char *)malloc(size + 1), *parts[MAX_PARTS], small[32], err[256];
    ck_chat_message msgs[MAX_PARTS / 2];
    int n_parts = 0, n, gen;
    size_t i, start = 0;
    long a, b;
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    for (i = 0; i <= size && n_parts < MAX_PARTS; i++)
        if (i == size || text[i] == 0) {
            text[i] = 0;
            parts[n_parts++] = text + start;
            start = i + 1;
        }
    n = (n_parts - 1) / 2;
    for (i = 0; i < (size_t)n; i++) msgs[i].role = parts[1 + 2 * i], msgs[i].content = parts[2 + 2 * i];
    gen = size > 0 && (data[size - 1] & 1);
    (void)ck_chat_format_name(parts[0]);
    err[0] = 0;
    a = ck_chat_render(parts[0], msgs, n, gen, "<s>", "</s>", small, sizeof small, err, sizeof err);
    if (a < 0) {
        if (!err[0]) abort();
    } else {
        char *big = (char *)malloc((size_t)a + 1);
        if (strlen(small) != (size_t)(a < (long)sizeof small ? a : (long)sizeof small - 1)) abort();
        if (big) {
            b = ck_chat_render(parts[0], msgs, n, gen, "<s>", "</s>", big, a + 1, err, sizeof err);
            if (b != a || strlen(big) != (size_t)a || strncmp(big, small, sizeof small - 1) != 0) abort();
            free(big);
        }
    }
    free(text);
    return 0;
}
