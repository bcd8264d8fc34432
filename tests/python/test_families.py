"""Every supported family against the independent PyTorch reference of its
Hugging Face forward pass (scripts/ckc/reference/decoders.py): prefill logits,
KV-cache decode vs recomputation, greedy generation."""
import json
import os
import shutil

import numpy as np
import pytest

from ckc import safetensors as st
from conftest import ROOT, max_diff, prompt


def model_config(name, **overrides):
    with open(os.path.join(ROOT, "models", name, "config.json")) as f:
        c = json.load(f)
    c.update(overrides)
    return c


CASES = {
    "mistral_window_8": model_config("tiny-mistral"),                 # window shorter than the sequences
    "mistral_no_window": model_config("tiny-mistral", sliding_window=None),
    "qwen2": model_config("tiny-qwen2"),                              # q/k/v biases, tied, large theta
    "qwen2_sliding_layers": model_config("tiny-qwen2", use_sliding_window=True, sliding_window=5,
                                         max_window_layers=1),        # full on layer 0, window on layer 1
    "gpt2": model_config("tiny-gpt2"),
    "gpt2_layer_scaled": model_config("tiny-gpt2", scale_attn_by_inverse_layer_idx=True),
    "phi3": model_config("tiny-phi3"),                                # fused qkv/gate_up, window 16
    "gemma": model_config("tiny-gemma"),                              # heads * head_dim = 64 != hidden 48
    "phi": model_config("tiny-phi"),                                  # parallel block, partial rotary
    "gemma2": model_config("tiny-gemma2"),                            # sandwich norms, softcaps, alternating window
}


@pytest.fixture(params=sorted(CASES), scope="module")
def case(request, build):
    b = build(CASES[request.param])
    return request.param, b, b.reference()


def test_prefill_logits_match(case):
    name, b, ref = case
    toks = prompt(40, b.config["vocab_size"], seed=1)
    ours, theirs = b.model().forward(toks), ref.forward(toks).numpy()
    assert theirs.std() > 0.05, "logits too flat to test anything"
    assert max_diff(ours, theirs) < 1e-4, name


def test_kv_cache_decode_equals_recomputation(case):
    name, b, ref = case
    toks = prompt(30, b.config["vocab_size"], seed=2)
    full = ref.forward(toks).numpy()
    m = b.model()
    m.kv_cache_enable(48)
    rows = [m.forward(toks[:7])] + [m.decode(t)[None, :] for t in toks[7:]]
    assert max_diff(np.concatenate(rows), full) < 1e-4, name


def test_greedy_generation_identical_for_32_steps(case):
    name, b, ref = case
    p = prompt(5, b.config["vocab_size"], seed=4)
    ours, theirs = b.model().generate(p, 32), ref.generate(p, 32)
    assert ours == theirs, name
    assert len(set(ours[5:])) > 3, "degenerate generation does not test much"


def test_window_really_limits_attention(build):
    """With a window shorter than the sequence the logits differ from full attention."""
    toks = prompt(30, 256, seed=6)
    windowed = build(CASES["mistral_window_8"]).model().forward(toks)
    full = build(CASES["mistral_no_window"]).model().forward(toks)
    assert max_diff(windowed[:8], full[:8]) < 1e-5   # the first 8 positions see everything either way
    assert max_diff(windowed[8:], full[8:]) > 1e-2


@pytest.mark.parametrize("strip", ["transformer.", None])
def test_gpt2_with_and_without_the_transformer_prefix(build, tmp_path, strip):
    b = build(CASES["gpt2"])
    w = st.load(b.weights)
    assert all(k.startswith("transformer.") for k in w)
    folder = tmp_path / "gpt2"
    folder.mkdir()
    if strip:  # as GPT2Model.save_pretrained writes it
        w = {k[len(strip):]: v for k, v in w.items()}
    w["h.0.attn.bias" if strip else "transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 128, 128), np.float32))
    st.save(str(folder / "model.safetensors"), w)
    shutil.copy(os.path.join(b.folder, "config.json"), folder / "config.json")
    toks = prompt(20, 256, seed=7)
    assert max_diff(b.model(str(folder)).forward(toks), b.model().forward(toks)) == 0.0
