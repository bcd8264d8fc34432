"""Export a PyTorch nn.Module to ckc's graph.json + weights.safetensors.

    import ckc
    path = ckc.export(model, (example_input,), "out/export")   # -> out/export/graph.json

Capture is `torch.export.export` + `run_decompositions()` (core ATen, with
scaled_dot_product_attention kept whole). Each ATen op is mapped by one
handler to ckc's primitive ops (MATMUL, ADD, RESHAPE, ...): the exporter
emits primitives and the compiler's passes optimize (absorb transposes and
scales into GEMMs, fold constants, fuse attention). What is computed from
buffers and constants only (Hugging Face's mask building: arange, cumsum,
index, bitwise ops; RoPE tables) is folded here with PyTorch's own values.
An op without a handler is an error naming the op, the FX node and the
module it came from.

Shapes are fixed by the example inputs, except the sizes declared dynamic
(`dynamic_shapes={"x": {0: ckc.Dim("batch", max=64)}}`, as torch.export takes
them): those become graph.json symbols with bounds, and every size computed
from them a product of symbols ("8*seq"); the compiled library then takes the
sizes at run time (ck_graph_run_shaped). The graph.json schema is
documented in docs/graph-schema.md; the weights file holds every parameter
and buffer the graph reads, under the module's own names.
"""
import functools
import hashlib
import inspect
import json
import math
import operator
import os
import re

import numpy as np

SCHEMA = "ckc.graph"
SCHEMA_VERSION = 1


class ExportError(RuntimeError):
    """The module cannot be exported; the message names the op / node / module, and `node` is the FX node's
    name when one node is at fault (the torch backend then runs just that node eagerly)."""

    def __init__(self, message, node=None):
        super().__init__(message)
        self.node = node


_DTYPES = None


def _dtype_name(dt):
    global _DTYPES
    import torch
    if _DTYPES is None:
        _DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64",
                   torch.int32: "i32", torch.bool: "bool"}
    if dt not in _DTYPES:
        raise ExportError(f"dtype {dt} is not supported (ckc graphs use float32, int64, int32 and bool)")
    return _DTYPES[dt]


def float64_scalar(t):
    """Whether t is a float64 scalar (0-d: a Python float dynamo passes as a tensor under dynamic=True, math.pi,
    and arithmetic on one: GELU's sqrt(2 / pi)), which ckc computes in float32 like the tensors it scales; the
    torch backend converts it on the way in and out."""
    import torch
    return isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.dim() == 0


def _value_dtype(t):
    """The graph.json dtype a traced tensor computes in: its own, float32 for a float64 scalar."""
    return "f32" if float64_scalar(t) else _dtype_name(t.dtype)


def _num(v):
    """A JSON-safe attribute number: non-finite floats as the strings "inf", "-inf", "nan"."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


# ---- capture -------------------------------------------------------------------------------

def _module_path(stack):
    """The innermost module path of a torch.export nn_module_stack entry, as a dotted name."""
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    return path.replace("_modules['", "").replace("']", "").strip(".")


def _preserved(torch):
    """Ops kept whole through the core ATen decompositions, because ckc lowers them better itself:
    scaled_dot_product_attention (its decomposition adds a guard for fully masked rows — any /
    logical_not / where — that would hide the attention) and silu (it would become x * sigmoid(x))."""
    aten = torch.ops.aten
    return (aten.scaled_dot_product_attention.default, aten.silu.default)


def Dim(name, min=1, max=None):
    """A dynamic size for export(dynamic_shapes=...): torch.export.Dim with the bounds ckc needs. `max` is
    required: the compiled library's memory is planned for it."""
    torch = require_torch()
    if max is None:
        raise ExportError(f"ckc.Dim('{name}'): give max=, the largest size the compiled library must run "
                          "(its memory is planned for it)")
    if not (isinstance(min, int) and isinstance(max, int) and 1 <= min <= max):
        raise ExportError(f"ckc.Dim('{name}'): bounds min={min!r}, max={max!r} must be integers with 1 <= min <= max")
    return torch.export.Dim(name, min=min, max=max)


def _symbol_names(placeholders, dynamic_shapes, input_names):
    """{sympy symbol name: the user's Dim name} from the placeholders' symbolic sizes and the dynamic_shapes
    spec (a dict by argument name, or a tuple / list by position)."""
    names = {}
    if not dynamic_shapes:
        return names
    specs = dynamic_shapes
    if isinstance(specs, dict):
        specs = [specs.get(n) for n in input_names]
    for ph, spec in zip(placeholders, specs):
        if not spec:
            continue
        items = spec.items() if isinstance(spec, dict) else enumerate(spec)
        shape = ph.meta["val"].shape
        for axis, dim in items:
            if dim is None:
                continue
            expr = getattr(getattr(shape[axis], "node", None), "expr", None)
            if expr is not None and expr.is_Symbol:
                names.setdefault(str(expr), getattr(dim, "__name__", str(expr)))
            elif expr is not None and not expr.is_number:  # torch.export's derived Dim (2*half, half+1)
                root = getattr(dim, "root", None)
                free = list(expr.free_symbols)
                poly = expr.as_poly(*free) if len(free) == 1 else None
                if root is None or poly is None or poly.degree() != 1 or poly.coeffs()[0] < 1:
                    raise ExportError(f"input {ph.name!r} dimension {axis} is the size {expr} "
                                      f"({getattr(dim, '__name__', '?')}): ckc binds an input's size as a * Dim + b "
                                      "(a >= 1) of one Dim")
                names.setdefault(str(free[0]), getattr(root, "__name__", str(free[0])))
    return names


def _capture(model, args, dynamic_shapes=None):
    """torch.export + core ATen decompositions (but _preserved ops).

    Returns (graph module, user-input placeholders, {placeholder: example}, {node: (name, tensor)} for
    parameters, buffers and constants, the set of parameter nodes, the return value's pytree spec, and the
    symbols: {sympy name: (name, min, max)})."""
    import warnings

    import torch
    with warnings.catch_warnings():  # torch's own pytree deprecation, nothing a caller can act on
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        try:
            ep = torch.export.export(model, tuple(args), dynamic_shapes=dynamic_shapes)
        except Exception as e:  # torch's constraint violations name the dims: pass them on
            if dynamic_shapes is None or not any(k in type(e).__name__ for k in ("Constraint", "UserError")):
                raise
            raise ExportError(f"torch.export refused the dynamic shapes: {e}") from None
        table = torch.export.default_decompositions()
        for op in _preserved(torch):
            table.pop(op, None)
        ep = ep.run_decompositions(table)
    gm = ep.graph_module
    for n in gm.graph.nodes:
        n.meta["ck_module"] = _module_path(n.meta.get("nn_module_stack"))
    state = dict(ep.state_dict)
    state.update(getattr(ep, "constants", {}) or {})
    placeholders, feeds, consts, params, user = [], {}, {}, set(), iter(args)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, spec in zip(phs, ep.graph_signature.input_specs):
        if spec.kind.name == "USER_INPUT":
            placeholders.append(node)
            feeds[node] = next(user)
        else:
            consts[node] = (spec.target, state[spec.target])
            if spec.kind.name == "PARAMETER":
                params.add(node)
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            consts[n] = (None, getattr(gm, n.target))
    symbols = {}
    if dynamic_shapes:
        names = _symbol_names(placeholders, dynamic_shapes, _input_names(model, len(placeholders)))
        for sym, vr in ep.range_constraints.items():
            if not sym.is_Symbol:  # (an expression of the symbols: its range follows from theirs)
                continue
            name = names.get(str(sym), str(sym))
            try:
                hi = int(vr.upper)
            except (TypeError, ValueError, OverflowError):
                raise ExportError(f"dynamic size '{name}' has no upper bound: give its Dim a max "
                                  "(ckc.Dim(name, max=...))") from None
            symbols[str(sym)] = (name, max(1, int(vr.lower)), hi)
    return gm, placeholders, feeds, consts, params, ep.call_spec.out_spec, symbols


