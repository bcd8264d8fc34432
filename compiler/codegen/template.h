// template.h — fills the {{NAME}} slots of a templates/*.in file.
#pragma once

#include <map>
#include <string>

namespace ckc {

// Every slot in `text` must have a value and every value must be used;
// otherwise Error(Internal) names the slot.
std::string fill_template(const std::string &text, const std::map<std::string, std::string> &values,
                          const std::string &template_name);

// The named parts of a target file (templates/targets/*.c.in): a line "@@ NAME" starts part NAME, which runs to
// the next such line. Text before the first part documents the file and is not emitted.
std::map<std::string, std::string> template_parts(const std::string &text, const std::string &template_name);

// templates/<name>, read from the folder `dir`; Error(Io) if it is missing.
std::string read_template(const std::string &dir, const std::string &name);

}  // namespace ckc
