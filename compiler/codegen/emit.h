// emit.h — what an op's emitter (codegen/emitters.cpp) sees while the
// code generator walks a section: the node, the writer, and how to name the
// memory of each tensor (a C pointer expression and its row stride).
//
// LLM section functions have the signature
//   static int ck_<section>(ck_model *m, int layer, int T, int pos0)
// and emitters for LLM ops may use those four names. Graph section functions
// are  static int ckg_<section>(ck_graph *g, int layer).  Both may
// `return ck_fail(CK_E..., "...")` on a run-time error.
#pragma once

#include <string>

#include "codegen/cwriter.h"
#include "ir/graph.h"

namespace ckc {

class EmitCtx {
public:
    EmitCtx(CWriter &w, const Graph &g, const Node &n) : w(w), g(g), n(n) {}
    virtual ~EmitCtx() = default;

    CWriter &w;
    const Graph &g;
    const Node &n;

    virtual std::string ptr(const std::string &tensor) const = 0;    // typed C pointer expression
    virtual std::string ld(const std::string &tensor) const = 0;     // row stride in elements
    virtual std::string name(const std::string &tensor) const = 0;   // the C local naming it
    virtual std::string rope_table(const Node &rope) = 0;            // C prefix of the cos/sin tables
    // A value the section reads from its handle (`m->k_cache + ...`), named once per section: a local of the
    // section function (the same expression gives the same name), passed to device kernels in their frame.
    virtual std::string local(const std::string &type, const std::string &hint, const std::string &expr,
                              const std::string &note) = 0;
    // `expr` itself on the host; on a device, a local() (kernels cannot read the handle or host tables).
    virtual std::string device_value(const std::string &type, const std::string &hint, const std::string &expr,
                                     const std::string &note) = 0;
    // A numeric attribute of the current node as a C expression: a literal, or
    // CK_LAYER_<NAME>[layer] when it is a per-layer table ("@name").
    virtual std::string param(const std::string &key, double dflt, bool is_int) const = 0;
    virtual std::string scratch() const = 0;  // the node's scratch buffer (float *)
    // A size as C: the program's name for it (ModelInfo::sizes: "CK_FFN") or the number.
    virtual std::string dim(int64_t v) const { return std::to_string(v); }
    virtual bool aliased() const = 0;         // the planner made the output a view: no kernel to run
    // a weight matrix kept in a stored format: ptr() is a `const ck_qmat *` (ck_quant.h), read by the q kernels
    virtual bool stored_matrix(const std::string &) const { return false; }
    // The statement that reports a failed run-time check: `return ck_fail(code, "message");` on the host, a
    // status store on a device (program_c.h).
    virtual std::string fail(const std::string &code, const std::string &message) const;

    // conveniences over the current node
    std::string in(size_t i) const { return ptr(n.inputs.at(i)); }
    std::string ld_in(size_t i) const { return ld(n.inputs.at(i)); }
    std::string out() const { return ptr(n.output); }
    std::string ld_out() const { return ld(n.output); }
    // leading (row) count of a tensor: "T" for token tensors, else a number
    std::string rows(const std::string &tensor) const;
    // element count as a C expression: "(size_t)T * 64" or "4096"
    std::string numel(const std::string &tensor) const;
    const Tensor &tin(size_t i) const { return g.tensor(n.inputs.at(i)); }
    const Tensor &tout() const { return g.tensor(n.output); }
};

// "{2, 4, 16}" for a static int64_t array initializer.
std::string c_shape(const Shape &s);

}  // namespace ckc
