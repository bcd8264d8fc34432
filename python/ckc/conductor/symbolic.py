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
from .support import LAYOUT_ONLY

ex = importlib.import_module("ckc.export")

GROWTH = 4
MIN_BOUND = 64


def outputs_of(gm):
    """How a graph's outputs are made: (plan, computed). Per output, ("computed", k): the library's k-th output
    (computed lists those nodes); ("argument", node): an argument returned as it is (a training forward saves its
    input for the backward); ("view", node): a view of arguments (the transposed weight the forward saves),
    made by PyTorch so that it stays a view; ("size", expr): a size (a forward hands the backward its sizes);
    ("none", None)."""
    import torch
    import torch.fx
    outs = gm.graph.output_node().args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]

    def view_of_arguments(n):
        if n.op == "placeholder":
            return True
        return (n.op == "call_function" and ex._target_name(n) in LAYOUT_ONLY and
                all(view_of_arguments(i) for i in n.all_input_nodes))

    plan, computed = [], []
    for o in outs:
        if o is None:
            plan.append(("none", None))
        elif not isinstance(o, torch.fx.Node):
            plan.append(("size", o))  # a number
        elif isinstance(o.meta.get("val"), (torch.SymInt, int)):
            plan.append(("size", o.meta["val"]))
        elif o.op == "placeholder":
            plan.append(("argument", o))
        elif view_of_arguments(o):
            plan.append(("view", o))
        else:  # (a value returned twice is one output of the library)
            plan.append(("computed", computed.index(o) if o in computed else len(computed)))
            if o not in computed:
                computed.append(o)
    return plan, computed


def _size(v, sizes):
    """The value of a size (an int, a SymInt, or a list of them) under this call's symbol values."""
    import torch
    if isinstance(v, (list, tuple)):
        return type(v)(_size(x, sizes) for x in v)
    if isinstance(v, torch.SymInt):
        expr = v.node.expr
        return int(expr.subs({s: sizes[str(s)] for s in expr.free_symbols}))  # (torch's symbols, assumptions and all)
    return v


def _assemble(kind, what, computed, args, where, sizes):
    """One output of the graph (outputs_of's plan) for this call."""
    import torch.fx
    if kind == "computed":
        return computed[what]
    if kind == "argument":
        return args[where[what]]
    if kind == "size":
        return _size(what, sizes)
    if kind == "view":
        def value(x):
            if isinstance(x, torch.fx.Node):
                if x.op == "placeholder":
                    return args[where[x]]
                return x.target(*torch.fx.node.map_arg(x.args, value), **torch.fx.node.map_arg(x.kwargs, value))
            return _size(x, sizes)
        return value(what)
    return None


def _least(size):
    """The least value dynamo's shape environment allows a symbolic size (2 for a backed size: it specializes 0
    and 1), at least 1: what a slice counted from the end (x[:, -2:], a start of seq-2) needs to be proved in range."""
    try:
        return max(1, int(size.node.shape_env.var_to_range[size.node.expr].lower))
    except Exception:  # no range known (an unbacked size): sizes from 1
        return 1


def _most(size):
    """The largest value dynamo's shape environment allows a symbolic size (what its guards imply), or a very
    large number when unbounded."""
    try:
        return int(size.node.shape_env.var_to_range[size.node.expr].upper)
    except Exception:  # int_oo, or no range known
        return 1 << 62


def bound_for(value, max_size=None):
    """The bound of a symbolic size seen at `value` (max_size: the caller's, options={"max_size": N})."""
    if max_size:
        return max(max_size, value)
    b = max(MIN_BOUND, GROWTH * value)
    return 1 << (b - 1).bit_length()


