// standalone.cpp — see standalone.h.
#include "tools/standalone.h"

#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "support/error.h"
#include "support/util.h"

namespace ckc {

namespace {

const std::regex kLocalInclude(R"re(^\s*#\s*include\s*"([^"]+)".*$)re");
const std::regex kFeatureMacro(R"re(^\s*#\s*define\s+(_POSIX_C_SOURCE|_GNU_SOURCE|_XOPEN_SOURCE)\b.*$)re");
const std::regex kDefine(R"re(^#\s*define\s+([A-Za-z_][A-Za-z0-9_]*))re");

std::string dir_of(const std::string &rel)
{
    size_t slash = rel.rfind('/');
    return slash == std::string::npos ? "" : rel.substr(0, slash);
}

std::vector<std::string> lines_of(const std::string &text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// The quoted includes of `text`, in order.
std::vector<std::string> local_includes(const std::string &text)
{
    std::vector<std::string> out;
    std::smatch m;
    for (const auto &line : lines_of(text))
        if (std::regex_match(line, m, kLocalInclude)) out.push_back(m[1]);
    return out;
}

// `name` included from a file in runtime/`from_dir`: beside it, else runtime/include (the -I of a manifest build).
std::string resolve(const std::string &runtime_dir, const std::string &from_dir, const std::string &name,
                    const std::string &from)
{
    if (!from_dir.empty() && is_file(runtime_dir + "/" + from_dir + "/" + name)) return from_dir + "/" + name;
    if (is_file(runtime_dir + "/include/" + name)) return "include/" + name;
    internal_error("standalone: " + from + " includes \"" + name + "\", which is neither beside it nor in runtime/include");
}

std::string banner(const std::string &title)
{
    std::string rule = "/* " + std::string(76, '=') + "\n";
    return rule + " * " + title + "\n * " + std::string(76, '=') + " */\n";
}

// `text` without its quoted includes (pasted above it) and feature-test macros (set once at the top); for a
// source file (`undef_after`), every macro it defines at file scope is #undef'd after it, so each file's
// macros stay its own as in a separate build.
std::string paste(const std::string &text, bool undef_after)
{
    std::string out;
    std::vector<std::string> defined;
    std::smatch m;
    for (const auto &line : lines_of(text)) {
        if (std::regex_match(line, kLocalInclude) || std::regex_match(line, kFeatureMacro)) continue;
        if (undef_after && std::regex_search(line, m, kDefine)) defined.push_back(m[1]);
        out += line + "\n";
    }
    if (undef_after && !defined.empty()) {
        out += "/* this file's macros end with it */\n";
        std::set<std::string> seen;
        for (const auto &d : defined)
            if (seen.insert(d).second) out += "#undef " + d + "\n";
    }
    return out;
}

}  // namespace

std::set<std::string> runtime_closure(const std::string &runtime_dir, std::set<std::string> files)
{
    std::vector<std::string> todo(files.begin(), files.end());
    std::set<std::string> seen_headers;
    while (!todo.empty()) {
        std::string rel = todo.back();
        todo.pop_back();
        for (const auto &inc : local_includes(read_file(runtime_dir + "/" + rel))) {
            std::string h = resolve(runtime_dir, dir_of(rel), inc, rel);
            if (!seen_headers.insert(h).second) continue;
            todo.push_back(h);  // a header's own includes
            if (starts_with(h, "include/")) continue;  // public headers: their sources are in the base set
            std::string twin = h.substr(0, h.size() - 2) + ".c";
            if (ends_with(h, ".h") && is_file(runtime_dir + "/" + twin) && files.insert(twin).second) todo.push_back(twin);
        }
    }
    return files;
}

std::string amalgamate(const std::string &runtime_dir, const std::set<std::string> &files,
                       const std::string &model_source)
{
    // headers in include order: each after the headers it includes (depth first, as the preprocessor meets them)
    std::vector<std::string> headers;
    std::set<std::string> placed, open;
    std::map<std::string, std::string> text;
    auto load = [&](const std::string &rel) -> const std::string & {
        auto it = text.find(rel);
        if (it == text.end()) it = text.emplace(rel, read_file(runtime_dir + "/" + rel)).first;
        return it->second;
    };
    std::function<void(const std::string &, const std::string &, const std::string &)> visit =
        [&](const std::string &from_dir, const std::string &src, const std::string &from) {
            for (const auto &inc : local_includes(src)) {
                std::string h = resolve(runtime_dir, from_dir, inc, from);
                if (placed.count(h) || open.count(h)) continue;  // guarded: the first inclusion is the one that counts
                open.insert(h);
                visit(dir_of(h), load(h), h);
                open.erase(h);
                placed.insert(h);
                headers.push_back(h);
            }
        };
    for (const auto &f : files) visit(dir_of(f), load(f), f);
    visit("include", model_source, "the generated model");

    // the model's leading comment (what it is, how to build it) opens the file
    std::string head, body = model_source;
    if (starts_with(model_source, "/*")) {
        size_t end = model_source.find("*/");
        if (end != std::string::npos) {
            size_t nl = model_source.find('\n', end);
            head = model_source.substr(0, nl == std::string::npos ? model_source.size() : nl + 1);
            body = model_source.substr(head.size());
        }
    }

    std::string out = head;
    out += "\n" + banner("Standalone build: the ckc runtime this model calls (" + std::to_string(headers.size()) +
                         " headers, " + std::to_string(files.size()) + " sources), then the model itself.");
    out += "/*\n"
           " *   -DCK_BLAS=1 -lopenblas   OpenBLAS for the float GEMMs (default here: runtime/kernels/blas.c's own)\n"
           " *   -fopenmp                 the kernels run on an OpenMP team (without it: on the calling thread)\n"
           " */\n"
           "#ifndef CK_BLAS\n#define CK_BLAS 0\n#endif\n"
           "#if defined(__linux__) && !defined(_GNU_SOURCE)\n#define _GNU_SOURCE\n#endif\n"
           "#ifndef _POSIX_C_SOURCE\n#define _POSIX_C_SOURCE 200809L\n#endif\n"
           "#ifndef _XOPEN_SOURCE\n#define _XOPEN_SOURCE 700\n#endif\n"
           "#if defined(__GNUC__) && !defined(_OPENMP)\n"
           "#pragma GCC diagnostic ignored \"-Wunknown-pragmas\" /* the kernels' #pragma omp, without -fopenmp */\n"
           "#endif\n\n";
    // a header's static inline functions that this model does not call are no warning in a header; pasted here
    // they would be one for clang's -Wunused-function, so the headers keep a header's rule
    out += "#if defined(__clang__)\n#pragma clang diagnostic push\n"
           "#pragma clang diagnostic ignored \"-Wunused-function\" /* as in a header: the headers below */\n#endif\n";
    for (const auto &h : headers) out += banner("runtime/" + h) + paste(load(h), false) + "\n";
    out += "#if defined(__clang__)\n#pragma clang diagnostic pop\n#endif\n\n";
    for (const auto &f : files) out += banner("runtime/" + f) + paste(load(f), true) + "\n";
    out += banner("The model") + paste(body, false);
    return out;
}

}  // namespace ckc
