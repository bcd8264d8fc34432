/*
 * checkpoint.c — the checkpoint object both readers fill (safetensors.c, gguf.c): its mapped files, its
 * tensor table (sorted by name, looked up by binary search), its GGUF metadata, the optional name prefix,
 * and the dtype names. ck_checkpoint_open (checkpoint_open.c) picks the reader; nothing here knows a format.
 */
#define _XOPEN_SOURCE 700 /* realpath */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"

#ifndef CK_NO_MMAP
#include <sys/mman.h>
#endif

static const struct {
    const char *name;
    ck_dtype dt;
    size_t size;
} DTYPES[] = {
    {"F64", CK_DT_F64, 8}, {"F32", CK_DT_F32, 4}, {"F16", CK_DT_F16, 2}, {"BF16", CK_DT_BF16, 2},
    {"I64", CK_DT_I64, 8}, {"I32", CK_DT_I32, 4}, {"I16", CK_DT_I16, 2}, {"I8", CK_DT_I8, 1},
    {"U8", CK_DT_U8, 1}, {"BOOL", CK_DT_BOOL, 1}, {"F8_E4M3", CK_DT_F8_E4M3, 1}, {"F8_E5M2", CK_DT_F8_E5M2, 1},
};
#define N_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

const char *ck_dtype_name(ck_dtype dt)
{
    size_t i;
    if (dt == CK_DT_GGML) return "GGML";
    for (i = 0; i < N_DTYPES; i++)
        if (DTYPES[i].dt == dt) return DTYPES[i].name;
    return "?";
}

size_t ck_dtype_size(ck_dtype dt)
{
    size_t i;
    for (i = 0; i < N_DTYPES; i++)
        if (DTYPES[i].dt == dt) return DTYPES[i].size;
    return 0;
}

const char *ck_io_dtype_by_name(const char *name, ck_dtype *dt)
{
    size_t i;
    for (i = 0; i < N_DTYPES; i++)
        if (strcmp(name, DTYPES[i].name) == 0) {
            *dt = DTYPES[i].dt;
            return DTYPES[i].name;
        }
    return NULL;
}

void ck_io_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

char *ck_io_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = (char *)malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int ck_io_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int ck_io_add_tensor(ck_checkpoint *ck, const ck_tensor_info *t)
{
    if (ck->n_tensors == ck->cap_tensors) {
        int cap = ck->cap_tensors ? ck->cap_tensors * 2 : 64;
        ck_tensor_info *nt = (ck_tensor_info *)realloc(ck->tensors, sizeof *nt * (size_t)cap);
        char **nn = (char **)realloc(ck->names, sizeof *nn * (size_t)cap);
        if (nt) ck->tensors = nt;
        if (nn) ck->names = nn;
        if (!nt || !nn) return 0;
        ck->cap_tensors = cap;
    }
    ck->names[ck->n_tensors] = ck_io_strdup(t->name);
    if (!ck->names[ck->n_tensors]) return 0;
    ck->tensors[ck->n_tensors] = *t;
    ck->tensors[ck->n_tensors].name = ck->names[ck->n_tensors];
    ck->n_tensors++;
    return 1;
}

/* a new, zeroed file entry named `path` (counted at once, so that close() frees it on any later failure) */
static st_file *new_file(ck_checkpoint *ck, const char *path, char *err, size_t errlen)
{
    st_file *f, *nf = (st_file *)realloc(ck->files, sizeof *nf * (size_t)(ck->n_files + 1));
    if (!nf) {
        ck_io_seterr(err, errlen, "out of memory");
        return NULL;
    }
    ck->files = nf;
    f = &ck->files[ck->n_files];
    memset(f, 0, sizeof *f);
    f->path = ck_io_strdup(path);
    if (!f->path) {
        ck_io_seterr(err, errlen, "out of memory");
        return NULL;
    }
    ck->n_files++;
    return f;
}

const st_file *ck_io_borrow_file(ck_checkpoint *ck, const char *name, const void *data, size_t size, char *err,
                                 size_t errlen)
{
    st_file *f;
    if (!data || size == 0) {
        ck_io_seterr(err, errlen, "%s: no bytes", name);
        return NULL;
    }
    if (!(f = new_file(ck, name, err, errlen))) return NULL;
    f->map = (void *)(uintptr_t)data; /* read only, as a mapping */
    f->size = size;
    f->borrowed = 1;
    return f;
}

/* the message of a failed ck_io_read_all / ck_io_read_huge (rc: CK_READ_*) */
static void read_error(int rc, const char *path, size_t size, char *err, size_t errlen)
{
    if (rc == CK_READ_NOMEM)
        ck_io_seterr(err, errlen, "%s: out of memory for its %.0f bytes", path, (double)size);
    else
        ck_io_seterr(err, errlen, "%s: cannot read: %s", path, rc == CK_READ_ERRNO ? strerror(errno) : "it got shorter");
}

