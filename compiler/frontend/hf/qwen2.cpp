// qwen2.cpp — model_type "qwen2": the Llama block with biases on q/k/v (not on
// o_proj) and optional per-layer sliding windows.
//
// Qwen2Config's windows: builders.h's qwen_layer_windows.
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
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv_bias = true;
    blk.attn.window = qwen_layer_windows(p, r, c);
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
