/*
 * ck_checkpoint.h — bounds-checked checkpoints: the tensors (and GGUF metadata)
 * of a model folder or file, mapped read-only. The generated ck_model_init
 * loads its weights from one (ck_weights.h). Plain C99 + POSIX mmap.
 *
 * A checkpoint is a Hugging Face model folder (model.safetensors or
 * model.safetensors.index.json inside), a single .safetensors file, a
 * sharded *.safetensors.index.json, or a GGUF file (gguf.c: its tensors and
 * its metadata). Files are mapped read-only; every offset and size in a
 * header is validated before anything is read, and each error names the file
 * and the tensor.
 */
#ifndef CK_CHECKPOINT_H
#define CK_CHECKPOINT_H

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
/* ck_checkpoint_open with flags:
 * - CK_OPEN_ANY_PATH lets an index name shards outside its folder (the path rule below); the environment
 *   variable CK_WEIGHTS_ANY_PATH=1 does the same for ck_checkpoint_open and ck_checkpoint_open_weights.
 * - CK_OPEN_STREAM: the caller reads every tensor over and over (a model's weights: decode streams them all per
 *   token). Each file is mapped with huge-page advice and faulted in at open; where the page cache holds most
 *   of it on 4 KiB pages (a file written a moment ago, in small pieces or into fragmented memory), its cached
 *   pages are dropped and read again cold, which Linux 6.x puts on 2 MiB folios. A GEMV through 4 KiB pages
 *   runs ~7% slower. Best effort, never an error; CK_DEBUG=1 prints what it did.
 * - CK_OPEN_READ: each file is read into anonymous memory on 2 MiB pages instead of mapped: a copy per process,
 *   not shared with the page cache, but on huge pages where the page cache has none (older kernels, file
 *   systems without large folios). */
#define CK_OPEN_ANY_PATH 1
#define CK_OPEN_READ 2
#define CK_OPEN_STREAM 4
ck_checkpoint *ck_checkpoint_open_flags(const char *path, int flags, char *err, size_t errlen);
/* A model's weights (what generated models call): CK_OPEN_STREAM, or as the environment variable
 * CK_WEIGHTS_LOAD says: "stream" (the default), "map" (a plain mapping, faulted in as used) or "read"
 * (CK_OPEN_READ); any other value is an error. */
ck_checkpoint *ck_checkpoint_open_weights(const char *path, char *err, size_t errlen);
/* One GGUF or safetensors file already in memory (weights compiled into the program: ckc compile
 * --embed-weights), named `name` in messages; the bytes are read in place and must outlive the checkpoint. */
ck_checkpoint *ck_checkpoint_open_memory(const char *name, const void *data, size_t size, char *err, size_t errlen);

/* The path rule for a file named inside a document (a shard in an index, the weights of a graph.json): the name
 * is relative, has no ".." component, and its directories (symlinks resolved) stay inside `dir`; the file itself
 * may be a symlink, as in the Hugging Face cache. Writes dir/name into out and returns 1, or returns 0 with the
 * reason in err. */
int ck_path_in_folder(const char *dir, const char *name, char *out, size_t outlen, char *err, size_t errlen);
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

/* A metadata value a model was compiled from (the generated model.c's CK_GGUF_HEADER table). */
typedef struct ck_gguf_expect {
    const char *key;
    int kind; /* 0 integer, 1 number (compared as float32, what GGUF stores), 2 string */
    int64_t i;
    double number;
    const char *str;
} ck_gguf_expect;
/* 0 when a GGUF checkpoint holds each expected value, else CK_EFORMAT with the key that differs in err ("metadata
 * 'llama.attention.head_count' is 8 in FILE; the model was compiled for 4"). A checkpoint without metadata
 * (safetensors) and n == 0 pass. */
int ck_checkpoint_check_gguf(const ck_checkpoint *ck, const ck_gguf_expect *expect, int n, char *err, size_t errlen);
/* The same for a safetensors checkpoint and the config.json beside it (the folder of its first file): 0 when
 * each expected key that file has holds the expected value, or there is no such file (weights alone: their
 * tensors are checked one by one), or the checkpoint is a GGUF or in memory; else CK_EFORMAT naming the file and
 * the key ("FOLDER/config.json: 'num_attention_heads' is 8; the model was compiled for 4"). */
int ck_checkpoint_check_config(const ck_checkpoint *ck, const ck_gguf_expect *expect, int n, char *err, size_t errlen);

const char *ck_dtype_name(ck_dtype dt);
size_t ck_dtype_size(ck_dtype dt);
/* 16-bit conversions: ck_quant.h */

#ifdef __cplusplus
}
#endif
#endif /* CK_CHECKPOINT_H */
