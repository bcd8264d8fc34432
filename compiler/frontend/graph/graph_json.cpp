// graph_json.cpp — graph.json -> Program (see graph_json.h).
#include "frontend/graph/graph_json.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ck_checkpoint.h"
#include "support/error.h"
#include "support/limits.h"
#include "support/source_location.h"
#include "support/util.h"
#include "ir/symbolic.h"

static_assert(ckc::limits::kRank <= CK_MAX_RANK, "graph.json tensors must fit the kernels' shape arrays");

namespace ckc {

namespace {

using json = nlohmann::json;

constexpr int kSchemaVersion = 1;

class Reader {
public:
    explicit Reader(std::string path) : path_(std::move(path)) {}
    void set_text(std::string text) { text_ = std::move(text); }
    // The message names what it is about ("node 'relu': ..."): the error points at that object's
    // "name" in the file (file:line:col and a caret).
    [[noreturn]] void fail(const std::string &msg) const
    {
        size_t at = kNoPosition, len = 0, q = msg.find('\'');
        size_t q2 = q == std::string::npos ? std::string::npos : msg.find('\'', q + 1);
        if (q2 != std::string::npos) {
            std::string name = msg.substr(q + 1, q2 - q - 1);
            at = find_json_string_value(text_, "name", name);
            len = name.size() + 2;
        }
        input_error(located_message(path_, text_, at, len, msg));
    }