def _record_values(gm, placeholders, feeds, consts, light=False):
    """Runs the captured graph once: the concrete value of every node (shapes, dtypes, constants). light: only
    the values computed from constants alone (what conversion folds) are kept; every other tensor is a stand-in
    on the meta device with its shape, dtype and strides (a torch.compile partition's values are as big as the
    model: an optimizer step's are every parameter several times over)."""
    import torch
    ordered = [n for n in gm.graph.nodes if n.op == "placeholder"]
    feed = [feeds[n] if n in feeds else consts[n][1] for n in ordered]
    keep_real = None
    if light:
        keep_real = set(consts)
        for n in gm.graph.nodes:
            if n.op == "get_attr" or (n.op == "call_function" and all(a in keep_real for a in n.all_input_nodes)):
                keep_real.add(n)
    replace = {n: v for n, (_target, v) in consts.items()}  # a placeholder consumes its feed even when it is a
    if light:                                                   # constant; the constant is its value
        # the inputs' shapes, dtypes and strides are all the conversion reads of them
        values = run_recording_meta(gm, feed, [n in feeds for n in ordered], replace=replace)
        if values is not None:
            return values
    return run_recording(gm, feed, replace=replace, stand_in=None if keep_real is None else lambda n: n not in keep_real)


def run_recording_meta(gm, args, as_meta, keep=None, replace=None):
    """run_recording with the args flagged in as_meta on the meta device (shapes, dtypes and strides: no memory,
    no arithmetic; what depends on the others only is computed for real), or None when an op cannot run so (no
    meta kernel, a constant of the graph on the CPU meeting a meta tensor, a value read with .item())."""
    try:
        return run_recording(gm, [_meta_like(a) if m else a for a, m in zip(args, as_meta)], keep=keep,
                             replace=replace)
    except Exception:  # noqa: BLE001 (any op's failure on meta tensors: the caller runs it for real)
        return None


def run_recording(gm, args, keep=None, replace=None, stand_in=None):
    """Node values of one eager run (no grad) of the FX graph module gm on args: every node's, or those
    keep(node, value) accepts (the interpreter frees the others after their last use); replace maps a node to
    the value it takes instead of the one computed; stand_in(node) true: a tensor value is recorded as a
    meta-device tensor of its shape, dtype and strides (the real one is freed after its last use). Nothing made
    here outlives the call but the returned
    dict: a class or closure made per call would sit in a reference cycle with the dict (every recorded
    activation) until Python's cycle collector runs, which in a training loop may be never."""
    import torch
    rec = _recorder_class()(gm, keep, replace or {}, stand_in)
    with torch.no_grad():
        rec.run(*args)
    return rec.values


def _meta_like(v):
    import torch
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    if isinstance(v, (tuple, list)):
        return type(v)(_meta_like(x) for x in v)
    return v


@functools.lru_cache(maxsize=None)
def _recorder_class():
    import torch
    import torch.fx

    class Recorder(torch.fx.Interpreter):
        def __init__(self, gm, keep, replace, stand_in):
            super().__init__(gm)
            self.values, self.keep, self.replace, self.stand_in = {}, keep, replace, stand_in

        def record(self, n, out):
            if self.keep is None or self.keep(n, out):
                self.values[n] = _meta_like(out) if self.stand_in is not None and self.stand_in(n) else out

        def run_node(self, n):
            if n.op == "call_function" and n.target is torch.ops.aten.copy_.default:
                # an input updated in place (an optimizer step): recording must not apply the update. Its value
                # (read by nothing) is a stand-in: the interpreter keeps a value no node reads to the end of
                # the run, and an optimizer's copy_ are all at the end (its whole state, anew)
                (dst, *_), _kwargs = self.fetch_args_kwargs_from_env(n)
                out = _meta_like(dst)  # copy_ returns dst
                self.record(n, out)
                return out
            out = super().run_node(n)
            if n in self.replace:
                out = self.replace[n]
            self.record(n, out)
            return out
    return Recorder


# ---- conversion ------------------------------------------------------------------------------

def unflattened(shape):
    """An input's shape with each size that is a product of several dynamic sizes ("batch*seq", "4*batch*seq")
    as its factors ([batch, seq], [4, batch, seq]): what a caller passes for it (a backward's saved activation,
    flattened for a GEMM, is [batch, seq, C] there), since graph.json inputs bind the symbols one size each
    (a * symbol + b: "4*seq", "2*half+1")."""
    out = []
    for d in shape:
        factors = d.split("*") if isinstance(d, str) and "+" not in d and "-" not in d else []
        if sum(not f.isdigit() for f in factors) > 1:  # (a * symbol + b binds as it is: "4*seq", "2*half+1")
            out += [int(f) if f.isdigit() else f for f in factors]
        else:
            out.append(d)
    return out


