"""The same inputs give bit-identical outputs on every run and at 1, 2, 3 and 4 threads: each kernel splits its work
by output rows, columns or heads, never a reduction by the thread count, so every value is summed in the same order
whatever the team (f32 and q4_0 weights, prefill and KV-cache decode, an exported graph). Shapes large enough that
every kernel runs on the whole team."""
import os

import numpy as np
import pytest
import torch

import ckc
from ckc import cross
from ckc.examples import GPT, randomize
from conftest import prompt, tiny

WIDE = tiny(hidden_size=256, intermediate_size=688, num_attention_heads=8, num_key_value_heads=4, vocab_size=1024,
            max_position_embeddings=256)
THREADS = (1, 2, 3, 4)


@pytest.mark.parametrize("weights,blas", [("f32", "openblas"), ("q4_0", "openblas"), ("f32", "builtin")])
def test_llm_logits_are_bit_identical_at_any_thread_count(build, weights, blas, tmp_path):
    """The manifest build (OpenBLAS, single-threaded inside each thread's columns) and the standalone file's own
    GEMM (cc -fopenmp model.c -lm)."""
    b = build(WIDE, args=() if weights == "f32" else ("--weights", weights))
    m = b.model()
    if blas == "builtin":
        c = ckc.compile_model(os.path.join(b.folder, "config.json"), str(tmp_path), args=["--standalone"])
        so = cross.build(c, str(tmp_path / "libmodel.so"), opt="-O2", main=None, flags=["-fPIC", "-shared", "-fopenmp"])
        m = ckc.LlmModel(so, b.weights)
    ids = prompt(72, WIDE["vocab_size"], seed=11)
    runs = {}
    for n in THREADS:
        m.set_threads(n)
        m.kv_cache_disable()
        prefill = np.asarray(m.forward(ids)).copy()
        m.kv_cache_enable(len(ids) + 8)
        m.forward(ids[:-8])
        decode = np.stack([np.asarray(m.decode(t)).copy() for t in ids[-8:]])
        runs[n] = (prefill, decode)
    for n in THREADS:
        assert np.array_equal(runs[n][0], runs[1][0]), f"prefill at {n} threads differs from 1 thread"
        assert np.array_equal(runs[n][1], runs[1][1]), f"decode at {n} threads differs from 1 thread"
    # and on another run at the same thread count
    m.set_threads(2)
    m.kv_cache_disable()
    assert np.array_equal(np.asarray(m.forward(ids)), runs[2][0])


def test_graph_outputs_are_bit_identical_at_any_thread_count(compile_graph):
    m = randomize(GPT(vocab=512, dim=256, heads=8, layers=2, max_len=64), seed=3)
    idx = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(2))
    c = compile_graph("gpt-determinism", m, (idx,))
    ys = {n: np.asarray(c.model(threads=n)(idx.numpy())).copy() for n in THREADS}
    for n in THREADS:
        assert np.array_equal(ys[n], ys[1]), f"{n} threads differ from 1"
