// qwen3_moe.cpp — model_type "qwen3_moe": Qwen3-MoE (Qwen3-30B-A3B, -235B-A22B). Qwen3's attention (per-head q/k
// RMSNorm, no biases unless attention_bias) and, in place of the MLP, a mixture of num_experts SwiGLU experts of
// width moe_intermediate_size (num_local_experts, as transformers 5 saves it), num_experts_per_tok of them per
// token chosen by the router's softmax (mlp.gate), renormalized when norm_topk_prob. Layer i has the experts when
// (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers (Qwen3MoeDecoderLayer); the others have a
// dense SwiGLU MLP of width intermediate_size. Layers of both kinds: the dense ones are the program's block2.
#include <fmt/format.h>

#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"
#include "support/util.h"

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
    std::vector<int> dense(static_cast<size_t>(c.n_layers));  // 1: the layer has a dense MLP
    for (int64_t i = 0; i < c.n_layers; i++) dense[static_cast<size_t>(i)] = (i + 1) % step != 0;
    if (auto only = r.int_list("mlp_only_layers", 0, c.n_layers - 1))
        for (int64_t i : *only) dense[static_cast<size_t>(i)] = 1;
    std::vector<std::string> dense_layers;
    for (size_t i = 0; i < dense.size(); i++)
        if (dense[i]) dense_layers.push_back(std::to_string(i));
    if (dense_layers.size() < dense.size()) blk.moe = moe;  // else no layer is sparse: every MLP dense
    build_llama_layout(p, c, blk);
    if (!dense_layers.empty() && dense_layers.size() < dense.size()) {  // both kinds: the dense layers are block2
        PreNormBlock mlp = blk;
        mlp.moe.reset();
        build_pre_norm_block(p, c, "model.layers.{L}.", mlp, Section::Block2);
        p.layer_kind = dense;
        p.info.summary += fmt::format(", a dense MLP (width {}) in layer{} {}", c.intermediate_size,
                                      dense_layers.size() > 1 ? "s" : "", join(dense_layers, ", "));
    }
    return p;
}

}  // namespace ckc
