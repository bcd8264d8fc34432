"""ckc's Python side: compile models, build them with cc, run them through ctypes.

    import ckc
    c = ckc.compile_model("path/to/config.json", "out")              # out/model.c (+ .kernels)
    m = ckc.LlmModel(ckc.build_library(c), "path/to/hf-folder")       # logits = m.forward([1, 2, 3])

    path = ckc.export(module, (example_input,), "out/export")        # graph.json + weights (torch 2.x)
    c = ckc.compile_model(path, "out")                                 # model.c + model.weights.safetensors
    g = ckc.GraphModel(ckc.build_library(c))                           # y = g(x): numpy or torch in and out

Installed with `pip install .` the package carries the compiler (ckc/bin/ckc),
the runtime sources and the templates; in a checkout it uses build/ckc and the
checkout's runtime/ (scripts/install_deps.sh puts python/ on the venv's path).
"""
try:
    import numpy  # noqa: F401
except ImportError as e:  # the one hard dependency
    raise ImportError(f"ckc needs numpy ({e}): pip install numpy, or in a ckc checkout run scripts/install_deps.sh "
                      "and use its Python (scripts/py)") from None

from .build import ROOT, build_library, ckc_binary, compile_model, include_dir, random_weights
from .export import Dim, ExportError, export
from .graph import GraphModel
from .llm import CkError, LlmModel, Sampler
from .text import Tokenizer, TokenizerError
from . import trace
from .conductor import aot_compile, aot_load, cache_clear, explain

__all__ = ["ROOT", "build_library", "ckc_binary", "compile_model", "include_dir", "random_weights", "CkError",
           "LlmModel", "Sampler", "Tokenizer", "TokenizerError", "Dim", "ExportError", "export", "GraphModel", "trace", "aot_compile", "aot_load",
           "cache_clear", "explain"]
