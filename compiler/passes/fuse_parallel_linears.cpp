// fuse_parallel_linears — one GEMM for several projections of the same input.
//
//   q = MATMUL(x, Wq); k = MATMUL(x, Wk); v = MATMUL(x, Wv)
//     -> qkv = MATMUL(x, [Wq;Wk;Wv]); q = SLICE(qkv, 0..); k = SLICE(qkv, ..); v = SLICE(qkv, ..)
//
// The same rewrite gives Llama's fused gate|up GEMM feeding SwiGLU. The fused rows take the program's name
// for exactly these parts (ModelInfo::sizes: CK_QKV_DIM), so call sites name the fused width. One
// larger GEMM streams x once and keeps both cores busy on small widths. The
// weights become one checkpoint-backed tensor whose parts are concatenated
// along dim 0 at load time (in place when they are adjacent in the file).
// MATMUL_ADDs whose addend is a [N] weight bias fuse too (biases concatenate).
// The slices are column views (no copy): the rewrite only fires when every
// reader of every product accepts a row-strided input (OpDef::strided).
//
// More than CK_WEIGHT_MAX_PARTS GEMMs (what the weight loader concatenates)
// fuse in runs of that many.
//
// Left alone: GEMMs whose B is not a weight or is stored transposed (Conv1D),
// a mix of biased and unbiased GEMMs, GEMMs with a full-size addend (a
// residual), products that are graph outputs, and groups of one.
#include <algorithm>
#include <map>

#include "ck_weights.h"  // CK_WEIGHT_MAX_PARTS
#include "passes/pass.h"
#include "support/util.h"

