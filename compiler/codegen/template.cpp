#include "codegen/template.h"

#include <set>

#include "support/error.h"
#include "support/util.h"

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

std::map<std::string, std::string> template_parts(const std::string &text, const std::string &template_name)
{
    std::map<std::string, std::string> parts;
    std::string *cur = nullptr;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(pos, end - pos);
        pos = end + 1;
        if (line.rfind("@@ ", 0) == 0) {
            std::string name = line.substr(3);
            if (name.empty() || parts.count(name)) internal_error(template_name + ": empty or repeated part '@@ " + name + "'");
            cur = &parts[name];
            continue;
        }
        if (cur) *cur += line + "\n";
    }
    return parts;
}

std::string read_template(const std::string &dir, const std::string &name)
{
    std::string path = dir + "/" + name;
    if (!is_file(path)) io_error("template " + path + " is missing (a broken ckc install? set CKC_HOME to a checkout)");
    return read_file(path);
}

}  // namespace ckc
