// symbolic.h — symbolic sizes: dimensions known only when the generated code runs (issue #30).
//
// A Shape entry is an int64: >= 0 a size, kTokens (-1) the LLM sections' token count T, and an entry at or
// below kSymBase a *symbolic size*: a polynomial in named symbols ("batch", "seq") with integer coefficients,
// c0 + c1 * s1^p1 * s2^p2 + ... (most are one product, "64*batch*seq"; a cat of a column to a row of seq gives
// "seq+1"), interned in a process-wide table, so equal polynomials are equal integers and the shape rules that
// only copy and compare dimensions work unchanged. Rules that compute a dimension use dim_mul / dim_div /
// dim_add / dim_sub.
//
// A symbol is free (each call binds it from an input's size) or derived: floor(E / k) of a polynomial E in
// symbols declared before it (x[:, ::2] of a dynamic axis has (seq+1)//2 elements), which the generated code
// computes when it binds the free ones. A derived symbol's bounds follow from E's; rules that must relate it
// to E (a strided slice stays within its axis) use dim_nonneg, which knows k*q <= E < k*q + k.
//
// Each symbol has bounds [min, max] (graph.json "symbols"); the planner sizes every buffer at the maxima
// (dim_max: each term at the bound that makes it largest), so one plan holds for every binding. The generated
// C reads a symbol's value from a section local sym_<name> (dim_c), which the section sets from the handle,
// where ck_graph_run_shaped bound it. A graph's inputs and outputs have constant sizes, single symbols or
// products; sums live between them.
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

struct SymProduct {  // one term: coef * s1^p1 * s2^p2 ... (coef != 0; powers empty: the constant term)
    int64_t coef = 1;
    std::map<std::string, int> powers;  // symbol -> exponent (>= 1)
};

struct SymBounds {
    int64_t min = 1, max = 1;
};

bool is_sym(int64_t d);                            // an interned symbolic size
int64_t sym_dim(const std::string &name);          // the size that is symbol `name`
int64_t sym_make(const SymProduct &p);             // its interned code, or the plain size when it has no symbol
// The sum of terms (like terms combined): its code, or the plain size when no symbol is left
int64_t sym_make_sum(const std::vector<SymProduct> &terms);
bool sym_is_product(int64_t d);                    // a symbolic size of one term (no constant added)
const SymProduct &sym_product(int64_t d);          // of a one-term symbolic size (an internal error for anything else)
const std::vector<SymProduct> &sym_terms(int64_t d);  // of a symbolic size: its terms, the constant one first
std::vector<std::string> dim_symbols(int64_t d);   // the symbols it names
// d = a * sym + b with a >= 1 and one symbol to the first power (an input's size: "seq", "2*half", "half+1")
bool dim_linear(int64_t d, std::string &sym, int64_t &a, int64_t &b);
int64_t dim_mul(int64_t a, int64_t b);             // sizes or symbolic sizes (not T)
bool dim_div(int64_t a, int64_t b, int64_t &q);    // a / b when exact term by term; false otherwise
int64_t dim_add(int64_t a, int64_t b);             // a + b (not T)
int64_t dim_sub(int64_t a, int64_t b);             // a - b (not T): its value is the caller's to check
std::string dim_str(int64_t d);                    // "64*batch", "seq+1", "512"
std::string dim_c(int64_t d);                      // "(int64_t)64 * sym_batch", "(sym_seq + 1)": the C that computes it
std::vector<std::string> dim_reads(int64_t d);     // the section locals it reads: {"sym_batch"}
std::string sym_c_name(const std::string &symbol);  // "sym_batch"
// "batch", "64*batch", "batch*seq", "seq+1", "2*seq-1", "512" -> its size; throws std::runtime_error on
// anything else
int64_t parse_dim(const std::string &text);

// The bounds of the symbols of the program being compiled (its front end declares them).
void sym_declare(const std::string &name, SymBounds b);
const SymBounds &sym_bounds(const std::string &name);  // throws std::runtime_error for an undeclared symbol
// [lo, hi] bounding its values within the symbols' bounds (each term at its smallest / largest; a plain size:
// itself); false when that overflows int64 (a file's "batch*batch*batch" at 2^32 each)
bool dim_range(int64_t d, int64_t &lo, int64_t &hi);
// d >= 0 for every binding: dim_range's lo, after each derived symbol q = floor(E / k) that d holds as a term
// of its own (c*q) is replaced by the bound of E that keeps the claim sound (q <= E/k where c < 0,
// q >= (E-k+1)/k where c > 0); false when that cannot show it (it may still hold)
bool dim_nonneg(int64_t d);

struct SymDerivation {
    int64_t of = 0;  // E: a size in symbols declared before
    int64_t div = 2;  // k >= 2
    int64_t order = 0;  // declared after every derived symbol of a smaller order (dim_nonneg replaces the last first)
};
// Declares `name` = floor(of / div); its bounds are of's divided. Throws std::runtime_error when `of` may be
// negative within its symbols' bounds, names an undeclared symbol, or div < 2.
void sym_declare_derived(const std::string &name, int64_t of, int64_t div);
const SymDerivation *sym_derivation(const std::string &name);  // nullptr: a free symbol
std::string sym_rule(const std::string &name);  // "(seq+1)//2"; "" for a free symbol
std::string sym_rule_c(const std::string &name);  // the C that computes it from the sym_* locals

int64_t dim_max(int64_t d);  // dim_range's hi (an internal error on overflow: sizes the front ends checked)
int64_t dim_min(int64_t d);  // dim_range's lo

}  // namespace ckc
