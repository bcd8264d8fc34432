// llama.cpp — model_type "llama": Llama 2/3, TinyLlama, SmolLM and similar.
//
// Defaults are LlamaConfig's (transformers/models/llama/configuration_llama.py);
// note tie_word_embeddings defaults to false there. The block is LlamaDecoderLayer:
//   h   = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))   n1 = rmsnorm(x)
//   out = h + down_proj(silu(gate_proj(n2)) * up_proj(n2))                   n2 = rmsnorm(h)
// attention_bias puts biases on q/k/v/o, mlp_bias on gate/up/down.
#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_llama(const ConfigReader &r)
{
    FamilyDefaults d;  // LlamaConfig
    d.vocab_size = 32000;
    d.hidden_size = 4096;
    d.intermediate_size = 11008;
    d.n_layers = 32;
    d.n_heads = 32;
    d.context_length = 2048;
    d.norm_eps = 1e-6;
    LlmConfig c = read_llama_like(r, "llama", d);
    c.attention_bias = r.boolean("attention_bias", false);
    c.mlp_bias = r.boolean("mlp_bias", false);
    return c;
}

Program build_llama(const ConfigReader &, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv_bias = blk.attn.o_bias = c.attention_bias;
    blk.mlp.bias = c.mlp_bias;
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
