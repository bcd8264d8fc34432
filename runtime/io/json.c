/*
 * json.c — strict recursive-descent JSON parser (RFC 8259), bounded depth.
 * Nodes and strings are carved from a chunked pool owned by the document,
 * so freeing is one walk over the chunks.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_json.h"

#define CK_JSON_MAX_DEPTH 64

typedef struct pool_chunk {
    struct pool_chunk *next;
    size_t used, cap;
    /* data follows, max-aligned */
} pool_chunk;

struct ck_json_doc {
    pool_chunk *chunks;
    ck_json *root;
};

typedef struct parser {
    const char *s;
    size_t len, pos;
    ck_json_doc *doc;
    char *err;
    size_t errlen;
    int failed;
} parser;

static void *pool_alloc(ck_json_doc *doc, size_t n)
{
    pool_chunk *c = doc->chunks;
    size_t hdr = (sizeof(pool_chunk) + 15) / 16 * 16;
    n = (n + 15) / 16 * 16;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = (pool_chunk *)malloc(hdr + cap);
        if (!c) return NULL;
        c->next = doc->chunks;
        c->used = 0;
        c->cap = cap;
        doc->chunks = c;
    }
    c->used += n;
    return (char *)c + hdr + c->used - n;
}

static void fail(parser *p, const char *fmt, ...)
{
    va_list ap;
    char msg[160];
    if (p->failed) return;
    p->failed = 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->err && p->errlen) snprintf(p->err, p->errlen, "JSON error at byte %lu: %s", (unsigned long)p->pos, msg);
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static ck_json *new_node(parser *p, ck_json_type t)
{
    ck_json *n = (ck_json *)pool_alloc(p->doc, sizeof(ck_json));
    if (!n) {
        fail(p, "out of memory");
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->type = t;
    return n;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *p, unsigned *out)
{
    unsigned v = 0;
    int i;
    if (p->len - p->pos < 4) return 0;
    for (i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + i]);
        if (h < 0) return 0;
        v = v * 16 + (unsigned)h;
    }
    p->pos += 4;
    *out = v;
    return 1;
}

/* Parses a string starting at the opening quote; returns a pool copy. */
static char *parse_string(parser *p)
{
    size_t start = p->pos + 1, i;
    char *out, *w;
    /* first pass: find the end and an upper bound of the decoded size */
    for (i = start; i < p->len && p->s[i] != '"'; i++) {
        if ((unsigned char)p->s[i] < 0x20) {
            p->pos = i;
            fail(p, "control character in string");
            return NULL;
        }
        if (p->s[i] == '\\') i++;
    }
    if (i >= p->len) {
        fail(p, "unterminated string");
        return NULL;
    }
    out = (char *)pool_alloc(p->doc, (i - start) * 2 + 1);
    if (!out) {
        fail(p, "out of memory");
        return NULL;
    }
    w = out;
    p->pos = start;
    while (p->s[p->pos] != '"') {
        char c = p->s[p->pos++];
        if (c != '\\') {
            *w++ = c;
            continue;
        }
        c = p->s[p->pos++];
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!read_hex4(p, &cp)) {
                fail(p, "bad \\u escape");
                return NULL;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    fail(p, "unpaired surrogate");
                    return NULL;
                }
                p->pos += 2;
                if (!read_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    fail(p, "bad surrogate pair");
                    return NULL;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) {
                *w++ = (char)cp;
            } else if (cp < 0x800) {
                *w++ = (char)(0xC0 | (cp >> 6));
                *w++ = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *w++ = (char)(0xE0 | (cp >> 12));
                *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *w++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *w++ = (char)(0xF0 | (cp >> 18));
                *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *w++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            p->pos--;
            fail(p, "bad escape '\\%c'", c);
            return NULL;
        }
    }
    *w = '\0';
    p->pos++; /* closing quote */
    return out;
}

static ck_json *parse_value(parser *p, int depth);

