// phi3.cpp — model_type "phi3": the Llama block with fused projections:
// qkv_proj (rows q | k | v) and gate_up_proj (rows gate | up), untied head,
// optional partial rotary and a sliding window on every layer (Phi3Model
// masks like Mistral). The "longrope" RoPE scaling is not supported yet.
#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_phi3(const ConfigReader &r)
{
    FamilyDefaults d;  // Phi3Config
    d.vocab_size = 32064;
    d.hidden_size = 3072;
    d.intermediate_size = 8192;
    d.n_layers = 32;
    d.n_heads = 32;
    d.context_length = 4096;
    d.norm_eps = 1e-5;
    return read_llama_like(r, "phi3", d);
}

Program build_phi3(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv = AttentionSpec::Qkv::Fused;
    blk.attn.fused = "qkv_proj";
    blk.attn.window = read_window(r, "sliding_window", 0);
    blk.mlp.fused_gate_up = true;
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
