// families.h — the decoder families ckc compiles from a Hugging Face
// config.json, and the entry point of the HF front end.
//
// Adding a family: write frontend/hf/<family>.cpp with parse_<family> and
// build_<family> (from the shared builders), declare them here, add one line
// to FAMILIES in families.cpp, a config under models/, and a parity-test row.
#pragma once

#include <string>
#include <vector>

#include "frontend/hf/config.h"
#include "ir/graph.h"

namespace ckc {

struct Family {
    const char *model_type;
    LlmConfig (*parse)(const ConfigReader &r);
    Program (*build)(const LlmConfig &c);
};

const std::vector<Family> &families();
std::vector<std::string> supported_model_types();

struct HfOptions {
    int64_t max_context = 0;  // > 0: cap the context length (RoPE table, KV capacity)
};

// config.json -> Program. Errors name the file and the key.
Program build_from_hf_config(const std::string &config_path, const HfOptions &opts = {});
LlmConfig parse_hf_config(const ConfigReader &r);

LlmConfig parse_llama(const ConfigReader &r);
Program build_llama(const LlmConfig &c);

}  // namespace ckc
