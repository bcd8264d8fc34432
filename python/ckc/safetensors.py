"""Read and write safetensors files with numpy only (no `safetensors` package).

bf16 has no numpy dtype: `load` returns bf16 tensors as float32 (exact), and
`save(..., dtype="bf16")` rounds float32 to bf16 (nearest even), the way torch
does. `round_to` gives the float32 values a lower-precision file will hold.
"""
import json
import os
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
       "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_to(x, dtype):
    """The float32 values `x` becomes after a round trip through `dtype`."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f32":
        return x
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        return bf16_to_f32(bf16_bits(x))
    raise ValueError(f"unknown dtype {dtype!r}")


def _read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def load(path):
    """name -> numpy array (bf16 as float32) for a file, folder or index.json."""
    if os.path.isdir(path):
        single = os.path.join(path, "model.safetensors")
        path = single if os.path.exists(single) else os.path.join(path, "model.safetensors.index.json")
    if path.endswith(".json"):
        with open(path) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        out = {}
        for s in shards:
            out.update(load(os.path.join(os.path.dirname(path), s)))
        return out
    header, start = _read_header(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = np.array(raw[start + b:start + e])
        if info["dtype"] == "BF16":
            arr = bf16_to_f32(buf.view(np.uint16))
        else:
            arr = buf.view(_NP[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def save(path, tensors, dtype="f32"):
    """Writes {name: array} to `path`; float arrays are stored as `dtype` (f32, f16, bf16)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype.kind == "f":
            if dtype == "bf16":
                data, st = bf16_bits(a).tobytes(), "BF16"
            elif dtype == "f16":
                data, st = a.astype(np.float16).tobytes(), "F16"
            else:
                data, st = a.astype(np.float32).tobytes(), "F32"
        else:
            st = {v: k for k, v in _NP.items()}[a.dtype.type]
            data = a.tobytes()
        header[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
