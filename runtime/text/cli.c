/*
 * cli.c — the executable a model.c becomes with -DCK_MODEL_MAIN (its main() calls ck_model_cli):
 *
 *   ./model WEIGHTS --prompt "Write a haiku about C compilers." -n 64     text in, streamed text out
 *   ./model WEIGHTS --chat                                                interactive, the KV cache kept
 *   ./model WEIGHTS -n 16 1 2 3                                           token ids in, ids out (greedy)
 *   ./model WEIGHTS --logits 1 2 3                                        the logits of every position
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_generate.h"
#include "ck_model.h"

int ck_model_cli(int argc, char **argv);

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s WEIGHTS [options] [--prompt TEXT | --chat | TOKEN...]\n"
            "  WEIGHTS             model folder, .safetensors, *.index.json or .gguf (the tokenizer is read from\n"
            "                      beside it: tokenizer.json / tokenizer.model, or the GGUF's metadata); @embedded:\n"
            "                      the weights compiled into this program (ckc compile --embed-weights)\n"
            "  --prompt TEXT       generate from TEXT, streaming text; an instruct model's chat template wraps it\n"
            "                      as one user message (--raw: feed TEXT as it is)\n"
            "  --chat              interactive chat on stdin (/reset starts over, /exit or EOF ends); the KV cache is\n"
            "                      reused across turns\n"
            "  --system TEXT       system prompt for --prompt / --chat\n"
            "  TOKEN...            token ids: prints the ids of the prompt and the generated tokens\n"
            "  --logits            with token ids: print the logits of every position instead (one row per line,\n"
            "                      %%.9g; what the tests compare across builds and CPUs)\n"
            "  -n N                tokens to generate (default 16 for ids, 256 for text)\n"
            "  -t N                threads (default: all cores)\n"
            "  --temp T            temperature (default 0: greedy)   --seed S   (default 0)\n"
            "  --top-k K  --top-p P  --min-p P  --repeat-penalty R (over the last 64 tokens)\n"
            "  --stop STR          stop when STR appears (repeatable)   --ignore-eos   keep going past end of text\n",
            prog);
}

typedef struct printer {
    int printed;
} printer;

static int print_text(void *user, int32_t token, const char *text, size_t len)
{
    (void)token;
    if (text && len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        ((printer *)user)->printed = 1;
    }
    return 0;
}

static const char *stop_name(int s)
{
    static const char *names[] = {"length", "end of turn", "stop string", "callback", "context full"};
    return s >= 0 && s <= 4 ? names[s] : "?";
}

static void report(const ck_generate_result *r)
{
    fprintf(stderr, "\n[prompt %d tokens, %.1f tok/s; generated %d tokens, %.1f tok/s; stop: %s]\n", r->n_prompt,
            r->prefill_seconds > 0 ? r->n_prompt / r->prefill_seconds : 0.0, r->n_new,
            r->decode_seconds > 0 && r->n_new > 1 ? (r->n_new - 1) / r->decode_seconds : 0.0, stop_name(r->stop));
}

/* the logits of every position of `ids`, one row per line */
static int print_logits(ck_model *m, const int32_t *ids, int n)
{
    const float *l;
    int t, v, V = ck_model_get_vocab_size(m);
    if (ck_model_set_logits_all(m, 1) != 0 || ck_model_embed_tokens(m, ids, n) != 0 || ck_model_forward(m) != 0 ||
        !(l = ck_model_get_logits(m))) {
        fprintf(stderr, "error: %s\n", ck_last_error());
        return 1;
    }
    for (t = 0; t < n; t++) {
        for (v = 0; v < V; v++) printf(v ? " %.9g" : "%.9g", (double)l[(size_t)t * V + v]);
        printf("\n");
    }
    return 0;
}

/* the conversation so far, rendered and tokenized */
typedef struct convo {
    ck_chat_message *msg;
    int n;
    int32_t *ids; /* what the KV cache holds, in order */
    int n_ids;
} convo;

static int32_t *encode_all(const ck_tokenizer *tok, const char *text, int add_special, int *n)
{
    long k = ck_tokenizer_encode(tok, text, strlen(text), add_special, NULL, 0);
    int32_t *ids;
    if (k < 0) return NULL;
    ids = (int32_t *)malloc(((size_t)k + 1) * sizeof *ids);
    if (ids) ck_tokenizer_encode(tok, text, strlen(text), add_special, ids, k);
    *n = (int)k;
    return ids;
}

