// smollm3.cpp — model_type "smollm3": SmolLM3, the Llama block where some layers have no RoPE ("NoPE"):
// no_rope_layers[i] is 1 where layer i rotates q and k, 0 where it does not; by default every
// no_rope_layer_interval-th layer (4: layers 3, 7, 11, ...) has none. An optional sliding window
// (use_sliding_window) applies to the layers layer_types marks sliding (by default the NoPE ones).
// SmolLM3Config's defaults: theta 2e6, tied, 16 heads / 4 KV heads.
#include <fmt/format.h>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_smollm3(const ConfigReader &r)
{
    FamilyDefaults d;  // SmolLM3Config
    d.vocab_size = 128256;
    d.hidden_size = 2048;
    d.intermediate_size = 11008;
    d.n_layers = 36;
    d.n_heads = 16;
    d.n_kv_heads = 4;
    d.context_length = 32768;
    d.norm_eps = 1e-6;
    d.tie_word_embeddings = true;
    d.rope_theta = 2000000.0;
    LlmConfig c = read_llama_like(r, "smollm3", d);
    c.attention_bias = r.boolean("attention_bias", false);
    c.mlp_bias = r.boolean("mlp_bias", false);
    return c;
}

// 1 where layer i has RoPE: no_rope_layers, else every layer but each interval-th.
std::vector<int64_t> smollm3_rope_layers(const ConfigReader &r, int64_t n_layers)
{
    if (auto given = r.int_list("no_rope_layers", 0, 1)) {
        if (static_cast<int64_t>(given->size()) != n_layers)
            r.fail("no_rope_layers", fmt::format("has {} entries for {} layers", given->size(), n_layers));
        return *given;
    }
    int64_t interval = r.positive_int("no_rope_layer_interval", 4);
    std::vector<int64_t> on;
    for (int64_t i = 0; i < n_layers; i++) on.push_back((i + 1) % interval != 0);
    return on;
}

Program build_smollm3(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv_bias = blk.attn.o_bias = c.attention_bias;
    blk.mlp.bias = c.mlp_bias;

    std::vector<int64_t> on = smollm3_rope_layers(r, c.n_layers);
    std::vector<double> rotated;
    std::vector<bool> sliding;
    int64_t nope = 0;
    for (int64_t x : on) {
        rotated.push_back(x ? static_cast<double>(c.rope.rot_dim) : 0.0);
        sliding.push_back(!x);
        nope += !x;
    }
    if (nope == c.n_layers) blk.attn.rope = false;
    else if (nope > 0) blk.attn.rotated = per_layer(p, "rope_dims", rotated, true);
    p.info.summary += fmt::format(", no RoPE in {} of {} layers", nope, c.n_layers);

    int64_t window = r.boolean("use_sliding_window", false) ? read_window(r, "sliding_window", 0) : 0;
    for (size_t i = 0; i < sliding.size(); i++) sliding[i] = sliding[i] && window > 0;
    blk.attn.window = per_layer(p, "window", read_layer_windows(r, c.n_layers, window, sliding), true);
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
