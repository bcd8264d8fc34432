// fuse_elementwise — connected elementwise ops become one EW node: a program
// (ir/ew_program.h) the runtime runs chunk by chunk (ck_ew), so the
// intermediates never reach memory.
//
// Exported and torch.compile graphs arrive decomposed: LayerNorm's and
// GELU's backwards, AdamW's update, a hand-written norm are chains of
// ADD/SUB/MUL/DIV and unary ops, each a full pass over memory. A group
// grows from its last node (the root) up through producers whose every
// reader is in the group and whose output has the root's shape; its inputs
// may broadcast when the kernel can index them as (i / div) % mod (the same
// shape, a scalar, a row [.., N] or a column [.., M, 1] of the output).
// Exported graphs only: the language-model families' ops are fused by hand.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "ck_kernels.h"
#include "ir/ew_program.h"
#include "ir/op_rules.h"
#include "passes/match.h"
#include "passes/pass.h"

namespace ckc {

namespace {

// The ck_ewop of an op of the kernel tables (CK_BINARY_OPS, CK_UNARY_OPS), or nothing.
std::optional<int> ew_code(Op op)
{
    if (const BinaryRow *b = binary_row(op)) return static_cast<int>(b->code);
    if (const UnaryRow *u = unary_row(op)) return CK_EW_UNARY + static_cast<int>(u->code);
    return std::nullopt;
}

bool fusible(const Graph &g, const Node &n)
{
    if (!ew_code(n.op)) return false;
    const Tensor &out = g.tensor(n.output);
    if (out.dtype != DType::F32 || shape_has_tokens(out.shape)) return false;
    for (const auto &x : n.inputs) {
        const Tensor &t = g.tensor(x);
        if (t.dtype != DType::F32 || !ew_index(t.shape, out.shape)) return false;
    }
    return true;
}

EwInsn instruction(const Node &n, const std::map<std::string, int> &slot)
{
    EwInsn p;
    p.op = *ew_code(n.op);
    if (unary_row(n.op)) {
        p.a = slot.at(n.inputs[0]);
        p.imm = n.f("exponent", 0.0);
        return p;
    }
    if (n.inputs.size() == 2) {
        p.a = slot.at(n.inputs[0]);
        p.b = slot.at(n.inputs[1]);
    } else {
        p.imm = n.f("scalar");
        (n.i("reverse", 0) ? p.b : p.a) = slot.at(n.inputs[0]);
    }
    return p;
}

}  // namespace

bool fuse_elementwise(Graph &g, Program &p)
{
    if (p.info.kind != ModelKind::Graph) return false;
    const std::vector<Node> nodes(g.nodes().begin(), g.nodes().end());
    std::map<std::string, int> index;
    for (size_t i = 0; i < nodes.size(); i++) index[nodes[i].name] = static_cast<int>(i);
    std::vector<int> group(nodes.size(), -1);
    std::vector<std::vector<int>> groups;

    for (int r = static_cast<int>(nodes.size()) - 1; r >= 0; r--) {
        if (group[r] >= 0 || !fusible(g, nodes[r])) continue;
        int gid = static_cast<int>(groups.size());
        const Shape &shape = g.tensor(nodes[r].output).shape;
        std::vector<int> members = {r};
        std::set<std::string> inputs(nodes[r].inputs.begin(), nodes[r].inputs.end());  // read from outside
        group[r] = gid;
        for (bool grew = true; grew;) {
            grew = false;
            for (const std::string &x : std::set<std::string>(inputs)) {
                const Node *pn = g.producer(x);
                if (!pn || members.size() >= CK_EW_MAX_INSNS || g.is_output(x)) continue;
                int pi = index.at(pn->name);
                if (group[pi] >= 0 || g.tensor(x).shape != shape || !fusible(g, *pn)) continue;
                bool inside = true;
                for (const Node *c : g.consumers(x)) inside = inside && group[index.at(c->name)] == gid;
                if (!inside) continue;
                std::set<std::string> grown = inputs;
                grown.erase(x);
                grown.insert(pn->inputs.begin(), pn->inputs.end());
                if (grown.size() > CK_EW_MAX_INPUTS) continue;
                inputs = std::move(grown);
                members.push_back(pi);
                group[pi] = gid;
                grew = true;
            }
        }
        groups.push_back(members);
    }

    bool changed = false;
    for (std::vector<int> members : groups) {
        if (members.size() < 2) continue;
        std::sort(members.begin(), members.end());
        std::vector<std::string> ext;
        std::map<std::string, int> slot;
        for (int m : members)
            for (const auto &x : nodes[m].inputs) {
                const Node *pn = g.producer(x);
                bool internal = pn && std::find(members.begin(), members.end(), index.at(pn->name)) != members.end();
                if (!internal && !slot.count(x)) {
                    slot[x] = static_cast<int>(ext.size());
                    ext.push_back(x);
                }
            }
        std::vector<EwInsn> prog;
        for (int m : members) {
            prog.push_back(instruction(nodes[m], slot));
            slot[nodes[m].output] = static_cast<int>(ext.size() + prog.size() - 1);
        }
        const Node &root = nodes[members.back()];
        Node ew;
        ew.op = Op::EW;
        ew.inputs = ext;
        ew.attrs["shape"] = g.tensor(root.output).shape;
        ew.attrs["program"] = format_ew_program(prog, static_cast<int>(ext.size()));
        if (root.has("reference")) ew.attrs["reference"] = root.attrs.at("reference");
        replace_node(g, *g.node(root.name), ew);
        changed = true;
    }
    return changed;
}

}  // namespace ckc
