"""Weight matrices kept in a stored format (ckc compile --weights FORMAT).

- the float-tile prefill (what a CPU without AVX-512 VNNI runs: dequantized
  tiles into sgemm) equals the float32 model run on the dequantized weights
  (the `gguf` package's quantize -> dequantize, which is llama.cpp's
  reference): the layout, parts and fallbacks are right;
- every format against the float32 model, within a stated NMSE bound;
- the int8 prefill (8-bit activations, the default with AVX-512 VNNI) and
  cached decode (the same integers, one token at a time) agree closely, and
  the int8 prefill stays as close to float32 as the float-tile one;
- a bf16 checkpoint compiled with --weights bf16 is used in place: the loader
  allocates nothing for the matrices;
- bad requests are clear errors.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy as stn
from gguf import GGMLQuantizationType as Q
from gguf import quants

import ckc
from conftest import float_prefill, formats, gguf_writes, prompt, registry

CFG = {"model_type": "llama", "vocab_size": 512, "hidden_size": 256, "intermediate_size": 512,
       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
       "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}

# NMSE of the logits vs float32 on this random model (std 0.05 weights, 48 tokens), measured 2026-11-23:
# f16 6.5e-7, bf16 4.6e-5, q8_0 4.2e-4, q6_K 5.0e-3, q5_0 2.9e-2, q5_1 2.3e-2, q5_K 2.1e-2, q4_0 0.10,
# q4_1 9.4e-2, q4_K 8.5e-2. A random network amplifies weight noise ~10-25x (weight NMSE: q8_0 ~2e-5, 4-bit
# ~8e-3), so these bounds (~2x the measurement) say "the format works", not how a trained model fares: the
# llama.cpp comparison (test_gguf_llama_cpp.py) is the accuracy test.
NMSE = {"f16": 2e-6, "bf16": 1e-4, "q8_0": 1e-3, "q6_K": 1e-2, "q5_0": 6e-2, "q5_1": 6e-2, "q5_K": 6e-2,
        "q4_0": 0.2, "q4_1": 0.2, "q4_K": 0.2}
# NMSE of cached decode vs the int8 prefill, measured 2026-11-24: float formats ~1e-12; q8_0, q4_0, q5_K, q4_K
# ~1e-14 (the same integers, summed in another order); q6_K 1.3e-6, q5_0 2.0e-7, q5_1 8.5e-6; q4_1 2.8e-7, and
# 6.4e-5 since its AVX-512 VBMI decode body (2026-11-26) sums in another order (a last-bit difference of the float
# sums moves one activation's 8-bit rounding a layer later). Also the bound between two kernel paths.
DECODE_VS_PREFILL = {"f16": 1e-10, "bf16": 1e-10, "q8_0": 1e-5, "q6_K": 1e-5, "q5_K": 1e-5, "q4_K": 1e-5,
                     "q5_0": 1e-5, "q4_0": 1e-5, "q4_1": 1e-4, "q5_1": 1e-4}
# the formats the gguf package quantizes itself (its bytes are llama.cpp's): the float-tile prefill's reference
GGUF_QUANTIZES = {f["name"]: Q(f["type"]) for f in registry()["formats"] if f["name"] != "f32" and gguf_writes(Q(f["type"]))}


def test_every_format_has_its_bounds():
    """A new format (a row of the traits table) is measured here: it needs its bounds above."""
    assert set(formats(floats=False)) == set(NMSE) == set(DECODE_VS_PREFILL)


@pytest.fixture(scope="module")
def built(build):
    return {fmt: build(CFG, args=() if fmt == "f32" else ("--weights", fmt), std=0.05)
            for fmt in ["f32"] + list(NMSE)}


def nmse(a, b):
    return float(np.mean((np.asarray(a, np.float64) - b) ** 2) / np.mean(np.asarray(b, np.float64) ** 2))


@pytest.mark.parametrize("fmt", list(NMSE))
def test_format_against_float32(built, fmt):
    ids = prompt(48, CFG["vocab_size"], seed=1)
    ref = built["f32"].model().forward(ids)
    m = built[fmt].model()
    got = m.forward(ids)
    with float_prefill(m):
        tiles = m.forward(ids)
    err, err_tiles = nmse(got, ref), nmse(tiles, ref)
    m.kv_cache_enable(64)
    dec = np.stack([m.decode(t).copy() for t in ids])
    print(f"{fmt}: NMSE vs float32 {err:.2e} (float tiles {err_tiles:.2e}), decode vs prefill {nmse(dec, got):.2e}, "
          f"top-1 agreement {np.mean(got.argmax(-1) == ref.argmax(-1)):.3f}")
    assert err < NMSE[fmt] and err_tiles < NMSE[fmt]
    if m.lib.ck_cpu_avx2():  # the int8 GEMM (AVX2, AVX-VNNI, AVX-512 VNNI or AMX)
        # 8-bit activations add about what 8-bit weights cost (q8_0: 8.0e-4 vs 4.2e-4), little next to 4-6 bits
        assert err < 2.5 * err_tiles + 1e-7
        # cached decode multiplies the same integers as the int8 prefill, one token at a time
        assert nmse(dec, got) < DECODE_VS_PREFILL[fmt]
    else:  # prefill in float, decode with 8-bit activations: close, not equal
        assert nmse(dec, got) < max(NMSE[fmt] / 4, 5e-3 if fmt != "f16" and fmt != "bf16" else 1e-6)


@pytest.mark.parametrize("fmt", list(GGUF_QUANTIZES))
def test_float_tile_prefill_equals_float32_on_dequantized_weights(built, fmt, tmp_path):
    qt = GGUF_QUANTIZES[fmt]
    src = stn.load_file(os.path.join(built[fmt].weights, "model.safetensors"))
    deq = {k: (quants.dequantize(quants.quantize(v, qt), qt).reshape(v.shape).astype(np.float32) if v.ndim == 2 else v)
           for k, v in src.items()}
    stn.save_file(deq, str(tmp_path / "model.safetensors"))
    ids = prompt(32, CFG["vocab_size"], seed=2)
    ref = built["f32"].model(weights=str(tmp_path)).forward(ids)
    with float_prefill(built[fmt].model()) as m:
        got = m.forward(ids)
    assert np.max(np.abs(got - ref)) < 1e-4 * max(1.0, np.max(np.abs(ref)))


BIG = dict(CFG, vocab_size=8192, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
           num_attention_heads=8, num_key_value_heads=8)  # 64M parameters: 128 MB in bf16

# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report the test process's peak
PEAK_RSS = """
import sys, ckc
m = ckc.LlmModel(sys.argv[1], sys.argv[2])
m.forward(list(range(8)))
print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])  # KiB
"""


def test_bf16_checkpoint_is_used_in_place(build):
    """Measured: a bf16 checkpoint's matrices are read from the mapping, not copied to float32."""
    kept = build(BIG, args=("--weights", "bf16"), std=0.02, dtype="bf16")
    f32 = build(BIG, std=0.02, dtype="bf16")  # the default: converted to float32 at load
    ids = prompt(16, BIG["vocab_size"])
    ref = f32.model().forward(ids)
    assert nmse(kept.model().forward(ids), ref) < 1e-10  # the same bf16 values, multiplied in float32
    rss = {}
    for name, b in (("bf16", kept), ("f32", f32)):
        out = subprocess.run([sys.executable, "-c", PEAK_RSS, b.so, b.weights], capture_output=True, text=True,
                             check=True, env=dict(os.environ, PYTHONPATH=os.path.dirname(ckc.__path__[0])))
        rss[name] = int(out.stdout.split()[-1]) / 1024
    file_mb = os.path.getsize(os.path.join(kept.weights, "model.safetensors")) / 2**20
    print(f"peak RSS: --weights bf16 {rss['bf16']:.0f} MiB, float32 {rss['f32']:.0f} MiB, checkpoint {file_mb:.0f} MiB")
    # float32 holds twice the file; bf16 holds the file (plus the interpreter, ~same in both)
    assert rss["f32"] - rss["bf16"] > 0.8 * file_mb


