// parser.h — reads the IR text form (ir/printer.h, node_line) back into a
// Graph, so that a pass test is a graph in and the graph expected out:
//
//   Graph g = parse_graph(R"(
//       RESHAPE x[2, 3, 4]:input -> a[6, 4]  shape=[6, 4]
//       RELU a[6, 4] -> y[6, 4]:output
//   )");
//   eliminate_reshapes(g);
//   CHECK(graph_text(g) == ...);
//
// A tensor no node makes must say where it lives (:input, :weight or :carry)
// the first time it is read; a weight's checkpoint name is the tensor's name.
// A node's output shape and dtype are inferred and must match what the line
// declares; :output or :carry on an output marks it a section output. Blank
// lines and lines starting with ';' are skipped. Errors are Error(Input)
// "path:line:col: message" with the line and a caret.
#pragma once

#include <string>

#include "ir/graph.h"

namespace ckc {

Graph parse_graph(const std::string &text, const std::string &path = "<ir>");

}  // namespace ckc