namespace ckc {

namespace {

bool is_weight(const Graph &g, const std::string &t)
{
    return g.tensor(t).storage == Storage::Weight;
}

// The kind of GEMM this node is, for grouping: 0 = not fusable, 1 = plain, 2 = with a weight bias.
int gemm_kind(const Graph &g, const Node &n)
{
    // weights in nn.Linear layout ([N, K], transpose_b): their rows concatenate
    if (n.i("transpose_b", 0) == 0 || n.i("transpose_a", 0) || g.tensor(n.inputs[1]).shape.size() != 2) return 0;
    if (n.op == Op::MATMUL) return is_weight(g, n.inputs[1]) ? 1 : 0;
    if (n.op == Op::MATMUL_ADD && n.inputs.size() == 3 && is_weight(g, n.inputs[1]) && is_weight(g, n.inputs[2]) &&
        g.tensor(n.inputs[2]).shape.size() == 1)
        return 2;
    return 0;
}

bool readers_accept_views(const Graph &g, const std::string &t)
{
    if (g.is_output(t)) return false;
    for (const Node *c : g.consumers(t)) {
        uint32_t strided = op_def(c->op).strided;
        for (size_t i = 0; i < c->inputs.size(); i++)
            if (c->inputs[i] == t && !(strided & (1u << i))) return false;
    }
    return true;
}

// The name of the fused rows: the program's size concatenating exactly the parts' named sizes (CK_QKV_DIM
// for CK_Q_DIM | CK_KV_DIM | CK_KV_DIM), else "" (unnamed parts: an exported graph).
std::string fused_dim(const Program &p, const Graph &g, const std::vector<std::string> &names)
{
    std::vector<std::string> parts;
    for (const auto &n : names) parts.push_back(g.tensor(n).dim(0));
    for (const auto &s : p.info.sizes)
        if (!s.parts.empty() && s.parts == parts) return s.name;
    return "";
}

Tensor concat_weight(const Program &p, Graph &g, const std::vector<std::string> &names)
{
    Tensor t;
    t.name = g.unique_name(merge_names(names));
    t.storage = Storage::Weight;
    int64_t rows = 0;
    for (const auto &n : names) {
        const Tensor &w = g.tensor(n);
        rows += w.shape[0];
        t.source.parts.insert(t.source.parts.end(), w.source.parts.begin(), w.source.parts.end());
        t.source.part_shapes.insert(t.source.part_shapes.end(), w.source.part_shapes.begin(), w.source.part_shapes.end());
    }
    const Tensor &first = g.tensor(names[0]);
    t.shape = first.shape;
    t.shape[0] = rows;
    t.dims = first.dims;  // the rows' name is the fused one; the columns (K) are every part's
    if (!t.dims.empty()) t.dims[0] = fused_dim(p, g, names);
    return t;
}

bool fuse_group(const Program &p, Graph &g, const std::vector<std::string> &node_names)
{
    std::vector<Node> group;
    for (const auto &n : node_names) group.push_back(*g.node(n));
    for (const Node &n : group)  // one GEMM: the same layout and scale for all
        if (n.attrs != group[0].attrs) return false;
    std::vector<std::string> weights, biases, outputs, modules;
    for (const Node &n : group) {
        weights.push_back(n.inputs[1]);
        if (n.inputs.size() == 3) biases.push_back(n.inputs[2]);
        outputs.push_back(n.output);
        modules.push_back(n.origin.module);
    }
    if (weights.size() > CK_WEIGHT_MAX_PARTS) return false;  // the runtime loader concatenates this many parts
    for (const auto &w : weights)  // the loader concatenates plain parts; transposed ones load alone
        if (g.tensor(w).source.parts.size() != 1 || g.tensor(w).source.transposed) return false;

    Tensor w = concat_weight(p, g, weights);
    g.add_tensor(w);
    Node fused;
    fused.op = biases.empty() ? Op::MATMUL : Op::MATMUL_ADD;
    fused.attrs = group[0].attrs;
    fused.inputs = {group[0].inputs[0], w.name};
    if (!biases.empty()) {
        Tensor b = concat_weight(p, g, biases);
        g.add_tensor(b);
        fused.inputs.push_back(b.name);
    }
    fused.output = g.unique_name(merge_names(outputs));
    fused.name = fused.output;
    fused.origin = {merge_names(modules), "parallel GEMMs of one input, fused"};

    std::string first = group[0].name;
    for (const Node &n : group)
        if (g.runs_before(n.name, first)) first = n.name;
    g.insert_node(fused, first);

    int64_t col = 0;
    std::string after = fused.name;  // slices follow the GEMM, in column order
    for (const Node &n : group) {
        int64_t width = g.tensor(n.output).shape.back();
        g.remove_node(n.name);
        Node slice;
        slice.op = Op::SLICE;
        slice.inputs = {fused.output};
        slice.output = n.output;  // consumers keep reading the same name
        slice.name = n.name;
        slice.origin = n.origin;
        slice.attrs = {{"start", col}, {"length", width}};
        g.insert_after(slice, after);
        after = slice.name;
        col += width;
    }
    for (const auto &t : weights) g.remove_tensor(t);
    for (const auto &t : biases) g.remove_tensor(t);
    return true;
}

}  // namespace

bool fuse_parallel_linears(Graph &g, const Program &p)
{
    // group fusable GEMMs by (input, kind, K), in program order
    std::map<std::tuple<std::string, int, int64_t>, std::vector<std::string>> groups;
    std::vector<std::tuple<std::string, int, int64_t>> order;
    for (const Node &n : g.nodes()) {
        int kind = gemm_kind(g, n);
        if (!kind || !readers_accept_views(g, n.output)) continue;
        auto key = std::make_tuple(n.inputs[0], kind, g.tensor(n.inputs[1]).shape[1]);
        if (!groups.count(key)) order.push_back(key);
        groups[key].push_back(n.name);
    }
    // the loader concatenates at most CK_WEIGHT_MAX_PARTS parts: larger groups fuse in runs of that many
    bool changed = false;
    for (const auto &key : order) {
        const std::vector<std::string> &all = groups[key];
        for (size_t at = 0; at + 1 < all.size(); at += CK_WEIGHT_MAX_PARTS) {
            size_t end = std::min(all.size(), at + CK_WEIGHT_MAX_PARTS);
            if (end - at >= 2) changed |= fuse_group(p, g, {all.begin() + at, all.begin() + end});
        }
    }
    return changed;
}

}  // namespace ckc
