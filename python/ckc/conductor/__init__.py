"""Conductor: ckc as a PyTorch compiler backend, and ahead-of-time artifacts.

    import torch, ckc
    fast = torch.compile(model, backend="gcu")     # JIT (jit.py): ATen graph -> ckc -> cc, cached on disk
    print(ckc.explain(model, (x,)))                 # per node: compiled where, or eager and why
    ckc.aot_compile(model, (x,), "artifacts/mlp")   # AOT (aot.py): a folder that needs no torch and no cc
    m = ckc.aot_load("artifacts/mlp"); y = m(x)
    ckc.cache_clear()                               # the JIT cache (cache.py): $CKC_CACHE_DIR

torch finds the "gcu" backend through the `torch_dynamo_backends` entry point of the installed package (a
checkout's venv gets the same entry point from scripts/install_deps.sh); importing ckc after torch also
registers it. Importing ckc does not import torch.
"""
import sys

from .aot import AotModel, ArtifactError, aot_compile, aot_load
from .cache import cache_clear, cache_dir

BACKEND = "gcu"


def gcu(gm, example_inputs, **kwargs):
    """The torch.compile backend (torch.compile(model, backend="gcu")); see jit.py."""
    from .jit import gcu as compile_graph
    return compile_graph(gm, example_inputs, **kwargs)


def explain(model, example_inputs, backward=False, options=None):
    """What torch.compile(model, backend="gcu", options=options) makes of `model` on `example_inputs`: for every
    graph, per ATen node, compiled (in which partition) or not, and why, and what ran it instead (eager, or the
    Inductor graph with options={"fallback": "inductor"}). Resets dynamo's compiled code first. backward=True
    also differentiates the outputs' sum and reports the backward graphs (*_backward); the parameters' .grad
    are left as they were."""
    from .jit import explain as run
    return run(model, example_inputs, backward, options)


def register():
    """Registers the gcu backend with torch._dynamo (idempotent)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    if BACKEND not in _COMPILER_FNS:
        register_backend(compiler_fn=gcu, name=BACKEND)


def _declared_by_entry_point():
    from importlib.metadata import entry_points
    return BACKEND in entry_points(group="torch_dynamo_backends").names


# torch is here already and no installed distribution declares the backend: make "gcu" known now (with the
# entry point, torch loads and registers it itself on first use)
if "torch" in sys.modules and not _declared_by_entry_point():
    try:
        register()
    except ImportError:
        pass

__all__ = ["AotModel", "ArtifactError", "aot_compile", "aot_load", "cache_clear", "cache_dir", "explain", "gcu",
           "register"]
