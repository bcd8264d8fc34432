/*
 * fuzz_checkpoint_use.h — what a harness does with a checkpoint that opened: every tensor looked up and loaded the
 * way a generated model loads its weights (ck_weight_load: in place, converted to float32, requantized to q8_0),
 * every metadata value read through each accessor, and the init-time metadata check run.
 */
#ifndef CK_FUZZ_CHECKPOINT_USE_H
#define CK_FUZZ_CHECKPOINT_USE_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ck_checkpoint.h"
#include "ck_errors.h"
#include "ck_quant.h"
#include "ck_weights.h"

typedef struct fuzz_weights {
    const float *f;
    ck_qmat q;
} fuzz_weights;

static void fuzz_use_checkpoint(const ck_checkpoint *ck)
{
    static const ck_gguf_expect expect[] = {{"general.architecture", 2, 0, 0.0, "llama"},
                                            {"llama.block_count", 0, 2, 0.0, NULL},
                                            {"llama.rope.freq_base", 1, 0, 10000.0, NULL}};
    char err[512];
    int i, n = ck_checkpoint_count(ck), nkv = ck_checkpoint_kv_count(ck);
    for (i = 0; i < nkv; i++) {
        const ck_gguf_kv *kv = ck_checkpoint_kv(ck, i);
        uint64_t e, lim = kv->count < 64 ? kv->count : 64;
        for (e = 0; e < lim; e++) {
            int64_t iv;
            double dv;
            size_t len;
            const char *s = ck_gguf_kv_str(kv, e, &len);
            ck_gguf_kv_int(kv, e, &iv);
            ck_gguf_kv_num(kv, e, &dv);
            if (s && len) (void)((volatile const char *)s)[len - 1]; /* the whole string is readable */
        }
    }
    (void)ck_checkpoint_check_gguf(ck, expect, 3, err, sizeof err);
    for (i = 0; i < n && i < 16; i++) {
        const ck_tensor_info *t = ck_checkpoint_tensor(ck, i);
        ck_weight_spec spec;
        ck_weight_store store = {0};
        fuzz_weights w;
        int d, fmt;
        if (ck_checkpoint_find(ck, t->name) != t) abort(); /* sorted, found by name */
        if (t->ndim < 1 || t->ndim > CK_WEIGHT_MAX_DIMS) continue;
        if (t->nbytes) (void)((volatile const unsigned char *)t->data)[t->nbytes - 1];
        memset(&spec, 0, sizeof spec);
        spec.n_parts = 1;
        spec.names[0] = t->name;
        spec.ndim = t->ndim;
        for (d = 0; d < t->ndim; d++) spec.shape[0][d] = t->shape[d];
        for (fmt = 0; fmt < 3; fmt++) {
            int rc;
            memset(&w, 0, sizeof w);
            spec.format = fmt == 0 ? CK_WEIGHT_FLOAT : fmt == 1 ? CK_WEIGHT_AS_STORED : CK_Q_Q8_0;
            spec.field = fmt == 0 ? offsetof(fuzz_weights, f) : offsetof(fuzz_weights, q);
            if (fmt > 0 && t->ndim != 2) continue;
            rc = ck_weight_load(ck, &spec, -1, &w, &store, err, sizeof err);
            if (rc != 0 && !err[0]) abort(); /* a refusal says why */
        }
        ck_weight_store_free(&store);
    }
}

#endif
