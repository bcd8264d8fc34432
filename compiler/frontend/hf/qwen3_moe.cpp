// qwen3_moe.cpp — model_type "qwen3_moe": Qwen3-MoE (Qwen3-30B-A3B, -235B-A22B). Qwen3's attention (per-head q/k
// RMSNorm, no biases unless attention_bias) and, in place of the MLP, a mixture of num_experts SwiGLU experts of
// width moe_intermediate_size (num_local_experts, as transformers 5 saves it), num_experts_per_tok of them per
// token chosen by the router's softmax (mlp.gate), renormalized when norm_topk_prob. Every layer must be sparse
// (decoder_sparse_step 1, no mlp_only_layers): ckc's block is one for all layers.
#include <fmt/format.h>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_qwen3_moe(const ConfigReader &r)
{
    FamilyDefaults d;  // Qwen3MoeConfig
    d.vocab_size = 151936;
    d.hidden_size = 2048;
    d.intermediate_size = 6144;
    d.n_layers = 24;
    d.n_heads = 32;
    d.n_kv_heads = 4;
    d.context_length = 32768;
    d.norm_eps = 1e-6;
    LlmConfig c = read_llama_like(r, "qwen3_moe", d);
    c.attention_bias = r.boolean("attention_bias", false);
    return c;
}

MoeSpec qwen3_moe_moe(const ConfigReader &r, const LlmConfig &c)
{
    MoeSpec moe = read_moe(r, 128, 8, "moe_intermediate_size", 768, false, 0.001);
    moe.act = c.hidden_act;
    return moe;
}

Program build_qwen3_moe(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = qwen3_block(p, r, c);
    MoeSpec moe = qwen3_moe_moe(r, c);
    int64_t step = r.positive_int("decoder_sparse_step", 1);
    if (step != 1 && step <= c.n_layers)
        r.fail("decoder_sparse_step", fmt::format("is {}: layers without experts between those with them are not "
                                                  "supported yet (ckc's block is one for every layer)", step));
    if (auto dense = r.int_list("mlp_only_layers", 0, c.n_layers - 1); dense && !dense->empty())
        r.fail("mlp_only_layers", "lists layers without experts, which are not supported yet (ckc's block is one "
                                  "for every layer)");
    if (step <= c.n_layers) blk.moe = moe;  // a step past the last layer: no layer is sparse, every MLP dense
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
