// emit.h — what an op's emitter (codegen/emitters.cpp) sees while the code generator walks a section: the
// node, and the arguments of its kernel calls (kernel_call.h) — each tensor's memory, row stride and sizes,
// the node's attributes — as the section writer (program_c.cpp) and its Target make them.
//
// Emitters never compute an address or print C: they return calls, and the Target renders them. LLM section
// functions take (handle, layer, T, pos0), graph sections (handle, layer); an emitter names T and pos0
// through arg_expr with what it reads, so the writer knows which parameters the section uses.
#pragma once

#include <string>

#include "codegen/kernel_call.h"
#include "ir/graph.h"

namespace ckc {

class EmitCtx {
public:
    EmitCtx(const Graph &g, const Node &n) : g(g), n(n) {}
    virtual ~EmitCtx() = default;

    const Graph &g;
    const Node &n;

    // ---- the memory of tensors
    virtual CArg ptr(const std::string &tensor) const = 0;        // its pointer (a local, a weight's field)
    virtual int64_t ld_value(const std::string &tensor) const = 0;  // row stride in elements (a column view's is its root's width)
    virtual std::string ld_name(const std::string &tensor) const = 0;  // the named size of that stride, or ""
    virtual bool aliased() const = 0;  // the planner made the output a view: no kernel to run
    // a weight matrix kept in a stored format: ptr() is a `const ck_qmat *` (ck_quant.h), read by the q kernels
    virtual bool stored_matrix(const std::string &) const { return false; }
    virtual const ModelInfo &info() const = 0;

    // ---- values the section function computes once (read from the handle: the KV cache's pointers, the
    // RoPE tables): a local named after `hint` (the same expr gives the same local), passed to device kernels
    // in their frame. `reads`: the names expr reads.
    virtual std::string local(const std::string &type, const std::string &hint, const std::string &expr,
                              const std::string &note, std::vector<std::string> reads) = 0;
    // `expr` itself on the host; on a device, a local() (kernels cannot read the handle or host tables)
    virtual CArg device_value(const std::string &type, const std::string &hint, const std::string &expr,
                              const std::string &note, std::vector<std::string> reads) = 0;
    virtual RopeRef rope_tables(const Node &rope) = 0;  // its cos/sin tables in this layer: "m->rope_cos[0]"
    // A numeric attribute of the node: a literal, or CK_LAYER_<NAME>[layer] when it is a per-layer table.
    virtual CArg param(const std::string &label, const std::string &key, double dflt, bool is_int) = 0;
    virtual CArg scratch() = 0;  // the node's scratch buffer (float *)

    // ---- arguments from the above
    CArg in(size_t i) const { return ptr(n.inputs.at(i)); }
    CArg out() const { return ptr(n.output); }
    CArg ld(const std::string &label, const std::string &tensor) const;
    CArg ld_in(size_t i) const { return ld("ld", n.inputs.at(i)); }
    CArg ld_out() const { return ld("ldo", n.output); }
    // a dim of a tensor (axis -1: the last), named when Tensor::dims names it
    CArg dim(const std::string &label, const std::string &tensor, int axis = -1) const;
    CArg rows(const std::string &label, const std::string &tensor) const;   // "T", or the rows of a static shape
    CArg numel(const std::string &label, const std::string &tensor) const;  // "(size_t)T * CK_DIM", "4096"
    // a size attribute of the node, named when the program names it (heads = 8: CK_HEADS); `also`: another
    // attribute whose sizes measure the same kind of thing (the heads of a key RoPE are the KV heads)
    CArg attr_size(const std::string &label, const std::string &key, const std::string &also = "") const;
    CArg tokens() const { return arg_expr("T", "T", {"T"}); }               // the LLM sections' token count
    CArg pos0() const { return arg_expr("pos0", "pos0", {"pos0"}); }       // the LLM sections' first position
    // the LLM sections' token positions when a call carries several sequences (ck_kernels.h ck_seqmap; NULL: one)
    CArg seqmap()
    {
        return device_value("const ck_seqmap *", "seqmap", "m->seqmap", "where each token sits (NULL: one sequence)",
                            {"m"});
    }
    bool strided(const std::string &tensor) const;  // its rows are further apart than its width

    const Tensor &tin(size_t i) const { return g.tensor(n.inputs.at(i)); }
    const Tensor &tout() const { return g.tensor(n.output); }
};

// The dims a ROPE node rotates in this layer: its rot_dim, or per layer where some layers have no RoPE
// (SmolLM3's NoPE layers: attribute "rotated" = rot_dim or 0 by layer). Ctx: an op's or a backward's context.
template <class Ctx>
CArg rope_rotated(Ctx &c, const Node &rope)
{
    return rope.has("rotated") ? c.param("rot_dim", "rotated", 0, true) : c.attr_size("rot_dim", "rot_dim");
}

// CLAMP's bounds as ck_clamp and ck_clamp_backward take them: lo, hi and which of them apply (bit 0, bit 1)
inline std::vector<CArg> clamp_bounds(const Node &n)
{
    return {arg_float("lo", n.f("min", 0.0)), arg_float("hi", n.f("max", 0.0)),
            arg_int("bounds", (n.has("min") ? 1 : 0) | (n.has("max") ? 2 : 0))};
}

}  // namespace ckc
