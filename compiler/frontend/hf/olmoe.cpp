// olmoe.cpp — model_type "olmoe": OLMoE (OLMoE-1B-7B). The Llama layout (norms before each sublayer) with RMSNorm
// on the whole of q and of k (q_norm [heads x head_dim], k_norm [kv_heads x head_dim]) before RoPE, as OLMo 2, and
// a mixture of num_experts SwiGLU experts of width intermediate_size (mlp.gate, mlp.experts.{E}.*), the top
// num_experts_per_tok of the router's softmax, renormalized only when norm_topk_prob (false by default).
// clip_qkv (null by default): q and k after their norms, and v, clamped to [-clip_qkv, clip_qkv] before RoPE.
#include <cmath>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_olmoe(const ConfigReader &r)
{
    FamilyDefaults d;  // OlmoeConfig
    d.vocab_size = 50304;
    d.hidden_size = 2048;
    d.intermediate_size = 2048;
    d.n_layers = 16;
    d.n_heads = 16;
    d.context_length = 4096;
    d.norm_eps = 1e-5;
    LlmConfig c = read_llama_like(r, "olmoe", d);
    c.attention_bias = r.boolean("attention_bias", false);
    return c;
}

MoeSpec olmoe_moe(const ConfigReader &r, const LlmConfig &c)
{
    MoeSpec moe = read_moe(r, 64, 8, "intermediate_size", c.intermediate_size, false, 0.01);
    moe.act = c.hidden_act;
    return moe;
}

Program build_olmoe(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv_bias = blk.attn.o_bias = c.attention_bias;
    blk.attn.qk_norm = AttentionSpec::QkNorm::Whole;
    blk.attn.qk_norm_spec = blk.norm;
    if (r.has("clip_qkv")) {  // null: no clamp
        blk.attn.clip_qkv = r.positive_number("clip_qkv");
        if (!std::isfinite(blk.attn.clip_qkv)) r.fail("clip_qkv", "must be finite (null turns the clamp off)");
    }
    blk.moe = olmoe_moe(r, c);
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
