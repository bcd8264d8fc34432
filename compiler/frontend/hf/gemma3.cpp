// gemma3.cpp — model_type "gemma3_text": Gemma 3's language model (gemma-3-270m, -1b; the text part of the
// larger ones). Gemma 2's layer (sandwich norms, (1 + w) RMSNorm, GeGLU, embeddings x sqrt(hidden), the attention
// scale query_pre_attn_scalar^-1/2) with
//   * RMSNorm (1 + w) on each head of q and of k before RoPE (q_norm, k_norm: [head_dim]);
//   * local (sliding) and global layers, 5 to 1 by default: layer i is global when (i + 1) % 6 == 0
//     (sliding_window_pattern; or per layer_types), the window (sliding_window, 4096) on the local ones;
//   * two RoPEs: local layers theta rope_local_base_freq (10k), no scaling; global ones theta rope_theta (1M) with
//     rope_scaling (linear x8 in the 4B and larger). Newer configs say the same in rope_parameters
//     {"sliding_attention": {...}, "full_attention": {...}};
//   * the final logits soft-capped where final_logit_softcapping is set (null by default). The config class has
//     attn_logit_softcapping too, but Gemma3Attention never applies it (nor does llama.cpp): a note says so.
#include <cmath>

#include <fmt/format.h>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

namespace {

struct Gemma3Rope {
    RopeConfig local, global;
};

Gemma3Rope read_gemma3_rope(const ConfigReader &r, const RopeConfig &base)
{
    Gemma3Rope g{base, base};
    g.local.type = "default";
    g.local.factor = 1.0;
    std::optional<ConfigReader> params = r.object("rope_parameters");
    if (params && (params->has("sliding_attention") || params->has("full_attention"))) {
        auto read = [&](const char *type, double theta, RopeConfig &out) {
            out.type = "default";
            out.factor = 1.0;
            out.theta = theta;
            if (auto s = params->object(type)) {
                out.theta = s->positive_number("rope_theta", theta);
                read_rope_scaling(*s, out);
            }
        };
        read("sliding_attention", r.positive_number("rope_local_base_freq", 10000.0), g.local);
        read("full_attention", r.positive_number("rope_theta", 1000000.0), g.global);
    } else {  // rope_theta and rope_scaling are the global layers' (read_rope: base)
        g.local.theta = r.positive_number("rope_local_base_freq", 10000.0);
    }
    return g;
}

double optional_cap(const ConfigReader &r, const std::string &key)
{
    return r.has(key) ? r.positive_number(key) : 0.0;
}

}  // namespace

std::vector<bool> gemma3_sliding(const ConfigReader &r, int64_t n_layers)
{
    int64_t pattern = r.positive_int("sliding_window_pattern", 6);
    std::vector<bool> sliding;
    for (int64_t i = 0; i < n_layers; i++) sliding.push_back((i + 1) % pattern != 0);
    return read_layer_types(r, n_layers, sliding);
}

RopeConfig gemma3_local_rope(const ConfigReader &r, const LlmConfig &c) { return read_gemma3_rope(r, c.rope).local; }

LlmConfig parse_gemma3_text(const ConfigReader &r)
{
    FamilyDefaults d;  // Gemma3TextConfig
    d.vocab_size = 262208;
    d.hidden_size = 2304;
    d.intermediate_size = 9216;
    d.n_layers = 26;
    d.n_heads = 8;
    d.n_kv_heads = 4;
    d.head_dim = 256;
    d.context_length = 131072;
    d.norm_eps = 1e-6;
    d.tie_word_embeddings = true;
    d.hidden_act = "gelu_pytorch_tanh";
    d.rope_theta = 1000000.0;
    LlmConfig c = read_llama_like(r, "gemma3_text", d);
    c.hidden_act = read_activation(r, "hidden_activation", "gelu_pytorch_tanh");
    c.attention_bias = r.boolean("attention_bias", false);
    if (r.boolean("use_bidirectional_attention", false))
        r.fail("use_bidirectional_attention", "is true (an embedding model: EmbeddingGemma); ckc compiles causal "
                                              "language models");
    c.rope = read_gemma3_rope(r, c.rope).global;  // the summary's and GGUF's rope (rope.freq_base)
    return c;
}

Program build_gemma3_text(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    const std::vector<bool> sliding = gemma3_sliding(r, c.n_layers);
    int64_t window = read_window(r, "sliding_window", 4096);
    std::vector<double> windows, thetas, factors;
    Gemma3Rope rope = read_gemma3_rope(r, c.rope);
    // one RoPE type for the node: a layer of the default type is that type with factor 1 (linear: exactly
    // the default; llama3: within a rounding of it)
    LlmConfig cr = c;
    cr.rope = rope.global.type != "default" ? rope.global : rope.local;
    if (rope.global.type != "default" && rope.local.type != "default" && rope.global.type != rope.local.type)
        r.fail("rope_parameters", fmt::format("gives the local layers RoPE \"{}\" and the global ones \"{}\"; ckc "
                                              "takes one scaling type (and default) per model",
                                              rope.local.type, rope.global.type));
    int64_t n_local = 0;
    for (bool s : sliding) {
        const RopeConfig &lr = s ? rope.local : rope.global;
        windows.push_back(s ? static_cast<double>(window) : 0.0);
        thetas.push_back(lr.theta);
        factors.push_back(lr.factor);
        n_local += s;
    }
    double query_scalar = r.positive_number("query_pre_attn_scalar", 256);
    if (r.has("attn_logit_softcapping"))
        p.info.notes.push_back(fmt::format("{}: attn_logit_softcapping is set, but Gemma 3's attention does not apply "
                                           "it (transformers' Gemma3Attention, llama.cpp): ignored", r.path()));
    double final_cap = optional_cap(r, "final_logit_softcapping");
    p.info.summary += fmt::format(", {} local layers (window {}, theta {}) and {} global (theta {}{})", n_local, window,
                                  rope.local.theta, c.n_layers - n_local, rope.global.theta,
                                  rope.global.type == "default" ? "" : fmt::format(", {} x{}", rope.global.type,
                                                                                   rope.global.factor));
    if (final_cap > 0) p.info.summary += fmt::format(", final softcap {}", final_cap);

    AttentionSpec attn;
    attn.qkv_bias = attn.o_bias = c.attention_bias;
    attn.scale = 1.0 / std::sqrt(query_scalar);
    attn.window = per_layer(p, "window", windows, true);
    attn.qk_norm = AttentionSpec::QkNorm::PerHead;
    Attr theta = per_layer(p, "rope_theta", thetas, false), factor = per_layer(p, "rope_factor", factors, false);
    if (std::holds_alternative<LayerTableRef>(theta)) attn.theta = theta;
    if (std::holds_alternative<LayerTableRef>(factor)) attn.factor = factor;
    build_sandwich_layout(p, cr, attn, final_cap);  // (cr: c with the RoPE type the layers share)
    return p;
}

}  // namespace ckc
