/*
 * generate.c — the sampler and the generation loop (ck_generate.h), over the ck_model ABI: it links with
 * any generated language model.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_errors.h"
#include "ck_generate.h"

/* ---- sampling ------------------------------------------------------------------------------------------ */

struct ck_sampler {
    ck_sampling p;
    int vocab;
    uint64_t rng;
    float *z;
    int32_t *idx, *tmp;
    unsigned char *seen;
};

void ck_sampling_default(ck_sampling *s)
{
    memset(s, 0, sizeof *s);
    s->top_p = 1.0f;
    s->repeat_penalty = 1.0f;
    s->repeat_last_n = 64;
}

void ck_generate_opts_default(ck_generate_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 128;
    ck_sampling_default(&o->sampling);
}

ck_sampler *ck_sampler_new(const ck_sampling *p, int vocab)
{
    ck_sampler *s;
    if (!p || vocab < 1 || !(p->top_p > 0.0f) || p->min_p < 0.0f || p->min_p > 1.0f || p->top_k < 0 ||
        !(p->repeat_penalty > 0.0f) || p->repeat_last_n < 0 || p->temperature != p->temperature)
        return NULL;
    s = (ck_sampler *)calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->vocab = vocab;
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
    s->z = (float *)malloc((size_t)vocab * sizeof *s->z);
    s->idx = (int32_t *)malloc((size_t)vocab * sizeof *s->idx);
    s->tmp = (int32_t *)malloc((size_t)vocab * sizeof *s->tmp);
    s->seen = (unsigned char *)calloc((size_t)vocab, 1);
    if (!s->z || !s->idx || !s->tmp || !s->seen) {
        ck_sampler_free(s);
        return NULL;
    }
    return s;
}

