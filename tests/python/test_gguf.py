"""GGUF models: `ckc quantize` writes them, `ckc compile model.gguf` reads them.

- the GGUF path (llama.cpp's names, its q/k row permutation read with
  interleaved RoPE, each tensor in its file format) gives the logits of the
  safetensors path compiled with --weights of the same format;
- a float32 GGUF gives transformers' logits of the original checkpoint, and a
  quantized one, in the float-tile prefill (float activations), the logits of
  transformers holding the weights as the `gguf` package dequantizes them
  (tests/python/references.py);
- a real published file (SmolLM2-135M-Instruct Q4_1) against that reference:
  the float-tile prefill within 1e-4, the int8 prefill and decode (8-bit
  activations, as llama.cpp) within a stated NMSE;
- corrupt or unsupported files are clear errors from `ckc compile` and from
  ck_model_init, never a crash.
(llama.cpp itself: test_gguf_llama_cpp.py.)
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import ckc
from conftest import ROOT, float_prefill, formats, prompt, registry, tiny
from references import hf_reference, smollm2_gguf

LLAMA = tiny(vocab_size=512, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)
TYPES = formats()


def quantize(src, out, qtype):
    r = subprocess.run([ckc.ckc_binary(), "quantize", src, "-o", out, "--type", qtype], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def compile_gguf(path, folder):
    os.makedirs(folder, exist_ok=True)
    return ckc.build_library(ckc.compile_model(path, folder))


def rel_max(a, b):
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


@pytest.fixture(scope="module")
def llama_files(build, tmp_path_factory):
    """The tiny Llama: its safetensors build, and one GGUF + library per type."""
    d = tmp_path_factory.mktemp("gguf")
    ref = build(LLAMA, std=0.05)
    files = {}
    for t in TYPES:
        g = quantize(ref.weights, str(d / f"tiny.{t}.gguf"), t)
        files[t] = (g, compile_gguf(g, str(d / t)))
    return ref, files


@pytest.mark.parametrize("qtype", TYPES)
def test_gguf_equals_the_safetensors_path_in_the_same_format(build, llama_files, qtype):
    ref, files = llama_files
    g, so = files[qtype]
    st = build(LLAMA, args=() if qtype == "f32" else ("--weights", qtype), std=0.05)
    ids = prompt(40, LLAMA["vocab_size"], seed=3)
    ma, mb = ckc.LlmModel(so, g), st.model(weights=ref.weights)
    with float_prefill(ma), float_prefill(mb):
        a, b = ma.forward(ids), mb.forward(ids)
    assert rel_max(a, b) < 1e-4  # same bytes per row; only the head-dim order inside attention differs
    # the int8 prefill: that last-bit difference can move one activation's 8-bit rounding (measured: q4_1, one
    # position of 40 off by 0.015 at logits up to 3.5, all others equal)
    a, b = ma.forward(ids), mb.forward(ids)
    assert float(np.mean((a - b) ** 2) / np.mean(b ** 2)) < 1e-5
    # and the cached decode path
    m = ckc.LlmModel(so, g)
    m.kv_cache_enable(64)
    dec = np.stack([m.decode(t).copy() for t in ids[:8]])
    m2 = st.model(weights=ref.weights)
    m2.kv_cache_enable(64)
    dec2 = np.stack([m2.decode(t).copy() for t in ids[:8]])
    # the same 8-bit rounding caveat (measured since the VBMI q4_1 decode body: one of 8 steps off by 0.009 of the
    # largest logit, NMSE 2.4e-5; since the attention kernel of 32-key blocks, q6_K too: equal to 5e-7 for 5 steps,
    # then up to 0.019 of the largest logit, NMSE 1.2e-4: one rounding of its q8_K activations going the other way,
    # carried on by the cache; every other format equal to 1e-6 or bit for bit). A wrong head-dim order: NMSE ~1.
    print(f"{qtype}: decode GGUF vs safetensors max rel {rel_max(dec, dec2):.1e}, "
          f"NMSE {float(np.mean((dec - dec2) ** 2) / np.mean(dec2 ** 2)):.1e}")
    assert float(np.mean((dec - dec2) ** 2) / np.mean(dec2 ** 2)) < 5e-4


def test_f32_gguf_gives_transformers_logits_of_the_checkpoint(llama_files):
    from transformers import AutoModelForCausalLM
    ref, files = llama_files
    hf = AutoModelForCausalLM.from_pretrained(ref.weights, torch_dtype=torch.float32).eval()
    ids = prompt(48, LLAMA["vocab_size"], seed=4)
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].numpy()
    got = ckc.LlmModel(files["f32"][1], files["f32"][0]).forward(ids)
    assert rel_max(got, want) < 1e-4


@pytest.mark.parametrize("qtype", ["q8_0", "q4_1", "q4_K", "q6_K"])
def test_quantized_gguf_gives_transformers_logits_of_its_dequantized_weights(llama_files, qtype):
    _, files = llama_files
    model, _ = hf_reference(files[qtype][0])
    ids = prompt(48, LLAMA["vocab_size"], seed=5)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    with float_prefill(ckc.LlmModel(files[qtype][1], files[qtype][0])) as m:
        got = m.forward(ids)  # float32 activations
    assert rel_max(got, want) < 1e-4


def family_config(name):
    cfg = json.load(open(os.path.join(ROOT, "models", f"tiny-{name}", "config.json")))
    if name in ("gemma2", "gemma3_text"):  # llama.cpp derives the attention scale from head_dim (ckc quantize
        cfg["query_pre_attn_scalar"] = cfg["head_dim"]  # refuses others)
    return cfg


# every family with a GGUF architecture, but llama (the tests above) and mistral (written as a llama file:
# test_mistral_window_is_noted)
FAMILIES = [f["model_type"] for f in registry()["families"] if f["gguf"] and f["model_type"] not in ("llama", "mistral")]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("qtype", ["f32", "q8_0"])
def test_every_family_through_gguf(build, tmp_path, family, qtype):
    """GGUF written by ckc quantize, compiled from the file: the logits of the config.json path (same format)."""
    cfg = family_config(family)
    ref = build(cfg, std=0.05)
    g = quantize(ref.weights, str(tmp_path / f"{family}.{qtype}.gguf"), qtype)
    so = compile_gguf(g, str(tmp_path / "c"))
    ids = prompt(24, cfg["vocab_size"], seed=6)
    st = build(cfg, args=() if qtype == "f32" else ("--weights", qtype), std=0.05)
    assert rel_max(ckc.LlmModel(so, g).forward(ids), st.model(weights=ref.weights).forward(ids)) < 1e-4


@pytest.mark.parametrize("family", ["gemma", "gemma2"])
def test_head_dim_equal_to_width_over_heads_round_trips(build, tmp_path, family):
    """head_dim 16 with 4 heads of width 64: ckc quantize used to leave attention.key_length out (it equals
    n_embd / n_head, llama.cpp's default), and ckc compile then took Gemma's config.json default of 256."""
    cfg = dict(family_config(family), hidden_size=64, head_dim=16)
    if family == "gemma2":
        cfg["query_pre_attn_scalar"] = 16
    ref = build(cfg, std=0.05)
    g = quantize(ref.weights, str(tmp_path / f"{family}.gguf"), "f32")
    import gguf
    assert gguf.GGUFReader(g).fields[f"{family}.attention.key_length"].contents() == 16
    so = compile_gguf(g, str(tmp_path / "c"))
    ids = prompt(12, cfg["vocab_size"], seed=2)
    assert rel_max(ckc.LlmModel(so, g).forward(ids), ref.model().forward(ids)) < 1e-4


def test_mistral_window_is_noted(build, tmp_path):
    cfg = json.load(open(os.path.join(ROOT, "models", "tiny-mistral", "config.json")))
    ref = build(cfg, std=0.05)
    r = subprocess.run([ckc.ckc_binary(), "quantize", ref.weights, "-o", str(tmp_path / "m.gguf")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "sliding_window" in r.stderr and "has no GGUF key" in r.stderr


@pytest.mark.slow  # downloads the 93 MB model once (cached)
def test_smollm2_q4_1_against_its_dequantized_weights(tmp_path):
    path = smollm2_gguf()
    so = compile_gguf(path, str(tmp_path / "smol"))
    model, cfg = hf_reference(path)
    ids = prompt(96, cfg.vocab_size, seed=7)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    m = ckc.LlmModel(so, path)
    with float_prefill(m):
        got = m.forward(ids)
    print(f"SmolLM2 Q4_1 float-tile prefill vs dequantized reference: max |diff| {np.max(np.abs(got - want)):.2e} "
          f"(logits up to {np.max(np.abs(want)):.1f})")
    assert rel_max(got, want) < 1e-4
    # the int8 prefill and decode quantize activations to 8 bits per block (as llama.cpp does): close, not equal
    nmse = lambda a: float(np.mean((a - want) ** 2) / np.mean(want ** 2))
    pre = m.forward(ids)
    m.kv_cache_enable(128)
    dec = np.stack([m.decode(t).copy() for t in ids])
    print(f"NMSE vs the reference: int8 prefill {nmse(pre):.2e}, decode {nmse(dec):.2e}")
    assert nmse(pre) < 5e-3 and nmse(dec) < 5e-3


# ---- bad input ------------------------------------------------------------------------------------

def gguf_with(path, *, arch="llama", drop=(), retype=None, reshape=None, extra_meta=None, truncate=None, src=None,
              meta=None):
    """A copy of src (a tiny GGUF ckc wrote) changed one way, written with the gguf package (meta: values replacing
    the file's)."""
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(path, arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        v = f.contents()
        key = k.replace("llama.", arch + ".", 1)
        v = (meta or {}).get(key, v)
        if isinstance(v, str):
            w.add_string(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        elif isinstance(v, int):
            w.add_uint32(key, v)
    for k, v in (extra_meta or {}).items():
        w.add_uint32(k, v)
    for t in r.tensors:
        if t.name in drop:
            continue
        data = np.array(t.data)
        qt = t.tensor_type
        shape = [int(x) for x in t.shape[::-1]]
        if reshape and t.name in reshape:
            shape = reshape[t.name]
            data = np.zeros(shape, np.float32)
        if retype and t.name in retype:
            qt = retype[t.name]
        w.add_tensor(t.name, data, raw_shape=shape if qt == gguf.GGMLQuantizationType.F32 else None, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if truncate:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - truncate)
    return path


def compile_error(path, tmp_path):
    r = subprocess.run([ckc.ckc_binary(), "compile", path, "-o", str(tmp_path / "bad" / "model.c")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert not (tmp_path / "bad" / "model.c").exists()
    return r.stderr


def init_error(so, path):
    with pytest.raises(ckc.CkError) as e:
        ckc.LlmModel(so, path)
    return str(e.value)


def test_bad_files_are_clear_errors_from_compile_and_init(llama_files, tmp_path):
    _, files = llama_files
    src, so = files["q8_0"]
    # truncated: the last tensor runs past the end
    t = gguf_with(str(tmp_path / "trunc.gguf"), src=src, truncate=1000)
    for err in (compile_error(t, tmp_path), init_error(so, t)):
        assert "trunc.gguf" in err and "past the end" in err
    # a tensor missing
    t = gguf_with(str(tmp_path / "missing.gguf"), src=src, drop=("blk.1.ffn_up.weight",))
    for err in (compile_error(t, tmp_path), init_error(so, t)):
        assert "blk.1.ffn_up.weight" in err and "missing" in err
    # a tensor whose shape disagrees with the metadata
    t = gguf_with(str(tmp_path / "shape.gguf"), src=src, reshape={"output_norm.weight": [128]})
    for err in (compile_error(t, tmp_path), init_error(so, t)):
        assert "output_norm.weight" in err and "[128]" in err
    # zero heads (found by the compile-gguf fuzzer: phi2's head size divided by it): refused by name
    for arch in ("llama", "phi2"):
        t = gguf_with(str(tmp_path / f"heads0-{arch}.gguf"), src=src, arch=arch, meta={f"{arch}.attention.head_count": 0})
        err = compile_error(t, tmp_path)
        assert f"metadata '{arch}.attention.head_count' is 0; it must be at least 1" in err, err
    # an architecture ckc does not build
    t = gguf_with(str(tmp_path / "arch.gguf"), src=src, arch="mamba")
    err = compile_error(t, tmp_path)
    assert '"mamba" is not supported' in err and "llama" in err
    # a quant type ckc does not read (raw q3_K bytes of the right size)
    import gguf
    t = str(tmp_path / "q3k.gguf")
    w = gguf.GGUFWriter(t, "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_tensor("token_embd.weight", np.zeros((4, 110), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q3_K)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    err = compile_error(t, tmp_path)
    assert "token_embd.weight" in err and "q3_K" in err and "does not read" in err
    # not a GGUF at all, with the suffix
    (tmp_path / "text.gguf").write_text("hello, world")
    assert "not a GGUF file" in init_error(so, str(tmp_path / "text.gguf"))


def test_init_checks_the_metadata_the_model_was_compiled_from(llama_files, tmp_path):
    """A GGUF whose tensors fit but whose metadata differs (other heads of the same width, another RoPE base, eps)
    used to load and give wrong answers: ck_model_init names the key that differs."""
    _, files = llama_files
    src, so = files["q8_0"]
    cases = {"heads": ({"llama.attention.head_count": 8, "llama.attention.head_count_kv": 4},
                       "'llama.attention.head_count' is 8; the model was compiled for 4"),
             "theta": ({"llama.rope.freq_base": 500000.0}, "'llama.rope.freq_base' is 500000; the model was compiled"),
             "eps": ({"llama.attention.layer_norm_rms_epsilon": 1e-3}, "'llama.attention.layer_norm_rms_epsilon'"),
             "arch": ({"general.name": "renamed"}, None)}  # a key the model does not depend on: loads
    for name, (meta, want) in cases.items():
        path = gguf_with(str(tmp_path / f"{name}.gguf"), src=src, meta=meta)
        if want is None:
            ckc.LlmModel(so, path)
        else:
            err = init_error(so, path)
            assert want in err and f"{name}.gguf" in err, err
    ckc.LlmModel(so, gguf_with(str(tmp_path / "same.gguf"), src=src))  # the same values, rewritten: loads


def test_cli_refusals(llama_files, tmp_path):
    src, _ = llama_files[1]["q4_K"]
    r = subprocess.run([ckc.ckc_binary(), "compile", src, "--weights", "q8_0", "-o", str(tmp_path / "m.c")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "a GGUF file's tensors are used in the formats it stores" in r.stderr
    r = subprocess.run([ckc.ckc_binary(), "compile", src, "--train", "-o", str(tmp_path / "m.c")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--train needs float32 weights" in r.stderr
    cfg = tmp_path / "gpt2.json"
    g2 = family_config("gemma2")
    g2["query_pre_attn_scalar"] = 24
    cfg.write_text(json.dumps(g2))
    r = subprocess.run([ckc.ckc_binary(), "quantize", str(cfg), "-o", str(tmp_path / "g.gguf")], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "query_pre_attn_scalar" in r.stderr and "llama.cpp" in r.stderr
    assert not (tmp_path / "g.gguf").exists()
    # what llama.cpp's architecture cannot say: SmolLM3's NoPE layers elsewhere than every 4th, a window
    for over, key in [({"no_rope_layers": [1, 0, 1, 1]}, "no_rope_layers"),
                      ({"no_rope_layer_interval": 2, "no_rope_layers": None}, "no_rope_layer_interval"),
                      ({"use_sliding_window": True, "sliding_window": 8}, "use_sliding_window")]:
        cfg.write_text(json.dumps(dict(family_config("smollm3"), **over)))
        r = subprocess.run([ckc.ckc_binary(), "quantize", str(cfg), "-o", str(tmp_path / "s.gguf")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and f'key "{key}"' in r.stderr and "llama.cpp" in r.stderr, r.stderr
        assert not (tmp_path / "s.gguf").exists()
    # Gemma 3: global layers off llama.cpp's every-n-th pattern, a scaled local RoPE, another attention scale
    lt = ["sliding_attention"] * 6
    lt[2] = "full_attention"
    for over, key in [({"layer_types": lt}, "layer_types"), ({"query_pre_attn_scalar": 48}, "query_pre_attn_scalar"),
                      ({"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
                       "rope_parameters"), ({"sliding_window": None}, "sliding_window")]:
        cfg.write_text(json.dumps(dict(family_config("gemma3_text"), **over)))
        r = subprocess.run([ckc.ckc_binary(), "quantize", str(cfg), "-o", str(tmp_path / "g3.gguf")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and f'key "{key}"' in r.stderr and "llama.cpp" in r.stderr, r.stderr
        assert not (tmp_path / "g3.gguf").exists()
    # the mixtures' choices llama.cpp cannot say: qwen3moe always renormalizes, olmoe never does, nor clamps q, k
    # and v (measured: llama.cpp 0.3.36 runs an olmoe file with attention.clamp_kqv 0.5 exactly as one without)
    for family, over, key in [("qwen3_moe", {"norm_topk_prob": False}, "norm_topk_prob"),
                              ("olmoe", {"norm_topk_prob": True}, "norm_topk_prob"),
                              ("olmoe", {"clip_qkv": 0.5}, "clip_qkv"),
                              # Qwen3-MoE's dense layers: llama.cpp's qwen3moe has experts in every layer
                              ("qwen3_moe", {"mlp_only_layers": [0]}, "mlp_only_layers"),
                              ("qwen3_moe", {"decoder_sparse_step": 2}, "decoder_sparse_step")]:
        cfg.write_text(json.dumps(dict(family_config(family), **over)))
        r = subprocess.run([ckc.ckc_binary(), "quantize", str(cfg), "-o", str(tmp_path / "m.gguf")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and f'key "{key}"' in r.stderr and "llama.cpp" in r.stderr, r.stderr
        assert not (tmp_path / "m.gguf").exists()


def test_a_mixture_of_experts_gguf_that_disagrees_with_itself(build, tmp_path):
    """Expert tensors that disagree with the header's counts, more experts per token than experts: errors that
    name the tensor or the key, from compile and from init."""
    cfg = family_config("qwen3_moe")
    ref = build(cfg, std=0.05)
    src = quantize(ref.weights, str(tmp_path / "moe.gguf"), "f32")
    so = compile_gguf(src, str(tmp_path / "c"))
    t = gguf_with(str(tmp_path / "count.gguf"), src=src, arch="qwen3moe", meta={"qwen3moe.expert_count": 4})
    err = compile_error(t, tmp_path)
    assert "count.gguf" in err and "ffn_" in err and "_exps.weight" in err and "[8, " in err, err
    assert "count.gguf" in init_error(so, t)
    t = gguf_with(str(tmp_path / "used.gguf"), src=src, arch="qwen3moe", meta={"qwen3moe.expert_used_count": 9})
    assert "num_experts_per_tok" in compile_error(t, tmp_path) and "more than the 8 experts" in compile_error(t, tmp_path)
    t = gguf_with(str(tmp_path / "shape.gguf"), src=src, arch="qwen3moe",
                  reshape={"blk.0.ffn_up_exps.weight": [8, 32, 32]})
    for err in (compile_error(t, tmp_path), init_error(so, t)):
        assert "blk.0.ffn_up_exps.weight" in err and "[8, 32, 32]" in err, err
