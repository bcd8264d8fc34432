// gguf_arch.h — how a GGUF architecture relates to a Hugging Face family:
// one row per architecture (its HF model_type, the config keys its
// hyperparameters become, the tensor names, and what llama.cpp's converter
// changed). Read by the GGUF front end (GGUF -> Program) and by
// `ckc quantize` (HF -> GGUF), so both directions agree by construction.
//
// Adding an architecture: a row in gguf_archs() (gguf_arch.cpp) with its
// names; `extra` hooks only for keys the common ones do not cover.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "frontend/hf/config.h"

namespace ckc {

// A GGUF file's "<arch>.<key>" numbers, for the read hooks.
using GgufNumber = std::function<std::optional<double>(const std::string &key)>;
// The numbers a write hook adds to a GGUF file's metadata (`ckc quantize` writes them): full key, value, and
// whether GGUF stores it as u32 (else f32).
struct GgufMetaNumber {
    std::string key;
    double value = 0;
    bool u32 = false;
};
using GgufMeta = std::vector<GgufMetaNumber>;

struct GgufArch {
    const char *arch = "";        // general.architecture
    const char *model_type = "";  // the HF family whose builder makes the Program
    // llama.cpp's converter permutes each head's q_proj / k_proj rows so that HF's rotate-half pairs
    // (i, i + D/2) sit at (2i, 2i + 1): the file is read with interleaved RoPE
    bool permuted_qk = false;
    // Gemma: the converter stores RMSNorm weights as 1 + w (llama.cpp's plain RMSNorm then matches)
    bool norm_plus_one = false;
    bool layer_norm = false;  // LayerNorm: "<arch>.attention.layer_norm_epsilon" instead of the RMS key
    // the HF config keys of the common hyperparameters
    const char *hidden = "hidden_size", *ffn = "intermediate_size", *layers = "num_hidden_layers",
               *heads = "num_attention_heads", *kv_heads = "num_key_value_heads",
               *context = "max_position_embeddings", *eps = "rms_norm_eps";
    // HF tensor name ({L} = layer) -> GGUF tensor name ({L} = block)
    std::vector<std::pair<std::string, std::string>> names;
    // HF weights stored [in, out] (GPT-2's Conv1D) that GGUF stores [out, in]
    std::vector<std::string> transposed;
    // family keys beyond the common ones: GGUF -> HF config, and HF config -> GGUF
    std::function<void(const GgufNumber &, nlohmann::json &)> read_extra;
    std::function<void(const ConfigReader &, const LlmConfig &, GgufMeta &)> write_extra;
};

const std::vector<GgufArch> &gguf_archs();
const GgufArch *gguf_arch(const std::string &arch);                  // by general.architecture
const GgufArch *gguf_arch_for_model_type(const std::string &model_type);
// the GGUF name of an HF weight name, "" when the architecture has none
std::string gguf_tensor_name(const GgufArch &a, const std::string &hf_name);
bool gguf_transposed(const GgufArch &a, const std::string &hf_name);
std::vector<std::string> gguf_arch_names();

}  // namespace ckc
