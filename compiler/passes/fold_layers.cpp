// fold_layers — repeated submodules of an exported graph -> the block.
//
// A module path like "transformer.h.3.attn" puts a node in layer 3 of the
// container "transformer.h" (also layers.N / blocks.N). Folding applies when
//   * the nodes run as: other nodes, layer 0, layer 1, ..., layer N-1, other
//     nodes (N >= 2), all layers in one container;
//   * one activation enters each layer and one leaves it, the one leaving
//     layer i entering layer i+1 and nothing else (graph inputs and
//     constants may be read anywhere), all of one shape and float32;
//   * every layer is layer 0's computation: same ops, attributes and wiring,
//     its weights named like layer 0's with its own index (or the very same
//     constant).
// Then layer 0 becomes the block with weights named "...h.{L}...", the tensor
// crossing layers becomes the carry, and what runs before / after becomes
// the header / footer. Otherwise the program stays all header.
#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "ir/printer.h"
#include "passes/pass.h"
#include "support/error.h"
#include "support/util.h"
#include "ir/constants.h"

namespace ckc {

namespace {

struct LayerTag {
    std::string container;  // "transformer.h"
    int64_t index = -1;
};

std::optional<LayerTag> layer_of(const Origin &origin)
{
    static const std::regex re(R"(^((?:.*\.)?(?:layers|h|blocks))\.(\d+)(?:\.|$))");
    std::smatch m;
    if (!std::regex_search(origin.module, m, re)) return std::nullopt;
    return LayerTag{m[1].str(), std::stoll(m[2].str())};
}

struct Layer {
    std::vector<const Node *> nodes;
    std::set<std::string> produced;
    std::string carry_in, carry_out;
};

// The weight of layer `i` named like layer 0's: "h.3.attn.w" -> "h.{L}.attn.w".
std::string layer_pattern(const std::string &name, const std::string &container, int64_t i)
{
    std::string at = container + "." + std::to_string(i) + ".";
    auto pos = name.find(at);
    if (pos == std::string::npos || (pos > 0 && name[pos - 1] != '.')) return "";
    return name.substr(0, pos) + container + ".{L}." + name.substr(pos + at.size());
}

class Folder {
public:
    Folder(Program &p) : p_(p), g_(p.header) {}

    int64_t run()
    {
        if (!split()) return 0;
        for (auto &l : layers_)
            if (!boundaries(l)) return 0;
        for (size_t i = 0; i + 1 < layers_.size(); i++)
            if (layers_[i].carry_out != layers_[i + 1].carry_in) return 0;
        carry_shape_ = g_.tensor(layers_[0].carry_in).shape;
        for (auto &l : layers_)
            for (const auto &t : {l.carry_in, l.carry_out}) {
                const Tensor &tt = g_.tensor(t);
                if (tt.shape != carry_shape_ || tt.dtype != DType::F32) return 0;
            }
        // a layer's output is read only by the next layer (or after the last)
        for (size_t i = 0; i + 1 < layers_.size(); i++) {
            const std::string &c = layers_[i].carry_out;
            if (g_.is_output(c)) return 0;
            for (const Node *u : g_.consumers(c))
                if (!layers_[i + 1].produced.count(u->output)) return 0;
        }
        if (!sealed()) return 0;
        std::vector<std::string> canon0 = canonical(0);
        for (size_t i = 1; i < layers_.size(); i++)
            if (canonical(i) != canon0) return 0;
        build();
        return static_cast<int64_t>(layers_.size());
    }

private:
    bool split()
    {
        const std::vector<const Node *> nodes = g_.node_list();
        size_t i = 0;
        while (i < nodes.size() && !layer_of(nodes[i]->origin)) head_.push_back(nodes[i++]);
        int64_t expect = 0;
        while (i < nodes.size()) {
            auto tag = layer_of(nodes[i]->origin);
            if (!tag) break;
            if (container_.empty()) container_ = tag->container;
            if (tag->container != container_) return false;
            if (tag->index == expect) {
                layers_.emplace_back();
                expect++;
            } else if (tag->index != expect - 1) {
                return false;  // out of order or a layer that comes back later
            }
            layers_.back().nodes.push_back(nodes[i]);
            layers_.back().produced.insert(nodes[i]->output);
            i++;
        }
        for (; i < nodes.size(); i++) {
            if (layer_of(nodes[i]->origin)) return false;
            tail_.push_back(nodes[i]);
        }
        return layers_.size() >= 2;
    }