class SymbolicGraph:
    """The library of a symbolic ATen graph (AOTAutograd's forward, inference or training, or its backward) and
    its bounds. A training graph returns more than tensors it computes (outputs_of): the library computes those,
    and the call adds the rest around them."""

    def __init__(self, agm, name, options, constants, max_size=None, boxed=False):
        self.agm, self.name, self.options, self.constants = agm, name, options, constants or {}
        self.max_size = max_size
        self.boxed = boxed  # AOTAutograd's backward: called with one list of arguments
        self.bounds = {}  # sympy symbol name -> its bound in the current library
        self.lows = {}  # sympy symbol name -> its least value there (dynamo's range: 2, its 0/1 specialization)
        self.most = {}  # sympy symbol name -> the largest value dynamo's range allows (its guards; 2^62: none)
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
        # every input size one symbol, or a product of symbols other inputs carry alone (a backward's flattened
        # saved activation [batch*seq, C] beside its gradient [batch, seq, C]: the export declares it unflattened,
        # [batch, seq, C], and ck_graph_bind binds and checks each factor)
        alone, products = set(), []
        for i, n in enumerate(self.placeholders()):
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor) and i not in self.constants:
                for d in v.shape:
                    expr = getattr(getattr(d, "node", None), "expr", None)
                    if expr is None or expr.is_number:
                        continue
                    if expr.is_Symbol:
                        alone.add(expr)
                    elif expr.is_Mul and all(f.is_Symbol or f.is_Integer for f in expr.args):
                        products.append((n, expr))
                    else:
                        return f"input {n.name} has the size {expr}, not a symbol or a product of them"
        for n, expr in products:
            if not expr.free_symbols <= alone:
                return f"input {n.name} has the size {expr}, whose symbols no input has alone"
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
                        self.most.setdefault(str(expr), _most(size))
        grown = []
        for s, (i, d) in syms.items():
            value = args[i].shape[d]
            if value < self.lows[s]:  # below dynamo's range (it does not happen with its specialization of 0/1)
                grown.append(f"{s} = {value} is below the least size {self.lows[s]} it was compiled for")
                self.lows[s] = value
            if s in self.bounds and value <= self.bounds[s]:
                continue
            old = self.bounds.get(s)
            # (at most what dynamo's guards allow: a slice of a 32-row buffer to the length makes it <= 32)
            self.bounds[s] = max(value, min(bound_for(value, self.max_size), self.most[s]))
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
        plan, computed = outputs_of(self.agm)
        out = self.agm.graph.output_node()
        whole = out.args
        out.args = (tuple(computed),)  # what the library returns: the tensors it computes
        try:
            doc, data = ex.graph_document(self.agm, tensors, consts, set(), values, [p.name for p in tensors], None,
                                          "torch.compile graph", f"ckc.conductor (torch {torch.__version__})", symbols)
        finally:
            out.args = whole
        if any("into" in o for o in doc["outputs"]):
            raise ex.ExportError("the graph updates an input in place")
        entry, _built = get_or_build(doc, data, self.options)
        model = load_entry(entry)
        run = model.torch_runner()

        # inputs whose sizes are products of symbols come unflattened (export.unflattened): views of the arguments
        unflat = {k: spec["shape"] for k, spec in enumerate(doc["inputs"]) if len(spec["shape"]) != len(tensors[k].meta["val"].shape)}
        doubles = support.float64_scalars(computed)  # float64 scalars ckc computes in float32
        if all(kind == "computed" for kind, _ in plan) and not self.boxed and not unflat and not doubles:
            def call(*tensors):
                return tuple(run(*tensors))
        else:  # the other outputs around the library's: the arguments themselves, views of them, sizes, None
            self.keep = list(range(len(phs)))
            where = {p: i for i, p in enumerate(phs)}
            tensor_at = [phs.index(p) for p in tensors]

            def call(*a):
                a = a[0] if self.boxed else a
                sizes = {s: a[i].shape[d] for s, (i, d) in self.positions}
                fed = [a[i] for i in tensor_at]
                for k, shape in unflat.items():
                    fed[k] = fed[k].reshape([d if isinstance(d, int) else sizes[d] for d in shape])
                mine = support.as_declared(run(*fed), doubles)
                return tuple(_assemble(kind, what, mine, a, where, sizes) for kind, what in plan)
        call.model = model  # keeps the library loaded
        self.run = call
        report = GraphReport(self.name, "(" + ", ".join(f"{s} <= {b}" for s, b in self.bounds.items()) + ")")
        for n in self.agm.graph.nodes:
            if n.op == "call_function" and not isinstance(n.meta.get("val"), torch.SymInt):
                report.nodes.append(NodeReport(n.name, ex._target_name(n), True, "symbolic"))
        report.partitions = 1
        collect(report)
