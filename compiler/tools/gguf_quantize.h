// gguf_quantize.h — `ckc quantize`: a Hugging Face checkpoint written as a
// GGUF file llama.cpp loads (its architecture's metadata and tensor names,
// llama.cpp's q/k row permutation where its converter applies one), with the
// weight matrices in a GGUF block type and norms / biases in f32.
#pragma once

#include <ostream>
#include <string>

namespace ckc {

struct QuantizeOptions {
    std::string type = "q8_0";  // f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K
    std::ostream *progress = nullptr;        // a line per tensor (a terminal)
    std::ostream *progress_notes = nullptr;  // what the user should know about the written file
};

// folder: config.json + safetensors (single, sharded, or any dtype ckc reads).
// Returns the number of tensors written. Atomic: on error no file is left.
size_t quantize_to_gguf(const std::string &folder, const std::string &out_path, const QuantizeOptions &o);

}  // namespace ckc
