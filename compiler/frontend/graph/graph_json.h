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

#include <map>

#include "ir/graph.h"

namespace ckc {

// True when the file is a JSON object with "schema": "ckc.graph".
bool is_graph_json(const std::string &path);

// max_sizes: symbol -> a lower upper bound than the document's (ckc compile --max NAME=N): the memory plan and
// every buffer are sized for it, and a call beyond it is refused. An unknown symbol, or a bound above the
// document's or below the symbol's least size, is a usage error naming it.
Program build_from_graph_json(const std::string &path, const std::map<std::string, int64_t> &max_sizes = {});

}  // namespace ckc
