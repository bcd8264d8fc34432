#include "frontend/hf/config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "support/error.h"
#include "support/source_location.h"
#include "support/util.h"

namespace ckc {

using nlohmann::json;

ConfigReader ConfigReader::load(const std::string &path)
{
    std::string text = read_file(path);
    json j = parse_json_text(path, text);
    if (!j.is_object()) input_error(path + ": expected a JSON object at the top level");
    return ConfigReader(std::move(j), path, std::move(text));
}

void ConfigReader::fail(const std::string &key, const std::string &msg) const
{
    // the key, found after each enclosing key of a nested reader ("rope_scaling.factor"); a missing key
    // points at the object it is missing from, when that is nested
    size_t at = 0, found = kNoPosition, len = 0;
    std::string rest = prefix_ + key;
    while (!rest.empty()) {
        size_t dot = rest.find('.');
        std::string part = rest.substr(0, dot);
        at = find_json_key(*text_, part, at);
        if (at == kNoPosition) break;
        found = at;
        len = part.size() + 2;
        rest = dot == std::string::npos ? "" : rest.substr(dot + 1);
    }
    input_error(located_message(path_, *text_, found, len, fmt::format("key \"{}{}\": {}", prefix_, key, msg)));
}

bool ConfigReader::has(const std::string &key) const { return j_.contains(key) && !j_.at(key).is_null(); }

bool ConfigReader::is_null(const std::string &key) const { return j_.contains(key) && j_.at(key).is_null(); }

std::optional<std::vector<std::string>> ConfigReader::string_list(const std::string &key) const
{
    if (!has(key)) return std::nullopt;
    const json &v = j_.at(key);
    if (!v.is_array()) fail(key, "must be a list of strings, got " + v.dump().substr(0, 40));
    std::vector<std::string> out;
    for (const auto &e : v) {
        if (!e.is_string()) fail(key, "must be a list of strings, got an element " + e.dump());
        out.push_back(e.get<std::string>());
    }
    return out;
}

std::optional<std::vector<int64_t>> ConfigReader::int_list(const std::string &key, int64_t lo, int64_t hi) const
{
    if (!has(key)) return std::nullopt;
    const json &v = j_.at(key);
    if (!v.is_array()) fail(key, "must be a list of integers, got " + v.dump().substr(0, 40));
    std::vector<int64_t> out;
    for (const auto &e : v) {
        if (!e.is_number_integer()) fail(key, "must be a list of integers, got an element " + e.dump().substr(0, 40));
        int64_t x = e.get<int64_t>();
        if (x < lo || x > hi) fail(key, fmt::format("has the element {}; each must be in [{}, {}]", x, lo, hi));
        out.push_back(x);
    }
    return out;
}

const json &ConfigReader::require(const std::string &key) const
{
    if (!j_.contains(key)) fail(key, "is required but missing");
    if (j_.at(key).is_null()) fail(key, "is required but null");
    return j_.at(key);
}

static std::string show(const json &v)
{
    std::string s = v.dump();
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

int64_t ConfigReader::non_negative_int(const std::string &key, std::optional<int64_t> dflt) const
{
    if (!has(key) && dflt) return *dflt;
    const json &v = require(key);
    if (v.is_boolean() || !v.is_number()) fail(key, "must be an integer, got " + show(v));
    double d = v.get<double>();
    if (!v.is_number_integer() && (d != std::floor(d) || !std::isfinite(d))) fail(key, "must be an integer, got " + show(v));
    if (d < 0) fail(key, "must not be negative, got " + show(v));
    if (d > 9.0e15) fail(key, "is too large: " + show(v));
    return static_cast<int64_t>(d);
}

int64_t ConfigReader::positive_int(const std::string &key, std::optional<int64_t> dflt) const
{
    int64_t v = non_negative_int(key, dflt);
    if (v <= 0) fail(key, "must be a positive integer, got " + std::to_string(v));
    return v;
}

double ConfigReader::number(const std::string &key, std::optional<double> dflt) const
{
    if (!has(key) && dflt) return *dflt;
    const json &v = require(key);
    if (v.is_boolean() || !v.is_number()) fail(key, "must be a number, got " + show(v));
    double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "must be finite, got " + show(v));
    return d;
}

double ConfigReader::positive_number(const std::string &key, std::optional<double> dflt) const
{
    double d = number(key, dflt);
    if (!(d > 0)) fail(key, fmt::format("must be positive, got {}", d));
    return d;
}

bool ConfigReader::boolean(const std::string &key, std::optional<bool> dflt) const
{
    if (!has(key) && dflt) return *dflt;
    const json &v = require(key);
    if (!v.is_boolean()) fail(key, "must be true or false, got " + show(v));
    return v.get<bool>();
}

std::string ConfigReader::string(const std::string &key, std::optional<std::string> dflt) const
{
    if (!has(key) && dflt) return *dflt;
    const json &v = require(key);
    if (!v.is_string()) fail(key, "must be a string, got " + show(v));
    return v.get<std::string>();
}

std::optional<ConfigReader> ConfigReader::object(const std::string &key) const
{
    if (!has(key)) return std::nullopt;
    const json &v = j_.at(key);
    if (!v.is_object()) fail(key, "must be an object or null, got " + show(v));
    ConfigReader r(v, path_);
    r.prefix_ = prefix_ + key + ".";
    r.text_ = text_;
    return r;
}

ConfigReader ConfigReader::with(const std::string &key, nlohmann::json value) const
{
    ConfigReader r = *this;
    r.j_[key] = std::move(value);
    return r;
}

int64_t read_head_dim(const ConfigReader &r, int64_t hidden, int64_t heads)
{
    if (r.has("head_dim")) return r.positive_int("head_dim");
    if (hidden % heads != 0)
        r.fail("num_attention_heads",
               fmt::format("{} does not divide hidden_size {} (and there is no head_dim key)", heads, hidden));
    return hidden / heads;
}

void check_gqa(const ConfigReader &r, int64_t heads, int64_t kv_heads)
{
    if (heads % kv_heads != 0)
        r.fail("num_key_value_heads", fmt::format("{} does not divide num_attention_heads {}", kv_heads, heads));
}

RopeConfig read_rope(const ConfigReader &r, int64_t head_dim, double partial_default, double theta_default)
{
    RopeConfig rope;
    // transformers >= 4.5x: "rope_parameters": {"rope_type", "rope_theta", "partial_rotary_factor", ...}
    std::optional<ConfigReader> s = r.object("rope_parameters");
    double partial = r.number("partial_rotary_factor", partial_default);
    if (s) {
        rope.theta = s->positive_number("rope_theta", r.positive_number("rope_theta", theta_default));
        partial = s->number("partial_rotary_factor", partial);
    } else {
        rope.theta = r.positive_number("rope_theta", theta_default);
        s = r.object("rope_scaling");
    }
    if (!(partial > 0 && partial <= 1)) r.fail("partial_rotary_factor", fmt::format("must be in (0, 1], got {}", partial));
    rope.rot_dim = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
    if (rope.rot_dim < 2 || rope.rot_dim % 2)
        r.fail("partial_rotary_factor",
               fmt::format("gives {} rotary dims of head_dim {}; they must be even", rope.rot_dim, head_dim));
    if (s) read_rope_scaling(*s, rope);
    return rope;
}

void read_rope_scaling(const ConfigReader &s, RopeConfig &rope)
{
    std::string type = s.has("rope_type") ? s.string("rope_type") : s.string("type", "default");
    if (type == "default") return;
    if (type == "linear") {
        rope.type = type;
        rope.factor = s.positive_number("factor");
    } else if (type == "llama3") {
        rope.type = type;
        rope.factor = s.positive_number("factor");
        rope.low_freq_factor = s.positive_number("low_freq_factor");
        rope.high_freq_factor = s.positive_number("high_freq_factor");
        rope.original_max_position_embeddings = s.positive_number("original_max_position_embeddings");
        if (rope.high_freq_factor <= rope.low_freq_factor)
            s.fail("high_freq_factor", fmt::format("must be greater than low_freq_factor ({} <= {})",
                                                   rope.high_freq_factor, rope.low_freq_factor));
    } else {
        s.fail(s.has("rope_type") ? "rope_type" : "type",
               "\"" + type + "\" is not supported; supported: default, linear, llama3");
    }
}

std::string activation_from_hf(const ConfigReader &r, const std::string &key, const std::string &act)
{
    if (act == "silu" || act == "swish") return "silu";
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return "gelu_tanh";
    if (act == "gelu") return "gelu";
    r.fail(key, "\"" + act + "\" is not supported; supported: silu, swish, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast");
}

std::string read_activation(const ConfigReader &r, const std::string &key, const std::string &dflt)
{
    return activation_from_hf(r, key, r.string(key, dflt));
}

int64_t read_window(const ConfigReader &r, const std::string &key, int64_t dflt)
{
    if (r.is_null(key)) return 0;
    return r.non_negative_int(key, dflt);
}

std::vector<bool> read_layer_types(const ConfigReader &r, int64_t n_layers, const std::vector<bool> &sliding)
{
    auto given = r.string_list("layer_types");
    if (!given) return sliding;
    if (static_cast<int64_t>(given->size()) != n_layers)
        r.fail("layer_types", fmt::format("has {} entries for {} layers", given->size(), n_layers));
    std::vector<bool> out;
    for (const auto &t : *given) {
        if (t != "sliding_attention" && t != "full_attention")
            r.fail("layer_types", "\"" + t + "\" is not sliding_attention or full_attention");
        out.push_back(t == "sliding_attention");
    }
    return out;
}

std::vector<double> read_layer_windows(const ConfigReader &r, int64_t n_layers, int64_t window,
                                       const std::vector<bool> &sliding)
{
    std::vector<double> windows;
    for (bool s : read_layer_types(r, n_layers, sliding)) windows.push_back(s ? static_cast<double>(window) : 0.0);
    return windows;
}

LlmConfig read_llama_like(const ConfigReader &r, const std::string &model_type, const FamilyDefaults &d)
{
    LlmConfig c;
    c.model_type = model_type;
    c.vocab_size = r.positive_int("vocab_size", d.vocab_size);
    c.hidden_size = r.positive_int("hidden_size", d.hidden_size);
    c.intermediate_size = r.positive_int("intermediate_size", d.intermediate_size);
    c.n_layers = r.positive_int("num_hidden_layers", d.n_layers);
    c.n_heads = r.positive_int("num_attention_heads", d.n_heads);
    c.n_kv_heads = r.positive_int("num_key_value_heads", d.n_kv_heads > 0 ? d.n_kv_heads : c.n_heads);
    check_gqa(r, c.n_heads, c.n_kv_heads);
    c.head_dim = r.has("head_dim") || d.head_dim <= 0 ? read_head_dim(r, c.hidden_size, c.n_heads) : d.head_dim;
    c.context_length = r.positive_int("max_position_embeddings", d.context_length);
    c.norm_eps = r.positive_number(d.eps_key, d.norm_eps);
    c.tie_word_embeddings = r.boolean("tie_word_embeddings", d.tie_word_embeddings);
    c.hidden_act = read_activation(r, "hidden_act", d.hidden_act);
    c.rope = read_rope(r, c.head_dim, d.partial_rotary_factor, d.rope_theta);
    return c;
}

std::string LlmConfig::summary() const
{
    std::string rope_s = rope.type == "default" ? fmt::format("rope theta {}", rope.theta)
                                                : fmt::format("rope {} x{} theta {}", rope.type, rope.factor, rope.theta);
    if (rope.rot_dim && rope.rot_dim != head_dim) rope_s += fmt::format(" on {} of {} dims", rope.rot_dim, head_dim);
    if (!rope.rot_dim) rope_s = "learned positions";
    return fmt::format("{}: {} layers, hidden {}, heads {} (kv {}), head_dim {}, ffn {}, vocab {}, context {}, {}{}",
                       model_type, n_layers, hidden_size, n_heads, n_kv_heads, head_dim, intermediate_size,
                       vocab_size, context_length, rope_s, tie_word_embeddings ? ", tied embeddings" : "");
}

}  // namespace ckc
