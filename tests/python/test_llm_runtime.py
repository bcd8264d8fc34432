"""The compiled LLM library's own behaviour beyond parity with transformers
(tests/python/test_hf_parity.py): chunked prefill through the KV cache,
cache reset / disable, thread counts, and checkpoint naming variants."""
import os
import shutil

import numpy as np
import pytest

from ckc import safetensors as st
from conftest import ROOT, max_diff, prompt, tiny

CONFIGS = {
    "gqa_untied": tiny(),
    "mqa_head_dim_window": tiny(model_type="mistral", vocab_size=251, hidden_size=48, intermediate_size=100,
                                num_key_value_heads=1, head_dim=16, sliding_window=6),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_chunked_prefill_through_the_cache(build, name):
    b = build(CONFIGS[name])
    m = b.model()
    toks = prompt(24, b.config["vocab_size"], seed=3)
    full = m.forward(toks)  # cache off: a fresh sequence
    m.kv_cache_enable(24)
    chunks = [m.forward(toks[i:i + 8]) for i in (0, 8, 16)]
    assert max_diff(np.concatenate(chunks), full) < 1e-4
    assert m.kv_cache_tokens == 24
    m.kv_cache_reset()
    assert m.kv_cache_tokens == 0
    assert max_diff(m.forward(toks), full) < 1e-4
    m.kv_cache_disable()  # back to fresh sequences: the same tokens give the same logits again
    assert max_diff(m.forward(toks), full) < 1e-4
    assert max_diff(m.forward(toks), full) < 1e-4


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_last_position_logits_only_unless_asked(build, name):
    """ck_model_set_logits_all: the default computes the last position's logits only (its lm_head GEMM on one
    row), through the cache too; forward() asks for every row."""
    b = build(CONFIGS[name])
    m = b.model()
    toks = prompt(20, b.config["vocab_size"], seed=4)
    full = m.forward(toks)
    last = m.forward(toks, last_only=True)
    assert last.shape == (1, b.config["vocab_size"]) and max_diff(last[0], full[-1]) < 1e-5
    m.kv_cache_enable(24)
    a = m.forward(toks[:12], last_only=True)
    c = m.forward(toks[12:], last_only=True)
    assert max_diff(a[0], full[11]) < 1e-4 and max_diff(c[0], full[-1]) < 1e-4
    m.decode(3)  # one row, as before
    assert m.logits().shape == (1, b.config["vocab_size"])


def test_one_thread_and_two_threads_agree(build):
    b = build(CONFIGS["gqa_untied"])
    toks = prompt(33, 256, seed=5)
    a = b.model(threads=1).forward(toks)
    c = b.model(threads=2).forward(toks)
    assert max_diff(a, c) < 1e-5


@pytest.mark.parametrize("strip", ["transformer.", None])
def test_gpt2_with_and_without_the_transformer_prefix(build, tmp_path, strip):
    """GPT2LMHeadModel saves "transformer.h.0...", GPT2Model "h.0...": both load, the attn.bias buffers
    of old checkpoints are ignored."""
    import json
    with open(os.path.join(ROOT, "models", "tiny-gpt2", "config.json")) as f:
        b = build(json.load(f))
    w = st.load(b.weights)
    assert all(k.startswith("transformer.") for k in w)
    folder = tmp_path / "gpt2"
    folder.mkdir()
    if strip:
        w = {k[len(strip):]: v for k, v in w.items()}
    w["h.0.attn.bias" if strip else "transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 128, 128), np.float32))
    st.save(str(folder / "model.safetensors"), w)
    shutil.copy(os.path.join(b.folder, "config.json"), folder / "config.json")
    toks = prompt(20, 256, seed=7)
    assert max_diff(b.model(str(folder)).forward(toks), b.model().forward(toks)) == 0.0


def test_torch_token_tensors(build):
    import torch
    b = build(CONFIGS["gqa_untied"])
    m = b.model()
    toks = prompt(9, 256, seed=8)
    ref = m.forward(toks)
    got = m.forward(torch.tensor(toks))
    assert isinstance(got, torch.Tensor) and max_diff(got.numpy(), ref) == 0.0
    assert m.generate(torch.tensor([toks[:4]]), 6) == m.generate(toks[:4], 6)


def test_openmp_waits_spin_briefly_then_sleep(build):
    """Loading a model sets libgomp's GOMP_SPINCOUNT to ck_kernels.h's CK_GOMP_SPINCOUNT (scripts/bench_threads.py
    measures why), unless a wait policy was chosen; the generated executable does the same for itself."""
    import re
    header = open(os.path.join(ROOT, "runtime", "include", "ck_kernels.h")).read()
    value = re.search(r'#define CK_GOMP_SPINCOUNT "(\d+)"', header).group(1)
    build(CONFIGS["gqa_untied"]).model()
    if "OMP_WAIT_POLICY" not in os.environ:
        assert os.environ.get("GOMP_SPINCOUNT") == value
    src = open(os.path.join(build(CONFIGS["gqa_untied"]).folder, "model.c")).read()
    assert 'setenv("GOMP_SPINCOUNT", CK_GOMP_SPINCOUNT, 1)' in src
