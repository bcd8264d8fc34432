/*
 * normalize.c — Unicode NFC (Qwen2's normalizer), from the generated tables in unicode_data.h:
 * full canonical decomposition (Hangul computed), canonical ordering by combining class, then canonical
 * composition of the primary composites (UAX #15). Bytes that are not UTF-8 pass through as they are.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "unicode.h"

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28,
       NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

typedef struct cpbuf {
    uint32_t *cp;
    size_t n, cap;
} cpbuf;

static int push(cpbuf *b, uint32_t cp)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        uint32_t *p = (uint32_t *)realloc(b->cp, cap * sizeof *p);
        if (!p) return -1;
        b->cp = p;
        b->cap = cap;
    }
    b->cp[b->n++] = cp;
    return 0;
}

static int decompose(cpbuf *b, uint32_t cp)
{
    uint32_t a, c;
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE, t = s % TCOUNT;
        if (push(b, LBASE + s / NCOUNT) || push(b, VBASE + (s % NCOUNT) / TCOUNT)) return -1;
        return t ? push(b, TBASE + t) : 0;
    }
    if (cp != CK_CP_INVALID && ck_unicode_decompose1(cp, &a, &c)) {
        if (decompose(b, a)) return -1;
        return c ? decompose(b, c) : 0;
    }
    return push(b, cp);
}

static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    return ck_unicode_compose(a, b);
}

char *ck_utf8_nfc(const char *s, size_t n, size_t *out_len)
{
    cpbuf b = {0, 0, 0};
    size_t i = 0, k, w;
    char *out;
    int simple = 1;
    /* below U+0300 every character is already NFC and nothing composes with it: lead bytes < 0xCC */
    for (k = 0; k < n && simple; k++) simple = (unsigned char)s[k] < 0xCC;
    if (simple) {
        out = ck_str_ndup(s, n);
        *out_len = n;
        return out;
    }
    while (i < n) {
        int len;
        uint32_t cp = ck_utf8_decode((const unsigned char *)s + i, n - i, &len);
        if (cp == CK_CP_INVALID) cp = 0x80000000u | (unsigned char)s[i]; /* a raw byte, carried through */
        if (decompose(&b, cp)) goto oom;
        i += (size_t)len;
    }
    /* canonical ordering: a stable sort of each run of non-starters by class */
    for (k = 1; k < b.n; k++) {
        size_t j = k;
        int c = ck_unicode_ccc(b.cp[k]);
        if (!c) continue;
        while (j > 0 && ck_unicode_ccc(b.cp[j - 1]) > c) {
            uint32_t tmp = b.cp[j];
            b.cp[j] = b.cp[j - 1];
            b.cp[j - 1] = tmp;
            j--;
        }
    }
    /* composition */
    if (b.n) {
        size_t starter = 0, o = 1;
        int last = ck_unicode_ccc(b.cp[0]) ? 256 : 0;
        for (k = 1; k < b.n; k++) {
            uint32_t cp = b.cp[k], c;
            int cc = ck_unicode_ccc(cp);
            int blocked = o - 1 != starter && (last == 0 || last >= cc);
            if (!blocked && !(b.cp[starter] & 0x80000000u) && !(cp & 0x80000000u) &&
                (c = compose(b.cp[starter], cp)) != 0) {
                b.cp[starter] = c;
                continue;
            }
            if (cc == 0) starter = o;
            last = cc;
            b.cp[o++] = cp;
        }
        b.n = o;
    }
    out = (char *)malloc(b.n * 4 + 1);
    if (!out) goto oom;
    for (k = 0, w = 0; k < b.n; k++) {
        if (b.cp[k] & 0x80000000u) out[w++] = (char)(b.cp[k] & 0xFF);
        else w += (size_t)ck_utf8_encode(b.cp[k], out + w);
    }
    out[w] = 0;
    *out_len = w;
    free(b.cp);
    return out;
oom:
    free(b.cp);
    return NULL;
}
