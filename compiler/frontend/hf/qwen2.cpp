// qwen2.cpp — model_type "qwen2": the Llama block with biases on q/k/v (not on
// o_proj) and optional per-layer sliding windows.
//
// Qwen2Config: sliding_window applies only when use_sliding_window is true
// (default false), on the layers whose layer_types entry is
// "sliding_attention" — by default those with index >= max_window_layers (28).
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
    int64_t window = r.boolean("use_sliding_window", false) ? read_window(r, "sliding_window", 4096) : 0;
    int64_t max_window_layers = r.non_negative_int("max_window_layers", 28);
    std::vector<bool> sliding;
    for (int64_t i = 0; i < c.n_layers; i++) sliding.push_back(window && i >= max_window_layers);
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv_bias = true;
    blk.attn.window = per_layer(p, "window", read_layer_windows(r, c.n_layers, window, sliding), true);
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
