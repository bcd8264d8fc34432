// gemma2.cpp — model_type "gemma2": Gemma with
//   * sandwich norms: h = x + post_attention_layernorm(attn(input_layernorm(x)))
//                     out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
//   * attention scale query_pre_attn_scalar^-1/2 (not head_dim's), logit
//     soft-capping cap * tanh(s / cap) with attn_logit_softcapping before the mask;
//   * a sliding window on alternating layers (even ones, or per layer_types);
//   * final logits soft-capped by final_logit_softcapping.
#include <cmath>

#include <fmt/format.h>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_gemma2(const ConfigReader &r)
{
    FamilyDefaults d;  // Gemma2Config
    d.vocab_size = 256000;
    d.hidden_size = 2304;
    d.intermediate_size = 9216;
    d.n_layers = 26;
    d.n_heads = 8;
    d.n_kv_heads = 4;
    d.head_dim = 256;
    d.context_length = 8192;
    d.norm_eps = 1e-6;
    d.tie_word_embeddings = true;
    d.hidden_act = "gelu_pytorch_tanh";
    LlmConfig c = read_llama_like(r, "gemma2", d);
    c.hidden_act = read_activation(r, "hidden_activation", "gelu_pytorch_tanh");
    c.attention_bias = r.boolean("attention_bias", false);
    return c;
}

static double optional_cap(const ConfigReader &r, const std::string &key, double dflt)
{
    return r.is_null(key) ? 0.0 : r.positive_number(key, dflt);
}

Program build_gemma2(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    int64_t window = read_window(r, "sliding_window", 4096);
    std::vector<bool> sliding;  // even layers slide
    for (int64_t i = 0; i < c.n_layers; i++) sliding.push_back(i % 2 == 0);
    std::vector<double> windows = read_layer_windows(r, c.n_layers, window, sliding);
    double query_scalar = r.positive_number("query_pre_attn_scalar", 256);
    double attn_cap = optional_cap(r, "attn_logit_softcapping", 50.0);
    double final_cap = optional_cap(r, "final_logit_softcapping", 30.0);
    p.info.summary += fmt::format(", sliding window {} on alternate layers, softcaps {}/{}", window, attn_cap, final_cap);

    AttentionSpec attn;
    attn.qkv_bias = attn.o_bias = c.attention_bias;
    attn.scale = 1.0 / std::sqrt(query_scalar);
    attn.softcap = attn_cap;
    attn.window = per_layer(p, "window", windows, true);
    build_sandwich_layout(p, c, attn, final_cap);
    return p;
}

}  // namespace ckc
