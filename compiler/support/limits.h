// limits.h — the largest sizes a document may declare (config.json, a GGUF's metadata, graph.json), checked before
// anything is sized from them; far above every published model (the largest: 126 layers, a 256k vocabulary, a
// 128k-wide MLP), and small enough that no size computed from them overflows an int64. The README's "Security
// and robustness" section lists them.
#pragma once

#include <cstdint>

namespace ckc::limits {

constexpr int64_t kLayers = 1024;
constexpr int64_t kWidth = int64_t(1) << 20;    // hidden, MLP and head widths
constexpr int64_t kHeads = 4096;
constexpr int64_t kVocab = int64_t(1) << 24;    // as CK_TOKENIZER_MAX_VOCAB
constexpr int64_t kContext = int64_t(1) << 30;  // positions
constexpr int64_t kDim = int64_t(1) << 32;      // one dimension of a graph.json tensor
constexpr int64_t kElements = int64_t(1) << 48; // elements of one graph.json tensor
constexpr int64_t kRank = 8;                    // dimensions of one graph.json tensor
constexpr int64_t kSymbols = 64;                // symbolic sizes of one graph.json (free and derived)

}  // namespace ckc::limits