def test_bad_requests(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG))
    run = lambda *a: subprocess.run([ckc.ckc_binary(), "compile", str(cfg), "-o", str(tmp_path / "m.c"), *a],
                                    capture_output=True, text=True)
    r = run("--weights", "q3_K")
    assert r.returncode != 0 and "q3_K" in r.stderr
    r = run("--weights", "q8_0", "--train")
    assert r.returncode != 0 and "--train needs float32 weights" in r.stderr
    r = run("--weights", "q8_0", "--target", "gcu")
    assert r.returncode != 0 and "--target gcu" in r.stderr
    assert not (tmp_path / "m.c").exists()


PATHS = ["portable", "avx2", "avx2-vnni", "avx512", "avx512-vbmi", "amx"]
PATH_RUN = r"""
import sys, numpy as np, ckc
out, items = sys.argv[1], sys.argv[2:]
res = {}
for i in range(0, len(items), 3):
    fmt, so, weights = items[i:i + 3]
    m = ckc.LlmModel(so, weights)
    m.kv_cache_enable(32)
    res[fmt] = np.stack([m.decode(t).copy() for t in [5, 77, 301, 9, 140, 2]])
np.savez(out, **res)
"""


@pytest.mark.parametrize("path", PATHS)
def test_every_kernel_path_decodes_like_the_default(built, path, tmp_path):
    """CK_KERNELS=<path> runs what a CPU with only that path runs (cpu.c); every format's cached decode through
    it gives the default path's logits (the same integers; float sums in another order, which can move an 8-bit
    rounding a layer later: DECODE_VS_PREFILL's bounds). A path this CPU lacks is skipped by name."""
    import ctypes
    lib = built["f32"].model().lib
    lib.ck_cpu_path.restype = ctypes.c_char_p
    if not lib.ck_cpu_has_path(path.encode()):
        pytest.skip(f"this CPU has no {path} kernels")
    args = [x for fmt in NMSE for x in (fmt, built[fmt].so, built[fmt].weights)]
    runs = {}
    for name, env in (("default", {}), (path, {"CK_KERNELS": path})):
        code = ("import ctypes, ckc; lib = ctypes.CDLL(%r); lib.ck_cpu_path.restype = ctypes.c_char_p; "
                "print(lib.ck_cpu_path().decode())" % built["f32"].so)
        chosen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                env=dict(os.environ, **env)).stdout.strip()
        if name != "default":
            assert chosen == path, f"CK_KERNELS={path} ran {chosen}"
        out = str(tmp_path / f"{name}.npz")
        subprocess.run([sys.executable, "-c", PATH_RUN, out, *args], check=True, env=dict(os.environ, **env))
        runs[name] = np.load(out)
    for fmt in NMSE:
        err = nmse(runs[path][fmt], runs["default"][fmt])
        print(f"{path} {fmt}: NMSE vs the default path {err:.1e}")
        assert err < DECODE_VS_PREFILL[fmt], fmt


def test_ck_kernels_refuses_an_unknown_path_by_name(built):
    """CK_KERNELS=<not a path> says so on stderr and runs the CPU's best path."""
    code = ("import ctypes; lib = ctypes.CDLL(%r); lib.ck_cpu_path.restype = ctypes.c_char_p; "
            "print(lib.ck_cpu_path().decode())" % built["f32"].so)
    best = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, CK_KERNELS="avx9000"))
    assert bad.stdout == best and "CK_KERNELS=avx9000 is not a kernel path" in bad.stderr
