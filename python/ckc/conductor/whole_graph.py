"""Whole-graph records: when a dynamo graph compiled to one library fed straight from its inputs, the cache
remembers which entry, inputs and outputs (a plan), and a later process serves the graph from it without
AOTAutograd or partitioning, calling the library on dynamo's own arguments."""
import hashlib
import operator

from . import cache
from .partition import load_entry


def plan_of(fused):
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


def key_of(gm, example_inputs, options, constants=None):
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


def cached_runner(key, example_inputs=None):
    """The cached whole-graph library for this key as the compiled function, or None."""
    plan = cache.recall_whole_graph(key)
    return runner_of(plan, example_inputs) if plan else None


def runner_of(plan, example_inputs=None):
    """A whole-graph plan (plan_of) as the compiled function: the library called on dynamo's own
    arguments, nothing in between. When the example inputs it reads are contiguous CPU tensors of the compiled
    dtypes and shapes (which dynamo's guards then hold for every call: the plan's key has static shapes and
    strides), the library's guarded_torch_runner, which checks nothing per call; else its torch_runner."""
    model = load_entry(plan["entry"])
    inputs, outputs = plan["inputs"], plan["outputs"]
    if example_inputs is not None and _guarded(model, [example_inputs[i] for i in inputs]) and \
            not any(j is not None for j in model.into):
        import torch
        params = {i for i, k in enumerate(inputs) if type(example_inputs[k]) is torch.nn.Parameter}
        compiled = model.guarded_torch_runner(len(example_inputs), inputs, outputs, params)
        compiled.model = model  # keeps the library loaded
        return compiled
    run = model.torch_runner()

    def compiled(*args):
        outs = run(*[args[i] for i in inputs])
        return tuple(outs[j] for j in outputs)
    compiled.model = model  # keeps the library loaded
    return compiled


def _guarded(model, tensors):
    import torch

    from ..graph import torch_dtypes
    dtypes = torch_dtypes()
    return all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_contiguous() and
               t.dtype is dtypes.get(spec.dtype) and tuple(t.shape) == tuple(spec.shape)
               for t, spec in zip(tensors, model.inputs))


# dynamo graphs served straight from a whole-graph cache record, skipping AOTAutograd (tests read it)
HITS = [0]
