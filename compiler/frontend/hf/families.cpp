#include "frontend/hf/families.h"

#include <fmt/format.h>

#include "ck_kernels.h"  // CK_ATTENTION_MAX_HEAD_DIM
#include "support/error.h"
#include "support/limits.h"
#include "support/util.h"

namespace ckc {

// The registry: model_type and what makes the family special. One line each.
#define CK_FAMILIES(X)                                                                \
    X(llama)   /* Llama 2/3, TinyLlama, SmolLM                                     */ \
    X(mistral) /* + sliding window                                                 */ \
    X(qwen2)   /* + q/k/v biases, per-layer windows                                */ \
    X(qwen3)   /* + per-head q/k RMSNorm, head_dim apart from hidden / heads      */ \
    X(gpt2)    /* LayerNorm, learned positions, Conv1D, gelu_new                   */ \
    X(phi3)    /* fused qkv_proj and gate_up_proj                                  */ \
    X(gemma)   /* scaled embeddings, (1 + w) RMSNorm, GeGLU                        */ \
    X(phi)     /* Phi-2: parallel attention + MLP, partial RoPE                    */ \
    X(gemma2)  /* + sandwich norms, soft-capping, alternating windows              */ \
    X(olmo2)   /* norms after each sublayer, whole-width q/k RMSNorm               */ \
    X(smollm3) /* Llama with no RoPE in some layers (NoPE)                         */ \
    X(gemma3_text) /* Gemma 2's layer + q/k norm, 5 local : 1 global, two RoPEs    */ \
    X(qwen3_moe) /* Qwen3's attention + a mixture of experts                       */ \
    X(mixtral) /* Mistral's attention + a mixture of experts (block_sparse_moe)      */ \
    X(olmoe)   /* whole-width q/k RMSNorm + a mixture of experts                   */

#define CK_FAMILY_DECLARE(name)                    \
    LlmConfig parse_##name(const ConfigReader &r); \
    Program build_##name(const ConfigReader &r, const LlmConfig &c);
CK_FAMILIES(CK_FAMILY_DECLARE)
#undef CK_FAMILY_DECLARE

const std::vector<Family> &families()
{
#define CK_FAMILY_ENTRY(name) {#name, parse_##name, build_##name},
    static const std::vector<Family> list = {CK_FAMILIES(CK_FAMILY_ENTRY)};
#undef CK_FAMILY_ENTRY
    return list;
}

std::vector<std::string> supported_model_types()
{
    std::vector<std::string> out;
    for (const auto &f : families()) out.push_back(f.model_type);
    return out;
}

// The multimodal models whose language model is one of the families above: model_type, the language model's
// model_type (text_config's, when it has none) and the prefix of its tensors in the checkpoint. One line each.
struct MultimodalWrapper {
    const char *model_type, *text_model_type, *prefix;
};
constexpr MultimodalWrapper kWrappers[] = {
    {"gemma3", "gemma3_text", "language_model."},  // Gemma3ForConditionalGeneration: gemma-3-4b and larger
};

// What a config.json's model_type may say: a family, or a multimodal model whose language model is one.
static std::vector<std::string> accepted_model_types()
{
    std::vector<std::string> out = supported_model_types();
    for (const MultimodalWrapper &w : kWrappers) out.push_back(w.model_type);
    return out;
}

static const Family &find_family(const ConfigReader &r)
{
    if (!r.has("model_type"))
        r.fail("model_type", "is missing; ckc needs it to pick the architecture (supported: " +
                                 join(accepted_model_types(), ", ") + ")");
    std::string type = r.string("model_type");
    for (const auto &f : families())
        if (type == f.model_type) return f;
    r.fail("model_type", "\"" + type + "\" is not supported" + did_you_mean(type, accepted_model_types()) +
                             "; supported: " + join(accepted_model_types(), ", "));
}

std::vector<std::pair<std::string, std::string>> multimodal_model_types()
{
    std::vector<std::pair<std::string, std::string>> out;
    for (const MultimodalWrapper &w : kWrappers) out.push_back({w.model_type, w.text_model_type});
    return out;
}

LanguageModelOf language_model_of(const ConfigReader &r)
{
    std::string type = r.has("model_type") && r.raw().at("model_type").is_string() ? r.string("model_type") : "";
    for (const MultimodalWrapper &w : kWrappers) {
        if (type != w.model_type) continue;
        ConfigReader text = r.object("text_config").value_or(
            ConfigReader(nlohmann::json::object(), r.path() + " (text_config: absent, the class defaults)"));
        if (!text.has("model_type")) text = text.with("model_type", w.text_model_type);
        else if (text.string("model_type") != w.text_model_type)
            text.fail("model_type", fmt::format("is \"{}\"; a {} model's language model is {}",
                                                text.string("model_type"), w.model_type, w.text_model_type));
        // the wrapper's own tie_word_embeddings decides whether lm_head is tied to the language model's table
        if (r.has("tie_word_embeddings")) text = text.with("tie_word_embeddings", r.raw().at("tie_word_embeddings"));
        return {text, w.prefix};
    }
    return {r, ""};
}

LlmConfig parse_hf_config(const ConfigReader &r)
{
    const ConfigReader text = language_model_of(r).text;
    return find_family(text).parse(text);
}

Program build_from_config(const ConfigReader &top, const HfOptions &opts)
{
    LanguageModelOf lm = language_model_of(top);
    const ConfigReader &r = lm.text;
    const std::string &config_path = top.path();
    const Family &fam = find_family(r);
    LlmConfig c = fam.parse(r);
    // the limits, before anything is sized from them (a family names these keys one of two ways)
    auto limit = [&](int64_t v, int64_t max, std::initializer_list<const char *> keys, const char *what) {
        if (v <= max) return;
        std::string key = *keys.begin();
        for (const char *k : keys)
            if (r.has(k)) key = k;
        r.fail(key, fmt::format("{} {} is above ckc's limit of {} (support/limits.h)", what, v, max));
    };
    limit(c.n_layers, limits::kLayers, {"num_hidden_layers", "n_layer"}, "a layer count of");
    limit(c.hidden_size, limits::kWidth, {"hidden_size", "n_embd"}, "a width of");
    limit(c.intermediate_size, limits::kWidth, {"intermediate_size", "n_inner"}, "a width of");
    limit(c.head_dim, limits::kWidth, {"head_dim"}, "a head size of");
    limit(c.n_heads, limits::kHeads, {"num_attention_heads", "n_head"}, "a head count of");
    limit(c.n_kv_heads, limits::kHeads, {"num_key_value_heads", "n_head"}, "a head count of");
    limit(c.vocab_size, limits::kVocab, {"vocab_size"}, "a vocabulary of");
    limit(c.context_length, limits::kContext, {"max_position_embeddings", "n_positions"}, "a context of");
    if (c.head_dim > CK_ATTENTION_MAX_HEAD_DIM)
        r.fail("head_dim", fmt::format("{} is larger than the attention kernel supports ({})", c.head_dim,
                                       CK_ATTENTION_MAX_HEAD_DIM));
    if (opts.max_context > c.context_length)
        throw Error(ErrorKind::Usage, fmt::format("--max-context {} is above the context length of {}, {} "
                                                  "(max_position_embeddings or n_positions): it can only lower it",
                                                  opts.max_context, config_path, c.context_length));
    if (opts.max_context > 0) c.context_length = opts.max_context;
    Program p = fam.build(r, c);
    if (!r.has("vocab_size"))  // the class default rarely matches a checkpoint: say it
        p.info.notes.push_back(fmt::format("{} has no vocab_size: using the {} default, {}", config_path, c.model_type,
                                           c.vocab_size));
    p.info.source_path = config_path;
    if (!lm.prefix.empty()) {  // the language model's tensors under the wrapper's prefix (lm_head is the wrapper's)
        for (Section s : p.sections()) {
            Graph &g = p.section(s);
            std::vector<std::string> weights;
            for (const auto &[name, t] : g.tensors())
                if (t.storage == Storage::Weight) weights.push_back(name);
            for (const std::string &name : weights)
                for (std::string &part : g.tensor(name).source.parts)
                    if (starts_with(part, p.info.optional_prefix)) part = lm.prefix + part;
        }
        p.info.optional_prefix = lm.prefix;  // a checkpoint of the language model alone loads too
        p.info.notes.push_back(fmt::format("{}: model_type \"{}\": the language model ({}) is compiled; the vision "
                                           "tower is not read", config_path, top.string("model_type"), c.model_type));
    }
    return p;
}

namespace {

// The config.json keys whose values decide a model's numbers beyond its tensors' shapes, in every family: a
// checkpoint beside a config.json that differs in one was made for another model (max_position_embeddings is
// not here: --max-context caps it).
constexpr const char *kCheckedKeys[] = {
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta",
    "partial_rotary_factor", "hidden_act", "hidden_activation", "activation_function", "tie_word_embeddings",
    "attention_bias", "mlp_bias", "sliding_window", "query_pre_attn_scalar", "final_logit_softcapping",
    "attn_logit_softcapping", "n_embd", "n_layer", "n_head", "n_inner", "no_rope_layer_interval", "use_sliding_window",
    "rope_local_base_freq", "sliding_window_pattern", "decoder_sparse_step"};

void collect_config_expect(const ConfigReader &r, ModelInfo &info)
{
    std::string canonical;
    for (const char *key : kCheckedKeys) {
        auto it = r.raw().find(key);
        if (it == r.raw().end()) continue;
        ModelInfo::HeaderValue h;
        h.key = key;
        if (it->is_boolean()) {
            h.i = it->get<bool>() ? 1 : 0;
        } else if (it->is_number_integer()) {
            h.i = it->get<int64_t>();
        } else if (it->is_number()) {
            h.kind = ModelInfo::HeaderValue::Number;
            h.number = it->get<double>();
        } else if (it->is_string()) {
            h.kind = ModelInfo::HeaderValue::String;
            h.str = it->get<std::string>();
        } else {
            continue;  // null (the class default), or an object
        }
        canonical += std::string(key) + "=" + it->dump() + ";";
        info.config_expect.push_back(std::move(h));
    }
    info.config_hash = fnv1a64(canonical);
}

}  // namespace

Program build_from_hf_config(const std::string &config_path, const HfOptions &opts)
{
    ConfigReader r = ConfigReader::load(config_path);
    Program p = build_from_config(r, opts);
    collect_config_expect(r, p.info);
    p.info.source_hash = fnv1a64(read_file(config_path));
    for (Section s : p.sections()) p.section(s).verify(std::string("front end, ") + Program::section_name(s));
    return p;
}

}  // namespace ckc
