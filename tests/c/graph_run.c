/*
 * graph_run.c — runs any generated graph once on deterministic inputs, every buffer exactly the size the
 * ck_graph ABI reports (so that ASan sees a kernel that reads or writes past one). Run under ASan + UBSan
 * by tests/sanitized_model.sh.
 *   graph_run [WEIGHTS]    exits 0 when the run succeeds
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_graph.h"

static size_t elem_size(int dtype)
{
    return dtype == CK_GRAPH_I64 ? 8 : dtype == CK_GRAPH_BOOL ? 1 : 4;
}

static size_t numel(const int64_t *shape, int rank)
{
    size_t n = 1;
    int i;
    for (i = 0; i < rank; i++) n *= (size_t)shape[i];
    return n;
}

int main(int argc, char **argv)
{
    ck_graph *g = ck_graph_init(argc > 1 ? argv[1] : NULL);
    int ni = ck_graph_num_inputs(), no = ck_graph_num_outputs(), i, rc;
    void **in, **out;
    size_t k;
    if (!g) {
        fprintf(stderr, "graph_run: %s\n", ck_last_error());
        return 1;
    }
    in = (void **)calloc((size_t)ni + 1, sizeof(void *));
    out = (void **)calloc((size_t)no + 1, sizeof(void *));
    for (i = 0; i < ni; i++) {
        int dt = ck_graph_input_dtype(i);
        size_t n = numel(ck_graph_input_shape(i), ck_graph_input_rank(i));
        unsigned char *b = (unsigned char *)calloc(n ? n : 1, elem_size(dt));
        for (k = 0; k < n; k++) {
            if (dt == CK_GRAPH_F32) ((float *)b)[k] = (float)((k * 37) % 17) / 17.0f - 0.5f;
            else if (dt == CK_GRAPH_BOOL) b[k] = (unsigned char)(k % 3 == 0);
        }
        in[i] = b;
    }
    for (i = 0; i < no; i++) {
        size_t n = numel(ck_graph_output_shape(i), ck_graph_output_rank(i));
        out[i] = calloc(n ? n : 1, elem_size(ck_graph_output_dtype(i)));
    }
    rc = ck_graph_run(g, (const void *const *)in, out);
    if (rc) fprintf(stderr, "graph_run: %s\n", ck_last_error());
    else printf("graph_run: %d inputs, %d outputs: ok\n", ni, no);
    for (i = 0; i < ni; i++) free(in[i]);
    for (i = 0; i < no; i++) free(out[i]);
    free(in);
    free(out);
    ck_graph_free(g);
    return rc ? 1 : 0;
}
