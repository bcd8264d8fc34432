#include "ir/graph.h"
#include "ir/symbolic.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>

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
        out += s[i] == kTokens ? std::string("T") : dim_str(s[i]);
    }
    return out + "]";
}

int64_t shape_numel_fixed(const Shape &s)
{
    int64_t n = 1;
    for (int64_t d : s)
        if (d != kTokens) n *= dim_max(d);
    return n;
}

int64_t shape_numel(const Shape &s)
{
    int64_t n = 1;
    for (int64_t d : s) n = dim_mul(n, d);
    return n;
}

bool shape_is_static(const Shape &s)
{
    return std::all_of(s.begin(), s.end(), [](int64_t d) { return d >= 0; });
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
//
// Nodes live in a list (NodeList): an edit anywhere costs O(log n), a node's address stays put, and the
// indices below are updated by each edit instead of rebuilt, so a pass over a graph of n nodes costs
// O(n log n) however many edits it makes. Each node carries an order key increasing along the list
// (runs_before); an insertion takes the middle of its neighbours' keys, and the keys are spread out again
// when a gap runs out (after ~32 insertions at one place).

namespace {
constexpr int64_t kKeyGap = int64_t{1} << 32;
}

Graph::Graph(const Graph &o)
    : nodes_(o.nodes_), tensors_(o.tensors_), outputs_(o.outputs_), output_set_(o.output_set_)
{
    rebuild_index();
}

Graph &Graph::operator=(const Graph &o)
{
    if (this != &o) {
        nodes_ = o.nodes_;
        tensors_ = o.tensors_;
        outputs_ = o.outputs_;
        output_set_ = o.output_set_;
        next_suffix_.clear();
        rebuild_index();
    }
    return *this;
}

void Graph::rebuild_index()
{
    by_name_.clear();
    producer_.clear();
    consumers_.clear();
    for (auto it = nodes_.slots_.begin(); it != nodes_.slots_.end(); ++it) {
        by_name_[it->node.name] = it;
        index_node(*it);
    }
    positions_dirty_ = true;
}

void Graph::index_node(NodeList::Slot &s)
{
    producer_[s.node.output] = &s;
    for (size_t k = 0; k < s.node.inputs.size(); k++) {
        const std::string &in = s.node.inputs[k];
        if (std::find(s.node.inputs.begin(), s.node.inputs.begin() + k, in) == s.node.inputs.begin() + k)
            consumers_[in].push_back(&s);  // a node reading a tensor twice is one consumer
    }
}

void Graph::unindex_node(NodeList::Slot &s)
{
    auto p = producer_.find(s.node.output);
    if (p != producer_.end() && p->second == &s) producer_.erase(p);
    for (const auto &in : s.node.inputs) {
        auto c = consumers_.find(in);
        if (c == consumers_.end()) continue;
        auto &v = c->second;
        v.erase(std::remove(v.begin(), v.end(), &s), v.end());
        if (v.empty()) consumers_.erase(c);
    }
}

void Graph::relabel()
{
    int64_t k = 0;
    for (auto &s : nodes_.slots_) s.key = k += kKeyGap;
}

Graph::SlotIt Graph::slot(const std::string &node, const char *what) const
{
    auto it = by_name_.find(node);
    if (it == by_name_.end()) internal_error(fmt::format("{}: no node '{}'", what, node));
    return it->second;
}

Tensor &Graph::add_tensor(Tensor t)
{
    if (tensors_.count(t.name)) internal_error(fmt::format("tensor '{}' defined twice", t.name));
    std::string name = t.name;
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

Node &Graph::add_node(Node n, Storage out_storage) { return place(std::move(n), nodes_.slots_.end(), out_storage); }

Node &Graph::insert_node(Node n, const std::string &before, Storage out_storage)
{
    SlotIt at = before.empty() ? nodes_.slots_.end() : slot(before, "insert before");
    return place(std::move(n), at, out_storage);
}

Node &Graph::insert_after(Node n, const std::string &after, Storage out_storage)
{
    return place(std::move(n), std::next(slot(after, "insert after")), out_storage);
}

Node &Graph::place(Node n, SlotIt at, Storage out_storage)
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
    auto &slots = nodes_.slots_;
    // the order key: between the neighbours' (spread out again when they are adjacent)
    for (int attempt = 0;; attempt++) {
        int64_t lo = at == slots.begin() ? 0 : std::prev(at)->key;
        int64_t hi = at == slots.end() ? lo + 2 * kKeyGap : at->key;
        if (hi - lo >= 2 || attempt) {
            std::string name = n.name;
            SlotIt it = slots.insert(at, NodeList::Slot{std::move(n), lo + (hi - lo) / 2});
            by_name_[name] = it;
            index_node(*it);
            positions_dirty_ = true;
            return it->node;
        }
        relabel();
    }
}

void Graph::mark_output(const std::string &t)
{
    if (!has_tensor(t)) internal_error(fmt::format("output '{}' is not a tensor", t));
    if (output_set_.insert(t).second) outputs_.push_back(t);
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

bool Graph::updated_input(const std::string &input) const
{
    for (const auto &o : outputs_)
        if (tensor(o).into == input) return true;
    return false;
}

const Node *Graph::producer(const std::string &t) const
{
    auto it = producer_.find(t);
    return it == producer_.end() ? nullptr : &it->second->node;
}

std::vector<const Node *> Graph::consumers(const std::string &t) const
{
    std::vector<const Node *> out;
    auto it = consumers_.find(t);
    if (it == consumers_.end()) return out;
    std::vector<const NodeList::Slot *> slots(it->second.begin(), it->second.end());
    std::sort(slots.begin(), slots.end(), [](const auto *a, const auto *b) { return a->key < b->key; });
    for (const auto *s : slots) out.push_back(&s->node);
    return out;
}

std::vector<const Node *> Graph::node_list() const
{
    std::vector<const Node *> out;
    out.reserve(nodes_.size());
    for (const auto &s : nodes_.slots_) out.push_back(&s.node);
    return out;
}

const Node *Graph::node(const std::string &name) const
{
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &it->second->node;
}

int Graph::node_index(const std::string &name) const
{
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return -1;
    if (positions_dirty_) {
        positions_.clear();
        int i = 0;
        for (const auto &s : nodes_.slots_) positions_[&s] = i++;
        positions_dirty_ = false;
    }
    return positions_.at(&*it->second);
}

bool Graph::runs_before(const std::string &a, const std::string &b) const
{
    return slot(a, "runs_before")->key < slot(b, "runs_before")->key;
}

std::string Graph::next_node(const std::string &name) const
{
    SlotIt it = std::next(slot(name, "next_node"));
    return it == nodes_.slots_.end() ? std::string() : it->node.name;
}

void Graph::replace_uses(const std::string &old_t, const std::string &new_t)
{
    if (old_t == new_t) return;
    auto c = consumers_.find(old_t);
    if (c != consumers_.end()) {
        std::vector<NodeList::Slot *> readers = std::move(c->second);
        consumers_.erase(c);
        auto &to = consumers_[new_t];
        for (NodeList::Slot *s : readers) {
            bool already = std::find(s->node.inputs.begin(), s->node.inputs.end(), new_t) != s->node.inputs.end();
            for (auto &in : s->node.inputs)
                if (in == old_t) in = new_t;
            if (!already) to.push_back(s);
        }
    }
    if (output_set_.erase(old_t)) {
        for (auto &o : outputs_)
            if (o == old_t) o = new_t;
        output_set_.insert(new_t);
    }
}

Node &Graph::edit(const std::string &name) { return slot(name, "edit")->node; }

void Graph::set_input(const std::string &node_name, size_t index, const std::string &t)
{
    NodeList::Slot &s = *slot(node_name, "set_input");
    if (index >= s.node.inputs.size())
        internal_error(fmt::format("set_input: node '{}' has no input {}", node_name, index));
    unindex_node(s);
    s.node.inputs[index] = t;
    index_node(s);
}

void Graph::remove_node(const std::string &name)
{
    SlotIt it = slot(name, "remove");
    unindex_node(*it);
    by_name_.erase(it->node.name);
    nodes_.slots_.erase(it);
    positions_dirty_ = true;
}

void Graph::remove_tensor(const std::string &name)
{
    if (producer(name) || consumers_.count(name) || is_output(name))
        internal_error(fmt::format("remove of tensor '{}' that is still in use", name));
    tensors_.erase(name);
}

std::vector<std::string> Graph::unused_tensors() const
{
    std::vector<std::string> out;
    for (const auto &[name, t] : tensors_)
        if (!producer_.count(name) && !consumers_.count(name) && !is_output(name)) out.push_back(name);
    return out;
}

std::string Graph::unique_name(const std::string &base) const
{
    if (!tensors_.count(base) && !by_name_.count(base)) return base;
    int &k = next_suffix_[base];  // names taken so far stay taken: start after the last one given
    for (k = std::max(k, 1);; k++) {
        std::string c = base + "_" + std::to_string(k);
        if (!tensors_.count(c) && !by_name_.count(c)) return c;
    }
}

void Graph::verify(const std::string &where) const
{
    std::unordered_set<std::string> available, names;  // (hash sets: this runs after every pass)
    available.reserve(tensors_.size());
    names.reserve(nodes_.size());
    for (const auto &[name, t] : tensors_)
        if (!producer_.count(name)) available.insert(name);
    int64_t last_key = 0;
    for (const auto &s : nodes_.slots_) {
        const Node &n = s.node;
        if (s.key <= last_key) internal_error(fmt::format("{}: node '{}' is out of order", where, n.name));
        last_key = s.key;
        if (!names.insert(n.name).second) internal_error(fmt::format("{}: node name '{}' repeats", where, n.name));
        for (const auto &in : n.inputs)
            if (!available.count(in))
                internal_error(fmt::format("{}: node '{}' reads '{}' before it is produced (or it does not exist)",
                                           where, n.name, in));
        DType dt = DType::F32;
        Shape s2 = infer_shape(*this, n, &dt);
        const Tensor &out = tensor(n.output);
        if (out.shape != s2 || out.dtype != dt)
            internal_error(fmt::format("{}: node '{}' ({}) produces {}:{} but '{}' is declared {}:{}", where, n.name,
                                       op_name(n.op), shape_str(s2), dtype_name(dt), n.output, shape_str(out.shape),
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

// ---- Program

std::vector<Section> Program::sections() const
{
    std::vector<Section> out;
    for (Section s : kSections)
        if (s != Section::Block2 || has_block2()) out.push_back(s);
    return out;
}

bool Program::layer_runs(int64_t layer, Section s) const
{
    if (!is_layer_section(s)) return false;
    int kind = has_block2() ? layer_kind.at(static_cast<size_t>(layer)) : 0;
    return kind == (s == Section::Block2 ? 1 : 0);
}

int64_t Program::runs_of(Section s) const
{
    if (!is_layer_section(s)) return 1;
    int64_t n = 0;
    for (int64_t l = 0; l < info.n_layers; l++) n += layer_runs(l, s);
    return n;
}

WeightTotals weight_totals(const Program &p)
{
    // each checkpoint tensor (by its parts' names) once per section kind: global, or the layers that read it
    struct Seen {
        int64_t elements = 0;
        double bytes = 0;
        bool global = false;
        std::set<Section> blocks;
    };
    std::map<std::string, Seen> seen;
    for (Section s : p.sections())
        for (const auto &[name, t] : p.section(s).tensors()) {
            if (t.storage != Storage::Weight) continue;
            std::string key;
            for (const auto &part : t.source.parts) key += part + "|";
            Seen &w = seen[key.empty() ? p.section_name(s) + std::string(":") + name : key];
            w.elements = shape_numel_fixed(t.shape);
            w.bytes = static_cast<double>(w.elements * dtype_size(t.dtype));
            if (is_layer_section(s)) w.blocks.insert(s);
            else w.global = true;
        }
    WeightTotals out;
    for (const auto &[key, w] : seen) {
        int64_t times = w.global ? 1 : 0;
        for (Section s : w.blocks) times += p.runs_of(s);
        out.elements += w.elements * times;
        out.bytes += w.bytes * static_cast<double>(times);
    }
    return out;
}

}  // namespace ckc