void ck_sampler_free(ck_sampler *s)
{
    if (!s) return;
    free(s->z);
    free(s->idx);
    free(s->tmp);
    free(s->seen);
    free(s);
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* idx[0..n) by key descending, ties by id (a stable merge sort: no global state, so samplers on different
 * threads do not meet) */
static void sort_desc(int32_t *idx, int32_t *tmp, int n, const float *key)
{
    int width, i;
    for (width = 1; width < n; width *= 2) {
        for (i = 0; i < n; i += 2 * width) {
            int a = i, am = i + width < n ? i + width : n, b = am, bm = i + 2 * width < n ? i + 2 * width : n, k = i;
            while (a < am && b < bm) tmp[k++] = key[idx[b]] > key[idx[a]] ? idx[b++] : idx[a++];
            while (a < am) tmp[k++] = idx[a++];
            while (b < bm) tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

int32_t ck_sampler_sample(ck_sampler *s, const float *logits, const int32_t *history, int n_history)
{
    float *z = s->z, zmax = -INFINITY, T = s->p.temperature;
    int32_t *idx = s->idx, best = 0;
    int i, n = 0, first = 0;
    double sum = 0.0, acc, u;
    memcpy(z, logits, (size_t)s->vocab * sizeof *z);
    if (s->p.repeat_penalty != 1.0f && history && n_history > 0) {
        if (s->p.repeat_last_n > 0 && n_history > s->p.repeat_last_n) first = n_history - s->p.repeat_last_n;
        for (i = first; i < n_history; i++) {
            int32_t t = history[i];
            if (t < 0 || t >= s->vocab || s->seen[t]) continue;
            s->seen[t] = 1;
            z[t] = z[t] > 0 ? z[t] / s->p.repeat_penalty : z[t] * s->p.repeat_penalty;
        }
        for (i = first; i < n_history; i++)
            if (history[i] >= 0 && history[i] < s->vocab) s->seen[history[i]] = 0;
    }
    for (i = 0; i < s->vocab; i++)
        if (z[i] > z[best]) best = i;
    if (!(T > 0.0f)) return best;
    zmax = z[best] / T;
    /* candidates: a logit 30 below the best is a probability e^-30 of it, below float resolution of the sum */
    for (i = 0; i < s->vocab; i++) {
        z[i] /= T;
        if (z[i] >= zmax - 30.0f) idx[n++] = i;
    }
    sort_desc(idx, s->tmp, n, z);
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    for (i = 0; i < n; i++) sum += exp((double)(z[idx[i]] - zmax));
    if (s->p.top_p < 1.0f) {
        for (i = 0, acc = 0.0; i < n; i++) {
            acc += exp((double)(z[idx[i]] - zmax)) / sum;
            if (acc >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) { /* relative to the most likely token, after the filters before it */
        double floor = log((double)s->p.min_p);
        for (i = 1; i < n; i++)
            if ((double)(z[idx[i]] - zmax) < floor) break;
        n = i;
    }
    for (i = 0, sum = 0.0; i < n; i++) sum += exp((double)(z[idx[i]] - zmax));
    u = (double)(splitmix64(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    for (i = 0, acc = 0.0; i < n; i++) {
        acc += exp((double)(z[idx[i]] - zmax));
        if (u < acc) return idx[i];
    }
    return idx[n - 1];
}

/* ---- generation ---------------------------------------------------------------------------------------- */

static double now_seconds(void) /* for the tokens/s it reports */
{
#if defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#else /* a C library without POSIX clocks (newlib on a microcontroller): processor time */
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

typedef struct text_state {
    char *gen;          /* the generated text so far */
    size_t n, cap, emitted;
    size_t max_stop;
} text_state;

static int text_append(text_state *s, const char *p, size_t n)
{
    if (s->n + n + 1 > s->cap) {
        size_t cap = (s->n + n + 1) * 2;
        char *q = (char *)realloc(s->gen, cap);
        if (!q) return CK_ENOMEM;
        s->gen = q;
        s->cap = cap;
    }
    memcpy(s->gen + s->n, p, n);
    s->n += n;
    s->gen[s->n] = 0;
    return 0;
}

/* where a stop string starts in the not yet emitted text (or -1), and how much of its end to hold back */
static long find_stop(const text_state *s, const ck_generate_opts *o, size_t *hold)
{
    long found = -1;
    int k;
    size_t from = s->emitted > s->max_stop ? s->emitted - s->max_stop : 0, i, h = 0;
    for (k = 0; k < o->n_stop; k++) {
        size_t L = strlen(o->stop[k]);
        if (!L) continue;
        for (i = from; i + L <= s->n; i++)
            if (memcmp(s->gen + i, o->stop[k], L) == 0 && (found < 0 || (long)i < found)) {
                found = (long)i;
                break;
            }
        /* the longest end of the text that starts this stop string */
        for (i = L - 1; i > h; i--)
            if (i <= s->n - s->emitted && memcmp(s->gen + s->n - i, o->stop[k], i) == 0) {
                h = i;
                break;
            }
    }
    *hold = h;
    return found;
}

int ck_generate(ck_model *m, const ck_tokenizer *tok, const int32_t *prompt, int n_prompt, const ck_generate_opts *o,
                int32_t *out, int cap, ck_token_callback fn, void *user, ck_generate_result *result)
{
    ck_generate_result r;
    ck_sampler *s = NULL;
    int32_t *hist = NULL;
    int ctx, room, rc = 0, i, n_hist = 0, k;
    int vocab;
    text_state ts;
    ck_token_stream st;
    char piece[512];
    double t0;
    memset(&r, 0, sizeof r);
    memset(&ts, 0, sizeof ts);
    ck_token_stream_reset(&st);
    if (!m || !o || n_prompt < 0 || (n_prompt > 0 && !prompt) || o->max_new_tokens < 0 || cap < 0 || (cap && !out) ||
        o->n_stop < 0 || (o->n_stop && !o->stop))
        return ck_error_set(CK_EINVAL, "ck_generate: a NULL handle / options or a negative count");
    if (o->n_stop && !tok) return ck_error_set(CK_EINVAL, "ck_generate: stop strings need a tokenizer");
    for (k = 0; k < o->n_stop; k++)
        if (!o->stop[k]) return ck_error_set(CK_EINVAL, "ck_generate: stop string %d is NULL", k);
    vocab = ck_model_get_vocab_size(m);
    ctx = ck_model_get_context_length(m);
    for (i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= vocab)
            return ck_error_set(CK_EINVAL, "ck_generate: prompt token %d is %ld, outside 0..%d", i, (long)prompt[i],
                                vocab - 1);
    if (o->keep_cache) {
        int held = ck_model_kv_cache_get_tokens(m), capacity = ck_model_kv_cache_get_capacity(m);
        if (held < 0 || capacity <= 0)
            return ck_error_set(CK_ESTATE, "ck_generate: keep_cache needs the KV cache on (ck_model_kv_cache_enable)");
        if (n_prompt == 0 && held == 0) return ck_error_set(CK_EINVAL, "ck_generate: an empty prompt and an empty cache");
        if (held + n_prompt > capacity)
            return ck_error_set(CK_ERANGE, "ck_generate: the KV cache holds %d of %d tokens; the %d-token prompt does not fit",
                                held, capacity, n_prompt);
        room = capacity - held - n_prompt;
    } else {
        if (n_prompt == 0) return ck_error_set(CK_EINVAL, "ck_generate: the prompt is empty (it needs at least one token)");
        if (n_prompt > ctx)
            return ck_error_set(CK_ERANGE, "ck_generate: the prompt has %d tokens, the context holds %d", n_prompt, ctx);
        k = n_prompt + o->max_new_tokens;
        if ((rc = ck_model_kv_cache_enable(m, k < ctx ? k : ctx)) != 0) return rc;
        room = (k < ctx ? k : ctx) - n_prompt;
    }
    s = ck_sampler_new(&o->sampling, vocab);
    hist = (int32_t *)malloc(((size_t)n_prompt + (size_t)o->max_new_tokens + 1) * sizeof *hist);
    if (!s || !hist) {
        rc = s ? ck_error_set(CK_ENOMEM, "ck_generate: out of memory")
               : ck_error_set(CK_EINVAL, "ck_generate: bad sampling parameters (top_p in (0, 1], min_p in [0, 1], "
                                         "top_k >= 0, repeat_penalty > 0, repeat_last_n >= 0)");
        goto done;
    }
    for (k = 0; k < o->n_stop; k++)
        if (strlen(o->stop[k]) > ts.max_stop) ts.max_stop = strlen(o->stop[k]);
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    n_hist = n_prompt;
    r.n_prompt = n_prompt;
    t0 = now_seconds();
    if (n_prompt > 0) {
        /* in parts of the most tokens one call takes (a static build's --max-tokens); the KV cache joins them */
        int part = ck_model_get_max_tokens(m), at;
        if (part < 1) part = n_prompt;
        if ((rc = ck_model_set_logits_all(m, 0)) != 0) goto done;
        for (at = 0; at < n_prompt; at += part) {
            int n = n_prompt - at < part ? n_prompt - at : part;
            if ((rc = ck_model_embed_tokens(m, prompt + at, n)) != 0 || (rc = ck_model_forward(m)) != 0) goto done;
        }
    } else if (!ck_model_get_logits(m)) {
        rc = ck_error_set(CK_ESTATE, "ck_generate: no prompt and no logits to continue from");
        goto done;
    }
    r.prefill_seconds = now_seconds() - t0;
    t0 = now_seconds();
    r.stop = CK_STOP_LENGTH;
    for (i = 0; i < o->max_new_tokens; i++) {
        int32_t next = ck_sampler_sample(s, ck_model_get_logits(m), hist, n_hist);
        int stop_now = 0;
        if (!o->ignore_eos && tok && ck_tokenizer_is_eog(tok, next)) {
            r.stop = CK_STOP_EOG;
            break;
        }
        if (r.n_new < cap) out[r.n_new] = next;
        r.n_new++;
        hist[n_hist++] = next;
        if (tok) {
            long n = ck_token_stream_push(tok, &st, next, 1, piece, (long)sizeof piece);
            size_t hold = 0;
            long at;
            if (n > (long)sizeof piece - 1) { /* a long piece: nothing was consumed, so again with room for it */
                char *big = (char *)malloc((size_t)n + 1);
                n = big ? ck_token_stream_push(tok, &st, next, 1, big, n + 1) : CK_ENOMEM;
                if (n > 0) rc = text_append(&ts, big, (size_t)n);
                free(big);
                if (n < 0 || rc) {
                    rc = ck_error_set(CK_ENOMEM, "ck_generate: out of memory");
                    goto done;
                }
                n = 0;
            }
            if (n > 0 && (rc = text_append(&ts, piece, (size_t)n)) != 0) {
                rc = ck_error_set(rc, "ck_generate: out of memory");
                goto done;
            }
            at = o->n_stop ? find_stop(&ts, o, &hold) : -1;
            if (at >= 0) {
                if (fn && (size_t)at > ts.emitted) fn(user, next, ts.gen + ts.emitted, (size_t)at - ts.emitted);
                ts.emitted = (size_t)at;
                r.stop = CK_STOP_STRING;
                break;
            }
            if (fn) stop_now = fn(user, next, ts.gen + ts.emitted, ts.n - hold - ts.emitted);
            ts.emitted = ts.n - hold;
        } else if (fn) {
            stop_now = fn(user, next, NULL, 0);
        }
        if (stop_now) {
            r.stop = CK_STOP_CALLBACK;
            break;
        }
        if (i + 1 == o->max_new_tokens) break;
        if (room <= 0) {
            r.stop = CK_STOP_CONTEXT;
            break;
        }
        if ((rc = ck_model_decode(m, next)) != 0) goto done;
        room--;
    }
    if (tok && fn && r.stop != CK_STOP_STRING) { /* what was held back, and a character cut short */
        long n = ck_token_stream_flush(&st, piece, (long)sizeof piece);
        if (n > 0) text_append(&ts, piece, (size_t)n);
        if (ts.n > ts.emitted) fn(user, -1, ts.gen + ts.emitted, ts.n - ts.emitted);
    }
    r.decode_seconds = now_seconds() - t0;
done:
    if (!o->keep_cache) ck_model_kv_cache_disable(m);
    ck_sampler_free(s);
    free(hist);
    free(ts.gen);
    if (result) *result = r;
    return rc;
}
