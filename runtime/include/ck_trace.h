/*
 * ck_trace.h — watch every intermediate tensor of a generated model.
 *
 * Compile model.c with -DCK_TRACE and install a callback:
 *
 *   static void show(void *user, const ck_trace_event *e) {
 *       printf("%s layer %d %s (%s) from %s: %lld x %lld\n", e->section, e->layer, e->node, e->op,
 *              e->module, (long long)e->rows, (long long)e->cols);
 *   }
 *   ck_model_set_trace(m, show, NULL);      // or ck_graph_set_trace(g, ...)
 *
 * After each node of the program runs, the callback receives the node and its
 * output: `rows` x `cols` floats, row i at data + i * ld (ld > cols for a
 * column view of a fused GEMM's output). The buffer is the model's own and is
 * valid only during the call: copy what you keep. `reference` names where a
 * reference implementation computes exactly this tensor (a Hugging Face module
 * path for language models, whose forward output it is, with "{L}" standing
 * for `layer`; the exported node for graphs), or is "" when nothing does (a
 * fused node's private result). ckc's parity tests compare these against
 * PyTorch to name the first place where the numbers diverge.
 *
 * Without -DCK_TRACE the hooks compile to nothing and *_set_trace returns
 * CK_ENOTSUP.
 */
#ifndef CK_TRACE_H
#define CK_TRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ck_trace_event {
    const char *section;   /* "header", "block" (once per layer) or "footer" */
    int layer;             /* the layer of a block node, -1 elsewhere */
    const char *node;      /* the IR node (as `ckc inspect` prints it) */
    const char *op;        /* its op, e.g. "MATMUL_ADD" */
    const char *module;    /* the source module ("{L}" for the layer), or "" */
    const char *reference; /* what a reference run computes equal to this output, or "" (see above) */
    const float *data;     /* float32 output; nodes with integer or bool outputs are not traced */
    int64_t rows, cols, ld;
} ck_trace_event;

typedef void (*ck_trace_fn)(void *user, const ck_trace_event *event);

/* The callback a handle holds. */
typedef struct ck_tracer {
    ck_trace_fn fn;
    void *user;
} ck_tracer;

/* One traced node of a generated section (a static table in model.c). */
typedef struct ck_trace_site {
    const char *section, *node, *op, *module, *reference;
} ck_trace_site;

#ifdef CK_TRACE
static inline void ck_trace_node(const ck_tracer *t, const ck_trace_site *s, int layer, const float *data,
                                 int64_t rows, int64_t cols, int64_t ld)
{
    ck_trace_event e;
    if (!t->fn) return;
    e.section = s->section;
    e.layer = layer;
    e.node = s->node;
    e.op = s->op;
    e.module = s->module;
    e.reference = s->reference;
    e.data = data;
    e.rows = rows;
    e.cols = cols;
    e.ld = ld;
    t->fn(t->user, &e);
}
#define CK_TRACE_NODE(tracer, site, layer, data, rows, cols, ld) \
    ck_trace_node(&(tracer), &(site), (layer), (data), (rows), (cols), (ld))
#else
#define CK_TRACE_NODE(tracer, site, layer, data, rows, cols, ld) ((void)0)
#endif

#ifdef __cplusplus
}
#endif
#endif /* CK_TRACE_H */
