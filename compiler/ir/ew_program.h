// ew_program.h — the program of a fused elementwise node (EW): what the
// fuse_elementwise pass writes, the shape rule checks and the emitter turns
// into the ck_ew_insn table of the runtime kernel (ck_kernels.h, ck_ew).
//
// Text form (the node's attr `program`, readable in IR dumps), one
// instruction per `;`, each producing the next value v0, v1, ...; the last
// one is the node's output:
//     mul(i0, i1); add(v0, 0.5); tanh(v1); sub(1, v2); pow(v3, 2)
// Operands: iK (input K), vK (value K), or a number (at most one per
// instruction, none for unary ops other than pow's exponent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ckc {

struct EwInsn {
    int op = 0;         // ck_ewop: CK_EW_ADD.. or CK_EW_UNARY + ck_unop
    int a = -1, b = -1; // slots: inputs 0..nin-1, then values nin..; -1: `imm`
    double imm = 0.0;
};

// Parses and checks `text` for a node with `nin` inputs; throws a message naming the bad instruction.
std::vector<EwInsn> parse_ew_program(const std::string &text, int nin);
std::string format_ew_program(const std::vector<EwInsn> &prog, int nin);
// How ck_ew indexes an input of shape `s` for an output of shape `o`: (div, mod) with element
// (i / div) % mod for output element i, when the dims `s` does not broadcast along are one run of
// `o`'s (ignoring o's 1s): the same shape, a scalar, a row, a column. Else nothing.
std::optional<std::pair<int64_t, int64_t>> ew_index(const std::vector<int64_t> &s, const std::vector<int64_t> &o);
// The ck_ewop of a binary op name ("add") or unary op name ("tanh": CK_EW_UNARY + its ck_unop); -1 if none.
int ew_opcode(const std::string &name);

}  // namespace ckc
