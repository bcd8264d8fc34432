/*
 * tokenizer_load.c — fills a ck_tokenizer from tokenizer.json (+ tokenizer_config.json,
 * generation_config.json), from a SentencePiece tokenizer.model, or from GGUF metadata. Every refusal names
 * the file and the key.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_errors.h"
#include "ck_json.h"
#include "ck_checkpoint.h"
#include "tokenizer_impl.h"
#include "unicode.h"

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- GPT-2's byte <-> character map ---- */
static int printable_byte(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint32_t ck_byte_level_cp(unsigned char b)
{
    int i, n = 0;
    if (printable_byte(b)) return b;
    for (i = 0; i < b; i++) n += !printable_byte(i);
    return 256u + (uint32_t)n;
}

int ck_byte_level_decode_cp(uint32_t cp)
{
    static int table[324];
    static int ready;
    if (!ready) { /* races only write the same values */
        int b;
        for (b = 0; b < 324; b++) table[b] = -1;
        for (b = 0; b < 256; b++) table[ck_byte_level_cp((unsigned char)b)] = b;
        ready = 1;
    }
    return cp < 324 ? table[cp] : -1;
}

/* the raw bytes a byte-level piece spells; -1 if it is not one (a character outside the map) */
static long byte_level_bytes(const char *s, size_t n, char *out)
{
    size_t i = 0;
    long k = 0;
    while (i < n) {
        int len, b;
        uint32_t cp = ck_utf8_decode((const unsigned char *)s + i, n - i, &len);
        b = ck_byte_level_decode_cp(cp);
        if (b < 0) return -1;
        out[k++] = (char)b;
        i += (size_t)len;
    }
    return k;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *p = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        p = (char *)malloc((size_t)n + 1);
        if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
            free(p);
            p = NULL;
        }
        if (p) {
            p[n] = 0;
            *len = (size_t)n;
        }
    }
    fclose(f);
    return p;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static const char *jstr(const ck_json *o, const char *key)
{
    const ck_json *v = o ? ck_json_get(o, key) : NULL;
    return v && v->type == CK_JSON_STRING ? v->string : NULL;
}

static int jbool(const ck_json *o, const char *key, int dflt)
{
    const ck_json *v = o ? ck_json_get(o, key) : NULL;
    return v && v->type == CK_JSON_BOOL ? v->boolean : dflt;
}

/* ---- tokenizer.json --------------------------------------------------------------------------------- */

typedef struct jload {
    ck_tokenizer *t;
    const char *file;
    char *err;
    size_t errlen;
} jload;

static int bad(jload *L, const char *key, const char *what)
{
    seterr(L->err, L->errlen, "%s: %s: %s", L->file, key, what);
    return CK_EFORMAT;
}

typedef int (*jload_fn)(jload *L, const ck_json *node);

/* a Sequence: each member in order */
static int load_each(jload *L, const ck_json *list, const char *key, jload_fn fn)
{
    const ck_json *c;
    int rc;
    if (!list || list->type != CK_JSON_ARRAY) return bad(L, key, "not an array");
    for (c = list->child; c; c = c->next)
        if ((rc = fn(L, c))) return rc;
    return 0;
}

static int add_norm(jload *L, int kind, const char *from, const char *to, const char *key)
{
    int rc = ck_tok_add_norm(L->t, kind, from, to);
    return rc == CK_ERANGE ? bad(L, key, "more normalizer steps than supported") : rc;
}

static int load_normalizer(jload *L, const ck_json *n)
{
    const char *type;
    if (!n || n->type == CK_JSON_NULL) return 0;
    type = jstr(n, "type");
    if (!type) return bad(L, "normalizer.type", "missing");
    if (strcmp(type, "Sequence") == 0)
        return load_each(L, ck_json_get(n, "normalizers"), "normalizer.normalizers", load_normalizer);
    if (strcmp(type, "Prepend") == 0) {
        const char *p = jstr(n, "prepend");
        if (!p) return bad(L, "normalizer.prepend", "missing");
        return add_norm(L, CK_NORM_PREPEND, NULL, p, "normalizer");
    }
    if (strcmp(type, "Replace") == 0) {
        const ck_json *pat = ck_json_get(n, "pattern");
        const char *from = jstr(pat, "String"), *to = jstr(n, "content");
        if (!from || !to) return bad(L, "normalizer.Replace", "only a literal String pattern and a content are supported");
        return add_norm(L, CK_NORM_REPLACE, from, to, "normalizer");
    }
    if (strcmp(type, "NFC") == 0) return add_norm(L, CK_NORM_NFC, NULL, "", "normalizer");
    {
        char what[96];
        snprintf(what, sizeof what, "normalizer \"%s\" is not supported", type);
        return bad(L, "normalizer.type", what);
    }
}

static int add_split(jload *L, int rule, const char *key)
{
    if (L->t->n_split == CK_TOK_MAX_STEPS) return bad(L, key, "more pre-tokenizer steps than supported");
    L->t->split[L->t->n_split++] = rule;
    return 0;
}

