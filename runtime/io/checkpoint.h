/*
 * checkpoint.h — what the checkpoint readers share (internal to runtime/io):
 * the checkpoint itself and the helpers safetensors.c and gguf.c both use.
 */
#ifndef CK_IO_CHECKPOINT_H
#define CK_IO_CHECKPOINT_H

#include <stddef.h>

#include "ck_safetensors.h"

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
} st_file;

struct ck_checkpoint {
    st_file *files;
    int n_files;
    ck_tensor_info *tensors; /* sorted by name */
    int n_tensors, cap_tensors;
    char **names;            /* owned copies of the tensor names */
    char *optional_prefix;   /* see ck_checkpoint_set_optional_prefix */
    ck_gguf_kv *kvs;         /* GGUF metadata, file order; keys and string tables owned */
    int n_kvs;
};

void ck_io_seterr(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* appends a copy of *t (its name copied); 0 when out of memory */
int ck_io_add_tensor(ck_checkpoint *ck, const ck_tensor_info *t);

/* gguf.c: the tensors and metadata of a mapped GGUF file; 1 on success */
int ck_gguf_read(ck_checkpoint *ck, const st_file *f, char *err, size_t errlen);
void ck_gguf_free(ck_checkpoint *ck);

#endif
