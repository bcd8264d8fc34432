// standalone.h — the runtime sources a model needs, and `ckc compile --standalone`'s one-file amalgamation.
// (Here in tools, above codegen: it packages what codegen wrote, and codegen itself parses no C.)
//
// The runtime is written as separate C99 files (runtime/{io,kernels,text,gcu}/*.c) with public headers in
// runtime/include and private ones beside their sources. A model's manifest (model.c.kernels) lists the
// sources it calls; `--standalone` instead pastes exactly those sources, their headers in include order, and
// the generated model into one file that builds with `cc model.c -lm` (no OpenBLAS: blas.c's own GEMM; OpenMP
// only with -fopenmp), as SQLite's amalgamation does. Nothing is copied by hand: the file is made from the
// same sources every time.
#pragma once

#include <set>
#include <string>
#include <vector>


namespace ckc {

// `files` (paths relative to runtime/, e.g. "kernels/linear.c") plus every source whose private header one
// of them includes (kernels/linear.c includes "fgemm.h", so kernels/fgemm.c is needed), to a fixed point.
std::set<std::string> runtime_closure(const std::string &runtime_dir, std::set<std::string> files);

// One C file: `model_source` (a generated model.c: its leading comment stays first) with the runtime sources
// `files` (relative to runtime_dir) and the headers they and the model include inlined, each under a banner
// naming it. Throws Error(IO) for an unreadable source and internal_error for an include it cannot resolve.
std::string amalgamate(const std::string &runtime_dir, const std::set<std::string> &files,
                       const std::string &model_source);

}  // namespace ckc
