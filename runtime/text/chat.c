/*
 * chat.c — the supported families' chat templates (ck_generate.h), each written out in C from its Jinja
 * source, the way llama.cpp's llm_chat_apply_template does: a model's template is recognized by its
 * markers, then rendered with the same string operations (trim where the Jinja trims, the same role checks
 * and messages). tests/python/test_chat.py compares every format with transformers' apply_chat_template.
 */
#define _POSIX_C_SOURCE 200809L /* localtime_r */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_errors.h"
#include "ck_generate.h"

typedef struct sb {
    char *out;
    long cap, n;
} sb;

static void put(sb *b, const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++, b->n++)
        if (b->n < b->cap - 1) b->out[b->n] = s[i];
}

static void puts_(sb *b, const char *s) { put(b, s, strlen(s)); }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Jinja's trim / Python's strip() (ASCII whitespace) */
static void put_trimmed(sb *b, const char *s)
{
    size_t n = strlen(s), a = 0;
    while (a < n && is_ws(s[a])) a++;
    while (n > a && is_ws(s[n - 1])) n--;
    put(b, s + a, n - a);
}

static long chat_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *ck_chat_format_name(const char *t)
{
    if (!t) return NULL;
    if (strstr(t, "<|im_start|>") && strstr(t, "</think>") && strstr(t, "last_query_index")) return "qwen3";
    if (strstr(t, "<|im_start|>") && strstr(t, "Reasoning Mode: ") && strstr(t, "/no_think")) return "smollm3";
    if (strstr(t, "<|im_start|>")) return "chatml";
    if (strstr(t, "<|start_header_id|>")) return "llama3";
    if (strstr(t, "<start_of_turn>") && strstr(t, "first_user_prefix")) return "gemma3";
    if (strstr(t, "<start_of_turn>")) return "gemma";
    if (strstr(t, "<|assistant|>") && strstr(t, "<|end|>")) return "phi3";
    if (strstr(t, "[INST]") && strstr(t, "<<SYS>>")) return "llama2";
    if (strstr(t, "[INST]")) return "mistral";
    return NULL;
}

/* ChatML's default system prompt, when the template writes one for conversations without a system
 * message: the literal between "<|im_start|>system\n" and "<|im_end|>" (Jinja escapes undone). */
static char *chatml_default_system(const char *t)
{
    const char *p = strstr(t, "<|im_start|>system"), *end;
    char *s;
    size_t i, k = 0;
    if (!p) return NULL;
    p += strlen("<|im_start|>system");
    if (*p == '\n') p++;
    else if (p[0] == '\\' && p[1] == 'n') p += 2;
    else return NULL;
    end = strstr(p, "<|im_end|>");
    if (!end) return NULL;
    for (i = 0; p + i < end; i++)
        if (p[i] == '{' || p[i] == '}' || p[i] == '+' || p[i] == '\'' || p[i] == '"') return NULL; /* not a literal */
    s = (char *)malloc((size_t)(end - p) + 1);
    if (!s) return NULL;
    for (i = 0; p + i < end; i++) {
        if (p[i] == '\\' && p + i + 1 < end) {
            char c = p[++i];
            s[k++] = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
            s[k++] = p[i];
        }
    }
    s[k] = 0;
    return s;
}

/* s[a, n) without the '\n's Python's strip('\n') / lstrip('\n') / rstrip('\n') take off */
static void put_nl_stripped(sb *b, const char *s, size_t n, int left, int right)
{
    size_t a = 0;
    while (left && a < n && s[a] == '\n') a++;
    while (right && n > a && s[n - 1] == '\n') n--;
    put(b, s + a, n - a);
}

/* Qwen3's assistant turn: the reasoning (between <think> and the first </think>) and the answer (after the last
 * </think>) split as its template does; the reasoning shown only after the last user message, where the last
 * message always shows its <think> block, empty or not. */
