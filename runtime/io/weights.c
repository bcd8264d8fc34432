/*
 * weights.c — a model's weights from an open checkpoint (ck_weights.h): each ck_weight_spec's parts found
 * by name (with the optional prefix), checked against the spec's shapes, and used in place from the mapping
 * or converted (dtype, concatenation, transposition, a stored format) into memory the store owns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "ck_errors.h"
#include "ck_quant.h"
#include "ck_weights.h"

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
            if (ck_dequantize_row(part[i]->qtype, src, w, (int64_t)numel[i]) != CK_OK) {
                ck_io_seterr(err, errlen, "tensor '%s': ckc cannot convert %s to float32", names[i],
                             ck_qtype_name(part[i]->qtype));
                return CK_EFORMAT;
            }
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

/* Expert e's tensor name (the spec's template with the layer and e filled in) as a template again, '%' doubled,
 * for the one-part spec ck_weight(s)_load formats with the layer */
static void expert_name(const ck_weight_spec *spec, int layer, int e, char *esc, size_t n)
{
    char full[256];
    size_t i, j = 0;
    snprintf(full, sizeof full, spec->names[0], layer, e);
    for (i = 0; full[i] && j + 2 < n; i++) {
        if (full[i] == '%') esc[j++] = '%';
        esc[j++] = full[i];
    }
    esc[j] = '\0';
}