    // Before the layers only the carry leaves; after them only the last
    // carry, inputs and constants are read, and every output is made there.
    bool sealed()
    {
        std::set<std::string> head, tail;
        for (const Node *n : head_) head.insert(n->output);
        for (const Node *n : tail_) tail.insert(n->output);
        const std::string &in0 = layers_.front().carry_in, &last = layers_.back().carry_out;
        for (const Node *u : g_.consumers(in0))
            if (!head.count(u->output) && !layers_.front().produced.count(u->output)) return false;
        for (const Node *n : tail_)
            for (const auto &in : n->inputs) {
                Storage s = g_.tensor(in).storage;
                if (!tail.count(in) && in != last && s != Storage::Input && s != Storage::Weight) return false;
            }
        for (const auto &o : p_.outputs)
            if (!tail.count(o) && o != last) return false;
        return true;
    }

    bool boundaries(Layer &l)
    {
        std::set<std::string> ins, outs, graph_inputs;
        for (const Node *n : l.nodes) {
            for (const auto &in : n->inputs) {
                if (l.produced.count(in)) continue;
                Storage s = g_.tensor(in).storage;
                if (s == Storage::Weight) continue;
                (s == Storage::Input ? graph_inputs : ins).insert(in);
            }
            bool outside = g_.is_output(n->output);
            for (const Node *u : g_.consumers(n->output))
                if (!l.produced.count(u->output)) outside = true;
            if (outside) outs.insert(n->output);
        }
        if (ins.empty() && &l == &layers_.front()) {  // the carry is a graph input: the one the next layer does not read
            for (const Node *n : layers_[1].nodes)
                for (const auto &in : n->inputs) graph_inputs.erase(in);
            if (graph_inputs.size() == 1) ins = graph_inputs;
        }
        if (ins.size() != 1 || outs.size() != 1) return false;
        l.carry_in = *ins.begin();
        l.carry_out = *outs.begin();
        return true;
    }

    // A layer as text, with its own names replaced by positions and weights
    // by their layer-0 form: equal text = the same computation.
    std::vector<std::string> canonical(size_t li)
    {
        const Layer &l = layers_[li];
        std::map<std::string, std::string> local;
        for (size_t k = 0; k < l.nodes.size(); k++) local[l.nodes[k]->output] = "%" + std::to_string(k);
        local[l.carry_in] = "%in";
        std::vector<std::string> out;
        for (const Node *n : l.nodes) {
            std::string s = std::string(op_name(n->op)) + "(";
            for (const auto &in : n->inputs) {
                if (local.count(in)) {
                    s += local[in] + ",";
                    continue;
                }
                const Tensor &t = g_.tensor(in);
                if (t.storage == Storage::Input) {
                    s += "input:" + in + ",";
                    continue;
                }
                s += weight_key(li, t) + ",";
            }
            s += ")";
            for (const auto &[k, v] : n->attrs) {
                s += " " + k + "=";
                s += attr_str(v);
            }
            s += " -> " + shape_str(g_.tensor(n->output).shape) + dtype_name(g_.tensor(n->output).dtype);
            out.push_back(s);
        }
        return out;
    }

    std::string weight_key(size_t li, const Tensor &t)
    {
        std::string key = t.source.transposed ? "T:" : "";
        for (const auto &part : t.source.parts) {
            std::string pat = layer_pattern(part, container_, static_cast<int64_t>(li));
            if (pat.empty()) return key + "same:" + same_constant(li, t);
            key += pat + "|";
        }
        return key + shape_str(t.shape) + dtype_name(t.dtype);
    }

    // A constant not named after its layer: equal in every layer to layer 0's
    // constant at the same place, identified by layer 0's tensor name.
    std::string same_constant(size_t li, const Tensor &t)
    {
        if (li == 0) {
            shared_.insert(t.name);
            return t.name;
        }
        // find the layer-0 tensor at the same position
        const Layer &l = layers_[li], &l0 = layers_[0];
        for (size_t k = 0; k < l.nodes.size() && k < l0.nodes.size(); k++)
            for (size_t j = 0; j < l.nodes[k]->inputs.size() && j < l0.nodes[k]->inputs.size(); j++) {
                if (l.nodes[k]->inputs[j] != t.name) continue;
                const Tensor &t0 = g_.tensor(l0.nodes[k]->inputs[j]);
                if (t0.name == t.name) return t.name;
                const ConstData *a = constant_value(p_, t0), *b = constant_value(p_, t);
                if (a && b && a->shape == b->shape && a->v == b->v) return t0.name;
                return "differs:" + t.name;
            }
        return "differs:" + t.name;
    }

    // ---- rebuilding the sections
    void copy_tensor(Graph &dst, const std::string &name, const std::string &as, Storage storage)
    {
        if (dst.has_tensor(as)) return;
        Tensor t = g_.tensor(name);
        t.name = as;
        t.storage = storage;
        if (storage == Storage::Carry) t.reference.clear();  // one layer's input stands for every layer's
        dst.add_tensor(t);
    }

