"""torch.compile(backend="gcu"): dynamo's FX graph -> ATen (AOTAutograd, core ATen decompositions) ->
partitions ckc compiles -> generated C -> cc -> loaded libraries, with the rest run eagerly in between.

Training: AOTAutograd's backward graph (the joint graph's second half) goes through the same partitioning,
per-node fallback and per-shape builds, so loss.backward() runs in ckc's C too; LayerNorm is decomposed in
training graphs (its mean / rstd are saved for the backward, which ckc's LAYERNORM does not return).

The compiled forward is specialised on first call for the concrete shapes it sees (ckc plans memory for
static shapes); a graph dynamo traced with symbolic sizes gets one artifact per concrete shape. Every
placeholder, parameters included, is an input of the compiled C: parameters are read in place from the
module's tensors on each call (nothing is copied into the library), so an in-place update of a parameter
is seen by the next call without recompiling.

Partitioning is per node: a node runs in C when export.py has a handler for its ATen op and its values
are float32 / int64 / int32 / bool; maximal groups of such nodes become one library each
(torch.fx's CapabilityBasedPartitioner), the other nodes run eagerly between them. When ckc rejects a
node while converting a partition (an unsupported argument, say), that node joins the eager ones and the
graph is partitioned again; when a partition fails later (ckc compile or cc), that partition runs
eagerly, with one warning naming its first op, the node and the reason.
"""
import copy
import hashlib
import importlib
import logging
import operator
import os
import warnings
from dataclasses import dataclass, field

from . import cache
from .cache import get_or_build

ex = importlib.import_module("ckc.export")  # the module (the package's `export` attribute is the function)

log = logging.getLogger("ckc.conductor")

_DTYPES = None  # the torch dtypes a compiled partition reads and writes (set on first use)
# ATen ops that only move or view data: a partition of nothing else is left to eager (no work to compile)
_LAYOUT_ONLY = {"aten.view", "aten._unsafe_view", "aten.reshape", "aten.permute", "aten.t", "aten.transpose",
                "aten.unsqueeze", "aten.squeeze", "aten.expand", "aten.clone", "aten.alias", "aten.detach",
                "aten.slice", "aten.select", "aten.split", "aten.split_with_sizes", "getitem", "aten._to_copy",
                "aten.lift_fresh_copy", "aten.contiguous", "aten.flatten", "aten.unflatten", "aten.view_as"}


@dataclass
class NodeReport:
    node: str
    op: str
    compiled: bool
    partition: str = ""
    reason: str = ""


@dataclass
class GraphReport:
    """What one compiled graph became: one row per ATen node."""
    name: str
    shapes: str
    nodes: list = field(default_factory=list)
    partitions: int = 0

    def eager(self):
        return [n for n in self.nodes if not n.compiled]

    def __str__(self):
        lines = [f"graph {self.name} {self.shapes}: {len(self.nodes) - len(self.eager())} of {len(self.nodes)} "
                 f"nodes compiled in {self.partitions} partition(s)"]
        for n in self.nodes:
            where = f"compiled ({n.partition})" if n.compiled else "eager"
            lines.append(f"  {n.node:<24} {n.op:<32} {where}{': ' + n.reason if n.reason else ''}")
        return "\n".join(lines)


class Reports(list):
    """Every graph's report, in compile order (what ckc.explain returns)."""

    def __str__(self):
        return "\n".join(map(str, self)) if self else "no graph was compiled"


_collector = None  # a Reports list while ckc.explain runs


def _torch_dtypes():
    global _DTYPES
    if _DTYPES is None:
        import torch
        _DTYPES = {torch.float32, torch.int64, torch.int32, torch.bool}
    return _DTYPES


# ATen ops ckc maps to compile-time-only ops (CMP, WHERE, TRIL, CAST: evaluated on constants, folded away):
# in a partition they need inputs computed from constants only
_FOLD_ONLY = {"aten.where", "aten.tril", "aten.eq", "aten.ne", "aten.lt", "aten.le", "aten.gt", "aten.ge",
              "aten.logical_not", "aten.bitwise_not"}


# Fills larger than this many elements run eagerly: compiled in, a zeros [vocab, dim] (the embedding
# gradient's base in a backward graph) would be a constant of that many floats in the library and its file
_BIG_FILL = 1 << 20
_FILLS = {"aten.full", "aten.zeros", "aten.ones", "aten.empty", "aten.full_like", "aten.zeros_like",
          "aten.ones_like", "aten.empty_like", "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.new_empty"}


def _big_fill(node):
    """The element count of a fill node larger than _BIG_FILL, else 0."""
    import torch
    if node.op != "call_function" or ex._target_name(node) not in _FILLS:
        return 0
    v = node.meta.get("val")
    n = v.numel() if isinstance(v, torch.Tensor) else 0
    return n if isinstance(n, int) and n > _BIG_FILL else 0


def _static_nodes(gm):
    """Constants (get_attr) and nodes computed from them only (iota, constant fills, masks), which ckc folds at
    compile time; not a big fill (_BIG_FILL)."""
    static = set()
    for n in gm.graph.nodes:
        if n.op == "get_attr" or (n.op == "call_function" and all(a in static for a in n.all_input_nodes)
                                  and not _big_fill(n)):
            static.add(n)
    return static


