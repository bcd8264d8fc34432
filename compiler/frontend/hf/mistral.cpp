// mistral.cpp — model_type "mistral": the Llama block with a sliding window.
//
// MistralConfig defaults: intermediate 14336, 8 KV heads, context 4096*32,
// sliding_window 4096 (null: none). With a window W, position i attends to
// keys j with i - W < j <= i, in prefill and in KV-cache decode.
#include "frontend/hf/builders.h"
#include "frontend/hf/families.h"

namespace ckc {

LlmConfig parse_mistral(const ConfigReader &r)
{
    FamilyDefaults d;  // MistralConfig
    d.vocab_size = 32000;
    d.hidden_size = 4096;
    d.intermediate_size = 14336;
    d.n_layers = 32;
    d.n_heads = 32;
    d.n_kv_heads = 8;
    d.context_length = 4096 * 32;
    d.norm_eps = 1e-6;
    return read_llama_like(r, "mistral", d);
}

Program build_mistral(const ConfigReader &r, const LlmConfig &c)
{
    Program p = start_program(c);
    PreNormBlock blk = llama_block(c);
    blk.attn.window = read_window(r, "sliding_window", 4096);
    build_llama_layout(p, c, blk);
    return p;
}

}  // namespace ckc