static void qwen3_assistant(sb *b, const char *content, int after_last_query, int last)
{
    const char *first_end = strstr(content, "</think>"), *answer = content, *p, *r = "";
    size_t rn = 0;
    if (first_end) {
        const char *open = content, *q;
        for (p = first_end; (q = strstr(p + 1, "</think>")); p = q) {}
        answer = p + strlen("</think>");
        for (q = content; (q = strstr(q, "<think>")) && q < first_end; q += strlen("<think>"))
            open = q + strlen("<think>");
        r = open, rn = (size_t)(first_end - open);
        while (rn && r[rn - 1] == '\n') rn--; /* .rstrip('\n') before the split, .lstrip('\n') after */
        while (rn && *r == '\n') r++, rn--;
        while (*answer == '\n') answer++;
    }
    puts_(b, "<|im_start|>assistant\n");
    if (after_last_query && (last || rn)) {
        puts_(b, "<think>\n");
        put_nl_stripped(b, r, rn, 1, 1);
        puts_(b, "\n</think>\n\n");
        put_nl_stripped(b, answer, strlen(answer), 1, 0);
    } else {
        puts_(b, answer);
    }
    puts_(b, "<|im_end|>\n");
}

/* a ChatML turn: <|im_start|>role\ncontent<|im_end|>\n */
static void chatml_turn(sb *b, const char *role, const char *content)
{
    puts_(b, "<|im_start|>");
    puts_(b, role);
    puts_(b, "\n");
    puts_(b, content);
    puts_(b, "<|im_end|>\n");
}

/* s with every occurrence of each of the n words removed (Python's str.replace(w, "") in order), then
 * .rstrip() (ASCII whitespace); malloc'd */
static char *without_words(const char *s, const char *const *words, int n)
{
    size_t len = strlen(s);
    char *out = (char *)malloc(len + 1), *tmp;
    int w;
    if (!out) return NULL;
    memcpy(out, s, len + 1);
    for (w = 0; w < n; w++) {
        size_t wl = strlen(words[w]), k = 0;
        const char *p = out, *q;
        if (!(tmp = (char *)malloc(strlen(out) + 1))) {
            free(out);
            return NULL;
        }
        while ((q = strstr(p, words[w]))) {
            memcpy(tmp + k, p, (size_t)(q - p));
            k += (size_t)(q - p);
            p = q + wl;
        }
        strcpy(tmp + k, p);
        free(out);
        out = tmp;
    }
    for (len = strlen(out); len && is_ws(out[len - 1]); len--) out[len - 1] = 0;
    return out;
}

/* SmolLM3's template: a system block with metadata and the reasoning mode ("/think" unless the system message
 * says "/no_think"), custom instructions (the system message without its flags, or a default per mode); user
 * turns in ChatML; assistant turns with an empty <think> block in /no_think mode. Its published variants differ
 * by what the template holds: a "Today Date" line (strftime_now: local time, as transformers renders it), a
 * "Tools" section (empty: ckc passes no tools), and "/system_override" (the system message verbatim). */
