// backward_c.h — the training half of a language model's model.c (ckc compile --train).
//
// The forward runs unchanged, on a plan that keeps every activation to the section's end
// (PlanOptions::keep_all, no in-place reuse), and the generated training loop points the arena at one
// saved slice per section instance (header, each layer, footer) before running it. The backward is one
// C function per section, its forward nodes in reverse, each through its row in the backward table
// (backward_c.cpp: one row per op, the kernels in runtime/kernels/train.c). Each gradient lives in a
// gradient arena planned like the forward: a gradient root is born at the first step that writes it and
// dies at the last that reads it, and first-fit places it; a column view (SLICE) has its gradient as the
// same column view of its input's. The lifetimes come from a dry run of the emitters that records what
// each step reads and writes, so the plan and the code cannot disagree.
#pragma once

#include <set>
#include <string>

#include "codegen/program_c.h"
#include "planner/planner.h"

namespace ckc {

struct GradientPlanStats {
    int64_t per_token[kNumSections] = {};    // gradient arena bytes per token by section
    int64_t naive[kNumSections] = {};        // every gradient root its own buffer
    int64_t lower_bound[kNumSections] = {};  // max over steps of what is live
    int64_t max_per_token = 0;
};

struct TrainingC {
    std::string config;     // #defines the model struct reads: CK_MOE_AUX (mixture layers with a load-balancing loss)
    std::string plan;       // #defines of the gradient arena
    std::string functions;  // ck_<section>_backward, ck_layer_backward; ck_layer_moe_aux when CK_MOE_AUX
    GradientPlanStats stats;
};

// forward: the forward's target (its RoPE tables, already registered by the forward's emission; its weights).
TrainingC training_c(const Program &p, const Plan &plan, const WeightTable &wt, Target &forward);

// Saved activations and gradient arena per token, for `ckc compile --train --report`.
void print_training_report(const Program &p, const Plan &plan, const GradientPlanStats &g, int64_t tokens,
                           std::ostream &os);

}  // namespace ckc
