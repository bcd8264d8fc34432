// helpers.h — shared fixtures of the unit tests.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "frontend/hf/families.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pass.h"
#include "support/error.h"

namespace ckc_test {

// A temporary file removed when the object dies.
struct TempFile {
    std::string path;
    explicit TempFile(const std::string &contents, const std::string &suffix = ".json")
    {
        char tmpl[] = "/tmp/ckc_test_XXXXXX";
        int fd = mkstemp(tmpl);
        REQUIRE(fd >= 0);
        close(fd);
        std::remove(tmpl);
        path = std::string(tmpl) + suffix;
        std::ofstream(path, std::ios::binary) << contents;
    }
    ~TempFile() { std::remove(path.c_str()); }
};

// The tiny Llama of models/tiny-llama, with overrides.
inline nlohmann::json tiny_llama(const nlohmann::json &overrides = nlohmann::json::object())
{
    nlohmann::json j = {{"model_type", "llama"},        {"vocab_size", 256},          {"hidden_size", 64},
                        {"intermediate_size", 172},     {"num_hidden_layers", 2},     {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},     {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5}};
    for (auto &[k, v] : overrides.items()) {
        if (v.is_string() && v.get<std::string>() == "<delete>")
            j.erase(k);
        else
            j[k] = v;
    }
    return j;
}

inline ckc::Program program_of(const nlohmann::json &config)
{
    TempFile f(config.dump());
    return ckc::build_from_hf_config(f.path);
}

// The message of the ckc::Error thrown by building `config_text`, checking its kind.
inline std::string build_error(const std::string &config_text, ckc::ErrorKind kind = ckc::ErrorKind::Input)
{
    TempFile f(config_text);
    try {
        ckc::build_from_hf_config(f.path);
    } catch (const ckc::Error &e) {
        CHECK(static_cast<int>(e.kind()) == static_cast<int>(kind));
        return e.what();
    }
    FAIL("expected an error for: " << config_text);
    return "";
}

// Appends a node named after its output (the pass and planner tests' builder).
inline void add_op(ckc::Graph &g, ckc::Op op, std::vector<std::string> in, const std::string &out,
                   std::map<std::string, ckc::Attr> attrs = {}, ckc::Storage st = ckc::Storage::Activation)
{
    ckc::Node n;
    n.name = out;
    n.op = op;
    n.inputs = std::move(in);
    n.output = out;
    n.attrs = std::move(attrs);
    g.add_node(n, st);
}

// The IR text without indentation and blank lines, for comparing a test's expected text.
inline std::string ir_lines(const std::string &text)
{
    std::string out, line;
    std::istringstream in(text);
    while (std::getline(in, line)) {
        size_t a = line.find_first_not_of(" \t"), b = line.find_last_not_of(" \t\r");
        if (a != std::string::npos) out += line.substr(a, b - a + 1) + "\n";
    }
    return out;
}

// A pass test in the IR text form (ir/printer.h): `before` is parsed, the pass named `pass` runs on it as
// the pipeline runs it (on a Program holding it as its header), and the result must print as `after`.
// Returns whether the pass reported a change.
// The values of constant weights a pass reads (constant folding, mask detection), by weight name.
using Constants = std::map<std::string, ckc::ConstData>;

inline bool check_pass(const std::string &pass, const std::string &before, const std::string &after,
                       const Constants &constants = {})
{
    ckc::Program p;
    p.info.kind = ckc::ModelKind::Graph;
    p.constants = constants;
    p.header = ckc::parse_graph(before, pass + " input");
    ckc::parse_graph(after, pass + " expected");  // the expectation is a graph too
    const ckc::Pass *ps = ckc::find_pass(pass);
    REQUIRE(ps != nullptr);
    bool changed = ps->run(p.header, p);
    p.header.verify(pass);
    INFO("after " << pass << ":\n" << ckc::graph_text(p.header));
    CHECK(ir_lines(ckc::graph_text(p.header)) == ir_lines(after));
    return changed;
}

}  // namespace ckc_test
