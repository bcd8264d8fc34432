#include "codegen/template.h"

#include <set>

#include "support/error.h"

namespace ckc {

std::string fill_template(const std::string &text, const std::map<std::string, std::string> &values,
                          const std::string &template_name)
{
    std::string out;
    std::set<std::string> used;
    size_t pos = 0;
    for (;;) {
        size_t open = text.find("{{", pos);
        if (open == std::string::npos) break;
        size_t close = text.find("}}", open);
        if (close == std::string::npos) internal_error(template_name + ": unterminated {{ slot");
        std::string key = text.substr(open + 2, close - open - 2);
        auto it = values.find(key);
        if (it == values.end()) internal_error(template_name + ": no value for slot {{" + key + "}}");
        out.append(text, pos, open - pos);
        std::string v = it->second;
        // a slot alone on its line takes the value's own line structure
        if (!v.empty() && v.back() == '\n' && close + 2 < text.size() && text[close + 2] == '\n') v.pop_back();
        out += v;
        used.insert(key);
        pos = close + 2;
    }
    out.append(text, pos, std::string::npos);
    for (const auto &[k, v] : values)
        if (!used.count(k)) internal_error(template_name + ": slot {{" + k + "}} is not in the template");
    return out;
}

}  // namespace ckc
