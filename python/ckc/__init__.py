"""ckc's Python side: build compiled models and run them through ctypes.

    import sys; sys.path.insert(0, "scripts")
    import ckc
    c = ckc.compile_model("models/tiny-llama/config.json", "out")
    m = ckc.LlmModel(ckc.build_library(c), "weights-folder")

    path = ckc.export(module, (example_input,), "out/export")       # graph.json + weights
    c = ckc.compile_model(path, "out")                                # model.c + model.weights.safetensors
    g = ckc.GraphModel(ckc.build_library(c))                          # y = g(x), numpy in and out
"""
from .build import ROOT, build_library, ckc_binary, compile_model, random_weights
from .export import ExportError, export
from .graph import GraphModel
from .llm import CkError, LlmModel, sample

__all__ = ["ROOT", "build_library", "ckc_binary", "compile_model", "random_weights", "CkError", "LlmModel", "sample",
           "ExportError", "export", "GraphModel"]
