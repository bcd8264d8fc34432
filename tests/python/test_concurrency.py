"""One handle per thread (the documented rule of ck_model.h / ck_graph.h) and long runs (issue #32):
- the Python API from several threads at once, each with its own handle of one library, gives what one thread
  gives, bit for bit (ctypes releases the GIL in every call: the C runs truly in parallel);
- tests/c/threads_check.c built as users build (-O3, OpenMP): 8 threads x 8 handles x 200 decode steps equal to a
  single-threaded run (sanitized_model.sh runs the same program under ThreadSanitizer);
- a soak: thousands of prefill / decode / reset cycles, and graph runs, with resident memory flat after warm-up.
"""
import os
import subprocess
import threading

import numpy as np
import pytest
import torch

import ckc
from conftest import ROOT, prompt, tiny

LLAMA = tiny(vocab_size=128, max_position_embeddings=256)


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def decode_run(built, steps=60):
    m = built.model(threads=1)
    m.kv_cache_enable(steps + 8)
    out = [m.decode(t).copy() for t in prompt(steps, LLAMA["vocab_size"], seed=4)]
    m.close()
    return np.stack(out)


def in_threads(fn, n):
    results, errors = [None] * n, []

    def work(i):
        try:
            results[i] = fn()
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_python_api_from_threads_equals_one_thread(build):
    b = build(LLAMA)
    want = decode_run(b)
    for got in in_threads(lambda: decode_run(b), 6):
        assert np.array_equal(got, want)


def test_graph_handles_from_threads_equal_one_thread(compile_graph):
    from ckc.examples import MLP, randomize
    c = compile_graph("threads-mlp", randomize(MLP(16)), (torch.randn(4, 16),))
    xs = [np.random.default_rng(i).standard_normal((4, 16)).astype(np.float32) for i in range(50)]

    def run():
        g = c.model(threads=1)
        out = [np.array(g.run(x), copy=True) for x in xs]
        g.close()
        return out

    want = run()
    for got in in_threads(run, 6):
        assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_threads_check_at_o3_with_openmp(build, tmp_path):
    """8 threads x 8 handles x 200 decode steps, the C program, built as users build their programs."""
    b = build(LLAMA)
    c_path = os.path.join(b.folder, "model.c")
    kernels = open(c_path + ".kernels").read().split()
    exe = str(tmp_path / "threads_check")
    subprocess.run(["cc", "-O3", "-fopenmp", "-I", os.path.join(ROOT, "runtime", "include"),
                    os.path.join(ROOT, "tests", "c", "threads_check.c"), c_path, *kernels, "-lopenblas", "-lm",
                    "-lpthread", "-o", exe], check=True, capture_output=True)
    r = subprocess.run([exe, b.weights, "8", "200"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "identical to one thread" in r.stdout


def test_soak_prefill_decode_reset_keeps_memory_flat(build):
    """10000 cycles of an 8-token prefill, 4 decode steps and a cache reset (and a second handle opened and freed
    every 100 cycles): resident memory after the first 1000 cycles grows by less than 2 MiB over the rest."""
    b = build(LLAMA)
    m = b.model(threads=1)
    m.kv_cache_enable(32)
    ids = prompt(8, LLAMA["vocab_size"], seed=9)
    first = None
    for cycle in range(10000):
        m.kv_cache_reset()
        m.forward(ids)
        for t in ids[:4]:
            m.decode(t)
        if cycle % 100 == 99:  # handles opened and freed too
            b.model(threads=1).close()
        if cycle == 999:
            first = rss_kib()
    grown = rss_kib() - first
    m.close()
    print(f"soak: 10000 cycles, RSS after 1000: {first} KiB, growth over the next 9000: {grown} KiB")
    assert grown < 2048, f"resident memory grew by {grown} KiB"
