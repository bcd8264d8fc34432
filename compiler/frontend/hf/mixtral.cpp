// mixtral.cpp — model_type "mixtral": Mixtral 8x7B / 8x22B. Mistral's attention (GQA, an optional sliding window,
// null by default) and a mixture of num_local_experts SwiGLU experts of width intermediate_size in
// block_sparse_moe (gate: the router; experts.{E}.w1 gate, w3 up, w2 down), num_experts_per_tok per token:
// the router's softmax at the top k, always renormalized (the softmax of the k logits).
#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_mixtral(const ConfigReader &r)
{
    FamilyDefaults d;  // MixtralConfig
    d.vocab_size = 32000;
    d.hidden_size = 4096;
    d.intermediate_size = 14336;
    d.n_layers = 32;
    d.n_heads = 32;
    d.n_kv_heads = 8;
    d.context_length = 4096 * 32;
    d.norm_eps = 1e-5;
    d.rope_theta = 1000000.0;
    return read_llama_like(r, "mixtral", d);
}

MoeSpec mixtral_moe(const ConfigReader &r, const LlmConfig &c)
{
    MoeSpec moe = read_moe(r, 8, 2, "intermediate_size", c.intermediate_size, true, 0.001);
    if (r.has("norm_topk_prob") && !moe.norm_topk)
        r.fail("norm_topk_prob", "is false, but Mixtral always renormalizes the chosen experts' weights");
    moe.norm_topk = true;
    moe.module = "block_sparse_moe";
    moe.gate = "w1";
    moe.up = "w3";
    moe.down = "w2";
    moe.act = c.hidden_act;
    return moe;
}

Program build_mixtral(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = llama_block(c);
    blk.attn.window = read_window(r, "sliding_window", 0);
    blk.moe = mixtral_moe(r, c);
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
