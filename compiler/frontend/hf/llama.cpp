// llama.cpp — model_type "llama": Llama 2/3, TinyLlama, SmolLM and similar.
//
// Defaults are LlamaConfig's (transformers/models/llama/configuration_llama.py);
// note tie_word_embeddings defaults to false there. The block is LlamaDecoderLayer:
//   h   = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))   n1 = rmsnorm(x)
//   out = h + down_proj(silu(gate_proj(n2)) * up_proj(n2))                   n2 = rmsnorm(h)
// attention_bias puts biases on q/k/v/o, mlp_bias on gate/up/down.
#include "frontend/hf/families.h"

#include "frontend/hf/builders.h"

namespace ckc {

LlmConfig parse_llama(const ConfigReader &r)
{
    LlmConfig c;
    c.model_type = "llama";
    c.vocab_size = r.positive_int("vocab_size", 32000);
    c.hidden_size = r.positive_int("hidden_size", 4096);
    c.intermediate_size = r.positive_int("intermediate_size", 11008);
    c.n_layers = r.positive_int("num_hidden_layers", 32);
    c.n_heads = r.positive_int("num_attention_heads", 32);
    c.n_kv_heads = r.positive_int("num_key_value_heads", c.n_heads);
    check_gqa(r, c.n_heads, c.n_kv_heads);
    c.head_dim = read_head_dim(r, c.hidden_size, c.n_heads);
    c.context_length = r.positive_int("max_position_embeddings", 2048);
    c.norm_eps = r.positive_number("rms_norm_eps", 1e-6);
    c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
    c.attention_bias = r.boolean("attention_bias", false);
    c.mlp_bias = r.boolean("mlp_bias", false);
    c.hidden_act = read_activation(r, "hidden_act", "silu", {"silu", "swish"});
    c.rope = read_rope(r, c.head_dim);
    return c;
}

Program build_llama(const LlmConfig &c)
{
    Program p = start_program(c);
    build_embedding_header(p, c, "model.", "embed_tokens.weight");

    SectionBuilder b(p.block, "model.layers.{L}.");
    std::string x = b.carry(p.carry, p.carry_shape);
    std::string n1 = b.rms_norm(x, "input_layernorm", c.norm_eps, "attn_in");
    AttentionSpec attn;
    attn.qkv_bias = attn.o_bias = c.attention_bias;
    std::string a = build_attention(b, n1, c, attn);
    std::string h = b.add(x, a, "h", "");
    std::string n2 = b.rms_norm(h, "post_attention_layernorm", c.norm_eps, "ffn_in");
    std::string f = build_swiglu_mlp(b, n2, c, "mlp", c.mlp_bias);
    b.add(h, f, "x_out", "", Storage::Carry);
    p.block.mark_output("x_out");

    build_rmsnorm_lm_head_footer(p, c, "model.", "norm", "model.embed_tokens.weight");
    return p;
}

}  // namespace ckc