def _is_masked_fill(node, static_names):
    """where(mask, fill, x) or where(mask, x, fill) with a one-value fill and x of the result's shape: ckc's
    MASKED_FILL (export._where), which reads a run-time mask (a causal mask's backward: the gradient zeroed
    where the forward filled)."""
    import torch
    if len(node.args) != 3 or node.kwargs:
        return False
    cond, a, b = node.args

    def one_value(v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return True
        val = v.meta.get("val") if isinstance(v, torch.fx.Node) else None
        return v.name in static_names and isinstance(val, torch.Tensor) and val.numel() == 1
    if one_value(a) == one_value(b):
        return False
    x = b if one_value(a) else a
    vals = [getattr(v, "meta", {}).get("val") for v in (cond, x, node)]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    c, xv, out = vals
    return c.dtype == torch.bool and tuple(torch.broadcast_shapes(xv.shape, c.shape)) == tuple(out.shape)


def _is_static_select(node, static_names):
    """where(cond, a, b) with a compile-time condition of one value and both branches of the result's shape: one
    branch (export._where; AdamW's decomposed lerp selects between its operands by its constant weight)."""
    import torch
    if len(node.args) != 3 or node.kwargs or not all(isinstance(v, torch.fx.Node) for v in node.args):
        return False
    vals = [v.meta.get("val") for v in (*node.args, node)]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    cond, a, b, out = vals
    return node.args[0].name in static_names and cond.numel() == 1 and a.shape == b.shape == out.shape


def _needs_constants(node, static_names=frozenset()):
    """Whether ckc can run this node only when its tensor inputs are compile-time constants."""
    import torch
    name = ex._target_name(node)
    if name == "aten.where" and (_is_masked_fill(node, static_names) or _is_static_select(node, static_names)):
        return False
    if name in _FOLD_ONLY:
        return True
    if name in ("aten._to_copy", "aten.to"):
        val, src = node.meta.get("val"), node.args[0].meta.get("val") if node.args else None
        return isinstance(val, torch.Tensor) and isinstance(src, torch.Tensor) and val.dtype != src.dtype
    if name in ("aten.scaled_dot_product_attention", "ckc.sdpa"):
        mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
        return mask is not None and not mask.meta["val"].dtype.is_floating_point
    return False


def _values_ok(node):
    """None when every tensor value of the node has a dtype ckc computes with, else the reason."""
    import torch
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    for v in vals:
        for t in (v if isinstance(v, (tuple, list)) else [v]):
            if isinstance(t, torch.Tensor) and t.dtype not in _torch_dtypes():
                return f"{t.dtype} values (ckc computes in float32, with int64 / int32 / bool ids and masks)"
    return None


def _update_reason(node):
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


def _unsupported_reason(node, rejected, is_static, static_names=frozenset()):
    if node.op != "call_function":
        return "not an op"
    if node.name in rejected:
        return rejected[node.name]
    if ex._target_name(node) == "aten.copy_":
        return _update_reason(node)
    if _big_fill(node):
        return (f"a fill of {_big_fill(node)} elements runs eagerly (compiled in, it would be a constant of that "
                "size in the library)")
    name = ex._target_name(node)
    if name not in ex._HANDLERS:
        return f"no ckc handler for {name}"
    if not is_static and _needs_constants(node, static_names):
        return f"ckc evaluates {name} on constants only (masks it folds at compile time); here it reads run-time values"
    return _values_ok(node)


def _record_shapes(gm, args, keep):
    """ex.run_recording of the values keep() accepts, with the tensor arguments on the meta device when every op
    allows (what depends on constants only is still real), else for real (a scalar read from a tensor's values)."""
    import torch
    values = ex.run_recording_meta(gm, args, [isinstance(a, torch.Tensor) for a in args], keep=keep)
    return values if values is not None else ex.run_recording(gm, args, keep=keep)


def _specialize(agm, args, constants=None):
    """A copy of the ATen graph with every SymInt / scalar placeholder and size computation replaced by its
    value for these arguments, and the placeholders at the indices of `constants` by those values (graph
    constants): a static graph. Returns (graph module, indices of the arguments it still takes, record, perms):
    record(names) runs it eagerly on these arguments and returns {name: value} of those nodes only (holding
    every value of a backward graph at once would cost more than its training step); perms says which
    arguments the graph takes permuted (_read_in_place, _feed)."""
    import torch
    import torch.fx
    gm = torch.fx.GraphModule(agm, copy.deepcopy(agm.graph))
    constants = constants or {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in constants.items():
        attr = f"_ckc_constant_{i}"
        gm.register_buffer(attr, value)
        with gm.graph.inserting_before(placeholders[i]):
            const = gm.graph.get_attr(attr)
        const.meta = dict(placeholders[i].meta)
        placeholders[i].replace_all_uses_with(const)
        gm.graph.erase_node(placeholders[i])
    if constants:
        gm.recompile()
    live = [i for i in range(len(args)) if i not in constants]

    def is_scalar(_n, v):
        return isinstance(v, (int, float, bool)) and not isinstance(v, torch.Tensor)
    values = _record_shapes(gm, [args[i] for i in live], is_scalar)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    scalar = {n: values[n] for n in gm.graph.nodes
              if n.op in ("placeholder", "call_function") and isinstance(values.get(n), (int, float, bool))
              and not isinstance(values.get(n), torch.Tensor)}
    if scalar:
        def sub(a):
            return scalar[a] if isinstance(a, torch.fx.Node) and a in scalar else a
        for n in gm.graph.nodes:
            if n not in scalar:
                n.args = torch.fx.node.map_aggregate(n.args, sub)
                n.kwargs = torch.fx.node.map_aggregate(n.kwargs, sub)
        for n in reversed(list(gm.graph.nodes)):
            if n in scalar and not n.users:
                gm.graph.erase_node(n)
        gm.recompile()
    keep = [live[j] for j, p in enumerate(placeholders) if p not in scalar]
    kept_args = [args[i] for i in keep]
    perms = _read_in_place(gm, kept_args)

    def record(names):
        """{name: value} of the nodes named: on the meta device when every op allows (an optimizer step's
        values are the model's size several times over; what depends on constants only is real), else real."""
        values = _record_shapes(gm, kept_args, lambda n, _v: n.name in names)
        return {n.name: v for n, v in values.items()}
    return gm, keep, record, perms


def _layout_perm(t):
    """For a tensor that is a permutation of a contiguous one (a weight's transpose a training forward saves
    for its backward), the permutation making it contiguous; else None."""
    import torch
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.is_contiguous():
        return None
    perm = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return perm if t.permute(perm).is_contiguous() else None


def _read_in_place(gm, args):
    """Arguments laid out as a permutation of a contiguous tensor (_layout_perm) are taken in their memory
    order, and the graph permutes them back: a compiled partition reads them in place (a GEMM absorbs the
    transpose into its flags) instead of a contiguous copy per call. Rewrites gm and args (in place); returns
    {position among the arguments: permutation} for _feed."""
    import torch
    perms = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for j, (p, a) in enumerate(zip(placeholders, args)):
        perm = _layout_perm(a)
        if perm is None:
            continue
        inverse = [perm.index(d) for d in range(len(perm))]
        with gm.graph.inserting_after(p):
            back = gm.graph.call_function(torch.ops.aten.permute.default, (p, inverse))
        p.replace_all_uses_with(back, delete_user_cb=lambda u, back=back: u is not back)
        back.meta = dict(p.meta)
        _compose_permutes(gm, back, p, inverse)
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            p.meta = dict(p.meta, val=val.permute(perm))
        args[j] = a.permute(perm)
        perms[j] = perm
    if perms:
        gm.recompile()
    return perms


def _compose_permutes(gm, back, src, inverse):
    """Users of back (= permute(src, inverse)) that permute it again read src, permuted once (or not at all): the
    saved transpose of a weight, transposed back by the backward's dX = dY @ W, is the weight itself."""
    import torch
    aten = torch.ops.aten
    for u in list(back.users):
        if u.op != "call_function" or u.args[0] is not back:
            continue
        rank = len(inverse)
        if u.target is aten.permute.default:
            q = [d % rank for d in u.args[1]]
        elif u.target is aten.t.default and rank == 2:
            q = [1, 0]
        elif u.target is aten.transpose.int:
            q = list(range(rank))
            a, b = u.args[1] % rank, u.args[2] % rank
            q[a], q[b] = q[b], q[a]
        else:
            continue
        combined = [inverse[q[i]] for i in range(rank)]
        if combined == list(range(rank)):
            u.replace_all_uses_with(src)
            gm.graph.erase_node(u)
        else:
            u.target, u.args, u.kwargs = aten.permute.default, (src, combined), {}


def _feed(args, keep, perms):
    """The arguments a specialized graph takes (_specialize: those at `keep`, permuted as _read_in_place said)."""
    if not perms:
        return [args[i] for i in keep]
    return [args[i].permute(perms[j]) if j in perms else args[i] for j, i in enumerate(keep)]


def _partition_module(model, multi, keep, picks):
    """A fused submodule's replacement: an nn.Module calling the compiled library on torch tensors (the
    arguments at `keep`: the others are constants compiled in) and returning its outputs at `picks` (the
    library computes a value the submodule returns twice once: _compile_one)."""
    import torch

    class CompiledPartition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.multi, self.picks = model, multi, picks  # keeps the library loaded
            self.entry = getattr(model, "entry", None)
            self.run = model.torch_runner()

        def forward(self, *args):
            outs = self.run(*[args[i] for i in keep])
            if not self.multi:
                return outs[0] if self.picks is None or self.picks else None  # (None: it only updates inputs)
            return tuple(outs) if self.picks is None else tuple(outs[j] for j in self.picks)

    return CompiledPartition()


def _product_permuted(n):
    """When node n ends a chain of transposes / permutes (each read only by the next) of an mm / bmm result that
    nothing else reads: (the chain's nodes, their composed permutation); else None. A weight gradient comes
    as such a chain: dW^T transposed once (the chain swaps the last two dims), or twice (it undoes itself)."""
    import torch
    perm, chain = None, []
    while True:
        src = n.args[0] if n.args else None
        if not isinstance(src, torch.fx.Node) or not isinstance(src.meta.get("val"), torch.Tensor):
            return None
        name, rank = ex._target_name(n), src.meta["val"].dim()
        if name == "aten.t" and rank == 2:
            step = [1, 0]
        elif name == "aten.permute":
            step = [d % rank for d in n.args[1]]
        elif name == "aten.transpose":
            step = list(range(rank))
            a, b = n.args[1] % rank, n.args[2] % rank
            step[a], step[b] = step[b], step[a]
        else:
            return None
        perm = step if perm is None else [step[p] for p in perm]
        chain.append(n)
        if len(src.users) != 1:
            return None
        if ex._target_name(src) in ("aten.mm", "aten.bmm"):
            return chain, perm
        n = src


# ops whose result is a view of their first argument and nothing else
_PURE_VIEWS = {"aten.view", "aten._unsafe_view", "aten.permute", "aten.t", "aten.transpose", "aten.unsqueeze",
               "aten.squeeze", "aten.alias", "aten.detach"}


def _scatter_add_in_place(gm):
    """A + index_put(zeros, indices, values, accumulate=True) becomes A.index_put_(indices, values,
    accumulate=True) where nothing else reads A's memory: the gradient of an embedding tied to the LM head
    (the embedding backward's scatter-add into zeros, plus the head's dW). Saves a zero fill and an add the
    size of the vocabulary matrix, and their fresh memory, every step; the sums differ from eager's only in
    order ((A + v1) + v2 for A + (v1 + v2))."""
    import torch
    aten = torch.ops.aten
    changed = False
    for add in list(gm.graph.nodes):
        if add.op != "call_function" or add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs:
            continue
        for k in (0, 1):
            base, scatter = add.args[k], add.args[1 - k]
            if not (isinstance(base, torch.fx.Node) and isinstance(scatter, torch.fx.Node)):
                continue
            if scatter.target is not aten.index_put.default or len(scatter.users) != 1 or scatter.kwargs:
                continue
            zeros = scatter.args[0]
            if len(scatter.args) != 4 or scatter.args[3] is not True or zeros.target is not aten.full.default \
                    or zeros.args[1] != 0 or len(zeros.users) != 1:
                continue
            vals = [n.meta.get("val") for n in (zeros, base, add)]
            root = _sole_owner(base)
            if any(v is None for v in vals) or len({(tuple(v.shape), v.dtype) for v in vals}) != 1 or root is None:
                continue
            # base a view of root in root's own layout (dW^T transposed back): write root, return root; a
            # view returned as a gradient would be copied by AccumulateGrad (it keeps only a plain tensor)
            rv = root.meta.get("val")
            target = root if rv is not None and rv.shape == vals[1].shape and rv.stride() == vals[1].stride() \
                else base
            with gm.graph.inserting_before(add):
                in_place = gm.graph.call_function(aten.index_put_.default,
                                                  (target, scatter.args[1], scatter.args[2], True))
            in_place.meta = dict(add.meta)
            add.replace_all_uses_with(in_place)
            dead = [add, scatter, zeros]
            view = base
            while view is not target:  # the views from base down to root, read by nothing now
                dead.append(view)
                view = view.args[0]
            for n in dead:
                gm.graph.erase_node(n)
            changed = True
            break
    if changed:
        gm.recompile()


def _sole_owner(node):
    """The node computing node's memory (fresh, in the graph) when node reaches it through pure views, each
    value read once; else None."""
    while len(node.users) == 1 and node.op == "call_function":
        if ex._target_name(node) not in _PURE_VIEWS:  # (other layout ops may alias: contiguous, expand)
            return None if ex._target_name(node) in _LAYOUT_ONLY else node
        node = node.args[0]
    return None


def _split_returned_views(gm):
    """Training graphs return views: the forward saves a parameter's transpose for the backward, the backward
    returns weight gradients transposed back. torch makes a view for free; returned from a compiled partition
    it would be a copy (memory the size of the weights, and the copying). Each such view becomes a node that
    only the graph's output reads, run eagerly; compute users keep the original. Except for weight gradients
    (_product_permuted): dW^T transposed once stays compiled (ckc computes it in the returned layout: a view of
    another layout would make AccumulateGrad copy it every step), transposed twice runs eagerly as a whole.
    Returns the names of the nodes left eager."""
    out = gm.graph.output_node()
    eager = set()
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or ex._target_name(n) not in _LAYOUT_ONLY or out not in n.users:
            continue
        chain = _product_permuted(n) if len(n.users) == 1 else None
        if chain:
            nodes, perm = chain
            rank = len(perm)
            if perm == list(range(rank - 2)) + [rank - 1, rank - 2]:
                continue  # compiled: ckc writes the product in the transposed layout (absorb_blas), no copy
            if perm == list(range(rank)):  # undoes itself: all eager, torch's views of the product are free
                eager.update(c.name for c in nodes)
                continue
        if len(n.users) > 1:
            with gm.graph.inserting_after(n):
                view = gm.graph.call_function(n.target, n.args, n.kwargs)
            view.meta = dict(n.meta)
            out.replace_input_with(n, view)
            eager.add(view.name)
        else:
            eager.add(n.name)
    if eager:
        gm.recompile()
    return eager


def _compile_partitions(gm, record, name, options, report, eager=()):
    """Partitions gm (in place) and swaps every fused submodule for its compiled library; returns gm."""
    import torch
    import torch.fx
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    rejected = {n: "a view the graph returns: free in torch, a copy if compiled" for n in eager}  # name -> why not
    static_names = {n.name for n in _static_nodes(gm)}

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return _unsupported_reason(node, rejected, node.name in static_names, static_names) is None

    for _ in range(len(gm.graph.nodes) + 1):
        work = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        partitioner = CapabilityBasedPartitioner(work, Support(), allows_single_node_partition=True)
        parts = [p for p in partitioner.propose_partitions()
                 if any(ex._target_name(n) not in _LAYOUT_ONLY for n in p.nodes)]
        in_part = {n.name: i for i, p in enumerate(parts) for n in p.nodes}
        fused = partitioner.fuse_partitions(parts) if parts else work
        # the example values the partitions' compiles need, by name (not in the nodes' meta: fusing
        # deep-copies meta): each partition's inputs, and the values a partition returns to another one (not
        # all it returns: a backward's are mostly the weight gradients, the size of the model, recorded on top
        # of the step's own)
        needed = set()
        for node in fused.graph.nodes:
            if node.op == "call_module":
                needed |= {a.name for a in node.args if isinstance(a, torch.fx.Node)}
                needed |= {o.name for o in _returned_to_partitions(node, getattr(fused, node.target))}
        by_name = record(needed)
        failure = None
        compiled = {}
        for node in fused.graph.nodes:
            if node.op != "call_module":
                continue
            sub = getattr(fused, node.target)
            args = [by_name[a.name] if isinstance(a, torch.fx.Node) else a for a in node.args]
            # graph constants, and values computed from constants only (even by ops ckc does not run: the
            # RoPE tables' cos / sin, a mask's any / logical_and) are the same on every call: compiled in
            constant = [isinstance(a, torch.fx.Node) and (a.op == "get_attr" or a.name in static_names)
                        for a in node.args]
            try:
                model, picks = _compile_one(sub, args, constant, options)
            except ex.ExportError as e:
                if e.node and e.node not in rejected:
                    failure = (e.node, str(e))
                    break
                model, reason = None, str(e)
            except RuntimeError as e:  # ckc compile or cc
                model, reason = None, _first_error_line(str(e))
            if model is None:
                first = next(n for n in sub.graph.nodes if n.op == "call_function")
                warnings.warn(f"ckc (gcu): partition {node.target} runs eagerly: compiling it failed at op "
                              f"{ex._target_name(first)} (node {first.name}): {reason}", stacklevel=2)
                for n in sub.graph.nodes:
                    if n.op == "call_function":
                        rejected.setdefault(n.name, f"its partition failed to compile: {reason}")
                continue
            out = sub.graph.output_node().args[0]
            compiled[node.target] = _partition_module(model, isinstance(out, (tuple, list)),
                                                      [i for i, c in enumerate(constant) if not c], picks)
            # the node's value for later partitions' example inputs: the full run's values of the nodes it
            # returns (the fused submodule keeps their names)
            ret = [by_name.get(o.name) if isinstance(o, torch.fx.Node) else o
                   for o in (out if isinstance(out, (tuple, list)) else [out])]
            by_name[node.name] = tuple(ret) if isinstance(out, (tuple, list)) else ret[0]
            for user in node.users:
                if user.op == "call_function" and user.target is operator.getitem:
                    by_name[user.name] = by_name[node.name][user.args[1]]
        if failure:
            rejected[failure[0]] = failure[1]
            continue
        # values of the eager nodes between partitions, for the next partitions' inputs, come from the
        # run above; a partition that failed stays a submodule and runs eagerly
        for target, part in compiled.items():
            delattr(fused, target)
            setattr(fused, target, part)
        fused.graph.lint()
        fused.recompile()
        for n in gm.graph.nodes:
            if n.op in ("placeholder", "output", "get_attr"):
                continue
            reason = _unsupported_reason(n, rejected, n.name in static_names, static_names)
            i = in_part.get(n.name)
            ok = i is not None and f"fused_{i}" in compiled
            if not ok and not reason and i is None:
                reason = "only moves data between eager ops" if ex._target_name(n) in _LAYOUT_ONLY else \
                    "left between partitions"
            report.nodes.append(NodeReport(n.name, ex._target_name(n), ok, f"fused_{i}" if ok else "",
                                           "" if ok else (reason or "")))
        report.partitions = len(compiled)
        return fused
    raise RuntimeError("ckc (gcu): partitioning did not converge")  # every pass rejects one more node


def _returned_to_partitions(call, sub):
    """The nodes of fused submodule `sub` (called by node `call`) whose values another partition reads."""
    import torch.fx
    out = sub.graph.output_node().args[0]

    def feeds_partition(v):
        return any(u.op == "call_module" for u in v.users)
    if not isinstance(out, (tuple, list)):
        return [out] if feeds_partition(call) and isinstance(out, torch.fx.Node) else []
    return [out[u.args[1]] for u in call.users
            if u.op == "call_function" and u.target is operator.getitem and feeds_partition(u)
            and isinstance(out[u.args[1]], torch.fx.Node)]


def _first_error_line(message):
    """The line of a failed command's output that says what went wrong (ckc's "error:" line, cc's first error),
    else its first line."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln or ln.startswith("no C compiler"):
            return ln
    return lines[0] if lines else "unknown error"


def _compile_one(sub, args, constant, options):
    """A GraphModel for one fused submodule called with `args` (real tensors), and where each value the
    submodule returns is among the library's outputs (None: in order). The arguments flagged in `constant`
    are the graph's own constants (get_attr), compiled in and folded like buffers. A value returned more than
    once (AOTAutograd's forward saves a softmax, and an expand of it to its own shape, for two backward ops:
    one tensor of the graph) is one output: two would be two buffers and a copy every call, where torch
    returns views of one tensor."""
    import torch
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    inputs = [p for p, c in zip(placeholders, constant) if not c]
    consts = {p: (p.name, a) for p, a, c in zip(placeholders, args, constant) if c}
    feeds = {p: a for p, a, c in zip(placeholders, args, constant) if not c}
    values = ex._record_values(sub, placeholders, feeds, consts, light=True)
    for p in inputs:
        v = values[p]
        if not isinstance(v, torch.Tensor):
            raise ex.ExportError(f"input {p.name} is a {type(v).__name__}")
    # nothing process-specific in the document: it is the cache key, shared across processes
    doc, data = ex.graph_document(sub, inputs, consts, set(), values, [p.name for p in inputs], None,
                                  "torch.compile partition", f"ckc.conductor (torch {torch.__version__})")
    # (the inputs the submodule updates in place (copy_) are outputs too, written into them, after the others)
    returned = [o for o in doc["outputs"] if "into" not in o]
    updates = [o for o in doc["outputs"] if "into" in o]
    unique = {}  # IR tensor -> the first output returning it
    for o in returned:
        unique.setdefault(o["tensor"], o)
    picks = None
    if len(unique) < len(returned) or updates:
        position = {t: j for j, t in enumerate(unique)}
        picks = [position[o["tensor"]] for o in returned]
        doc["outputs"] = list(unique.values()) + updates
    entry, _built = get_or_build(doc, data, options)
    return _load_entry(entry), picks


def _load_entry(entry):
    """The GraphModel of a cache entry (its weights file exists when the graph has constants)."""
    from ..graph import GraphModel
    weights = os.path.join(entry, "model.weights.safetensors")
    model = GraphModel(os.path.join(entry, "libmodel.so"), weights if os.path.exists(weights) else None)
    model.entry = entry
    return model


class _Specializing:
    """A compiled forward or backward graph: one static build per concrete argument signature."""

    def __init__(self, agm, name, options, whole_key=None, graph_outputs=0, training=False, constants=None,
                 boxed=False):
        self.agm, self.name, self.options, self.whole_key = agm, name, options, whole_key
        self.boxed = boxed  # called through call_boxed (AOTAutograd's backward): its graph gets boxed code
        self.constants = constants or {}  # {argument index: value} compiled in (baked module buffers)
        self.graph_outputs = graph_outputs  # outputs of dynamo's graph (whole-graph plans must return exactly them)
        self.builds = {}
        self.plan = None  # set when the static graph became one library (_whole_graph_plan)
        self.warned = False
        self.symbolic = _is_symbolic(agm)
        self.training = training  # a training forward or a backward graph: returned views stay views

    def __call__(self, *args):
        gm, keep, perms = self._build_for(args)
        return gm(*_feed(args, keep, perms))

    def call_boxed(self, args):
        """The boxed calling convention AOTAutograd uses for a backward: `args` (the saved activations and
        the incoming gradients) is a list this call empties, and the graph (boxed code) sets each value to
        None after its last use, so every saved activation is freed once the backward has read it, as eager
        autograd frees its saved tensors, instead of living to the end of the backward."""
        gm, keep, perms = self._build_for(args)
        fed = _feed(args, keep, perms)
        args.clear()
        return gm(fed)

    def _build_for(self, args):
        """The build for these arguments: (graph module, indices of the arguments it takes, perms)."""
        import torch
        if self.builds and not self.symbolic:  # dynamo guards static shapes: one build serves every call
            return self.only
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        hit = self.builds.get(key)
        if hit is None:
            if self.symbolic and self.builds and not self.warned:
                self.warned = True
                warnings.warn(f"ckc (gcu): graph {self.name} has symbolic sizes; ckc plans static shapes, so it "
                              "compiles one library per concrete shape", stacklevel=3)
            hit = self.builds[key] = self.only = self._build(args)
        return hit

    def _build(self, args):
        import torch
        gm, keep, record, perms = _specialize(self.agm, args, self.constants)
        shapes = ", ".join(str(list(a.shape)) for a in args if isinstance(a, torch.Tensor))
        report = GraphReport(self.name, f"({shapes})")
        if self.training:
            _scatter_add_in_place(gm)
        eager = _split_returned_views(gm) if self.training else set()
        fused = _compile_partitions(gm, record, self.name, self.options, report, eager)
        if self.boxed:
            from torch.fx.graph import _BoxedCodeGen  # as torch's own aot_eager backend (boxed_nop)
            fused.graph.set_codegen(_BoxedCodeGen())
            fused.recompile()
        # the ops ckc does not run (a partition that failed to compile has had its own warning)
        eager = [r for r in report.eager() if r.op not in _LAYOUT_ONLY and not r.reason.startswith("its partition")]
        if eager:
            listed = ", ".join(f"{r.node} ({r.op}: {r.reason})" for r in eager)
            warnings.warn(f"ckc (gcu): {len(eager)} of {len(report.nodes)} ops of {self.name} run eagerly: {listed}",
                          stacklevel=4)
        log.info("%s", report)
        if _collector is not None:
            _collector.append(report)
        if (self.whole_key and not self.symbolic and not perms
                and set(range(len(args))) - set(keep) == set(self.constants)):
            plan = _whole_graph_plan(fused)
            if plan:  # in terms of every argument (the constants' ones unread)
                plan = dict(plan, inputs=[keep[j] for j in plan["inputs"]])
            # AOTAutograd's forward returns more than dynamo's graph when the module mutates an input (the new
            # value, copied back by its runtime wrapper): such a graph keeps the wrapper
            if plan and len(plan["outputs"]) == self.graph_outputs:
                self.plan = plan
                cache.remember_whole_graph(self.whole_key, plan)
        return fused, keep, perms


def _whole_graph_plan(fused):
    """When the partitioned graph is one compiled library fed straight from the graph's inputs, what a later
    process needs to run it without AOTAutograd: the cache entry, which inputs it reads, which of its outputs
    the graph returns. Else None."""
    nodes = list(fused.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    calls = [n for n in nodes if n.op == "call_module"]
    rest = [n for n in nodes if n.op not in ("placeholder", "call_module", "output")]
    if len(calls) != 1 or any(not (n.op == "call_function" and n.target is operator.getitem and n.args[0] is calls[0])
                              for n in rest):
        return None
    part = getattr(fused, calls[0].target)
    entry = getattr(part, "entry", None)
    if entry is None or any(a not in placeholders for a in calls[0].args):
        return None
    outs = fused.graph.output_node().args[0]
    if not isinstance(outs, (tuple, list)):
        return None
    picks = []
    for o in outs:
        if o is calls[0] and not part.multi:
            picks.append(0)
        elif o in rest:
            picks.append(o.args[1] if part.picks is None else part.picks[o.args[1]])
        else:
            return None
    return {"entry": entry, "inputs": [placeholders.index(a) for a in calls[0].args], "outputs": picks}


def _whole_graph_key(gm, example_inputs, options, constants=None):
    """A key for a dynamo graph with static shapes and no constants of its own, or None; the values of the
    inputs compiled in as constants are part of it."""
    import torch
    from torch._subclasses.fake_tensor import is_fake
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        return None
    baked = sorted((i, hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest())
                   for i, t in (constants or {}).items())
    meta = []
    for t in example_inputs:
        if not isinstance(t, torch.Tensor) or is_fake(t) or any(not isinstance(d, int) for d in t.shape):
            return None
        meta.append((tuple(t.shape), str(t.dtype), tuple(t.stride())))
    return cache.key_of({"code": gm.code, "inputs": repr(meta), "constants": repr(baked),
                         "torch": torch.__version__}, {}, options)


def _whole_graph_runner(key):
    """The cached whole-graph library for this key as the compiled function, or None."""
    plan = cache.recall_whole_graph(key)
    return _runner_of(plan) if plan else None


def _runner_of(plan):
    """A whole-graph plan (_whole_graph_plan) as the compiled function: the library called on dynamo's own
    arguments, nothing in between."""
    model = _load_entry(plan["entry"])
    run, inputs, outputs = model.torch_runner(), plan["inputs"], plan["outputs"]

    def compiled(*args):
        outs = run(*[args[i] for i in inputs])
        return tuple(outs[j] for j in outputs)
    compiled.model = model  # keeps the library loaded
    return compiled


def _is_symbolic(gm):
    import torch
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
            return True
    return False


_graph_counter = 0
_sdpa = None
# dynamo graphs served straight from a whole-graph cache record, skipping AOTAutograd (tests read it)
WHOLE_GRAPH_HITS = [0]


def _sdpa_op():
    """ckc::sdpa: scaled_dot_product_attention as a custom op, which AOTAutograd keeps whole (it decomposes
    the ATen one into matmuls, softmax and a guard for fully masked rows that would hide the attention)."""
    global _sdpa
    if _sdpa is None:
        from typing import Optional

        import torch
        from torch import Tensor

        @torch.library.custom_op("ckc::sdpa", mutates_args=())
        def sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: Optional[float] = None) -> Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
                                                                    scale=scale)

        @sdpa.register_fake
        def _(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
            return q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))

        _sdpa = torch.ops.ckc.sdpa.default
    return _sdpa


def _keep_attention_whole(gm):
    """Inference graphs: every scaled_dot_product_attention call becomes ckc::sdpa (training keeps the ATen op,
    whose backward PyTorch knows)."""
    import torch
    targets = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)
    changed = False
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in targets and not n.kwargs.get("enable_gqa", False):
            n.target = _sdpa_op()
            n.kwargs = {k: v for k, v in n.kwargs.items() if k != "enable_gqa"}
            changed = True
    if changed:
        gm.recompile()


def _layer_norm_with_stats(x, normalized_shape, weight, bias, eps):
    """aten.native_layer_norm in ops ckc compiles (mean, sub, mul, rsqrt): (out, mean, rstd) as ATen returns
    them, the statistics with the normalized dims kept as 1s."""
    import torch
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    rstd = torch.rsqrt((centred * centred).mean(dims, keepdim=True) + eps)
    out = centred * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def _partition(joint, joint_inputs, **kwargs):
    """AOTAutograd's default partition of the joint graph into forward and backward, with the forward's
    pointwise chains that hang off one tensor recomputed in the backward instead of saved: the backward saves
    that tensor and computes the chain again inside its fused elementwise programs (fuse_elementwise). GPT-2's
    tanh GELU, written out, saves its input instead of five tensors the size of the MLP's hidden layer: 12 MiB
    per layer less to write, keep and read again at 256 tokens, for ~10 flops per element recomputed.
    A pointwise node qualifies when the tensors it reads come, through qualifying nodes only, from a single
    tensor (constants and scalars aside): a residual add, which reads two, stays saved, as it would cost two
    saved tensors to recompute. Only floating-point results computed from a value of the graph (not straight from
    an input: masks made from a buffer are folded into the forward, they would be run-time work in the
    backward), and never random ops."""
    import torch
    from torch._functorch.partitioners import default_partition
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    views = {aten.alias.default, aten.view.default, aten._unsafe_view.default, aten.permute.default,
             aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim, aten.t.default, aten.transpose.int}
    root = {}       # node -> the one tensor a qualifying node is computed from (a node that does not: itself)
    backward = set()  # nodes that read a tangent (the backward half; left alone)
    for n in joint.graph.nodes:
        ins = n.all_input_nodes
        if n.op == "placeholder":
            if n.name.startswith("tangents"):  # (AOTAutograd's name for the outputs' gradients)
                backward.add(n)
            root[n] = n
            continue
        if any(a in backward for a in ins):
            backward.add(n)
            root[n] = n
            continue
        tags = getattr(n.target, "tags", ()) if n.op == "call_function" else ()
        val = n.meta.get("val")
        tensors = [a for a in ins if isinstance(a.meta.get("val"), torch.Tensor)]
        roots = {root[a] for a in tensors if a.op != "get_attr"}
        pointwise = (torch.Tag.pointwise in tags and torch.Tag.nondeterministic_seeded not in tags
                     and isinstance(val, torch.Tensor) and val.dtype.is_floating_point)
        # a view of a recomputed value (autograd's alias of tanh's result, say) is recomputed with it
        view = n.op == "call_function" and n.target in views and len(tensors) == 1 and root[tensors[0]] is not tensors[0]
        if (pointwise or view) and len(roots) == 1 and next(iter(roots)).op != "placeholder":
            root[n] = roots.pop()
            n.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
        else:
            root[n] = n
    return default_partition(joint, joint_inputs, **kwargs)


# Module buffers up to this many bytes that the graph only reads become constants of the graph (_bake_buffers)
_BAKE_BYTES = 64 << 20
# what may read a baked buffer (or a view of it): ops that neither write their inputs nor return them aliased
# for a later write; anything else (F.batch_norm updating running stats, an in-place method) keeps it an input
_PURE_METHODS = {"__getitem__", "eq", "ne", "lt", "le", "gt", "ge", "bool", "float", "to", "type_as", "view",
                 "reshape", "expand", "unsqueeze", "squeeze", "contiguous", "logical_not", "masked_fill", "size",
                 "dim", "transpose", "permute", "t", "narrow", "flatten", "tril", "triu", "numel", "__invert__"}
_VIEW_METHODS = {"__getitem__", "view", "reshape", "expand", "unsqueeze", "squeeze", "contiguous", "transpose",
                 "permute", "t", "narrow", "flatten"}


def _reads_only(node, depth=0):
    """Whether every use of node (a buffer's placeholder, or a view of it) only reads it."""
    import torch
    pure_fns = {torch.where, torch.tril, torch.triu, torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge,
                torch.logical_not, torch.masked_fill, torch.cos, torch.sin, torch.matmul, torch.cat, torch.stack}
    for u in node.users:
        if u.op == "output":
            return False  # returned: the caller may write it
        if u.op == "call_method":
            if u.target not in _PURE_METHODS:
                return False
            if u.target in _VIEW_METHODS and (depth > 8 or not _reads_only(u, depth + 1)):
                return False
        elif u.op == "call_function":
            mod = getattr(u.target, "__module__", "") or ""
            if u.target in pure_fns:
                continue
            if mod in ("_operator", "operator") and not u.target.__name__.startswith("i"):
                if u.target.__name__ == "getitem" and (depth > 8 or not _reads_only(u, depth + 1)):
                    return False
                continue
            return False
        else:
            return False
    return True


def _buffer_inputs(gm, example_inputs):
    """Indices of dynamo's inputs that are module buffers (its source is a module's _buffers entry: a causal
    mask, RoPE tables) which the graph only reads, real tensors of at most _BAKE_BYTES."""
    import torch
    from torch._subclasses.fake_tensor import is_fake
    out = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (n, t) in enumerate(zip(placeholders, example_inputs)):
        source = getattr(n.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", "")
        name = name() if callable(name) else name
        if (isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) and not is_fake(t)
                and not t.requires_grad and t.device.type == "cpu" and "._buffers[" in str(name)
                and t.numel() * t.element_size() <= _BAKE_BYTES and _reads_only(n)):
            out.append(i)
    return out


class _BakedBuffers:
    """A compiled graph whose read-only module buffers are compiled in as constants: a mask computed from a
    buffer folds at compile time like one the module builds, instead of splitting the graph into partitions
    around eager ops. Guarded: each call checks that
    every baked buffer is the same tensor, at the same address, unchanged (torch's version counter); when one
    changed (`model.mask.fill_(...)`, a new tensor assigned), the graph is compiled again with the new values
    (one warning), as dynamo recompiles on a failed guard."""

    def __init__(self, gm, example_inputs, options, indices):
        import torch.fx
        self.original, self.options, self.indices = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph)), options, indices
        self.warned = False
        self._build(example_inputs)

    def _build(self, args):
        import torch.fx
        self.seen = [(args[i], args[i]._version, args[i].data_ptr()) for i in self.indices]
        gm = torch.fx.GraphModule(self.original, copy.deepcopy(self.original.graph))
        self.fn = _compile_graph(gm, args, self.options, {i: args[i].detach().clone() for i in self.indices})

    def __call__(self, *args):
        for (t, version, ptr), i in zip(self.seen, self.indices):
            a = args[i]
            if a is not t or a._version != version or a.data_ptr() != ptr:
                if not self.warned:
                    self.warned = True
                    warnings.warn("ckc (gcu): a module buffer compiled in as a constant changed; compiling the "
                                  "graph again with its new value", stacklevel=2)
                self._build(args)
                break
        return self.fn(*args)


def gcu(gm, example_inputs, options=()):
    """The torch.compile backend: torch.compile(model, backend="gcu"). The partitions run on the gcu device
    (--target gcu: parameters stay resident there, see GraphModel.torch_runner) unless
    options={"target": "cpu"}; options={"args": [...]} passes more `ckc compile` arguments.

    Module buffers the graph only reads (a causal mask, RoPE tables) are compiled in as constants, guarded
    (_BakedBuffers); parameters and every other input are read in place on each call."""
    options = cache.compile_args(options, "gcu")
    buffers = _buffer_inputs(gm, example_inputs)
    if buffers:
        return _BakedBuffers(gm, example_inputs, options, buffers)
    return _compile_graph(gm, example_inputs, options)


def _compile_graph(gm, example_inputs, options, constants=None):
    """gcu() for a graph; `constants` ({input index: value}) are the inputs compiled in (the compiled function
    still takes them, and ignores them)."""
    global _graph_counter
    import torch
    from torch._decomp import core_aten_decompositions
    from torch._functorch.aot_autograd import aot_module_simplified

    _graph_counter += 1
    name = f"graph{_graph_counter}"
    table = core_aten_decompositions()
    for op in ex._preserved(torch):
        table.pop(op, None)
    training = torch.is_grad_enabled()  # (AOTAutograd calls the forward compiler with grad disabled)
    if training:
        # training: the forward saves LayerNorm's mean and rstd for the backward, which ckc's LAYERNORM does not
        # return; decomposed into ops ckc runs, they are ordinary tensors of the compiled forward
        table[torch.ops.aten.native_layer_norm.default] = _layer_norm_with_stats

    whole_key = None
    if not training:
        _keep_attention_whole(gm)
        whole_key = _whole_graph_key(gm, example_inputs, options, constants)
        hit = whole_key and _whole_graph_runner(whole_key)
        if hit:  # compiled before, to one library: no AOTAutograd, no partitioning
            WHOLE_GRAPH_HITS[0] += 1
            return hit

    outs = gm.graph.output_node().args[0]
    built, graph_outputs = [], len(outs) if isinstance(outs, (tuple, list)) else 1
    updates = []  # inference graphs: the inputs the graph updates in place (AOTAutograd's copy_ nodes)

    def forward(agm, _fake_inputs):
        updates.extend(n for n in agm.graph.nodes if n.op == "call_function" and
                       n.target is torch.ops.aten.copy_.default)
        n_args = sum(1 for n in agm.graph.nodes if n.op == "placeholder")
        # the forward's arguments are dynamo's, in order (else nothing is compiled in: the buffers stay inputs)
        built.append(_Specializing(agm, name, options, whole_key, graph_outputs, training=training,
                                   constants=constants if n_args == len(example_inputs) else None))
        return built[-1]

    def backward(agm, _fake_inputs):
        # the joint graph's backward half: the same partitioning, per-node fallback and per-shape builds
        graph = _Specializing(agm, name + "_backward", options, training=True, boxed=True)

        def run(args):
            return graph.call_boxed(args)
        run._boxed_call = True
        return run

    # inference: an input updated in place (an optimizer's parameters and state) stays a copy_ in the graph, which
    # ckc writes into the input's buffer (graph.json "into"), instead of a new tensor AOTAutograd copies back
    compiled = aot_module_simplified(gm, example_inputs, fw_compiler=forward, bw_compiler=backward,
                                     decompositions=table, keep_inference_input_mutations=not training,
                                     partition_fn=_partition)
    if whole_key and not updates:  # (a build-ahead run would apply the update once too often)
        # dynamo hands over real example inputs: build now, and when the graph became one library, return the
        # library itself, without AOTAutograd's runtime wrapper around it (its per-call cost is that of the
        # kernels on small inputs)
        # (on copies of the inputs other than parameters: a module may update an input in place)
        with torch.no_grad():
            compiled(*[t.clone() if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) else t
                       for t in example_inputs])
        plan = built and built[-1].plan
        if plan:
            return _runner_of(plan)
    return compiled


def explain(model, example_inputs, backward=False):
    """Compiles `model` with the gcu backend, runs it once on `example_inputs`, and returns the Reports of every
    graph dynamo handed over: per node, whether it was compiled (and in which partition) or ran eagerly, and
    why. backward=True also runs the backward of the outputs' sum (the graphs named *_backward), leaving the
    parameters' .grad as they were."""
    global _collector
    import torch
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    _collector = Reports()
    try:
        torch._dynamo.reset()
        out = torch.compile(model, backend=gcu)(*example_inputs)
        if backward:
            outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                    if isinstance(o, torch.Tensor) and o.requires_grad]
            if not outs:
                raise ValueError("explain(backward=True): no output of the model requires grad")
            params = [p for p in model.parameters()] if isinstance(model, torch.nn.Module) else []
            saved = [p.grad for p in params]
            sum(o.float().sum() for o in outs).backward()
            for p, g in zip(params, saved):
                p.grad = g
        return _collector
    finally:
        _collector = None
