// gpt2.cpp — model_type "gpt2".
//
// GPT2Config keys: n_embd, n_layer, n_head, n_positions, n_inner (null:
// 4 * n_embd), layer_norm_epsilon, activation_function (gelu_new);
// tie_word_embeddings defaults to true (PreTrainedConfig). The model:
//   x = wte[tokens] + wpe[positions]
//   h = x + c_proj(attn(c_attn(ln_1(x))))        c_attn: one [C, 3C] Conv1D, q | k | v
//   out = h + mlp.c_proj(gelu(c_fc(ln_2(h))))
//   logits = ln_f(x) @ wte^T
// Conv1D weights are stored [in, out] and loaded transposed. Names carry
// "transformer." (GPT2LMHeadModel) or not (GPT2Model); both load. The
// attn.bias mask buffers are not needed and are ignored.
#include <cmath>

#include <fmt/format.h>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_gpt2(const ConfigReader &r)
{
    LlmConfig c;
    c.model_type = "gpt2";
    c.vocab_size = r.positive_int("vocab_size", 50257);
    c.hidden_size = r.positive_int("n_embd", 768);
    c.n_layers = r.positive_int("n_layer", 12);
    c.n_heads = r.positive_int("n_head", 12);
    c.n_kv_heads = c.n_heads;
    if (c.hidden_size % c.n_heads != 0)
        r.fail("n_head", fmt::format("{} does not divide n_embd {}", c.n_heads, c.hidden_size));
    c.head_dim = c.hidden_size / c.n_heads;
    c.intermediate_size = r.positive_int("n_inner", 4 * c.hidden_size);
    c.context_length = r.positive_int("n_positions", 1024);
    c.norm_eps = r.positive_number("layer_norm_epsilon", 1e-5);
    c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
    c.hidden_act = read_activation(r, "activation_function", "gelu_new");
    c.rope.rot_dim = 0;  // learned positions
    if (r.boolean("add_cross_attention", false)) r.fail("add_cross_attention", "true is not supported");
    return c;
}

Program build_gpt2(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    p.info.optional_prefix = "transformer.";
    HeaderSpec h;
    h.prefix = "transformer.";
    h.table = "wte.weight";
    h.positions = "wpe.weight";
    h.n_positions = c.context_length;
    build_header(p, c, h);

    bool scale_weights = r.boolean("scale_attn_weights", true);
    bool by_layer = r.boolean("scale_attn_by_inverse_layer_idx", false);
    std::vector<double> scales;
    for (int64_t l = 0; l < c.n_layers; l++)
        scales.push_back((scale_weights ? 1.0 / std::sqrt(static_cast<double>(c.head_dim)) : 1.0) /
                         (by_layer ? static_cast<double>(l + 1) : 1.0));

    PreNormBlock blk;
    blk.attn_norm = "ln_1";
    blk.mlp_norm = "ln_2";
    blk.norm = {NormKind::Layer, c.norm_eps};
    blk.attn.module = "attn";
    blk.attn.qkv = AttentionSpec::Qkv::Fused;
    blk.attn.fused = "c_attn";
    blk.attn.o = "c_proj";
    blk.attn.qkv_bias = blk.attn.o_bias = true;
    blk.attn.conv1d = true;
    blk.attn.rope = false;
    blk.attn.scale = per_layer(p, "scale", scales, false);
    blk.mlp.module = "mlp";
    blk.mlp.gated = false;
    blk.mlp.fc1 = "c_fc";
    blk.mlp.fc2 = "c_proj";
    blk.mlp.bias = true;
    blk.mlp.conv1d = true;
    blk.mlp.act = c.hidden_act;
    build_pre_norm_block(p, c, "transformer.h.{L}.", blk);

    FooterSpec f;
    f.prefix = "transformer.";
    f.norm_module = "ln_f";
    f.norm = blk.norm;
    f.embed_full_name = "transformer.wte.weight";
    build_footer(p, c, f);
    return p;
}

}  // namespace ckc
