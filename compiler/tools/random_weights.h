// random_weights.h — a deterministic random checkpoint for any compiled
// config: every tensor the Program reads, under its Hugging Face name.
// Matrices ~ N(0, std), norm weights ~ 1 + N(0, 0.1)... as roles suggest.
// The generator is a fixed PCG32 + Box-Muller, so files are byte-identical
// across machines and runs for the same seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "support/safetensors_writer.h"

namespace ckc {

struct RandomWeightOptions {
    uint64_t seed = 0;
    DType dtype = DType::F32;
    double std = 0.02;
    uint64_t shard_bytes = 0;
};

// The checkpoint tensors a Program needs: name -> shape, one entry per
// checkpoint tensor (fused weights expanded to their parts, {L} expanded).
std::vector<std::pair<std::string, Shape>> required_tensors(const Program &p);

std::vector<StTensor> random_tensors(const Program &p, const RandomWeightOptions &o);

}  // namespace ckc
