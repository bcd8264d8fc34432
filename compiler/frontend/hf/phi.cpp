// phi.cpp — model_type "phi" (Phi-2): attention and MLP in parallel from one
// LayerNorm, biases everywhere (q/k/v/dense, fc1/fc2, lm_head), partial
// rotary (partial_rotary_factor of head_dim, default 0.5), gelu_new:
//   n = layernorm(x);  out = x + dense(attn(n)) + fc2(gelu(fc1(n)))
// qk_layernorm is not supported.
#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_phi(const ConfigReader &r)
{
    FamilyDefaults d;  // PhiConfig
    d.vocab_size = 51200;
    d.hidden_size = 2048;
    d.intermediate_size = 8192;
    d.n_layers = 24;
    d.n_heads = 32;
    d.context_length = 2048;
    d.norm_eps = 1e-5;
    d.eps_key = "layer_norm_eps";
    d.hidden_act = "gelu_new";
    d.partial_rotary_factor = 0.5;
    LlmConfig c = read_llama_like(r, "phi", d);
    if (r.boolean("qk_layernorm", false)) r.fail("qk_layernorm", "true is not supported");
    return c;
}

Program build_phi(const ConfigReader &, const LlmConfig &c)
{
    Program p = start_program(c);
    p.info.optional_prefix = "model.";
    build_header(p, c, HeaderSpec{});

    NormSpec norm{NormKind::Layer, c.norm_eps};
    SectionBuilder b(p.block, "model.layers.{L}.");
    std::string x = b.carry(p);
    std::string n = b.norm(x, "input_layernorm", norm, "attn_in");
    AttentionSpec attn;
    attn.o = "dense";
    attn.qkv_bias = attn.o_bias = true;
    std::string a = build_attention(b, n, c, attn);
    MlpSpec mlp;
    mlp.gated = false;
    mlp.bias = true;
    mlp.act = c.hidden_act;
    std::string f = build_mlp(b, n, c, mlp);
    std::string h = b.add(x, a, "h", "");
    b.layer_output(h, f);

    FooterSpec foot;
    foot.norm_module = "final_layernorm";
    foot.norm = norm;
    foot.head_bias = true;
    build_footer(p, c, foot);
    return p;
}

}  // namespace ckc
