"""Checkpoint handling: f16 and bf16 source weights load and match their float32
conversion, sharded checkpoints load as one, f32 weights are used in place."""
import os

import pytest

import ckc
from ckc import safetensors as st
from conftest import max_diff, prompt, tiny


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_precision_weights_match_their_f32_conversion(build, tmp_path, dtype):
    b = build(tiny(tie_word_embeddings=True, attention_bias=True))
    w = st.load(b.weights)
    half, rounded = tmp_path / dtype, tmp_path / (dtype + "-as-f32")
    half.mkdir()
    rounded.mkdir()
    st.save(str(half / "model.safetensors"), w, dtype=dtype)
    st.save(str(rounded / "model.safetensors"), {k: st.round_to(v, dtype) for k, v in w.items()})
    header = st.read_header(str(half / "model.safetensors"))
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {dtype.upper()}
    toks = prompt(20, 256, seed=11)
    a = b.model(str(half)).forward(toks)
    c = b.model(str(rounded)).forward(toks)
    assert max_diff(a, c) < 1e-6  # identical values, converted at load vs used in place
    assert max_diff(a, b.model().forward(toks)) > 1e-4  # the rounding really changed the weights


def test_sharded_checkpoint_loads_as_one(build, tmp_path):
    b = build(tiny())
    shards = tmp_path / "sharded"
    ckc.build.run([ckc.ckc_binary(), "random-weights", os.path.join(b.folder, "config.json"), "-o", str(shards),
                   "--std", "0.15", "--shard-size", "60000"])
    files = sorted(os.listdir(shards))
    assert "model.safetensors.index.json" in files
    assert len([f for f in files if f.endswith(".safetensors")]) > 3
    toks = prompt(10, 256, seed=12)
    single = b.model().forward(toks)
    for path in (str(shards), str(shards / "model.safetensors.index.json")):
        assert max_diff(b.model(path).forward(toks), single) == 0.0
    # a single .safetensors file works too
    assert max_diff(b.model(os.path.join(b.weights, "model.safetensors")).forward(toks), single) == 0.0


def test_random_weights_are_deterministic(build, tmp_path):
    b = build(tiny())
    again = tmp_path / "again"
    ckc.build.run([ckc.ckc_binary(), "random-weights", os.path.join(b.folder, "config.json"), "-o", str(again),
                   "--std", "0.15"])
    a = open(os.path.join(b.weights, "model.safetensors"), "rb").read()
    assert a == open(again / "model.safetensors", "rb").read()
