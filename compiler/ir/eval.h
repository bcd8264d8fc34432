// eval.h — reference evaluators of the ops constant folding can fold
// (OpDef::eval). `out` arrives with its shape and dtype set from the graph;
// an evaluator fills out.v and returns false when it cannot (e.g. an
// attribute it does not handle), in which case the node is left to run.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace ckc {

using ConstInputs = std::vector<const ConstData *>;

bool eval_binary(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_unary(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_clamp(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_reduce(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_slice(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_reshape(const Node &n, const ConstInputs &in, ConstData &out);  // RESHAPE and COPY: same values
bool eval_permute(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_expand(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_cat(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_masked_fill(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_embedding(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_arange(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_full(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_cmp(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_cast(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_where(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_tril(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_index(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_index_put(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_rotate_half(const Node &n, const ConstInputs &in, ConstData &out);
bool eval_cumsum(const Node &n, const ConstInputs &in, ConstData &out);

// Rounds a value to what `dtype` can hold (f32 rounding, integer truncation, bool).
double round_to_dtype(double v, DType dtype);

}  // namespace ckc
