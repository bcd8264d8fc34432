// kernel_call.h — a kernel call as data: what an op's emitter returns (codegen/emitters.cpp) and what the
// backward's rows return (codegen/backward_c.cpp), and the one place that prints it (render_call).
//
// An argument knows what it is — a tensor's memory, a size and what it measures, a scalar, a C constant, a
// constant array — and which C names it reads (locals, the section function's parameters), so a target can
// print the call, build a device kernel's frame from the names, and tell which parameters a function leaves
// unused, without reading back code it printed. A size prints as the program's named constant for what it
// measures (CK_HEADS, CK_Q_DIM: ModelInfo::sizes, Tensor::dims), never a constant whose value merely
// matches; a bare number prints with a /*label=*/ naming the kernel's parameter.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codegen/cwriter.h"

namespace ckc {

// A C expression and the names (locals, parameters) it reads.
struct CExpr {
    std::string text;
    std::vector<std::string> reads;
};

// The cos and sin tables a ROPE node reads in this layer: one pair for every layer ("m->rope_cos[0]"), or
// the pair its layer's RoPE parameters chose (Gemma 3: "m->rope_cos[CK_ROPE_OF_LAYER0[layer]]").
struct RopeRef {
    CExpr cos, sin;
};

struct CArg {
    enum class Kind {
        Pointer,       // a tensor's memory (a local, a weight's field), or NULL
        Size,          // an integer size: a named constant, T, or a number
        Scalar,        // a number that is not a size (eps, scale, a flag)
        Enum,          // a C constant (CK_ACT_SILU, CK_BIN_SUB)
        Array,         // a constant array, declared `static const <elem> <label>[] = {items}` before the call
        PointerArray,  // an array of pointers, declared `<elem> const <label>[] = {items}` before the call
    };
    Kind kind = Kind::Scalar;
    std::string label;               // the kernel's parameter: "ldo", "heads", "scale"
    std::string text;                // the C it reads as: "q_rope", "CK_HEADS", "0.25f", "NULL", "(size_t)T * CK_DIM"
    std::vector<std::string> reads;  // the locals and parameters it reads
    bool named = true;               // the text says what it is; false: a bare literal, printed /*label=*/text
    std::string elem;                // Array, PointerArray: the element type ("int64_t", "const float *")
    std::vector<std::string> items;  // Array, PointerArray: the elements
};

struct KernelCall {
    std::string kernel;  // "ck_attention", "memcpy"
    std::vector<CArg> args;
    std::string note;    // a comment line above the call
    // a kernel that reports failure: the run fails with fail_code / fail_message when `<call> <fails_if>` holds
    std::string fails_if;  // "!= CK_OK", ">= 0"; "" for a call that cannot fail
    std::string fail_code, fail_message;

    std::vector<std::string> reads() const;  // every name the call's arguments read
};

// ---- argument constructors -------------------------------------------------------------------------------
CArg arg_pointer(const std::string &text, std::vector<std::string> reads);  // a local or field
CArg arg_null(const std::string &label);                                     // NULL, labelled
CArg arg_size(const std::string &label, int64_t value, const std::string &name = "");  // named if `name`
CArg arg_expr(const std::string &label, const std::string &text, std::vector<std::string> reads, bool named = true);
CArg arg_float(const std::string &label, double v);
CArg arg_double(const std::string &label, double v);
CArg arg_int(const std::string &label, int64_t v);
CArg arg_enum(const std::string &label, const std::string &constant);
CArg arg_array(const std::string &label, const std::string &elem, const std::vector<int64_t> &items);
CArg arg_array(const std::string &label, const std::string &elem, const std::vector<std::string> &items);
CArg arg_pointers(const std::string &label, const std::string &elem, const std::vector<CArg> &pointers);

// Prints `call` into w: its note, its arrays in a block of their own, the call (under `if (...)` with the
// statement `fail(code, message)` gives when it can fail).
void render_call(const KernelCall &call, CWriter &w,
                 const std::function<std::string(const std::string &code, const std::string &message)> &fail);

}  // namespace ckc
