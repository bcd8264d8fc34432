/*
 * gguf.c — read-only, bounds-checked GGUF files (llama.cpp's format).
 *
 * Layout (little-endian): "GGUF", version (2 or 3), tensor count (u64),
 * metadata count (u64); the metadata (key string, u32 type, value; strings
 * are a u64 length and bytes; arrays a u32 element type, a u64 count and the
 * elements); the tensor infos (name, u32 n_dims, u64 ne[n_dims] innermost
 * first, u32 ggml type, u64 offset); padding to general.alignment (default
 * 32); the data, each tensor at its offset (a multiple of the alignment).
 *
 * Nothing is trusted: every count and length is checked against the bytes
 * that are left before it is used, each tensor's byte size is computed from
 * its type and dims and must fit inside the data, and an unknown or
 * unsupported type is an error naming the tensor. Shapes are reported
 * outermost first, like safetensors (a [ne0 = in, ne1 = out] GGUF matrix is
 * shape [out, in]), so the same weight specs read both formats.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "ck_errors.h"
#include "ck_quant.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    const unsigned char *base, *p, *end;
    const char *path;
    char *err;
    size_t errlen;
} reader;

static int need(reader *r, uint64_t n, const char *what)
{
    if ((uint64_t)(r->end - r->p) < n) {
        ck_io_seterr(r->err, r->errlen, "%s: truncated: %s needs %llu bytes at offset %lu, %lu are left", r->path,
                     what, (unsigned long long)n, (unsigned long)(r->p - r->base),
                     (unsigned long)(r->end - r->p));
        return 0;
    }
    return 1;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    int i;
    for (i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int rd_u32(reader *r, uint32_t *v, const char *what)
{
    if (!need(r, 4, what)) return 0;
    *v = (uint32_t)le(r->p, 4);
    r->p += 4;
    return 1;
}

static int rd_u64(reader *r, uint64_t *v, const char *what)
{
    if (!need(r, 8, what)) return 0;
    *v = le(r->p, 8);
    r->p += 8;
    return 1;
}

/* a string: its bytes stay in the mapping */
static int rd_str(reader *r, const unsigned char **s, uint64_t *len, const char *what)
{
    if (!rd_u64(r, len, what) || !need(r, *len, what)) return 0;
    *s = r->p;
    r->p += *len;
    return 1;
}

static size_t scalar_size(int type)
{
    switch (type) {
    case CK_GGUF_U8: case CK_GGUF_I8: case CK_GGUF_BOOL: return 1;
    case CK_GGUF_U16: case CK_GGUF_I16: return 2;
    case CK_GGUF_U32: case CK_GGUF_I32: case CK_GGUF_F32: return 4;
    case CK_GGUF_U64: case CK_GGUF_I64: case CK_GGUF_F64: return 8;
    default: return 0;
    }
}

static char *dup_n(const unsigned char *s, uint64_t n)
{
    char *d = (char *)malloc((size_t)n + 1);
    if (d) {
        memcpy(d, s, (size_t)n);
        d[n] = '\0';
    }
    return d;
}

/* one metadata value of `type` into kv (arrays: one level; nested arrays are skipped over) */
static int rd_value(reader *r, ck_gguf_kv *kv, int type, int depth)
{
    size_t sz = scalar_size(type);
    kv->type = type;
    kv->count = 1;
    kv->data = r->p;
    if (sz) {
        if (!need(r, sz, kv->key)) return 0;
        r->p += sz;
        return 1;
    }
    if (type == CK_GGUF_STRING) {
        const unsigned char *s;
        uint64_t n;
        return rd_str(r, &s, &n, kv->key);
    }
    if (type == CK_GGUF_ARRAY) {
        uint32_t et;
        uint64_t n, i;
        if (depth > 1) {
            ck_io_seterr(r->err, r->errlen, "%s: metadata '%s': arrays nested more than two deep", r->path, kv->key);
            return 0;
        }
        if (!rd_u32(r, &et, kv->key) || !rd_u64(r, &n, kv->key)) return 0;
        kv->elem_type = (int)et;
        kv->count = n;
        kv->data = r->p;
        if ((sz = scalar_size((int)et)) != 0) {
            if (n > (uint64_t)(r->end - r->p) / sz) {
                ck_io_seterr(r->err, r->errlen, "%s: metadata '%s': %llu elements of %lu bytes run past the end of the "
                             "file (truncated?)", r->path, kv->key, (unsigned long long)n, (unsigned long)sz);
                return 0;
            }
            r->p += n * sz;
            return 1;
        }
        if (et == CK_GGUF_STRING) {
            if (n > (uint64_t)(r->end - r->p) / 8) {
                ck_io_seterr(r->err, r->errlen, "%s: metadata '%s': %llu strings cannot fit in the %lu bytes left",
                             r->path, kv->key, (unsigned long long)n, (unsigned long)(r->end - r->p));
                return 0;
            }
            kv->strings = (const unsigned char **)malloc(sizeof *kv->strings * (size_t)(n ? n : 1));
            if (!kv->strings) {
                ck_io_seterr(r->err, r->errlen, "out of memory reading metadata '%s'", kv->key);
                return 0;
            }
            for (i = 0; i < n; i++) {
                const unsigned char *s;
                uint64_t len;
                kv->strings[i] = r->p;
                if (!rd_str(r, &s, &len, kv->key)) return 0;
            }
            return 1;
        }
        if (et == CK_GGUF_ARRAY) { /* skipped over: ckc reads no nested arrays */
            ck_gguf_kv inner;
            for (i = 0; i < n; i++) {
                memset(&inner, 0, sizeof inner);
                inner.key = kv->key;
                if (!rd_value(r, &inner, CK_GGUF_ARRAY, depth + 1)) {
                    free(inner.strings);
                    return 0;
                }
                free(inner.strings);
            }
            return 1;
        }
        ck_io_seterr(r->err, r->errlen, "%s: metadata '%s': unknown array element type %u", r->path, kv->key,
                     (unsigned)et);
        return 0;
    }
    ck_io_seterr(r->err, r->errlen, "%s: metadata '%s': unknown value type %d", r->path, kv->key, type);
    return 0;
}

