#include "ir/graph.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "support/error.h"

namespace ckc {

const char *dtype_name(DType t)
{
    switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
    }
    return "?";
}

int64_t dtype_size(DType t)
{
    switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::Bool: return 1;
    }
    return 0;
}

DType dtype_from_name(const std::string &name)
{
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool})
        if (name == dtype_name(t)) return t;
    internal_error("unknown dtype '" + name + "'");
}

const char *storage_name(Storage s)
{
    switch (s) {
    case Storage::Activation: return "activation";
    case Storage::Weight: return "weight";
    case Storage::Input: return "input";
    case Storage::Carry: return "carry";
    case Storage::Output: return "output";
    }
    return "?";
}

const std::string &Tensor::dim(size_t axis) const
{
    static const std::string none;
    return axis < dims.size() ? dims[axis] : none;
}

const ModelInfo::NamedSize *ModelInfo::size_named(const std::string &name) const
{
    for (const auto &s : sizes)
        if (s.name == name) return &s;
    return nullptr;
}

std::string ModelInfo::size_for_attr(const std::string &attr, int64_t value) const
{
    for (const auto &s : sizes)
        if (s.attr == attr && s.value == value) return s.name;
    return "";
}

std::string shape_str(const Shape &s)
{
    std::string out = "[";
    for (size_t i = 0; i < s.size(); i++) {
        if (i) out += ", ";
        out += s[i] == kTokens ? std::string("T") : std::to_string(s[i]);
    }
    return out + "]";
}

int64_t shape_numel_fixed(const Shape &s)
{
    int64_t n = 1;
    for (int64_t d : s)
        if (d != kTokens) n *= d;
    return n;
}

bool shape_has_tokens(const Shape &s) { return std::find(s.begin(), s.end(), kTokens) != s.end(); }

// ---- Node attrs ------------------------------------------------------------

int64_t Node::i(const std::string &key) const
{
    auto it = attrs.find(key);
    if (it == attrs.end()) internal_error(fmt::format("node '{}' ({}) has no attribute '{}'", name, op_name(op), key));
    if (auto p = std::get_if<int64_t>(&it->second)) return *p;
    if (auto p = std::get_if<double>(&it->second)) return static_cast<int64_t>(*p);
    internal_error(fmt::format("node '{}': attribute '{}' is not a number (a per-layer table?)", name, key));
}

double Node::f(const std::string &key) const
{
    auto it = attrs.find(key);
    if (it == attrs.end()) internal_error(fmt::format("node '{}' ({}) has no attribute '{}'", name, op_name(op), key));
    if (auto p = std::get_if<double>(&it->second)) return *p;
    if (auto p = std::get_if<int64_t>(&it->second)) return static_cast<double>(*p);
    internal_error(fmt::format("node '{}': attribute '{}' is not a number", name, key));
}

int64_t ConstData::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

const std::vector<int64_t> &Node::ints(const std::string &key) const
{
    auto it = attrs.find(key);
    if (it == attrs.end()) internal_error(fmt::format("node '{}' ({}) has no attribute '{}'", name, op_name(op), key));
    if (auto p = std::get_if<std::vector<int64_t>>(&it->second)) return *p;
    internal_error(fmt::format("node '{}': attribute '{}' is not a list of integers", name, key));
}

std::string Node::table(const std::string &key) const
{
    auto it = attrs.find(key);
    if (it == attrs.end()) return "";
    auto p = std::get_if<LayerTableRef>(&it->second);
    return p ? p->table : "";
}

std::string Origin::str() const
{
    if (module.empty()) return source;
    return source.empty() ? module : module + ": " + source;
}

const std::string &Node::s(const std::string &key) const
{
    auto it = attrs.find(key);
    if (it == attrs.end()) internal_error(fmt::format("node '{}' ({}) has no attribute '{}'", name, op_name(op), key));
    if (auto p = std::get_if<std::string>(&it->second)) return *p;
    internal_error(fmt::format("node '{}': attribute '{}' is not a string", name, key));
}

// ---- Graph -----------------------------------------------------------------

Tensor &Graph::add_tensor(Tensor t)
{
    if (tensors_.count(t.name)) internal_error(fmt::format("tensor '{}' defined twice", t.name));
    std::string name = t.name;
    dirty_ = true;
    return tensors_.emplace(name, std::move(t)).first->second;
}