static int load_pretokenizer(jload *L, const ck_json *p)
{
    const char *type;
    ck_tokenizer *t = L->t;
    if (!p || p->type == CK_JSON_NULL) return 0;
    type = jstr(p, "type");
    if (!type) return bad(L, "pre_tokenizer.type", "missing");
    if (strcmp(type, "Sequence") == 0)
        return load_each(L, ck_json_get(p, "pretokenizers"), "pre_tokenizer.pretokenizers", load_pretokenizer);
    if (strcmp(type, "ByteLevel") == 0) {
        t->kind = CK_TOK_BYTE_LEVEL;
        t->byte_level_prefix_space = jbool(p, "add_prefix_space", 0);
        return jbool(p, "use_regex", 1) ? add_split(L, CK_SPLIT_GPT2, "pre_tokenizer") : 0;
    }
    if (strcmp(type, "Split") == 0) {
        const ck_json *pat = ck_json_get(p, "pattern");
        const char *re = jstr(pat, "Regex"), *behavior = jstr(p, "behavior");
        int rule = re ? ck_split_rule_for_regex(re) : -1;
        if (rule < 0) {
            char what[200];
            snprintf(what, sizeof what, "the pattern %.120s is not one ckc knows (GPT-2, Llama-3, Qwen2)",
                     re ? re : "(not a Regex)");
            return bad(L, "pre_tokenizer.Split.pattern", what);
        }
        if (!behavior || strcmp(behavior, "Isolated") != 0 || jbool(p, "invert", 0))
            return bad(L, "pre_tokenizer.Split.behavior", "only Isolated, not inverted, is supported");
        return add_split(L, rule, "pre_tokenizer");
    }
    if (strcmp(type, "Digits") == 0)
        return add_split(L, jbool(p, "individual_digits", 0) ? CK_SPLIT_DIGITS : CK_SPLIT_DIGIT_RUNS, "pre_tokenizer");
    if (strcmp(type, "Metaspace") == 0) {
        const char *rep = jstr(p, "replacement"), *scheme = jstr(p, "prepend_scheme");
        if (rep && strcmp(rep, "\xE2\x96\x81") != 0) return bad(L, "pre_tokenizer.Metaspace.replacement", "only U+2581 is supported");
        t->metaspace = 1;
        t->metaspace_prepend = scheme ? (strcmp(scheme, "always") == 0 ? 2 : strcmp(scheme, "first") == 0 ? 1 : 0)
                                      : jbool(p, "add_prefix_space", 1) ? 2 : 0;
        return jbool(p, "split", 1) ? add_split(L, CK_SPLIT_METASPACE, "pre_tokenizer") : 0;
    }
    {
        char what[96];
        snprintf(what, sizeof what, "pre-tokenizer \"%s\" is not supported", type);
        return bad(L, "pre_tokenizer.type", what);
    }
}

static int load_decoder(jload *L, const ck_json *d)
{
    const char *type;
    ck_tokenizer *t = L->t;
    if (!d || d->type == CK_JSON_NULL) return 0;
    type = jstr(d, "type");
    if (!type) return bad(L, "decoder.type", "missing");
    if (strcmp(type, "Sequence") == 0)
        return load_each(L, ck_json_get(d, "decoders"), "decoder.decoders", load_decoder);
    if (strcmp(type, "Replace") == 0) {
        const char *from = jstr(ck_json_get(d, "pattern"), "String"), *to = jstr(d, "content");
        if (from && to && strcmp(from, "\xE2\x96\x81") == 0 && strcmp(to, " ") == 0) {
            t->decode_metaspace = 1;
            return 0;
        }
        return bad(L, "decoder.Replace", "only U+2581 -> ' ' is supported");
    }
    if (strcmp(type, "Strip") == 0) {
        const char *content = jstr(d, "content");
        const ck_json *start = ck_json_get(d, "start");
        if (content && strcmp(content, " ") == 0 && start && start->type == CK_JSON_NUMBER && start->number == 1) {
            t->decode_strip_space = 1;
            return 0;
        }
        return bad(L, "decoder.Strip", "only stripping one leading space is supported");
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *scheme = jstr(d, "prepend_scheme");
        t->decode_metaspace = 1;
        t->decode_strip_space = scheme ? strcmp(scheme, "never") != 0 : jbool(d, "add_prefix_space", 1);
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0 || strcmp(type, "ByteFallback") == 0 || strcmp(type, "Fuse") == 0) return 0;
    {
        char what[96];
        snprintf(what, sizeof what, "decoder \"%s\" is not supported", type);
        return bad(L, "decoder.type", what);
    }
}

