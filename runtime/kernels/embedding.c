/* embedding.c — token embedding lookup: a row gather, memory-bound. */
#include <string.h>

#include "ck_kernels.h"

void ck_embedding(float *out, const float *table, const int32_t *tokens, int T, int C)
{
    int t;
    for (t = 0; t < T; t++)
        memcpy(out + (size_t)t * C, table + (size_t)tokens[t] * C, (size_t)C * sizeof(float));
}
