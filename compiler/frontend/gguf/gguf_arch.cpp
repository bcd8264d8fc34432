// gguf_arch.cpp — the architecture table (llama.cpp's gguf-py tensor map and
// its convert_hf_to_gguf.py, restricted to what ckc's families build).
#include "frontend/gguf/gguf_arch.h"

namespace ckc {

namespace {

// Names shared by the Llama-like layouts (model.layers.{L}.* -> blk.{L}.*).
std::vector<std::pair<std::string, std::string>> llama_names()
{
    const std::string L = "model.layers.{L}.", B = "blk.{L}.";
    return {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {L + "input_layernorm.weight", B + "attn_norm.weight"},
        {L + "self_attn.q_proj.weight", B + "attn_q.weight"},
        {L + "self_attn.k_proj.weight", B + "attn_k.weight"},
        {L + "self_attn.v_proj.weight", B + "attn_v.weight"},
        {L + "self_attn.q_proj.bias", B + "attn_q.bias"},
        {L + "self_attn.k_proj.bias", B + "attn_k.bias"},
        {L + "self_attn.v_proj.bias", B + "attn_v.bias"},
        {L + "self_attn.o_proj.weight", B + "attn_output.weight"},
        {L + "self_attn.o_proj.bias", B + "attn_output.bias"},
        {L + "post_attention_layernorm.weight", B + "ffn_norm.weight"},
        {L + "mlp.gate_proj.weight", B + "ffn_gate.weight"},
        {L + "mlp.up_proj.weight", B + "ffn_up.weight"},
        {L + "mlp.down_proj.weight", B + "ffn_down.weight"},
        {L + "mlp.gate_proj.bias", B + "ffn_gate.bias"},
        {L + "mlp.up_proj.bias", B + "ffn_up.bias"},
        {L + "mlp.down_proj.bias", B + "ffn_down.bias"},
    };
}

}  // namespace

const std::vector<GgufArch> &gguf_archs()
{
    static const std::vector<GgufArch> table = {
        // Llama 2/3, TinyLlama, SmolLM, and Mistral (llama.cpp writes HF Mistral as "llama")
        {"llama", "llama", true, llama_names()},
        {"qwen2", "qwen2", false, llama_names()},
    };
    return table;
}

const GgufArch *gguf_arch(const std::string &arch)
{
    for (const auto &a : gguf_archs())
        if (arch == a.arch) return &a;
    return nullptr;
}

const GgufArch *gguf_arch_for_model_type(const std::string &model_type)
{
    for (const auto &a : gguf_archs())
        if (model_type == a.model_type) return &a;
    if (model_type == "mistral") return gguf_arch("llama");
    return nullptr;
}

std::string gguf_tensor_name(const GgufArch &a, const std::string &hf_name)
{
    for (const auto &[hf, gg] : a.names)
        if (hf == hf_name) return gg;
    return "";
}

std::vector<std::string> gguf_arch_names()
{
    std::vector<std::string> out;
    for (const auto &a : gguf_archs()) out.push_back(a.arch);
    return out;
}

}  // namespace ckc
