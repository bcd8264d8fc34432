/*
 * ck_safetensors.h — bounds-checked safetensors checkpoints and the weight
 * loader used by the generated ck_model_init. Plain C99 + POSIX mmap.
 *
 * A checkpoint is a Hugging Face model folder (model.safetensors or
 * model.safetensors.index.json inside), a single .safetensors file, a
 * sharded *.safetensors.index.json, or a GGUF file (gguf.c: its tensors and
 * its metadata). Files are mapped read-only; every offset and size in a
 * header is validated before anything is read, and each error names the file
 * and the tensor.
 */
#ifndef CK_SAFETENSORS_H
#define CK_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ck_dtype {
    CK_DT_F64, CK_DT_F32, CK_DT_F16, CK_DT_BF16,
    CK_DT_I64, CK_DT_I32, CK_DT_I16, CK_DT_I8, CK_DT_U8, CK_DT_BOOL,
    CK_DT_F8_E4M3, CK_DT_F8_E5M2,
    CK_DT_GGML /* a GGUF block type: see ck_tensor_info.qtype */
} ck_dtype;

#define CK_ST_MAX_DIMS 8

typedef struct ck_tensor_info {
    const char *name;
    ck_dtype dtype;
    int ndim;
    int64_t shape[CK_ST_MAX_DIMS];
    const void *data;  /* inside the read-only mapping */
    size_t nbytes;
    const char *file;  /* the file holding it */
    int qtype;         /* its ck_qtype (ck_quant.h) when it is f32, f16, bf16 or a GGUF block type, else -1 */
} ck_tensor_info;

typedef struct ck_checkpoint ck_checkpoint;

ck_checkpoint *ck_checkpoint_open(const char *path, char *err, size_t errlen);
void ck_checkpoint_close(ck_checkpoint *ck);
int ck_checkpoint_count(const ck_checkpoint *ck);
const ck_tensor_info *ck_checkpoint_tensor(const ck_checkpoint *ck, int i); /* sorted by name */
const ck_tensor_info *ck_checkpoint_find(const ck_checkpoint *ck, const char *name);
/* Weight lookups by a name starting with `prefix` fall back to the name
 * without it: a GPT2LMHeadModel names "transformer.h.0...", a bare GPT2Model
 * "h.0..."; LlamaForCausalLM "model.layers.0...", LlamaModel "layers.0...". */
void ck_checkpoint_set_optional_prefix(ck_checkpoint *ck, const char *prefix);

/* ---- GGUF metadata (empty for safetensors checkpoints) ------------------- */
typedef enum ck_gguf_type {
    CK_GGUF_U8, CK_GGUF_I8, CK_GGUF_U16, CK_GGUF_I16, CK_GGUF_U32, CK_GGUF_I32, CK_GGUF_F32, CK_GGUF_BOOL,
    CK_GGUF_STRING, CK_GGUF_ARRAY, CK_GGUF_U64, CK_GGUF_I64, CK_GGUF_F64
} ck_gguf_type;

typedef struct ck_gguf_kv {
    const char *key;
    int type;                        /* ck_gguf_type */
    int elem_type;                   /* arrays: the element type */
    uint64_t count;                  /* arrays: the length; scalars 1 */
    const unsigned char *data;       /* the value (array: the first element) in the mapping */
    const unsigned char **strings;   /* string arrays: each element's length prefix */
} ck_gguf_kv;

int ck_checkpoint_kv_count(const ck_checkpoint *ck);
const ck_gguf_kv *ck_checkpoint_kv(const ck_checkpoint *ck, int i);       /* in file order */
const ck_gguf_kv *ck_checkpoint_kv_find(const ck_checkpoint *ck, const char *key);
/* Element i (0 for a scalar) as an integer (any integer or bool type), a
 * number (any numeric type) or a string (not NUL-terminated; *len set).
 * Return 0 when the element exists and has such a type, else -1 / NULL. */
int ck_gguf_kv_int(const ck_gguf_kv *kv, uint64_t i, int64_t *out);
int ck_gguf_kv_num(const ck_gguf_kv *kv, uint64_t i, double *out);
const char *ck_gguf_kv_str(const ck_gguf_kv *kv, uint64_t i, size_t *len);

const char *ck_dtype_name(ck_dtype dt);
size_t ck_dtype_size(ck_dtype dt);
/* 16-bit conversions: ck_quant.h */

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
#endif /* CK_SAFETENSORS_H */
