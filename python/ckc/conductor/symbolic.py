"""One library for a graph dynamo traced with symbolic sizes (torch.compile(dynamic=True), or its automatic
dynamic shapes after a second shape): the ATen graph goes to ckc whole, its SymInt sizes as graph.json
symbols (compiler/ir/symbolic.h), and the library takes every shape within the bounds (ck_graph_bind per
call). Dynamo gives no upper bound, so the backend picks one: options={"max_size": N} for every symbolic size,
else GROWTH times the size first seen (at least MIN_BOUND), rounded up to a power of two. A call beyond the
bounds compiles again for larger ones, with a one-line warning; so does nothing else.

What this does not compile (an op ckc does not run, a size that is not a product of the symbols, a training
graph) goes the per-shape way (jit._Specializing), with the reason in its warning."""
import importlib

from . import support
from .cache import get_or_build
from .partition import load_entry
from .report import GraphReport, NodeReport, collect

ex = importlib.import_module("ckc.export")

GROWTH = 4
MIN_BOUND = 64


def _least(size):
    """The least value dynamo's shape environment allows a symbolic size (2 for a backed size: it specializes 0
    and 1), at least 1: what a slice counted from the end (x[:, -2:], a start of seq-2) needs to be proved in range."""
    try:
        return max(1, int(size.node.shape_env.var_to_range[size.node.expr].lower))
    except Exception:  # no range known (an unbacked size): sizes from 1
        return 1


def bound_for(value, max_size=None):
    """The bound of a symbolic size seen at `value` (max_size: the caller's, options={"max_size": N})."""
    if max_size:
        return max(max_size, value)
    b = max(MIN_BOUND, GROWTH * value)
    return 1 << (b - 1).bit_length()


class SymbolicGraph:
    """The library of a symbolic ATen graph (AOTAutograd's inference forward) and its bounds."""

    def __init__(self, agm, name, options, constants, max_size=None):
        self.agm, self.name, self.options, self.constants = agm, name, options, constants or {}
        self.max_size = max_size
        self.bounds = {}  # sympy symbol name -> its bound in the current library
        self.lows = {}  # sympy symbol name -> its least value there (dynamo's range: 2, its 0/1 specialization)
        self.run = self.keep = None
        self.positions = []  # per symbol: (argument, dimension) that carries it

    def placeholders(self):
        return [n for n in self.agm.graph.nodes if n.op == "placeholder"]

    def why_not(self):
        """None when the whole graph can be one symbolic library, else the reason."""
        import torch
        phs = self.placeholders()
        constant = {phs[i] for i in self.constants if i < len(phs)}
        for n in self.agm.graph.nodes:
            if n.op != "call_function" or isinstance(n.meta.get("val"), torch.SymInt):
                continue
            if all(a in constant for a in n.all_input_nodes):
                constant.add(n)  # computed from the constants alone: the export folds it with PyTorch's value
                continue
            reason = support.unsupported_reason(n, {})
            if reason:
                return f"node {n.name} ({ex._target_name(n)}): {reason}"
        for n in self.placeholders():
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor):
                for d in v.shape:
                    expr = getattr(getattr(d, "node", None), "expr", None)
                    if expr is not None and not expr.is_number and not expr.is_Symbol:
                        return f"input {n.name} has the size {expr}, not one symbol"
        return None

    def direct(self, graph_outputs, n_args):
        """The compiled function dynamo can call itself, without AOTAutograd's runtime wrapper (its per-call
        cost is that of the kernels on small inputs): when the library is built, the graph's arguments are
        dynamo's (n_args) and it returns exactly dynamo's outputs, each computed (none an input or a size).
        Else None."""
        import torch
        import torch.fx
        if self.run is None or len(self.placeholders()) != n_args:
            return None
        outs = self.agm.graph.output_node().args[0]
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        if len(outs) != graph_outputs or any(
                not isinstance(o, torch.fx.Node) or o.op == "placeholder" or not isinstance(o.meta.get("val"), torch.Tensor)
                for o in outs):
            return None

        def compiled(*args):
            run, keep = self.runner(args)
            return run(*[args[i] for i in keep])
        compiled.graph = self  # keeps the library loaded
        return compiled

    def fits(self, args):
        return self.run is not None and all(self.lows[s] <= args[i].shape[d] <= self.bounds[s]
                                            for s, (i, d) in self.positions)

    def runner(self, args):
        """(callable on the tensor arguments, their indices) for these arguments, compiled when the bounds do not
        hold them (first call, or a size beyond them)."""
        if not self.fits(args):
            self.build(args)
        return self.run, self.keep

    def build(self, args):
        import warnings

        import torch
        phs = self.placeholders()
        syms = {}  # sympy name -> (argument, dimension) first carrying it
        for i, (p, a) in enumerate(zip(phs, args)):
            v = p.meta.get("val")
            if isinstance(v, torch.Tensor) and i not in self.constants:
                for d, size in enumerate(v.shape):
                    expr = getattr(getattr(size, "node", None), "expr", None)
                    if expr is not None and expr.is_Symbol:
                        syms.setdefault(str(expr), (i, d))
                        self.lows.setdefault(str(expr), _least(size))
        grown = []
        for s, (i, d) in syms.items():
            value = args[i].shape[d]
            if value < self.lows[s]:  # below dynamo's range (it does not happen with its specialization of 0/1)
                grown.append(f"{s} = {value} is below the least size {self.lows[s]} it was compiled for")
                self.lows[s] = value
            if s in self.bounds and value <= self.bounds[s]:
                continue
            old = self.bounds.get(s)
            self.bounds[s] = bound_for(value, self.max_size)
            if old is not None:
                grown.append(f"{s} = {value} is above the bound {old} it was compiled for (now {self.bounds[s]})")
        if grown:
            warnings.warn(f"ckc (gcu): graph {self.name} compiles again: {'; '.join(grown)}", stacklevel=5)
        self.positions = list(syms.items())
        tensors = [p for i, p in enumerate(phs) if i not in self.constants and isinstance(p.meta.get("val"), torch.Tensor)]
        self.keep = [phs.index(p) for p in tensors]
        consts = {phs[i]: (f"constant{i}", v) for i, v in self.constants.items()}
        feeds = {p: a for i, (p, a) in enumerate(zip(phs, args)) if i not in self.constants}
        values = ex._record_values(self.agm, [p for p in phs if p in feeds], feeds, consts, light=True)
        symbols = {s: (s, self.lows[s], self.bounds[s]) for s in syms}
        doc, data = ex.graph_document(self.agm, tensors, consts, set(), values, [p.name for p in tensors], None,
                                      "torch.compile graph", f"ckc.conductor (torch {torch.__version__})", symbols)
        if any("into" in o for o in doc["outputs"]):
            raise ex.ExportError("the graph updates an input in place")
        entry, _built = get_or_build(doc, data, self.options)
        model = load_entry(entry)
        run = model.torch_runner()

        def call(*tensors):
            return tuple(run(*tensors))
        call.model = model  # keeps the library loaded
        self.run = call
        report = GraphReport(self.name, "(" + ", ".join(f"{s} <= {b}" for s, b in self.bounds.items()) + ")")
        for n in self.agm.graph.nodes:
            if n.op == "call_function" and not isinstance(n.meta.get("val"), torch.SymInt):
                report.nodes.append(NodeReport(n.name, ex._target_name(n), True, "symbolic"))
        report.partitions = 1
        collect(report)
