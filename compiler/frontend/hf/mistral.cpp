// mistral.cpp — model_type "mistral": the Llama block with a sliding window.
//
// MistralConfig defaults: intermediate 14336, 8 KV heads, context 4096*32,
// sliding_window 4096 (null: none). With a window W, position i attends to
// keys j with i - W < j <= i, in prefill and in KV-cache decode.
#include <fmt/format.h>

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
    p.info.optional_prefix = "model.";
    int64_t window = read_window(r, "sliding_window", 4096);
    if (window) p.info.summary += fmt::format(", sliding window {}", window);
    build_header(p, c, HeaderSpec{});
    PreNormBlock blk;
    blk.norm = {NormKind::Rms, c.norm_eps};
    blk.attn.window = window;
    blk.mlp.act = c.hidden_act;
    build_pre_norm_block(p, c, "model.layers.{L}.", blk);
    FooterSpec f;
    f.norm = blk.norm;
    build_footer(p, c, f);
    return p;
}

}  // namespace ckc
