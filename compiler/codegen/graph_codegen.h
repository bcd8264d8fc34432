// graph_codegen.h — an exported graph's Program + Plan -> model.c
// (templates/graph_model.c.in, the ck_graph ABI of runtime/include/ck_graph.h),
// the runtime sources it needs, and the bytes of model.weights.safetensors.
#pragma once

#include <string>

#include "codegen/codegen.h"

namespace ckc {

struct GraphCodegenResult : CodegenResult {
    std::string weights;       // model.weights.safetensors contents ("" when the graph has no float constants)
    std::string weights_name;  // its file name, next to model.c
};

// Non-const: inline constants are read from the export's weights file on demand.
GraphCodegenResult generate_graph_c(Program &p, const Plan &plan, const CodegenOptions &o);

// "out/model.c" -> "out/model.weights.safetensors"
std::string graph_weights_path(const std::string &c_path);

}  // namespace ckc
