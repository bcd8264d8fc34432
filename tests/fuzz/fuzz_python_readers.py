"""Coverage-guided fuzzing (atheris, libFuzzer's engine for Python) of the Python readers of files ckc did not
write itself: the first byte picks what the rest is.
  0  a safetensors file         ckc.safetensors.load        -> arrays, or ckc.safetensors.FormatError
  1  a *.safetensors.index.json ckc.safetensors.load        (beside two valid shards; the path rule holds)
  2  an AOT artifact's signature.json  ckc.aot_load         -> ckc.ArtifactError (the library is never loaded:
                                                               its sha256 does not match)
  3  a Conductor cache entry's manifest.json / plan          -> treated as a corrupt entry, never an exception
Any other exception is a finding. Run by tests/fuzz/run.sh as the others are (the seeds: tests/fuzz/seeds/python).
    python tests/fuzz/fuzz_python_readers.py [libFuzzer options] CORPUS_DIR...
"""
import json
import os
import struct
import sys
import tempfile

import atheris

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # (not instrumented: only ckc's own modules are)

with atheris.instrument_imports(include=["ckc"]):
    from ckc import safetensors as st
    from ckc.conductor import aot, cache

WORK = tempfile.mkdtemp(prefix="ck-fuzz-python-")
SHARDS = os.path.join(WORK, "shards")
ARTIFACT = os.path.join(WORK, "artifact")
CACHE = os.path.join(WORK, "cache")


def _shard(name, tensor):
    header = json.dumps({tensor: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    with open(os.path.join(SHARDS, name), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + np.float32([1, 2]).tobytes())


def _setup():
    os.makedirs(SHARDS)
    _shard("shard-1.safetensors", "a")
    _shard("shard-2.safetensors", "b")
    os.makedirs(ARTIFACT)
    for name in ("libmodel.so", "model.weights.safetensors"):
        with open(os.path.join(ARTIFACT, name), "wb") as f:
            f.write(b"not the real file")
    os.makedirs(os.path.join(CACHE, "graphs", "entry"))
    os.makedirs(os.path.join(CACHE, "whole"))
    os.environ["CKC_CACHE_DIR"] = CACHE


def TestOneInput(data):
    if not data:
        return
    kind, body = data[0] % 4, data[1:]
    if kind == 0:
        path = os.path.join(WORK, "model.safetensors")
        with open(path, "wb") as f:
            f.write(body)
        try:
            st.load(path)
        except st.FormatError:
            pass
    elif kind == 1:
        path = os.path.join(SHARDS, "model.safetensors.index.json")
        with open(path, "wb") as f:
            f.write(body)
        try:
            out = st.load(path)
            assert set(out) <= {"a", "b"}, out.keys()
        except st.FormatError:
            pass
    elif kind == 2:
        with open(os.path.join(ARTIFACT, "signature.json"), "wb") as f:
            f.write(body)
        try:
            aot.aot_load(ARTIFACT)
            raise AssertionError("an artifact whose library does not match its signature loaded")
        except aot.ArtifactError:
            pass
    else:
        with open(os.path.join(CACHE, "graphs", "entry", "manifest.json"), "wb") as f:
            f.write(body)
        with open(os.path.join(CACHE, "whole", "k.json"), "wb") as f:
            f.write(body)
        assert cache._valid(os.path.join(CACHE, "graphs", "entry")) in (True, False)
        cache.recall_whole_graph("k")


if __name__ == "__main__":
    _setup()
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
