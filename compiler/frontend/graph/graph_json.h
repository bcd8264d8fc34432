// graph_json.h — the exported-graph front end: graph.json (written by
// ckc.export (python/ckc/export.py), schema in docs/graph-schema.md) -> Program.
//
// The file is validated completely before anything is built: schema and
// version, unique names, known ops and arities, inputs that exist, no
// cycles, attribute types, and every declared output shape / dtype against
// what ckc's shape rules compute. Errors name the file and the node, tensor
// or key. The whole graph goes into the header; the pass fold_layers
// (passes/fold_layers.cpp, last in the pipeline) moves repeated submodules
// into the block.
#pragma once

#include <string>

#include "ir/graph.h"

namespace ckc {

// True when the file is a JSON object with "schema": "ckc.graph".
bool is_graph_json(const std::string &path);

Program build_from_graph_json(const std::string &path);

}  // namespace ckc