/* A mixture's experts (spec->n_experts > 0): an array of one ck_qmat per expert, owned by the store. */
static int load_experts(const ck_checkpoint *ck, const ck_weight_spec *spec, int layer, void *base,
                        ck_weight_store *store, char *err, size_t errlen)
{
    const int E = spec->n_experts;
    ck_qmat *m;
    int e, rc;
    if (spec->format == CK_WEIGHT_FLOAT && spec->ndim == 2 && E <= CK_MOE_MAX_EXPERTS && spec->n_parts == 1 &&
        !spec->transpose) { /* float32, [E][N][K] in one array: each expert's tensor converted and copied in */
        size_t per = (size_t)spec->shape[0][0] * (size_t)spec->shape[0][1];
        float *all = (float *)malloc((size_t)E * per * sizeof(float) + 1);
        if (!all || !store_keep(store, all, (size_t)E * per * sizeof(float))) {
            free(all);
            ck_io_seterr(err, errlen, "out of memory for the experts of '%s'", spec->names[0]);
            return CK_ENOMEM;
        }
        for (e = 0; e < E; e++) {
            char esc[512];
            const float *f = NULL;
            ck_weight_spec one = *spec;
            ck_weight_store tmp;
            memset(&tmp, 0, sizeof tmp);
            expert_name(spec, layer, e, esc, sizeof esc);
            one.n_experts = 0;
            one.names[0] = esc;
            if ((rc = ck_weights_load(ck, &one, layer, &f, &tmp, err, errlen))) {
                ck_weight_store_free(&tmp);
                return rc;
            }
            memcpy(all + (size_t)e * per, f, per * sizeof(float));
            ck_weight_store_free(&tmp);
        }
        *(const float **)((char *)base + spec->field) = all;
        return 0;
    }
    if (E > CK_MOE_MAX_EXPERTS || spec->n_parts != 1 || spec->transpose || (spec->ndim != 2 && spec->ndim != 3) ||
        spec->format == CK_WEIGHT_FLOAT || (spec->ndim == 3 && spec->shape[0][0] != E)) {
        ck_io_seterr(err, errlen, "weight spec '%s': %d experts of rank %d (1..%d experts, one part of rank 2 or a "
                     "stacked rank 3, a matrix format)", spec->names[0], E, spec->ndim, CK_MOE_MAX_EXPERTS);
        return CK_EFORMAT;
    }
    m = (ck_qmat *)calloc((size_t)E, sizeof *m);
    if (!m || !store_keep(store, m, (size_t)E * sizeof *m)) {
        free(m);
        ck_io_seterr(err, errlen, "out of memory for the experts of '%s'", spec->names[0]);
        return CK_ENOMEM;
    }
    *(const ck_qmat **)((char *)base + spec->field) = m;
    if (spec->ndim == 3) { /* stacked: expert e is rows [e N, (e + 1) N) of the one tensor */
        char name[256], got[96], want[96];
        const ck_tensor_info *t;
        int64_t N = spec->shape[0][1], K = spec->shape[0][2];
        size_t rb;
        snprintf(name, sizeof name, spec->names[0], layer);
        t = find_weight(ck, name);
        if (!t) {
            ck_io_seterr(err, errlen, "missing tensor '%s' (the checkpoint has %d tensors)", name,
                         ck_checkpoint_count(ck));
            return CK_EFORMAT;
        }
        if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != N || t->shape[2] != K) {
            shape_str(got, sizeof got, t->shape, t->ndim);
            shape_str(want, sizeof want, spec->shape[0], 3);
            ck_io_seterr(err, errlen, "tensor '%s' in %s has shape %s, but the model expects %s (experts x rows x "
                         "columns)", name, t->file, got, want);
            return CK_EFORMAT;
        }
        if (t->qtype < 0 || !ck_qtype_valid(t->qtype) || !(rb = ck_qtype_row_bytes(t->qtype, K)) ||
            (spec->format != CK_WEIGHT_AS_STORED && spec->format != t->qtype) || (uintptr_t)t->data % 4 != 0 ||
            t->nbytes != (size_t)E * (size_t)N * rb) { /* (the views below stay inside the tensor's bytes) */
            ck_io_seterr(err, errlen, "tensor '%s' in %s: experts stacked in one tensor are used as stored, and "
                         "its type (%s) cannot be", name, t->file, t->qtype >= 0 ? ck_qtype_name(t->qtype) : "?");
            return CK_EFORMAT;
        }
        for (e = 0; e < E; e++) {
            m[e].n_parts = 1;
            m[e].type[0] = t->qtype;
            m[e].rows[0] = N;
            m[e].data[0] = (const char *)t->data + (size_t)e * (size_t)N * rb;
        }
        store->bytes_mapped += t->nbytes;
        return 0;
    }
    for (e = 0; e < E; e++) { /* one tensor each */
        char esc[512];
        ck_weight_spec one = *spec;
        expert_name(spec, layer, e, esc, sizeof esc);
        one.n_experts = 0;
        one.names[0] = esc;
        one.field = 0;
        if ((rc = ck_weight_load(ck, &one, layer, &m[e], store, err, errlen))) return rc;
    }
    return 0;
}

int ck_weight_load(const ck_checkpoint *ck, const ck_weight_spec *spec, int layer, void *base, ck_weight_store *store,
                   char *err, size_t errlen)
{
    ck_qmat *m = (ck_qmat *)((char *)base + spec->field);
    int i, rc;
    if (spec->n_experts > 0) return load_experts(ck, spec, layer, base, store, err, errlen);
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
                for (r = 0; r < rows; r++) {
                    const float *row = (const float *)((const char *)f + (size_t)r * in_rb);
                    int qrc = ck_quantize_row(want, row, q + (size_t)r * out_rb, K);
                    if (qrc == CK_EFORMAT) {
                        ck_weight_store_free(&tmp);
                        ck_io_seterr(err, errlen, "tensor '%s': row %lld holds a NaN or an infinity, which %s cannot "
                                     "hold", name, (long long)r, ck_qtype_name(want));
                        return CK_EFORMAT;
                    }
                    if (qrc != CK_OK) {
                        ck_weight_store_free(&tmp);
                        ck_io_seterr(err, errlen, "tensor '%s': ckc cannot write %s", name, ck_qtype_name(want));
                        return CK_ENOTSUP;
                    }
                }
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