static Shape infer_shape(const Graph &g, const Node &n, DType *dtype = nullptr)
{
    const OpDef &d = op_def(n.op);
    int k = static_cast<int>(n.inputs.size());
    if (k < d.min_inputs || k > d.max_inputs)
        internal_error(fmt::format("node '{}' ({}) has {} inputs, expected {}..{}", n.name, d.name, k, d.min_inputs,
                                   d.max_inputs));
    std::vector<const Tensor *> in;
    for (const auto &name : n.inputs) {
        if (!g.has_tensor(name)) internal_error(fmt::format("node '{}' reads unknown tensor '{}'", n.name, name));
        in.push_back(&g.tensor(name));
    }
    Shape s = d.shape(n, in);
    if (dtype) *dtype = d.dtype ? d.dtype(n, in) : DType::F32;
    return s;
}

// The names of a node's output dims by its op's rule (OpDef::dims); none when the rule gives a list of the
// wrong rank.
static std::vector<std::string> infer_dims(const Graph &g, const Node &n, size_t rank)
{
    const OpDef &d = op_def(n.op);
    if (!d.dims) return {};
    Inputs in;
    for (const auto &name : n.inputs) in.push_back(&g.tensor(name));
    std::vector<std::string> names = d.dims(n, in);
    bool any = false;
    for (const auto &x : names) any = any || !x.empty();
    return names.size() == rank && any ? names : std::vector<std::string>{};
}

Node &Graph::add_node(Node n, Storage out_storage) { return insert_node(std::move(n), "", out_storage); }

Node &Graph::insert_node(Node n, const std::string &before, Storage out_storage)
{
    if (n.name.empty()) n.name = unique_name(std::string("n_") + op_name(n.op));
    if (node(n.name)) internal_error(fmt::format("node '{}' defined twice", n.name));
    DType dt = DType::F32;
    Shape s = infer_shape(*this, n, &dt);
    if (!has_tensor(n.output)) {
        Tensor t;
        t.name = n.output;
        t.shape = s;
        t.dtype = dt;
        t.storage = out_storage;
        t.dims = infer_dims(*this, n, s.size());
        add_tensor(t);
    } else {
        const Tensor &t = tensor(n.output);
        if (t.shape != s || t.dtype != dt)
            internal_error(fmt::format("node '{}' produces {}:{} but tensor '{}' is {}:{}", n.name, shape_str(s),
                                       dtype_name(dt), t.name, shape_str(t.shape), dtype_name(t.dtype)));
        if (producer(n.output)) internal_error(fmt::format("tensor '{}' already has a producer", n.output));
    }
    int at = before.empty() ? static_cast<int>(nodes_.size()) : node_index(before);
    if (at < 0) internal_error(fmt::format("insert before unknown node '{}'", before));
    auto it = nodes_.insert(nodes_.begin() + at, std::move(n));
    dirty_ = true;  // after the insertion: node_index() above refreshed the index
    return *it;
}

void Graph::mark_output(const std::string &t)
{
    if (!has_tensor(t)) internal_error(fmt::format("output '{}' is not a tensor", t));
    if (!is_output(t)) outputs_.push_back(t);
}

const Tensor &Graph::tensor(const std::string &name) const
{
    auto it = tensors_.find(name);
    if (it == tensors_.end()) internal_error(fmt::format("unknown tensor '{}'", name));
    return it->second;
}

Tensor &Graph::tensor(const std::string &name)
{
    auto it = tensors_.find(name);
    if (it == tensors_.end()) internal_error(fmt::format("unknown tensor '{}'", name));
    return it->second;
}

bool Graph::is_output(const std::string &t) const { return std::find(outputs_.begin(), outputs_.end(), t) != outputs_.end(); }

bool Graph::updated_input(const std::string &input) const
{
    for (const auto &o : outputs_)
        if (tensor(o).into == input) return true;
    return false;
}

void Graph::reindex() const
{
    if (!dirty_) return;
    producer_.clear();
    consumers_.clear();
    by_name_.clear();
    for (int i = 0; i < static_cast<int>(nodes_.size()); i++) {
        const Node &n = nodes_[i];
        by_name_[n.name] = i;
        producer_[n.output] = i;
        std::set<std::string> seen;  // a node reading a tensor twice is one consumer
        for (const auto &in : n.inputs)
            if (seen.insert(in).second) consumers_[in].push_back(i);
    }
    dirty_ = false;
}

const Node *Graph::producer(const std::string &t) const
{
    reindex();
    auto it = producer_.find(t);
    return it == producer_.end() ? nullptr : &nodes_[it->second];
}

