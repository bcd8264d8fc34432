// constants.h — the values of constant tensors in graph programs.
//
// An exported graph's parameters and buffers live in its weights file;
// passes that compute with them (constant folding, causal-mask detection)
// read them on demand, and new constants (folding results) are kept in
// Program::constants. At the end every weight the program still reads is
// written to one model.weights.safetensors next to model.c.
#pragma once

#include <string>

#include "ck_checkpoint.h"  // ck_dtype
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

// The IR dtype of a checkpoint tensor's dtype (an input error naming `tensor` for one ckc does not read),
// and back.
DType dtype_from_checkpoint(ck_dtype d, const std::string &tensor);
ck_dtype checkpoint_dtype(DType t);

}  // namespace ckc
