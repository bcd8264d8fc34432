// qwen3.cpp — model_type "qwen3": the Llama block with an RMSNorm on each head of q and of k (q_norm, k_norm:
// weights [head_dim], the config's eps) before RoPE, no q/k/v biases unless attention_bias (then on o_proj too),
// head_dim 128 by default (independent of hidden / heads), and Qwen2's optional per-layer sliding windows
// (qwen_layer_windows).
#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_qwen3(const ConfigReader &r)
{
    FamilyDefaults d;  // Qwen3Config
    d.vocab_size = 151936;
    d.hidden_size = 4096;
    d.intermediate_size = 22016;
    d.n_layers = 32;
    d.n_heads = 32;
    d.n_kv_heads = 32;
    d.head_dim = 128;
    d.context_length = 32768;
    d.norm_eps = 1e-6;
    LlmConfig c = read_llama_like(r, "qwen3", d);
    c.attention_bias = r.boolean("attention_bias", false);
    return c;
}

Program build_qwen3(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    build_llama_layout(p, c, qwen3_block(p, r, c));
    return p;
}

}  // namespace ckc
