"""Module buffers compiled in as constants: a causal mask or RoPE tables the graph only reads fold at compile
time like values the module builds, instead of splitting the graph around eager ops; guarded, recompiled when
one changes. The same for the Python floats dynamo passes as inputs (its unspecialized floats: a norm's eps, an
attention's scaling, math.pi, which dynamic=True turns into 0-d float64 tensors): compiled in, their values
compared on each call."""
import copy
import math
import warnings


# Module buffers up to this many bytes that the graph only reads become constants of the graph (_bake_buffers)
BAKE_BYTES = 64 << 20


# what may read a baked buffer (or a view of it): ops that neither write their inputs nor return them aliased
# for a later write; anything else (F.batch_norm updating running stats, an in-place method) keeps it an input
PURE_METHODS = {"__getitem__", "eq", "ne", "lt", "le", "gt", "ge", "bool", "float", "to", "type_as", "view",
                 "reshape", "expand", "unsqueeze", "squeeze", "contiguous", "logical_not", "masked_fill", "size",
                 "dim", "transpose", "permute", "t", "narrow", "flatten", "tril", "triu", "numel", "__invert__"}


VIEW_METHODS = {"__getitem__", "view", "reshape", "expand", "unsqueeze", "squeeze", "contiguous", "transpose",
                 "permute", "t", "narrow", "flatten"}


def reads_only(node, depth=0):
    """Whether every use of node (a buffer's placeholder, or a view of it) only reads it."""
    import torch
    pure_fns = {torch.where, torch.tril, torch.triu, torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge,
                torch.logical_not, torch.masked_fill, torch.cos, torch.sin, torch.matmul, torch.cat, torch.stack}
    for u in node.users:
        if u.op == "output":
            return False  # returned: the caller may write it
        if u.op == "call_method":
            if u.target not in PURE_METHODS:
                return False
            if u.target in VIEW_METHODS and (depth > 8 or not reads_only(u, depth + 1)):
                return False
        elif u.op == "call_function":
            mod = getattr(u.target, "__module__", "") or ""
            if u.target in pure_fns:
                continue
            if mod in ("_operator", "operator") and not u.target.__name__.startswith("i"):
                if u.target.__name__ == "getitem" and (depth > 8 or not reads_only(u, depth + 1)):
                    return False
                continue
            return False
        else:
            return False
    return True


def buffer_inputs(gm, example_inputs):
    """Indices of dynamo's inputs that are module buffers (its source is a module's _buffers entry: a causal
    mask, RoPE tables) which the graph only reads, real tensors of at most BAKE_BYTES."""
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
                and t.numel() * t.element_size() <= BAKE_BYTES and reads_only(n)):
            out.append(i)
    return out


def float_inputs(gm, example_inputs):
    """Indices of dynamo's inputs that stand for a Python float (an unspecialized float: dynamo passes it as a 0-d
    float64 tensor and guards only its type, so that a new value does not retrace)."""
    import torch
    out = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (n, t) in enumerate(zip(placeholders, example_inputs)):
        arg = n.meta.get("grapharg")
        if (getattr(arg, "pass_arg_as_tensor", False) and isinstance(t, torch.Tensor) and t.dim() == 0
                and t.dtype == torch.float64 and not t.requires_grad):
            out.append(i)
    return out


def _same_float(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


class BakedBuffers:
    """A compiled graph whose read-only module buffers are compiled in as constants: a mask computed from a
    buffer folds at compile time like one the module builds, instead of splitting the graph into partitions
    around eager ops. Guarded: each call checks that every baked buffer is the same tensor, at the same address, unchanged (torch's version counter); when one
    changed (`model.mask.fill_(...)`, a new tensor assigned), the graph is compiled again with the new values
    (one warning), as dynamo recompiles on a failed guard. compile_graph(gm, args, options, constants) is the
    backend's compiler (jit._compile_graph).

    `floats` (float_inputs) are compiled in the same way, each call comparing their values with the compiled ones
    (dynamo passes a new tensor each time); when one changed, the graph runs eagerly from then on (one warning)."""

    def __init__(self, gm, example_inputs, options, indices, compile_graph, floats=()):
        import torch.fx
        self.original, self.options, self.indices = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph)), options, indices
        self.floats = list(floats)
        self.compile_graph = compile_graph
        self.warned = self.eager = False
        self._build(example_inputs)

    def _build(self, args):
        import torch.fx
        self.seen = [(args[i], args[i]._version, args[i].data_ptr()) for i in self.indices]
        self.values = [args[i].item() for i in self.floats]
        gm = torch.fx.GraphModule(self.original, copy.deepcopy(self.original.graph))
        self.fn = self.compile_graph(gm, args, self.options,
                                     {i: args[i].detach().clone() for i in self.indices + self.floats})

    def _buffer_changed(self, args):
        return any(args[i] is not t or args[i]._version != version or args[i].data_ptr() != ptr
                   for (t, version, ptr), i in zip(self.seen, self.indices))

    def _float_changed(self, args):
        """(old, new) of the first compiled-in float whose value changed, else None."""
        for v, i in zip(self.values, self.floats):
            x = args[i].item()
            if not _same_float(x, v):
                return v, x
        return None

    def _warn(self, why):
        if not self.warned:
            self.warned = True
            warnings.warn(f"ckc (gcu): {why}", stacklevel=3)

    def __call__(self, *args):
        if self.eager:
            return self.original(*args)
        changed = self._float_changed(args)
        if changed:  # (compiling again would trace the graph outside dynamo, where the float's .item() has no value)
            self._warn(f"a Python float compiled in as a constant changed ({changed[0]!r} -> {changed[1]!r}); the "
                       "graph runs eagerly from now on")
            self.eager = True
            return self.original(*args)
        if self._buffer_changed(args):
            self._warn("a module buffer compiled in as a constant changed; compiling the graph again with its new value")
            self._build(args)
        return self.fn(*args)
