"""graph.json documents made to any size, for what scales with the graph (compile time, memory): the compile-time
benchmark (scripts/bench_compile.py) and its test (tests/python/test_graph_scale.py).

    chain(n)         n elementwise nodes in a line (unary ops, an ADD every third node reaching two back)
    mlp(layers, d)   layers of Linear + activation in the nodes ckc.export writes for nn.Sequential(Linear, ReLU /
                     GELU, ...) (TRANSPOSE of the weight, MATMUL, bias ADD, activation: 4 nodes a layer), with
                     random weights in weights.safetensors
Both are written by write(doc, folder[, weights]); reverse=True lists the nodes last-first (the schema allows any
order of a DAG).
"""
import json
import os

import numpy as np

from . import safetensors

_UNARY = ["RELU", "TANH", "SIGMOID"]


def chain(n, shape=(4, 8), reverse=False):
    nodes, prev = [], "x"
    for i in range(n):
        if i % 3 == 2:
            nodes.append({"name": f"n{i}", "op": "ADD", "inputs": [prev, f"n{i - 2}"]})
        else:
            nodes.append({"name": f"n{i}", "op": _UNARY[i % 3], "inputs": [prev]})
        prev = f"n{i}"
    return _doc("Chain", [{"name": "x", "shape": list(shape), "dtype": "f32"}], [], nodes, prev, reverse)


def mlp(layers, dim=8, batch=2, reverse=False, seed=0):
    """(document, {constant name: array}) of nn.Sequential(Linear(dim, dim), GELU, Linear, ReLU, ...) as exported."""
    rng = np.random.default_rng(seed)
    nodes, consts, weights, prev = [], [], {}, "input"
    for i in range(layers):
        w, b = f"{2 * i}.weight", f"{2 * i}.bias"
        weights[w] = (rng.standard_normal((dim, dim)) * 0.3).astype(np.float32)
        weights[b] = (rng.standard_normal(dim) * 0.1).astype(np.float32)
        consts += [{"name": w, "shape": [dim, dim], "dtype": "f32"}, {"name": b, "shape": [dim], "dtype": "f32"}]
        t, mm, add, act = (f"permute_{i}", f"addmm_{i}_mm", f"addmm_{i}", f"act_{i}")
        module = str(2 * i)
        nodes += [
            {"name": t, "op": "TRANSPOSE", "inputs": [w], "attrs": {"dim0": 0, "dim1": 1}, "module": module},
            {"name": mm, "op": "MATMUL", "inputs": [prev, t], "module": module},
            {"name": add, "op": "ADD", "inputs": [mm, b], "module": module},
            {"name": act, "op": "GELU" if i % 2 == 0 else "RELU", "inputs": [add],
             "attrs": {"act": "gelu"} if i % 2 == 0 else {}, "module": str(2 * i + 1)},
        ]
        prev = act
    doc = _doc("Sequential", [{"name": "input", "shape": [batch, dim], "dtype": "f32"}], consts, nodes, prev, reverse)
    return doc, weights


def _doc(module, inputs, constants, nodes, last, reverse):
    return {"schema": "ckc.graph", "version": 1, "producer": "ckc.synthetic", "module": module,
            "weights": "weights.safetensors", "inputs": inputs, "constants": constants,
            "nodes": nodes[::-1] if reverse else nodes, "outputs": [{"name": "output", "tensor": last}]}


def write(doc, folder, weights=None):
    """folder/graph.json (and folder/weights.safetensors); returns the graph.json path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "graph.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    if weights:
        safetensors.save(os.path.join(folder, "weights.safetensors"), weights)
    return path
