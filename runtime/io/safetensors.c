/*
 * safetensors.c — read-only, bounds-checked safetensors checkpoints.
 *
 * File format: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}}), then the data; offsets are relative to the data.
 * Nothing in a header is trusted: the header length is checked against the
 * file size, every offset against the data size, and every shape against its
 * byte count, so a truncated or corrupt file is an error, never a wild read.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_json.h"
#include "ck_errors.h"
#include "ck_safetensors.h"
#include "ck_quant.h"
#include "checkpoint.h"

#define CK_ST_MAX_HEADER (100u * 1024u * 1024u) /* same cap as the reference implementation */


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

static int ends_with(const char *s, const char *suffix);

void ck_io_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = (char *)malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int is_uint(const ck_json *v, uint64_t *out)
{
    if (!v || v->type != CK_JSON_NUMBER || v->number < 0 || v->number > 9007199254740992.0 ||
        v->number != (double)(uint64_t)v->number)
        return 0;
    *out = (uint64_t)v->number;
    return 1;
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
    ck->names[ck->n_tensors] = dupstr(t->name);
    if (!ck->names[ck->n_tensors]) return 0;
    ck->tensors[ck->n_tensors] = *t;
    ck->tensors[ck->n_tensors].name = ck->names[ck->n_tensors];
    ck->n_tensors++;
    return 1;
}