    // `per_layer`: the copies run for every layer, so a reference to layer 0's exported node is dropped.
    void copy_nodes(Graph &dst, const std::vector<const Node *> &nodes, std::map<std::string, std::string> &rename,
                    const std::string &carry_out, bool per_layer)
    {
        for (const Node *src : nodes) {
            Node n = *src;
            for (auto &in : n.inputs) {
                auto it = rename.find(in);
                if (it != rename.end()) {
                    in = it->second;
                    continue;
                }
                const Tensor &t = g_.tensor(in);
                if (t.storage == Storage::Input || t.storage == Storage::Weight) copy_tensor(dst, in, in, t.storage);
            }
            Storage st = g_.tensor(n.output).storage;
            if (n.output == carry_out) {
                n.output = rename.count(carry_out) ? rename[carry_out] : n.output;
                st = Storage::Carry;
            }
            dst.add_node(n, st);
            if (!per_layer) dst.tensor(n.output).reference = g_.tensor(src->output).reference;
        }
    }

    void build()
    {
        std::string carry = g_.unique_name("carry");
        Program out;
        out.info = p_.info;
        out.info.n_layers = static_cast<int64_t>(layers_.size());
        out.carry = carry;
        out.carry_shape = carry_shape_;
        out.constants = p_.constants;
        out.weights_path = p_.weights_path;
        out.inputs = p_.inputs;
        out.outputs = p_.outputs;
        out.output_names = p_.output_names;
        out.symbols = p_.symbols;
        const Layer &first = layers_.front(), &last = layers_.back();

        // header: everything before layer 0, its last value written to the carry
        std::map<std::string, std::string> rename = {{first.carry_in, carry}};
        Storage in_storage = g_.tensor(first.carry_in).storage;
        if (in_storage == Storage::Input) {
            copy_tensor(out.header, first.carry_in, first.carry_in, Storage::Input);
            Node c;
            c.op = Op::COPY;
            c.name = carry;
            c.output = carry;
            c.inputs = {first.carry_in};
            c.origin.source = "the input enters the layers";
            out.header.add_node(c, Storage::Carry);
        } else {
            copy_nodes(out.header, head_, rename, first.carry_in, false);
        }
        out.header.mark_output(carry);

        // block: layer 0 on the carry, its weights by layer pattern
        Graph &b = out.block;
        copy_tensor(b, first.carry_in, carry, Storage::Carry);
        std::map<std::string, std::string> brename = {{first.carry_in, carry}, {first.carry_out, carry + "_out"}};
        for (const Node *n : first.nodes)
            for (const auto &in : n->inputs) {
                const Tensor &t = g_.tensor(in);
                if (t.storage != Storage::Weight || brename.count(in)) continue;
                Tensor w = t;
                bool per_layer = true;
                for (auto &part : w.source.parts) {
                    std::string pat = layer_pattern(part, container_, 0);
                    if (pat.empty()) per_layer = false;
                    else part = pat;
                }
                if (!per_layer) continue;  // shared constant: copied as is
                w.name = layer_pattern(t.name, container_, 0).empty() ? t.name + "{L}" : layer_pattern(t.name, container_, 0);
                w.name = replace_all(w.name, "{L}", "L");
                if (!b.has_tensor(w.name)) b.add_tensor(w);
                brename[in] = w.name;
            }
        copy_nodes(b, first.nodes, brename, first.carry_out, true);
        b.mark_output(carry + "_out");
        // comments name the module of every layer: "h.0.attn" -> "h.{L}.attn"
        std::regex layer0("(^|\\.)" + std::regex_replace(container_, std::regex("\\."), "\\.") + "\\.0(\\.|$)");
        for (const Node &n : b.nodes())
            b.edit(n.name).origin.module = std::regex_replace(n.origin.module, layer0, "$1" + container_ + ".{L}$2",
                                                              std::regex_constants::format_first_only);

        // footer: the carry in, everything after the last layer
        Graph &f = out.footer;
        copy_tensor(f, last.carry_out, carry, Storage::Carry);
        std::map<std::string, std::string> frename = {{last.carry_out, carry}};
        if (g_.is_output(last.carry_out)) {  // the last layer's output is returned: copy the carry out
            Node c;
            c.op = Op::COPY;
            c.name = f.unique_name(last.carry_out);
            c.output = last.carry_out;
            c.inputs = {carry};
            c.origin.source = "the layers' output";
            f.add_node(c, Storage::Output);
        }
        copy_nodes(f, tail_, frename, "", false);
        for (const auto &o : p_.outputs) f.mark_output(o);
        p_ = std::move(out);
    }