int ck_gguf_read(ck_checkpoint *ck, const st_file *f, char *err, size_t errlen)
{
    reader r;
    uint32_t version;
    uint64_t n_tensors, n_kv, i, alignment = GGUF_DEFAULT_ALIGNMENT, data_off;
    const unsigned char *base = (const unsigned char *)f->map;
    char name[512];
    r.base = r.p = base;
    r.end = base + f->size;
    r.path = f->path;
    r.err = err;
    r.errlen = errlen;
    if (f->size < 4 || memcmp(base, "GGUF", 4) != 0) {
        ck_io_seterr(err, errlen, "%s: not a GGUF file (it does not start with \"GGUF\")", f->path);
        return 0;
    }
    r.p += 4;
    if (!rd_u32(&r, &version, "the version")) return 0;
    if (version != 2 && version != 3) {
        ck_io_seterr(err, errlen, "%s: GGUF version %u; ckc reads versions 2 and 3", f->path, (unsigned)version);
        return 0;
    }
    if (!rd_u64(&r, &n_tensors, "the tensor count") || !rd_u64(&r, &n_kv, "the metadata count")) return 0;
    /* every metadata entry takes >= 12 bytes, every tensor info >= 24 */
    if (n_kv > (uint64_t)(r.end - r.p) / 12 || n_tensors > (uint64_t)(r.end - r.p) / 24) {
        ck_io_seterr(err, errlen, "%s: %llu metadata entries and %llu tensors cannot fit in a %lu-byte file "
                     "(corrupt or truncated)", f->path, (unsigned long long)n_kv, (unsigned long long)n_tensors,
                     (unsigned long)f->size);
        return 0;
    }
    ck->kvs = (ck_gguf_kv *)calloc((size_t)(n_kv ? n_kv : 1), sizeof *ck->kvs);
    if (!ck->kvs) {
        ck_io_seterr(err, errlen, "out of memory");
        return 0;
    }
    for (i = 0; i < n_kv; i++) {
        ck_gguf_kv *kv = &ck->kvs[i];
        const unsigned char *key;
        uint64_t klen;
        uint32_t type;
        if (!rd_str(&r, &key, &klen, "a metadata key")) return 0;
        if (!(kv->key = dup_n(key, klen))) {
            ck_io_seterr(err, errlen, "out of memory");
            return 0;
        }
        ck->n_kvs++;
        if (!rd_u32(&r, &type, kv->key) || !rd_value(&r, kv, (int)type, 0)) return 0;
        if (strcmp(kv->key, "general.alignment") == 0) {
            int64_t a;
            if (ck_gguf_kv_int(kv, 0, &a) || a <= 0 || (a & (a - 1)) != 0) {
                ck_io_seterr(err, errlen, "%s: general.alignment must be a power of two", f->path);
                return 0;
            }
            alignment = (uint64_t)a;
        }
    }
    {
        /* the tensor infos: read twice, because the data offset follows the last one */
        const unsigned char *infos = r.p;
        for (i = 0; i < n_tensors; i++) {
            const unsigned char *s;
            uint64_t len, off, ne;
            uint32_t nd, type, d;
            if (!rd_str(&r, &s, &len, "a tensor name") || !rd_u32(&r, &nd, "a tensor's rank")) return 0;
            if (nd > GGUF_MAX_DIMS) {
                ck_io_seterr(err, errlen, "%s: tensor '%.*s': %u dims (GGUF has at most %d)", f->path,
                             (int)(len < 200 ? len : 200), (const char *)s, (unsigned)nd, GGUF_MAX_DIMS);
                return 0;
            }
            for (d = 0; d < nd; d++)
                if (!rd_u64(&r, &ne, "a tensor's dims")) return 0;
            if (!rd_u32(&r, &type, "a tensor's type") || !rd_u64(&r, &off, "a tensor's offset")) return 0;
        }
        data_off = (uint64_t)(r.p - base);
        data_off = (data_off + alignment - 1) / alignment * alignment;
        if (data_off > f->size) {
            ck_io_seterr(err, errlen, "%s: truncated: the tensor data would start at %llu, past the end (%lu bytes)",
                         f->path, (unsigned long long)data_off, (unsigned long)f->size);
            return 0;
        }
        r.p = infos;
    }
    for (i = 0; i < n_tensors; i++) {
        ck_tensor_info t;
        const unsigned char *s;
        uint64_t len = 0, off = 0, ne[GGUF_MAX_DIMS] = {0, 0, 0, 0}, numel = 1, rows = 1, rb, nbytes;
        uint32_t nd = 0, type = 0, d;
        memset(&t, 0, sizeof t);
        rd_str(&r, &s, &len, "a tensor name"); /* checked in the first pass */
        if (len == 0 || len >= sizeof name) {
            ck_io_seterr(err, errlen, "%s: tensor %llu: name of %llu bytes (1..%lu)", f->path, (unsigned long long)i,
                         (unsigned long long)len, (unsigned long)sizeof name - 1);
            return 0;
        }
        memcpy(name, s, (size_t)len);
        name[len] = '\0';
        rd_u32(&r, &nd, "");
        for (d = 0; d < nd; d++) {
            rd_u64(&r, &ne[d], "");
            if (ne[d] > INT64_MAX || (ne[d] && numel > UINT64_MAX / ne[d])) {
                ck_io_seterr(err, errlen, "%s: tensor '%s': dims overflow", f->path, name);
                return 0;
            }
            numel *= ne[d];
            if (d > 0) rows *= ne[d];
        }
        rd_u32(&r, &type, "");
        rd_u64(&r, &off, "");
        if (!ck_qtype_valid((int)type)) {
            ck_io_seterr(err, errlen, "%s: tensor '%s' has GGML type %u (%s), which ckc does not read; it reads f32, "
                         "f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K and q6_K", f->path, name, (unsigned)type,
                         ck_qtype_name((int)type));
            return 0;
        }
        rb = nd ? ck_qtype_row_bytes((int)type, (int64_t)ne[0]) : (uint64_t)ck_qtype_block_bytes((int)type);
        if (nd && ne[0] && !rb) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': a row of %llu elements is not a whole number of %s blocks "
                         "of %d", f->path, name, (unsigned long long)ne[0], ck_qtype_name((int)type),
                         ck_qtype_block((int)type));
            return 0;
        }
        if (rows && rb > UINT64_MAX / rows) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': byte size overflows", f->path, name);
            return 0;
        }
        nbytes = rb * rows;
        if (off % alignment || off > f->size - data_off || nbytes > f->size - data_off - off) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': %llu bytes at data offset %llu %s (data: %llu bytes from "
                         "%llu; truncated file?)", f->path, name, (unsigned long long)nbytes, (unsigned long long)off,
                         off % alignment ? "are not aligned" : "run past the end of the file",
                         (unsigned long long)(f->size - data_off), (unsigned long long)data_off);
            return 0;
        }
        t.name = name;
        t.file = f->path;
        t.qtype = (int)type;
        t.dtype = type == CK_Q_F32 ? CK_DT_F32 : type == CK_Q_F16 ? CK_DT_F16 : type == CK_Q_BF16 ? CK_DT_BF16 : CK_DT_GGML;
        t.ndim = (int)nd;
        for (d = 0; d < nd; d++) t.shape[d] = (int64_t)ne[nd - 1 - d];
        t.data = base + data_off + off;
        t.nbytes = (size_t)nbytes;
        (void)numel;
        if (!ck_io_add_tensor(ck, &t)) {
            ck_io_seterr(err, errlen, "out of memory");
            return 0;
        }
    }
    return 1;
}