class _Converter:
    """FX graph -> graph.json nodes. Nodes computed only from buffers and constants (never from an input
    or a parameter: masks, position ids, RoPE tables) are folded here, with PyTorch's own values, and
    become constants where a computed node reads them; parameters stay named weights."""

    def __init__(self, gm, placeholders, consts, params, values, input_names, symbols=None):
        self.gm, self.values, self.consts, self.params = gm, values, consts, params
        self.symbols = symbols or {}  # sympy name -> (graph.json name, min, max): the dynamic sizes
        self.derived = {}  # graph.json name -> (of, div): the sizes floor(of / div) (strided slices of dynamic axes)
        self.static = set()  # FX nodes whose value is known at export (folded)
        self.out_spec = None  # the pytree spec of the module's return value
        self.folded_by_value = {}  # (dtype, shape, sha1 of the bytes) -> constant name
        self.nodes, self.inputs, self.constants = [], [], {}
        self.node_by_name = {}
        self.const_data = {}
        self.env = {}  # fx node -> IR tensor name (or a tuple of them)
        self.used = set()
        self.const_ids = {}
        self.depends_on_input = set()
        self.into = []  # (IR tensor, IR input it is written into): aten.copy_ of an input
        self.current = None
        for ph, name in zip(placeholders, input_names):
            t = values[ph]
            name = self.fresh(name)
            shape = self.shape(ph)
            unflat = unflattened(shape)
            self.inputs.append({"name": name, "shape": unflat, "dtype": _value_dtype(t)})
            self.env[ph] = name
            if unflat != shape:  # a product of dynamic sizes: the input comes unflattened (its sizes bind the
                flat = self.fresh(f"{name}_flat")  # symbols), viewed here as the graph has it
                self.nodes.append({"name": flat, "op": "RESHAPE", "inputs": [name], "attrs": {"shape": shape},
                                   "shape": shape, "dtype": _value_dtype(t), "source": f"{ph.name} (input)"})
                self.env[ph] = flat
            self.depends_on_input.add(ph)

    # names
    def fresh(self, base):
        base = re.sub(r"[^A-Za-z0-9_.]", "_", base) or "t"
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def where(self, n=None):
        n = n or self.current
        mod = n.meta.get("ck_module", "")
        return f"node '{n.name}' ({_target_name(n)})" + (f" in module '{mod}'" if mod else " in the top-level module")

    def fail(self, msg):
        raise ExportError(f"{self.where()}: {msg}", self.current.name if self.current is not None else None)

    # constants
    def constant(self, name, tensor):
        import torch
        key = (id(tensor), name)
        if key in self.const_ids:
            return self.const_ids[key]
        t = tensor.detach()
        if t.dtype in (torch.float64, torch.float16, torch.bfloat16):
            t = t.float()
        if t.dtype in (torch.int16, torch.int8, torch.uint8):
            t = t.long()
        dt = _dtype_name(t.dtype)
        ir = self.fresh(name)
        self.constants[ir] = {"name": ir, "shape": list(t.shape), "dtype": dt}
        self.const_data[ir] = t.contiguous().cpu().numpy()
        self.const_ids[key] = ir
        return ir

    def array_const(self, arr, hint, dtype="f32"):
        """A constant made up by the exporter (a scalar operand, LayerNorm's missing weight)."""
        arr = np.asarray(arr, dtype={"f32": np.float32, "i64": np.int64, "bool": np.bool_}[dtype])
        ir = self.fresh(hint)
        self.constants[ir] = {"name": ir, "shape": list(arr.shape), "dtype": dtype}
        self.const_data[ir] = arr
        return ir

    # values
    def t(self, a):
        """The IR tensor of an FX argument that must be a tensor."""
        import torch.fx
        if not isinstance(a, torch.fx.Node):
            self.fail(f"expected a tensor argument, got {a!r}")
        v = self.env.get(a)
        if v is None and a in self.static:
            v = self.env[a] = self.folded(a)
        if v is None:
            self.fail(f"uses '{a.name}', which produced no tensor")
        if isinstance(v, tuple):
            self.fail(f"uses the tuple '{a.name}' as a tensor")
        return v

    def folded(self, a):
        """The constant holding the export-time value of the static node `a`."""
        import torch
        v = self.values[a]
        if not isinstance(v, torch.Tensor):
            self.fail(f"uses '{a.name}' ({type(v).__name__}) as a tensor")
        if a in self.consts:
            return self.constant(self.consts[a][0] or "constant", v)
        # equal values are one constant: each layer's copy of a shared table (a RoPE cos/sin unsqueezed
        # inside every attention module) must be the very same constant for the layers to fold
        arr = v.detach().contiguous().cpu()
        key = (str(arr.dtype), tuple(arr.shape), hashlib.sha1(arr.view(-1).view(torch.uint8).numpy()).hexdigest()
               if arr.numel() else "")
        if key not in self.folded_by_value:  # named by the node, not its module: it may serve every layer
            self.folded_by_value[key] = self.constant(f"folded.{a.name}", v)
        return self.folded_by_value[key]

    def static_scalar(self, a):
        """The number `a` stands for when it is a Python number or a one-element static tensor, else None."""
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return a
        if _is_tensor(a) and a in self.static and self.values[a].numel() == 1:
            return self.values[a].item()
        return None

    def meta(self, n):
        v = self.values[n]
        return self.shape(n), _value_dtype(v)

    def shape(self, a):
        """a's shape: ints, and with dynamic sizes, each symbolic size as graph.json writes it ("8*seq")."""
        if self.symbols:
            val = a.meta.get("val")
            if hasattr(val, "shape"):
                return [self.size(d) for d in val.shape]
        return list(self.values[a].shape)

    def size(self, d):
        """A size of a traced shape: an int, or a polynomial in the dynamic sizes as text ("8*batch*seq", "seq+1");
        a floor division of one ((seq+1)//2, a strided slice's length) is a derived size of its own (self.derived)."""
        expr = getattr(getattr(d, "node", None), "expr", None)
        if expr is None:
            return int(d)
        if expr.is_number:
            return int(expr)
        return self._poly(expr, expr)

    def _poly(self, expr, whole):
        text = ""
        for term in expr.as_ordered_terms():
            coef, factors = 1, []
            for f in term.as_ordered_factors():
                if f.is_Integer:
                    coef *= int(f)
                elif f.is_Symbol and str(f) in self.symbols:
                    factors.append(self.symbols[str(f)][0])
                elif f.is_Pow and f.base.is_Symbol and f.exp.is_Integer and int(f.exp) > 0 and \
                        str(f.base) in self.symbols:
                    factors += [self.symbols[str(f.base)][0]] * int(f.exp)
                elif type(f).__name__ == "FloorDiv" and len(f.args) == 2 and f.args[1].is_Integer and \
                        int(f.args[1]) >= 2 and not f.args[0].is_number:
                    factors.append(self._derived(self._poly(f.args[0], whole), int(f.args[1])))
                else:
                    import sympy  # (torch's) the sizes by their names, not the tracer's
                    named = whole.subs({s: sympy.Symbol(self.symbols[str(s)][0]) for s in whole.free_symbols
                                        if str(s) in self.symbols})
                    self.fail(f"size {named} is not a polynomial in the dynamic sizes (ckc compiles sizes like "
                              "8*batch*seq, seq+1 or (seq+1)//2)")
            body = "*".join(([str(abs(coef))] if abs(coef) != 1 or not factors else []) + factors)
            text += ("-" if coef < 0 else "+" if text else "") + body
        return text

    def _derived(self, of, div):
        """The name of the derived size floor(of / div) ("seq_p1_div2" for (seq+1)//2), declared once."""
        for name, rule in self.derived.items():
            if rule == (of, div):
                return name
        core = of.replace("+", "_p").replace("-", "_m").replace("*", "_x")
        name = ("n" if core[0].isdigit() else "") + f"{core}_div{div}"
        if len(name) > 40:  # (graph.json's names stop at 48 characters)
            name = f"size{len(self.derived)}_div{div}"
        taken = {n for n, _, _ in self.symbols.values()} | set(self.derived)
        base, k = name, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        self.derived[name] = (of, div)
        return name

    def op(self, op, inputs, attrs=None, out=None, hint=None):
        """Emits one IR node; `out` is the FX node whose value it computes (its shape is then declared)."""
        n = self.current
        name = self.fresh(out.name if out is not None else f"{n.name}_{hint or op.lower()}")
        node = {"name": name, "op": op, "inputs": list(inputs)}
        if attrs:
            node["attrs"] = {k: ([x if isinstance(x, str) else _num(x) for x in v] if isinstance(v, (list, tuple)) else
                                 v if isinstance(v, str) else _num(v)) for k, v in attrs.items()}
        if out is not None:
            node["shape"], node["dtype"] = self.meta(out)
            node["reference"] = out.name  # a trace of the compiled model compares it with this FX node
        node["module"] = n.meta.get("ck_module", "")
        node["source"] = f"{n.name} ({_target_name(n)})"
        self.nodes.append(node)
        self.node_by_name[name] = node
        return name

    def axis(self, d, rank):
        d = int(d)
        return d + rank if d < 0 else d

    def convert(self):
        import torch
        import torch.fx
        for n in self.gm.graph.nodes:
            self.current = n
            if n.op == "placeholder" and n in self.env:
                continue
            if self.symbols and isinstance(n.meta.get("val"), torch.SymInt):
                continue  # a size (a dynamo graph's SymInt argument, sym_size, mul): shapes carry it as text
            if n in self.consts:
                if n in self.params:
                    name, tensor = self.consts[n]
                    mod = n.meta.get("ck_module", "")
                    self.env[n] = self.constant(name or (f"{mod}.constant" if mod else "constant"), tensor)
                else:
                    self.static.add(n)  # a buffer: a constant where a computed node reads it
                continue
            if n.op == "output":
                return self.outputs(n.args[0], self.out_spec)
            if n.op != "call_function":
                self.fail(f"unsupported FX node kind '{n.op}'")
            if not n.users and n.target is not torch.ops.aten.copy_.default:
                continue  # dead (detach of an activation, unused getitem, metadata asserts)
            node_args = [a for a in _flat_args(n) if isinstance(a, torch.fx.Node)]
            if all(a in self.static for a in node_args):
                self.static.add(n)  # computed from constants only: PyTorch's value is used
                continue
            if any(a in self.depends_on_input for a in node_args):
                self.depends_on_input.add(n)
            handler = _HANDLERS.get(_target_name(n))
            if handler is None:
                raise ExportError(f"no ckc handler for {_target_name(n)} ({self.where()}); supported: "
                                  f"{', '.join(sorted(_HANDLERS))}", n.name)
            try:
                self.env[n] = handler(self, n, *n.args, **n.kwargs)
            except TypeError as e:  # a handler's arithmetic met a size that is a symbol
                if not self.symbols:
                    raise
                self.fail(f"needs a fixed size where the dynamic shapes give a symbolic one ({e})")

    def outputs(self, out, spec):
        """Output names from the module's return structure (torch.export flattens it into a tuple):
        "output" for one tensor, the keys of a dict, else output0, output1, ..."""
        flat = list(out) if isinstance(out, (list, tuple)) else [out]
        if spec is not None and spec.is_leaf():
            names = ["output"]
        elif spec is not None and isinstance(spec.type, type) and issubclass(spec.type, dict) \
                and len(spec.context) == len(flat):  # dicts and ModelOutputs (transformers)
            names = [str(k) for k in spec.context]
        else:
            names = [f"output{i}" for i in range(len(flat))]
        return [(name, self.t(o)) for name, o in zip(names, flat)]


