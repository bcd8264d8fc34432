/*
 * tokenizer.c — BPE encoding and decoding (ck_tokenizer.h); the loaders that fill the tables are in
 * tokenizer_load.c, the split rules in pretokenize.c.
 *
 * encode(text):
 *   1. added / special tokens are cut out first, leftmost-longest (lstrip / rstrip take the whitespace
 *      beside them), as Hugging Face's AddedVocabulary does;
 *   2. each remaining segment is normalized (Prepend, Replace; Metaspace's ' ' -> U+2581) and split by the
 *      pre-tokenizer rules in order (each rule splits the pieces of the one before);
 *   3. each piece is BPE-merged: symbols are its bytes (byte-level) or characters (SentencePiece style;
 *      a character not in the vocabulary becomes its <0xXX> byte tokens with byte fallback), and the
 *      best adjacent pair is merged until none is left — best is the lowest merge rank (merges list) or
 *      the highest score of the merged piece (SentencePiece), ties to the leftmost pair. A binary heap
 *      keeps that O(n log n), like tokenizers' word.rs and llama.cpp's llm_tokenizer_spm.
 */
#include <stdlib.h>
#include <string.h>

#include "ck_errors.h"
#include "tokenizer_impl.h"
#include "unicode.h"

/* ---- building ---------------------------------------------------------------------------------- */

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

ck_tokenizer *ck_tok_new(int32_t n_vocab)
{
    ck_tokenizer *t = (ck_tokenizer *)calloc(1, sizeof *t);
    int i;
    if (!t) return NULL;
    if (n_vocab <= 0 || n_vocab > CK_TOKENIZER_MAX_VOCAB) {
        free(t);
        return NULL;
    }
    t->n_vocab = n_vocab;
    t->piece = (char **)calloc((size_t)n_vocab, sizeof *t->piece);
    t->piece_len = (uint32_t *)calloc((size_t)n_vocab, sizeof *t->piece_len);
    t->text = (char **)calloc((size_t)n_vocab, sizeof *t->text);
    t->text_len = (uint32_t *)calloc((size_t)n_vocab, sizeof *t->text_len);
    t->type = (unsigned char *)malloc((size_t)n_vocab);
    t->added_by_id = (int32_t *)malloc((size_t)n_vocab * sizeof *t->added_by_id);
    if (!t->piece || !t->piece_len || !t->text || !t->text_len || !t->type || !t->added_by_id) {
        ck_tokenizer_free(t);
        return NULL;
    }
    memset(t->type, CK_TT_NORMAL, (size_t)n_vocab);
    for (i = 0; i < n_vocab; i++) t->added_by_id[i] = -1;
    for (i = 0; i < 256; i++) t->byte_id[i] = -1;
    t->unk = t->bos = t->eos = t->eot = -1;
    return t;
}

int ck_tok_set_piece(ck_tokenizer *t, int32_t id, const char *bytes, size_t len)
{
    if (id < 0 || id >= t->n_vocab) return CK_EINVAL;
    free(t->piece[id]);
    t->piece[id] = ck_str_ndup(bytes, len);
    t->piece_len[id] = (uint32_t)len;
    return t->piece[id] ? 0 : CK_ENOMEM;
}

static int strmap_find_slot(const ck_tokenizer *t, const char *s, size_t n, uint32_t *slot)
{
    uint32_t mask = t->vocab.cap - 1, i = hash_bytes(s, n) & mask;
    for (;;) {
        int32_t id = t->vocab.slot[i];
        if (id < 0) { *slot = i; return 0; }
        if (t->piece_len[id] == n && memcmp(t->piece[id], s, n) == 0) { *slot = i; return 1; }
        i = (i + 1) & mask;
    }
}

int32_t ck_tok_lookup(const ck_tokenizer *t, const char *bytes, size_t len)
{
    uint32_t slot;
    if (!t->vocab.cap) return -1;
    return strmap_find_slot(t, bytes, len, &slot) ? t->vocab.slot[slot] : -1;
}