/* Maps one file and appends its tensors. */
static int open_file(ck_checkpoint *ck, const char *path, char *err, size_t errlen)
{
    st_file *f;
    struct stat sb;
    int fd, ok = 0;
    uint64_t hlen = 0;
    const unsigned char *base, *data;
    size_t data_size;
    ck_json_doc *doc = NULL;
    const ck_json *root, *e;
    char jerr[200], magic[4];
    int i;

    st_file *nf = (st_file *)realloc(ck->files, sizeof *nf * (size_t)(ck->n_files + 1));
    if (!nf) {
        ck_io_seterr(err, errlen, "out of memory");
        return 0;
    }
    ck->files = nf;
    f = &ck->files[ck->n_files];
    memset(f, 0, sizeof *f);
    f->path = dupstr(path);
    if (!f->path) {
        ck_io_seterr(err, errlen, "out of memory");
        return 0;
    }
    ck->n_files++; /* counted now so close() frees it on any failure below */

    fd = open(path, O_RDONLY);
    if (fd < 0) {
        ck_io_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return 0;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ck_io_seterr(err, errlen, "%s: not a regular file", path);
        close(fd);
        return 0;
    }
    f->size = (size_t)sb.st_size;
    if (ends_with(path, ".gguf") || (f->size >= 4 && pread(fd, magic, 4, 0) == 4 && memcmp(magic, "GGUF", 4) == 0)) {
        f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            ck_io_seterr(err, errlen, "%s: cannot map: %s", path, strerror(errno));
            return 0;
        }
        return ck_gguf_read(ck, f, err, errlen);
    }
    if (f->size < 8) {
        ck_io_seterr(err, errlen, "%s: truncated: %lu bytes, but a safetensors file starts with an 8-byte header length",
               path, (unsigned long)f->size);
        close(fd);
        return 0;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        ck_io_seterr(err, errlen, "%s: cannot map: %s", path, strerror(errno));
        return 0;
    }
    base = (const unsigned char *)f->map;
    for (i = 7; i >= 0; i--) hlen = (hlen << 8) | base[i];
    if (hlen > f->size - 8) {
        ck_io_seterr(err, errlen,
               "%s: header length %llu exceeds the file size %lu (truncated, or not a safetensors file)", path,
               (unsigned long long)hlen, (unsigned long)f->size);
        return 0;
    }
    if (hlen > CK_ST_MAX_HEADER) {
        ck_io_seterr(err, errlen, "%s: header length %llu is larger than the %u-byte limit", path,
               (unsigned long long)hlen, CK_ST_MAX_HEADER);
        return 0;
    }
    data = base + 8 + hlen;
    data_size = f->size - 8 - (size_t)hlen;
    doc = ck_json_parse((const char *)base + 8, (size_t)hlen, jerr, sizeof jerr);
    if (!doc) {
        ck_io_seterr(err, errlen, "%s: bad header: %s", path, jerr);
        return 0;
    }
    root = ck_json_root(doc);
    if (root->type != CK_JSON_OBJECT) {
        ck_io_seterr(err, errlen, "%s: bad header: expected a JSON object of tensors", path);
        goto done;
    }
    for (e = root->child; e; e = e->next) {
        ck_tensor_info t;
        const ck_json *dt, *shape, *offs, *d;
        uint64_t b, en, numel = 1, nbytes;
        size_t k;
        if (strcmp(e->key, "__metadata__") == 0) continue;
        memset(&t, 0, sizeof t);
        t.name = e->key;
        t.file = f->path;
        dt = ck_json_get(e, "dtype");
        shape = ck_json_get(e, "shape");
        offs = ck_json_get(e, "data_offsets");
        if (e->type != CK_JSON_OBJECT || !dt || dt->type != CK_JSON_STRING || !shape ||
            shape->type != CK_JSON_ARRAY || !offs || offs->type != CK_JSON_ARRAY || offs->count != 2) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': header entry needs \"dtype\", \"shape\" and \"data_offsets\"",
                   path, e->key);
            goto done;
        }
        for (k = 0; k < N_DTYPES; k++)
            if (strcmp(dt->string, DTYPES[k].name) == 0) break;
        if (k == N_DTYPES) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': unknown dtype \"%s\"", path, e->key, dt->string);
            goto done;
        }
        t.dtype = DTYPES[k].dt;
        if (shape->count > CK_ST_MAX_DIMS) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': rank %lu is more than %d", path, e->key,
                   (unsigned long)shape->count, CK_ST_MAX_DIMS);
            goto done;
        }
        for (d = shape->child; d; d = d->next) {
            uint64_t dim;
            if (!is_uint(d, &dim)) {
                ck_io_seterr(err, errlen, "%s: tensor '%s': shape entries must be non-negative integers", path, e->key);
                goto done;
            }
            if (dim != 0 && numel > UINT64_MAX / dim) {
                ck_io_seterr(err, errlen, "%s: tensor '%s': shape overflows", path, e->key);
                goto done;
            }
            numel *= dim;
            t.shape[t.ndim++] = (int64_t)dim;
        }
        if (!is_uint(offs->child, &b) || !is_uint(offs->child->next, &en)) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': data_offsets must be two non-negative integers", path, e->key);
            goto done;
        }
        if (b > en || en > data_size) {
            ck_io_seterr(err, errlen,
                   "%s: tensor '%s': data_offsets [%llu, %llu] point past the end of the data (%lu bytes; "
                   "truncated file?)",
                   path, e->key, (unsigned long long)b, (unsigned long long)en, (unsigned long)data_size);
            goto done;
        }
        if (numel > UINT64_MAX / DTYPES[k].size || (nbytes = numel * DTYPES[k].size) != en - b) {
            ck_io_seterr(err, errlen,
                   "%s: tensor '%s': shape needs %llu bytes of %s but data_offsets cover %llu bytes", path,
                   e->key, (unsigned long long)(numel * DTYPES[k].size), DTYPES[k].name,
                   (unsigned long long)(en - b));
            goto done;
        }
        t.data = data + b;
        t.nbytes = (size_t)nbytes;
        t.qtype = t.dtype == CK_DT_F32 ? CK_Q_F32 : t.dtype == CK_DT_F16 ? CK_Q_F16 : t.dtype == CK_DT_BF16 ? CK_Q_BF16 : -1;
        if (!ck_io_add_tensor(ck, &t)) {
            ck_io_seterr(err, errlen, "out of memory");
            goto done;
        }
    }
    ok = 1;
done:
    ck_json_free(doc);
    return ok;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const ck_tensor_info *)a)->name, ((const ck_tensor_info *)b)->name);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static char *read_text(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!fp) {
        ck_io_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0) {
        buf = (char *)malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, fp) == (size_t)n) {
            buf[n] = '\0';
            *len = (size_t)n;
        } else {
            free(buf);
            buf = NULL;
            ck_io_seterr(err, errlen, "%s: read failed", path);
        }
    } else {
        ck_io_seterr(err, errlen, "%s: cannot read", path);
    }
    fclose(fp);
    return buf;
}

/* Opens every shard listed in an index's weight_map and checks that each
 * listed tensor really is in its shard. */
