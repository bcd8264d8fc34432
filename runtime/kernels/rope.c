/*
 * rope.c — rotary position embeddings, Hugging Face convention.
 *
 * HF's apply_rotary_pos_emb uses rotate_half: dims i and i + rot_dim/2 form a
 * pair (not the interleaved 2i, 2i+1 of the original paper):
 *   x[i]          = x[i] * cos - x[i + half] * sin
 *   x[i + half]   = x[i + half] * cos + x[i] * sin
 * Frequencies follow transformers' modeling_rope_utils (computed in float32),
 * including the "linear" and "llama3" scalings. The cos/sin tables are built
 * once at init for every position of the context.
 *
 * `interleaved` pairs dims 2i and 2i + 1 instead (GGML's "normal" mode): a
 * GGUF of the `llama` architecture stores q_proj / k_proj with each head's
 * rows permuted so that HF's pair (i, i + half) sits at (2i, 2i + 1). Rotating
 * those pairs with frequency i gives the same q and k up to that permutation,
 * applied to both, so q.k and attention are unchanged and the file's weights
 * are used as they are.
 */
#include <math.h>

#include "ck_kernels.h"

void ck_rope_inv_freq(float *inv_freq, int rot_dim, const ck_rope_params *p)
{
    const float two_pi = (float)(2.0 * 3.14159265358979323846);
    int half = rot_dim / 2, i;
    for (i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)rot_dim;
        float pw = (float)pow((double)(float)p->theta, (double)e);
        float f = 1.0f / pw;
        if (p->kind == CK_ROPE_LINEAR) {
            f = f / (float)p->factor;
        } else if (p->kind == CK_ROPE_LLAMA3) {
            float factor = (float)p->factor;
            float old_ctx = (float)p->original_max_pos;
            float low_wavelen = old_ctx / (float)p->low_freq_factor;
            float high_wavelen = old_ctx / (float)p->high_freq_factor;
            float wavelen = two_pi / f;
            float scaled = wavelen > low_wavelen ? f / factor : f;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                float smooth = (old_ctx / wavelen - (float)p->low_freq_factor) /
                               ((float)p->high_freq_factor - (float)p->low_freq_factor);
                scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
            }
            f = scaled;
        }
        inv_freq[i] = f;
    }
}

void ck_rope_table(float *cos_t, float *sin_t, const float *inv_freq, int rot_dim, int n_pos)
{
    int half = rot_dim / 2, pos, i;
    for (pos = 0; pos < n_pos; pos++)
        for (i = 0; i < half; i++) {
            float a = (float)pos * inv_freq[i];
            cos_t[(size_t)pos * half + i] = cosf(a);
            sin_t[(size_t)pos * half + i] = sinf(a);
        }
}

static void rope_row(float *o, const float *v, int head_dim, int half, const float *c, const float *s, int interleaved)
{
    int i;
    if (interleaved)
        for (i = 0; i < half; i++) {
            float a = v[2 * i], b = v[2 * i + 1];
            o[2 * i] = a * c[i] - b * s[i];
            o[2 * i + 1] = b * c[i] + a * s[i];
        }
    else
        for (i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            o[i] = a * c[i] - b * s[i];
            o[i + half] = b * c[i] + a * s[i];
        }
    if (o != v)
        for (i = 2 * half; i < head_dim; i++) o[i] = v[i];
}

void ck_rope(float *out, int ldo, const float *x, int ldx, int T, int n_heads, int head_dim, int rot_dim,
             int pos0, const float *cos_t, const float *sin_t, int interleaved, const ck_seqmap *map)
{
    int half = rot_dim / 2, t;
#pragma omp parallel for schedule(static) if ((long)T * n_heads * head_dim >= CK_PAR_MIN)
    for (t = 0; t < T; t++) {
        const float *c = cos_t + (size_t)ck_seq_pos(map, pos0, t) * half, *s = sin_t + (size_t)ck_seq_pos(map, pos0, t) * half;
        int h;
        for (h = 0; h < n_heads; h++)
            rope_row(out + (size_t)t * ldo + (size_t)h * head_dim, x + (size_t)t * ldx + (size_t)h * head_dim,
                     head_dim, half, c, s, interleaved);
    }
}

void ck_rope_ref(float *out, int ldo, const float *x, int ldx, int T, int n_heads, int head_dim, int rot_dim,
                 int pos0, const float *cos_t, const float *sin_t, int interleaved, const ck_seqmap *map)
{
    int half = rot_dim / 2, t, h, i;
    for (t = 0; t < T; t++)
        for (h = 0; h < n_heads; h++) {
            const float *v = x + (size_t)t * ldx + (size_t)h * head_dim;
            float *o = out + (size_t)t * ldo + (size_t)h * head_dim;
            const float *c = cos_t + (size_t)ck_seq_pos(map, pos0, t) * half, *s = sin_t + (size_t)ck_seq_pos(map, pos0, t) * half;
            float rot[CK_ATTENTION_MAX_HEAD_DIM], res[CK_ATTENTION_MAX_HEAD_DIM];
            if (interleaved) { /* the paper's form: pair (2i, 2i + 1) turns by angle i */
                for (i = 0; i < half; i++) {
                    res[2 * i] = v[2 * i] * c[i] - v[2 * i + 1] * s[i];
                    res[2 * i + 1] = v[2 * i + 1] * c[i] + v[2 * i] * s[i];
                }
            } else {
                /* rotate_half(v[:rot_dim]) = cat(-v[half:rot_dim], v[:half]) */
                for (i = 0; i < half; i++) {
                    rot[i] = -v[i + half];
                    rot[i + half] = v[i];
                }
                for (i = 0; i < rot_dim; i++) res[i] = v[i] * c[i % half] + rot[i] * s[i % half];
            }
            for (i = rot_dim; i < head_dim; i++) res[i] = v[i];
            for (i = 0; i < head_dim; i++) o[i] = res[i];
        }
}

void ck_rotate_half(float *out, const float *x, size_t n, int64_t D)
{
    int64_t h = D / 2, r, rows = D > 0 ? (int64_t)(n / (size_t)D) : 0;
#pragma omp parallel for schedule(static) if (n >= CK_PAR_MIN)
    for (r = 0; r < rows; r++) {
        const float *v = x + r * D;
        float *o = out + r * D;
        int64_t j;
        for (j = 0; j < h; j++) {
            o[j] = -v[j + h];
            o[j + h] = v[j];
        }
    }
}
