// printer.h — the IR as text (one line per node) and as the JSON map file.
#pragma once

#include <iosfwd>

#include <nlohmann/json.hpp>

#include "ir/graph.h"

namespace ckc {

// "section layer op inputs -> output attrs", one line per node.
void print_program(const Program &p, std::ostream &os);
nlohmann::json program_to_json(const Program &p);
nlohmann::json shape_to_json(const Shape &s);
std::string attr_str(const Attr &a);

}  // namespace ckc
