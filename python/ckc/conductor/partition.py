"""Partitioning one static graph: maximal groups of nodes ckc runs (support.py) become one library each
(torch.fx's CapabilityBasedPartitioner), swapped in for their fused submodules; the rest run eagerly between
them. When ckc rejects a node while converting a partition (an unsupported argument, say), that node joins the
eager ones and the graph is partitioned again; when a partition fails later (ckc compile or cc), it runs
eagerly, with one warning naming its first op, the node and the reason."""
import copy
import importlib
import operator
import os
import warnings

from . import support
from .cache import get_or_build
from .report import NodeReport
from .support import LAYOUT_ONLY

ex = importlib.import_module("ckc.export")


def partition_module(model, multi, keep, picks, doubles=()):
    """A fused submodule's replacement: an nn.Module calling the compiled library on torch tensors (the
    arguments at `keep`: the others are constants compiled in) and returning its outputs at `picks` (the
    library computes a value the submodule returns twice once: compile_one); those at `doubles` are float64
    scalars the library computed in float32 (support.float64_scalars)."""
    import torch

    class CompiledPartition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.multi, self.picks = model, multi, picks  # keeps the library loaded
            self.entry = getattr(model, "entry", None)
            self.run = model.torch_runner()

        def forward(self, *args):
            outs = self.run(*[args[i] for i in keep])
            if self.picks is not None:
                outs = [outs[j] for j in self.picks]
            if doubles:
                support.as_declared(outs, doubles)
            if not self.multi:
                return outs[0] if self.picks is None or self.picks else None  # (None: it only updates inputs)
            return tuple(outs)

    return CompiledPartition()


def compile_partitions(gm, record, name, options, report, eager=(), fallback="eager"):
    """Partitions gm (in place) and swaps every fused submodule for its compiled library; returns gm. The nodes
    left between the libraries run eagerly, or with fallback="inductor" as Inductor graphs (inductor_islands)."""
    import torch
    import torch.fx
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    rejected = {n: "a view the graph returns: free in torch, a copy if compiled" for n in eager}  # name -> why not
    static_names = {n.name for n in support.static_nodes(gm)}

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return support.unsupported_reason(node, rejected) is None

    for _ in range(len(gm.graph.nodes) + 1):
        work = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        partitioner = CapabilityBasedPartitioner(work, Support(), allows_single_node_partition=True)
        parts = [p for p in partitioner.propose_partitions()
                 if any(ex._target_name(n) not in LAYOUT_ONLY for n in p.nodes)]
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
                needed |= {o.name for o in returned_to_partitions(node, getattr(fused, node.target))}
        by_name = record(needed)
        failure = None
        compiled = {}
        returns = {}  # a compiled partition's node -> the names of the graph's nodes it returns
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
                model, picks = compile_one(sub, args, constant, options)
            except ex.ExportError as e:
                if e.node and e.node not in rejected:
                    failure = (e.node, str(e))
                    break
                model, reason = None, str(e)
            except RuntimeError as e:  # ckc compile or cc
                model, reason = None, first_error_line(str(e))
            out = sub.graph.output_node().args[0]
            returns[node.name] = [o.name if isinstance(o, torch.fx.Node) else None
                                  for o in (out if isinstance(out, (tuple, list)) else [out])]
            # the node's value for later partitions' example inputs: the full run's values of the nodes it
            # returns (the fused submodule keeps their names), whether it compiles or runs eagerly
            ret = [by_name.get(o.name) if isinstance(o, torch.fx.Node) else o
                   for o in (out if isinstance(out, (tuple, list)) else [out])]
            by_name[node.name] = tuple(ret) if isinstance(out, (tuple, list)) else ret[0]
            for user in node.users:
                if user.op == "call_function" and user.target is operator.getitem:
                    by_name[user.name] = by_name[node.name][user.args[1]]
            if model is None:
                first = next(n for n in sub.graph.nodes if n.op == "call_function")
                warnings.warn(f"ckc (gcu): partition {node.target} runs eagerly: compiling it failed at op "
                              f"{ex._target_name(first)} (node {first.name}): {reason}", stacklevel=2)
                for n in sub.graph.nodes:
                    if n.op == "call_function":
                        rejected.setdefault(n.name, f"its partition failed to compile: {reason}")
                continue
            compiled[node.target] = partition_module(model, isinstance(out, (tuple, list)),
                                                      [i for i, c in enumerate(constant) if not c], picks,
                                                      support.float64_scalars(out if isinstance(out, (tuple, list)) else [out]))
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
        islands = {}
        if fallback == "inductor":
            fused, islands = inductor_islands(fused, record, returns, set(eager))
        for n in gm.graph.nodes:
            if n.op in ("placeholder", "output", "get_attr"):
                continue
            reason = support.unsupported_reason(n, rejected)
            i = in_part.get(n.name)
            ok = i is not None and f"fused_{i}" in compiled
            if not ok and not reason and i is None:
                reason = "only moves data between eager ops" if ex._target_name(n) in LAYOUT_ONLY else \
                    "left between partitions"
            report.nodes.append(NodeReport(n.name, ex._target_name(n), ok, f"fused_{i}" if ok else "",
                                           "" if ok else (reason or ""), islands.get(n.name, "eager")))
        report.partitions = len(compiled)
        return fused
    raise RuntimeError("ckc (gcu): partitioning did not converge")  # every pass rejects one more node


