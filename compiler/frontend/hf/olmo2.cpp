// olmo2.cpp — model_type "olmo2": OLMo 2. The Llama projections with RMSNorm on the whole of q and of k (q_norm
// [heads x head_dim], k_norm [kv_heads x head_dim]) before RoPE, and norms AFTER each sublayer instead of before:
//   h = x + post_attention_layernorm(attn(x));  out = h + post_feedforward_layernorm(mlp(h))
// Olmo2Config's defaults: vocab 50304, eps 1e-5, untied, attention_bias on q/k/v/o.
#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_olmo2(const ConfigReader &r)
{
    FamilyDefaults d;  // Olmo2Config
    d.vocab_size = 50304;
    d.hidden_size = 4096;
    d.intermediate_size = 11008;
    d.n_layers = 32;
    d.n_heads = 32;
    d.context_length = 2048;
    d.norm_eps = 1e-5;
    LlmConfig c = read_llama_like(r, "olmo2", d);
    c.attention_bias = r.boolean("attention_bias", false);
    return c;
}

Program build_olmo2(const ConfigReader &, const LlmConfig &c)
{
    Program p = start_program(c);
    p.info.optional_prefix = "model.";
    build_header(p, c, {});

    const NormSpec norm{NormKind::Rms, c.norm_eps};
    SectionBuilder b(p.block, "model.layers.{L}.");
    std::string x = b.carry(p);
    AttentionSpec attn;
    attn.qkv_bias = attn.o_bias = c.attention_bias;
    attn.qk_norm = AttentionSpec::QkNorm::Whole;
    attn.qk_norm_spec = norm;
    std::string h = b.add(x, b.norm(build_attention(b, x, c, attn), "post_attention_layernorm", norm, "attn_normed"),
                          "h", "");
    MlpSpec mlp;
    mlp.act = c.hidden_act;
    b.layer_output(h, b.norm(build_mlp(b, h, c, mlp), "post_feedforward_layernorm", norm, "ffn_normed"));

    FooterSpec foot;
    foot.norm = norm;
    build_footer(p, c, foot);
    return p;
}

}  // namespace ckc