int ck_checkpoint_kv_count(const ck_checkpoint *ck) { return ck ? ck->n_kvs : 0; }

const ck_gguf_kv *ck_checkpoint_kv(const ck_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n_kvs ? &ck->kvs[i] : NULL;
}

const ck_gguf_kv *ck_checkpoint_kv_find(const ck_checkpoint *ck, const char *key)
{
    int i;
    if (!ck || !key) return NULL;
    for (i = 0; i < ck->n_kvs; i++)
        if (strcmp(ck->kvs[i].key, key) == 0) return &ck->kvs[i];
    return NULL;
}

/* element i of kv: its type and bytes */
static const unsigned char *element(const ck_gguf_kv *kv, uint64_t i, int *type)
{
    if (!kv || i >= kv->count) return NULL;
    if (kv->type != CK_GGUF_ARRAY) {
        *type = kv->type;
        return kv->data;
    }
    *type = kv->elem_type;
    if (kv->elem_type == CK_GGUF_STRING) return kv->strings ? kv->strings[i] : NULL;
    return scalar_size(kv->elem_type) ? kv->data + i * scalar_size(kv->elem_type) : NULL;
}

int ck_gguf_kv_int(const ck_gguf_kv *kv, uint64_t i, int64_t *out)
{
    int type;
    const unsigned char *p = element(kv, i, &type);
    if (!p) return -1;
    switch (type) {
    case CK_GGUF_U8: case CK_GGUF_BOOL: *out = p[0]; return 0;
    case CK_GGUF_I8: *out = (int8_t)p[0]; return 0;
    case CK_GGUF_U16: *out = (int64_t)le(p, 2); return 0;
    case CK_GGUF_I16: *out = (int16_t)le(p, 2); return 0;
    case CK_GGUF_U32: *out = (int64_t)le(p, 4); return 0;
    case CK_GGUF_I32: *out = (int32_t)le(p, 4); return 0;
    case CK_GGUF_U64: if (le(p, 8) > INT64_MAX) return -1; *out = (int64_t)le(p, 8); return 0;
    case CK_GGUF_I64: *out = (int64_t)le(p, 8); return 0;
    default: return -1;
    }
}

