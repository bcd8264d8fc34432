"""Every intermediate tensor of a compiled model, and where it first diverges from a reference.

Build the library with the trace hooks compiled in (runtime/include/ck_trace.h), record a run, and
compare it with what a reference computed under the same names:

    so = ckc.build_library(c_path, extra_flags=["-DCK_TRACE"])
    m = ckc.LlmModel(so, "hf-folder")
    with ckc.trace.recording(m) as events:           # m: an LlmModel or a GraphModel
        m.forward(tokens)
    refs = ckc.trace.transformers_outputs(hf_model, tokens)   # {"model.layers.1.mlp.down_proj": array, ...}
    d = ckc.trace.first_divergence(events, refs)               # None, or where and by how much
    print(d)   # first divergence at model.layers.1.mlp.down_proj (node ffn_out, MATMUL ...): max |diff| 0.31 ...

An event's `reference` names the reference tensor holding the same values: the Hugging Face module
whose forward output it is (with the layer filled in), or the exported graph node; "" when nothing
computes it alone (a fused node's private result).
"""
import contextlib
import ctypes
from dataclasses import dataclass

import numpy as np

from .llm import CkError


class _Event(ctypes.Structure):
    _fields_ = [("section", ctypes.c_char_p), ("layer", ctypes.c_int), ("node", ctypes.c_char_p),
                ("op", ctypes.c_char_p), ("module", ctypes.c_char_p), ("reference", ctypes.c_char_p),
                ("data", ctypes.POINTER(ctypes.c_float)), ("rows", ctypes.c_int64), ("cols", ctypes.c_int64),
                ("ld", ctypes.c_int64)]


_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_Event))


@dataclass
class TraceEvent:
    section: str        # header, block, footer
    layer: int          # -1 outside the block
    node: str           # the IR node
    op: str
    module: str         # the source module, layer filled in
    reference: str      # the reference tensor with the same values, layer filled in; "" if none
    data: np.ndarray    # [rows, cols] float32, a copy

    def where(self):
        at = f"layer {self.layer} " if self.layer >= 0 else ""
        src = f" from {self.module}" if self.module and self.module != self.reference else ""
        return f"{self.section} {at}node {self.node} ({self.op}{src})"


def _fill(name, layer):
    return name.replace("{L}", str(layer)) if layer >= 0 else name


def _setter(model):
    lib = model.lib
    for name in ("ck_model_set_trace", "ck_graph_set_trace"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, _CALLBACK, ctypes.c_void_p]
            return fn
    raise CkError(-7, "this library has no ck_model_set_trace / ck_graph_set_trace (built by an older ckc?)")


@contextlib.contextmanager
def recording(model):
    """Collects a TraceEvent for every node the model runs inside the `with`. The library must be built with
    -DCK_TRACE (CkError CK_ENOTSUP otherwise)."""
    events = []

    def on_event(_user, ev):
        e = ev.contents
        rows, cols, ld = e.rows, e.cols, e.ld
        n = (rows - 1) * ld + cols if rows > 0 else 0
        flat = np.ctypeslib.as_array(e.data, shape=(max(n, 1),))
        data = np.lib.stride_tricks.as_strided(flat, shape=(rows, cols), strides=(ld * 4, 4)).copy()
        layer = e.layer
        events.append(TraceEvent(e.section.decode(), layer, e.node.decode(), e.op.decode(),
                                 _fill(e.module.decode(), layer), _fill(e.reference.decode(), layer), data))

    set_trace = _setter(model)
    cb = _CALLBACK(on_event)
    rc = set_trace(model.h, cb, None)
    if rc < 0:
        raise CkError(rc, model.lib.ck_last_error().decode())
    try:
        yield events
    finally:
        set_trace(model.h, _CALLBACK(), None)


def transformers_outputs(model, input_ids):
    """{module path: output as float32 [rows, last dim]} of one forward of a transformers model (its first
    call of each module; a tuple output counts by its first element)."""
    import torch

    outs, hooks = {}, []

    def hook(name):
        def record(_module, _args, out):
            if isinstance(out, (tuple, list)) and out:
                out = out[0]
            if isinstance(out, torch.Tensor) and name not in outs and out.is_floating_point():
                t = out.detach().float()
                outs[name] = t.reshape(-1, t.shape[-1] if t.dim() else 1).numpy().copy()
        return record

    for name, mod in model.named_modules():
        if name:
            hooks.append(mod.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            model(torch.tensor([list(input_ids)]))
    finally:
        for h in hooks:
            h.remove()
    return outs


@dataclass
class Divergence:
    event: TraceEvent
    max_diff: float
    ref_max: float
    compared: int       # references that matched before this one

    def __str__(self):
        return (f"first divergence at {self.event.reference} ({self.event.where()}): max |diff| {self.max_diff:.3g}, "
                f"reference max |x| {self.ref_max:.3g}; the {self.compared} traced tensors before it agree")


def compare(events, refs, tol=1e-4):
    """(event, max |diff|, reference max |x|, within tolerance) for every event whose reference is in `refs`
    with as many elements; within tolerance: max |diff| <= tol * max(1, max |reference|)."""
    out = []
    for e in events:
        ref = refs.get(e.reference) if e.reference else None
        if ref is None or ref.size != e.data.size:
            continue
        ours = e.data.reshape(-1).astype(np.float64)
        theirs = np.asarray(ref, dtype=np.float64).reshape(-1)
        d = float(np.max(np.abs(ours - theirs))) if ours.size else 0.0
        scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
        out.append((e, d, scale, d <= tol * max(1.0, scale)))
    return out


def first_divergence(events, refs, tol=1e-4):
    """The first traced tensor, in execution order, that differs from its reference beyond tolerance
    (see compare), or None when all agree."""
    for i, (e, d, scale, ok) in enumerate(compare(events, refs, tol)):
        if not ok:
            return Divergence(e, d, scale, i)
    return None