std::vector<const Node *> Graph::consumers(const std::string &t) const
{
    reindex();
    std::vector<const Node *> out;
    auto it = consumers_.find(t);
    if (it != consumers_.end())
        for (int i : it->second) out.push_back(&nodes_[i]);
    return out;
}

const Node *Graph::node(const std::string &name) const
{
    int i = node_index(name);
    return i < 0 ? nullptr : &nodes_[i];
}

int Graph::node_index(const std::string &name) const
{
    reindex();
    auto it = by_name_.find(name);
    return it == by_name_.end() ? -1 : it->second;
}

void Graph::replace_uses(const std::string &old_t, const std::string &new_t)
{
    for (auto &n : nodes_)
        for (auto &in : n.inputs)
            if (in == old_t) in = new_t;
    for (auto &o : outputs_)
        if (o == old_t) o = new_t;
    dirty_ = true;
}

Node &Graph::edit(const std::string &name)
{
    int i = node_index(name);
    if (i < 0) internal_error(fmt::format("edit: no node '{}'", name));
    return nodes_[i];
}

void Graph::set_input(const std::string &node_name, size_t index, const std::string &t)
{
    int i = node_index(node_name);
    if (i < 0 || index >= nodes_[i].inputs.size())
        internal_error(fmt::format("set_input: node '{}' has no input {}", node_name, index));
    nodes_[i].inputs[index] = t;
    dirty_ = true;
}

void Graph::remove_node(const std::string &name)
{
    int i = node_index(name);
    if (i < 0) internal_error(fmt::format("remove of unknown node '{}'", name));
    nodes_.erase(nodes_.begin() + i);
    dirty_ = true;
}

void Graph::remove_tensor(const std::string &name)
{
    if (producer(name) || !consumers(name).empty() || is_output(name))
        internal_error(fmt::format("remove of tensor '{}' that is still in use", name));
    tensors_.erase(name);
    dirty_ = true;
}

std::vector<std::string> Graph::unused_tensors() const
{
    reindex();
    std::vector<std::string> out;
    for (const auto &[name, t] : tensors_)
        if (!producer_.count(name) && !consumers_.count(name) && !is_output(name)) out.push_back(name);
    return out;
}

std::string Graph::unique_name(const std::string &base) const
{
    reindex();
    if (!tensors_.count(base) && !by_name_.count(base)) return base;
    for (int k = 1;; k++) {
        std::string c = base + "_" + std::to_string(k);
        if (!tensors_.count(c) && !by_name_.count(c)) return c;
    }
}

void Graph::verify(const std::string &where) const
{
    reindex();
    std::set<std::string> available;
    for (const auto &[name, t] : tensors_)
        if (!producer_.count(name)) available.insert(name);
    std::set<std::string> names;
    for (const auto &n : nodes_) {
        if (!names.insert(n.name).second) internal_error(fmt::format("{}: node name '{}' repeats", where, n.name));
        for (const auto &in : n.inputs)
            if (!available.count(in))
                internal_error(fmt::format("{}: node '{}' reads '{}' before it is produced (or it does not exist)",
                                           where, n.name, in));
        DType dt = DType::F32;
        Shape s = infer_shape(*this, n, &dt);
        const Tensor &out = tensor(n.output);
        if (out.shape != s || out.dtype != dt)
            internal_error(fmt::format("{}: node '{}' ({}) produces {}:{} but '{}' is declared {}:{}", where, n.name,
                                       op_name(n.op), shape_str(s), dtype_name(dt), n.output, shape_str(out.shape),
                                       dtype_name(out.dtype)));
        if (out.storage == Storage::Weight || out.storage == Storage::Input)
            internal_error(fmt::format("{}: node '{}' writes read-only tensor '{}'", where, n.name, n.output));
        if (!available.insert(n.output).second)
            internal_error(fmt::format("{}: tensor '{}' is produced twice", where, n.output));
    }
    for (const auto &o : outputs_)
        if (!available.count(o)) internal_error(fmt::format("{}: graph output '{}' is never produced", where, o));
}

std::optional<ViewOf> potential_view(const Graph &g, const Node &n)
{
    const OpDef &d = op_def(n.op);
    if (!d.view) return std::nullopt;
    Inputs in;
    for (const auto &i : n.inputs) in.push_back(&g.tensor(i));
    return d.view(n, in);
}

}  // namespace ckc