/* the byte a "<0xXX>" piece stands for, or -1 */
static int byte_piece(const char *p, size_t n)
{
    int b = 0, i;
    if (!p || n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    for (i = 3; i < 5; i++) {
        char c = p[i];
        b = b * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -999);
    }
    return b >= 0 ? b : -1;
}

int ck_tok_index(ck_tokenizer *t)
{
    uint32_t cap = 16, slot;
    int32_t id;
    /* (loaders keep n_vocab <= CK_TOKENIZER_MAX_VOCAB, so the table's size cannot wrap) */
    if (t->n_vocab < 0 || t->n_vocab > CK_TOKENIZER_MAX_VOCAB) return CK_EINVAL;
    while (cap < 2u * (uint32_t)t->n_vocab + 16) cap *= 2;
    free(t->vocab.slot);
    t->vocab.cap = cap;
    t->vocab.slot = (int32_t *)malloc(cap * sizeof(int32_t));
    if (!t->vocab.slot) return CK_ENOMEM;
    memset(t->vocab.slot, 0xFF, cap * sizeof(int32_t));
    /* the first id of a piece wins (duplicates exist in some vocabularies: unused / control copies) */
    for (id = 0; id < t->n_vocab; id++) {
        if (!t->piece[id] || t->type[id] == CK_TT_UNUSED) continue;
        if (!strmap_find_slot(t, t->piece[id], t->piece_len[id], &slot)) t->vocab.slot[slot] = id;
    }
    for (id = 0; id < t->n_vocab; id++) {
        if (!t->piece[id]) continue;
        if (t->kind == CK_TOK_BYTE_LEVEL && t->piece_len[id] == 1 && t->type[id] != CK_TT_CONTROL &&
            t->byte_id[(unsigned char)t->piece[id][0]] < 0)
            t->byte_id[(unsigned char)t->piece[id][0]] = id;
        if (t->kind == CK_TOK_CHARS) {
            int b = byte_piece(t->piece[id], t->piece_len[id]);
            if (b >= 0) {
                if (t->byte_id[b] < 0) t->byte_id[b] = id;
                if (t->type[id] == CK_TT_NORMAL) t->type[id] = CK_TT_BYTE;
            }
        }
    }
    return 0;
}

static uint64_t merge_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static ck_merge_entry *merge_slot(const ck_tokenizer *t, uint64_t key)
{
    uint32_t mask = t->merges_cap - 1, i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    while (t->merges[i].key != ~(uint64_t)0 && t->merges[i].key != key) i = (i + 1) & mask;
    return &t->merges[i];
}

int ck_tok_add_merge(ck_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    ck_merge_entry *e;
    if (!t->merges_cap || (uint32_t)rank * 2u + 2u > t->merges_cap) { /* grow (ranks arrive in order) */
        uint32_t cap = t->merges_cap ? t->merges_cap * 2 : 1024, i, old = t->merges_cap;
        ck_merge_entry *prev = t->merges;
        while ((uint32_t)rank * 2u + 2u > cap) cap *= 2;
        t->merges = (ck_merge_entry *)malloc(cap * sizeof *t->merges);
        if (!t->merges) { t->merges = prev; return CK_ENOMEM; }
        for (i = 0; i < cap; i++) t->merges[i].key = ~(uint64_t)0;
        t->merges_cap = cap;
        for (i = 0; i < old; i++)
            if (prev[i].key != ~(uint64_t)0) *merge_slot(t, prev[i].key) = prev[i];
        free(prev);
    }
    e = merge_slot(t, merge_key(left, right));
    if (e->key != ~(uint64_t)0) return 0; /* a repeated merge keeps its first (best) rank */
    e->key = merge_key(left, right);
    e->rank = rank;
    e->id = merged;
    return 0;
}

int ck_tok_add_norm(ck_tokenizer *t, int kind, const char *from, const char *to)
{
    ck_norm_step *st;
    if (t->n_norm == CK_TOK_MAX_STEPS) return CK_ERANGE;
    st = &t->norm[t->n_norm];
    st->kind = kind;
    st->from = from ? ck_str_ndup(from, strlen(from)) : NULL;
    st->to = ck_str_ndup(to, strlen(to));
    t->n_norm++; /* counted even when a copy failed: ck_tokenizer_free frees what was made */
    return (from && !st->from) || !st->to ? CK_ENOMEM : 0;
}

