"""ckc's weight formats are GGUF's, bit for bit: the runtime's quantizers and
dequantizers (runtime/io/quant.c, built here on its own with cc) against
the `gguf` package's, which follow llama.cpp's reference implementation.

- dequantize: random blocks (any bit pattern for the quants, scales drawn from
  the whole finite f16 range incl. subnormals and zero) give identical floats;
- quantize: where gguf implements it (q8_0, q4_0, q4_1, q5_0, q5_1, bf16),
  identical bytes on Gaussian rows, rows with an outlier, constant rows and
  zeros. (K-quants: against llama.cpp's own quantizer in test_gguf_llama_cpp.py.)
"""
import ctypes
import os
import subprocess

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from conftest import gguf_writes, registry

# every stored format but f32 (ckc's traits table), by GGUF's type number
TYPES = {f["name"]: Q(f["type"]) for f in registry()["formats"] if f["name"] != "f32"}




@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = str(tmp_path_factory.mktemp("quant") / "libquant.so")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-std=c99", "-shared", "-fPIC", "-I", f"{ROOT}/runtime/include",
                    f"{ROOT}/runtime/io/quant.c", "-lm", "-o", so], check=True)
    L = ctypes.CDLL(so)
    L.ck_quantize_row.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.ck_dequantize_row.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.ck_qtype_row_bytes.argtypes = [ctypes.c_int, ctypes.c_int64]
    L.ck_qtype_row_bytes.restype = ctypes.c_size_t
    return L


def ck_quantize(lib, qt, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(lib.ck_qtype_row_bytes(int(qt), x.size), dtype=np.uint8)
    assert out.size > 0
    assert lib.ck_quantize_row(int(qt), x.ctypes.data, out.ctypes.data, x.size) == 0
    return out


def ck_dequantize(lib, qt, raw, n):
    y = np.zeros(n, dtype=np.float32)
    lib.ck_dequantize_row(int(qt), np.ascontiguousarray(raw).ctypes.data, y.ctypes.data, n)
    return y


def random_blocks(qt, n_blocks, rng):
    """Blocks with random quants and scales spread over the finite f16 range (both signs, subnormals, 0)."""
    block, size = GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    if qt in (Q.F16, Q.BF16):
        v = raw.view(np.uint16)
        exp_mask = 0x7C00 if qt == Q.F16 else 0x7F80
        v[(v & exp_mask) == exp_mask] &= ~np.uint16(0x4000)  # no inf / nan: they compare unequal
        return raw
    halves = np.concatenate([rng.normal(0, 1e-3, 64), rng.normal(0, 30, 64), rng.uniform(-6e4, 6e4, 16),
                             [0.0, -0.0, 6e-8, -6e-8, 65504.0, -65504.0]]).astype(np.float16)
    # where the f16 scales sit in each layout
    offsets = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q4_K: [0, 2],
               Q.Q5_K: [0, 2], Q.Q6_K: [size - 2]}[qt]
    for off in offsets:
        raw[:, off:off + 2] = rng.choice(halves, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw


@pytest.mark.parametrize("name", list(TYPES))
def test_dequantize_matches_gguf(lib, name):
    qt = TYPES[name]
    rng = np.random.default_rng(int(qt) + 1)
    block, _ = GGML_QUANT_SIZES[qt]
    n_blocks = 512 if block == 256 else 4096
    raw = random_blocks(qt, n_blocks, rng)
    ref = quants.dequantize(raw.reshape(-1), qt).reshape(-1)
    ours = ck_dequantize(lib, qt, raw, n_blocks * block)
    assert ref.dtype == np.float32 and ref.size == ours.size
    np.testing.assert_array_equal(ours, ref)


def rows_to_test(rng, n):
    gauss = rng.normal(0, 1, n).astype(np.float32)
    outlier = rng.normal(0, 0.02, n).astype(np.float32)
    outlier[::97] = -40.0
    const = np.full(n, 0.3125, dtype=np.float32)
    zeros = np.zeros(n, dtype=np.float32)
    wide = (rng.normal(0, 1, n) * np.exp(rng.uniform(-12, 12, n))).astype(np.float32)
    return {"gauss": gauss, "outlier": outlier, "const": const, "zeros": zeros, "wide": wide}


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the "wide" row: f16 scales overflow in both
@pytest.mark.parametrize("name", list(TYPES))
def test_quantize_matches_gguf_bytes(lib, name):
    qt = TYPES[name]
    if not gguf_writes(qt):
        pytest.skip(f"gguf does not write {name}: test_quantize_round_trips_through_gguf_dequantize checks it")
    rng = np.random.default_rng(7)
    for kind, x in rows_to_test(rng, 8192).items():
        ref = np.ascontiguousarray(quants.quantize(x.reshape(1, -1), qt)).view(np.uint8).reshape(-1)  # (f16: halves)
        ours = ck_quantize(lib, qt, x)
        mismatch = np.flatnonzero(ours != ref)
        assert mismatch.size == 0, f"{name} {kind}: {mismatch.size} bytes differ, first at {mismatch[:5]}"


# relative error of a round trip on Gaussian data (measured, with margin); a format gguf cannot write needs a row
ROUND_TRIP = {"q4_K": 0.09, "q5_K": 0.045, "q6_K": 0.02, "f16": 1e-3}


@pytest.mark.parametrize("name", list(TYPES))
def test_quantize_round_trips_through_gguf_dequantize(lib, name):
    """Formats gguf cannot write: what ckc writes, gguf reads back as the values ckc means."""
    qt = TYPES[name]
    if gguf_writes(qt):
        pytest.skip(f"gguf writes {name}: test_quantize_matches_gguf_bytes compares the bytes")
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, 4096).astype(np.float32)
    raw = ck_quantize(lib, qt, x)
    np.testing.assert_array_equal(quants.dequantize(raw, qt).reshape(-1), ck_dequantize(lib, qt, raw, x.size))
    rel = np.linalg.norm(ck_dequantize(lib, qt, raw, x.size) - x) / np.linalg.norm(x)
    assert name in ROUND_TRIP, f"{name}: give it a round-trip bound in ROUND_TRIP"
    assert rel < ROUND_TRIP[name]
