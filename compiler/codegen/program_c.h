// program_c.h — the parts of a generated model.c every front end shares:
// the weight structs and load tables, the activation plan, and one C function
// per section (pointer locals for every tensor, then one kernel call per node
// under a comment naming its source). What differs between a language model
// (ck_model) and an exported graph (ck_graph) — the handle, the function
// signature, where inputs, outputs and the carry live — is a Target.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/cwriter.h"
#include "ir/graph.h"
#include "planner/planner.h"

namespace ckc {

class Target {
public:
    virtual ~Target() = default;
    virtual std::string signature(Section section) const = 0;           // "static int ck_block(ck_model *m, int layer, ...)"
    virtual std::vector<std::string> maybe_unused() const = 0;      // parameters to (void) when unused
    virtual std::string arena(const std::string &offset, bool per_token) const = 0;  // a byte pointer expression
    virtual std::string carry() const = 0;                           // the residual stream buffer
    virtual std::string input(const Tensor &t) const = 0;            // a caller input
    virtual std::string output(const Tensor &t) const = 0;           // a caller output buffer
    virtual std::string weights(Section section) const = 0;              // "w->" in the block, "m->w." elsewhere
    virtual std::string block_preamble() const = 0;                  // first line of the block function
    virtual std::string rope_table(const Node &rope) = 0;            // C prefix of a RoPE table
    virtual std::string tracer() const = 0;                          // the handle's ck_tracer: "m->trace"

    // ---- device targets (--target gcu): every node's kernel code becomes a trampoline
    // `static void <fn>_k<i>(void *frame)` launched on the device stream through gcu.h; the section
    // function only fills the frame (its pointer locals and parameters) and launches.
    virtual bool device() const { return false; }
    virtual std::vector<std::string> frame_params(Section) const { return {}; }  // {"ck_graph *g", "int layer"}
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

struct WeightField {
    std::string field;
    const Tensor *t;
    bool matrix = false;  // a ck_qmat in a stored format (ModelInfo::stored_weights), else const float *
    int format = -2;      // the spec's format: CK_WEIGHT_FLOAT, CK_WEIGHT_AS_STORED or a ck_qtype
};

// The weights a Program reads, as struct fields: global (header, footer) and
// per layer (block), one field per distinct checkpoint source. Constants that
// are not float32 (an exported graph's int64 ids, bool masks) are not loaded:
// they become inline arrays (`inline_consts`, C names CK_CONST_<field>).
struct WeightTable {
    std::vector<WeightField> global, layer, inline_consts;
    std::map<std::string, std::string> global_by_key, layer_by_key, inline_by_key;
    std::set<std::string> matrix_keys;  // sources kept as ck_qmat
    std::vector<std::string> notes;     // per-tensor format fallbacks worth telling the user
    void collect(const Program &p);
    bool matrix(const Tensor &t) const;
    // the C expression reading weight `t` in `section` (prefix: the target's weights())
    std::string expr(Section section, const Tensor &t, const std::string &prefix) const;
    std::string field(Section section, const Tensor &t) const;
};

// typedefs of the weight structs + CK_GLOBAL_WEIGHTS / CK_LAYER_WEIGHTS tables.
std::string weights_c(const WeightTable &wt, const std::string &prefix);
// static const arrays holding the inline constants (values from p.constants).
std::string inline_constants_c(const WeightTable &wt, const Program &p);
// CK_ACT_PER_TOKEN, CK_ACT_FIXED and one #define per arena allocation.
std::string plan_c(const Program &p, const Plan &plan);
// static const CK_LAYER_<NAME>[] tables of per-layer attributes.
std::string layer_tables_c(const Program &p);
// One C function per section (and, for -DCK_TRACE, its table of traced nodes).
std::string section_c(const Program &p, Section section, const SectionPlan &sp, const WeightTable &wt, Target &target);
// The runtime sources a Program needs (relative to runtime/): what every model
// uses, its ops' kernels, and `extra` (a target's or training's files).
std::set<std::string> kernel_files(const Program &p, const std::set<std::string> &extra);

// The TARGET_INCLUDES, TARGET_FIELDS and TARGET_CODE slots of a model template: the parts of
// templates/targets/<target>_<kind>.c.in (filled with `slots`), after those of targets/gcu.c.in on a device
// (its handle type `handle`, its table of the checks `target` collected while emitting the sections).
void target_slots(std::map<std::string, std::string> &out, const std::string &templates_dir, const std::string &target_name,
                  const std::string &kind, const std::string &handle, const Target &target,
                  const std::map<std::string, std::string> &slots);

std::string comment_safe(const std::string &s);
std::string upper(std::string s);

}  // namespace ckc
