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


def test_weights_of_another_config_are_refused(build, tmp_path):
    """ck_model_init checks the config.json beside the safetensors against the values the model was compiled from
    (the keys that decide the numbers beyond the tensors' shapes, those the compiled config.json sets): 8 heads
    instead of 4 give the same shapes, and another RoPE base none at all, yet each is an error naming the file, the
    key and both values. Weights without a config.json load (their tensors are checked one by one); an unreadable
    config.json is an error naming it."""
    import json
    import shutil
    b = build(tiny(rope_theta=10000.0, hidden_act="silu"))
    toks = prompt(6, 256, seed=13)
    want = b.model().forward(toks)

    def weights_with(**change):
        folder = tmp_path / ("w-" + "-".join(f"{k}{v}" for k, v in change.items()))
        shutil.copytree(b.weights, folder)
        cfg = json.load(open(folder / "config.json"))
        cfg.update(change)
        json.dump(cfg, open(folder / "config.json", "w"))
        return str(folder)

    for change, message in [({"num_attention_heads": 8}, "'num_attention_heads' is 8; the model was compiled for 4"),
                            ({"rope_theta": 500000.0}, "'rope_theta' is 500000; the model was compiled for 10000"),
                            ({"hidden_act": "gelu"}, "'hidden_act' is \"gelu\"; the model was compiled for \"silu\"")]:
        path = weights_with(**change)
        with pytest.raises(ckc.CkError, match=f"{os.path.join(path, 'config.json')}: {message}"):
            b.model(path)
    assert max_diff(b.model(weights_with(rope_theta=10000, max_position_embeddings=64)).forward(toks), want) == 0.0
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(os.path.join(b.weights, "model.safetensors"), bare)
    assert max_diff(b.model(str(bare)).forward(toks), want) == 0.0
    (bare / "config.json").write_text("{\"hidden_size\": 64,")
    with pytest.raises(ckc.CkError, match="bare/config.json: JSON error at byte 19"):
        b.model(str(bare))


def test_weights_load_modes_give_the_same_model(build, monkeypatch):
    """CK_WEIGHTS_LOAD picks how ck_model_init loads the weights (runtime/io/huge_pages.c): stream (the default:
    mapped, and moved onto huge pages when the page cache holds a large file on small ones), map (a plain
    mapping), read (a copy on anonymous huge pages). All give the same numbers; any other value is refused at init,
    naming the variable and the values it takes."""
    b = build(tiny())
    toks = prompt(12, 256, seed=13)
    monkeypatch.delenv("CK_WEIGHTS_LOAD", raising=False)
    default = b.model().forward(toks)
    for mode in ("stream", "map", "read"):
        monkeypatch.setenv("CK_WEIGHTS_LOAD", mode)
        assert max_diff(b.model().forward(toks), default) == 0.0, mode
    monkeypatch.setenv("CK_WEIGHTS_LOAD", "mmap")
    with pytest.raises(Exception, match=r"CK_WEIGHTS_LOAD=mmap: expected stream \(the default\), map or read"):
        b.model()
