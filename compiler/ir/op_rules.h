// op_rules.h — the shape rules of ir/ops.cpp that the C emitters
// (codegen/emitters.cpp) also need: an op's dimensions are computed in one
// place, whether for its output shape or for the kernel call.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace ckc::rules {

int64_t last(const Shape &s);          // the last dim, 1 for a scalar
std::string shapes(const Inputs &in);  // "a[2, 3], b[3]" for messages
// The axis attribute `key` of n normalized to [0, rank); an internal error when outside.
int64_t axis_of(const Node &n, const Shape &s, const std::string &key = "axis", int64_t dflt = -1);
// [outer, n, inner] around `axis`
void split_axis(const Shape &s, int64_t axis, int64_t &outer, int64_t &n, int64_t &inner);
// A size attribute of n: an integer, or a symbolic size written as text ("seq", "seq+1"); a bad one is named.
int64_t size_attr(const Node &n, const std::string &key);
// `s` right-aligned to `rank` dims (leading 1s)
Shape aligned(const Shape &s, size_t rank);
// The permutation of TRANSPOSE (dim0, dim1) or PERMUTE (perm) over `rank` dims.
std::vector<int> perm_of(const Node &n, size_t rank);

// The activation of GELU / GLU (attr act); an internal error for any other name.
enum class Act { Silu, GeluTanh, Gelu };
Act act_of(const Node &n);

// MATMUL / MATMUL_ADD: [batch] x [M, K] (or [K, M] with trans_a) @ [K, N] (or [N, K] with trans_b)
struct MM {
    int64_t batch, M, N, K;
    bool b_batched, trans_b, trans_a = false;
};
MM matmul_dims(const Node &n, const Inputs &in);

// ATTENTION: heads == 0: q [.., Sq, D], k/v [.., Sk, D] (every leading index a
// slice); heads == H: q [B, Sq, H*D], k/v [B, Sk, H*D], the heads side by side
// in each row (no transpose needed), output in the layout of q.
struct Att {
    int64_t B, H, Sq, Sk, D;
};
Att attention_dims(const Node &n, const Inputs &in);
struct MaskStrides {
    int64_t batch = 0, head = 0, row = 0;
};
MaskStrides attention_mask_strides(const Node &n, const Shape &mask, const Att &a, DType dtype);
// Keys beyond which "auto" picks the flash kernel (bounded scratch) over the standard one.
constexpr int64_t kFlashMinKeys = 512;
bool use_flash(const Node &n, const Att &a);  // the flash kernel (impl attr, or auto for long keys)

}  // namespace ckc::rules
