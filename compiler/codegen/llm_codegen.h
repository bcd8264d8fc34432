// llm_codegen.h — Program + Plan -> model.c (templates/llm_model.c.in) and
// the list of runtime sources it needs (model.c.kernels).
#pragma once

#include "codegen/codegen.h"

namespace ckc {

CodegenResult generate_llm_c(const Program &p, const Plan &plan, const CodegenOptions &o);

}  // namespace ckc