    const json &field(const json &obj, const std::string &key, json::value_t type, const std::string &where) const
    {
        if (!obj.is_object() || !obj.contains(key)) fail(fmt::format("{}: missing key \"{}\"", where, key));
        const json &v = obj.at(key);
        bool ok = v.type() == type || (type == json::value_t::number_integer && v.is_number_unsigned());
        if (!ok) fail(fmt::format("{}: \"{}\" must be {}, is {}", where, key, type_name(type), v.type_name()));
        return v;
    }
    std::string str(const json &obj, const std::string &key, const std::string &where) const
    {
        return field(obj, key, json::value_t::string, where).get<std::string>();
    }
    std::string optional_str(const json &obj, const std::string &key, const std::string &where) const
    {
        return obj.contains(key) ? str(obj, key, where) : std::string();
    }
    Shape shape(const json &obj, const std::string &where) const
    {
        const json &a = field(obj, "shape", json::value_t::array, where);
        Shape s;
        int64_t n = 1;
        if (static_cast<int64_t>(a.size()) > limits::kRank)
            fail(fmt::format("{}: \"shape\" has {} dimensions, above ckc's limit of {}", where, a.size(), limits::kRank));
        for (const auto &d : a) {
            if (d.is_string()) {  // a symbolic size: "batch", "64*batch"
                s.push_back(dim(d.get<std::string>(), where + " \"shape\""));
            } else {
                if (!d.is_number_integer() || d.get<int64_t>() < 0)
                    fail(fmt::format("{}: \"shape\" must list non-negative integers or symbolic sizes, has {}", where,
                                     d.dump()));
                s.push_back(d.get<int64_t>());
            }
            int64_t v = dim_max(s.back());
            if (v > limits::kDim || (v && n > limits::kElements / v))
                fail(fmt::format("{}: \"shape\" {} is above ckc's limits ({} per dimension, {} elements){}", where,
                                 a.dump(), limits::kDim, limits::kElements,
                                 shape_is_static(s) ? "" : " with its symbols at their bounds"));
            n *= v;
        }
        return s;
    }
    // A symbolic size written as text ("batch", "64*batch*seq"), its symbols declared in "symbols".
    int64_t dim(const std::string &text, const std::string &where) const
    {
        int64_t d = 0;
        try {
            d = parse_dim(text);
        } catch (const std::runtime_error &e) {
            fail(fmt::format("{}: {}", where, e.what()));
        }
        for (const auto &sym : dim_symbols(d))
            if (!symbols_.count(sym))
                fail(fmt::format("{}: size \"{}\" names '{}', which \"symbols\" does not declare{}", where, text,
                                 sym, symbols_.empty() ? "" : " (declared: " + join(std::vector<std::string>(symbols_.begin(), symbols_.end()), ", ") + ")"));
        int64_t lo, hi;  // every size it takes within the bounds: a size, and one ckc can hold
        if (!dim_range(d, lo, hi) || hi > limits::kDim)
            fail(fmt::format("{}: size \"{}\" is above ckc's limit of {} with its symbols at their bounds", where, text,
                             limits::kDim));
        if (lo < 0)
            fail(fmt::format("{}: size \"{}\" is negative ({}) for some sizes within the symbols' bounds", where, text,
                             lo));
        return d;
    }
    void declare_symbol(const std::string &name) { symbols_.insert(name); }
    DType dtype(const json &obj, const std::string &where) const
    {
        std::string d = str(obj, "dtype", where);
        for (DType t : {DType::F32, DType::I64, DType::I32, DType::Bool})
            if (d == dtype_name(t)) return t;
        fail(fmt::format("{}: dtype \"{}\" is not supported (f32, i64, i32, bool)", where, d));
    }
    const std::string &path() const { return path_; }

private:
    static const char *type_name(json::value_t t)
    {
        switch (t) {
        case json::value_t::string: return "a string";
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "an integer";
        case json::value_t::number_float: return "a number";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::null: return "null";
        case json::value_t::binary:
        case json::value_t::discarded: break;
        }
        return "a value";
    }
    std::string path_;
    std::string text_;  // the file, for error positions
    std::set<std::string> symbols_;  // the document's "symbols"
};

Attr attr_of(const Reader &r, const json &v, const std::string &where)
{
    if (v.is_boolean()) return static_cast<int64_t>(v.get<bool>());
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) return v.get<double>();
    if (v.is_string()) {
        const std::string s = v.get<std::string>();
        if (s == "inf") return std::numeric_limits<double>::infinity();
        if (s == "-inf") return -std::numeric_limits<double>::infinity();
        if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
        return s;
    }
    if (v.is_array()) {
        std::vector<int64_t> out;
        for (const auto &e : v) {
            if (e.is_string()) {  // a shape attribute's symbolic size
                out.push_back(r.dim(e.get<std::string>(), where));
                continue;
            }
            if (!e.is_number_integer()) r.fail(where + ": lists must hold integers or symbolic sizes, has " + e.dump());
            out.push_back(e.get<int64_t>());
        }
        return out;
    }
    r.fail(where + ": unsupported attribute value " + v.dump());
}

std::vector<std::string> known_ops()
{
    std::vector<std::string> names;
    for (Op op : all_ops()) names.push_back(op_name(op));
    return names;
}

// Nodes in an order where every input is defined first (stable: file order
// where possible); a cycle is an error naming the nodes on it.
std::vector<size_t> execution_order(const Reader &r, const std::vector<json> &nodes, const std::set<std::string> &sources)
{
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < nodes.size(); i++) producer[nodes[i]["name"].get<std::string>()] = i;
    std::vector<int> state(nodes.size(), 0);  // 0 new, 1 visiting, 2 done
    std::vector<size_t> order;
    // depth-first, with an explicit stack of (node, its next input): a chain of any length listed last-first
    std::vector<std::pair<size_t, size_t>> stack;
    for (size_t root = 0; root < nodes.size(); root++) {
        if (state[root]) continue;
        state[root] = 1;
        stack.push_back({root, 0});
        while (!stack.empty()) {
            auto &[i, next] = stack.back();
            const json &inputs = nodes[i]["inputs"];
            if (next == inputs.size()) {
                state[i] = 2;
                order.push_back(i);
                stack.pop_back();
                continue;
            }
            std::string name = inputs[next++].get<std::string>();
            auto p = producer.find(name);
            if (p == producer.end()) {
                if (!sources.count(name))
                    r.fail(fmt::format("node '{}' reads '{}', which is not an input, a constant or a node output",
                                       nodes[i]["name"].get<std::string>(), name));
                continue;
            }
            size_t j = p->second;
            if (state[j] == 1) {
                std::vector<std::string> cyc;
                auto at = std::find_if(stack.begin(), stack.end(), [&](const auto &f) { return f.first == j; });
                for (; at != stack.end(); ++at) cyc.push_back(nodes[at->first]["name"].get<std::string>());
                cyc.push_back(nodes[j]["name"].get<std::string>());
                r.fail("the nodes form a cycle: " + join(cyc, " -> "));
            }
            if (state[j] == 0) {
                state[j] = 1;
                stack.push_back({j, 0});  // (invalidates i / next: read again at the loop's top)
            }
        }
    }
    return order;
}

}  // namespace

