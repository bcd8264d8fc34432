/*
 * checkpoint_open.c — ck_checkpoint_open: what a path names (a model folder, an index, a safetensors or a
 * GGUF file) and which reader fills the checkpoint (safetensors.c, gguf.c); then every tensor name once.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"

/* One file, mapped or borrowed: GGUF by its name or magic, else safetensors. */
static int read_one(ck_checkpoint *ck, const st_file *f, const char *path, char *err, size_t errlen)
{
    if (!f) return 0;
    if (ck_io_ends_with(path, ".gguf") || (f->size >= 4 && memcmp(f->map, "GGUF", 4) == 0))
        return ck_gguf_read(ck, f, err, errlen);
    return ck_safetensors_read(ck, f, err, errlen);
}

static int read_file(ck_checkpoint *ck, const char *path, char *err, size_t errlen)
{
    return read_one(ck, ck_io_map_file(ck, path, err, errlen), path, err, errlen);
}

/* every tensor name once; closes the checkpoint (NULL) when !ok or a name repeats */
static ck_checkpoint *finish(ck_checkpoint *ck, int ok, char *err, size_t errlen)
{
    int i;
    if (ok) {
        ck_io_sort_tensors(ck); /* a GGUF may hold only metadata (a tokenizer): no tensors */
        for (i = 1; i < ck->n_tensors; i++)
            if (strcmp(ck->tensors[i - 1].name, ck->tensors[i].name) == 0) {
                ck_io_seterr(err, errlen, "tensor '%s' appears twice (%s and %s)", ck->tensors[i].name,
                       ck->tensors[i - 1].file, ck->tensors[i].file);
                ok = 0;
                break;
            }
    }
    if (!ok) {
        ck_checkpoint_close(ck);
        return NULL;
    }
    return ck;
}

ck_checkpoint *ck_checkpoint_open_memory(const char *name, const void *data, size_t size, char *err, size_t errlen)
{
    ck_checkpoint *ck = (ck_checkpoint *)calloc(1, sizeof *ck);
    if (!ck) {
        ck_io_seterr(err, errlen, "out of memory");
        return NULL;
    }
    return finish(ck, read_one(ck, ck_io_borrow_file(ck, name ? name : "(memory)", data, size, err, errlen),
                               name ? name : "", err, errlen), err, errlen);
}

ck_checkpoint *ck_checkpoint_open(const char *path, char *err, size_t errlen)
{
    const char *any = getenv("CK_WEIGHTS_ANY_PATH");
    return ck_checkpoint_open_flags(path, any && strcmp(any, "1") == 0 ? CK_OPEN_ANY_PATH : 0, err, errlen);
}

ck_checkpoint *ck_checkpoint_open_flags(const char *path, int flags, char *err, size_t errlen)
{
    ck_checkpoint *ck;
    struct stat sb;
    char buf[4096];
    int ok;
    if (!path) {
        ck_io_seterr(err, errlen, "weights path is NULL");
        return NULL;
    }
    if (stat(path, &sb) != 0) {
        ck_io_seterr(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    ck = (ck_checkpoint *)calloc(1, sizeof *ck);
    if (!ck) {
        ck_io_seterr(err, errlen, "out of memory");
        return NULL;
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(buf, sizeof buf, "%s/model.safetensors", path);
        if (stat(buf, &sb) == 0) {
            ok = read_file(ck, buf, err, errlen);
        } else {
            snprintf(buf, sizeof buf, "%s/model.safetensors.index.json", path);
            if (stat(buf, &sb) == 0) {
                ok = ck_safetensors_read_index(ck, buf, flags, err, errlen);
            } else {
                ck_io_seterr(err, errlen, "%s: no model.safetensors or model.safetensors.index.json in this folder",
                       path);
                ok = 0;
            }
        }
    } else if (ck_io_ends_with(path, ".json")) {
        ok = ck_safetensors_read_index(ck, path, flags, err, errlen);
    } else {
        ok = read_file(ck, path, err, errlen);
    }
    return finish(ck, ok, err, errlen);
}