static int open_index(ck_checkpoint *ck, const char *path, char *err, size_t errlen)
{
    size_t len = 0, dirlen;
    char *text = read_text(path, &len, err, errlen), jerr[200], shard[4096];
    ck_json_doc *doc;
    const ck_json *map, *e, *e2;
    const char *slash = strrchr(path, '/');
    int ok = 0;
    if (!text) return 0;
    doc = ck_json_parse(text, len, jerr, sizeof jerr);
    free(text);
    if (!doc) {
        ck_io_seterr(err, errlen, "%s: %s", path, jerr);
        return 0;
    }
    map = ck_json_get(ck_json_root(doc), "weight_map");
    if (!map || map->type != CK_JSON_OBJECT) {
        ck_io_seterr(err, errlen, "%s: no \"weight_map\" object (is this a *.safetensors.index.json?)", path);
        goto done;
    }
    dirlen = slash ? (size_t)(slash - path + 1) : 0;
    for (e = map->child; e; e = e->next) {
        int seen = 0;
        if (e->type != CK_JSON_STRING) {
            ck_io_seterr(err, errlen, "%s: weight_map[\"%s\"] must be a file name", path, e->key);
            goto done;
        }
        for (e2 = map->child; e2 != e; e2 = e2->next)
            if (strcmp(e2->string, e->string) == 0) {
                seen = 1;
                break;
            }
        if (seen) continue;
        if (dirlen + strlen(e->string) + 1 > sizeof shard) {
            ck_io_seterr(err, errlen, "%s: shard path too long", path);
            goto done;
        }
        memcpy(shard, path, dirlen);
        strcpy(shard + dirlen, e->string);
        if (!open_file(ck, shard, err, errlen)) goto done;
    }
    qsort(ck->tensors, (size_t)ck->n_tensors, sizeof *ck->tensors, cmp_tensor);
    for (e = map->child; e; e = e->next) {
        const ck_tensor_info *t = ck_checkpoint_find(ck, e->key);
        if (!t || !ends_with(t->file, e->string)) {
            ck_io_seterr(err, errlen, "%s: the index puts tensor '%s' in %s, but that shard does not contain it", path,
                   e->key, e->string);
            goto done;
        }
    }
    ok = 1;
done:
    ck_json_free(doc);
    return ok;
}

