/* embedding.c — token and learned position embeddings: row gathers, memory-bound. */
#include <string.h>

#include "ck_kernels.h"

void ck_embedding(float *out, const float *table, const int32_t *tokens, int T, int C)
{
    int t;
    for (t = 0; t < T; t++)
        memcpy(out + (size_t)t * C, table + (size_t)tokens[t] * C, (size_t)C * sizeof(float));
}

void ck_pos_embed(float *out, const float *x, const float *table, int T, int C, int pos0, const ck_seqmap *map)
{
    int t, i;
    for (t = 0; t < T; t++) {
        const float *p = table + (size_t)ck_seq_pos(map, pos0, t) * C, *xr = x + (size_t)t * C;
        float *o = out + (size_t)t * C;
        for (i = 0; i < C; i++) o[i] = xr[i] + p[i];
    }
}

int64_t ck_embedding_i64(float *out, const float *table, const int64_t *ids, int64_t n, int C, int64_t vocab)
{
    int64_t i;
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return i;
    for (i = 0; i < n; i++) memcpy(out + (size_t)i * C, table + (size_t)ids[i] * C, (size_t)C * sizeof(float));
    return -1;
}
