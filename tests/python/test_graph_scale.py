"""A graph of any size compiles, in time that grows with it linearly (issue: a 50k-node graph listed last-first
overflowed the stack; edits rebuilt the graph's index, so a chain of 8k nodes took a minute).

The graphs are python/ckc/synthetic.py's: a chain of elementwise nodes, and an MLP written in the nodes ckc.export
makes (checked here against a real export). scripts/bench_compile.py measures up to 100k nodes."""
import math
import subprocess
import time

import numpy as np
import pytest
import torch

import ckc
from ckc import synthetic


def compile_seconds(graph, out, runs=3):
    """The fastest of `runs` compiles (the machine's noise only ever adds)."""
    best = math.inf
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run([ckc.ckc_binary(), "compile", graph, "-o", str(out)], capture_output=True, text=True)
        best = min(best, time.perf_counter() - t)
        assert r.returncode == 0, r.stderr
    return best


def test_a_long_chain_listed_last_first_compiles(tmp_path):
    # the execution order was a recursion as deep as the chain: SIGSEGV at 50k nodes
    graph = synthetic.write(synthetic.chain(50_000, reverse=True), str(tmp_path / "g"))
    r = subprocess.run([ckc.ckc_binary(), "compile", graph, "-o", str(tmp_path / "model.c")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("make", ["chain", "mlp"])
def test_compile_time_grows_linearly(tmp_path, make):
    def graph(n):
        if make == "chain":
            return synthetic.write(synthetic.chain(n), str(tmp_path / f"c{n}"))
        doc, weights = synthetic.mlp(n // 4)
        return synthetic.write(doc, str(tmp_path / f"m{n}"), weights)
    small = compile_seconds(graph(5_000), tmp_path / "small" / "model.c")
    big = compile_seconds(graph(20_000), tmp_path / "big" / "model.c")
    print(f"{make}: 5k nodes {small:.2f} s, 20k nodes {big:.2f} s ({big / small:.1f}x)")
    assert big < 10.0
    # 4x the nodes: ~4x the time (n log n: ~4.6x); quadratic would be 16x
    assert big < 8 * small + 0.5, (small, big)


def test_the_synthetic_mlp_is_what_ckc_export_writes_and_runs(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    real = ckc.export(m, (torch.randn(2, 8),), str(tmp_path / "real"))
    import json
    with open(real) as f:
        real_doc = json.load(f)
    doc, weights = synthetic.mlp(2)
    assert [n["op"] for n in doc["nodes"]] == [n["op"] for n in real_doc["nodes"]]
    assert [len(n["inputs"]) for n in doc["nodes"]] == [len(n["inputs"]) for n in real_doc["nodes"]]
    # and it computes the MLP
    graph = synthetic.write(doc, str(tmp_path / "syn"), weights)
    c = ckc.compile_model(graph, str(tmp_path / "out"))
    model = ckc.GraphModel(ckc.build_library(c), str(tmp_path / "out" / "model.weights.safetensors"))
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    want = x
    for i in range(2):
        want = want @ weights[f"{2 * i}.weight"].T + weights[f"{2 * i}.bias"]
        want = (torch.nn.functional.gelu(torch.from_numpy(want)).numpy() if i % 2 == 0 else np.maximum(want, 0))
    got = model(x)
    np.testing.assert_allclose(got[0] if isinstance(got, (list, tuple)) else got, want, rtol=1e-5, atol=1e-5)
