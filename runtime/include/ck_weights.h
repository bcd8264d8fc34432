/*
 * ck_weights.h — a model's weights from a checkpoint (ck_checkpoint.h): the
 * load tables the generated model.c holds (one ck_weight_spec per weight:
 * its checkpoint names, shapes and the format it is kept in) and the loader
 * that checks each against the file and places it in the model's weights
 * struct, in place from the mapping or converted.
 */
#ifndef CK_WEIGHTS_H
#define CK_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "ck_checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weight loading ------------------------------------------------------ */
#define CK_WEIGHT_MAX_PARTS 4
#define CK_WEIGHT_MAX_DIMS 4

/* One float32 weight the model needs. Its parts (Hugging Face tensor names,
 * printf templates where %d is the layer index) are concatenated along dim 0,
 * e.g. q_proj|k_proj|v_proj for the fused QKV GEMM. With `transpose`, the one
 * 2-D part is stored [in][out] in the file (GPT-2's Conv1D) and is loaded as
 * [out][in], the nn.Linear layout every GEMM here reads. */
#define CK_WEIGHT_FLOAT (-2)  /* ck_weight_spec.format: a `const float *` field */
#define CK_WEIGHT_AS_STORED (-1) /* a ck_qmat field in the file's own types */

typedef struct ck_weight_spec {
    size_t field;   /* offsetof the `const float *` (or ck_qmat, see format) in the weights struct */
    int n_parts;
    const char *names[CK_WEIGHT_MAX_PARTS];
    int ndim;       /* rank of every part */
    int64_t shape[CK_WEIGHT_MAX_PARTS][CK_WEIGHT_MAX_DIMS]; /* expected shape of each part, as in the file */
    int transpose;  /* 1: a single [in][out] part, loaded transposed */
    int format;     /* CK_WEIGHT_FLOAT, CK_WEIGHT_AS_STORED, or a ck_qtype every part is converted to */
    /* > 0: a mixture's experts, the field a `const ck_qmat *` to n_experts matrices (each [N][K], in `format`;
     * never CK_WEIGHT_FLOAT). The one part is either one tensor per expert, its name a template of the layer's
     * %d and then the expert's, of rank 2 ([N, K]); or all of them stacked, of rank 3 ([n_experts, N, K]:
     * GGUF's ffn_*_exps), used in place. */
    int n_experts;
} ck_weight_spec;

/* Memory the loader had to allocate (dtype conversion, concatenation). */
typedef struct ck_weight_store {
    void **owned;
    int n_owned, cap_owned;
    size_t bytes_owned;  /* converted or concatenated copies */
    size_t bytes_mapped; /* used in place from the mapping */
} ck_weight_store;

/* Validates every part (present, a float or GGUF block type, shape) and sets *dst to
 * float32 data: the mapping itself when the parts are f32, aligned and (for
 * several parts) adjacent in the file; otherwise a converted copy. Returns 0,
 * CK_EFORMAT (what is wrong with the file or the spec, in err) or CK_ENOMEM. */
int ck_weights_load(const ck_checkpoint *ck, const ck_weight_spec *spec, int layer, const float **dst,
                    ck_weight_store *store, char *err, size_t errlen);
/* The field of `spec` inside the weights struct at `base`: ck_weights_load
 * for a float field, else a ck_qmat (ck_quant.h) of [N][K] matrices. Each
 * part is used in place when its type is the one wanted (or any type ckc
 * multiplies, with CK_WEIGHT_AS_STORED), else converted row by row (through
 * float32) into memory the store owns; a transposed part is converted too. */
int ck_weight_load(const ck_checkpoint *ck, const ck_weight_spec *spec, int layer, void *base, ck_weight_store *store,
                   char *err, size_t errlen);
void ck_weight_store_free(ck_weight_store *store);

#ifdef __cplusplus
}
#endif
#endif /* CK_WEIGHTS_H */