def inductor_islands(fused, record, returns, keep_eager):
    """options={"fallback": "inductor"}: each maximal group of the ATen nodes left between ckc's libraries (not
    only data movement) becomes one submodule compiled by TorchInductor (torch._inductor.compile), for the shapes,
    dtypes and strides its inputs have in this static graph. `returns`: each library's node -> the graph nodes it
    returns (the values the islands read from it); nodes in `keep_eager` (views the graph returns: free in torch)
    stay eager. An island Inductor fails on runs eagerly, with a warning. Returns (graph module, {node name:
    island})."""
    import torch
    import torch.fx
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
                    and node.name not in keep_eager)

    partitioner = CapabilityBasedPartitioner(fused, Support(), allows_single_node_partition=True)
    parts = [p for p in partitioner.propose_partitions() if any(ex._target_name(n) not in LAYOUT_ONLY for n in p.nodes)]
    if not parts:
        return fused, {}
    out = partitioner.fuse_partitions(parts, prefix="inductor_")

    calls = [n for n in out.graph.nodes if n.op == "call_module" and n.target.startswith("inductor_")]
    # what each library and island returns: the original graph's nodes (a fused submodule keeps their names)
    produced = dict(returns)
    multi = {}
    for node in calls:
        ret = getattr(out, node.target).graph.output_node().args[0]
        multi[node.name] = isinstance(ret, (tuple, list))
        produced[node.name] = [o.name if isinstance(o, torch.fx.Node) else None
                               for o in (ret if multi[node.name] else [ret])]

    def source(a):
        """The node of the original graph whose value argument `a` of an island is."""
        if a.op == "call_function" and a.target is operator.getitem and a.args[0].name in produced:
            return produced[a.args[0].name][a.args[1]]
        if a.op == "call_module" and a.name in produced:
            return produced[a.name][0]
        return a.name

    wanted = {source(a) for n in calls for a in n.args if isinstance(a, torch.fx.Node)}
    values = record(wanted)
    members = {}
    for node in calls:
        sub = getattr(out, node.target)
        # example inputs: the values' shapes, dtypes and strides (recorded on the meta device where possible)
        example = []
        for a in node.args:
            v = values.get(source(a)) if isinstance(a, torch.fx.Node) else a
            if isinstance(v, torch.Tensor) and v.device.type == "meta":
                v = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype)
            example.append(v)
        try:
            # (a training forward runs inside AOTAutograd's autograd.Function: Inductor traces from a clean slate)
            with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():
                fn = torch._inductor.compile(sub, example)
        except Exception as e:  # noqa: BLE001 (any Inductor failure: the island runs eagerly)
            warnings.warn(f"ckc (gcu): Inductor could not compile {node.target} "
                          f"({', '.join(ex._target_name(n) for n in sub.graph.nodes if n.op == 'call_function')}); "
                          f"it runs eagerly: {first_error_line(str(e))}", stacklevel=2)
            continue
        for n in sub.graph.nodes:
            if n.op == "call_function":
                members[n.name] = node.target
        setattr(out, node.target, _island_module(fn, multi[node.name]))
    out.graph.lint()
    out.recompile()
    return out, members


def _island_module(fn, multi):
    """An Inductor-compiled island as a submodule, returning what the GraphModule it replaces returned (a tuple
    when `multi`, else the one value), whatever sequence or bare tensor Inductor's callable gives."""
    import torch

    class InductorIsland(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fn = fn

        def forward(self, *args):
            out = self.fn(*args)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]  # (a 1-tuple may come back bare)
            return tuple(outs) if multi else outs[0]

    return InductorIsland()


def returned_to_partitions(call, sub):
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


def first_error_line(message):
    """The line of a failed command's output that says what went wrong (ckc's "error:" line, cc's first error),
    else its first line."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln or ln.startswith("no C compiler"):
            return ln
    return lines[0] if lines else "unknown error"


def compile_one(sub, args, constant, options):
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
    return load_entry(entry), picks


def load_entry(entry):
    """The GraphModel of a cache entry (its weights file exists when the graph has constants)."""
    from ..graph import GraphModel
    weights = os.path.join(entry, "model.weights.safetensors")
    model = GraphModel(os.path.join(entry, "libmodel.so"), weights if os.path.exists(weights) else None)
    model.entry = entry
    return model
