/*
 * ck_graph.h — the C ABI of a graph compiled by ckc from an exported PyTorch
 * module (graph.json). Every generated graph model.c implements exactly this.
 *
 *   ck_graph *g = ck_graph_init("out/model.weights.safetensors"); // NULL: see ck_last_error()
 *   const void *in[] = {x};                                      // contiguous, export order
 *   void *out[] = {y};                                           // caller-owned buffers
 *   if (ck_graph_run(g, in, out) != CK_OK) puts(ck_last_error());
 *   ck_graph_free(g);
 *
 * Shapes are fixed by the example inputs at export, except the sizes exported
 * as symbols (graph.json "symbols", ckc.export(dynamic_shapes=...)): a graph
 * with symbols runs through ck_graph_run_shaped, which binds each symbol from
 * the shapes of this call's inputs, checked against its bounds; the arena is
 * planned for the bounds, so any binding runs without allocating. The
 * introspection functions describe every input and output. `int` results are
 * 0 on success and a negative CK_E* code (ck_errors.h) on failure, with a
 * message from ck_last_error(). A handle runs one call at a time: use one
 * handle per thread.
 */
#ifndef CK_GRAPH_H
#define CK_GRAPH_H

#include <stdint.h>

#include "ck_errors.h"
#include "ck_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ck_graph ck_graph;

/* Bumped whenever a function below changes meaning; ck_graph_abi_version() is the library's. */
#define CK_GRAPH_ABI_VERSION 5
int ck_graph_abi_version(void);

/* weights_path: the model.weights.safetensors written next to model.c; NULL
 * is accepted when the graph has no constants. */
ck_graph *ck_graph_init(const char *weights_path);
void ck_graph_free(ck_graph *g);

/* inputs[i] / outputs[i]: contiguous row-major buffers of the sizes and
 * dtypes below, in export order. Outputs are fully written on success.
 * An output written in place (ck_graph_output_into(i) = j >= 0: graph.json
 * "into", an input updated by the graph, like an optimizer's parameters) goes
 * into inputs[j], which the run reads before overwriting; outputs[i] is then
 * neither read nor written and may be NULL. */
int ck_graph_run(ck_graph *g, const void *const *inputs, void *const *outputs);

/* Symbolic sizes: shapes[i] lists input i's ck_graph_input_rank(i) sizes. ck_graph_bind checks them (each
 * fixed size as exported; each symbol in its bounds and equal wherever it appears) and binds the symbols for
 * the runs that follow; CK_EINVAL naming the input, the dimension and the bound otherwise, and the previous
 * binding stays. ck_graph_run_shaped binds and runs. ck_graph_run on a graph with symbols runs with the
 * last binding (CK_ESTATE before the first). A graph without symbols accepts both, with its exported shapes. */
int ck_graph_bind(ck_graph *g, const int64_t *const *shapes);
int ck_graph_run_shaped(ck_graph *g, const void *const *inputs, const int64_t *const *shapes, void *const *outputs);
/* The sizes of output i (ck_graph_output_rank(i) of them) under the current binding. */
int ck_graph_bound_output_shape(const ck_graph *g, int i, int64_t *dims);

/* Resident inputs (parameters passed to every run): on a device target (--target gcu) a kept input's device
 * copy is made by the next run and reused by the runs after it, as long as they pass the same pointer for it
 * and the caller has not called ck_graph_input_changed(g, i) since. On the cpu, inputs are always read in place
 * and both calls only check their arguments. CK_EINVAL for an index outside 0..ck_graph_num_inputs()-1. */
int ck_graph_keep_input(ck_graph *g, int i);
int ck_graph_input_changed(ck_graph *g, int i);

/* Threads used by ck_graph_run; 0 (the default) means all available cores, negative is CK_EINVAL. */
int ck_graph_set_threads(ck_graph *g, int n_threads);

/* Calls fn(user, event) after every node of each ck_graph_run (ck_trace.h); fn NULL stops.
 * CK_ENOTSUP unless model.c was compiled with -DCK_TRACE. */
int ck_graph_set_trace(ck_graph *g, ck_trace_fn fn, void *user);

/* ---- introspection (no handle needed) ---- */
typedef enum ck_graph_dtype { CK_GRAPH_F32 = 0, CK_GRAPH_I64 = 1, CK_GRAPH_I32 = 2, CK_GRAPH_BOOL = 3 } ck_graph_dtype;

int ck_graph_num_inputs(void);
int ck_graph_num_outputs(void);
/* index out of range: NULL / -1 with ck_last_error() set */
const char *ck_graph_input_name(int i);
const char *ck_graph_output_name(int i);
int ck_graph_input_dtype(int i);       /* a ck_graph_dtype */
int ck_graph_output_dtype(int i);
int ck_graph_input_rank(int i);
int ck_graph_output_rank(int i);
const int64_t *ck_graph_input_shape(int i);   /* rank entries; -1 where the size is symbolic */
const int64_t *ck_graph_output_shape(int i);  /* (an output's size that involves a symbol: -1) */
int ck_graph_output_into(int i);       /* the input output i is written into, or -1 (its own buffer) */
/* The symbols (0 for a graph of fixed shapes), each with its bounds (a derived one's follow from the symbols it is
 * computed from); ck_graph_input_symbol(i, d): the symbol k that input i's size d is made of, or -1 where that size
 * is fixed; ck_graph_input_size_terms(i, d, &a, &b): the same k, with the size a * symbol k + b (a fixed size: a = 0,
 * b the size), so a call's size v binds symbol k to (v - b) / a. */
int ck_graph_num_symbols(void);
const char *ck_graph_symbol_name(int k);
int64_t ck_graph_symbol_min(int k);
int64_t ck_graph_symbol_max(int k);
const char *ck_graph_symbol_rule(int k);  /* a derived symbol's rule, "(seq+1)//2"; "" for one an input binds */
int ck_graph_input_symbol(int i, int d);
int ck_graph_input_size_terms(int i, int d, int64_t *a, int64_t *b);

#ifdef __cplusplus
}
#endif
#endif /* CK_GRAPH_H */