ck_checkpoint *ck_checkpoint_open(const char *path, char *err, size_t errlen)
{
    ck_checkpoint *ck;
    struct stat sb;
    char buf[4096];
    int ok, i;
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
            ok = open_file(ck, buf, err, errlen);
        } else {
            snprintf(buf, sizeof buf, "%s/model.safetensors.index.json", path);
            if (stat(buf, &sb) == 0) {
                ok = open_index(ck, buf, err, errlen);
            } else {
                ck_io_seterr(err, errlen, "%s: no model.safetensors or model.safetensors.index.json in this folder",
                       path);
                ok = 0;
            }
        }
    } else if (ends_with(path, ".json")) {
        ok = open_index(ck, path, err, errlen);
    } else {
        ok = open_file(ck, path, err, errlen);
    }
    if (ok) {
        if (ck->n_tensors > 0) /* a GGUF may hold only metadata (a tokenizer) */
            qsort(ck->tensors, (size_t)ck->n_tensors, sizeof *ck->tensors, cmp_tensor);
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

void ck_checkpoint_close(ck_checkpoint *ck)
{
    int i;
    if (!ck) return;
    for (i = 0; i < ck->n_files; i++) {
        if (ck->files[i].map) munmap(ck->files[i].map, ck->files[i].size);
        free(ck->files[i].path);
    }
    for (i = 0; i < ck->n_tensors; i++) free(ck->names[i]);
    ck_gguf_free(ck);
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
    ck->optional_prefix = prefix && *prefix ? dupstr(prefix) : NULL;
}

/* ---- weight loading ------------------------------------------------------ */

/* The tensor `name`, else the same name without the optional prefix. */
static const ck_tensor_info *find_weight(const ck_checkpoint *ck, const char *name)
{
    const ck_tensor_info *t = ck_checkpoint_find(ck, name);
    size_t n;
    if (t || !ck->optional_prefix) return t;
    n = strlen(ck->optional_prefix);
    return strncmp(name, ck->optional_prefix, n) == 0 ? ck_checkpoint_find(ck, name + n) : NULL;
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim)
{
    size_t used = 0;
    int i;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, n - used, "[");
    for (i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

static int store_keep(ck_weight_store *s, void *p, size_t bytes)
{
    if (s->n_owned == s->cap_owned) {
        int cap = s->cap_owned ? s->cap_owned * 2 : 64;
        void **n = (void **)realloc(s->owned, sizeof *n * (size_t)cap);
        if (!n) return 0;
        s->owned = n;
        s->cap_owned = cap;
    }
    s->owned[s->n_owned++] = p;
    s->bytes_owned += bytes;
    return 1;
}

int ck_weights_load(const ck_checkpoint *ck, const ck_weight_spec *spec, int layer, const float **dst,
                    ck_weight_store *store, char *err, size_t errlen)
{
    const ck_tensor_info *part[CK_WEIGHT_MAX_PARTS];
    char names[CK_WEIGHT_MAX_PARTS][256];
    size_t numel[CK_WEIGHT_MAX_PARTS], total = 0;
    int i, in_place = 1;
    float *buf, *w;
    if (spec->n_parts < 1 || spec->n_parts > CK_WEIGHT_MAX_PARTS || spec->ndim < 0 || spec->ndim > CK_WEIGHT_MAX_DIMS) {
        ck_io_seterr(err, errlen, "weight spec '%s': %d parts of rank %d (1..%d parts of rank 0..%d supported)",
               spec->n_parts > 0 ? spec->names[0] : "?", spec->n_parts, spec->ndim, CK_WEIGHT_MAX_PARTS,
               CK_WEIGHT_MAX_DIMS);
        return CK_EFORMAT;
    }
    for (i = 0; i < spec->n_parts; i++) {
        int d, same;
        const ck_tensor_info *t;
        snprintf(names[i], sizeof names[i], spec->names[i], layer);
        t = part[i] = find_weight(ck, names[i]);
        if (!t) {
            ck_io_seterr(err, errlen, "missing tensor '%s' (the checkpoint has %d tensors; HINT: check that the "
                   "weights match the config the model was compiled from)", names[i], ck_checkpoint_count(ck));
            return CK_EFORMAT;
        }
        if (t->qtype < 0) {
            ck_io_seterr(err, errlen, "tensor '%s' in %s has dtype %s; this model loads F32, F16, BF16 or a GGUF block "
                         "type", names[i], t->file, ck_dtype_name(t->dtype));
            return CK_EFORMAT;
        }
        same = t->ndim == spec->ndim;
        for (d = 0; same && d < spec->ndim; d++) same = t->shape[d] == spec->shape[i][d];
        if (!same) {
            char got[96], want[96];
            shape_str(got, sizeof got, t->shape, t->ndim);
            shape_str(want, sizeof want, spec->shape[i], spec->ndim);
            ck_io_seterr(err, errlen, "tensor '%s' in %s has shape %s, but the model expects %s", names[i], t->file, got,
                   want);
            return CK_EFORMAT;
        }
        numel[i] = 1;
        for (d = 0; d < t->ndim; d++) numel[i] *= (size_t)t->shape[d];
        total += numel[i];
        if (t->dtype != CK_DT_F32 || ((uintptr_t)t->data % sizeof(float)) != 0) in_place = 0;
        if (i > 0 && (const char *)part[i - 1]->data + part[i - 1]->nbytes != (const char *)t->data) in_place = 0;
    }
    if (spec->transpose && (spec->n_parts != 1 || spec->ndim != 2)) {
        ck_io_seterr(err, errlen, "'%s': only a single 2-D tensor can be loaded transposed", names[0]);
        return CK_EFORMAT;
    }
    if (in_place && !spec->transpose) {
        *dst = (const float *)part[0]->data;
        store->bytes_mapped += total * sizeof(float);
        return 0;
    }
    buf = (float *)malloc(total * sizeof(float) + 1);
    if (!buf || !store_keep(store, buf, total * sizeof(float))) {
        free(buf);
        ck_io_seterr(err, errlen, "out of memory loading '%s' (%lu floats)", names[0], (unsigned long)total);
        return CK_ENOMEM;
    }
    w = buf;
    for (i = 0; i < spec->n_parts; i++) {
        const unsigned char *src = (const unsigned char *)part[i]->data;
        size_t k;
        if (part[i]->dtype == CK_DT_F32) {
            memcpy(w, src, numel[i] * sizeof(float));
        } else if (part[i]->dtype == CK_DT_GGML) {
            ck_dequantize_row(part[i]->qtype, src, w, (int64_t)numel[i]);
        } else {
            for (k = 0; k < numel[i]; k++) {
                uint16_t h = (uint16_t)(src[2 * k] | (src[2 * k + 1] << 8)); /* little-endian */
                w[k] = part[i]->dtype == CK_DT_F16 ? ck_fp16_to_fp32(h) : ck_bf16_to_fp32(h);
            }
        }
        w += numel[i];
    }
    if (spec->transpose) { /* [in][out] -> [out][in], through a second buffer */
        size_t rows = (size_t)spec->shape[0][0], cols = (size_t)spec->shape[0][1], r, c;
        float *t = (float *)malloc(total * sizeof(float) + 1);
        if (!t) {
            ck_io_seterr(err, errlen, "out of memory transposing '%s'", names[0]);
            return CK_ENOMEM; /* buf is owned by the store */
        }
        for (r = 0; r < rows; r++)
            for (c = 0; c < cols; c++) t[c * rows + r] = buf[r * cols + c];
        memcpy(buf, t, total * sizeof(float));
        free(t);
    }
    *dst = buf;
    return 0;
}

int ck_weight_load(const ck_checkpoint *ck, const ck_weight_spec *spec, int layer, void *base, ck_weight_store *store,
                   char *err, size_t errlen)
{
    ck_qmat *m = (ck_qmat *)((char *)base + spec->field);
    int i, rc;
    if (spec->format == CK_WEIGHT_FLOAT)
        return ck_weights_load(ck, spec, layer, (const float **)((char *)base + spec->field), store, err, errlen);
    if (spec->ndim != 2 || spec->n_parts < 1 || spec->n_parts > CK_QMAT_MAX_PARTS ||
        (spec->format >= 0 && !ck_qtype_valid(spec->format))) {
        ck_io_seterr(err, errlen, "weight spec '%s': a matrix needs 1..%d parts of rank 2 and a known format (%d)",
                     spec->names[0], CK_QMAT_MAX_PARTS, spec->format);
        return CK_EFORMAT;
    }
    memset(m, 0, sizeof *m);
    for (i = 0; i < spec->n_parts; i++) {
        ck_weight_spec one = *spec;
        char name[256];
        const ck_tensor_info *t;
        int64_t rows, K, r;
        int want;
        size_t in_rb, out_rb;
        snprintf(name, sizeof name, spec->names[i], layer);
        one.n_parts = 1;
        one.names[0] = spec->names[i];
        memcpy(one.shape[0], spec->shape[i], sizeof one.shape[0]);
        one.format = CK_WEIGHT_FLOAT;
        t = find_weight(ck, name);
        rows = spec->transpose ? spec->shape[i][1] : spec->shape[i][0];
        K = spec->transpose ? spec->shape[i][0] : spec->shape[i][1];
        m->rows[i] = rows;
        m->n_parts = i + 1;
        if (t && !spec->transpose && t->qtype >= 0 && t->ndim == 2 && t->shape[0] == spec->shape[i][0] &&
            t->shape[1] == spec->shape[i][1] && ck_qtype_valid(t->qtype) &&
            (spec->format == CK_WEIGHT_AS_STORED || spec->format == t->qtype) && (uintptr_t)t->data % 4 == 0) {
            m->type[i] = t->qtype;
            m->data[i] = t->data;
            store->bytes_mapped += t->nbytes;
            continue;
        }
        /* anything else goes through float32: checks (missing, dtype, shape), conversion, transpose */
        {
            const float *f = NULL;
            ck_weight_store tmp;
            memset(&tmp, 0, sizeof tmp);
            if ((rc = ck_weights_load(ck, &one, layer, &f, &tmp, err, errlen))) {
                ck_weight_store_free(&tmp);
                return rc;
            }
            want = spec->format >= 0 ? spec->format : CK_Q_F32;
            in_rb = (size_t)K * sizeof(float);
            out_rb = ck_qtype_row_bytes(want, K);
            if (!out_rb) {
                ck_weight_store_free(&tmp);
                ck_io_seterr(err, errlen, "tensor '%s': rows of %lld are not whole %s blocks of %d", name, (long long)K,
                             ck_qtype_name(want), ck_qtype_block(want));
                return CK_EFORMAT;
            }
            {
                unsigned char *q = (unsigned char *)malloc(out_rb * (size_t)rows + 1);
                if (!q || !store_keep(store, q, out_rb * (size_t)rows)) {
                    free(q);
                    ck_weight_store_free(&tmp);
                    ck_io_seterr(err, errlen, "out of memory converting '%s' to %s", name, ck_qtype_name(want));
                    return CK_ENOMEM;
                }
                for (r = 0; r < rows; r++)
                    ck_quantize_row(want, (const float *)((const char *)f + (size_t)r * in_rb), q + (size_t)r * out_rb, K);
                m->type[i] = want;
                m->data[i] = q;
            }
            /* f may point into the mapping (nothing to free) or into tmp's copies */
            ck_weight_store_free(&tmp);
        }
    }
    return 0;
}

void ck_weight_store_free(ck_weight_store *store)
{
    int i;
    if (!store) return;
    for (i = 0; i < store->n_owned; i++) free(store->owned[i]);
    free(store->owned);
    memset(store, 0, sizeof *store);
}