def _target_name(n):
    t = n.target
    if t is operator.getitem:
        return "getitem"
    if hasattr(t, "overloadpacket"):
        return f"{getattr(t, 'namespace', 'aten')}.{t.overloadpacket.__name__}"
    return getattr(t, "__name__", str(t))


def _flat_args(n):
    out = []

    def walk(a):
        if isinstance(a, (list, tuple)):
            for x in a:
                walk(x)
        elif isinstance(a, dict):
            for x in a.values():
                walk(x)
        else:
            out.append(a)
    walk(n.args)
    walk(n.kwargs)
    return out


# ---- handlers: one per ATen op (packet name) -------------------------------------------------
# Each returns the IR tensor name of the node's value (or a tuple for
# multi-output ops, indexed by getitem; None marks an output ckc does not compute).

def _is_tensor(a):
    import torch.fx
    return isinstance(a, torch.fx.Node)


def _identity(c, n, x, *args, **kwargs):
    return c.t(x)


def _to_copy(c, n, x, *args, dtype=None, **kwargs):
    """x.to(dtype), and prims.convert_element_type: a CAST where the dtypes ckc computes in differ (a float64
    scalar and a float32 one do not: _value_dtype)."""
    want = c.meta(n)[1]
    if dtype is None or c.meta(x)[1] == want:
        return c.t(x)
    return c.op("CAST", [c.t(x)], {"dtype": want}, out=n)


def _convert_element_type(c, n, x, dtype):
    return _to_copy(c, n, x, dtype=dtype)


def _to(c, n, x, *args, **kwargs):
    import torch
    dtype = kwargs.get("dtype") or next((a for a in args if isinstance(a, torch.dtype)), None)
    return _to_copy(c, n, x, dtype=dtype)


def _dropout(c, n, x, p=0.5, train=False, *args, **kwargs):
    if train and p > 0:
        c.fail("dropout in training mode is random; call model.eval() before exporting")
    return c.t(x)


def _mm(c, n, a, b):
    return c.op("MATMUL", [c.t(a), c.t(b)], out=n)


def _addmm(c, n, bias, a, b, beta=1, alpha=1):
    mm = c.op("MATMUL", [c.t(a), c.t(b)], {"alpha": alpha} if alpha != 1 else None, hint="mm")
    bt = c.t(bias)
    if beta != 1:
        bt = c.op("MUL", [bt], {"scalar": beta}, hint="beta")
    return c.op("ADD", [mm, bt], out=n)


def _matmul(c, n, a, b):
    sa, sb = c.shape(a), c.shape(b)
    ta, tb = c.t(a), c.t(b)
    if len(sa) < 2 or len(sb) < 2:
        if len(sa) == 1:
            ta = c.op("RESHAPE", [ta], {"shape": [1] + sa}, hint="row")
            sa = [1] + sa
        if len(sb) == 1:
            tb = c.op("RESHAPE", [tb], {"shape": sb + [1]}, hint="col")
            sb = sb + [1]
        mm = c.op("MATMUL", [ta, tb], hint="mm")
        return c.op("RESHAPE", [mm], {"shape": c.meta(n)[0]}, out=n)
    if len(sb) > 2:  # batched B: broadcast both batch dims to the output's
        batch = c.meta(n)[0][:-2]
        if sa[:-2] != batch:
            ta = c.op("EXPAND", [ta], {"shape": batch + sa[-2:]}, hint="expand_a")
        if sb[:-2] != batch:
            tb = c.op("EXPAND", [tb], {"shape": batch + sb[-2:]}, hint="expand_b")
    return c.op("MATMUL", [ta, tb], out=n)


def _linear(c, n, x, w, b=None):
    wt = c.op("TRANSPOSE", [c.t(w)], {"dim0": 0, "dim1": 1}, hint="wt")
    if b is None:
        return c.op("MATMUL", [c.t(x), wt], out=n)
    mm = c.op("MATMUL", [c.t(x), wt], hint="mm")
    return c.op("ADD", [mm, c.t(b)], out=n)


def _t(c, n, x):
    if len(c.shape(x)) < 2:
        return c.t(x)
    return c.op("TRANSPOSE", [c.t(x)], {"dim0": 0, "dim1": 1}, out=n)


def _transpose(c, n, x, d0, d1):
    r = len(c.shape(x))
    d0, d1 = c.axis(d0, r), c.axis(d1, r)
    if d0 == d1:
        return c.t(x)
    return c.op("TRANSPOSE", [c.t(x)], {"dim0": d0, "dim1": d1}, out=n)


def _permute(c, n, x, dims):
    r = len(c.shape(x))
    dims = [c.axis(d, r) for d in dims]
    if dims == list(range(r)):
        return c.t(x)
    moved = [i for i, d in enumerate(dims) if d != i]
    if len(moved) == 2:
        return c.op("TRANSPOSE", [c.t(x)], {"dim0": moved[0], "dim1": moved[1]}, out=n)
    return c.op("PERMUTE", [c.t(x)], {"perm": dims}, out=n)


def _reshape(c, n, x, *args, **kwargs):
    shape = c.meta(n)[0]
    if shape == c.shape(x):
        return c.t(x)
    return c.op("RESHAPE", [c.t(x)], {"shape": shape}, out=n)


def _expand(c, n, x, *args, **kwargs):
    shape = c.meta(n)[0]
    if shape == c.shape(x):
        return c.t(x)
    return c.op("EXPAND", [c.t(x)], {"shape": shape}, out=n)


def _promoted(c, n, x):
    """Tensor operand x of n in n's dtype, as torch's type promotion computes it (an int64 index times a float32
    weight is float32): a CAST where the dtypes differ."""
    t, dt = c.t(x), c.meta(n)[1]
    return t if c.meta(x)[1] == dt else c.op("CAST", [t], {"dtype": dt}, hint="promoted")


def _binary(op, reverse_op=None):
    def handler(c, n, a, b, alpha=1, **kwargs):
        if kwargs.get("rounding_mode") is not None:
            c.fail(f"division with rounding_mode={kwargs['rounding_mode']!r} is not supported")
        if not _is_tensor(a):  # scalar op tensor
            return c.op(op, [_promoted(c, n, b)], {"scalar": a, "reverse": 1}, out=n)
        if not _is_tensor(b):
            s = b * alpha if op in ("ADD", "SUB") else b
            if op in ("ADD", "SUB") and s == 0 and c.meta(a)[1] == c.meta(n)[1]:
                return c.t(a)
            return c.op(op, [_promoted(c, n, a)], {"scalar": s}, out=n)
        tb = _promoted(c, n, b)
        if alpha != 1:
            tb = c.op("MUL", [tb], {"scalar": alpha}, hint="alpha")
        return c.op(op, [_promoted(c, n, a), tb], out=n)
    return handler


