// emitters.h — each op's C: its emitter (the kernel calls it becomes, kernel_call.h) and the runtime sources
// those kernels live in.
#pragma once

#include <vector>

#include "codegen/emit.h"
#include "ir/ops.h"

namespace ckc {

struct Lowering {
    std::vector<KernelCall> (*emit)(EmitCtx &c) = nullptr;  // nullptr for fold-only ops (folded before codegen)
    std::vector<const char *> kernels;                        // runtime sources it calls, relative to runtime/ (those
                                                              // their private headers name come with them)
};

// The row of `op`; the first call checks that every op that runs has one (an internal error otherwise).
const Lowering &lowering(Op op);

}  // namespace ckc
