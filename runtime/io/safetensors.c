/*
 * safetensors.c — read-only, bounds-checked safetensors files and sharded
 * *.safetensors.index.json checkpoints, into a ck_checkpoint (checkpoint.c).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_json.h"
#include "ck_quant.h"
#include "checkpoint.h"

#define CK_ST_MAX_HEADER (100u * 1024u * 1024u) /* same cap as the reference implementation */

static int is_uint(const ck_json *v, uint64_t *out)
{
    if (!v || v->type != CK_JSON_NUMBER || v->number < 0 || v->number > 9007199254740992.0 ||
        v->number != (double)(uint64_t)v->number)
        return 0;
    *out = (uint64_t)v->number;
    return 1;
}

/* a tensor's bytes in the data section, for the overlap check */
typedef struct st_range {
    uint64_t begin, end;
    const char *name;
} st_range;

static int by_begin(const void *a, const void *b)
{
    uint64_t x = ((const st_range *)a)->begin, y = ((const st_range *)b)->begin;
    return x < y ? -1 : x > y;
}

/* The tensors of a mapped safetensors file, appended to the checkpoint. */
int ck_safetensors_read(ck_checkpoint *ck, const st_file *f, char *err, size_t errlen)
{
    st_range *ranges = NULL;
    size_t n_ranges = 0, cap_ranges = 0, k;
    int ok = 0;
    uint64_t hlen = 0;
    const unsigned char *base, *data;
    size_t data_size;
    ck_json_doc *doc = NULL;
    const ck_json *root, *e;
    char jerr[200];
    const char *path = f->path;
    int i;

    if (f->size < 8) {
        ck_io_seterr(err, errlen, "%s: truncated: %lu bytes, but a safetensors file starts with an 8-byte header length",
                     path, (unsigned long)f->size);
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
        if (!ck_io_dtype_by_name(dt->string, &t.dtype)) {
            ck_io_seterr(err, errlen, "%s: tensor '%s': unknown dtype \"%s\"", path, e->key, dt->string);
            goto done;
        }
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
        if (numel > UINT64_MAX / ck_dtype_size(t.dtype) || (nbytes = numel * ck_dtype_size(t.dtype)) != en - b) {
            ck_io_seterr(err, errlen,
                   "%s: tensor '%s': shape needs %llu bytes of %s but data_offsets cover %llu bytes", path,
                   e->key, (unsigned long long)(numel * ck_dtype_size(t.dtype)), dt->string,
                   (unsigned long long)(en - b));
            goto done;
        }
        if (nbytes) { /* (zero-size tensors take no bytes and overlap nothing) */
            if (n_ranges == cap_ranges) {
                size_t cap = cap_ranges ? 2 * cap_ranges : 64;
                st_range *nr = (st_range *)realloc(ranges, cap * sizeof *ranges);
                if (!nr) {
                    ck_io_seterr(err, errlen, "out of memory");
                    goto done;
                }
                ranges = nr, cap_ranges = cap;
            }
            ranges[n_ranges].begin = b, ranges[n_ranges].end = en, ranges[n_ranges].name = e->key;
            n_ranges++;
        }
        t.data = data + b;
        t.nbytes = (size_t)nbytes;
        t.qtype = t.dtype == CK_DT_F32 ? CK_Q_F32 : t.dtype == CK_DT_F16 ? CK_Q_F16 : t.dtype == CK_DT_BF16 ? CK_Q_BF16 : -1;
        if (!ck_io_add_tensor(ck, &t)) {
            ck_io_seterr(err, errlen, "out of memory");
            goto done;
        }
    }
    /* two tensors sharing bytes: writing one through a mutable copy, or a crafted file, would change the other */
    if (n_ranges > 1) qsort(ranges, n_ranges, sizeof *ranges, by_begin);
    for (k = 1; k < n_ranges; k++)
        if (ranges[k].begin < ranges[k - 1].end) {
            ck_io_seterr(err, errlen,
                         "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap in the data (a corrupt or "
                         "crafted file)",
                         path, ranges[k - 1].name, (unsigned long long)ranges[k - 1].begin,
                         (unsigned long long)ranges[k - 1].end, ranges[k].name, (unsigned long long)ranges[k].begin,
                         (unsigned long long)ranges[k].end);
            goto done;
        }
    ok = 1;
done:
    free(ranges);
    ck_json_free(doc);
    return ok;
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
int ck_safetensors_read_index(ck_checkpoint *ck, const char *path, int flags, char *err, size_t errlen)
{
    size_t len = 0, dirlen;
    char *text = read_text(path, &len, err, errlen), jerr[200], shard[4096], dir[4096], why[4400];
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
    if (!map->child) {
        ck_io_seterr(err, errlen, "%s: \"weight_map\" is empty: the index names no tensor", path);
        goto done;
    }
    dirlen = slash ? (size_t)(slash - path + 1) : 0;
    if (dirlen + 1 > sizeof dir) {
        ck_io_seterr(err, errlen, "%s: path too long", path);
        goto done;
    }
    memcpy(dir, slash ? path : ".", slash ? dirlen : 1);
    dir[slash ? dirlen : 1] = 0;
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
        if (flags & CK_OPEN_ANY_PATH) {
            if (dirlen + strlen(e->string) + 1 > sizeof shard) {
                ck_io_seterr(err, errlen, "%s: shard path too long", path);
                goto done;
            }
            memcpy(shard, path, dirlen);
            strcpy(shard + dirlen, e->string);
        } else if (!ck_path_in_folder(dir, e->string, shard, sizeof shard, why, sizeof why)) {
            ck_io_seterr(err, errlen, "%s: weight_map[\"%s\"]: %s", path, e->key, why);
            goto done;
        }
        {
            const st_file *f = ck_io_map_file(ck, shard, err, errlen);
            if (!f || !ck_safetensors_read(ck, f, err, errlen)) goto done;
        }
    }
    ck_io_sort_tensors(ck);
    for (e = map->child; e; e = e->next) {
        const ck_tensor_info *t = ck_checkpoint_find(ck, e->key);
        if (!t || !ck_io_ends_with(t->file, e->string)) {
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