def _rsub(c, n, a, b, alpha=1):
    """b - alpha * a"""
    if _is_tensor(b):
        ta = c.t(a) if alpha == 1 else c.op("MUL", [c.t(a)], {"scalar": alpha}, hint="alpha")
        return c.op("SUB", [c.t(b), ta], out=n)
    ta = c.t(a) if alpha == 1 else c.op("MUL", [c.t(a)], {"scalar": alpha}, hint="alpha")
    return c.op("SUB", [ta], {"scalar": b, "reverse": 1}, out=n)


def _unary(op):
    """An elementwise unary op of the compiler's table (CK_UNARY_OPS in runtime/include/ck_kernels.h)."""
    def handler(c, n, x):
        return c.op(op, [c.t(x)], out=n)
    handler.ck_unary = op  # tests/python/test_graph_parity.py runs every one of them against PyTorch
    return handler


def _gelu(c, n, x, approximate="none"):
    return c.op("GELU", [c.t(x)], {"act": "gelu_tanh" if approximate == "tanh" else "gelu"}, out=n)


def _pow(c, n, x, e):
    if _is_tensor(x) and not _is_tensor(e):
        return c.op("POW", [c.t(x)], {"exponent": e}, out=n)
    if not _is_tensor(x) and _is_tensor(e) and x > 0:  # AdamW's bias corrections: beta ** step
        return c.op("EXP", [c.op("MUL", [c.t(e)], {"scalar": math.log(x)}, hint="log_base")], out=n)
    c.fail("only tensor ** number and (positive number) ** tensor are supported")


def _clamp(c, n, x, lo=None, hi=None):
    """aten.clamp / clamp_min / clamp_max / hardtanh with number bounds: ckc's CLAMP (an absent bound: none)."""
    if _is_tensor(lo) or _is_tensor(hi):
        c.fail("only number bounds are supported (a tensor bound is not)")
    dt = c.meta(n)[1]
    if dt in ("i64", "i32"):  # integers (indices clamped into range): exact, by comparisons (CLAMP is float32)
        out = c.t(x)
        bounds = [(fn, v) for fn, v in (("lt", lo), ("gt", hi)) if v is not None]
        for k, (fn, v) in enumerate(bounds):
            past = c.op("CMP", [out], {"fn": fn, "scalar": float(v)}, hint=f"past_{fn}")
            out = c.op("WHERE", [past, c.array_const(int(v), "bound", dt), out],
                       out=n if k == len(bounds) - 1 else None, hint="clamped")
        return out if bounds else c.op("COPY", [out], out=n)
    attrs = {k: float(v) for k, v in (("min", lo), ("max", hi)) if v is not None}
    return c.op("CLAMP", [c.t(x)], attrs, out=n)


def _fma(c, n, a, b, addend):
    """prims.fma (what addcmul decomposes to): a * b + addend."""
    if not _is_tensor(a):
        a, b = b, a
    prod = (c.op("MUL", [c.t(a), c.t(b)], hint="fma_mul") if _is_tensor(b) else
            c.op("MUL", [c.t(a)], {"scalar": b}, hint="fma_mul"))
    if _is_tensor(addend):
        return c.op("ADD", [prod, c.t(addend)], out=n)
    return c.op("ADD", [prod], {"scalar": addend}, out=n)


def _copy_into(c, n, dst, src, non_blocking=False):
    """aten.copy_ of an input (an optimizer updating its parameters and state): the value becomes an output
    written into that input's buffer (graph.json "into")."""
    names = {i["name"] for i in c.inputs}
    if dst not in c.env or c.env[dst] not in names:
        c.fail("copy_ into something else than an input of the graph")
    if n.users:
        c.fail("the result of copy_ is read (only a final update of an input is supported)")
    if not _is_tensor(src) or c.meta(src) != c.meta(dst):
        c.fail("copy_ of a value of another shape or dtype than the input's")
    if any(d == c.env[dst] for _t, d in c.into):
        c.fail(f"a second copy_ into input '{c.env[dst]}'")
    c.into.append((c.t(src), c.env[dst]))
    return c.env[dst]


def _copy(c, n, dst, src, non_blocking=False):
    """aten.copy (functional copy_): src in dst's dtype, broadcast to dst's shape."""
    shape, dt = c.meta(n)
    t = c.t(src) if _is_tensor(src) else c.array_const(src, "copy_value", dt)
    if _is_tensor(src) and c.meta(src)[1] != dt:
        t = c.op("CAST", [t], {"dtype": dt}, hint="cast")
    return t if c.shape(src) == shape else c.op("EXPAND", [t], {"shape": shape}, out=n)


def _sqrt(c, n, x):
    return c.op("POW", [c.t(x)], {"exponent": 0.5}, out=n)


def _reciprocal(c, n, x):
    return c.op("DIV", [c.t(x)], {"scalar": 1.0, "reverse": 1}, out=n)


def _layer_norm_common(c, n, x, shape, w, b, eps, out):
    xs = c.shape(x)
    if list(shape) != xs[-len(shape):] or len(shape) != 1:
        c.fail(f"layer norm over {list(shape)} of {xs}: only the last dimension is supported")
    C = xs[-1]
    tw = c.t(w) if w is not None else c.array_const(np.ones(C), "ln_ones")
    tb = c.t(b) if b is not None else c.array_const(np.zeros(C), "ln_zeros")
    return c.op("LAYERNORM", [c.t(x), tw, tb], {"eps": eps}, out=out)


def _native_layer_norm(c, n, x, shape, w, b, eps):
    y = _layer_norm_common(c, n, x, shape, w, b, eps, None)
    return (y, None, None)


def _layer_norm(c, n, x, shape, w=None, b=None, eps=1e-5, *args):
    return _layer_norm_common(c, n, x, shape, w, b, eps, n)


def _softmax(c, n, x, dim, *args, **kwargs):
    return c.op("SOFTMAX", [c.t(x)], {"axis": c.axis(dim, len(c.shape(x)))}, out=n)


def _reduce_chain(c, n, op, x, dims, keepdim):
    r = len(c.shape(x))
    dims = sorted({c.axis(d, r) for d in (dims if dims else range(r))}, reverse=True)
    t = c.t(x)
    for i, d in enumerate(dims):
        last = i == len(dims) - 1
        t = c.op(op, [t], {"axis": d, "keepdim": int(bool(keepdim))}, out=n if last else None, hint="reduce")
    return t


def _max_dim(c, n, x, dim, keepdim=False):
    return (_reduce_chain(c, None, "REDUCE_MAX", x, [dim], keepdim), None)


def _amax(c, n, x, dims=(), keepdim=False):
    return _reduce_chain(c, n, "REDUCE_MAX", x, list(dims), keepdim)


def _sum(c, n, x, dims=None, keepdim=False, dtype=None):
    if dims is None or isinstance(dims, int):
        dims = [] if dims is None else [dims]
    return _reduce_chain(c, n, "REDUCE_SUM", x, list(dims), keepdim)


def _mean(c, n, x, dims=None, keepdim=False, dtype=None):
    if dims is None or isinstance(dims, int):
        dims = [] if dims is None else [dims]
    r = len(c.shape(x))
    dims = list(dims) or list(range(r))
    if len(dims) == 1:
        return c.op("REDUCE_MEAN", [c.t(x)], {"axis": c.axis(dims[0], r), "keepdim": int(bool(keepdim))}, out=n)
    count = int(np.prod([c.shape(x)[c.axis(d, r)] for d in dims]))
    s = _reduce_chain(c, None, "REDUCE_SUM", x, dims, keepdim)
    return c.op("DIV", [s], {"scalar": float(count)}, out=n)


def _embedding(c, n, weight, ids, *args, **kwargs):
    return c.op("EMBEDDING", [c.t(ids), c.t(weight)], out=n)