    Program &p_;
    const Graph &g_;
    std::vector<const Node *> head_, tail_;
    std::vector<Layer> layers_;
    std::string container_;
    Shape carry_shape_;
    std::set<std::string> shared_;
};

// Values computed before the layers from graph inputs and constants alone and read inside them (the padding
// mask transformers builds from an attention_mask input: CAST, INDEX, WHERE) would be a second value entering
// every layer (one read by the first layer alone is its carry). Each layer gets its own copy of the nodes that make them instead, placed before its first node, and
// the originals go when nothing else reads them. A mask is a byte per score: computing it once per layer costs
// little next to the attention that reads it. Returns whether anything was copied.
bool copy_input_values_into_layers(Graph &g)
{
    std::set<std::string> input_only;  // activations made before the layers from inputs and constants alone
    std::vector<std::vector<const Node *>> layers;
    std::vector<std::string> layer_module;
    std::string container;
    for (const Node *n : g.node_list()) {
        auto tag = layer_of(n->origin);
        if (!tag) {
            if (!layers.empty() || op_def(n->op).side_effects) continue;
            bool ok = true;
            for (const auto &in : n->inputs) {
                Storage s = g.tensor(in).storage;
                ok = ok && (s == Storage::Input || s == Storage::Weight || input_only.count(in));
            }
            if (ok) input_only.insert(n->output);
            continue;
        }
        if (container.empty()) container = tag->container;
        if (tag->container != container) return false;
        if (tag->index == static_cast<int64_t>(layers.size())) {
            layers.emplace_back();
            layer_module.push_back(tag->container + "." + std::to_string(tag->index));
        }
        if (tag->index != static_cast<int64_t>(layers.size()) - 1) return false;  // split() refuses it anyway
        layers.back().push_back(n);
    }
    if (layers.size() < 2) return false;
    // only values more than one layer reads: the one only the first reads is the carry (the embeddings)
    std::map<std::string, std::set<size_t>> readers;
    for (size_t li = 0; li < layers.size(); li++)
        for (const Node *n : layers[li])
            for (const auto &in : n->inputs)
                if (input_only.count(in)) readers[in].insert(li);
    std::set<std::string> shared;
    for (const auto &[t, ls] : readers)
        if (ls.size() > 1) shared.insert(t);
    std::set<std::string> copied_from;
    for (size_t li = 0; li < layers.size(); li++) {
        // the input-only values this layer reads, and the nodes making them, in graph order
        std::set<std::string> need;
        std::vector<std::string> stack;
        for (const Node *n : layers[li])
            for (const auto &in : n->inputs)
                if (shared.count(in) && need.insert(in).second) stack.push_back(in);
        while (!stack.empty()) {
            std::string t = stack.back();
            stack.pop_back();
            for (const auto &in : g.producer(t)->inputs)
                if (input_only.count(in) && need.insert(in).second) stack.push_back(in);
        }
        if (need.empty()) continue;
        std::vector<const Node *> chain;
        for (const auto &t : need) chain.push_back(g.producer(t));
        std::sort(chain.begin(), chain.end(), [&](const Node *a, const Node *b) { return g.runs_before(a->name, b->name); });
        std::map<std::string, std::string> rename;
        std::string first = layers[li].front()->name;
        for (const Node *src : chain) {
            Node n = *src;
            n.name = g.unique_name(src->name + "_l" + std::to_string(li));
            n.output = g.unique_name(src->output + "_l" + std::to_string(li));
            for (auto &in : n.inputs)
                if (rename.count(in)) in = rename[in];
            n.origin.source = n.origin.str() + " (copied into the layer)";
            n.origin.module = layer_module[li];
            rename[src->output] = n.output;
            copied_from.insert(src->output);
            g.insert_node(n, first);
        }
        for (const Node *n : layers[li])
            for (size_t k = 0; k < n->inputs.size(); k++)
                if (rename.count(n->inputs[k])) g.set_input(n->name, k, rename[n->inputs[k]]);
    }
    // the originals nothing reads any more, last first
    std::vector<const Node *> all = g.node_list();
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        const Node *n = *it;
        if (!copied_from.count(n->output) || g.is_output(n->output) || !g.consumers(n->output).empty()) continue;
        std::string out = n->output;
        g.remove_node(n->name);
        g.remove_tensor(out);
    }
    return !copied_from.empty();
}

}  // namespace

int64_t fold_layers(Program &p)
{
    if (p.info.kind != ModelKind::Graph || !p.block.nodes().empty()) return 0;
    // an output written into an input is planned against that input's readers: all in one section
    for (const auto &o : p.outputs)
        if (p.header.has_tensor(o) && !p.header.tensor(o).into.empty()) return 0;
    int64_t n = 0;
    Program trial = p;  // the layers with their own copies of the input-only values, kept if they fold
    if (copy_input_values_into_layers(trial.header)) {
        Folder f(trial);
        if ((n = f.run())) p = std::move(trial);
    }
    if (!n) {
        Folder f(p);
        n = f.run();
    }
    if (n) {
        for (Section s : p.sections()) p.section(s).verify(std::string("fold_layers, ") + Program::section_name(s));
    }
    return n;
}

}  // namespace ckc
