// gguf_arch.h — how a GGUF architecture relates to a Hugging Face family:
// one row per architecture (its HF model_type, the hyperparameter keys, the
// tensor names, and what llama.cpp's converter changed). Read by the GGUF
// front end (GGUF -> Program) and by `ckc quantize` (HF -> GGUF), so both
// directions agree by construction.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ckc {

struct GgufArch {
    const char *arch;        // general.architecture
    const char *model_type;  // the HF family whose builder makes the Program
    // llama.cpp's converter permutes each head's q_proj / k_proj rows so that HF's rotate-half pairs
    // (i, i + D/2) sit at (2i, 2i + 1): the file is read with interleaved RoPE
    bool permuted_qk;
    // HF tensor name ({L} = layer) -> GGUF tensor name ({L} = block)
    std::vector<std::pair<std::string, std::string>> names;
};

const std::vector<GgufArch> &gguf_archs();
const GgufArch *gguf_arch(const std::string &arch);                  // by general.architecture
const GgufArch *gguf_arch_for_model_type(const std::string &model_type);
// the GGUF name of an HF weight name, "" when the architecture has none
std::string gguf_tensor_name(const GgufArch &a, const std::string &hf_name);
std::vector<std::string> gguf_arch_names();

}  // namespace ckc
