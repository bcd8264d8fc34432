// template.h — fills the {{NAME}} slots of a templates/*.in file.
#pragma once

#include <map>
#include <string>

namespace ckc {

// Every slot in `text` must have a value and every value must be used;
// otherwise Error(Internal) names the slot.
std::string fill_template(const std::string &text, const std::map<std::string, std::string> &values,
                          const std::string &template_name);

}  // namespace ckc
