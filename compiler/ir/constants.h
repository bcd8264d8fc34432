// constants.h — the values of constant tensors in graph programs.
//
// An exported graph's parameters and buffers live in its weights file;
// passes that compute with them (constant folding, causal-mask detection)
// read them on demand, and new constants (folding results) are kept in
// Program::constants. At the end every weight the program still reads is
// written to one model.weights.safetensors next to model.c.
#pragma once

#include <string>

#include "ir/graph.h"

namespace ckc {

// The value of a constant tensor (Storage::Weight with one part): from
// p.constants, else read from p.weights_path (a part stored transposed is
// returned transposed, as the kernels see it). nullptr when the tensor is not
// a constant of a graph program.
const ConstData *constant_value(Program &p, const Tensor &t);

// Registers `data` as a new constant tensor of `g` named after `base`;
// returns the tensor name (also its name in the weights file).
std::string add_constant(Program &p, Graph &g, const std::string &base, ConstData data);

// The float32 weights file of a compiled graph: every f32 weight the program
// reads (by source name), copied from the export file or from p.constants.
std::string graph_weights_bytes(const Program &p);

}  // namespace ckc
