/*
 * graph_check.c — drives a generated graph (the GPT-style example) through
 * the ck_graph ABI, including the misuse it promises to survive: NULL
 * handles and buffers, introspection out of range, a missing weights path,
 * token ids outside the vocabulary. Run under ASan + UBSan by
 * tests/sanitized_model.sh.
 *   graph_check WEIGHTS VOCAB    exits 0 when every check holds
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_graph.h"

static int failures;
#define CHECK(cond)                                                                                   \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            fprintf(stderr, "graph_check:%d: CHECK(%s) failed; last error: %s\n", __LINE__, #cond,    \
                    ck_last_error());                                                                 \
            failures++;                                                                               \
        }                                                                                             \
    } while (0)

static size_t numel(const int64_t *shape, int rank)
{
    size_t n = 1;
    int i;
    for (i = 0; i < rank; i++) n *= (size_t)shape[i];
    return n;
}

int main(int argc, char **argv)
{
    ck_graph *g;
    int64_t *ids, vocab;
    float *out1, *out2;
    size_t n_in, n_out, i;
    const void *in[1];
    void *out[1];
    if (argc != 3) {
        fprintf(stderr, "usage: %s WEIGHTS VOCAB\n", argv[0]);
        return 2;
    }
    vocab = atol(argv[2]);

    /* introspection: one int64 input, one float output */
    CHECK(ck_graph_num_inputs() == 1 && ck_graph_num_outputs() == 1);
    CHECK(ck_graph_input_dtype(0) == CK_GRAPH_I64 && ck_graph_output_dtype(0) == CK_GRAPH_F32);
    CHECK(strcmp(ck_graph_input_name(0), "idx") == 0 && strcmp(ck_graph_output_name(0), "output") == 0);
    CHECK(ck_graph_input_rank(0) == 2 && ck_graph_output_rank(0) == 3);
    CHECK(ck_graph_output_shape(0)[2] == vocab);
    CHECK(ck_graph_input_name(1) == NULL && strstr(ck_last_error(), "index 1"));
    CHECK(ck_graph_output_rank(-1) == -1);
    CHECK(ck_graph_input_shape(7) == NULL);

    /* misuse that must fail cleanly */
    CHECK(ck_graph_init(NULL) == NULL && strstr(ck_last_error(), "weights_path is NULL"));
    CHECK(ck_graph_init("/nonexistent.safetensors") == NULL);
    CHECK(ck_graph_run(NULL, in, out) == CK_EINVAL);
    CHECK(ck_graph_set_threads(NULL, 1) == CK_EINVAL);
    ck_graph_free(NULL);

    g = ck_graph_init(argv[1]);
    CHECK(g != NULL);
    if (!g) return 1;
    n_in = numel(ck_graph_input_shape(0), ck_graph_input_rank(0));
    n_out = numel(ck_graph_output_shape(0), ck_graph_output_rank(0));
    ids = (int64_t *)malloc(n_in * sizeof *ids);
    out1 = (float *)malloc(n_out * sizeof *out1);
    out2 = (float *)malloc(n_out * sizeof *out2);
    for (i = 0; i < n_in; i++) ids[i] = (int64_t)((i * 7) % (size_t)vocab);
    in[0] = ids;

    CHECK(ck_graph_run(g, NULL, out) == CK_EINVAL);
    CHECK(ck_graph_run(g, in, NULL) == CK_EINVAL);
    out[0] = NULL;
    CHECK(ck_graph_run(g, in, out) == CK_EINVAL && strstr(ck_last_error(), "output 0 ('output') is NULL"));

    /* two runs, one and two threads: the same numbers */
    out[0] = out1;
    CHECK(ck_graph_set_threads(g, -2) == CK_EINVAL); /* as ck_model_set_threads */
    CHECK(ck_graph_set_threads(g, 1) == CK_OK);
    CHECK(ck_graph_run(g, in, out) == CK_OK);
    out[0] = out2;
    CHECK(ck_graph_set_threads(g, 2) == CK_OK);
    CHECK(ck_graph_run(g, in, out) == CK_OK);
    for (i = 0; i < n_out; i++)
        if (out1[i] - out2[i] > 1e-4f || out2[i] - out1[i] > 1e-4f) {
            CHECK(!"1 and 2 threads agree");
            break;
        }

    /* an id outside the vocabulary is an error naming the input, not a wild read */
    ids[3] = vocab + 5;
    CHECK(ck_graph_run(g, in, out) == CK_EINVAL && strstr(ck_last_error(), "outside the vocabulary"));
    ids[3] = -1;
    CHECK(ck_graph_run(g, in, out) == CK_EINVAL);
    ids[3] = 0;
    CHECK(ck_graph_run(g, in, out) == CK_OK);

    ck_graph_free(g);
    free(ids);
    free(out1);
    free(out2);
    if (failures) fprintf(stderr, "graph_check: %d failures\n", failures);
    else printf("graph_check: all checks passed\n");
    return failures ? 1 : 0;
}
