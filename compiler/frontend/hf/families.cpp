#include "frontend/hf/families.h"

#include <fmt/format.h>

#include "support/error.h"
#include "support/util.h"

namespace ckc {

const std::vector<Family> &families()
{
    static const std::vector<Family> list = {
        {"llama", parse_llama, build_llama},       // Llama 2/3, TinyLlama, SmolLM
        {"mistral", parse_mistral, build_mistral}, // + sliding window
        {"qwen2", parse_qwen2, build_qwen2},       // + q/k/v biases, per-layer windows
        {"gpt2", parse_gpt2, build_gpt2},          // LayerNorm, learned positions, Conv1D, gelu_new
        {"phi3", parse_phi3, build_phi3},          // fused qkv_proj and gate_up_proj
        {"gemma", parse_gemma, build_gemma},       // scaled embeddings, (1 + w) RMSNorm, GeGLU
        {"phi", parse_phi, build_phi},             // Phi-2: parallel attention + MLP, partial RoPE
        {"gemma2", parse_gemma2, build_gemma2},    // + sandwich norms, soft-capping, alternating windows
    };
    return list;
}

std::vector<std::string> supported_model_types()
{
    std::vector<std::string> out;
    for (const auto &f : families()) out.push_back(f.model_type);
    return out;
}

static const Family &find_family(const ConfigReader &r)
{
    if (!r.has("model_type"))
        r.fail("model_type", "is missing; ckc needs it to pick the architecture (supported: " +
                                 join(supported_model_types(), ", ") + ")");
    std::string type = r.string("model_type");
    for (const auto &f : families())
        if (type == f.model_type) return f;
    r.fail("model_type", "\"" + type + "\" is not supported; supported: " + join(supported_model_types(), ", "));
}

LlmConfig parse_hf_config(const ConfigReader &r) { return find_family(r).parse(r); }

Program build_from_hf_config(const std::string &config_path, const HfOptions &opts)
{
    ConfigReader r = ConfigReader::load(config_path);
    const Family &fam = find_family(r);
    LlmConfig c = fam.parse(r);
    if (c.head_dim > 512)
        r.fail("head_dim", fmt::format("{} is larger than the attention kernel supports (512)", c.head_dim));
    if (opts.max_context > 0 && opts.max_context < c.context_length) c.context_length = opts.max_context;
    if (c.context_length > (int64_t(1) << 30)) r.fail("max_position_embeddings", "is unreasonably large");
    Program p = fam.build(r, c);
    p.info.source_path = config_path;
    p.info.source_hash = fnv1a64(read_file(config_path));
    for (int s = 0; s < 3; s++) p.section(s).verify(std::string("front end, ") + Program::section_name(s));
    return p;
}

}  // namespace ckc
