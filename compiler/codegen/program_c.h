// program_c.h — the parts of a generated model.c every front end shares: the weight structs and load tables,
// the activation plan, and one C function per section (pointer locals for the tensors, then one kernel call
// per node under a comment naming its source). What differs between a language model (ck_model) and an
// exported graph (ck_graph) — the handle, the function's parameters, where inputs, outputs and the carry live
// — is a Target; so is what a device changes (--target gcu: every node's calls in a kernel launched through
// gcu.h, which reads its arguments from a frame). The backward of a training build (backward_c.cpp) declares
// its locals and prints its calls through the same SectionLocals and render_call.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "codegen/cwriter.h"
#include "codegen/kernel_call.h"
#include "ir/graph.h"
#include "planner/planner.h"

namespace ckc {

// A parameter of a section function.
struct CParam {
    std::string type, name;  // "ck_model *", "m"
};

class Target {
public:
    virtual ~Target() = default;
    virtual std::string function_name(Section section) const = 0;    // "ck_block", "ckg_block"
    virtual std::vector<CParam> params(Section section) const = 0;   // ck_model *m, int layer, int T, int pos0
    virtual CExpr arena(const std::string &offset, bool per_token) const = 0;  // a byte pointer
    virtual CExpr carry(Section section) const = 0;                  // the residual stream
    virtual CExpr input(const Tensor &t) const = 0;                  // a caller input
    virtual CExpr output(const Tensor &t) const = 0;                 // a caller output buffer
    virtual CExpr weights(Section section) const = 0;                // the weights struct's field prefix: "w->", "m->w."
    // The block's local `w` (its layer's weights) with what it reads.
    virtual CExpr layer_weights() const = 0;                         // "&m->w.layers[layer]"
    virtual std::string weights_type() const = 0;                    // "ck_layer_weights"
    virtual RopeRef rope_tables(const Node &rope) = 0;               // "m->rope_cos[0]", "m->rope_sin[0]"
    virtual std::string tracer() const = 0;                          // the handle's ck_tracer: "m->trace"
    // The value of the program's k-th symbolic size (Program::symbols) where the section runs: "g->sym[0]".
    virtual CExpr symbol(size_t k) const;

    // ---- device targets (--target gcu): every node's calls become a kernel `static void <fn>_k<i>(void *frame)`
    // launched on the device stream through gcu.h; the section function only fills the frame (its pointer locals
    // and the parameters named here) and launches.
    virtual bool device() const { return false; }
    virtual std::vector<std::string> frame_params(Section) const { return {}; }  // {"layer"}
    virtual std::string stream() const { return ""; }                             // "g->stream"
    virtual std::string device_status() const { return ""; }                      // "g->dev_status"
    // The C expression of an inline (non-float) constant array `array` holding tensor t.
    virtual std::string inline_const(const Tensor &, const std::string &array) const { return array; }
    // Run-time checks in device code cannot return an error: they store their number (1-based) in the
    // frame's status word, which the run reads back; the table of codes and messages is the target's.
    int device_check(const std::string &code, const std::string &message)
    {
        device_checks.push_back({code, message});
        return static_cast<int>(device_checks.size());
    }
    std::vector<std::pair<std::string, std::string>> device_checks;
};

std::string c_type(DType t);  // float, int64_t, int32_t, uint8_t
std::string c_shape(const Shape &s);  // "{2, 4, 16}" for a static int64_t array initializer ("{1}" for a scalar)

struct WeightField {
    std::string field;
    const Tensor *t;
    bool matrix = false;  // a ck_qmat in a stored format (ModelInfo::stored_weights), else const float *
    int64_t experts = 0;  // > 0: a mixture's [experts, N, K] matrices, `const ck_qmat *` (one per expert)
    int format = -2;      // the spec's format: CK_WEIGHT_FLOAT, CK_WEIGHT_AS_STORED or a ck_qtype
    int kinds = 1;        // a layer weight: the blocks that read it, bit k for layer kind k (Program::layer_kind)
};

// The weights a Program reads, as struct fields: global (header, footer) and
// per layer (block, and block2: one struct for both kinds of layer, each field
// loaded for the layers whose kind reads it), one field per distinct checkpoint source. Constants that
// are not float32 (an exported graph's int64 ids, bool masks) are not loaded:
// they become inline arrays (`inline_consts`, C names CK_CONST_<field>).
struct WeightTable {
    std::vector<WeightField> global, layer, inline_consts;
    std::map<std::string, std::string> global_by_key, layer_by_key, inline_by_key;
    std::set<std::string> matrix_keys;  // sources kept as ck_qmat
    std::set<std::string> expert_keys;  // sources kept as one ck_qmat per expert (MOE_EXPERTS' matrices)
    std::vector<std::string> notes;     // per-tensor format fallbacks worth telling the user
    std::vector<int> layer_kind;        // Program::layer_kind: empty, every layer reads every layer field
    void collect(const Program &p);
    bool matrix(const Tensor &t) const;
    bool experts(const Tensor &t) const;
    // the C expression reading weight `t` in `section` (prefix: the target's weights())
    std::string expr(Section section, const Tensor &t, const std::string &prefix) const;
    std::string field(Section section, const Tensor &t) const;
};

// The locals of one generated function over a section: a pointer local per tensor (its arena slot, a view into
// another tensor, a caller buffer), declared on first use or all up front, and the values the function reads
// from its handle once (the KV cache's pointers, RoPE tables; on a device, every weight). Each local records
// what its expression reads, so the function knows which of its parameters it uses. The forward's section
// functions and the backward's (which declares the forward values it reads, and the gradients) share it.
class SectionLocals {
public:
    struct Local {
        std::string type, name, expr, note;
        std::vector<std::string> reads;
        bool host_only = false;  // the host's alone (the block's `w`): not in a device kernel's frame
        bool lazy = false;       // declared only when something reads it (a symbolic size's value, a view)
        int group = 0;           // declarations print host-only ones first, then by group (values 0, gradients 1)
    };
    SectionLocals(const Program &p, Section sec, const SectionPlan &sp, const WeightTable &wt, Target &target,
                  std::set<std::string> reserved);

