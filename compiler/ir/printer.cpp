#include "ir/printer.h"

#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/util.h"
#include "support/version.h"

namespace ckc {

std::string attr_str(const Attr &a)
{
    if (auto p = std::get_if<int64_t>(&a)) return std::to_string(*p);
    if (auto p = std::get_if<double>(&a)) {
        std::string s = fmt::format("{}", *p);  // shortest round-trip form; a float stays a float when read back
        return s.find_first_of(".ein") == std::string::npos ? s + ".0" : s;
    }
    if (auto p = std::get_if<std::vector<int64_t>>(&a)) return "[" + fmt::format("{}", fmt::join(*p, ", ")) + "]";
    if (auto p = std::get_if<LayerTableRef>(&a)) return "@" + p->table;
    return "\"" + std::get<std::string>(a) + "\"";
}

std::string tensor_ref(const Graph &g, const std::string &name)
{
    const Tensor &t = g.tensor(name);
    std::string s = name + shape_str(t.shape);
    if (t.dtype != DType::F32) s += std::string(":") + dtype_name(t.dtype);
    if (t.storage != Storage::Activation) s += std::string(":") + storage_name(t.storage);
    return s;
}

std::string node_line(const Graph &g, const Node &n)
{
    std::vector<std::string> ins;
    for (const auto &i : n.inputs) ins.push_back(tensor_ref(g, i));
    std::string s = n.name != n.output ? "[" + n.name + "] " : "";
    s += fmt::format("{} {} -> {}", op_name(n.op), join(ins, ", "), tensor_ref(g, n.output));
    std::vector<std::string> attrs;
    for (const auto &[k, v] : n.attrs) attrs.push_back(k + "=" + attr_str(v));
    if (!attrs.empty()) s += "  " + join(attrs, " ");
    return s;
}

std::string graph_text(const Graph &g)
{
    std::string s;
    for (const Node &n : g.nodes()) s += node_line(g, n) + "\n";
    return s;
}

void print_program(const Program &p, std::ostream &os)
{
    os << "; " << p.info.summary << "\n";
    os << "; carry " << p.carry << shape_str(p.carry_shape) << " (the residual stream, outside the arena)\n";
    for (const auto &[name, t] : p.layer_tables) {
        std::vector<std::string> vals;
        for (double v : t.values) vals.push_back(fmt::format("{}", v));
        os << "; per-layer @" << name << " = [" << join(vals, ", ") << "]\n";
    }
    for (Section s : p.sections()) {
        const Graph &g = p.section(s);
        const char *sec = Program::section_name(s);
        if (is_layer_section(s) && !p.has_block2()) {
            os << fmt::format("{} (runs for each layer L = 0..{})\n", sec, p.info.n_layers - 1);
        } else if (is_layer_section(s)) {
            std::vector<std::string> layers;
            for (int64_t l = 0; l < p.info.n_layers; l++)
                if (p.layer_runs(l, s)) layers.push_back(std::to_string(l));
            os << fmt::format("{} (runs for layers L = {})\n", sec, join(layers, ", "));
        } else {
            os << sec << "\n";
        }
        for (const Node &n : g.nodes())
            os << fmt::format("  {:<6} {:<2} {}\n", sec, is_layer_section(s) ? "L" : "-", node_line(g, n));
    }
}


nlohmann::json shape_to_json(const Shape &s)
{
    nlohmann::json j = nlohmann::json::array();
    for (int64_t d : s) {
        if (d == kTokens)
            j.push_back("T");
        else
            j.push_back(d);
    }
    return j;
}

static nlohmann::json attr_json(const Attr &a)
{
    if (auto p = std::get_if<int64_t>(&a)) return *p;
    if (auto p = std::get_if<double>(&a)) return *p;
    if (auto p = std::get_if<std::vector<int64_t>>(&a)) return *p;
    if (auto p = std::get_if<LayerTableRef>(&a)) return {{"layer_table", p->table}};
    return std::get<std::string>(a);
}

static nlohmann::json graph_json(const Graph &g)
{
    nlohmann::json nodes = nlohmann::json::array(), tensors = nlohmann::json::object();
    for (const Node &n : g.nodes()) {
        nlohmann::json attrs = nlohmann::json::object();
        for (const auto &[k, v] : n.attrs) attrs[k] = attr_json(v);
        nodes.push_back({{"name", n.name}, {"op", op_name(n.op)}, {"inputs", n.inputs}, {"output", n.output},
                         {"attrs", attrs}, {"module", n.origin.module}, {"source", n.origin.source}});
    }
    for (const auto &[name, t] : g.tensors()) {
        nlohmann::json tj = {{"shape", shape_to_json(t.shape)}, {"dtype", dtype_name(t.dtype)},
                             {"storage", storage_name(t.storage)}};
        if (t.storage == Storage::Weight) tj["source"] = t.source.parts;
        tensors[name] = tj;
    }
    return {{"nodes", nodes}, {"tensors", tensors}, {"outputs", g.outputs()}};
}

nlohmann::json program_to_json(const Program &p)
{
    nlohmann::json j;
    j["ckc_version"] = CKC_VERSION;
    j["model"] = {{"family", p.info.family},
                  {"source", p.info.source_path},
                  {"source_fnv1a64", hex64(p.info.source_hash)},
                  {"vocab_size", p.info.vocab_size},
                  {"hidden_size", p.info.hidden_size},
                  {"num_layers", p.info.n_layers},
                  {"context_length", p.info.context_length},
                  {"summary", p.info.summary}};
    j["carry"] = {{"name", p.carry}, {"shape", shape_to_json(p.carry_shape)}};
    j["header"] = graph_json(p.header);
    j["block"] = graph_json(p.block);
    j["block"]["layers"] = p.runs_of(Section::Block);
    if (p.has_block2()) {
        j["block2"] = graph_json(p.block2);
        j["block2"]["layers"] = p.runs_of(Section::Block2);
        j["layer_kind"] = p.layer_kind;
    }
    j["footer"] = graph_json(p.footer);
    nlohmann::json tables = nlohmann::json::object();
    for (const auto &[name, t] : p.layer_tables) tables[name] = t.values;
    j["layer_tables"] = tables;
    return j;
}

}  // namespace ckc
