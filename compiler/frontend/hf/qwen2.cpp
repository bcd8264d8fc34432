// qwen2.cpp — model_type "qwen2": the Llama block with biases on q/k/v (not on
// o_proj) and optional per-layer sliding windows.
//
// Qwen2Config: sliding_window applies only when use_sliding_window is true
// (default false), on the layers whose layer_types entry is
// "sliding_attention" — by default those with index >= max_window_layers (28).
#include <fmt/format.h>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_qwen2(const ConfigReader &r)
{
    FamilyDefaults d;  // Qwen2Config
    d.vocab_size = 151936;
    d.hidden_size = 4096;
    d.intermediate_size = 22016;
    d.n_layers = 32;
    d.n_heads = 32;
    d.n_kv_heads = 32;
    d.context_length = 32768;
    d.norm_eps = 1e-6;
    return read_llama_like(r, "qwen2", d);
}

Program build_qwen2(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    p.info.optional_prefix = "model.";
    int64_t window = r.boolean("use_sliding_window", false) ? read_window(r, "sliding_window", 4096) : 0;
    int64_t max_window_layers = r.non_negative_int("max_window_layers", 28);
    std::vector<std::string> types;
    if (auto given = r.string_list("layer_types")) {
        types = *given;
        if (static_cast<int64_t>(types.size()) != c.n_layers)
            r.fail("layer_types", fmt::format("has {} entries for {} layers", types.size(), c.n_layers));
    } else {
        for (int64_t i = 0; i < c.n_layers; i++)
            types.push_back(window && i >= max_window_layers ? "sliding_attention" : "full_attention");
    }
    std::vector<double> windows;
    for (const auto &t : types) {
        if (t != "sliding_attention" && t != "full_attention")
            r.fail("layer_types", "\"" + t + "\" is not sliding_attention or full_attention");
        windows.push_back(t == "sliding_attention" ? static_cast<double>(window) : 0.0);
    }
    build_header(p, c, HeaderSpec{});
    PreNormBlock blk;
    blk.norm = {NormKind::Rms, c.norm_eps};
    blk.attn.qkv_bias = true;
    blk.attn.window = per_layer(p, "window", windows, true);
    blk.mlp.act = c.hidden_act;
    build_pre_norm_block(p, c, "model.layers.{L}.", blk);
    FooterSpec f;
    f.norm = blk.norm;
    build_footer(p, c, f);
    return p;
}

}  // namespace ckc