const st_file *ck_io_map_file(ck_checkpoint *ck, const char *path, char *err, size_t errlen)
{
    st_file *f;
    struct stat sb;
    int fd;
    if (!(f = new_file(ck, path, err, errlen))) return NULL;
    fd = open(path, O_RDONLY);
    if (fd < 0) {
        ck_io_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ck_io_seterr(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    f->size = (size_t)sb.st_size;
    if (f->size == 0) {
        ck_io_seterr(err, errlen, "%s: the file is empty", path);
        close(fd);
        return NULL;
    }
    if ((off_t)f->size != sb.st_size) {
        ck_io_seterr(err, errlen, "%s: too large for this platform (%.0f bytes)", path, (double)sb.st_size);
        close(fd);
        return NULL;
    }
#ifndef CK_NO_MMAP
    if (ck->flags & CK_OPEN_READ) {
        int rc;
        f->map = ck_io_read_huge(fd, f->size, &f->read_len, &rc);
        if (!f->map) read_error(rc, path, f->size, err, errlen);
        close(fd);
        return f->map ? f : NULL;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        ck_io_seterr(err, errlen, "%s: cannot map: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (ck->flags & CK_OPEN_STREAM) f->settled = ck_io_settle_huge(f->map, f->size, fd, path);
    close(fd);
#else
    if (!(f->map = malloc(f->size))) {
        ck_io_seterr(err, errlen, "%s: out of memory for its %.0f bytes", path, (double)sb.st_size);
        close(fd);
        return NULL;
    }
    {
        const int rc = ck_io_read_all(fd, f->map, f->size);
        if (rc != CK_READ_OK) {
            read_error(rc, path, f->size, err, errlen);
            close(fd);
            return NULL; /* f->map is freed by close() */
        }
    }
    close(fd);
#endif
    return f;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const ck_tensor_info *)a)->name, ((const ck_tensor_info *)b)->name);
}

void ck_io_sort_tensors(ck_checkpoint *ck)
{
    if (ck->n_tensors > 0) qsort(ck->tensors, (size_t)ck->n_tensors, sizeof *ck->tensors, cmp_tensor);
}

void ck_checkpoint_close(ck_checkpoint *ck)
{
    int i;
    if (!ck) return;
    for (i = 0; i < ck->n_files; i++) {
        if (ck->files[i].borrowed) {
            /* the caller's bytes */
        } else {
#ifndef CK_NO_MMAP
            if (ck->files[i].map)
                munmap(ck->files[i].map, ck->files[i].read_len ? ck->files[i].read_len : ck->files[i].size);
#else
            free(ck->files[i].map);
#endif
        }
        free(ck->files[i].path);
    }
    for (i = 0; i < ck->n_tensors; i++) free(ck->names[i]);
    for (i = 0; i < ck->n_kvs; i++) {
        free((char *)ck->kvs[i].key);
        free((void *)ck->kvs[i].strings);
    }
    free(ck->kvs);
    free(ck->optional_prefix);
    free(ck->files);
    free(ck->tensors);
    free(ck->names);
    free(ck);
}

int ck_checkpoint_count(const ck_checkpoint *ck) { return ck ? ck->n_tensors : 0; }

const ck_tensor_info *ck_checkpoint_tensor(const ck_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n_tensors ? &ck->tensors[i] : NULL;
}

const ck_tensor_info *ck_checkpoint_find(const ck_checkpoint *ck, const char *name)
{
    ck_tensor_info key;
    if (!ck || !ck->n_tensors) return NULL;
    memset(&key, 0, sizeof key);
    key.name = name;
    return (const ck_tensor_info *)bsearch(&key, ck->tensors, (size_t)ck->n_tensors, sizeof key, cmp_tensor);
}

void ck_checkpoint_set_optional_prefix(ck_checkpoint *ck, const char *prefix)
{
    if (!ck) return;
    free(ck->optional_prefix);
    ck->optional_prefix = prefix && *prefix ? ck_io_strdup(prefix) : NULL;
}


#ifndef CK_NO_REALPATH
/* 1 when `path` (resolved) is `root` or lies below it */
static int below(const char *root, const char *path)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/') return 1;
    return strncmp(root, path, n) == 0 && (path[n] == 0 || path[n] == '/');
}

/* the directories `path` (dir/name) goes through, symlinks resolved, stay inside `dir` (the file itself may be a
 * symlink: the Hugging Face cache links each file to a blob elsewhere) */
static int no_symlink_out(const char *dir, const char *name, char *path, char *err, size_t errlen)
{
    char *real_dir, *real_parent, *slash = strrchr(path, '/');
    int ok;
    *slash = 0;
    real_parent = realpath(path, NULL);
    *slash = '/';
    real_dir = realpath(dir, NULL);
    ok = !real_parent || !real_dir || below(real_dir, real_parent); /* (missing: opening it says so) */
    if (!ok)
        ck_io_seterr(err, errlen, "names \"%s\", which is in %s, outside the folder %s (through a symlink)", name,
                     real_parent, real_dir);
    free(real_parent);
    free(real_dir);
    return ok;
}
#endif

int ck_path_in_folder(const char *dir, const char *name, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *c = name;
    size_t dl;
    if (!dir || !name || !*name) {
        ck_io_seterr(err, errlen, "an empty file name");
        return 0;
    }
    if (name[0] == '/') {
        ck_io_seterr(err, errlen, "names \"%s\", an absolute path: a file a document names must be in its folder",
                     name);
        return 0;
    }
    while (*c) { /* each component */
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            ck_io_seterr(err, errlen, "names \"%s\", whose \"..\" leaves the folder %s", name, dir);
            return 0;
        }
        c += n;
        while (*c == '/') c++;
    }
    dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    if (dl + 1 + strlen(name) + 1 > outlen) {
        ck_io_seterr(err, errlen, "names \"%s\": the path is too long", name);
        return 0;
    }
    memcpy(out, dir, dl);
    out[dl] = '/';
    strcpy(out + dl + 1, name);
#ifdef CK_NO_REALPATH
    return 1;
#else
    return no_symlink_out(dir, name, out, err, errlen);
#endif
}