static char *render(const ck_tokenizer *tok, const ck_chat_message *msgs, int n)
{
    const char *tmpl = ck_tokenizer_chat_template(tok);
    size_t bl = 0, el = 0;
    const char *bp = ck_tokenizer_piece(tok, ck_tokenizer_bos(tok), &bl), *ep = ck_tokenizer_piece(tok, ck_tokenizer_eos(tok), &el);
    char bos[256] = "", eos[256] = "", err[256];
    long k;
    char *out;
    if (bp) snprintf(bos, sizeof bos, "%.*s", (int)bl, bp);
    if (ep) snprintf(eos, sizeof eos, "%.*s", (int)el, ep);
    k = ck_chat_render(tmpl, msgs, n, 1, bos, eos, NULL, 0, err, sizeof err);
    if (k < 0) {
        fprintf(stderr, "error: chat template: %s\n", err);
        return NULL;
    }
    out = (char *)malloc((size_t)k + 1);
    if (out) ck_chat_render(tmpl, msgs, n, 1, bos, eos, out, k + 1, err, sizeof err);
    return out;
}

/* one turn: the new conversation's tokens after what the cache already holds, then generation */
static int chat_turn(ck_model *m, const ck_tokenizer *tok, convo *c, const ck_generate_opts *o, char **reply)
{
    char *text = render(tok, c->msg, c->n);
    int n = 0, p = 0, rc, held;
    int32_t *ids, *out, *grown;
    ck_generate_result r;
    if (!text) return -1;
    ids = encode_all(tok, text, 0, &n);
    free(text);
    if (!ids) return -1;
    while (p < n && p < c->n_ids && ids[p] == c->ids[p]) p++;
    if (p == n) p--; /* at least one token to run */
    if (ck_model_kv_cache_truncate(m, p) != 0) {
        free(ids);
        return -1;
    }
    out = (int32_t *)malloc(((size_t)o->max_new_tokens + 1) * sizeof *out);
    grown = (int32_t *)realloc(c->ids, ((size_t)n + (size_t)o->max_new_tokens + 1) * sizeof *c->ids);
    if (!out || !grown) {
        free(ids);
        free(out);
        return -1;
    }
    c->ids = grown;
    memcpy(c->ids, ids, (size_t)n * sizeof *ids);
    {
        printer pr = {0};
        rc = ck_generate(m, tok, ids + p, n - p, o, out, o->max_new_tokens, print_text, &pr, &r);
    }
    free(ids);
    if (rc != 0) {
        fprintf(stderr, "\nerror: %s\n", ck_last_error());
        free(out);
        return -1;
    }
    memcpy(c->ids + n, out, (size_t)r.n_new * sizeof *out);
    held = ck_model_kv_cache_get_tokens(m);
    c->n_ids = held < n + r.n_new ? held : n + r.n_new;
    {
        long k = ck_tokenizer_decode(tok, out, r.n_new, 1, NULL, 0);
        *reply = (char *)malloc((size_t)(k > 0 ? k : 0) + 1);
        if (*reply) ck_tokenizer_decode(tok, out, r.n_new, 1, *reply, k + 1);
    }
    free(out);
    report(&r);
    return *reply ? 0 : -1;
}

static int add_message(convo *c, const char *role, const char *content)
{
    ck_chat_message *grown = (ck_chat_message *)realloc(c->msg, (size_t)(c->n + 1) * sizeof *c->msg);
    char *copy = (char *)malloc(strlen(content) + 1);
    if (!grown || !copy) {
        free(copy);
        if (grown) c->msg = grown;
        return -1;
    }
    strcpy(copy, content);
    c->msg = grown;
    c->msg[c->n].role = role;
    c->msg[c->n].content = copy;
    c->n++;
    return 0;
}

static void clear_convo(convo *c, int keep_system)
{
    int i;
    for (i = keep_system; i < c->n; i++) free((char *)c->msg[i].content);
    c->n = keep_system;
    c->n_ids = 0;
}

static char *read_line(FILE *f)
{
    size_t cap = 256, n = 0;
    char *s = (char *)malloc(cap);
    int ch;
    if (!s) return NULL;
    while ((ch = fgetc(f)) != EOF && ch != '\n') {
        if (n + 2 > cap) {
            char *g = (char *)realloc(s, cap *= 2);
            if (!g) { free(s); return NULL; }
            s = g;
        }
        s[n++] = (char)ch;
    }
    if (ch == EOF && n == 0) { free(s); return NULL; }
    s[n] = 0;
    return s;
}

