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
#include "ck_errors.h"
#include "ck_json.h"

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

static int any_path_env(void)
{
    const char *any = getenv("CK_WEIGHTS_ANY_PATH");
    return any && strcmp(any, "1") == 0 ? CK_OPEN_ANY_PATH : 0;
}

ck_checkpoint *ck_checkpoint_open(const char *path, char *err, size_t errlen)
{
    return ck_checkpoint_open_flags(path, any_path_env(), err, errlen);
}

ck_checkpoint *ck_checkpoint_open_weights(const char *path, char *err, size_t errlen)
{
    const char *load = getenv("CK_WEIGHTS_LOAD");
    int flags = any_path_env();
    if (!load || !*load || strcmp(load, "stream") == 0) {
        flags |= CK_OPEN_STREAM;
    } else if (strcmp(load, "read") == 0) {
        flags |= CK_OPEN_READ;
    } else if (strcmp(load, "map") != 0) {
        ck_io_seterr(err, errlen, "CK_WEIGHTS_LOAD=%.32s: expected stream (the default), map or read", load);
        return NULL;
    }
    return ck_checkpoint_open_flags(path, flags, err, errlen);
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
    ck->flags = flags;
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


/* config.json files up to this size are read (Hugging Face's are a few KiB) */
#define CK_CONFIG_MAX_BYTES (4 << 20)

/* expected value e as text, for messages */
static void expect_text(const ck_gguf_expect *e, char *buf, size_t cap)
{
    if (e->kind == 0) snprintf(buf, cap, "%lld", (long long)e->i);
    else if (e->kind == 1) snprintf(buf, cap, "%.9g", e->number);
    else snprintf(buf, cap, "\"%s\"", e->str);
}

/* 0 when v holds e's value */
static int config_value_differs(const ck_gguf_expect *e, const ck_json *v, char *got, size_t cap)
{
    if (v->type == CK_JSON_BOOL) snprintf(got, cap, "%s", v->boolean ? "true" : "false");
    else if (v->type == CK_JSON_NUMBER) snprintf(got, cap, "%.9g", v->number);
    else if (v->type == CK_JSON_STRING) snprintf(got, cap, "\"%.64s\"", v->string);
    else snprintf(got, cap, "not a number or a string");
    if (e->kind == 0)
        return !((v->type == CK_JSON_BOOL && v->boolean == (e->i != 0) && (e->i == 0 || e->i == 1)) ||
                 (v->type == CK_JSON_NUMBER && v->number == (double)e->i));
    if (e->kind == 1) {
        const double d = v->number - e->number, scale = e->number < 0 ? -e->number : e->number;
        return !(v->type == CK_JSON_NUMBER && (d < 0 ? -d : d) <= 1e-12 * scale);
    }
    return !(v->type == CK_JSON_STRING && strcmp(v->string, e->str) == 0);
}

int ck_checkpoint_check_config(const ck_checkpoint *ck, const ck_gguf_expect *expect, int n, char *err, size_t errlen)
{
    char path[4096], jerr[256], want[96], got[96];
    const char *file, *slash;
    FILE *f;
    long size;
    char *text;
    ck_json_doc *doc;
    const ck_json *root;
    int k, rc = 0;
    if (!ck || n <= 0 || ck->n_kvs > 0 || ck->n_files < 1 || ck->files[0].borrowed) return 0;
    file = ck->files[0].path;
    slash = strrchr(file, '/');
    snprintf(path, sizeof path, "%.*sconfig.json", slash ? (int)(slash - file + 1) : 0, file);
    if (!(f = fopen(path, "rb"))) return 0; /* weights alone */
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || size > CK_CONFIG_MAX_BYTES || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        ck_io_seterr(err, errlen, "%s: cannot be read, or larger than %d bytes", path, CK_CONFIG_MAX_BYTES);
        return CK_EFORMAT;
    }
    text = (char *)malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(text);
        ck_io_seterr(err, errlen, "%s: cannot be read", path);
        return text ? CK_EIO : CK_ENOMEM;
    }
    fclose(f);
    doc = ck_json_parse(text, (size_t)size, jerr, sizeof jerr);
    free(text);
    if (!doc || !(root = ck_json_root(doc)) || root->type != CK_JSON_OBJECT) {
        ck_io_seterr(err, errlen, "%s: %s", path, doc ? "not a JSON object" : jerr);
        ck_json_free(doc);
        return CK_EFORMAT;
    }
    for (k = 0; k < n && rc == 0; k++) {
        const ck_gguf_expect *e = &expect[k];
        const ck_json *v = ck_json_get(root, e->key);
        expect_text(e, want, sizeof want);
        if (!v || v->type == CK_JSON_NULL) continue; /* (a config.json of fewer keys: the shapes still check) */
        if (config_value_differs(e, v, got, sizeof got)) {
            ck_io_seterr(err, errlen, "%s: '%s' is %s; the model was compiled for %s (weights of another model?)",
                         path, e->key, got, want);
            rc = CK_EFORMAT;
        }
    }
    ck_json_free(doc);
    return rc;
}
