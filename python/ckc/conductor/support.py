"""Which ATen nodes ckc can run inside a compiled partition, and why not when it cannot.

A node runs in C when export.py has a handler for its ATen op and its values are float32 / int64 / int32 / bool
(float64 scalars computed in float32; comparisons, where, tril and casts too: folded when their inputs are
constants, else run by select.c); big
fills stay eager (they would be constants the size of a vocabulary matrix in the library); copy_ is compiled
only as a final in-place update of a graph input."""
import importlib

ex = importlib.import_module("ckc.export")  # the module (the package's `export` attribute is the function)


_DTYPES = None  # the torch dtypes a compiled partition reads and writes (set on first use)


# ATen ops that only move or view data: a partition of nothing else is left to eager (no work to compile)
LAYOUT_ONLY = {"aten.view", "aten._unsafe_view", "aten.reshape", "aten.permute", "aten.t", "aten.transpose",
                "aten.unsqueeze", "aten.squeeze", "aten.expand", "aten.clone", "aten.alias", "aten.detach",
                "aten.slice", "aten.select", "aten.split", "aten.split_with_sizes", "getitem", "aten._to_copy",
                "aten.lift_fresh_copy", "aten.contiguous", "aten.flatten", "aten.unflatten", "aten.view_as"}


def torch_dtypes():
    global _DTYPES
    if _DTYPES is None:
        import torch
        _DTYPES = {torch.float32, torch.int64, torch.int32, torch.bool}
    return _DTYPES


# Fills larger than this many elements run eagerly: compiled in, a zeros [vocab, dim] (the embedding
# gradient's base in a backward graph) would be a constant of that many floats in the library and its file
BIG_FILL = 1 << 20


FILLS = {"aten.full", "aten.zeros", "aten.ones", "aten.empty", "aten.full_like", "aten.zeros_like",
          "aten.ones_like", "aten.empty_like", "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.new_empty"}


def big_fill(node):
    """The element count of a fill node larger than BIG_FILL, else 0."""
    import torch
    if node.op != "call_function" or ex._target_name(node) not in FILLS:
        return 0
    if ex._zero_fill(node) and node.users and all(
            ex._target_name(u) in ("aten.index_put", "aten._unsafe_index_put") and u.args[0] is node
            for u in node.users):
        return 0  # the base of a scatter (the embedding backward's): INDEX_PUT starts from zeros itself
    v = node.meta.get("val")
    n = v.numel() if isinstance(v, torch.Tensor) else 0
    return n if isinstance(n, int) and n > BIG_FILL else 0


def static_nodes(gm):
    """Constants (get_attr) and nodes computed from them only (iota, constant fills, masks), which ckc folds at
    compile time; not a big fill (BIG_FILL)."""
    static = set()
    for n in gm.graph.nodes:
        if n.op == "get_attr" or (n.op == "call_function" and all(a in static for a in n.all_input_nodes)
                                  and not big_fill(n)):
            static.add(n)
    return static


def values_ok(node):
    """None when every tensor value of the node has a dtype ckc computes with, else the reason."""
    import torch
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    for v in vals:
        for t in (v if isinstance(v, (tuple, list)) else [v]):
            if isinstance(t, torch.Tensor) and t.dtype not in torch_dtypes() and not ex.float64_scalar(t):
                return f"{t.dtype} values (ckc computes in float32, with int64 / int32 / bool ids and masks)"
    return None


def float64_scalars(nodes):
    """Positions among `nodes` (a graph's outputs) of the float64 scalars ckc computes in float32
    (export._value_dtype): the caller gets them back as float64, as the graph declares them."""
    import torch
    return [k for k, n in enumerate(nodes) if isinstance(n, torch.fx.Node) and ex.float64_scalar(n.meta.get("val"))]


def as_declared(outs, doubles):
    """outs (a list of the library's outputs) with those at `doubles` (float64_scalars) made float64 again."""
    for k in doubles:
        outs[k] = outs[k].double()
    return outs


def update_reason(node):
    """None when copy_(dst, src) is a final in-place update of a graph input ckc can write directly (graph.json
    "into"), else why not."""
    import torch
    dst, src = node.args[0], node.args[1]
    if not (isinstance(dst, torch.fx.Node) and dst.op == "placeholder"):
        return "copy_ into something else than an input of the graph"
    if not (isinstance(src, torch.fx.Node) and src.op == "call_function") or node.users or node.kwargs:
        return "copy_ of an input, or whose result is read"
    d, s = dst.meta.get("val"), src.meta.get("val")
    if not (isinstance(d, torch.Tensor) and isinstance(s, torch.Tensor)) or d.shape != s.shape or \
            d.dtype != s.dtype or not d.is_contiguous():
        return "copy_ that converts, broadcasts or writes a strided input"
    # (FX nodes compare by their place in the graph: no index of the whole graph per copy_, an optimizer has
    # four per parameter)
    if any(u > node for u in dst.users) or sum(1 for u in dst.users if u.target is torch.ops.aten.copy_.default) > 1:
        return "the input is read after copy_, or updated twice"
    return None


def unsupported_reason(node, rejected):
    """None when ckc can run `node` in a partition, else why not; `rejected`: {node name: reason} decided earlier."""
    if node.op != "call_function":
        return "not an op"
    if node.name in rejected:
        return rejected[node.name]
    if ex._target_name(node) == "aten.copy_":
        return update_reason(node)
    if big_fill(node):
        return (f"a fill of {big_fill(node)} elements runs eagerly (compiled in, it would be a constant of that "
                "size in the library)")
    name = ex._target_name(node)
    if name not in ex._HANDLERS:
        return f"no ckc handler for {name}"
    return values_ok(node)
