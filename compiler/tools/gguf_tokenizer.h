// gguf_tokenizer.h — a tokenizer the runtime loaded (runtime/text: tokenizer.json, tokenizer.model) written as
// GGUF's tokenizer.ggml.* metadata, the way llama.cpp's converter writes it, so that `ckc quantize` makes files
// llama.cpp (and ckc) run on text.
#pragma once

#include <string>
#include <vector>

#include "ck_tokenizer.h"
#include "tools/gguf_writer.h"

namespace ckc {

// Writes the keys; returns notes on what GGUF cannot carry (e.g. a normalizer llama.cpp does not apply).
// Throws an input error for a tokenizer GGUF has no form for.
std::vector<std::string> write_gguf_tokenizer(const ck_tokenizer *t, GgufWriter &w, const std::string &where);

}  // namespace ckc
