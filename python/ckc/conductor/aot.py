"""Ahead-of-time artifacts: a folder that runs without torch and without a C compiler.

    ckc.aot_compile(model, (x,), "artifacts/mlp")     # torch.export -> ckc -> cc, once
    m = ckc.aot_load("artifacts/mlp"); y = m(x)       # numpy or torch in, the same out

The folder holds model.c (+ model.c.kernels), libmodel.so, model.weights.safetensors (the module's
parameters and buffers at compile time; absent for a module without any), graph.json (what ckc compiled) and signature.json: the input and
output names, shapes and dtypes, the graph's hash, the ckc version, the ck_graph ABI version, the target,
and the sha256 of the library and the weights. aot_load checks all of it before running anything: a
truncated library, a replaced weights file, an edited signature or an artifact from another ckc ABI is
refused with an error saying which; a call whose inputs do not match the signature is refused naming the
input. In C, the same folder is the ck_graph ABI (runtime/include/ck_graph.h).
"""
import json
import os
import platform
import shutil
import tempfile

import numpy as np

from .. import build
from ..graph import ABI_VERSION, GraphModel
from ..llm import CkError, as_numpy, is_torch

SIGNATURE_VERSION = 1


class ArtifactError(CkError):
    """An AOT artifact that cannot be used as it is; the message says which file and why."""

    def __init__(self, message):
        super().__init__(-5, message)


def _specs(graph_model, kind):
    """The signature's inputs or outputs: name, shape (a symbolic input size by its name, an output's as -1),
    dtype."""
    return [{"name": s.name, "shape": s.dims(), "dtype": np.dtype(s.dtype).name}
            for s in getattr(graph_model, kind)]


def aot_compile(model, example_inputs, path, options=(), dynamic_shapes=None):
    """Exports `model` on `example_inputs` (their shapes and dtypes become the signature), compiles and builds
    it, and writes the artifact folder `path` (replaced whole, never half-written). Returns the path.
    options: as the backend's ({"target": "gcu"} for the gcu device; the default here is "cpu").
    dynamic_shapes: as ckc.export's ({"x": {0: ckc.Dim("batch", max=64)}}): the artifact then takes any size
    within those bounds (the signature lists the symbols)."""
    from ..export import export
    from .cache import compile_args, target_of
    if isinstance(options, dict) and "fallback" in options:
        raise ValueError("ckc: options['fallback'] is for torch.compile; an AOT artifact runs every op in ckc, "
                         "without torch")
    if isinstance(options, dict) and "huge_pages" in options:
        raise ValueError("ckc: options['huge_pages'] is for torch.compile (the parameters it reads from PyTorch's "
                         "memory); an AOT artifact loads its weights itself")
    options = compile_args(options, "cpu")
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".aot-", dir=parent)
    try:
        graph = export(model, example_inputs, tmp, dynamic_shapes=dynamic_shapes)
        c_path = build.compile_model(graph, tmp, args=list(options))
        os.remove(os.path.join(tmp, "weights.safetensors"))  # compiled into model.weights.safetensors
        so = build.build_library(c_path)
        weights = os.path.join(tmp, "model.weights.safetensors")  # (none for a module without weights)
        weights = weights if os.path.exists(weights) else None
        g = GraphModel(so, weights)
        signature = {
            "signature_version": SIGNATURE_VERSION,
            "ckc_version": build.run([build.ckc_binary(), "--version"]).stdout.split()[1],
            "abi_version": ABI_VERSION,
            "target": f"{target_of(options)}-{platform.machine()}",
            "module": type(model).__name__,
            "graph_sha256": build.sha256_file(os.path.join(tmp, "graph.json")),
            "library_sha256": build.sha256_file(so),
            "weights_sha256": build.sha256_file(weights) if weights else None,
            "inputs": _specs(g, "inputs"),
            "outputs": _specs(g, "outputs"),
            "symbols": {name: list(bounds) for name, bounds in g.symbols.items()},
        }
        g.close()
        with open(os.path.join(tmp, "signature.json"), "w") as f:
            json.dump(signature, f, indent=1)
            f.write("\n")
        if os.path.exists(path):
            shutil.rmtree(path)
        os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