    const Program &p;
    Section sec;
    const Graph &g;
    const SectionPlan &sp;
    const WeightTable &wt;
    Target &target;

    CArg tensor(const std::string &t);          // a tensor's pointer (declaring its local when needed)
    int64_t ld(const std::string &t) const;     // its row stride in elements
    std::string ld_name(const std::string &t) const;  // the named size of that stride (its root's width), or ""
    std::string declare(const std::string &t);  // the local of tensor t
    // a local for `expr`, declared once (the same expression gives the same local)
    std::string value(const std::string &type, const std::string &hint, const std::string &expr, const std::string &note,
                      std::vector<std::string> reads);
    std::string take_name(const std::string &hint);  // a fresh C name
    void add(Local l);                               // a local named by the caller (take_name)

    const std::vector<Local> &locals() const { return locals_; }
    std::vector<std::string> reads() const;  // what every local reads
    // The declarations, comments aligned: every local but the lazy ones nothing in `used` reads; those only
    // `traced` reads (a trace hook's arguments) in a block compiled with -DCK_TRACE alone.
    void write(CWriter &w, const std::set<std::string> &used, const std::set<std::string> &traced) const;
    bool lazy_views = false;  // views' locals are lazy (the forward sections, whose every read is recorded)

private:
    CExpr root_expr(const std::string &root, const std::string &type);
    std::set<std::string> used_names_;
    std::map<std::string, std::string> tensor_local_, expr_local_;
    std::vector<Local> locals_;
};

// typedefs of the weight structs + CK_GLOBAL_WEIGHTS / CK_LAYER_WEIGHTS tables.
std::string weights_c(const WeightTable &wt, const std::string &prefix);
// static const arrays holding the inline constants (values from p.constants).
std::string inline_constants_c(const WeightTable &wt, const Program &p);
// CK_ACT_PER_TOKEN, CK_ACT_FIXED and one #define per arena allocation.
std::string plan_c(const Program &p, const Plan &plan);
// The widest K of a GEMM (MATMUL / MATMUL_ADD) in any section: sizes the kernels' workspace (CK_MAX_K)
int64_t widest_gemm_k(const Program &p);  // (the experts' GEMMs included)
// The widest K of a mixture's experts: they multiply through ck_linear_q in every format (f32 too).
int64_t widest_expert_k(const Program &p);
std::string offset_name(Section section, const std::string &root);  // CK_OFF_BLOCK_QKV
// static const CK_LAYER_<NAME>[] tables of per-layer attributes.
std::string layer_tables_c(const Program &p);
// `static int name(ck_model *m, int layer, <params>)`: layer `layer` through its block, `block` (the functions of
// Section::Block) or `block2` for the layers CK_LAYER_KIND marks 1; `args` passes the params on. "" for a block2
// that a program's second kind does not have (a function that returns CK_OK: e.g. no router to count).
std::string layer_dispatch_c(const Program &p, const std::string &name, const std::string &block,
                             const std::string &block2, const std::string &params, const std::string &args);
// One C function per section (and, for -DCK_TRACE, its table of traced nodes).
std::string section_c(const Program &p, Section section, const SectionPlan &sp, const WeightTable &wt, Target &target);
// The function around `body`: a comment, the signature, the block's weights local when read, the locals, (void)
// for each parameter nothing reads (`reads`: what the body reads besides the locals).
std::string function_c(const std::string &comment, const std::string &signature, const SectionLocals &locals,
                       const std::vector<CParam> &params, const std::vector<std::string> &reads, const std::string &body,
                       const std::set<std::string> &traced = {});
std::string signature_c(const std::string &name, const std::vector<CParam> &params);
// The runtime sources a Program needs (relative to runtime/): what every model
// uses, its ops' kernels, and `extra` (a target's or training's files).
std::set<std::string> kernel_files(const Program &p, const std::set<std::string> &extra);
// The frontmatter's build commands for a model.c named o.output_name: a shared library (from the manifest, or the
// one --standalone file) and, with `exe_define` (-DCK_MODEL_MAIN), `exe_what`: one comment line each, " * " first.
std::vector<std::string> build_lines(const CodegenOptions &o, const std::string &exe_define, const std::string &exe_what);
// The template's EMBEDDED slot: CK_EMBEDDED_BYTES 0, or o.embed_bytes as a 64-byte aligned const array
// CK_EMBEDDED_DATA named CK_EMBEDDED_NAME.
std::string embedded_weights_c(const CodegenOptions &o);

// The TARGET_INCLUDES, TARGET_FIELDS and TARGET_CODE slots of a model template: the parts of
// templates/targets/<target>_<kind>.c.in (filled with `slots`), after those of targets/gcu.c.in on a device
// (its handle type `handle`, its table of the checks `target` collected while emitting the sections).
void target_slots(std::map<std::string, std::string> &out, const std::string &templates_dir, const std::string &target_name,
                  const std::string &kind, const std::string &handle, const Target &target,
                  const std::map<std::string, std::string> &slots);

std::string comment_safe(const std::string &s);
std::string upper(std::string s);

}  // namespace ckc
