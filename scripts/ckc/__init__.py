"""ckc's Python side: build compiled models and run them through ctypes.

    import sys; sys.path.insert(0, "scripts")
    import ckc
    c = ckc.compile_model("models/tiny-llama/config.json", "out")
    m = ckc.LlmModel(ckc.build_library(c), "weights-folder")
"""
from .build import ROOT, build_library, ckc_binary, compile_model, random_weights
from .llm import CkError, LlmModel, sample

__all__ = ["ROOT", "build_library", "ckc_binary", "compile_model", "random_weights", "CkError", "LlmModel", "sample"]