def _slice_node(c, x, axis, start, length, step, out=None, hint="slice"):
    size = c.shape(x)[axis]
    if start == 0 and length == size and step == 1:
        return c.t(x)
    return c.op("SLICE", [c.t(x)], {"axis": axis, "start": start, "length": length, "step": step}, out=out, hint=hint)


def _split(c, n, x, size, dim=0):
    s = c.shape(x)
    axis = c.axis(dim, len(s))
    sizes = list(size) if isinstance(size, (list, tuple)) else \
        [min(size, s[axis] - i) for i in range(0, s[axis], size)]
    out, at = [], 0
    for i, k in enumerate(sizes):
        out.append(_slice_node(c, x, axis, at, k, 1, hint=f"part{i}"))
        at += k
    return tuple(out)


def _slice(c, n, x, dim=0, start=None, end=None, step=1):
    s = c.shape(x)
    axis = c.axis(dim, len(s))
    size = s[axis]
    length = c.shape(n)[axis] if c.symbols else None
    if isinstance(size, str) or isinstance(length, str):  # a dynamic size: its length is the traced one
        import torch.fx
        start = 0 if start is None else start
        if isinstance(start, torch.fx.Node):  # computed from the sizes (x[:, x.shape[1] - 2:])
            start = c.size(start.meta.get("val"))
        if isinstance(start, int) and start < 0:  # counted from the end (x[:, -2:]): a start that moves with the size
            start = _dim_plus(size, start)
        if start == 0 and length == size and step == 1:
            return c.t(x)
        return _slice_node(c, x, axis, start, length, step, out=n)
    start = 0 if start is None else start
    end = size if end is None else end
    start = max(0, start + size if start < 0 else start)
    end = min(size, end + size if end < 0 else end)
    length = max(0, (end - start + step - 1) // step)
    if length == 0:
        c.fail("an empty slice")
    return _slice_node(c, x, axis, start, length, step, out=n if (start, length, step) != (0, size, 1) else None)


def _dim_plus(size, k):
    """size + k, size an int or a dynamic size as text ("seq", "seq+1")."""
    if not isinstance(size, str):
        return size + k
    return f"{size}{k:+d}" if k else size


def _select(c, n, x, dim, index):
    s = c.shape(x)
    axis = c.axis(dim, len(s))
    index = _dim_plus(s[axis], index) if index < 0 else index  # x[:, -1] of a dynamic axis: at seq-1
    sl = _slice_node(c, x, axis, index, 1, 1)
    return c.op("RESHAPE", [sl], {"shape": c.meta(n)[0]}, out=n)


def _cat(c, n, tensors, dim=0):
    # torch.cat skips 1-D empty tensors whatever the others' rank (an empty KV cache before its first update)
    tensors = [t for t in tensors if list(c.shape(t)) != [0]]
    if not tensors:
        c.fail("cat of empty tensors only")
    ts = [c.t(t) for t in tensors]
    if len(ts) == 1:
        return ts[0]
    return c.op("CAT", ts, {"axis": c.axis(dim, len(c.meta(n)[0]))}, out=n)


def _arange(c, n, *args, **kwargs):
    """torch.arange. An end that is a dynamic size (arange(0, seq)) gives the node its shape, computed when the
    code runs; start and step must be numbers."""
    import torch.fx
    attrs = {"dtype": c.meta(n)[1]}
    end_at = 0 if len(args) == 1 else 1
    if isinstance(args[end_at], torch.fx.Node):
        if any(isinstance(a, torch.fx.Node) for i, a in enumerate(args) if i != end_at):
            c.fail("arange with a dynamic start or step (ckc takes numbers there; the end may be a dynamic size)")
        attrs.update(start=float(0 if end_at == 0 else args[0]), step=float(args[2] if len(args) > 2 else 1),
                     shape=c.meta(n)[0])
        return c.op("ARANGE", [], attrs, out=n)
    nums = [a for a in args if isinstance(a, (int, float))]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    attrs.update(start=float(start), end=float(end), step=float(step))
    return c.op("ARANGE", [], attrs, out=n)


def _full_value(c, n, value):
    shape, dt = c.meta(n)
    return c.op("FULL", [], {"shape": shape, "value": value, "dtype": dt}, out=n)


def _full(c, n, size, value, *args, **kwargs):
    return _full_value(c, n, value)


def _ones(c, n, *args, **kwargs):
    return _full_value(c, n, 1.0)


def _zeros(c, n, *args, **kwargs):
    return _full_value(c, n, 0.0)


def _new_full(c, n, x, size, value, *args, **kwargs):
    return _full_value(c, n, value)


def _full_like(c, n, x, value, *args, **kwargs):
    return _full_value(c, n, value)


def _scalar_tensor(c, n, value, *args, **kwargs):
    return _full_value(c, n, value)


def _constant_value(c, a):
    """The number held by a 0-d tensor computed from constants only."""
    if a in c.depends_on_input:
        c.fail(f"'{a.name}' must be a constant (it depends on an input)")
    v = c.values[a]
    if v.numel() != 1:
        c.fail(f"'{a.name}' must hold one value")
    return v.item()


def _masked_fill(c, n, x, mask, value):
    if _is_tensor(value):
        value = _constant_value(c, value)
    return c.op("MASKED_FILL", [c.t(x), c.t(mask)], {"value": value}, out=n)


def _cmp(fn):
    def handler(c, n, a, b):
        if not _is_tensor(b):
            return c.op("CMP", [c.t(a)], {"fn": fn, "scalar": b}, out=n)
        return c.op("CMP", [c.t(a), c.t(b)], {"fn": fn}, out=n)
    return handler


def _logical_not(c, n, x):
    return c.op("CMP", [c.t(x)], {"fn": "eq", "scalar": 0}, out=n)


def _broadcast_shape(s, t):
    """The broadcast of two shapes whose sizes may be dynamic ("seq"), or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(s), len(t)) + 1):
        a = s[-i] if i <= len(s) else 1
        b = t[-i] if i <= len(t) else 1
        if a != b and a != 1 and b != 1:
            return None
        out.append(b if a == 1 else a)
    return out[::-1]


def _where(c, n, cond, a, b):
    """where(cond, fill, x) and where(cond, x, fill) with a one-value fill are MASKED_FILL (what
    masked_fill decomposes to); the passes recognize causal masks in that form. Else WHERE."""
    fa, fb = c.static_scalar(a), c.static_scalar(b)
    if (fa is None) != (fb is None):
        x, fill = (b, fa) if fa is not None else (a, fb)
        mask_shape = c.shape(cond) if _is_tensor(cond) else []
        if _broadcast_shape(c.shape(x), mask_shape) == list(c.meta(n)[0]):
            mask = c.t(cond)
            if fb is not None:
                mask = c.op("CMP", [mask], {"fn": "eq", "scalar": 0}, hint="keep_not")
            return c.op("MASKED_FILL", [c.t(x), mask], {"value": fill}, out=n)
    fc = c.static_scalar(cond)
    if fc is not None and _is_tensor(a) and _is_tensor(b) and c.shape(a) == c.meta(n)[0] == c.shape(b):
        return c.t(a if fc else b)  # a condition known at compile time (AdamW's decomposed lerp)
    dt = c.meta(n)[1]
    ta = c.t(a) if _is_tensor(a) else c.array_const(a, "scalar", dt)
    tb = c.t(b) if _is_tensor(b) else c.array_const(b, "scalar", dt)
    return c.op("WHERE", [c.t(cond), ta, tb], out=n)


def _logical(fn):
    """a & b, a | b (and logical_and / logical_or) of booleans, as a WHERE: a & b is where(a, b, False), a | b
    where(a, True, b). Integer bitwise operations have no kernel."""
    def handler(c, n, a, b):
        import torch
        for v in (a, b):
            if _is_tensor(v) and c.values[v].dtype != torch.bool:
                c.fail(f"bitwise {fn} of {c.values[v].dtype} values (only booleans are supported)")
        if not _is_tensor(a):
            a, b = b, a
        fill = c.array_const(fn == "or", "false" if fn == "and" else "true", "bool")
        tb = c.t(b) if _is_tensor(b) else c.array_const(bool(b), "scalar", "bool")
        args = [c.t(a), tb, fill] if fn == "and" else [c.t(a), fill, tb]
        return c.op("WHERE", args, out=n)
    return handler


def _index(c, n, x, indices):
    """x[i0, i1, ...] with index tensors for the leading dims (advanced indexing): INDEX. A None before an
    index tensor (x[:, i]) and boolean masks (data-dependent shapes) are refused."""
    import torch
    indices = list(indices)
    while indices and indices[-1] is None:
        indices.pop()
    if not indices or any(i is None for i in indices):
        c.fail("indexing with a full slice before an index tensor (x[:, idx]): only the leading dims can be "
               "indexed")
    ins = [c.t(x)]
    for i in indices:
        if not _is_tensor(i):
            c.fail(f"index {i!r} is not a tensor")
        dt = c.values[i].dtype
        if dt == torch.bool:
            c.fail("indexing with a boolean mask (its result's shape depends on the data)")
        t = c.t(i)
        if dt != torch.int64:
            t = c.op("CAST", [t], {"dtype": "i64"}, hint="index")
        ins.append(t)
    return c.op("INDEX", ins, out=n)


def _zero_fill(n):
    """Whether FX node n is a fill of zeros (aten.full(shape, 0), zeros, new_zeros, zeros_like)."""
    name = _target_name(n) if getattr(n, "op", None) == "call_function" else ""
    return name in ("aten.zeros", "aten.new_zeros", "aten.zeros_like") or (
        name in ("aten.full", "aten.new_full", "aten.full_like") and len(n.args) > 1 and n.args[-1] == 0)


def _index_put(c, n, x, indices, values, accumulate=False):
    """x.index_put(indices, values, accumulate) with one index tensor, into x's leading dim (the embedding
    backward: a scatter-add of the gradient rows into zeros): INDEX_PUT. A zero fill as x is not a constant of
    the library (a vocabulary-sized one would be): the op starts from zeros of its rows. index_put_ (in place)
    is the same value, into an x the graph computes (conductor's rewrites.scatter_add_in_place)."""
    import torch
    indices = list(indices)
    if len(indices) != 1 or not _is_tensor(indices[0]):
        c.fail(f"index_put with {len(indices)} index tensors (one, into the leading dim, is supported)")
    i = indices[0]
    if c.values[i].dtype == torch.bool:
        c.fail("index_put with a boolean mask")
    if _target_name(n) == "aten.index_put_" and x.op == "placeholder":
        c.fail("index_put_ into an input of the graph")
    idx = c.t(i)
    if c.values[i].dtype != torch.int64:
        idx = c.op("CAST", [idx], {"dtype": "i64"}, hint="index")
    shape, dt = c.meta(n)
    want = c.shape(i) + shape[1:]
    if not _is_tensor(values):
        vals = c.array_const(values, "values", dt)
    else:
        vals = c.t(values)
        if c.meta(values)[1] != dt:
            vals = c.op("CAST", [vals], {"dtype": dt}, hint="values")
    if not _is_tensor(values) or c.shape(values) != want:
        vals = c.op("EXPAND", [vals], {"shape": want}, hint="values")
    acc = int(bool(accumulate))
    if x in c.static and _zero_fill(x) and isinstance(shape[0], int):
        return c.op("INDEX_PUT", [idx, vals], {"rows": shape[0], "accumulate": acc}, out=n)
    return c.op("INDEX_PUT", [idx, vals, c.t(x)], {"accumulate": acc}, out=n)


def _cumsum(c, n, x, dim, dtype=None):
    """torch.cumsum: integers and bools sum in int64 (torch's promotion), float32 in float32; CUMSUM."""
    out_dtype = c.meta(n)[1]
    if out_dtype not in ("f32", "i64"):
        c.fail(f"cumsum to {out_dtype} (ckc sums float32 or int64)")
    t = c.t(x)
    if c.meta(x)[1] != out_dtype:
        t = c.op("CAST", [t], {"dtype": out_dtype}, hint="cumsum_in")
    return c.op("CUMSUM", [t], {"axis": c.axis(dim, len(c.shape(x)))}, out=n)


def _tril(c, n, x, diagonal=0):
    return c.op("TRIL", [c.t(x)], {"diagonal": diagonal}, out=n)


def _sdpa(c, n, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
    if dropout_p:
        c.fail("scaled_dot_product_attention with dropout_p > 0")
    D = c.shape(q)[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if attn_mask is None:
        return c.op("ATTENTION", [c.t(q), c.t(k), c.t(v)], {"scale": scale, "causal": int(bool(is_causal))}, out=n)
    # an explicit mask: primitives (the passes recognize a causal one again)
    s = c.op("MATMUL", [c.t(q), c.t(k)], {"transpose_b": 1, "alpha": scale}, hint="scores")
    if c.values[attn_mask].dtype.is_floating_point:
        s = c.op("ADD", [s, c.t(attn_mask)], hint="masked")
    else:
        keep_not = c.op("CMP", [c.t(attn_mask)], {"fn": "eq", "scalar": 0}, hint="mask_off")
        s = c.op("MASKED_FILL", [s, keep_not], {"value": float("-inf")}, hint="masked")
    # masked: a query that may attend to nothing gets 0 (scaled_dot_product_attention), not softmax's NaN
    p = c.op("SOFTMAX", [s], {"axis": len(c.shape(q)) - 1, "masked": 1}, hint="probs")
    return c.op("MATMUL", [p, c.t(v)], out=n)


def _getitem(c, n, src, idx):
    v = c.env.get(src)
    if not isinstance(v, tuple):
        c.fail(f"indexes '{src.name}', which is not a tuple")
    if v[idx] is None:
        c.fail(f"uses output {idx} of {_target_name(src)}, which ckc does not compute (e.g. LayerNorm mean/rstd, "
               "max indices)")
    node = c.node_by_name.get(v[idx])
    if node is not None:
        node.setdefault("reference", n.name)  # LayerNorm's output 0, a split's part: this getitem's value
    return v[idx]


_HANDLERS = {
    # GEMMs
    "aten.addmm": _addmm, "aten.mm": _mm, "aten.bmm": _mm, "aten.matmul": _matmul, "aten.linear": _linear,
    # layout
    "aten.t": _t, "aten.transpose": _transpose, "aten.permute": _permute,
    "aten.view": _reshape, "aten._unsafe_view": _reshape, "aten._reshape_alias": _reshape, "aten.reshape": _reshape,
    "aten.unsqueeze": _reshape, "aten.squeeze": _reshape, "aten.flatten": _reshape, "aten.unflatten": _reshape,
    "aten.view_as": _reshape,
    "aten.expand": _expand, "aten.expand_as": _expand,
    "aten.clone": _identity, "aten.detach": _identity, "aten.contiguous": _identity, "aten.alias": _identity,
    "aten.lift_fresh_copy": _identity, "aten.lift_fresh": _identity, "aten._to_copy": _to_copy, "aten.to": _to,
    "aten.dropout": _dropout,
    "aten.split": _split, "aten.split_with_sizes": _split, "aten.slice": _slice, "aten.select": _select,
    "aten.cat": _cat, "getitem": _getitem,
    # elementwise
    "aten.add": _binary("ADD"), "aten.sub": _binary("SUB"), "aten.mul": _binary("MUL"), "aten.div": _binary("DIV"),
    "aten.true_divide": _binary("DIV"), "prims.convert_element_type": _convert_element_type,
    "aten.rsub": _rsub,
    "aten.relu": _unary("RELU"), "aten.silu": _unary("SILU"), "aten.tanh": _unary("TANH"), "aten.exp": _unary("EXP"),
    "aten.rsqrt": _unary("RSQRT"), "aten.neg": _unary("NEG"), "aten.sigmoid": _unary("SIGMOID"), "aten.abs": _unary("ABS"),
    "aten.cos": _unary("COS"), "aten.sin": _unary("SIN"), "aten.erf": _unary("ERF"), "aten.gelu": _gelu, "aten.pow": _pow,
    "aten.sqrt": _sqrt, "aten.reciprocal": _reciprocal, "prims.fma": _fma, "aten.copy": _copy,
    "aten.clamp": _clamp, "aten.clamp_min": lambda c, n, x, lo: _clamp(c, n, x, lo=lo),
    "aten.clamp_max": lambda c, n, x, hi: _clamp(c, n, x, hi=hi),
    "aten.hardtanh": lambda c, n, x, lo=-1.0, hi=1.0: _clamp(c, n, x, lo, hi),
    "aten.copy_": _copy_into,
    # normalization, softmax, reductions
    "aten.native_layer_norm": _native_layer_norm, "aten.layer_norm": _layer_norm,
    "aten._softmax": _softmax, "aten.softmax": _softmax,
    "aten.max": _max_dim, "aten.amax": _amax, "aten.sum": _sum, "aten.mean": _mean,
    # lookups, attention
    "aten.embedding": _embedding, "aten.scaled_dot_product_attention": _sdpa,
    "ckc.sdpa": _sdpa,  # the torch backend's stand-in, which AOTAutograd does not decompose (conductor/rewrites.py)
    # masks and constants (folded by the compiler where they are constant, else run)
    "aten.arange": _arange, "aten.full": _full, "aten.ones": _ones, "aten.zeros": _zeros,
    "aten.full_like": _full_like, "aten.new_full": _new_full, "aten.ones_like": _ones, "aten.zeros_like": _zeros,
    "aten.new_ones": _ones, "aten.new_zeros": _zeros, "aten.scalar_tensor": _scalar_tensor,
    "aten.masked_fill": _masked_fill, "aten.where": _where, "aten.tril": _tril,
    "aten.eq": _cmp("eq"), "aten.ne": _cmp("ne"), "aten.lt": _cmp("lt"), "aten.le": _cmp("le"),
    "aten.gt": _cmp("gt"), "aten.ge": _cmp("ge"), "aten.logical_not": _logical_not, "aten.bitwise_not": _logical_not,
    "aten.__and__": _logical("and"), "aten.bitwise_and": _logical("and"), "aten.logical_and": _logical("and"),
    "aten.__or__": _logical("or"), "aten.bitwise_or": _logical("or"), "aten.logical_or": _logical("or"),
    "aten.index": _index, "aten.index_put": _index_put, "aten.index_put_": _index_put,
    "aten._unsafe_index_put": _index_put, "aten.cumsum": _cumsum,
}


# ---- entry point ---------------------------------------------------------------------------------

def _input_names(model, n):
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params][:n]
    except (TypeError, ValueError):
        names = []
    return names + [f"input{i}" for i in range(len(names), n)]


def require_torch():
    """The torch module, or ExportError saying what to install when it is missing or older than 2.x."""
    hint = "run scripts/install_deps.sh in the ckc checkout, or pip install torch==2.13.0"
    try:
        import torch
    except ImportError as e:
        raise ExportError(f"ckc.export needs PyTorch 2.x, which is not installed ({e}); {hint}") from None
    if int(torch.__version__.split(".")[0]) < 2 or not hasattr(torch, "export"):
        raise ExportError(f"ckc.export needs PyTorch 2.x (torch.export); this is torch {torch.__version__}; {hint}")
    return torch


def reference_values(model, example_inputs):
    """{FX node name: float32 numpy value} of one PyTorch run of the graph export() captures: what the
    `reference` names of graph.json (and so the traces of the compiled model, ckc.trace) refer to."""
    torch = require_torch()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    gm, placeholders, feeds, consts, _params, _spec, _symbols = _capture(model, tuple(example_inputs))
    values = _record_values(gm, placeholders, feeds, consts)
    return {n.name: v.detach().float().numpy() for n, v in values.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point()}


def export(model, example_inputs, out_dir, dynamic_shapes=None):
    """Writes OUT_DIR/graph.json and OUT_DIR/weights.safetensors; returns the graph.json path.

    example_inputs: a tuple of tensors (float32, int64, int32 or bool); their shapes become the
    compiled shapes, except the sizes `dynamic_shapes` makes dynamic, as torch.export.export takes it
    ({"x": {0: ckc.Dim("batch", max=64)}}): those the compiled library takes at run time, within bounds.
    """
    torch = require_torch()
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"export needs an nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    for i, a in enumerate(example_inputs):
        if not isinstance(a, torch.Tensor):
            raise ExportError(f"example input {i} is a {type(a).__name__}; pass tensors")
        if a.dtype == torch.float64:
            raise ExportError(f"example input {i} is float64; ckc computes in float32 (pass .float() inputs)")
        _dtype_name(a.dtype)
    for name, mod in model.named_modules():
        if mod.training and isinstance(mod, torch.nn.modules.dropout._DropoutNd) and mod.p > 0:
            raise ExportError(f"module '{name}' ({type(mod).__name__}, p={mod.p}) is in training mode, where dropout is "
                              "random; call model.eval() before exporting")
    gm, placeholders, feeds, consts, params, out_spec, symbols = _capture(model, example_inputs, dynamic_shapes)
    values = _record_values(gm, placeholders, feeds, consts)
    doc, data = graph_document(gm, placeholders, consts, params, values, _input_names(model, len(example_inputs)),
                               out_spec, type(model).__name__, f"ckc.export (torch.export, torch {torch.__version__})",
                               symbols)
    return write_graph(out_dir, doc, data)


def graph_document(gm, placeholders, consts, params, values, input_names, out_spec, module_name, producer,
                   symbols=None):
    """(graph.json document, {constant: numpy array}) for a captured ATen graph. `placeholders` are the
    caller's inputs in order, `consts` maps the other placeholders / get_attrs to (name, tensor), `params`
    are the constants that stay named weights, `values` holds every node's value of one run; `symbols`
    {sympy name: (name, min, max)} the dynamic sizes, which the shapes in the nodes' meta carry."""
    conv = _Converter(gm, placeholders, consts, params, values, input_names, symbols)
    conv.out_spec = out_spec
    outputs = conv.convert()
    outputs = [{"name": name, "tensor": t} for name, t in outputs] + [
        {"name": f"{dst}.updated", "tensor": t, "into": dst} for t, dst in conv.into]
    doc = {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "producer": producer,
        "module": module_name,
        "weights": "weights.safetensors",
        "inputs": conv.inputs,
        "constants": list(conv.constants.values()),
        "nodes": conv.nodes,
        "outputs": outputs,
    }
    if symbols:
        doc["symbols"] = {name: {"min": lo, "max": hi} for name, lo, hi in symbols.values()}
        doc["symbols"].update({name: {"of": of, "div": div} for name, (of, div) in conv.derived.items()})
    return doc, conv.const_data


def write_graph(out_dir, doc, const_data):
    """OUT_DIR/graph.json and OUT_DIR/weights.safetensors; returns the graph.json path."""
    from . import safetensors
    os.makedirs(out_dir, exist_ok=True)
    graph_path = os.path.join(out_dir, "graph.json")
    tmp = graph_path + ".tmp"
    safetensors.save(os.path.join(out_dir, "weights.safetensors"), const_data)
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, graph_path)
    return graph_path