/* TemplateProcessing: the special tokens around $A */
static int load_post(jload *L, const ck_json *p)
{
    const char *type;
    ck_tokenizer *t = L->t;
    if (!p || p->type == CK_JSON_NULL) return 0;
    type = jstr(p, "type");
    if (!type) return bad(L, "post_processor.type", "missing");
    if (strcmp(type, "Sequence") == 0)
        return load_each(L, ck_json_get(p, "processors"), "post_processor.processors", load_post);
    if (strcmp(type, "TemplateProcessing") == 0) {
        const ck_json *single = ck_json_get(p, "single"), *item;
        int seen_a = 0;
        if (!single || single->type != CK_JSON_ARRAY) return bad(L, "post_processor.single", "not an array");
        for (item = single->child; item; item = item->next) {
            const ck_json *sp = ck_json_get(item, "SpecialToken");
            if (ck_json_get(item, "Sequence")) {
                seen_a = 1;
            } else if (sp) {
                const char *name = jstr(sp, "id");
                int32_t id = name ? ck_tokenizer_find(t, name) : -1;
                if (id < 0) return bad(L, "post_processor.single", "names a special token that is not in the vocabulary");
                if (!seen_a) t->add_bos = 1, t->bos = id;
                else t->add_eos = 1, t->eos = id;
            }
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) return 0;
    {
        char what[96];
        snprintf(what, sizeof what, "post-processor \"%s\" is not supported", type);
        return bad(L, "post_processor.type", what);
    }
}

static int32_t json_id(const ck_json *v)
{
    if (!v || v->type != CK_JSON_NUMBER || v->number < 0 || v->number > 2e9 || v->number != (double)(int32_t)v->number)
        return -1;
    return (int32_t)v->number;
}

/* a piece as the vocabulary spells it, in the tokenizer's internal form (byte-level: raw bytes) */
static long internal_piece(const ck_tokenizer *t, const char *s, size_t n, char *out)
{
    if (t->kind == CK_TOK_BYTE_LEVEL) return byte_level_bytes(s, n, out);
    memcpy(out, s, n);
    return (long)n;
}

static int load_bpe(jload *L, const ck_json *model)
{
    ck_tokenizer *t = L->t;
    const ck_json *vocab = ck_json_get(model, "vocab"), *merges = ck_json_get(model, "merges"), *m;
    char *tmp = NULL;
    size_t tmp_cap = 0;
    int32_t rank = 0;
    int rc = 0;
    const char *unk = jstr(model, "unk_token");
    if (jstr(model, "continuing_subword_prefix") || jstr(model, "end_of_word_suffix"))
        return bad(L, "model.continuing_subword_prefix", "subword prefixes / suffixes are not supported");
    for (m = vocab->child; m; m = m->next) {
        size_t n = strlen(m->key);
        long k;
        int32_t id = json_id(m);
        if (id < 0 || id >= t->n_vocab) {
            rc = bad(L, "model.vocab", "an id is not a non-negative integer");
            break;
        }
        if (t->piece[id]) { /* two pieces, one id: which one an id decodes to would be a guess */
            char what[160];
            snprintf(what, sizeof what, "id %ld is given to two pieces (\"%.40s\" and another)", (long)id, m->key);
            rc = bad(L, "model.vocab", what);
            break;
        }
        if (n + 1 > tmp_cap) {
            free(tmp);
            tmp_cap = 2 * n + 64;
            if (!(tmp = (char *)malloc(tmp_cap))) { rc = CK_ENOMEM; break; }
        }
        k = internal_piece(t, m->key, n, tmp);
        if (k < 0) k = (long)n, memcpy(tmp, m->key, n); /* not a byte-level spelling: kept as is */
        if ((rc = ck_tok_set_piece(t, id, tmp, (size_t)k))) break;
    }
    if (!rc && unk) t->unk = -2; /* resolved after indexing */
    if (!rc) rc = ck_tok_index(t);
    if (!rc && unk) t->unk = ck_tok_lookup(t, unk, strlen(unk));
    for (m = merges ? merges->child : NULL; m && !rc; m = m->next, rank++) {
        const char *a, *b;
        size_t la, lb;
        char *sp = NULL;
        long ka, kb;
        int32_t ia, ib, im;
        if (m->type == CK_JSON_STRING) {
            sp = strchr(m->string, ' ');
            if (!sp) { rc = bad(L, "model.merges", "an entry is not \"left right\""); break; }
            a = m->string, la = (size_t)(sp - m->string), b = sp + 1, lb = strlen(sp + 1);
        } else if (m->type == CK_JSON_ARRAY && m->count == 2 && m->child->type == CK_JSON_STRING &&
                   m->child->next->type == CK_JSON_STRING) {
            a = m->child->string, la = strlen(a), b = m->child->next->string, lb = strlen(b);
        } else {
            rc = bad(L, "model.merges", "an entry is neither \"left right\" nor [left, right]");
            break;
        }
        if (la + lb + 1 > tmp_cap) {
            free(tmp);
            tmp_cap = 2 * (la + lb) + 64;
            if (!(tmp = (char *)malloc(tmp_cap))) { rc = CK_ENOMEM; break; }
        }
        ka = internal_piece(t, a, la, tmp);
        if (ka < 0) ka = (long)la, memcpy(tmp, a, la);
        kb = internal_piece(t, b, lb, tmp + ka);
        if (kb < 0) kb = (long)lb, memcpy(tmp + ka, b, lb);
        ia = ck_tok_lookup(t, tmp, (size_t)ka);
        ib = ck_tok_lookup(t, tmp + ka, (size_t)kb);
        im = ck_tok_lookup(t, tmp, (size_t)(ka + kb));
        if (ia < 0 || ib < 0 || im < 0) {
            char what[160];
            snprintf(what, sizeof what, "merge %ld (\"%.40s\" + \"%.40s\") names a piece that is not in the vocabulary",
                     (long)rank, a, b);
            rc = bad(L, "model.merges", what);
            break;
        }
        rc = ck_tok_add_merge(t, ia, ib, rank, im);
    }
    free(tmp);
    return rc;
}

static void load_config_files(ck_tokenizer *t, const char *dir)
{
    char path[4096];
    char *text;
    size_t len;
    ck_json_doc *doc;
    char err[64];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if ((text = slurp(path, &len)) != NULL) {
        if ((doc = ck_json_parse(text, len, err, sizeof err)) != NULL) {
            const ck_json *root = ck_json_root(doc), *ct = ck_json_get(root, "chat_template"), *eos, *bos;
            if (ct && ct->type == CK_JSON_STRING) {
                t->chat_template = ck_str_ndup(ct->string, strlen(ct->string));
            } else if (ct && ct->type == CK_JSON_ARRAY) {
                const ck_json *c;
                for (c = ct->child; c; c = c->next)
                    if (jstr(c, "name") && strcmp(jstr(c, "name"), "default") == 0 && jstr(c, "template"))
                        t->chat_template = ck_str_ndup(jstr(c, "template"), strlen(jstr(c, "template")));
            }
            eos = ck_json_get(root, "eos_token");
            if (eos && eos->type == CK_JSON_OBJECT) eos = ck_json_get(eos, "content");
            if (eos && eos->type == CK_JSON_STRING && t->eos < 0) t->eos = ck_tokenizer_find(t, eos->string);
            bos = ck_json_get(root, "bos_token");
            if (bos && bos->type == CK_JSON_OBJECT) bos = ck_json_get(bos, "content");
            if (bos && bos->type == CK_JSON_STRING && t->bos < 0) t->bos = ck_tokenizer_find(t, bos->string);
            /* transformers rebuilds the post-processor from these when they are given */
            if (t->bos >= 0 && ck_json_get(root, "add_bos_token") && ck_json_get(root, "add_bos_token")->type == CK_JSON_BOOL)
                t->add_bos = ck_json_get(root, "add_bos_token")->boolean;
            if (t->eos >= 0 && ck_json_get(root, "add_eos_token") && ck_json_get(root, "add_eos_token")->type == CK_JSON_BOOL)
                t->add_eos = ck_json_get(root, "add_eos_token")->boolean;
            ck_json_free(doc);
        }
        free(text);
    }
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if ((text = slurp(path, &len)) != NULL) {
        if ((doc = ck_json_parse(text, len, err, sizeof err)) != NULL) {
            const ck_json *e = ck_json_get(ck_json_root(doc), "eos_token_id"), *c;
            if (e && e->type == CK_JSON_NUMBER) ck_tok_add_eog(t, json_id(e));
            if (e && e->type == CK_JSON_ARRAY)
                for (c = e->child; c; c = c->next) ck_tok_add_eog(t, json_id(c));
            ck_json_free(doc);
        }
        free(text);
    }
}

static ck_tokenizer *load_json(const char *file, const char *dir, char *err, size_t errlen)
{
    size_t len;
    char *text = slurp(file, &len);
    ck_json_doc *doc;
    const ck_json *root, *model, *added, *a, *m;
    char jerr[160];
    int32_t n_vocab = 0;
    int64_t n_pieces = 0;
    jload L;
    int rc = 0;
    ck_tokenizer *t;
    if (!text) {
        seterr(err, errlen, "%s: cannot read: %s", file, strerror(errno));
        return NULL;
    }
    doc = ck_json_parse(text, len, jerr, sizeof jerr);
    free(text);
    if (!doc) {
        seterr(err, errlen, "%s: not valid JSON: %s", file, jerr);
        return NULL;
    }
    root = ck_json_root(doc);
    model = ck_json_get(root, "model");
    added = ck_json_get(root, "added_tokens");
    L.file = file, L.err = err, L.errlen = errlen, L.t = NULL;
    if (!model || model->type != CK_JSON_OBJECT) {
        bad(&L, "model", "missing or not an object");
        ck_json_free(doc);
        return NULL;
    }
    if (!jstr(model, "type") || strcmp(jstr(model, "type"), "BPE") != 0) {
        char what[96];
        snprintf(what, sizeof what, "\"%s\" models are not supported (BPE only)", jstr(model, "type") ? jstr(model, "type") : "?");
        bad(&L, "model.type", what);
        ck_json_free(doc);
        return NULL;
    }
    if (!ck_json_get(model, "vocab") || ck_json_get(model, "vocab")->type != CK_JSON_OBJECT) {
        bad(&L, "model.vocab", "missing or not an object");
        ck_json_free(doc);
        return NULL;
    }
    for (m = ck_json_get(model, "vocab")->child; m; m = m->next, n_pieces++)
        if (json_id(m) >= n_vocab) n_vocab = json_id(m) + 1;
    for (a = added && added->type == CK_JSON_ARRAY ? added->child : NULL; a; a = a->next, n_pieces++)
        if (json_id(ck_json_get(a, "id")) >= n_vocab) n_vocab = json_id(ck_json_get(a, "id")) + 1;
    if (n_vocab == 0) {
        bad(&L, "model.vocab", "empty");
        ck_json_free(doc);
        return NULL;
    }
    /* the arrays are sized by the largest id: bounded by the pieces the file holds before anything is allocated */
    if (n_vocab > CK_TOKENIZER_MAX_VOCAB || (int64_t)n_vocab > 2 * n_pieces + CK_TOKENIZER_MAX_ID_GAP) {
        char what[160];
        snprintf(what, sizeof what, "the largest id is %ld but the file has %ld pieces (limits: ids dense, at most %d)",
                 (long)n_vocab - 1, (long)n_pieces, CK_TOKENIZER_MAX_VOCAB);
        bad(&L, "model.vocab", what);
        ck_json_free(doc);
        return NULL;
    }
    t = L.t = ck_tok_new(n_vocab);
    if (!t) {
        seterr(err, errlen, "%s: out of memory", file);
        ck_json_free(doc);
        return NULL;
    }
    t->merge_mode = CK_MERGE_RANKS;
    t->kind = CK_TOK_CHARS;
    t->byte_fallback = jbool(model, "byte_fallback", 0);
    t->ignore_merges = jbool(model, "ignore_merges", 0);
    t->fuse_unk = jbool(model, "fuse_unk", 0);
    rc = load_normalizer(&L, ck_json_get(root, "normalizer"));
    if (!rc) rc = load_pretokenizer(&L, ck_json_get(root, "pre_tokenizer"));
    if (!rc) {
        const ck_json *dec = ck_json_get(root, "decoder");
        if (t->kind != CK_TOK_BYTE_LEVEL && dec && jstr(dec, "type") && strcmp(jstr(dec, "type"), "ByteLevel") == 0)
            t->kind = CK_TOK_BYTE_LEVEL;
        rc = load_decoder(&L, dec);
    }
    if (!rc) rc = load_bpe(&L, model);
    for (a = added && added->type == CK_JSON_ARRAY ? added->child : NULL; a && !rc; a = a->next) {
        int32_t id = json_id(ck_json_get(a, "id"));
        const char *content = jstr(a, "content");
        if (id < 0 || !content || !*content) {
            rc = bad(&L, "added_tokens", "an entry without an id or content");
            break;
        }
        if (!t->piece[id]) rc = ck_tok_set_piece(t, id, content, strlen(content));
        if (!rc) rc = ck_tok_add_added(t, id, content, strlen(content), jbool(a, "special", 0), jbool(a, "lstrip", 0),
                                       jbool(a, "rstrip", 0));
    }
    if (!rc) rc = ck_tok_index(t);
    if (!rc) rc = load_post(&L, ck_json_get(root, "post_processor"));
    ck_json_free(doc);
    if (!rc) {
        load_config_files(t, dir);
        snprintf(t->describe, sizeof t->describe, "%s BPE from tokenizer.json",
                 t->kind == CK_TOK_BYTE_LEVEL ? "byte-level" : "SentencePiece-style");
        rc = ck_tok_finish(t);
    }
    if (rc) {
        if (rc == CK_ENOMEM) seterr(err, errlen, "%s: out of memory", file);
        ck_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ---- SentencePiece tokenizer.model (a protobuf ModelProto) -------------------------------------------- */

typedef struct pb {
    const unsigned char *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v)
{
    int shift = 0;
    *v = 0;
    while (b->p < b->end && shift < 64) {
        unsigned char c = *b->p++;
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) return 0;
        shift += 7;
    }
    return -1;
}

/* next field: number, wire type, and for length-delimited fields the bytes; varints in *v */
static int pb_next(pb *b, int *field, int *wire, pb *sub, uint64_t *v)
{
    uint64_t key;
    if (pb_varint(b, &key)) return -1;
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: return pb_varint(b, v);
    case 1: if (b->end - b->p < 8) return -1; *v = 0; memcpy(v, b->p, 8); b->p += 8; return 0;
    case 5: if (b->end - b->p < 4) return -1; { uint32_t u; memcpy(&u, b->p, 4); *v = u; } b->p += 4; return 0;
    case 2:
        if (pb_varint(b, v) || *v > (uint64_t)(b->end - b->p)) return -1;
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return 0;
    default: return -1;
    }
}

static ck_tokenizer *load_spm(const char *file, const char *dir, char *err, size_t errlen)
{
    size_t len;
    char *data = slurp(file, &len);
    pb top, sub, f;
    int field, wire, rc = 0;
    uint64_t v;
    int32_t n = 0, id = 0;
    int model_type = 1, byte_fallback = 0, dummy = 1, squeeze = 1, escape = 1;
    int32_t unk = 0, bos = 1, eos = 2;
    char norm_name[32] = "";
    size_t charsmap = 0;
    ck_tokenizer *t;
    if (!data) {
        seterr(err, errlen, "%s: cannot read: %s", file, strerror(errno));
        return NULL;
    }
    /* pass 1: count pieces, read the specs */
    top.p = (const unsigned char *)data, top.end = top.p + len;
    while (top.p < top.end && rc == 0) {
        if (pb_next(&top, &field, &wire, &sub, &v)) { rc = -1; break; }
        if (field == 1 && wire == 2) n++;
        if ((field == 2 || field == 3) && wire == 2)
            while (sub.p < sub.end) {
                int ff, ww;
                if (pb_next(&sub, &ff, &ww, &f, &v)) { rc = -1; break; }
                if (field == 2 && ww == 0) {
                    if (ff == 3) model_type = (int)v;
                    if (ff == 35) byte_fallback = (int)v;
                    if (ff == 40) unk = (int32_t)v;
                    if (ff == 41) bos = (int32_t)v;
                    if (ff == 42) eos = (int32_t)v;
                }
                if (field == 3) {
                    if (ff == 1 && ww == 2) snprintf(norm_name, sizeof norm_name, "%.*s", (int)(f.end - f.p), (const char *)f.p);
                    if (ff == 2 && ww == 2) charsmap = (size_t)(f.end - f.p);
                    if (ff == 3 && ww == 0) dummy = (int)v;
                    if (ff == 4 && ww == 0) squeeze = (int)v;
                    if (ff == 5 && ww == 0) escape = (int)v;
                }
            }
    }
    if (rc || n == 0) {
        seterr(err, errlen, "%s: not a SentencePiece model (%s)", file, rc ? "malformed protobuf" : "no pieces");
        free(data);
        return NULL;
    }
    if (model_type != 2) {
        seterr(err, errlen, "%s: trainer_spec.model_type %d is not supported (BPE, 2, only; Unigram models are not)", file,
               model_type);
        free(data);
        return NULL;
    }
    if (charsmap || (norm_name[0] && strcmp(norm_name, "identity") != 0)) {
        seterr(err, errlen, "%s: normalizer_spec.name \"%s\" is not supported (only \"identity\": train with "
                            "normalization_rule_name=identity)", file, norm_name);
        free(data);
        return NULL;
    }
    t = ck_tok_new(n);
    if (!t || !(t->score = (float *)calloc((size_t)n, sizeof(float)))) {
        ck_tokenizer_free(t);
        free(data);
        seterr(err, errlen, "%s: out of memory", file);
        return NULL;
    }
    t->kind = CK_TOK_CHARS;
    t->merge_mode = CK_MERGE_SCORES;
    t->byte_fallback = byte_fallback;
    top.p = (const unsigned char *)data, top.end = top.p + len;
    while (top.p < top.end && rc == 0) {
        pb_next(&top, &field, &wire, &sub, &v);
        if (field != 1 || wire != 2) continue;
        while (sub.p < sub.end && rc == 0) {
            int ff, ww;
            if (pb_next(&sub, &ff, &ww, &f, &v)) { rc = -1; break; }
            if (ff == 1 && ww == 2) rc = ck_tok_set_piece(t, id, (const char *)f.p, (size_t)(f.end - f.p));
            if (ff == 2 && ww == 5) { uint32_t u = (uint32_t)v; memcpy(&t->score[id], &u, 4); }
            if (ff == 3 && ww == 0) t->type[id] = (unsigned char)(v >= 1 && v <= 6 ? v : CK_TT_NORMAL);
        }
        id++;
    }
    free(data);
    if (!rc && squeeze) rc = ck_tok_add_norm(t, CK_NORM_SQUEEZE, NULL, "");
    if (!rc && dummy) rc = ck_tok_add_norm(t, CK_NORM_PREPEND, NULL, escape ? "\xE2\x96\x81" : " ");
    if (!rc && escape) rc = ck_tok_add_norm(t, CK_NORM_REPLACE, " ", "\xE2\x96\x81");
    t->decode_metaspace = escape;
    t->decode_strip_space = dummy;
    t->normalize_first = 1;
    t->unk = unk >= 0 && unk < n ? unk : -1;
    t->bos = bos >= 0 && bos < n ? bos : -1;
    t->eos = eos >= 0 && eos < n ? eos : -1;
    t->add_bos = t->bos >= 0;
    if (!rc) rc = ck_tok_index(t);
    for (id = 0; id < n && !rc; id++)
        if (t->type[id] == CK_TT_USER) rc = ck_tok_add_added(t, id, t->piece[id], t->piece_len[id], 0, 0, 0);
    if (!rc) {
        load_config_files(t, dir);
        snprintf(t->describe, sizeof t->describe, "SentencePiece BPE from tokenizer.model");
        rc = ck_tok_finish(t);
    }
    if (rc) {
        seterr(err, errlen, "%s: %s", file, rc == CK_ENOMEM ? "out of memory" : "malformed piece");
        ck_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ---- GGUF metadata ---------------------------------------------------------------------------------- */

static const struct { const char *pre; int rules[2]; } gguf_pre[] = {
    {"default", {CK_SPLIT_GPT2, -1}},  {"gpt-2", {CK_SPLIT_GPT2, -1}},    {"gpt2", {CK_SPLIT_GPT2, -1}},
    {"phi-2", {CK_SPLIT_GPT2, -1}},    {"llama3", {CK_SPLIT_LLAMA3, -1}}, {"llama-bpe", {CK_SPLIT_LLAMA3, -1}},
    {"smaug-bpe", {CK_SPLIT_LLAMA3, -1}}, {"qwen2", {CK_SPLIT_QWEN2, -1}},
    /* llama.cpp's "\p{N}" then the GPT-2 expression (SmolLM's Digits(individual) + ByteLevel) */
    {"smollm", {CK_SPLIT_DIGITS, CK_SPLIT_GPT2}}, {"starcoder", {CK_SPLIT_DIGITS, CK_SPLIT_GPT2}},
    {"refact", {CK_SPLIT_DIGITS, CK_SPLIT_GPT2}},
};

ck_tokenizer *ck_tokenizer_load_gguf_metadata(const struct ck_checkpoint *ck, const char *file, char *err,
                                              size_t errlen)
{
    const ck_gguf_kv *model, *tokens, *types, *scores, *merges, *kv;
    const char *name;
    size_t len;
    char mname[32];
    ck_tokenizer *t = NULL;
    int64_t iv;
    uint64_t i;
    int rc = 0, is_bpe;
    char *tmp = NULL;
    model = ck_checkpoint_kv_find(ck, "tokenizer.ggml.model");
    tokens = ck_checkpoint_kv_find(ck, "tokenizer.ggml.tokens");
    name = model ? ck_gguf_kv_str(model, 0, &len) : NULL;
    if (!name || !tokens || tokens->type != CK_GGUF_ARRAY || tokens->elem_type != CK_GGUF_STRING || tokens->count == 0 ||
        tokens->count > 0x7FFFFFFF) {
        seterr(err, errlen, "%s: no tokenizer (tokenizer.ggml.model / tokenizer.ggml.tokens missing or not a string list)", file);
        goto fail;
    }
    snprintf(mname, sizeof mname, "%.*s", (int)(len < 31 ? len : 31), name);
    is_bpe = strcmp(mname, "gpt2") == 0;
    if (!is_bpe && strcmp(mname, "llama") != 0) {
        seterr(err, errlen, "%s: tokenizer.ggml.model \"%s\" is not supported (gpt2: byte-level BPE, llama: SentencePiece)",
               file, mname);
        goto fail;
    }
    t = ck_tok_new((int32_t)tokens->count);
    if (!t) goto oom;
    t->kind = is_bpe ? CK_TOK_BYTE_LEVEL : CK_TOK_CHARS;
    t->merge_mode = is_bpe ? CK_MERGE_RANKS : CK_MERGE_SCORES;
    types = ck_checkpoint_kv_find(ck, "tokenizer.ggml.token_type");
    if (types && types->count != tokens->count) types = NULL;
    for (i = 0; i < tokens->count && !rc; i++) {
        const char *s = ck_gguf_kv_str(tokens, i, &len);
        long k;
        if (types && ck_gguf_kv_int(types, i, &iv) == 0 && iv >= 1 && iv <= 6) t->type[i] = (unsigned char)iv;
        if (!(tmp = (char *)realloc(tmp, len + 1))) goto oom;
        k = -1;
        if (is_bpe && t->type[i] != CK_TT_CONTROL && t->type[i] != CK_TT_USER) k = byte_level_bytes(s, len, tmp);
        if (k < 0) k = (long)len, memcpy(tmp, s, len);
        rc = ck_tok_set_piece(t, (int32_t)i, tmp, (size_t)k);
    }
    if (rc) goto oom;
    if (!is_bpe) {
        scores = ck_checkpoint_kv_find(ck, "tokenizer.ggml.scores");
        if (!scores || scores->count != tokens->count) {
            seterr(err, errlen, "%s: tokenizer.ggml.scores: missing or not one per token", file);
            goto fail;
        }
        if (!(t->score = (float *)malloc(tokens->count * sizeof(float)))) goto oom;
        for (i = 0; i < tokens->count; i++) {
            double d = 0;
            ck_gguf_kv_num(scores, i, &d);
            t->score[i] = (float)d;
        }
        t->byte_fallback = 1;
        kv = ck_checkpoint_kv_find(ck, "tokenizer.ggml.add_space_prefix");
        if (!kv || ck_gguf_kv_int(kv, 0, &iv) || iv) {
            if (ck_tok_add_norm(t, CK_NORM_PREPEND, NULL, "\xE2\x96\x81")) goto oom;
            t->decode_strip_space = 1;
        }
        if (ck_tok_add_norm(t, CK_NORM_REPLACE, " ", "\xE2\x96\x81")) goto oom;
        t->decode_metaspace = 1;
    } else {
        const char *pre;
        char pname[64] = "default";
        size_t k, plen;
        kv = ck_checkpoint_kv_find(ck, "tokenizer.ggml.pre");
        if (kv && (pre = ck_gguf_kv_str(kv, 0, &plen)) != NULL)
            snprintf(pname, sizeof pname, "%.*s", (int)(plen < 63 ? plen : 63), pre);
        for (k = 0; k < sizeof gguf_pre / sizeof gguf_pre[0]; k++)
            if (strcmp(gguf_pre[k].pre, pname) == 0) break;
        if (k == sizeof gguf_pre / sizeof gguf_pre[0]) {
            seterr(err, errlen, "%s: tokenizer.ggml.pre \"%s\" is not a pre-tokenizer ckc knows", file, pname);
            goto fail;
        }
        t->split[t->n_split++] = gguf_pre[k].rules[0];
        if (gguf_pre[k].rules[1] >= 0) t->split[t->n_split++] = gguf_pre[k].rules[1];
    }
    if (ck_tok_index(t)) goto oom;
    merges = is_bpe ? ck_checkpoint_kv_find(ck, "tokenizer.ggml.merges") : NULL;
    if (is_bpe && (!merges || merges->type != CK_GGUF_ARRAY || merges->elem_type != CK_GGUF_STRING)) {
        seterr(err, errlen, "%s: tokenizer.ggml.merges: missing or not a string list", file);
        goto fail;
    }
    for (i = 0; merges && i < merges->count; i++) {
        const char *s = ck_gguf_kv_str(merges, i, &len), *sp = s ? memchr(s, ' ', len) : NULL;
        long ka, kb;
        int32_t ia, ib, im;
        if (!sp) {
            seterr(err, errlen, "%s: tokenizer.ggml.merges[%lu] is not \"left right\"", file, (unsigned long)i);
            goto fail;
        }
        if (!(tmp = (char *)realloc(tmp, len + 1))) goto oom;
        ka = byte_level_bytes(s, (size_t)(sp - s), tmp);
        kb = ka < 0 ? -1 : byte_level_bytes(sp + 1, len - (size_t)(sp - s) - 1, tmp + ka);
        ia = ka < 0 ? -1 : ck_tok_lookup(t, tmp, (size_t)ka);
        ib = kb < 0 ? -1 : ck_tok_lookup(t, tmp + ka, (size_t)kb);
        im = kb < 0 ? -1 : ck_tok_lookup(t, tmp, (size_t)(ka + kb));
        if (ia < 0 || ib < 0 || im < 0) {
            seterr(err, errlen, "%s: tokenizer.ggml.merges[%lu] (\"%.*s\") names a piece that is not a token", file,
                   (unsigned long)i, (int)(len < 60 ? len : 60), s);
            goto fail;
        }
        if (ck_tok_add_merge(t, ia, ib, (int32_t)i, im)) goto oom;
    }
    for (i = 0; i < tokens->count; i++)
        if (t->type[i] == CK_TT_CONTROL || t->type[i] == CK_TT_USER)
            if (t->piece_len[i] && ck_tok_add_added(t, (int32_t)i, t->piece[i], t->piece_len[i], t->type[i] == CK_TT_CONTROL, 0, 0))
                goto oom;
#define ID(key, field) \
    if ((kv = ck_checkpoint_kv_find(ck, key)) != NULL && ck_gguf_kv_int(kv, 0, &iv) == 0 && iv >= 0 && iv < (int64_t)tokens->count) \
        t->field = (int32_t)iv;
    ID("tokenizer.ggml.bos_token_id", bos)
    ID("tokenizer.ggml.eos_token_id", eos)
    ID("tokenizer.ggml.unknown_token_id", unk)
    ID("tokenizer.ggml.eot_token_id", eot)
#undef ID
    if ((kv = ck_checkpoint_kv_find(ck, "tokenizer.ggml.eom_token_id")) != NULL && ck_gguf_kv_int(kv, 0, &iv) == 0)
        ck_tok_add_eog(t, (int32_t)iv);
    kv = ck_checkpoint_kv_find(ck, "tokenizer.ggml.add_bos_token");
    t->add_bos = kv ? (ck_gguf_kv_int(kv, 0, &iv) == 0 && iv) : !is_bpe; /* llama.cpp's defaults */
    kv = ck_checkpoint_kv_find(ck, "tokenizer.ggml.add_eos_token");
    t->add_eos = kv && ck_gguf_kv_int(kv, 0, &iv) == 0 && iv;
    kv = ck_checkpoint_kv_find(ck, "tokenizer.chat_template");
    if (kv && (name = ck_gguf_kv_str(kv, 0, &len)) != NULL && !(t->chat_template = ck_str_ndup(name, len))) goto oom;
    snprintf(t->describe, sizeof t->describe, "%s from GGUF metadata",
             is_bpe ? "byte-level BPE" : "SentencePiece BPE");
    if (ck_tok_finish(t)) goto oom;
    free(tmp);
    return t;
oom:
    seterr(err, errlen, "%s: out of memory reading the tokenizer", file);
fail:
    free(tmp);
    ck_tokenizer_free(t);
    return NULL;
}

static ck_tokenizer *load_gguf(const char *file, char *err, size_t errlen)
{
    char cerr[256];
    ck_checkpoint *ck = ck_checkpoint_open(file, cerr, sizeof cerr);
    ck_tokenizer *t;
    if (!ck) {
        seterr(err, errlen, "%s", cerr);
        return NULL;
    }
    t = ck_tokenizer_load_gguf_metadata(ck, file, err, errlen);
    ck_checkpoint_close(ck);
    return t;
}

/* ---- which file --------------------------------------------------------------------------------------- */

static int has_gguf_magic(const char *path)
{
    FILE *f = fopen(path, "rb");
    char m[4] = {0, 0, 0, 0};
    int ok;
    if (!f) return 0;
    ok = fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    fclose(f);
    return ok;
}

ck_tokenizer *ck_tokenizer_load(const char *path, char *err, size_t errlen)
{
    char file[4096], dir[4096];
    if (err && errlen) err[0] = 0;
    if (!path || !*path) {
        seterr(err, errlen, "no tokenizer path");
        return NULL;
    }
    if (is_dir(path)) {
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        if (is_file(file)) return load_json(file, path, err, errlen);
        snprintf(file, sizeof file, "%s/tokenizer.model", path);
        if (is_file(file)) return load_spm(file, path, err, errlen);
        seterr(err, errlen, "%s: no tokenizer.json or tokenizer.model in the folder", path);
        return NULL;
    }
    if (!is_file(path)) {
        seterr(err, errlen, "%s: no such file or folder", path);
        return NULL;
    }
    snprintf(dir, sizeof dir, "%s", path);
    if (strrchr(dir, '/')) *strrchr(dir, '/') = 0;
    else snprintf(dir, sizeof dir, ".");
    if (ends_with(path, ".gguf") || has_gguf_magic(path)) return load_gguf(path, err, errlen);
    if (ends_with(path, ".model")) return load_spm(path, dir, err, errlen);
    if (ends_with(path, ".json")) return load_json(path, dir, err, errlen);
    seterr(err, errlen, "%s: not a tokenizer.json, tokenizer.model or GGUF file", path);
    return NULL;
}
