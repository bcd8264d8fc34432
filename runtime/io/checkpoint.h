/*
 * checkpoint.h — what the checkpoint readers share (internal to runtime/io): the checkpoint itself
 * (checkpoint.c: files, tensor table, metadata), and each reader's entry point, which ck_checkpoint_open
 * (checkpoint_open.c) calls. Calls run one way: checkpoint_open.c -> {safetensors.c, gguf.c} -> checkpoint.c -> huge_pages.c.
 */
#ifndef CK_IO_CHECKPOINT_H
#define CK_IO_CHECKPOINT_H

#include <stddef.h>

#include "ck_checkpoint.h"

/* Where there is no mmap (WASI, bare metal; or -DCK_NO_MMAP), a file is read into memory instead, and where
 * there is no realpath (WASI: no absolute paths, the runtime's preopened folders are the sandbox) the
 * symlink check of ck_path_in_folder is skipped (its ".." and absolute-path checks stay). */
#if !defined(CK_NO_MMAP) && (defined(__wasi__) || !(defined(__unix__) || defined(__APPLE__)))
#define CK_NO_MMAP 1
#endif
#if !defined(CK_NO_REALPATH) && (defined(__wasi__) || !(defined(__unix__) || defined(__APPLE__)))
#define CK_NO_REALPATH 1
#endif

typedef struct st_file {
    char *path;
    void *map;  /* the mapped file; or its bytes read into memory: malloc'd (CK_NO_MMAP), else anonymous pages */
    size_t size;
    size_t read_len; /* > 0: map is anonymous memory of this many bytes the file was read into (CK_OPEN_READ) */
    int settled;     /* CK_OPEN_STREAM: what ck_io_settle_huge found (CK_SETTLE_*) */
    int borrowed; /* map is the caller's memory (ck_checkpoint_open_memory): not ours to unmap or free */
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
    int flags;               /* the CK_OPEN_* flags it was opened with */
};

/* ---- checkpoint.c ---- */
void ck_io_seterr(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
char *ck_io_strdup(const char *s); /* NULL when out of memory */
int ck_io_ends_with(const char *s, const char *suffix);
/* the dtype of a safetensors dtype name ("F32"): its canonical name, or NULL when unknown */
const char *ck_io_dtype_by_name(const char *name, ck_dtype *dt);
/* maps `path` read-only as the checkpoint's next file (with CK_OPEN_READ in ck->flags: reads it into anonymous
 * memory on huge pages); NULL (err set) when it cannot */
const st_file *ck_io_map_file(ck_checkpoint *ck, const char *path, char *err, size_t errlen);
/* ---- huge_pages.c: reading files, and a model's weights on 2 MiB pages (it calls nothing here) ---- */
enum { CK_READ_OK = 0, CK_READ_ERRNO, CK_READ_SHORT, CK_READ_NOMEM }; /* ERRNO: read() failed, errno says why */
/* reads `size` bytes from fd into dst: CK_READ_* */
int ck_io_read_all(int fd, void *dst, size_t size);
#ifndef CK_NO_MMAP
/* CK_OPEN_READ: the file's `size` bytes read into 2 MiB-aligned, read-only anonymous memory advised onto huge
 * pages, *len bytes long (to munmap); NULL when it cannot, with *rc a CK_READ_* */
void *ck_io_read_huge(int fd, size_t size, size_t *len, int *rc);
/* CK_OPEN_STREAM: faults the mapping of fd in and, where the page cache holds more than a tenth of it on small
 * pages (ck_io_huge_enough), reads it again onto huge ones (Linux; nothing elsewhere). Best effort: it never
 * fails; it says what it found. */
enum {
    CK_SETTLE_SKIPPED = 0, /* too small, unaligned, not Linux, or the kernel cannot say (no smaps, no populate) */
    CK_SETTLE_HUGE,        /* at least 9/10 of it was on huge pages already */
    CK_SETTLE_REREAD,      /* more was on small pages: read again */
    CK_SETTLE_CANNOT       /* more was on small pages, and a probe read again stayed small */
};
/* whether `huge` of `rss` resident bytes on 2 MiB pages is enough to leave a mapping as it is: 9/10 */
static inline int ck_io_huge_enough(long long huge, long long rss) { return huge * 10 >= rss * 9; }
int ck_io_settle_huge(void *map, size_t size, int fd, const char *path);
/* bytes of the mapping starting at `map` on 2 MiB page-table entries, its resident bytes in *rss; -1 unknown */
long long ck_io_huge_bytes(const void *map, long long *rss);
#endif
/* appends the caller's `size` bytes as a file named `name` (borrowed: they must outlive the checkpoint) */
const st_file *ck_io_borrow_file(ck_checkpoint *ck, const char *name, const void *data, size_t size, char *err,
                                 size_t errlen);
/* appends a copy of *t (its name copied); 0 when out of memory */
int ck_io_add_tensor(ck_checkpoint *ck, const ck_tensor_info *t);
void ck_io_sort_tensors(ck_checkpoint *ck); /* by name, for ck_checkpoint_find */

/* ---- the readers: the tensors (and metadata) of a mapped file; 1 on success ---- */
int ck_safetensors_read(ck_checkpoint *ck, const st_file *f, char *err, size_t errlen);          /* safetensors.c */
int ck_safetensors_read_index(ck_checkpoint *ck, const char *path, int flags, char *err, size_t errlen); /* shards */
int ck_gguf_read(ck_checkpoint *ck, const st_file *f, char *err, size_t errlen);                 /* gguf.c */

#endif
