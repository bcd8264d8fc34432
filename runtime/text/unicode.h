/*
 * unicode.h — UTF-8, character classes and the NFC tables (unicode.c), for the tokenizer's units and its
 * loaders. Internal to runtime/text (and `ckc quantize`, which writes the tables). Not an API.
 */
#ifndef CK_TEXT_UNICODE_H
#define CK_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CK_CP_INVALID 0xFFFFFFFFu
/* The code point at s[0..n) and its byte length (>= 1); an invalid or truncated sequence is one byte
 * with CK_CP_INVALID. */
uint32_t ck_utf8_decode(const unsigned char *s, size_t n, int *len);
int ck_utf8_encode(uint32_t cp, char *out); /* returns 1..4 */
/* 1: \p{L}, 2: \p{N}, 0: neither */
int ck_unicode_class(uint32_t cp);
int ck_unicode_is_space(uint32_t cp); /* Unicode White_Space, what \s matches */
/* NFC's tables: canonical combining class, one step of canonical decomposition (1 when cp decomposes),
 * the primary composite of a pair (0 when none) */
int ck_unicode_ccc(uint32_t cp);
int ck_unicode_decompose1(uint32_t cp, uint32_t *a, uint32_t *b);
uint32_t ck_unicode_compose(uint32_t a, uint32_t b);
/* s[0..n) as a malloc'd NUL-terminated string; NULL when out of memory */
char *ck_str_ndup(const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* CK_TEXT_UNICODE_H */
