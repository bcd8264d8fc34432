// config.h — reading a Hugging Face config.json.
//
// ConfigReader gives typed access with the Hugging Face class defaults and
// errors that name the file and the key. LlmConfig is the family-neutral
// description every family file fills in and every block builder reads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ckc {

class ConfigReader {
public:
    ConfigReader(nlohmann::json j, std::string path, std::string text = "")
        : j_(std::move(j)), path_(std::move(path)), text_(std::make_shared<const std::string>(std::move(text)))
    {
    }
    static ConfigReader load(const std::string &path);  // parse errors give line and column

    const std::string &path() const { return path_; }
    const nlohmann::json &raw() const { return j_; }
    // present and not null (HF treats null as "use the default")
    bool has(const std::string &key) const;
    // present with the value null (where null means "off", e.g. sliding_window)
    bool is_null(const std::string &key) const;

    int64_t positive_int(const std::string &key, std::optional<int64_t> dflt = std::nullopt) const;
    int64_t non_negative_int(const std::string &key, std::optional<int64_t> dflt = std::nullopt) const;
    double number(const std::string &key, std::optional<double> dflt = std::nullopt) const;
    double positive_number(const std::string &key, std::optional<double> dflt = std::nullopt) const;
    bool boolean(const std::string &key, std::optional<bool> dflt = std::nullopt) const;
    std::string string(const std::string &key, std::optional<std::string> dflt = std::nullopt) const;
    // A nested object as its own reader ("rope_scaling.factor" in errors); nullopt if absent or null.
    std::optional<ConfigReader> object(const std::string &key) const;
    // The same reader with `key` set to `value` (a value the reader supplies: a nested config's model_type).
    ConfigReader with(const std::string &key, nlohmann::json value) const;
    // A list of strings (layer_types); nullopt if absent or null.
    std::optional<std::vector<std::string>> string_list(const std::string &key) const;
    // A list of integers (no_rope_layers), each in [lo, hi]; nullopt if absent or null.
    std::optional<std::vector<int64_t>> int_list(const std::string &key, int64_t lo, int64_t hi) const;

    [[noreturn]] void fail(const std::string &key, const std::string &msg) const;

private:
    const nlohmann::json &require(const std::string &key) const;
    nlohmann::json j_;
    std::string path_;
    std::shared_ptr<const std::string> text_;  // the file's text, for error positions (shared with nested readers)
    std::string prefix_;  // "rope_scaling." for nested readers
};

struct RopeConfig {
    std::string type = "default";  // default | linear | llama3
    double theta = 10000.0;
    double factor = 1.0;
    double low_freq_factor = 1.0, high_freq_factor = 4.0;
    double original_max_position_embeddings = 8192.0;
    int64_t rot_dim = 0;  // rotated dims per head (head_dim unless partial rotary)
};

struct LlmConfig {
    std::string model_type;
    int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, n_layers = 0;
    int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, context_length = 0;
    double norm_eps = 1e-6;
    bool tie_word_embeddings = false, attention_bias = false, mlp_bias = false;
    std::string hidden_act = "silu";
    RopeConfig rope;

    std::string summary() const;
};

// The class defaults of a Llama-like family (LlamaConfig, MistralConfig, ...):
// the keys vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings,
// <eps_key>, tie_word_embeddings, rope_theta / rope_scaling, hidden_act.
struct FamilyDefaults {
    int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008, n_layers = 32, n_heads = 32;
    int64_t n_kv_heads = 0;     // <= 0: num_attention_heads
    int64_t head_dim = 0;       // <= 0: hidden_size / num_attention_heads
    int64_t context_length = 2048;
    double norm_eps = 1e-6;
    const char *eps_key = "rms_norm_eps";
    bool tie_word_embeddings = false;
    const char *hidden_act = "silu";
    double partial_rotary_factor = 1.0;
    double rope_theta = 10000.0;  // the class's default_theta
};
LlmConfig read_llama_like(const ConfigReader &r, const std::string &model_type, const FamilyDefaults &d);

// head_dim: the key if present, else hidden_size / num_attention_heads, which
// must divide evenly (error names num_attention_heads).
int64_t read_head_dim(const ConfigReader &r, int64_t hidden, int64_t heads);
// rope_theta + rope_scaling (null, "default", "linear", "llama3"); newer
// transformers' "rope_parameters" object is accepted too. rot_dim is
// head_dim * partial_rotary_factor (the key, else `partial_default`).
RopeConfig read_rope(const ConfigReader &r, int64_t head_dim, double partial_default = 1.0,
                     double theta_default = 10000.0);
// The scaling of `s` (a rope_scaling or rope_parameters object: rope_type/type and its keys) over `rope`.
void read_rope_scaling(const ConfigReader &s, RopeConfig &rope);
// num_key_value_heads must divide num_attention_heads.
void check_gqa(const ConfigReader &r, int64_t heads, int64_t kv_heads);
// A Hugging Face activation name (ACT2FN) as a kernel activation:
// silu/swish -> "silu"; gelu_new, gelu_pytorch_tanh, gelu_fast -> "gelu_tanh"; gelu -> "gelu".
// Anything else is an error naming `key`.
std::string read_activation(const ConfigReader &r, const std::string &key, const std::string &dflt);
std::string activation_from_hf(const ConfigReader &r, const std::string &key, const std::string &hf_name);
// A sliding window: the key's value; null (or absent when dflt is 0) -> 0 (none).
int64_t read_window(const ConfigReader &r, const std::string &key, int64_t dflt);
// The window of every layer from "layer_types" (sliding_attention: `window`,
// full_attention: 0; one entry per layer), or when absent from `sliding`
// (the family's default: which layers slide). Errors name the key.
std::vector<double> read_layer_windows(const ConfigReader &r, int64_t n_layers, int64_t window,
                                       const std::vector<bool> &sliding);
// Which layers slide: "layer_types" (sliding_attention / full_attention, one entry per layer), or when absent
// `sliding` (the family's default). Errors name the key.
std::vector<bool> read_layer_types(const ConfigReader &r, int64_t n_layers, const std::vector<bool> &sliding);

}  // namespace ckc
