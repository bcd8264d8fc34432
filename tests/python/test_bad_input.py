"""Bad input gives the documented error and exit code, never a crash, and
leaves no output file behind."""
import ctypes
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

import ckc
from ckc import safetensors as st
from ckc.llm import CkError, load_library
from conftest import ROOT, tiny

CK_EINVAL, CK_ERANGE, CK_ESTATE, CK_EIO, CK_EFORMAT = -1, -2, -3, -4, -5

BAD_CONFIGS = {
    "not_json": ('{"model_type": "llama",,}', "not valid JSON"),
    "missing_model_type": (json.dumps({"hidden_size": 64}), '"model_type"'),
    "unsupported_model_type": (json.dumps({"model_type": "bert"}), "supported: llama"),
    "string_for_number": (json.dumps(tiny(hidden_size="64")), '"hidden_size": must be an integer'),
    "negative": (json.dumps(tiny(intermediate_size=-1)), '"intermediate_size"'),
    "zero_layers": (json.dumps(tiny(num_hidden_layers=0)), '"num_hidden_layers"'),
    "heads_do_not_divide": (json.dumps(tiny(num_attention_heads=5, num_key_value_heads=5)), '"num_attention_heads"'),
    "kv_heads_do_not_divide": (json.dumps(tiny(num_key_value_heads=3)), '"num_key_value_heads"'),
    "bad_rope_scaling": (json.dumps(tiny(rope_scaling={"rope_type": "dynamic", "factor": 2.0})), '"rope_scaling.rope_type"'),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_exit_code_message_and_no_output(tmp_path, case):
    text, expected = BAD_CONFIGS[case]
    cfg = tmp_path / "config.json"
    cfg.write_text(text)
    out = tmp_path / "out" / "model.c"
    p = subprocess.run([ckc.ckc_binary(), "compile", str(cfg), "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert expected in p.stderr
    assert str(cfg) in p.stderr
    assert "Traceback" not in p.stderr and "terminate" not in p.stderr
    assert not out.exists() and not (tmp_path / "out" / "model.c.kernels").exists()


def test_failed_compile_keeps_the_previous_output(tmp_path):
    out = tmp_path / "model.c"
    good = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    subprocess.run([ckc.ckc_binary(), "compile", good, "-o", str(out)], check=True, capture_output=True)
    before = out.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert subprocess.run([ckc.ckc_binary(), "compile", str(bad), "-o", str(out)], capture_output=True).returncode == 1
    assert out.read_text() == before
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_usage_and_io_errors(tmp_path):
    good = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    run = lambda *a: subprocess.run([ckc.ckc_binary(), *a], capture_output=True, text=True)
    assert run("compile", good).returncode == 2  # no -o
    p = run("compile", good, "-o", str(tmp_path / "m.c"), "--disable-pass", "nope")
    assert p.returncode == 2 and "unknown pass 'nope'; passes:" in p.stderr
    p = run("compile", good, "-o", str(tmp_path / "m.c"), "--dump-after", "constant_folding")
    assert p.returncode == 2 and "unknown pass 'constant_folding' (did you mean 'constant_fold'?)" in p.stderr
    p = run("compile", str(tmp_path / "missing.json"), "-o", str(tmp_path / "m.c"))
    assert p.returncode == 3 and "missing.json" in p.stderr


# ---- checkpoints ---------------------------------------------------------------

def _copy_weights(b, tmp_path, name):
    d = tmp_path / name
    shutil.copytree(b.weights, d)
    return d


def _rewrite(path, tensors):
    st.save(str(path), tensors)


@pytest.fixture(scope="module")
def built(build):
    return build(tiny())


def _corrupt(case, d):
    f = d / "model.safetensors"
    data = f.read_bytes()
    if case == "truncated":
        f.write_bytes(data[: len(data) // 2])
        return "past the end"
    if case == "bad_header":
        n = struct.unpack("<Q", data[:8])[0]
        f.write_bytes(data[:8] + b"{" * n + data[8 + n:])
        return "bad header"
    if case == "header_length_overflow":
        f.write_bytes(struct.pack("<Q", 2 ** 63) + data[8:])
        return "exceeds the file size"
    w = st.load(str(d))
    if case == "wrong_shape":
        w["model.layers.1.mlp.up_proj.weight"] = np.zeros((64, 172), np.float32)
        _rewrite(f, w)
        return "'model.layers.1.mlp.up_proj.weight'"
    if case == "missing_tensor":
        del w["model.layers.0.self_attn.v_proj.weight"]
        _rewrite(f, w)
        return "missing tensor 'model.layers.0.self_attn.v_proj.weight'"
    if case == "wrong_dtype":
        w["model.norm.weight"] = np.arange(64, dtype=np.int64)
        _rewrite(f, w)
        return "'model.norm.weight'"
    raise ValueError(case)


CHECKPOINT_CASES = ["truncated", "bad_header", "header_length_overflow", "wrong_shape", "missing_tensor", "wrong_dtype"]


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_bad_checkpoint_is_a_clear_error(built, tmp_path, case):
    d = _copy_weights(built, tmp_path, case)
    expected = _corrupt(case, d)
    with pytest.raises(CkError) as e:
        built.model(str(d))
    assert expected in str(e.value)
    assert str(e.value).startswith("ck_model_init: ")


def test_bad_checkpoint_exit_code_of_the_executable(built, tmp_path):
    c = os.path.join(built.folder, "model.c")
    exe = tmp_path / "model"
    ckc.build.build_executable(c, str(exe))
    d = _copy_weights(built, tmp_path, "w")
    expected = _corrupt("missing_tensor", d)
    p = subprocess.run([str(exe), str(d), "1", "2"], capture_output=True, text=True)
    assert p.returncode == 1 and expected in p.stderr
    p = subprocess.run([str(exe), str(tmp_path / "nowhere"), "1"], capture_output=True, text=True)
    assert p.returncode == 1 and "nowhere" in p.stderr
    assert subprocess.run([str(exe)], capture_output=True).returncode == 2


# ---- the ABI ---------------------------------------------------------------------

def test_api_misuse_returns_errors_not_crashes(built):
    lib = load_library(built.so)
    err = lambda: lib.ck_last_error().decode()
    toks = (ctypes.c_int32 * 3)(1, 2, 3)
    # NULL handles
    assert lib.ck_model_init(None) is None and "NULL" in err()
    assert lib.ck_model_forward(None) == CK_EINVAL and "NULL" in err()
    assert lib.ck_model_embed_tokens(None, toks, 3) == CK_EINVAL
    assert lib.ck_model_decode(None, 1) == CK_EINVAL
    assert lib.ck_model_kv_cache_enable(None, 8) == CK_EINVAL
    assert not lib.ck_model_get_logits(None)
    lib.ck_model_kv_cache_reset(None)
    lib.ck_model_kv_cache_disable(None)
    lib.ck_model_free(None)
    assert lib.ck_model_get_vocab_size(None) == 256

    h = lib.ck_model_init(built.weights.encode())
    assert h
    try:
        assert not lib.ck_model_get_logits(h) and "nothing has been run" in err()
        assert lib.ck_model_forward(h) == CK_ESTATE and "no tokens embedded" in err()
        bad = (ctypes.c_int32 * 2)(5, 256)
        assert lib.ck_model_embed_tokens(h, bad, 2) == CK_EINVAL and "token 256 at index 1" in err()
        neg = (ctypes.c_int32 * 1)(-1)
        assert lib.ck_model_embed_tokens(h, neg, 1) == CK_EINVAL
        assert lib.ck_model_embed_tokens(h, None, 1) == CK_EINVAL
        assert lib.ck_model_embed_tokens(h, toks, 0) == CK_ERANGE
        long = (ctypes.c_int32 * 129)(*([1] * 129))
        assert lib.ck_model_embed_tokens(h, long, 129) == CK_ERANGE and "1..128" in err()
        assert lib.ck_model_decode(h, 1) == CK_ESTATE and "kv_cache_enable" in err()
        assert lib.ck_model_kv_cache_enable(h, 0) == CK_ERANGE
        assert lib.ck_model_kv_cache_enable(h, 129) == CK_ERANGE
        assert lib.ck_model_kv_cache_enable(h, 4) == 0
        assert lib.ck_model_embed_tokens(h, toks, 3) == 0 and lib.ck_model_forward(h) == 0
        assert lib.ck_model_decode(h, 7) == 0
        assert lib.ck_model_decode(h, 7) == CK_ERANGE and "holds 4 of 4" in err()
        assert lib.ck_model_decode(h, 999) == CK_EINVAL
        assert lib.ck_model_kv_cache_get_tokens(h) == 4
        lib.ck_model_kv_cache_reset(h)
        assert lib.ck_model_decode(h, 7) == 0 and lib.ck_model_get_active_tokens(h) == 1
        lib.ck_model_kv_cache_disable(h)
        assert lib.ck_model_decode(h, 7) == CK_ESTATE and lib.ck_model_kv_cache_get_tokens(h) == 0
        assert lib.ck_model_embed_tokens(h, toks, 3) == 0 and lib.ck_model_forward(h) == 0
    finally:
        lib.ck_model_free(h)


def test_python_wrapper_raises_ckerror(built):
    m = built.model()
    with pytest.raises(CkError) as e:
        m.forward([0, 300])
    assert e.value.code == CK_EINVAL
    with pytest.raises(CkError):
        m.decode(1)
    with pytest.raises(CkError):
        ckc.LlmModel(built.so, "/nonexistent/folder")


def test_max_context_above_the_config_is_refused(tmp_path):
    good = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    p = subprocess.run([ckc.ckc_binary(), "compile", good, "-o", str(tmp_path / "m.c"), "--max-context", "4096"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--max-context 4096 is above the context length" in p.stderr and "128" in p.stderr
    assert not (tmp_path / "m.c").exists()


def test_out_of_memory_at_init_is_ck_enomem_and_negative_threads_are_einval(build):
    """2^30 positions: the RoPE tables (2 x 32 GiB) cannot be allocated; init says so with CK_ENOMEM."""
    b = build(tiny(max_position_embeddings=1 << 30))
    with pytest.raises(ckc.CkError) as e:
        b.model()
    assert e.value.code == -6 and "out of memory for the RoPE tables" in str(e.value)
    m = build(tiny()).model()
    with pytest.raises(ckc.CkError) as e:
        m.set_threads(-1)
    assert e.value.code == -1 and m.threads >= 1


def test_a_defaulted_vocab_size_is_said(tmp_path):
    """HF's class default applies (LlamaConfig: 32000), but a config without vocab_size is worth a note."""
    cfg = json.load(open(os.path.join(ROOT, "models", "tiny-llama", "config.json")))
    del cfg["vocab_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = subprocess.run([ckc.ckc_binary(), "compile", str(path), "-o", str(tmp_path / "m.c")], capture_output=True,
                       text=True)
    assert p.returncode == 0 and f"note: {path} has no vocab_size: using the llama default, 32000" in p.stderr
    p = subprocess.run([ckc.ckc_binary(), "compile", os.path.join(ROOT, "models", "tiny-llama", "config.json"), "-o",
                        str(tmp_path / "n.c")], capture_output=True, text=True)
    assert "note:" not in p.stderr
