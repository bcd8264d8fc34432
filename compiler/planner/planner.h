// planner.h — activation memory planning, in three steps:
//
//   1. order      (order.cpp)     a topological execution order; memory-aware
//                                 by default (the seeds' v2: net-delta score,
//                                 lazy re-score) or plain FIFO.
//   2. liveness   (liveness.cpp)  which memory each tensor lives in (its
//                                 Region: a root tensor + column offset) and
//                                 when each root is born and dies. Views
//                                 (SLICE) and in-place reuse (an op writing
//                                 over an input that dies there) share their
//                                 input's root: one memory_root mechanism.
//   3. placement  (placement.cpp) arena offsets by first-fit in birth order
//                                 (or "naive": every root its own slot).
//
// Units: a tensor whose shape has the token dim T is planned in bytes per
// token; because every such tensor scales with T, the offsets hold for any T
// (offset * T). Tensors without T form a second, fixed-size class placed
// after the per-token region. Weights, inputs, outputs and the carry (the
// residual stream) are outside the arena; an output pinned to the carry is
// written there directly when that is safe, else copied at section end.
//
// Training will keep every layer's activations and add a gradient arena:
// Allocation::arena and PlanOptions::keep_all are where that plugs in.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"

namespace ckc {

// `bytes` rounded up to a multiple of `align`
constexpr int64_t align_up(int64_t bytes, int64_t align) { return (bytes + align - 1) / align * align; }

enum class OrderPolicy { MemoryAware, Fifo };
enum class PlacementPolicy { FirstFit, Naive };

// The algorithms by the names the command line uses (--order, --placement), with one line each.
template <class Policy>
struct NamedPolicy {
    const char *name;
    Policy policy;
    const char *doc;
};
const std::vector<NamedPolicy<OrderPolicy>> &order_policies();          // "memory" first: the default
const std::vector<NamedPolicy<PlacementPolicy>> &placement_policies();  // "first-fit" first: the default

struct PlanOptions {
    OrderPolicy order = OrderPolicy::MemoryAware;
    PlacementPolicy placement = PlacementPolicy::FirstFit;
    bool inplace = true;    // let outputs take over dying inputs' memory
    bool keep_all = false;  // nothing dies before the section ends (saved activations for training)
    int64_t align = 64;     // bytes (per token for the per-token class)
};

constexpr const char *kCarryRoot = "@carry";  // the root of every Storage::Carry tensor

// Where a tensor's bytes are: root's memory, `offset` elements in. A strided
// region is a column view of a 2-D root: columns offset.. of every row, with
// the root's row stride. Otherwise the tensor is contiguous from offset.
struct Region {
    std::string root;
    int64_t offset = 0;
    bool strided = false;
};

enum class ArenaKind { Activations, Gradients };

// One block of arena memory owned by a root tensor.
struct Allocation {
    std::string root;
    ArenaKind arena = ArenaKind::Activations;
    bool per_token = true;  // size/offset are bytes per token (times T at run time)
    int64_t size = 0;       // aligned
    int64_t offset = 0;
    int birth = 0, death = 0;  // execution steps, inclusive
};

struct ClassStats {
    int64_t arena = 0;        // planned arena size
    int64_t naive = 0;        // every intermediate in its own buffer
    int64_t lower_bound = 0;  // max over steps of what is live (aligned)
};

struct SectionPlan {
    std::vector<std::string> order;             // node names in execution order
    std::map<std::string, Region> region;       // every tensor of the section
    std::map<std::string, Allocation> alloc;    // arena roots, and "<node>#scratch" workspaces
    std::set<std::string> views;                // nodes whose output aliases their input: no kernel runs
    std::map<std::string, std::string> scratch; // node -> its scratch allocation
    std::map<std::string, int> last_use;        // step of the last read (n steps = kept to the end)
    std::vector<std::pair<std::string, std::string>> copies;  // {tensor, pinned root}: memcpy at section end
    ClassStats per_token, fixed;
};

struct Plan {
    PlanOptions options;
    SectionPlan sections[kNumSections];  // header, block, block2, footer: use section()
    SectionPlan &section(Section s) { return sections[static_cast<size_t>(s)]; }
    const SectionPlan &section(Section s) const { return sections[static_cast<size_t>(s)]; }
    int64_t arena_per_token = 0, arena_fixed = 0;  // max over sections: the arena they share
};

// steps 1-3 for one graph
std::vector<std::string> order_nodes(const Graph &g, OrderPolicy policy);
void compute_liveness(const Graph &g, const std::vector<std::string> &order, const PlanOptions &o, SectionPlan &sp);
void place(SectionPlan &sp, const PlanOptions &o);

SectionPlan plan_section(const Graph &g, const PlanOptions &o);
Plan plan_program(const Program &p, const PlanOptions &o);

// Bytes of a tensor in its class (per token if it has the T dim).
int64_t tensor_bytes(const Tensor &t);
// The root a source tensor (no producer) lives in: itself, or kCarryRoot.
std::string source_root(const Tensor &t);

// "arena 1.2 KiB/token (naive 3.4 KiB/token, lower bound 1.1 KiB/token)" per section,
// with totals at `tokens` tokens.
void print_plan_report(const Program &p, const Plan &plan, int64_t tokens, std::ostream &os);

}  // namespace ckc