static int smollm3_render(sb *b, const char *tmpl, const ck_chat_message *msgs, int n, int add_generation_prompt)
{
    static const char *const flags[] = {"/no_think", "/think"};
    static const char *const override_flag[] = {"/system_override"};
    const char *system = n > 0 && strcmp(msgs[0].role, "system") == 0 ? msgs[0].content : NULL;
    int think = !(system && strstr(system, "/no_think")), i;
    char *custom = system ? without_words(system, flags, 2) : NULL;
    if (system && !custom) return CK_ENOMEM;
    puts_(b, "<|im_start|>system\n");
    if (system && strstr(tmpl, "/system_override") && strstr(system, "/system_override")) {
        char *text = without_words(custom, override_flag, 1);
        if (!text) {
            free(custom);
            return CK_ENOMEM;
        }
        puts_(b, text);
        free(text);
    } else {
        puts_(b, "## Metadata\n\nKnowledge Cutoff Date: June 2025\n");
        if (strstr(tmpl, "strftime_now")) {
            char date[64];
            time_t now = time(NULL);
            struct tm tm_now;
            if (!localtime_r(&now, &tm_now) || !strftime(date, sizeof date, "%d %B %Y", &tm_now)) date[0] = 0;
            puts_(b, "Today Date: ");
            puts_(b, date);
            puts_(b, "\n");
        }
        puts_(b, think ? "Reasoning Mode: /think\n\n" : "Reasoning Mode: /no_think\n\n");
        puts_(b, "## Custom Instructions\n\n");
        if (custom && custom[0]) puts_(b, custom);
        else if (think)
            puts_(b, "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant "
                     "involves thoroughly exploring questions through a systematic thinking process before providing the "
                     "final precise and accurate solutions. This requires engaging in a comprehensive cycle of analysis, "
                     "summarizing, exploration, reassessment, reflection, backtracking, and iteration to develop "
                     "well-considered thinking process. Please structure your response into two main sections: Thought "
                     "and Solution using the specified format: <think> Thought section </think> Solution section. In the "
                     "Thought section, detail your reasoning process in steps. Each step should include detailed "
                     "considerations such as analysing questions, summarizing relevant findings, brainstorming new ideas, "
                     "verifying the accuracy of the current steps, refining any errors, and revisiting previous steps. In "
                     "the Solution section, based on various attempts, explorations, and reflections from the Thought "
                     "section, systematically present the final solution that you deem correct. The Solution section "
                     "should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion.");
        else puts_(b, "You are a helpful AI assistant named SmolLM, trained by Hugging Face.");
        puts_(b, "\n\n");
        if (strstr(tmpl, "### XML Tools")) puts_(b, "## Tools\n\n### XML Tools\n\nNone\n\n### Python Tools\n\nNone\n\n");
    }
    puts_(b, "<|im_end|>\n");
    free(custom);
    for (i = 0; i < n; i++) {
        if (strcmp(msgs[i].role, "user") == 0) {
            chatml_turn(b, "user", msgs[i].content);
        } else if (strcmp(msgs[i].role, "assistant") == 0) {
            puts_(b, think ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n");
            put_nl_stripped(b, msgs[i].content, strlen(msgs[i].content), 1, 0);
            puts_(b, "<|im_end|>\n");
        } /* the system message is the header's */
    }
    if (add_generation_prompt) puts_(b, think ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n");
    return 0;
}

static int known_role(const char *r)
{
    return r && (strcmp(r, "system") == 0 || strcmp(r, "user") == 0 || strcmp(r, "assistant") == 0);
}

long ck_chat_render(const char *tmpl, const ck_chat_message *msgs, int n, int add_generation_prompt, const char *bos,
                    const char *eos, char *out, long cap, char *err, size_t errlen)
{
    const char *fmt = ck_chat_format_name(tmpl);
    sb b;
    int i, first = 0;
    if (err && errlen) err[0] = 0;
    if (!tmpl) return chat_fail(err, errlen, CK_ENOTSUP, "the model has no chat template");
    if (!fmt)
        return chat_fail(err, errlen, CK_ENOTSUP, "the chat template is not one ckc knows (ChatML, Qwen3, SmolLM3, Llama-2, "
                                             "Llama-3, Mistral, Gemma, Gemma 3, Phi-3)");
    if (n < 0 || (n && !msgs) || cap < 0 || (cap && !out)) return chat_fail(err, errlen, CK_EINVAL, "bad arguments");
    if (n == 0) return chat_fail(err, errlen, CK_EINVAL, "no messages (an empty conversation)");
    for (i = 0; i < n; i++) {
        if (!known_role(msgs[i].role))
            return chat_fail(err, errlen, CK_EINVAL, "message %d: role \"%s\" is not system, user or assistant", i,
                        msgs[i].role ? msgs[i].role : "(null)");
        if (!msgs[i].content) return chat_fail(err, errlen, CK_EINVAL, "message %d: content is NULL", i);
    }
    bos = bos ? bos : "";
    eos = eos ? eos : "";
    b.out = out, b.cap = cap, b.n = 0;
    if (strcmp(fmt, "smollm3") == 0) {
        int rc = smollm3_render(&b, tmpl, msgs, n, add_generation_prompt);
        if (rc) return chat_fail(err, errlen, rc, "out of memory");
    } else if (strcmp(fmt, "qwen3") == 0) { /* ChatML with no default system prompt, and <think> blocks */
        int last_query = n - 1;
        for (i = n - 1; i >= 0; i--)
            if (strcmp(msgs[i].role, "user") == 0) {
                last_query = i;
                break;
            }
        for (i = 0; i < n; i++) {
            if (strcmp(msgs[i].role, "assistant") == 0) qwen3_assistant(&b, msgs[i].content, i > last_query, i == n - 1);
            else chatml_turn(&b, msgs[i].role, msgs[i].content);
        }
        if (add_generation_prompt) puts_(&b, "<|im_start|>assistant\n");
    } else if (strcmp(fmt, "chatml") == 0) {
        if (n > 0 && strcmp(msgs[0].role, "system") != 0) {
            char *sys = chatml_default_system(tmpl);
            if (sys) {
                chatml_turn(&b, "system", sys);
                free(sys);
            }
        }
        for (i = 0; i < n; i++) chatml_turn(&b, msgs[i].role, msgs[i].content);
        if (add_generation_prompt) puts_(&b, "<|im_start|>assistant\n");
    } else if (strcmp(fmt, "llama3") == 0) {
        for (i = 0; i < n; i++) {
            if (i == 0) puts_(&b, bos);
            puts_(&b, "<|start_header_id|>");
            puts_(&b, msgs[i].role);
            puts_(&b, "<|end_header_id|>\n\n");
            put_trimmed(&b, msgs[i].content);
            puts_(&b, "<|eot_id|>");
        }
        if (add_generation_prompt) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else if (strcmp(fmt, "phi3") == 0) {
        for (i = 0; i < n; i++) {
            puts_(&b, strcmp(msgs[i].role, "system") == 0 ? "<|system|>\n"
                      : strcmp(msgs[i].role, "user") == 0 ? "<|user|>\n" : "<|assistant|>\n");
            puts_(&b, msgs[i].content);
            puts_(&b, "<|end|>\n");
        }
        puts_(&b, add_generation_prompt ? "<|assistant|>\n" : eos);
    } else { /* llama2, mistral, gemma, gemma3: user / assistant alternate */
        const char *sys = NULL;
        int gemma = strcmp(fmt, "gemma") == 0 || strcmp(fmt, "gemma3") == 0;
        if (n > 0 && strcmp(msgs[0].role, "system") == 0) {
            if (strcmp(fmt, "gemma") == 0) return chat_fail(err, errlen, CK_EINVAL, "System role not supported");
            if (strcmp(fmt, "llama2") == 0 || strcmp(fmt, "gemma3") == 0) sys = msgs[0].content, first = 1;
        }
        if (strcmp(fmt, "llama2") != 0) puts_(&b, bos);
        for (i = first; i < n; i++) {
            int user = strcmp(msgs[i].role, "user") == 0;
            if (user != ((i - first) % 2 == 0))
                return chat_fail(err, errlen, CK_EINVAL, "Conversation roles must alternate user/assistant/user/assistant/...");
            if (strcmp(fmt, "llama2") == 0) {
                sb c;
                char *joined;
                size_t need = strlen(msgs[i].content) + (sys && i == first ? strlen(sys) + 32 : 0) + 1;
                if (!(joined = (char *)malloc(need))) return chat_fail(err, errlen, CK_ENOMEM, "out of memory");
                c.out = joined, c.cap = (long)need, c.n = 0;
                if (sys && i == first) {
                    puts_(&c, "<<SYS>>\n");
                    puts_(&c, sys);
                    puts_(&c, "\n<</SYS>>\n\n");
                }
                puts_(&c, msgs[i].content);
                joined[c.n] = 0;
                if (user) {
                    puts_(&b, bos);
                    puts_(&b, "[INST] ");
                    put_trimmed(&b, joined);
                    puts_(&b, " [/INST]");
                } else {
                    puts_(&b, " ");
                    put_trimmed(&b, joined);
                    puts_(&b, " ");
                    puts_(&b, eos);
                }
                free(joined);
            } else if (strcmp(fmt, "mistral") == 0) {
                if (user) {
                    puts_(&b, "[INST] ");
                    puts_(&b, msgs[i].content);
                    puts_(&b, " [/INST]");
                } else {
                    puts_(&b, msgs[i].content);
                    puts_(&b, eos);
                }
            } else { /* gemma; Gemma 3 puts the system message (untrimmed) + "\n\n" before the first turn's text */
                puts_(&b, "<start_of_turn>");
                puts_(&b, user ? "user" : "model");
                puts_(&b, "\n");
                if (sys && i == first) {
                    puts_(&b, sys);
                    puts_(&b, "\n\n");
                }
                put_trimmed(&b, msgs[i].content);
                puts_(&b, "<end_of_turn>\n");
            }
        }
        if (add_generation_prompt && gemma) puts_(&b, "<start_of_turn>model\n");
    }
    if (cap > 0) out[b.n < cap - 1 ? b.n : cap - 1] = 0;
    return b.n;
}