static int run_chat(ck_model *m, const ck_tokenizer *tok, const char *system, const char *first, const ck_generate_opts *go)
{
    convo c = {0, 0, 0, 0};
    ck_generate_opts o = *go;
    int keep_system = 0, rc = 0, interactive = first == NULL;
    o.keep_cache = 1;
    if (ck_model_kv_cache_enable(m, ck_model_get_context_length(m)) != 0) {
        fprintf(stderr, "error: %s\n", ck_last_error());
        return 1;
    }
    if (system && system[0]) {
        if (add_message(&c, "system", system)) return 1;
        keep_system = 1;
    }
    for (;;) {
        char *line, *reply = NULL;
        if (interactive) {
            fprintf(stderr, "> ");
            fflush(stderr);
            line = read_line(stdin);
            if (!line || strcmp(line, "/exit") == 0) { free(line); break; }
            if (strcmp(line, "/reset") == 0) {
                clear_convo(&c, keep_system);
                ck_model_kv_cache_reset(m);
                free(line);
                continue;
            }
            if (!line[0]) { free(line); continue; }
        } else {
            line = (char *)malloc(strlen(first) + 1);
            if (!line) return 1;
            strcpy(line, first);
        }
        if (add_message(&c, "user", line)) rc = 1;
        free(line);
        if (!rc && chat_turn(m, tok, &c, &o, &reply) != 0) rc = 1;
        if (!rc) {
            printf("\n");
            fflush(stdout);
            rc = add_message(&c, "assistant", reply) ? 1 : 0;
        }
        free(reply);
        if (rc || !interactive) break;
        if (ck_model_kv_cache_get_tokens(m) >= ck_model_get_context_length(m) - 1) {
            fprintf(stderr, "note: the context is full; starting over\n");
            clear_convo(&c, keep_system);
            ck_model_kv_cache_reset(m);
        }
    }
    clear_convo(&c, 0);
    free(c.msg);
    free(c.ids);
    return rc;
}

int ck_model_cli(int argc, char **argv)
{
    ck_generate_opts o;
    const char *weights, *prompt = NULL, *system = NULL;
    const char **stops;
    int threads = 0, n = -1, chat = 0, raw = 0, logits = 0, i, n_ids = 0, rc = 0;
    int32_t *ids;
    ck_model *m;
    const ck_tokenizer *tok;
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argv[0]);
        return argc < 2 ? 2 : 0;
    }
    weights = argv[1];
    ck_generate_opts_default(&o);
    ids = (int32_t *)malloc(sizeof *ids * (size_t)argc);
    stops = (const char **)malloc(sizeof *stops * (size_t)argc);
    if (!ids || !stops) return 1;
    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE() \
    if (!v) { fprintf(stderr, "error: %s needs a value\n", a); free(ids); free(stops); return 2; } i++
        if (strcmp(a, "-n") == 0) { VALUE(); n = atoi(v); }
        else if (strcmp(a, "-t") == 0) { VALUE(); threads = atoi(v); }
        else if (strcmp(a, "--prompt") == 0 || strcmp(a, "-p") == 0) { VALUE(); prompt = v; }
        else if (strcmp(a, "--system") == 0) { VALUE(); system = v; }
        else if (strcmp(a, "--temp") == 0) { VALUE(); o.sampling.temperature = (float)atof(v); }
        else if (strcmp(a, "--top-k") == 0) { VALUE(); o.sampling.top_k = atoi(v); }
        else if (strcmp(a, "--top-p") == 0) { VALUE(); o.sampling.top_p = (float)atof(v); }
        else if (strcmp(a, "--min-p") == 0) { VALUE(); o.sampling.min_p = (float)atof(v); }
        else if (strcmp(a, "--repeat-penalty") == 0) { VALUE(); o.sampling.repeat_penalty = (float)atof(v); }
        else if (strcmp(a, "--seed") == 0) { VALUE(); o.sampling.seed = strtoull(v, NULL, 10); }
        else if (strcmp(a, "--stop") == 0) { VALUE(); stops[o.n_stop++] = v; }
        else if (strcmp(a, "--chat") == 0) chat = 1;
        else if (strcmp(a, "--raw") == 0) raw = 1;
        else if (strcmp(a, "--logits") == 0) logits = 1;
        else if (strcmp(a, "--ignore-eos") == 0) o.ignore_eos = 1;
        else if (a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
            fprintf(stderr, "error: unknown option %s (--help lists them)\n", a);
            free(ids);
            free(stops);
            return 2;
        } else {
            char *end;
            long id = strtol(a, &end, 10);
            if (*end || end == a) {
                fprintf(stderr, "error: \"%s\" is not a token id (text goes after --prompt)\n", a);
                free(ids);
                free(stops);
                return 2;
            }
            ids[n_ids++] = (int32_t)id;
        }