class AotModel(GraphModel):
    """A loaded artifact: call it like the module it was compiled from."""

    def __init__(self, path, threads=None):
        path = os.path.abspath(path)
        sig_path = os.path.join(path, "signature.json")
        try:
            with open(sig_path) as f:
                sig = json.load(f)
        except FileNotFoundError:
            raise ArtifactError(f"{path}: not a ckc AOT artifact (no signature.json)") from None
        except (ValueError, RecursionError) as e:
            raise ArtifactError(f"{sig_path}: not valid JSON ({e})") from None
        except OSError as e:
            raise ArtifactError(f"{sig_path}: cannot be read ({e})") from None
        if not isinstance(sig, dict):
            raise ArtifactError(f"{sig_path}: expected a JSON object, got {type(sig).__name__}")
        need = ("signature_version", "ckc_version", "abi_version", "library_sha256", "weights_sha256", "inputs",
                "outputs")
        missing = [k for k in need if k not in sig]
        if missing:
            raise ArtifactError(f"{sig_path}: missing {', '.join(missing)}")
        if sig["abi_version"] != ABI_VERSION:
            raise ArtifactError(f"{path}: built for ck_graph ABI version {sig['abi_version']} (ckc "
                                f"{sig['ckc_version']}); this ckc speaks version {ABI_VERSION}: compile it again")
        so, weights = os.path.join(path, "libmodel.so"), os.path.join(path, "model.weights.safetensors")
        if sig["weights_sha256"] is None:  # a module without weights: none may have appeared
            if os.path.exists(weights):
                raise ArtifactError(f"{weights}: the artifact was compiled without weights (signature.json); "
                                    "compile it again")
        for what, file, key in (("library", so, "library_sha256"), ("weights", weights, "weights_sha256")):
            if key == "weights_sha256" and sig[key] is None:
                weights = None
                continue
            if not os.path.exists(file):
                raise ArtifactError(f"{path}: the {what} {os.path.basename(file)} is missing")
            if build.sha256_file(file) != sig[key]:
                raise ArtifactError(f"{file}: the {what} is not the one signature.json was written for (its sha256 "
                                    "differs: truncated, replaced or edited); compile the artifact again")
        super().__init__(so, weights, threads=threads)
        for kind in ("inputs", "outputs"):
            if _specs(self, kind) != sig[kind] or (kind == "inputs" and
                                                   {k: list(v) for k, v in self.symbols.items()} != sig.get("symbols", {})):
                self.close()
                raise ArtifactError(f"{sig_path}: its {kind} {sig[kind]} are not what the library takes "
                                    f"{_specs(self, kind)}: the signature was edited")
        self.signature = sig
        self.path = path

    def __call__(self, *inputs):
        if len(inputs) != len(self.inputs):
            raise CkError(-1, f"{self.path} takes {len(self.inputs)} inputs ({', '.join(map(repr, self.inputs))}), "
                              f"got {len(inputs)}")
        for spec, x in zip(self.inputs, inputs):
            a = as_numpy(x)
            fits = len(a.shape) == len(spec.shape) and all(
                sym is not None or d == fixed for d, fixed, sym in zip(a.shape, spec.shape, spec.symbols))
            if not fits or a.dtype != spec.dtype:
                raise CkError(-1, f"input '{spec.name}' of {self.path} must be {np.dtype(spec.dtype).name}"
                                  f"{spec.dims()} (the signature it was compiled for), got {a.dtype}"
                                  f"{list(a.shape)}{' (a torch tensor)' if is_torch(x) else ''}")
        return super().__call__(*inputs)


def aot_load(path, threads=None):
    """The artifact at `path`, checked against its signature (see the module doc); needs neither torch nor cc."""
    return AotModel(path, threads)
