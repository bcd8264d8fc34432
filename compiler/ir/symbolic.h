// symbolic.h — symbolic sizes: dimensions known only when the generated code runs (issue #30).
//
// A Shape entry is an int64: >= 0 a size, kTokens (-1) the LLM sections' token count T, and an entry at or
// below kSymBase a *symbolic size*: a product coef * s1^p1 * s2^p2 ... of named symbols ("batch", "seq"),
// interned in a process-wide table, so equal products are equal integers and the shape rules that only
// copy and compare dimensions work unchanged. Rules that compute a dimension use dim_mul / dim_div; a size
// that is not such a product (batch + 1) is refused where it would arise.
//
// Each symbol has bounds [min, max] (graph.json "symbols"); the planner sizes every buffer at the maxima
// (dim_max), so one plan holds for every binding. The generated C reads a symbol's value from a section
// local sym_<name> (dim_c), which the section sets from the handle, where ck_graph_run_shaped bound it.
//
// The codes are far from every real size, so arithmetic that forgot a symbol gives a value that the
// checks of arg_size (codegen/kernel_call.cpp) refuse, never a plausible wrong size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ckc {

constexpr int64_t kSymBase = -(int64_t(1) << 40);

struct SymProduct {
    int64_t coef = 1;
    std::map<std::string, int> powers;  // symbol -> exponent (>= 1)
};

struct SymBounds {
    int64_t min = 1, max = 1;
};

bool is_sym(int64_t d);                            // an interned symbolic size
int64_t sym_dim(const std::string &name);          // the size that is symbol `name`
int64_t sym_make(const SymProduct &p);             // its interned code, or the plain size when it has no symbol
const SymProduct &sym_product(int64_t d);          // of a symbolic size (an internal error for anything else)
int64_t dim_mul(int64_t a, int64_t b);             // sizes or symbolic sizes (not T)
bool dim_div(int64_t a, int64_t b, int64_t &q);    // a / b when exact as a product; false otherwise
std::string dim_str(int64_t d);                    // "64*batch", "512"
std::string dim_c(int64_t d);                      // "(int64_t)64 * sym_batch": the C that computes it
std::vector<std::string> dim_reads(int64_t d);     // the section locals it reads: {"sym_batch"}
std::string sym_c_name(const std::string &symbol);  // "sym_batch"
// "batch", "64*batch", "batch*seq", "512" -> its size; throws std::runtime_error on anything else
int64_t parse_dim(const std::string &text);

// The bounds of the symbols of the program being compiled (its front end declares them).
void sym_declare(const std::string &name, SymBounds b);
const SymBounds &sym_bounds(const std::string &name);  // throws std::runtime_error for an undeclared symbol
int64_t dim_max(int64_t d);  // the size with every symbol at its maximum (plain sizes as they are)

}  // namespace ckc
