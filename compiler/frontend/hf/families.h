// families.h — the decoder families ckc compiles from a Hugging Face
// config.json, and the entry point of the HF front end.
//
// Adding a family: write frontend/hf/<family>.cpp defining parse_<family>
// (its config class defaults, via read_llama_like where the keys match) and
// build_<family> (header / block / footer from the shared builders); add one
// line to CK_FAMILIES in families.cpp, a tiny config under models/tiny-<model_type>/, and a
// parity case in tests/python/hf_cases.py (HF parity, training, GGUF and the gcu target
// pick it up). Nothing else in the compiler; a GGUF architecture is one row in
// frontend/gguf/gguf_arch.cpp.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "frontend/hf/config.h"
#include "ir/graph.h"

namespace ckc {

struct Family {
    const char *model_type;
    LlmConfig (*parse)(const ConfigReader &r);                      // the common numbers, with HF defaults
    Program (*build)(const ConfigReader &r, const LlmConfig &c);    // + family-specific keys
};

const std::vector<Family> &families();
std::vector<std::string> supported_model_types();

struct HfOptions {
    int64_t max_context = 0;  // > 0: cap the context length (RoPE table, KV capacity)
};

// config.json -> Program. Errors name the file and the key.
Program build_from_hf_config(const std::string &config_path, const HfOptions &opts = {});
// The same from a config already read (the GGUF front end synthesizes one); errors name r.path().
Program build_from_config(const ConfigReader &r, const HfOptions &opts = {});
LlmConfig parse_hf_config(const ConfigReader &r);

// A multimodal model whose language model is a supported family (Gemma 3's model_type "gemma3"): its config nests
// the language model's under text_config and its checkpoint names the language model's tensors with `prefix`
// ("language_model.model.layers.0..."); ckc compiles the language model and reads none of the rest.
struct LanguageModelOf {
    ConfigReader text;   // the language model's config (r itself for a language model)
    std::string prefix;  // before the language model's checkpoint names; "" for a language model
};
LanguageModelOf language_model_of(const ConfigReader &r);
// The multimodal model_types ckc compiles the language model of: {model_type, the language model's model_type}.
std::vector<std::pair<std::string, std::string>> multimodal_model_types();

// What a family reads that the GGUF table checks too (frontend/gguf/gguf_arch.cpp):
// SmolLM3's layers with RoPE (1) and without (0), from no_rope_layers or no_rope_layer_interval.
std::vector<int64_t> smollm3_rope_layers(const ConfigReader &r, int64_t n_layers);
// Gemma 3's sliding (local) layers, from layer_types or sliding_window_pattern; the local layers' RoPE.
std::vector<bool> gemma3_sliding(const ConfigReader &r, int64_t n_layers);
RopeConfig gemma3_local_rope(const ConfigReader &r, const LlmConfig &c);

}  // namespace ckc
