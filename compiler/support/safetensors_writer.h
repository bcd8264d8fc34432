// safetensors_writer.h — writes safetensors files (single or sharded with an
// index.json): a compiled graph's weights file, `ckc random-weights` and the tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ck_checkpoint.h"  // ck_dtype

namespace ckc {

struct StTensor {
    std::string name;
    std::vector<int64_t> shape;
    ck_dtype dtype = CK_DT_F32;
    std::vector<uint8_t> data;  // little-endian, already in `dtype`
};

// One file with every tensor (sorted by name, as the reference writer does).
std::string safetensors_bytes(const std::vector<StTensor> &tensors);
// Writes DIR/model.safetensors, or shards + model.safetensors.index.json when
// the tensors exceed shard_bytes (0 = never shard). Atomic: on failure no file
// is left behind.
void write_checkpoint(const std::string &dir, const std::vector<StTensor> &tensors, uint64_t shard_bytes);

}  // namespace ckc
