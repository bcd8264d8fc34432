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

// The mixture's keys, as Qwen3-MoE and OLMoE name them: the experts (num_experts, or num_local_experts as
// transformers 5 writes it), the experts per token, their width.
MoeSpec read_moe(const ConfigReader &r, int64_t experts_default, int64_t top_k_default, const char *ffn_key,
                 int64_t ffn_default, bool norm_default)
{
    MoeSpec m;
    const char *experts_key = r.has("num_local_experts") && !r.has("num_experts") ? "num_local_experts" : "num_experts";
    m.n_experts = r.positive_int(experts_key, experts_default);
    m.top_k = r.positive_int("num_experts_per_tok", top_k_default);
    m.ffn = r.positive_int(ffn_key, ffn_default);
    m.norm_topk = r.boolean("norm_topk_prob", norm_default);
    m.aux_loss = r.boolean("output_router_logits", false);
    if (m.n_experts > CK_MOE_MAX_EXPERTS_LIMIT)
        r.fail(experts_key, fmt::format("{} experts is above ckc's limit of {}", m.n_experts, CK_MOE_MAX_EXPERTS_LIMIT));
    if (m.top_k > m.n_experts)
        r.fail("num_experts_per_tok", fmt::format("{} is more than the {} experts ({})", m.top_k, m.n_experts,
                                                  experts_key));
    return m;
}

Program build_qwen3_moe(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = llama_block(c);
    blk.attn.qkv_bias = blk.attn.o_bias = c.attention_bias;
    blk.attn.qk_norm = AttentionSpec::QkNorm::PerHead;
    blk.attn.qk_norm_spec = blk.norm;
    blk.attn.window = qwen_layer_windows(p, r, c);
    MoeSpec moe = read_moe(r, 128, 8, "moe_intermediate_size", 768, false);
    moe.act = c.hidden_act;
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
