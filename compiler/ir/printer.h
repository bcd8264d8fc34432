// printer.h — the IR as text (one line per node) and as the JSON map file.
#pragma once

#include <iosfwd>

#include <nlohmann/json.hpp>

#include "ir/graph.h"

namespace ckc {

// The text form of the IR (ir/parser.h reads it back):
//
//   MATMUL x[T, 64]:input, w[128, 64]:weight -> y[T, 128]  transpose_b=1
//   ADD y[T, 128], b[128]:weight -> z[T, 128]:output
//
// one node per line: op, inputs, output, attributes. A tensor is name[shape], then :dtype unless f32,
// then :storage unless it is an activation. A node named other than its output starts "[name] ".
// Attributes: integers, floats (always with '.', 'e', inf or nan), "strings", [lists], @per_layer_table.
std::string node_line(const Graph &g, const Node &n);
std::string graph_text(const Graph &g);  // node_line of every node, one per line
// Every section as "section layer <node_line>", with the summary, carry and per-layer tables as ; comments.
void print_program(const Program &p, std::ostream &os);
nlohmann::json program_to_json(const Program &p);
nlohmann::json shape_to_json(const Shape &s);
std::string attr_str(const Attr &a);
std::string tensor_ref(const Graph &g, const std::string &name);  // "x[T, 64]:input"

}  // namespace ckc