static ck_json *parse_number(parser *p)
{
    size_t start = p->pos;
    char buf[64];
    ck_json *n;
    if (p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->len) {
        fail(p, "truncated number");
        return NULL;
    }
    if (p->s[p->pos] == '0') {
        p->pos++;
    } else if (p->s[p->pos] >= '1' && p->s[p->pos] <= '9') {
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    } else {
        fail(p, "bad number");
        return NULL;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9') {
            fail(p, "bad number");
            return NULL;
        }
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9') {
            fail(p, "bad number");
            return NULL;
        }
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos - start >= sizeof buf) {
        fail(p, "number too long");
        return NULL;
    }
    memcpy(buf, p->s + start, p->pos - start);
    buf[p->pos - start] = '\0';
    n = new_node(p, CK_JSON_NUMBER);
    if (n) n->number = strtod(buf, NULL);
    return n;
}

static int match_word(parser *p, const char *w)
{
    size_t n = strlen(w);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0) return 0;
    p->pos += n;
    return 1;
}

static ck_json *parse_container(parser *p, int depth, int is_object)
{
    ck_json *node = new_node(p, is_object ? CK_JSON_OBJECT : CK_JSON_ARRAY), *last = NULL;
    char close = is_object ? '}' : ']';
    if (!node) return NULL;
    p->pos++; /* [ or { */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return node;
    }
    for (;;) {
        char *key = NULL;
        ck_json *v;
        skip_ws(p);
        if (is_object) {
            if (p->pos >= p->len || p->s[p->pos] != '"') {
                fail(p, "expected a string key");
                return NULL;
            }
            key = parse_string(p);
            if (!key) return NULL;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                fail(p, "expected ':'");
                return NULL;
            }
            p->pos++;
        }
        v = parse_value(p, depth + 1);
        if (!v) return NULL;
        v->key = key;
        if (last) last->next = v;
        else node->child = v;
        last = v;
        node->count++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return node;
        }
        fail(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
        return NULL;
    }
}

static ck_json *parse_value(parser *p, int depth)
{
    ck_json *n;
    if (depth > CK_JSON_MAX_DEPTH) {
        fail(p, "nesting deeper than %d", CK_JSON_MAX_DEPTH);
        return NULL;
    }
    skip_ws(p);
    if (p->pos >= p->len) {
        fail(p, "unexpected end of input");
        return NULL;
    }
    switch (p->s[p->pos]) {
    case '{': return parse_container(p, depth, 1);
    case '[': return parse_container(p, depth, 0);
    case '"': {
        char *s = parse_string(p);
        if (!s) return NULL;
        n = new_node(p, CK_JSON_STRING);
        if (n) n->string = s;
        return n;
    }
    case 't':
    case 'f': {
        int value = p->s[p->pos] == 't';
        if (match_word(p, value ? "true" : "false")) {
            n = new_node(p, CK_JSON_BOOL);
            if (n) n->boolean = value;
            return n;
        }
        break;
    }
    case 'n':
        if (match_word(p, "null")) return new_node(p, CK_JSON_NULL);
        break;
    default:
        if (p->s[p->pos] == '-' || (p->s[p->pos] >= '0' && p->s[p->pos] <= '9')) return parse_number(p);
    }
    fail(p, "unexpected character '%c'", p->s[p->pos]);
    return NULL;
}

ck_json_doc *ck_json_parse(const char *text, size_t len, char *err, size_t errlen)
{
    parser p;
    ck_json_doc *doc = (ck_json_doc *)calloc(1, sizeof *doc);
    if (!doc) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memset(&p, 0, sizeof p);
    p.s = text;
    p.len = len;
    p.doc = doc;
    p.err = err;
    p.errlen = errlen;
    doc->root = parse_value(&p, 0);
    if (doc->root) {
        skip_ws(&p);
        if (p.pos != p.len) fail(&p, "trailing characters after the document");
    }
    if (p.failed || !doc->root) {
        ck_json_free(doc);
        return NULL;
    }
    return doc;
}

const ck_json *ck_json_root(const ck_json_doc *doc) { return doc ? doc->root : NULL; }

void ck_json_free(ck_json_doc *doc)
{
    pool_chunk *c;
    if (!doc) return;
    c = doc->chunks;
    while (c) {
        pool_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(doc);
}

const ck_json *ck_json_get(const ck_json *obj, const char *key)
{
    const ck_json *c;
    if (!obj || obj->type != CK_JSON_OBJECT) return NULL;
    for (c = obj->child; c; c = c->next)
        if (c->key && strcmp(c->key, key) == 0) return c;
    return NULL;
}
