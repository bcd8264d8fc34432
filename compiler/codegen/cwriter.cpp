#include "codegen/cwriter.h"

#include <cmath>

#include <fmt/format.h>

namespace ckc {

void CWriter::line(const std::string &s)
{
    if (!s.empty()) out_.append(static_cast<size_t>(depth_) * 4, ' ');
    out_ += s;
    out_ += '\n';
}

void CWriter::lines(const std::string &text)
{
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        if (!(end == text.size() && start == end)) line(text.substr(start, end - start));
        start = end + 1;
    }
}

void CWriter::comment(const std::string &s) { line("/* " + s + " */"); }

void CWriter::banner(const std::string &title)
{
    std::string bar(76, '=');
    line("/* " + bar);
    line(" * " + title);
    line(" * " + bar + " */");
}

void CWriter::open(const std::string &head)
{
    line(head.empty() ? "{" : head + " {");  // "": a bare block scoping its locals
    depth_++;
}

void CWriter::close(const std::string &tail)
{
    depth_--;
    line(tail);
}

std::string c_float(double v)
{
    float f = static_cast<float>(v);
    if (std::isinf(f)) return f > 0 ? "INFINITY" : "-INFINITY";
    std::string s = fmt::format("{}", f);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s + "f";
}

std::string c_double(double v)
{
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
}

}  // namespace ckc