int ck_gguf_kv_num(const ck_gguf_kv *kv, uint64_t i, double *out)
{
    int type;
    int64_t v;
    const unsigned char *p = element(kv, i, &type);
    if (!p) return -1;
    if (type == CK_GGUF_F32) {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return 0;
    }
    if (type == CK_GGUF_F64) {
        uint64_t u = le(p, 8);
        memcpy(out, &u, 8);
        return 0;
    }
    if (ck_gguf_kv_int(kv, i, &v)) return -1;
    *out = (double)v;
    return 0;
}

const char *ck_gguf_kv_str(const ck_gguf_kv *kv, uint64_t i, size_t *len)
{
    int type;
    const unsigned char *p = element(kv, i, &type);
    if (!p || type != CK_GGUF_STRING) return NULL;
    *len = (size_t)le(p, 8);
    return (const char *)p + 8;
}

int ck_checkpoint_check_gguf(const ck_checkpoint *ck, const ck_gguf_expect *expect, int n, char *err, size_t errlen)
{
    int k;
    const char *file = ck && ck->n_files ? ck->files[0].path : "the weights";
    if (!ck || ck->n_kvs == 0) return 0; /* safetensors: its tensors are checked one by one */
    for (k = 0; k < n; k++) {
        const ck_gguf_expect *e = &expect[k];
        const ck_gguf_kv *kv = ck_checkpoint_kv_find(ck, e->key);
        int64_t iv;
        double dv;
        size_t len;
        const char *sv;
        if (!kv) {
            ck_io_seterr(err, errlen, "%s: metadata '%s' is missing; the model was compiled from a file that has it",
                         file, e->key);
            return CK_EFORMAT;
        }
        if (e->kind == 0) {
            if (ck_gguf_kv_int(kv, 0, &iv)) {
                ck_io_seterr(err, errlen, "%s: metadata '%s' is not an integer; the model was compiled for %lld", file,
                             e->key, (long long)e->i);
                return CK_EFORMAT;
            }
            if (iv != e->i) {
                ck_io_seterr(err, errlen, "%s: metadata '%s' is %lld; the model was compiled for %lld", file, e->key,
                             (long long)iv, (long long)e->i);
                return CK_EFORMAT;
            }
        } else if (e->kind == 1) {
            if (ck_gguf_kv_num(kv, 0, &dv)) {
                ck_io_seterr(err, errlen, "%s: metadata '%s' is not a number; the model was compiled for %.9g", file,
                             e->key, e->number);
                return CK_EFORMAT;
            }
            if ((float)dv != (float)e->number) {
                ck_io_seterr(err, errlen, "%s: metadata '%s' is %.9g; the model was compiled for %.9g", file, e->key,
                             dv, e->number);
                return CK_EFORMAT;
            }
        } else {
            sv = ck_gguf_kv_str(kv, 0, &len);
            if (!sv || len != strlen(e->str) || memcmp(sv, e->str, len) != 0) {
                ck_io_seterr(err, errlen, "%s: metadata '%s' is \"%.*s\"; the model was compiled for \"%s\"", file,
                             e->key, sv ? (int)(len > 64 ? 64 : len) : 1, sv ? sv : "?", e->str);
                return CK_EFORMAT;
            }
        }
    }
    return 0;
}