#undef VALUE
    }
    o.stop = stops;
    if ((prompt != NULL) + (chat != 0) + (n_ids > 0) != 1) {
        fprintf(stderr, "error: give exactly one of --prompt TEXT, --chat, or token ids\n");
        free(ids);
        free(stops);
        return 2;
    }
    if (logits && !n_ids) {
        fprintf(stderr, "error: --logits prints the logits of token ids: give the ids\n");
        free(ids);
        free(stops);
        return 2;
    }
    if (n < -1) {
        fprintf(stderr, "error: -n %d: the token count must be >= 0\n", n);
        free(ids);
        free(stops);
        return 2;
    }
    o.max_new_tokens = n >= 0 ? n : n_ids ? 16 : 256;
    m = ck_model_init(strcmp(weights, "@embedded") == 0 ? NULL : weights);
    if (!m) {
        fprintf(stderr, "error: %s\n", ck_last_error());
        free(ids);
        free(stops);
        return 1;
    }
    tok = ck_model_get_tokenizer(m);
    if (!tok && !strstr(ck_model_get_tokenizer_error(m), "no tokenizer"))
        fprintf(stderr, "warning: the tokenizer did not load: %s\n", ck_model_get_tokenizer_error(m));
    if (ck_model_set_threads(m, threads) != 0) {
        fprintf(stderr, "error: %s\n", ck_last_error());
        rc = 1;
    } else if (logits) {
        rc = print_logits(m, ids, n_ids);
    } else if (n_ids > 0) { /* ids in, ids out, greedy unless asked otherwise; EOS does not stop it */
        ck_generate_result r;
        int32_t *out = (int32_t *)malloc(((size_t)o.max_new_tokens + 1) * sizeof *out);
        o.ignore_eos = 1;
        if (n_ids + o.max_new_tokens > ck_model_get_context_length(m) && n_ids < ck_model_get_context_length(m)) {
            fprintf(stderr, "note: the context holds %d tokens: generating %d new tokens, not %d\n",
                    ck_model_get_context_length(m), ck_model_get_context_length(m) - n_ids, o.max_new_tokens);
            o.max_new_tokens = ck_model_get_context_length(m) - n_ids;
        }
        if (!out || ck_generate(m, NULL, ids, n_ids, &o, out, o.max_new_tokens, NULL, NULL, &r) != 0) {
            fprintf(stderr, "error: %s\n", out ? ck_last_error() : "out of memory");
            rc = 1;
        } else {
            for (i = 0; i < n_ids; i++) printf("%ld ", (long)ids[i]);
            for (i = 0; i < r.n_new; i++) printf("%ld ", (long)out[i]);
            printf("\n");
            if (r.prefill_seconds > 0) fprintf(stderr, "prefill: %.1f tok/s\n", n_ids / r.prefill_seconds);
            if (r.n_new > 1) fprintf(stderr, "decode: %.1f tok/s\n", (r.n_new - 1) / r.decode_seconds);
        }
        free(out);
    } else if (!tok) {
        fprintf(stderr, "error: no tokenizer for text: %s\n(token ids still work: %s WEIGHTS 1 2 3)\n",
                ck_model_get_tokenizer_error(m), argv[0]);
        rc = 1;
    } else if (chat || (!raw && ck_chat_format_name(ck_tokenizer_chat_template(tok)))) {
        rc = run_chat(m, tok, system, chat ? NULL : prompt, &o);
    } else { /* plain text completion */
        int np = 0;
        ck_generate_result r;
        int32_t *p = encode_all(tok, prompt, 1, &np);
        printer pr = {0};
        if (!p || np == 0) {
            fprintf(stderr, "error: the prompt is empty\n");
            rc = 1;
        } else if ((fputs(prompt, stdout), fflush(stdout), 0)) {
        } else if (ck_generate(m, tok, p, np, &o, NULL, 0, print_text, &pr, &r) != 0) {
            fprintf(stderr, "\nerror: %s\n", ck_last_error());
            rc = 1;
        } else {
            printf("\n");
            report(&r);
        }
        free(p);
    }
    ck_model_free(m);
    free(ids);
    free(stops);
    return rc;
}