int ck_tok_add_added(ck_tokenizer *t, int32_t id, const char *text, size_t len, int special, int lstrip, int rstrip)
{
    ck_added_token *a;
    if (id < 0 || id >= t->n_vocab || len == 0) return CK_EINVAL;
    a = (ck_added_token *)realloc(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
    if (!a) return CK_ENOMEM;
    t->added = a;
    a += t->n_added;
    a->id = id;
    a->text = ck_str_ndup(text, len);
    a->len = len;
    a->special = special;
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    if (!a->text) return CK_ENOMEM;
    t->n_added++;
    return 0;
}

static int by_length_desc(const void *x, const void *y)
{
    const ck_added_token *a = (const ck_added_token *)x, *b = (const ck_added_token *)y;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int32_t ck_tokenizer_find(const ck_tokenizer *t, const char *text)
{
    size_t n = strlen(text);
    int i;
    if (!t) return -1;
    for (i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].text, text, n) == 0) return t->added[i].id;
    return ck_tok_lookup(t, text, n);
}

void ck_tok_add_eog(ck_tokenizer *t, int32_t id)
{
    int i;
    if (id < 0 || id >= t->n_vocab) return;
    for (i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0])) t->eog[t->n_eog++] = id;
}

int ck_tok_finish(ck_tokenizer *t)
{
    static const char *const turn_ends[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|eom_id|>"};
    int32_t id;
    int i;
    if (t->n_added) qsort(t->added, (size_t)t->n_added, sizeof *t->added, by_length_desc);
    for (i = 0; i < t->n_added; i++) {
        t->added_by_id[t->added[i].id] = i;
        if (t->added[i].special && t->type[t->added[i].id] == CK_TT_NORMAL) t->type[t->added[i].id] = CK_TT_CONTROL;
    }
    /* what each id decodes to */
    for (id = 0; id < t->n_vocab; id++) {
        const char *src = t->piece[id];
        size_t n = t->piece_len[id], k = 0, j;
        char *out;
        if (t->added_by_id[id] >= 0) src = t->added[t->added_by_id[id]].text, n = t->added[t->added_by_id[id]].len;
        if (!src) src = "", n = 0;
        out = (char *)malloc(n + 1);
        if (!out) return CK_ENOMEM;
        if (t->type[id] == CK_TT_BYTE && t->kind == CK_TOK_CHARS && t->added_by_id[id] < 0 && byte_piece(src, n) >= 0) {
            out[k++] = (char)byte_piece(src, n);
        } else {
            for (j = 0; j < n; j++) {
                if (t->decode_metaspace && t->added_by_id[id] < 0 && j + 3 <= n &&
                    memcmp(src + j, "\xE2\x96\x81", 3) == 0) {
                    out[k++] = ' ';
                    j += 2;
                } else {
                    out[k++] = src[j];
                }
            }
        }
        out[k] = 0;
        t->text[id] = out;
        t->text_len[id] = (uint32_t)k;
    }
    /* end of generation: EOS, the chat format's end of turn */
    if (t->eot < 0)
        for (i = 0; i < (int)(sizeof turn_ends / sizeof turn_ends[0]) && t->eot < 0; i++) t->eot = ck_tokenizer_find(t, turn_ends[i]);
    ck_tok_add_eog(t, t->eos);
    ck_tok_add_eog(t, t->eot);
    return 0;
}

void ck_tokenizer_free(ck_tokenizer *t)
{
    int32_t i;
    if (!t) return;
    for (i = 0; i < t->n_vocab; i++) {
        if (t->piece) free(t->piece[i]);
        if (t->text) free(t->text[i]);
    }
    for (i = 0; i < t->n_added; i++) free(t->added[i].text);
    for (i = 0; i < t->n_norm; i++) {
        free(t->norm[i].from);
        free(t->norm[i].to);
    }
    free(t->piece);
    free(t->piece_len);
    free(t->text);
    free(t->text_len);
    free(t->score);
    free(t->type);
    free(t->vocab.slot);
    free(t->merges);
    free(t->added);
    free(t->added_by_id);
    free(t->chat_template);
    free(t);
}

/* ---- accessors ---------------------------------------------------------------------------------- */

int ck_tokenizer_vocab_size(const ck_tokenizer *t) { return t ? t->n_vocab : CK_EINVAL; }
int32_t ck_tokenizer_bos(const ck_tokenizer *t) { return t ? t->bos : -1; }
int32_t ck_tokenizer_eos(const ck_tokenizer *t) { return t ? t->eos : -1; }
int32_t ck_tokenizer_eot(const ck_tokenizer *t) { return t ? (t->eot >= 0 ? t->eot : t->eos) : -1; }
const char *ck_tokenizer_chat_template(const ck_tokenizer *t) { return t ? t->chat_template : NULL; }
const char *ck_tokenizer_describe(const ck_tokenizer *t) { return t ? t->describe : "none"; }

int ck_tokenizer_is_eog(const ck_tokenizer *t, int32_t id)
{
    int i;
    if (!t) return 0;
    for (i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

int ck_tokenizer_is_special(const ck_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    return t->type[id] == CK_TT_CONTROL || (t->added_by_id[id] >= 0 && t->added[t->added_by_id[id]].special);
}

const char *ck_tokenizer_piece(const ck_tokenizer *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->text_len[id];
    return t->text[id];
}

/* ---- encoding ----------------------------------------------------------------------------------- */

typedef struct out_ids {
    int32_t *ids;
    long cap, n;
} out_ids;

static void emit(out_ids *o, int32_t id)
{
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

typedef struct merge_cand {
    float key; /* lower is better: the rank, or minus the score */
    int32_t pos, left, right, id;
} merge_cand;

typedef struct bpe_work {
    int32_t *id, *prev, *next;
    uint32_t *start, *len;
    unsigned char *nomerge;
    merge_cand *heap;
    size_t cap, heap_n, heap_cap;
} bpe_work;

static int cand_less(const merge_cand *a, const merge_cand *b)
{
    return a->key < b->key || (a->key == b->key && a->pos < b->pos);
}

static void heap_push(bpe_work *w, merge_cand c)
{
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}

static merge_cand heap_pop(bpe_work *w)
{
    merge_cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const merge_cand *best = &last;
        if (l < n && cand_less(&w->heap[l], best)) m = l, best = &w->heap[l];
        if (r < n && cand_less(&w->heap[r], best)) m = r;
        if (m == i) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n) w->heap[i] = last;
    return top;
}

static int bpe_reserve(bpe_work *w, size_t n)
{
    if (n <= w->cap) return 0;
    n = n < 64 ? 64 : n * 2;
    free(w->id); free(w->prev); free(w->next); free(w->start); free(w->len); free(w->nomerge); free(w->heap);
    w->id = (int32_t *)malloc(n * sizeof *w->id);
    w->prev = (int32_t *)malloc(n * sizeof *w->prev);
    w->next = (int32_t *)malloc(n * sizeof *w->next);
    w->start = (uint32_t *)malloc(n * sizeof *w->start);
    w->len = (uint32_t *)malloc(n * sizeof *w->len);
    w->nomerge = (unsigned char *)malloc(n);
    w->heap_cap = 2 * n + 16;
    w->heap = (merge_cand *)malloc(w->heap_cap * sizeof *w->heap);
    w->cap = n;
    if (!w->id || !w->prev || !w->next || !w->start || !w->len || !w->nomerge || !w->heap) {
        w->cap = 0;
        return CK_ENOMEM;
    }
    return 0;
}

static void bpe_free(bpe_work *w)
{
    free(w->id); free(w->prev); free(w->next); free(w->start); free(w->len); free(w->nomerge); free(w->heap);
}

/* the candidate merge of symbols a and b (adjacent), or 0 */
static int pair(const ck_tokenizer *t, bpe_work *w, const char *word, int32_t a, int32_t b, merge_cand *c)
{
    if (a < 0 || b < 0 || w->nomerge[a] || w->nomerge[b]) return 0;
    if (t->merge_mode == CK_MERGE_RANKS) {
        const ck_merge_entry *e;
        if (!t->merges_cap) return 0;
        e = merge_slot(t, merge_key(w->id[a], w->id[b]));
        if (e->key == ~(uint64_t)0) return 0;
        c->key = (float)e->rank;
        c->id = e->id;
    } else {
        int32_t id = ck_tok_lookup(t, word + w->start[a], w->len[a] + w->len[b]);
        if (id < 0 || t->type[id] != CK_TT_NORMAL) return 0;
        c->key = -t->score[id];
        c->id = id;
    }
    c->pos = a;
    c->left = w->id[a];
    c->right = w->id[b];
    return 1;
}

static int bpe_word(const ck_tokenizer *t, bpe_work *w, const char *word, size_t n, out_ids *o)
{
    int32_t nsym = 0, i, prev_unk = 0;
    size_t k = 0;
    merge_cand c;
    if (n == 0) return 0;
    if (t->ignore_merges) {
        int32_t id = ck_tok_lookup(t, word, n);
        if (id >= 0) {
            emit(o, id);
            return 0;
        }
    }
    if (bpe_reserve(w, n + 1)) return CK_ENOMEM;
    /* the initial symbols */
    while (k < n) {
        int len = 1;
        int32_t id;
        if (t->kind == CK_TOK_BYTE_LEVEL) {
            id = t->byte_id[(unsigned char)word[k]];
        } else {
            ck_utf8_decode((const unsigned char *)word + k, n - k, &len);
            id = ck_tok_lookup(t, word + k, (size_t)len);
            if (id >= 0 && t->type[id] != CK_TT_NORMAL && t->type[id] != CK_TT_USER) id = -1;
        }
        if (id < 0 && t->byte_fallback && t->kind == CK_TOK_CHARS) {
            int b;
            int ok = 1;
            for (b = 0; b < len; b++) ok &= t->byte_id[(unsigned char)word[k + b]] >= 0;
            if (ok) {
                for (b = 0; b < len; b++) {
                    w->id[nsym] = t->byte_id[(unsigned char)word[k + b]];
                    w->start[nsym] = (uint32_t)(k + b);
                    w->len[nsym] = 1;
                    w->nomerge[nsym] = 1;
                    nsym++;
                }
                k += (size_t)len;
                prev_unk = 0;
                continue;
            }
        }
        if (id < 0) {
            if (t->unk < 0) { k += (size_t)len; continue; } /* nothing to stand for it: dropped, as tokenizers does */
            if (prev_unk && t->fuse_unk) {
                w->len[nsym - 1] += (uint32_t)len;
                k += (size_t)len;
                continue;
            }
            w->id[nsym] = t->unk;
            w->nomerge[nsym] = 1;
            prev_unk = 1;
        } else {
            w->id[nsym] = id;
            w->nomerge[nsym] = 0;
            prev_unk = 0;
        }
        w->start[nsym] = (uint32_t)k;
        w->len[nsym] = (uint32_t)len;
        nsym++;
        k += (size_t)len;
    }
    for (i = 0; i < nsym; i++) {
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < nsym ? i + 1 : -1;
    }
    w->heap_n = 0;
    for (i = 0; i + 1 < nsym; i++)
        if (pair(t, w, word, i, i + 1, &c)) heap_push(w, c);
    while (w->heap_n) {
        int32_t a, b;
        c = heap_pop(w);
        a = c.pos;
        b = w->next[a];
        if (w->len[a] == 0 || b < 0 || w->id[a] != c.left || w->id[b] != c.right) continue; /* stale */
        w->id[a] = c.id;
        w->len[a] += w->len[b];
        w->len[b] = 0;
        w->next[a] = w->next[b];
        if (w->next[b] >= 0) w->prev[w->next[b]] = a;
        if (w->heap_n + 2 > w->heap_cap) continue; /* cannot happen: each merge removes a symbol */
        if (w->prev[a] >= 0 && pair(t, w, word, w->prev[a], a, &c)) heap_push(w, c);
        if (w->next[a] >= 0 && pair(t, w, word, a, w->next[a], &c)) heap_push(w, c);
    }
    for (i = 0; i >= 0 && nsym > 0; i = w->next[i]) emit(o, w->id[i]);
    return 0;
}

typedef struct enc_ctx {
    const ck_tokenizer *t;
    bpe_work w;
    out_ids *o;
    const unsigned char *text; /* the normalized segment */
    int level;
    size_t base;
} enc_ctx;

static int split_level(enc_ctx *e, size_t off, size_t len);

static int on_piece(void *user, size_t off, size_t len)
{
    enc_ctx *e = (enc_ctx *)user;
    size_t base = e->base;
    int rc;
    e->level++;
    rc = split_level(e, base + off, len);
    e->level--;
    e->base = base;
    return rc;
}

static int split_level(enc_ctx *e, size_t off, size_t len)
{
    if (e->level < e->t->n_split) {
        e->base = off;
        return ck_split((ck_split_rule)e->t->split[e->level], e->text + off, len, on_piece, e);
    }
    return bpe_word(e->t, &e->w, (const char *)e->text + off, len, e->o);
}

/* buf += s[0..n) */
typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static int buf_put(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = (char *)realloc(b->p, cap);
        if (!p) return CK_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n); /* (s may be NULL when n is 0: an empty buffer's data) */
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* the normalizer steps over a (b is scratch); first: the segment starts the text */
static int normalize(const ck_tokenizer *t, buf *pa, buf *pb, int first)
{
    buf a = *pa, b = *pb;
    int i, rc = 0;
    size_t k;
    for (i = 0; i < t->n_norm && rc == 0; i++) {
        const ck_norm_step *st = &t->norm[i];
        b.n = 0;
        if (st->kind == CK_NORM_NFC) {
            size_t nl;
            char *nfc = ck_utf8_nfc(a.p, a.n, &nl);
            rc = nfc ? buf_put(&b, nfc, nl) : CK_ENOMEM;
            free(nfc);
        } else if (st->kind == CK_NORM_SQUEEZE) { /* SentencePiece's remove_extra_whitespaces */
            size_t lo = 0, hi = a.n;
            while (lo < hi && a.p[lo] == ' ') lo++;
            while (hi > lo && a.p[hi - 1] == ' ') hi--;
            for (k = lo; k < hi && rc == 0; k++)
                if (!(a.p[k] == ' ' && a.p[k + 1] == ' ')) rc = buf_put(&b, a.p + k, 1);
        } else if (st->kind == CK_NORM_PREPEND) {
            if (a.n) rc = buf_put(&b, st->to, strlen(st->to));
            if (!rc) rc = buf_put(&b, a.p, a.n);
        } else {
            size_t fl = strlen(st->from), tl = strlen(st->to);
            for (k = 0; k < a.n && rc == 0;) {
                if (fl && k + fl <= a.n && memcmp(a.p + k, st->from, fl) == 0) {
                    rc = buf_put(&b, st->to, tl);
                    k += fl;
                } else {
                    rc = buf_put(&b, a.p + k, 1);
                    k++;
                }
            }
        }
        { buf tmp = a; a = b; b = tmp; }
    }
    if (!rc && t->metaspace) {
        b.n = 0;
        if (t->metaspace_prepend == 2 || (t->metaspace_prepend == 1 && first))
            if (!(a.n >= 3 && memcmp(a.p, "\xE2\x96\x81", 3) == 0) && !(a.n && a.p[0] == ' ')) rc = buf_put(&b, "\xE2\x96\x81", 3);
        for (k = 0; k < a.n && rc == 0; k++) rc = a.p[k] == ' ' ? buf_put(&b, "\xE2\x96\x81", 3) : buf_put(&b, a.p + k, 1);
        { buf tmp = a; a = b; b = tmp; }
    }
    if (!rc && t->byte_level_prefix_space && a.n && a.p[0] != ' ') {
        b.n = 0;
        rc = buf_put(&b, " ", 1);
        if (!rc) rc = buf_put(&b, a.p, a.n);
        { buf tmp = a; a = b; b = tmp; }
    }
    *pa = a;
    *pb = b;
    return rc;
}

/* one segment between added tokens: normalize, pre-tokenize, BPE */
static int encode_segment(enc_ctx *e, const char *s, size_t n, int first)
{
    buf a = {0, 0, 0}, b = {0, 0, 0};
    int rc = 0;
    if (n == 0) return 0;
    if (buf_put(&a, s, n)) return CK_ENOMEM;
    if (!e->t->normalize_first) rc = normalize(e->t, &a, &b, first);
    if (!rc && a.n) {
        e->text = (const unsigned char *)a.p;
        e->level = 0;
        rc = split_level(e, 0, a.n);
    }
    free(a.p);
    free(b.p);
    return rc;
}

/* the length of the whitespace character (Unicode White_Space, what lstrip / rstrip take) starting at s[i],
 * or ending just before s[i] (back), else 0 */
static size_t space_at(const char *s, size_t len, size_t i, int back)
{
    int n;
    size_t start = i;
    if (back) {
        if (i == 0) return 0;
        start = i - 1;
        while (start > 0 && i - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
    } else if (i >= len) {
        return 0;
    }
    if (!ck_unicode_is_space(ck_utf8_decode((const unsigned char *)s + start, len - start, &n))) return 0;
    if (back && start + (size_t)n != i) return 0;
    return (size_t)n;
}

/* added tokens cut out, every other segment normalized (unless the whole text was), split and merged */
static int encode_text(enc_ctx *e, const char *text, size_t len)
{
    const ck_tokenizer *t = e->t;
    size_t i = 0, seg = 0;
    int rc = 0, first = 1;
    while (i <= len && rc == 0) {
        const ck_added_token *hit = NULL;
        size_t end, next;
        int a;
        if (i < len)
            for (a = 0; a < t->n_added; a++) {
                const ck_added_token *at = &t->added[a];
                if (at->len <= len - i && at->text[0] == text[i] && memcmp(at->text, text + i, at->len) == 0) {
                    hit = at;
                    break;
                }
            }
        if (!hit && i < len) {
            i++;
            continue;
        }
        end = i;
        next = hit ? i + hit->len : i;
        if (hit && hit->lstrip)
            while (end > seg && space_at(text, len, end, 1)) end -= space_at(text, len, end, 1);
        rc = encode_segment(e, text + seg, end - seg, first);
        first = 0;
        if (!hit) break;
        emit(e->o, hit->id);
        if (hit->rstrip)
            while (next < len && space_at(text, len, next, 0)) next += space_at(text, len, next, 0);
        i = seg = next;
    }
    return rc;
}

long ck_tokenizer_encode(const ck_tokenizer *t, const char *text, size_t len, int add_special, int32_t *ids, long cap)
{
    out_ids o;
    enc_ctx e;
    int rc = 0;
    if (!t || (!text && len) || cap < 0 || (cap > 0 && !ids)) return CK_EINVAL;
    o.ids = ids;
    o.cap = cap;
    o.n = 0;
    memset(&e, 0, sizeof e);
    e.t = t;
    e.o = &o;
    if (add_special && t->add_bos && t->bos >= 0) emit(&o, t->bos);
    if (t->normalize_first) { /* SentencePiece: the whole text, then user-defined pieces inside it */
        buf na = {0, 0, 0}, nb = {0, 0, 0};
        rc = buf_put(&na, text ? text : "", len);
        if (!rc) rc = normalize(t, &na, &nb, 1);
        if (!rc) rc = encode_text(&e, na.p ? na.p : "", na.n); /* (normalized to nothing: an empty buffer) */
        free(na.p);
        free(nb.p);
    } else {
        rc = encode_text(&e, text ? text : "", len);
    }
    if (!rc && add_special && t->add_eos && t->eos >= 0) emit(&o, t->eos);
    bpe_free(&e.w);
    return rc ? rc : o.n;
}

/* ---- decoding ----------------------------------------------------------------------------------- */

long ck_tokenizer_decode(const ck_tokenizer *t, const int32_t *ids, long n, int skip_special, char *out, long cap)
{
    long i, total = 0;
    if (!t || n < 0 || (n && !ids) || cap < 0 || (cap > 0 && !out)) return CK_EINVAL;
    for (i = 0; i < n; i++) {
        int32_t id = ids[i];
        uint32_t k;
        if (id < 0 || id >= t->n_vocab) continue; /* a model's padded rows: nothing, as tokenizers' decode */
        if (skip_special && ck_tokenizer_is_special(t, id)) continue;
        k = 0;
        if (total == 0 && t->decode_strip_space && t->text_len[id] && t->text[id][0] == ' ') k = 1;
        for (; k < t->text_len[id]; k++, total++)
            if (total < cap - 1) out[total] = t->text[id][k];
    }
    if (cap > 0) out[total < cap - 1 ? total : cap - 1] = 0;
    return total;
}

void ck_token_stream_reset(ck_token_stream *s)
{
    if (s) memset(s, 0, sizeof *s);
}

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* runs the UTF-8 assembly over bytes; writes when out != NULL; returns the bytes produced */
static long stream_bytes(ck_token_stream *s, const unsigned char *p, size_t n, char *out)
{
    long w = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (s->npending) {
            int need = s->pending[0] >= 0xF0 ? 4 : s->pending[0] >= 0xE0 ? 3 : 2;
            /* the second byte's range depends on the lead (no overlongs, surrogates or > U+10FFFF), so a bad
             * sequence is cut where it goes wrong: one U+FFFD per maximal subpart, as Rust's from_utf8_lossy
             * (tokenizers' decode) and Python's errors="replace" */
            unsigned char lo = 0x80, hi = 0xBF, lead = s->pending[0];
            if (s->npending == 1) {
                if (lead == 0xE0) lo = 0xA0;
                else if (lead == 0xED) hi = 0x9F;
                else if (lead == 0xF0) lo = 0x90;
                else if (lead == 0xF4) hi = 0x8F;
            }
            if (c >= lo && c <= hi) {
                s->pending[s->npending++] = c;
                if (s->npending == need) {
                    if (out) memcpy(out + w, s->pending, (size_t)need);
                    w += need;
                    s->npending = 0;
                }
                continue;
            }
            if (out) memcpy(out + w, replacement, 3);
            w += 3;
            s->npending = 0;
        }
        if (c < 0x80) {
            if (out) out[w] = (char)c;
            w++;
        } else if (c >= 0xC2 && c <= 0xF4) {
            s->pending[0] = c;
            s->npending = 1;
        } else {
            if (out) memcpy(out + w, replacement, 3);
            w += 3;
        }
    }
    return w;
}

long ck_token_stream_push(const ck_tokenizer *t, ck_token_stream *s, int32_t id, int skip_special, char *out, long cap)
{
    ck_token_stream probe;
    const unsigned char *p;
    size_t n;
    long need;
    if (!t || !s || cap < 0 || (cap > 0 && !out)) return CK_EINVAL;
    if (id < 0 || id >= t->n_vocab || (skip_special && ck_tokenizer_is_special(t, id))) {
        if (cap > 0) out[0] = 0;
        return 0;
    }
    p = (const unsigned char *)t->text[id];
    n = t->text_len[id];
    if (!s->started && t->decode_strip_space && n && p[0] == ' ') p++, n--;
    probe = *s;
    need = stream_bytes(&probe, p, n, NULL);
    if (need + 1 > cap) return need; /* nothing consumed */
    stream_bytes(s, p, n, out);
    s->started = 1;
    out[need] = 0;
    return need;
}

long ck_token_stream_flush(ck_token_stream *s, char *out, long cap)
{
    long need;
    if (!s || cap < 0 || (cap > 0 && !out)) return CK_EINVAL;
    need = s->npending ? 3 : 0;
    if (need + 1 > cap) return need;
    if (need) memcpy(out, replacement, 3);
    out[need] = 0;
    s->npending = 0;
    return need;
}
