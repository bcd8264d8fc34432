// gguf_arch.cpp — the architecture table (llama.cpp's gguf-py tensor map,
// its convert_hf_to_gguf.py and llama-model.cpp, restricted to what ckc's
// families build).
#include "frontend/gguf/gguf_arch.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "frontend/hf/builders.h"  // read_moe
#include "frontend/hf/families.h"

#include "support/error.h"

namespace ckc {

namespace {

using Names = std::vector<std::pair<std::string, std::string>>;

// The Llama-like layout (model.layers.{L}.* -> blk.{L}.*), with `more` appended.
Names llama_names(Names more = {})
{
    const std::string L = "model.layers.{L}.", B = "blk.{L}.";
    Names n = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {L + "input_layernorm.weight", B + "attn_norm.weight"},
        {L + "post_attention_layernorm.weight", B + "ffn_norm.weight"},
        {L + "mlp.gate_proj.weight", B + "ffn_gate.weight"},
        {L + "mlp.up_proj.weight", B + "ffn_up.weight"},
        {L + "mlp.down_proj.weight", B + "ffn_down.weight"},
        {L + "mlp.gate_proj.bias", B + "ffn_gate.bias"},
        {L + "mlp.up_proj.bias", B + "ffn_up.bias"},
        {L + "mlp.down_proj.bias", B + "ffn_down.bias"},
        {L + "self_attn.o_proj.weight", B + "attn_output.weight"},
        {L + "self_attn.o_proj.bias", B + "attn_output.bias"},
    };
    for (const char *p : {"q", "k", "v"})
        for (const char *w : {"weight", "bias"})
            n.push_back({L + "self_attn." + p + "_proj." + w, B + "attn_" + p + "." + w});
    n.insert(n.end(), more.begin(), more.end());
    return n;
}

// the HF key `key` of cfg from "<arch>.<gguf>" when the file has it
void copy_number(const GgufNumber &get, nlohmann::json &cfg, const char *gguf, const char *key)
{
    if (auto v = get(gguf)) cfg[key] = *v;
}

// A mixture's router and stacked experts (llama.cpp's ffn_gate_inp, ffn_{gate,up,down}_exps) under `module`.
Names moe_names(const std::string &module, const std::string &gate, const std::string &up, const std::string &down)
{
    const std::string L = "model.layers.{L}." + module + ".", B = "blk.{L}.";
    return {{L + "gate.weight", B + "ffn_gate_inp.weight"},
            {L + "experts.{E}." + gate + ".weight", B + "ffn_gate_exps.weight"},
            {L + "experts.{E}." + up + ".weight", B + "ffn_up_exps.weight"},
            {L + "experts.{E}." + down + ".weight", B + "ffn_down_exps.weight"}};
}

// The mixture's counts llama.cpp keys for every architecture, as HF config keys (`experts_key`: the family's).
void read_moe_counts(const GgufNumber &get, nlohmann::json &cfg, const char *experts_key)
{
    copy_number(get, cfg, "expert_count", experts_key);
    copy_number(get, cfg, "expert_used_count", "num_experts_per_tok");
}
void write_moe_counts(const char *arch, const MoeSpec &m, GgufMeta &meta)
{
    meta.push_back({std::string(arch) + ".expert_count", static_cast<double>(m.n_experts), true});
    meta.push_back({std::string(arch) + ".expert_used_count", static_cast<double>(m.top_k), true});
}

GgufArch row(const char *arch, const char *model_type)
{
    GgufArch a;
    a.arch = arch;
    a.model_type = model_type;
    return a;
}

}  // namespace