bool is_graph_json(const std::string &path)
{
    if (!ends_with(path, ".json") || !is_file(path)) return false;
    json j = json::parse(read_file(path), nullptr, false);
    return j.is_object() && j.contains("schema") && j["schema"] == "ckc.graph";
}

namespace {

// The names of inputs, constants and nodes: each used once.
struct Names {
    const Reader &r;
    std::set<std::string> used;
    void add(const std::string &name, const std::string &where)
    {
        if (name.empty()) r.fail(where + ": empty name");
        if (used.count(name)) r.fail(fmt::format("{}: the name '{}' is used twice", where, name));
        used.insert(name);
    }
};

// The document, checked to be a ckc graph of the version this ckc reads.
json parse_document(const Reader &r, const std::string &text)
{
    json doc = parse_json_text(r.path(), text);
    if (!doc.is_object()) r.fail("the top level must be an object");
    if (!doc.contains("schema") || doc["schema"] != "ckc.graph")
        r.fail("not a ckc graph: \"schema\" must be \"ckc.graph\" (write it with ckc.export)");
    const json &ver = r.field(doc, "version", json::value_t::number_integer, "top level");
    if (ver.get<int64_t>() != kSchemaVersion)
        r.fail(fmt::format("schema version {} is not supported: this ckc reads version {}{}", ver.get<int64_t>(),
                           kSchemaVersion, ver.get<int64_t>() > kSchemaVersion ? " (re-export, or update ckc)" : ""));

    return doc;
}

// "symbols": {"batch": {"min": 1, "max": 64}, ...}: the symbolic sizes and their bounds (ir/symbolic.h).
void read_symbols(Reader &r, const json &doc, Program &p, const std::map<std::string, int64_t> &max_sizes)
{
    std::vector<std::string> declared;
    const json none = json::object();
    const json &syms = doc.contains("symbols") ? r.field(doc, "symbols", json::value_t::object, "top level") : none;
    if (static_cast<int64_t>(syms.size()) > limits::kSymbols)
        r.fail(fmt::format("\"symbols\" declares {} sizes; ckc takes at most {}", syms.size(), limits::kSymbols));
    for (const auto &[name, b] : syms.items()) declared.push_back(name);
    for (const auto &[name, n] : max_sizes)
        if (!syms.contains(name))
            throw Error(ErrorKind::Usage,
                        fmt::format("--max {}={}: {} has no symbolic size '{}'{}", name, n, r.path(), name,
                                    declared.empty() ? " (its shapes are all fixed)"
                                                     : " (its symbols: " + join(declared, ", ") + ")"));
    std::map<std::string, std::pair<int64_t, int64_t>> derived;  // {"of": "seq+1", "div": 2}: name -> (of, div),
                                                                  // declared once the symbols they name are
    for (const auto &[name, b] : syms.items()) {
        std::string where = fmt::format("symbols \"{}\"", name);
        if (!b.is_object()) r.fail(fmt::format("{}: must be an object ({{\"min\": 1, \"max\": 64}} or {{\"of\": \"seq+1\", \"div\": 2}})", where));
        if (b.contains("of")) {
            if (max_sizes.count(name))
                throw Error(ErrorKind::Usage, fmt::format("--max {}: '{}' is derived from other sizes in {} (bound those)",
                                                          name, name, r.path()));
            if (b.contains("min") || b.contains("max"))
                r.fail(fmt::format("{}: a derived size takes no bounds (its \"of\"'s give them)", where));
            std::string of = r.str(b, "of", where);
            int64_t div = r.field(b, "div", json::value_t::number_integer, where).get<int64_t>(), e = 0;
            try {
                e = parse_dim(of);
            } catch (const std::runtime_error &err) {
                r.fail(fmt::format("{}: \"of\": {}", where, err.what()));
            }
            for (const auto &s : dim_symbols(e))
                if (!syms.contains(s))
                    r.fail(fmt::format("{}: \"of\" names '{}', which \"symbols\" does not declare", where, s));
            derived[name] = {e, div};
            continue;
        }
        int64_t lo = r.field(b, "min", json::value_t::number_integer, where).get<int64_t>();
        int64_t hi = r.field(b, "max", json::value_t::number_integer, where).get<int64_t>();
        if (lo < 1 || hi < lo || hi > limits::kDim)
            r.fail(fmt::format("{}: bounds [{}, {}] must satisfy 1 <= min <= max <= {}", where, lo, hi, limits::kDim));
        if (auto it = max_sizes.find(name); it != max_sizes.end()) {  // ckc compile --max: a tighter bound
            if (it->second > hi || it->second < lo)
                throw Error(ErrorKind::Usage,
                            fmt::format("--max {}={}: outside [{}, {}], the bounds {} gives '{}' (--max can only lower "
                                        "the upper one: the graph was exported for those)",
                                        name, it->second, lo, hi, r.path(), name));
            hi = it->second;
        }
        try {
            sym_declare(name, {lo, hi});
        } catch (const std::runtime_error &e) {
            r.fail(fmt::format("{}: {}", where, e.what()));
        }
        r.declare_symbol(name);
        p.symbols.push_back(name);
    }
    // the derived ones, each after the symbols it names (p.symbols is the order the generated code computes them)
    while (!derived.empty()) {
        bool progress = false;
        for (auto it = derived.begin(); it != derived.end();) {
            const auto &[name, rule] = *it;
            bool ready = true;
            for (const auto &s : dim_symbols(rule.first))
                ready = ready && std::find(p.symbols.begin(), p.symbols.end(), s) != p.symbols.end();
            if (!ready) {
                ++it;
                continue;
            }
            try {
                sym_declare_derived(name, rule.first, rule.second);
            } catch (const std::runtime_error &err) {
                r.fail(fmt::format("symbols \"{}\": {}", name, err.what()));
            }
            r.declare_symbol(name);
            p.symbols.push_back(name);
            it = derived.erase(it);
            progress = true;
        }
        if (!progress) {
            std::vector<std::string> left;
            for (const auto &[name, rule] : derived) left.push_back(name);
            r.fail(fmt::format("symbols [{}]: their \"of\"s name each other", join(left, ", ")));
        }
    }
}

void read_inputs(const Reader &r, const json &doc, Program &p, Names &names)
{
    Graph &g = p.header;
    const json &inputs = r.field(doc, "inputs", json::value_t::array, "top level");
    for (size_t i = 0; i < inputs.size(); i++) {
        std::string where = fmt::format("inputs[{}]", i);
        Tensor t;
        t.name = r.str(inputs[i], "name", where);
        names.add(t.name, where);
        t.shape = r.shape(inputs[i], where + " '" + t.name + "'");
        for (int64_t d : t.shape) {  // the caller's shapes bind the symbols: a*sym+b each ("seq", "2*half")
            std::string sym;
            int64_t a, b;
            if (is_sym(d) && !dim_linear(d, sym, a, b))
                r.fail(fmt::format("{} '{}': size {} names {}; an input's sizes are constants or a*symbol+b, one "
                                   "symbol each", where, t.name, dim_str(d),
                                   dim_symbols(d).size() > 1 ? "several symbols" : "a power or a negative multiple"));
            if (is_sym(d) && sym_derivation(sym))
                r.fail(fmt::format("{} '{}': size {} is derived ({}); an input's sizes are constants or free symbols",
                                   where, t.name, dim_str(d), sym_rule(sym)));
        }
        t.dtype = r.dtype(inputs[i], where + " '" + t.name + "'");
        t.storage = Storage::Input;
        g.add_tensor(t);
        p.inputs.push_back(t.name);
    }
    for (const std::string &sym : p.symbols) {
        if (sym_derivation(sym)) continue;  // computed from the others
        bool bound = false;
        for (const std::string &in : p.inputs)
            for (int64_t d : g.tensor(in).shape) {
                std::string s;
                int64_t a, b;
                bound = bound || (dim_linear(d, s, a, b) && s == sym);
            }
        if (!bound) r.fail(fmt::format("symbols \"{}\": no input has it as a size, so no call could bind it", sym));
    }

}

// Constants, each checked against the weights file (present, shape, dtype). Returns how many.
size_t read_constants(const Reader &r, const json &doc, const std::string &path, Program &p, Names &names)
{
    Graph &g = p.header;
    const json &consts = doc.contains("constants") ? doc["constants"] : json::array();
    if (!consts.is_array()) r.fail("\"constants\" must be an array");
    if (!consts.empty()) {
        std::string dir = path.rfind('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
        std::string name = "weights.safetensors";
        if (doc.contains("weights")) name = r.str(doc, "weights", "top level");
        char err[4400];
        if (weights_any_path()) {
            p.weights_path = dir + "/" + name;
        } else {
            std::vector<char> out(dir.size() + name.size() + 2);
            if (!ck_path_in_folder(dir.c_str(), name.c_str(), out.data(), out.size(), err, sizeof err))
                r.fail(fmt::format("\"weights\": {} (ckc compile --allow-outside-paths allows it)", err));
            p.weights_path = out.data();
        }
        ck_checkpoint *ck = ck_checkpoint_open(p.weights_path.c_str(), err, sizeof err);
        if (!ck) io_error(path + ": the graph has constants but its weights file cannot be read: " + err);
        try {
            for (size_t i = 0; i < consts.size(); i++) {
                std::string where = fmt::format("constants[{}]", i);
                Tensor t;
                t.name = r.str(consts[i], "name", where);
                names.add(t.name, where);
                where += " '" + t.name + "'";
                t.shape = r.shape(consts[i], where);
                t.dtype = r.dtype(consts[i], where);
                t.storage = Storage::Weight;
                t.source.parts = {t.name};
                t.source.part_shapes = {t.shape};
                const ck_tensor_info *ti = ck_checkpoint_find(ck, t.name.c_str());
                if (!ti) r.fail(fmt::format("{}: not in the weights file {}", where, p.weights_path));
                Shape file(ti->shape, ti->shape + ti->ndim);
                if (file != t.shape)
                    r.fail(fmt::format("{}: declared {} but {} holds {}", where, shape_str(t.shape), p.weights_path,
                                       shape_str(file)));
                bool is_f = ti->dtype == CK_DT_F32 || ti->dtype == CK_DT_F16 || ti->dtype == CK_DT_BF16;
                bool want_f = t.dtype == DType::F32;
                bool same = want_f ? is_f
                                   : (t.dtype == DType::I64 && ti->dtype == CK_DT_I64) ||
                                         (t.dtype == DType::I32 && ti->dtype == CK_DT_I32) ||
                                         (t.dtype == DType::Bool && (ti->dtype == CK_DT_BOOL || ti->dtype == CK_DT_U8));
                if (!same)
                    r.fail(fmt::format("{}: declared {} but {} holds {}", where, dtype_name(t.dtype), p.weights_path,
                                       ck_dtype_name(ti->dtype)));
                g.add_tensor(t);
            }
        } catch (...) {
            ck_checkpoint_close(ck);
            throw;
        }
        ck_checkpoint_close(ck);
    }

    return consts.size();
}

// Nodes: structure first, then in execution order, each shape checked against what the op computes.
void read_nodes(const Reader &r, const json &doc, Program &p, Names &names)
{
    Graph &g = p.header;
    const json &nodes_j = r.field(doc, "nodes", json::value_t::array, "top level");
    std::vector<json> nodes(nodes_j.begin(), nodes_j.end());
    for (size_t i = 0; i < nodes.size(); i++) {
        std::string where = fmt::format("nodes[{}]", i);
        std::string name = r.str(nodes[i], "name", where);
        names.add(name, where);
        where = fmt::format("node '{}'", name);
        std::string op = r.str(nodes[i], "op", where);
        if (!op_from_name(op))
            r.fail(fmt::format("{}: unknown op '{}'{} (ckc ops: {})", where, op, did_you_mean(op, known_ops()),
                               join(known_ops(), ", ")));
        const json &ins = r.field(nodes[i], "inputs", json::value_t::array, where);
        for (const auto &in : ins)
            if (!in.is_string()) r.fail(where + ": \"inputs\" must list tensor names");
        if (nodes[i].contains("attrs") && !nodes[i]["attrs"].is_object()) r.fail(where + ": \"attrs\" must be an object");
    }
    std::set<std::string> defined = names.used;
    for (const auto &n : nodes) defined.erase(n["name"].get<std::string>());
    for (size_t i : execution_order(r, nodes, defined)) {
        const json &nj = nodes[i];
        Node n;
        n.name = nj["name"].get<std::string>();
        n.output = n.name;
        n.op = *op_from_name(nj["op"].get<std::string>());
        std::string where = fmt::format("node '{}' ({})", n.name, op_name(n.op));
        for (const auto &in : nj["inputs"]) n.inputs.push_back(in.get<std::string>());
        const OpDef &d = op_def(n.op);
        int arity = static_cast<int>(n.inputs.size());
        if (arity < d.min_inputs || arity > d.max_inputs)
            r.fail(fmt::format("{}: takes {} inputs, has {}", where,
                               d.min_inputs == d.max_inputs ? std::to_string(d.min_inputs)
                                                            : fmt::format("{} to {}", d.min_inputs, d.max_inputs),
                               arity));
        if (nj.contains("attrs"))
            for (const auto &[k, v] : nj["attrs"].items()) n.attrs[k] = attr_of(r, v, where + " attr \"" + k + "\"");
        n.origin = {r.optional_str(nj, "module", where), r.optional_str(nj, "source", where)};
        try {
            g.add_node(n);
        } catch (const Error &e) {
            r.fail(e.what() + (n.origin.empty() ? std::string() : " [" + n.origin.str() + "]"));  // a shape rule's complaint
        }
        g.tensor(n.output).reference = r.optional_str(nj, "reference", where);
        const Tensor &out = g.tensor(n.output);
        // (a reshape or expand to more dimensions than the kernels index: they walk shapes in arrays of kRank)
        if (static_cast<int64_t>(out.shape.size()) > limits::kRank)
            r.fail(fmt::format("{}: computes a tensor of {} dimensions {}, above ckc's limit of {}", where,
                               out.shape.size(), shape_str(out.shape), limits::kRank));
        if (nj.contains("shape")) {
            Shape want = r.shape(nj, where);
            if (want != out.shape)
                r.fail(fmt::format("{}: graph.json declares shape {} but the op computes {} from {}", where,
                                   shape_str(want), shape_str(out.shape), [&] {
                                       std::vector<std::string> v;
                                       for (const auto &in : n.inputs) v.push_back(in + shape_str(g.tensor(in).shape));
                                       return join(v, ", ");
                                   }()));
        }
        if (nj.contains("dtype")) {
            DType want = r.dtype(nj, where);
            if (want != out.dtype)
                r.fail(fmt::format("{}: graph.json declares dtype {} but the op computes {}", where, dtype_name(want),
                                   dtype_name(out.dtype)));
        }
    }

}

// Outputs: each gets its own caller buffer.
void read_outputs(const Reader &r, const json &doc, Program &p)
{
    Graph &g = p.header;
    const json &outs = r.field(doc, "outputs", json::value_t::array, "top level");
    if (outs.empty()) r.fail("the graph has no outputs");
    std::set<std::string> out_names, written;
    for (size_t i = 0; i < outs.size(); i++) {
        std::string where = fmt::format("outputs[{}]", i);
        std::string name = r.str(outs[i], "name", where), t = r.str(outs[i], "tensor", where);
        if (!out_names.insert(name).second) r.fail(fmt::format("{}: the output name '{}' is used twice", where, name));
        if (!g.has_tensor(t)) r.fail(fmt::format("{}: '{}' is not a tensor of the graph", where, t));
        const Tensor &tt = g.tensor(t);
        if (tt.dtype != DType::F32 && tt.dtype != DType::I64 && tt.dtype != DType::I32 && tt.dtype != DType::Bool)
            r.fail(fmt::format("{}: dtype {} cannot be returned", where, dtype_name(tt.dtype)));
        bool needs_copy = tt.storage != Storage::Activation || !g.producer(t);
        if (needs_copy) {  // an input, a constant, or a tensor already returned: copy it into its own buffer
            Node c;
            c.op = Op::COPY;
            c.name = g.unique_name(name + "_copy");
            c.output = c.name;
            c.inputs = {t};
            c.origin.source = "output '" + name + "'";
            g.add_node(c, Storage::Output);
            t = c.output;
        } else {
            g.tensor(t).storage = Storage::Output;
        }
        g.mark_output(t);
        p.outputs.push_back(t);
        p.output_names.push_back(name);
        if (outs[i].contains("into")) {  // written into an input's buffer: the input the graph updates
            std::string into = r.str(outs[i], "into", where);
            auto in = std::find(p.inputs.begin(), p.inputs.end(), into);
            if (in == p.inputs.end())
                r.fail(fmt::format("{}: \"into\": '{}' is not an input of the graph (inputs: {})", where, into,
                                   join(p.inputs, ", ")));
            const Tensor &it = g.tensor(into);
            if (it.shape != tt.shape || it.dtype != tt.dtype)
                r.fail(fmt::format("{}: \"into\": input '{}' is {}{}, the output {}{}", where, into,
                                   dtype_name(it.dtype), shape_str(it.shape), dtype_name(tt.dtype), shape_str(tt.shape)));
            if (!written.insert(into).second)
                r.fail(fmt::format("{}: \"into\": input '{}' is already written by another output", where, into));
            g.tensor(t).into = into;
        }
    }
}

}  // namespace

Program build_from_graph_json(const std::string &path, const std::map<std::string, int64_t> &max_sizes)
{
    Reader r(path);
    std::string text = read_file(path);
    r.set_text(text);
    json doc = parse_document(r, text);
    Program p;
    p.info.kind = ModelKind::Graph;
    p.info.source_path = absolute_path(path);
    p.info.source_hash = fnv1a64(text);
    p.info.family = r.optional_str(doc, "module", "top level");
    if (p.info.family.empty()) p.info.family = "graph";
    Names names{r, {}};
    read_symbols(r, doc, p, max_sizes);
    read_inputs(r, doc, p, names);
    size_t n_consts = read_constants(r, doc, path, p, names);
    read_nodes(r, doc, p, names);
    read_outputs(r, doc, p);
    p.header.verify("graph.json " + path);
    p.info.n_layers = 0;
    p.info.summary = fmt::format("{}: {} nodes, {} inputs, {} constants, {} outputs", p.info.family,
                                 p.header.nodes().size(), p.inputs.size(), n_consts, p.outputs.size());
    return p;
}

}  // namespace ckc
