/*
 * moe_choice.h — the router's choice, which moe.c makes and train.c recomputes (internal to runtime/kernels;
 * header-only, so that a training build without a mixture does not take moe.c and its GEMMs in).
 *
 * softmax(l) into p[E] and its k largest marked in taken[E] (the lower index first among equals; a NaN is never
 * larger, so exactly k are marked); returns their probabilities' sum.
 */
#ifndef CK_MOE_CHOICE_H
#define CK_MOE_CHOICE_H

#include <math.h>

static inline float ck_moe_choice(const float *l, int E, int k, float *p, unsigned char *taken)
{
    float mx = l[0], sum = 0.0f, kept = 0.0f;
    int e, j;
    for (e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (e = 0; e < E; e++) {
        p[e] = expf(l[e] - mx);
        sum += p[e];
        taken[e] = 0;
    }
    for (e = 0; e < E; e++) p[e] /= sum;
    for (j = 0; j < k; j++) { /* the k largest, the lower index first among equals; NaN is never larger */
        int best = -1;
        for (e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
        taken[best] = 1;
        kept += p[best];
    }
    return kept;
}

#endif
