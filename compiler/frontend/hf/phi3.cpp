// phi3.cpp — model_type "phi3": the Llama block with fused projections:
// qkv_proj (rows q | k | v) and gate_up_proj (rows gate | up), untied head,
// optional partial rotary and a sliding window on every layer (Phi3Model
// masks like Mistral). The "longrope" RoPE scaling is not supported yet.
#include <fmt/format.h>

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
    p.info.optional_prefix = "model.";
    int64_t window = read_window(r, "sliding_window", 0);
    if (window) p.info.summary += fmt::format(", sliding window {}", window);
    build_header(p, c, HeaderSpec{});
    PreNormBlock blk;
    blk.norm = {NormKind::Rms, c.norm_eps};
    blk.attn.qkv = AttentionSpec::Qkv::Fused;
    blk.attn.fused = "qkv_proj";
    blk.attn.window = window;
    blk.mlp.fused_gate_up = true;
    blk.mlp.act = c.hidden_act;
    build_pre_norm_block(p, c, "model.layers.{L}.", blk);
    FooterSpec f;
    f.norm = blk.norm;
    build_footer(p, c, f);
    return p;
}

}  // namespace ckc
