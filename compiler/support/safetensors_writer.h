// safetensors_writer.h — writes safetensors files (single or sharded with an
// index.json), used by `ckc random-weights` and the tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ckc {

struct StTensor {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype = DType::F32;
    std::vector<uint8_t> data;  // little-endian, already in `dtype`
};

uint16_t f32_to_bf16(float f);  // round to nearest even
uint16_t f32_to_f16(float f);   // round to nearest even, with subnormals
const char *safetensors_dtype(DType t);

// One file with every tensor (sorted by name, as the reference writer does).
std::string safetensors_bytes(const std::vector<StTensor> &tensors);
// Writes DIR/model.safetensors, or shards + model.safetensors.index.json when
// the tensors exceed shard_bytes (0 = never shard). Atomic: on failure no file
// is left behind.
void write_checkpoint(const std::string &dir, const std::vector<StTensor> &tensors, uint64_t shard_bytes);

}  // namespace ckc