const std::vector<GgufArch> &gguf_archs()
{
    static const std::vector<GgufArch> table = [] {
        std::vector<GgufArch> t;
        // Llama 2/3, TinyLlama, SmolLM, and Mistral (llama.cpp writes HF Mistral as "llama")
        // Mixtral too: llama.cpp writes it as "llama" with expert_count (the llama row reads it as mixtral)
        GgufArch llama = row("llama", "llama");
        llama.permuted_qk = true;
        llama.names = llama_names(moe_names("block_sparse_moe", "w1", "w3", "w2"));
        llama.read_extra = [](const GgufNumber &get, nlohmann::json &cfg) {
            if (auto e = get("expert_count"); e && *e > 0) {
                cfg["model_type"] = "mixtral";
                read_moe_counts(get, cfg, "num_local_experts");
            }
        };
        t.push_back(llama);
        GgufArch mixtral = llama;  // HF -> GGUF: found by model_type; GGUF -> HF: the llama row comes first
        mixtral.model_type = "mixtral";
        mixtral.read_extra = nullptr;
        mixtral.write_extra = [](const ConfigReader &r, const LlmConfig &c, GgufMeta &meta) {
            write_moe_counts("llama", mixtral_moe(r, c), meta);
        };
        t.push_back(mixtral);

        // SmolLM3: the Llama layout; llama.cpp has no key for the NoPE layers (every 4th, fixed) nor a window
        GgufArch smollm3 = row("smollm3", "smollm3");
        smollm3.permuted_qk = true;
        smollm3.names = llama_names();
        smollm3.write_extra = [](const ConfigReader &r, const LlmConfig &c, GgufMeta &) {
            std::vector<int64_t> on = smollm3_rope_layers(r, c.n_layers);
            for (int64_t i = 0; i < c.n_layers; i++)
                if (on[static_cast<size_t>(i)] != ((i + 1) % 4 != 0))
                    r.fail(r.has("no_rope_layers") ? "no_rope_layers" : "no_rope_layer_interval",
                           fmt::format("puts RoPE {} layer {}; llama.cpp's smollm3 has none in every 4th layer "
                                       "(3, 7, ...) and RoPE in all others, so this model cannot be written to GGUF",
                                       on[static_cast<size_t>(i)] ? "in" : "not in", i));
            if (r.boolean("use_sliding_window", false) && read_window(r, "sliding_window", 0) > 0)
                r.fail("use_sliding_window", "llama.cpp's smollm3 has no sliding window: this model cannot be "
                                             "written to GGUF");
        };
        t.push_back(smollm3);

        GgufArch qwen2 = row("qwen2", "qwen2");
        qwen2.names = llama_names();
        t.push_back(qwen2);

        GgufArch qwen3 = row("qwen3", "qwen3");
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            qwen3.names = llama_names({{L + "self_attn.q_norm.weight", B + "attn_q_norm.weight"},
                                       {L + "self_attn.k_norm.weight", B + "attn_k_norm.weight"}});
        }
        t.push_back(qwen3);

        // Qwen3-MoE: Qwen3's names, the router (ffn_gate_inp) and the experts stacked per layer (ffn_*_exps);
        // llama.cpp always renormalizes the chosen experts' weights
        GgufArch qwen3moe = row("qwen3moe", "qwen3_moe");
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            qwen3moe.names = llama_names({{L + "self_attn.q_norm.weight", B + "attn_q_norm.weight"},
                                          {L + "self_attn.k_norm.weight", B + "attn_k_norm.weight"},
                                          });
            Names m = moe_names("mlp", "gate_proj", "up_proj", "down_proj");
            qwen3moe.names.insert(qwen3moe.names.end(), m.begin(), m.end());
        }
        qwen3moe.read_extra = [](const GgufNumber &get, nlohmann::json &cfg) {
            read_moe_counts(get, cfg, "num_experts");
            copy_number(get, cfg, "expert_feed_forward_length", "moe_intermediate_size");
            cfg["norm_topk_prob"] = true;
        };
        qwen3moe.write_extra = [](const ConfigReader &r, const LlmConfig &c, GgufMeta &meta) {
            MoeSpec m = qwen3_moe_moe(r, c);
            if (!m.norm_topk)
                r.fail("norm_topk_prob", "is false; llama.cpp's qwen3moe always renormalizes the chosen experts' "
                                         "weights, so this model cannot be written to GGUF");
            write_moe_counts("qwen3moe", m, meta);
            meta.push_back({"qwen3moe.expert_feed_forward_length", static_cast<double>(m.ffn), true});
        };
        t.push_back(qwen3moe);

        GgufArch gemma = row("gemma", "gemma");
        gemma.norm_plus_one = true;
        gemma.names = llama_names();
        gemma.read_extra = [](const GgufNumber &, nlohmann::json &cfg) {
            cfg["hidden_activation"] = "gelu_pytorch_tanh";
        };
        t.push_back(gemma);

        GgufArch gemma2 = row("gemma2", "gemma2");
        gemma2.norm_plus_one = true;
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            Names n = llama_names({{L + "pre_feedforward_layernorm.weight", B + "ffn_norm.weight"},
                                   {L + "post_feedforward_layernorm.weight", B + "post_ffw_norm.weight"}});
            for (auto &p : n)  // post_attention_layernorm is a sandwich norm here, not the MLP's input norm
                if (p.first == L + "post_attention_layernorm.weight") p.second = B + "post_attention_norm.weight";
            gemma2.names = n;
        }
        gemma2.read_extra = [](const GgufNumber &get, nlohmann::json &cfg) {
            cfg["hidden_activation"] = "gelu_pytorch_tanh";
            copy_number(get, cfg, "attn_logit_softcapping", "attn_logit_softcapping");
            copy_number(get, cfg, "final_logit_softcapping", "final_logit_softcapping");
            copy_number(get, cfg, "attention.sliding_window", "sliding_window");
            // llama.cpp derives the attention scale: 1/sqrt(head_dim), but n_embd/n_head for the 27B shape
            int64_t hidden = cfg["hidden_size"], heads = cfg["num_attention_heads"], layers = cfg["num_hidden_layers"];
            int64_t hd = cfg.contains("head_dim") ? cfg["head_dim"].get<int64_t>() : hidden / heads;
            cfg["query_pre_attn_scalar"] = hidden == 4608 && layers == 46 ? hidden / heads : hd;
        };
        gemma2.write_extra = [](const ConfigReader &r, const LlmConfig &c, GgufMeta &meta) {
            double q = r.positive_number("query_pre_attn_scalar", 256);
            bool is27b = c.hidden_size == 4608 && c.n_layers == 46;
            if (q != static_cast<double>(is27b ? c.hidden_size / c.n_heads : c.head_dim))
                r.fail("query_pre_attn_scalar", "differs from head_dim; llama.cpp's gemma2 derives the attention scale "
                                                "from head_dim, so this model cannot be written to GGUF");
            meta.push_back({"gemma2.attn_logit_softcapping", r.number("attn_logit_softcapping", 50.0), false});
            meta.push_back({"gemma2.final_logit_softcapping", r.number("final_logit_softcapping", 30.0), false});
            meta.push_back({"gemma2.attention.sliding_window", static_cast<double>(r.positive_int("sliding_window", 4096)), true});
        };
        t.push_back(gemma2);

        // Gemma 3 (text): Gemma 2's names + q/k norms. llama.cpp keys the local layers' RoPE base
        // (rope.freq_base_swa), the window and its pattern (every n-th layer global); without a window every layer
        // is global. The attention scale is derived as for gemma2; there is no attention soft-capping.
        GgufArch gemma3 = row("gemma3", "gemma3_text");
        gemma3.norm_plus_one = true;
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            Names n = gemma2.names;
            n.push_back({L + "self_attn.q_norm.weight", B + "attn_q_norm.weight"});
            n.push_back({L + "self_attn.k_norm.weight", B + "attn_k_norm.weight"});
            gemma3.names = n;
        }
        gemma3.read_extra = [](const GgufNumber &get, nlohmann::json &cfg) {
            cfg["hidden_activation"] = "gelu_pytorch_tanh";
            copy_number(get, cfg, "final_logit_softcapping", "final_logit_softcapping");
            copy_number(get, cfg, "rope.freq_base_swa", "rope_local_base_freq");
            int64_t layers = cfg["num_hidden_layers"];
            auto window = get("attention.sliding_window");
            if (window && *window > 0) {
                cfg["sliding_window"] = *window;
                copy_number(get, cfg, "attention.sliding_window_pattern", "sliding_window_pattern");
            } else {
                cfg["sliding_window"] = nullptr;
                cfg["layer_types"] = std::vector<std::string>(static_cast<size_t>(std::max<int64_t>(layers, 0)),
                                                              "full_attention");
            }
            int64_t hidden = cfg["hidden_size"], heads = cfg["num_attention_heads"];
            int64_t hd = cfg.contains("head_dim") ? cfg["head_dim"].get<int64_t>() : hidden / heads;
            cfg["query_pre_attn_scalar"] = layers == 62 ? hidden / heads : hd;  // llama.cpp: the 27B by its depth
        };
        gemma3.write_extra = [](const ConfigReader &r, const LlmConfig &c, GgufMeta &meta) {
            double q = r.positive_number("query_pre_attn_scalar", 256);
            if (q != static_cast<double>(c.n_layers == 62 ? c.hidden_size / c.n_heads : c.head_dim))
                r.fail("query_pre_attn_scalar", "differs from head_dim; llama.cpp's gemma3 derives the attention scale "
                                                "from head_dim, so this model cannot be written to GGUF");
            std::vector<bool> sliding = gemma3_sliding(r, c.n_layers);
            int64_t n_local = 0;
            for (bool s : sliding) n_local += s;
            int64_t window = read_window(r, "sliding_window", 4096);
            if (n_local > 0) {
                if (window == 0)
                    r.fail("sliding_window", "is null while some layers are local (their RoPE base differs); "
                                             "llama.cpp's gemma3 has local layers only with a window");
                int64_t pattern = r.positive_int("sliding_window_pattern", 6);
                for (int64_t i = 0; i < c.n_layers; i++)
                    if (sliding[static_cast<size_t>(i)] != ((i + 1) % pattern != 0))
                        r.fail("layer_types", fmt::format("makes layer {} {}, which llama.cpp's pattern of every {}th "
                                                          "layer global cannot say: this model cannot be written to "
                                                          "GGUF", i, sliding[static_cast<size_t>(i)] ? "local" : "global",
                                                          pattern));
                RopeConfig local = gemma3_local_rope(r, c);
                if (local.type != "default")
                    r.fail("rope_parameters", "scales the local layers' RoPE; llama.cpp's gemma3 scales only the "
                                              "global ones: this model cannot be written to GGUF");
                meta.push_back({"gemma3.attention.sliding_window", static_cast<double>(window), true});
                meta.push_back({"gemma3.attention.sliding_window_pattern", static_cast<double>(pattern), true});
                meta.push_back({"gemma3.rope.freq_base_swa", local.theta, false});
            }
            if (r.has("final_logit_softcapping"))
                meta.push_back({"gemma3.final_logit_softcapping", r.positive_number("final_logit_softcapping"), false});
        };
        t.push_back(gemma3);

        GgufArch olmo2 = row("olmo2", "olmo2");
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            Names n = llama_names({{L + "post_feedforward_layernorm.weight", B + "post_ffw_norm.weight"},
                                   {L + "self_attn.q_norm.weight", B + "attn_q_norm.weight"},
                                   {L + "self_attn.k_norm.weight", B + "attn_k_norm.weight"}});
            for (auto &p : n)  // the norm after attention, not the MLP's input norm
                if (p.first == L + "post_attention_layernorm.weight") p.second = B + "post_attention_norm.weight";
            olmo2.names = n;
        }
        t.push_back(olmo2);

        // OLMoE: OLMo 2's whole-width q/k norms (before the sublayers), a mixture whose weights llama.cpp never
        // renormalizes
        GgufArch olmoe = row("olmoe", "olmoe");
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            Names n = llama_names({{L + "self_attn.q_norm.weight", B + "attn_q_norm.weight"},
                                   {L + "self_attn.k_norm.weight", B + "attn_k_norm.weight"}});
            Names m = moe_names("mlp", "gate_proj", "up_proj", "down_proj");
            n.insert(n.end(), m.begin(), m.end());
            olmoe.names = n;
        }
        olmoe.read_extra = [](const GgufNumber &get, nlohmann::json &cfg) {
            read_moe_counts(get, cfg, "num_experts");
            cfg["norm_topk_prob"] = false;
            // what the file says, though llama.cpp's olmoe ignores it (ckc quantize refuses to write it)
            // (0 is llama.cpp's "none"; anything else goes to the config reader, which takes only a finite positive)
            if (auto clip = get("attention.clamp_kqv"); clip && *clip != 0) cfg["clip_qkv"] = *clip;
        };
        olmoe.write_extra = [](const ConfigReader &r, const LlmConfig &c, GgufMeta &meta) {
            MoeSpec m = olmoe_moe(r, c);
            if (m.norm_topk)
                r.fail("norm_topk_prob", "is true; llama.cpp's olmoe never renormalizes the chosen experts' weights, "
                                         "so this model cannot be written to GGUF");
            write_moe_counts("olmoe", m, meta);
            if (r.has("clip_qkv"))
                r.fail("clip_qkv", "is set; llama.cpp's olmoe does not clamp q, k and v (it runs a file with "
                                   "attention.clamp_kqv as one without), so this model cannot be written to GGUF");
        };
        t.push_back(olmoe);

        GgufArch phi3 = row("phi3", "phi3");
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            phi3.names = llama_names({{L + "self_attn.qkv_proj.weight", B + "attn_qkv.weight"},
                                      {L + "mlp.gate_up_proj.weight", B + "ffn_up.weight"}});
        }
        phi3.read_extra = [](const GgufNumber &get, nlohmann::json &cfg) {
            copy_number(get, cfg, "attention.sliding_window", "sliding_window");
        };
        phi3.write_extra = [](const ConfigReader &r, const LlmConfig &, GgufMeta &meta) {
            if (r.has("sliding_window"))
                meta.push_back({"phi3.attention.sliding_window", static_cast<double>(r.positive_int("sliding_window")), true});
        };
        t.push_back(phi3);

        GgufArch phi2 = row("phi2", "phi");
        phi2.layer_norm = true;
        phi2.eps = "layer_norm_eps";
        {
            const std::string L = "model.layers.{L}.", B = "blk.{L}.";
            Names n = llama_names({{L + "self_attn.dense.weight", B + "attn_output.weight"},
                                   {L + "self_attn.dense.bias", B + "attn_output.bias"},
                                   {L + "mlp.fc1.weight", B + "ffn_up.weight"},
                                   {L + "mlp.fc1.bias", B + "ffn_up.bias"},
                                   {L + "mlp.fc2.weight", B + "ffn_down.weight"},
                                   {L + "mlp.fc2.bias", B + "ffn_down.bias"},
                                   {L + "input_layernorm.bias", B + "attn_norm.bias"},
                                   {"model.final_layernorm.weight", "output_norm.weight"},
                                   {"model.final_layernorm.bias", "output_norm.bias"},
                                   {"lm_head.bias", "output.bias"}});
            phi2.names = n;
        }
        phi2.read_extra = [](const GgufNumber &get, nlohmann::json &cfg) {
            cfg["hidden_act"] = "gelu_new";
            int64_t hd = cfg["hidden_size"].get<int64_t>() / cfg["num_attention_heads"].get<int64_t>();
            if (auto rot = get("rope.dimension_count"); rot && hd > 0)  // (hd 0: the config reader refuses it)
                cfg["partial_rotary_factor"] = *rot / static_cast<double>(hd);
        };
        t.push_back(phi2);

        GgufArch gpt2 = row("gpt2", "gpt2");
        gpt2.layer_norm = true;
        gpt2.hidden = "n_embd";
        gpt2.ffn = "n_inner";
        gpt2.layers = "n_layer";
        gpt2.heads = "n_head";
        gpt2.kv_heads = nullptr;
        gpt2.context = "n_positions";
        gpt2.eps = "layer_norm_epsilon";
        {
            const std::string L = "transformer.h.{L}.", B = "blk.{L}.";
            gpt2.names = {{"transformer.wte.weight", "token_embd.weight"},
                          {"transformer.wpe.weight", "position_embd.weight"},
                          {"transformer.ln_f.weight", "output_norm.weight"},
                          {"transformer.ln_f.bias", "output_norm.bias"},
                          {"lm_head.weight", "output.weight"},
                          {L + "ln_1.weight", B + "attn_norm.weight"},
                          {L + "ln_1.bias", B + "attn_norm.bias"},
                          {L + "attn.c_attn.weight", B + "attn_qkv.weight"},
                          {L + "attn.c_attn.bias", B + "attn_qkv.bias"},
                          {L + "attn.c_proj.weight", B + "attn_output.weight"},
                          {L + "attn.c_proj.bias", B + "attn_output.bias"},
                          {L + "ln_2.weight", B + "ffn_norm.weight"},
                          {L + "ln_2.bias", B + "ffn_norm.bias"},
                          {L + "mlp.c_fc.weight", B + "ffn_up.weight"},
                          {L + "mlp.c_fc.bias", B + "ffn_up.bias"},
                          {L + "mlp.c_proj.weight", B + "ffn_down.weight"},
                          {L + "mlp.c_proj.bias", B + "ffn_down.bias"}};
            gpt2.transposed = {L + "attn.c_attn.weight", L + "attn.c_proj.weight", L + "mlp.c_fc.weight",
                               L + "mlp.c_proj.weight"};
        }
        gpt2.read_extra = [](const GgufNumber &, nlohmann::json &cfg) { cfg["activation_function"] = "gelu_new"; };
        t.push_back(gpt2);
        return t;
    }();
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

bool gguf_transposed(const GgufArch &a, const std::string &hf_name)
{
    for (const auto &t : a.transposed)
        if (t == hf_name) return true;
    return false;
}

std::vector<std::string> gguf_arch_names()
{
    std::vector<std::string> out;
    for (const auto &a : gguf_archs())
        if (std::find(out.begin(), out.end(), a.arch) == out.end()) out.push_back(a.arch);  // (llama: 2 rows)
    return out;
}

}  // namespace ckc
