// gemma.cpp — model_type "gemma": the Llama block with
//   * embeddings times sqrt(hidden_size) (a float32 scalar);
//   * RMSNorm computing x_hat * (1 + w);
//   * GeGLU: down(gelu_tanh(gate(x)) * up(x)) — the activation is
//     hidden_activation when given, else gelu_pytorch_tanh (Gemma ignored
//     the older hidden_act key);
//   * head_dim independent of hidden / heads (default 256); tied head.
#include <cmath>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_gemma(const ConfigReader &r)
{
    FamilyDefaults d;  // GemmaConfig
    d.vocab_size = 256000;
    d.hidden_size = 3072;
    d.intermediate_size = 24576;
    d.n_layers = 28;
    d.n_heads = 16;
    d.n_kv_heads = 16;
    d.head_dim = 256;
    d.context_length = 8192;
    d.norm_eps = 1e-6;
    d.tie_word_embeddings = true;
    d.hidden_act = "gelu_pytorch_tanh";
    LlmConfig c = read_llama_like(r, "gemma", d);
    c.hidden_act = read_activation(r, "hidden_activation", "gelu_pytorch_tanh");
    c.attention_bias = r.boolean("attention_bias", false);
    return c;
}

Program build_gemma(const ConfigReader &, const LlmConfig &c)
{
    Program p = start_program(c);
    HeaderSpec h;
    h.scale = std::sqrt(static_cast<double>(c.hidden_size));
    PreNormBlock blk = llama_block(c, NormKind::RmsPlusOne);
    blk.attn.qkv_bias = blk.attn.o_bias = c.attention_bias;
    build_llama_layout(p, c, blk, h);
    return p;
}

}  // namespace ckc
