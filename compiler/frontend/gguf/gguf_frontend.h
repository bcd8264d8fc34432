// gguf_frontend.h — a GGUF file as compiler input: its metadata becomes the
// Hugging Face config its family builder reads (the same Program as from
// config.json), its tensor names replace the checkpoint names, and the
// weight matrices stay in the file's formats (ModelInfo::stored_weights).
#pragma once

#include <string>

#include "frontend/hf/families.h"
#include "ir/graph.h"

namespace ckc {

bool is_gguf(const std::string &path);  // by the magic, whatever the suffix
Program build_from_gguf(const std::string &path, const HfOptions &opts = {});
// The config.json a GGUF file's metadata amounts to (for messages and tests).
nlohmann::json gguf_to_hf_config(const std::string &path);

}  // namespace ckc
