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


class FormatError(ValueError):
    """A file that is not a valid safetensors checkpoint (the message names the file, and the tensor or key)."""


_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit
_SIZES = {"F32": 4, "F16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "BF16": 2}


def _read_header(path):
    """(header dict, data start, data size), every field checked before it is used."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise FormatError(f"{path}: truncated: {size} bytes, but a safetensors file starts with an 8-byte "
                              "header length")
        n = struct.unpack("<Q", raw)[0]
        if n > size - 8 or n > _MAX_HEADER:
            raise FormatError(f"{path}: header length {n} exceeds the file size {size} (or the {_MAX_HEADER}-byte "
                              "limit)")
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError) as e:
            raise FormatError(f"{path}: bad header: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: bad header: expected a JSON object of tensors")
    return header, 8 + n, size - 8 - n


def read_header(path):
    """The header of a safetensors file: {tensor name: {"dtype", "shape", "data_offsets"}, "__metadata__": ...}."""
    return _read_header(path)[0]


def _check_entry(path, name, info, data_size):
    """(dtype, shape, begin, end) of one header entry, or FormatError naming the tensor."""
    if not isinstance(info, dict) or not all(k in info for k in ("dtype", "shape", "data_offsets")):
        raise FormatError(f"{path}: tensor '{name}': header entry needs \"dtype\", \"shape\" and \"data_offsets\"")
    dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dt, str) or dt not in _SIZES:
        raise FormatError(f"{path}: tensor '{name}': dtype {dt!r} is not one this reader takes ({', '.join(_SIZES)})")
    ints = lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
    if not ints(shape) or len(shape) > 8:
        raise FormatError(f"{path}: tensor '{name}': shape must be at most 8 non-negative integers, got {shape!r}")
    if not ints(offs) or len(offs) != 2 or not offs[0] <= offs[1] <= data_size:
        raise FormatError(f"{path}: tensor '{name}': data_offsets {offs!r} are not [begin, end] inside the "
                          f"{data_size} bytes of data")
    if int(np.prod(shape, dtype=object)) * _SIZES[dt] != offs[1] - offs[0]:
        raise FormatError(f"{path}: tensor '{name}': shape {shape} of {dt} does not fill data_offsets {offs}")
    return dt, shape, offs[0], offs[1]


def _shard_path(index, name):
    """The shard `name` of an index, inside the index's folder (the path rule of ck_checkpoint.h)."""
    folder = os.path.dirname(os.path.abspath(index))
    if not name or os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise FormatError(f"{index}: weight_map names {name!r}, which is not a file inside its folder")
    path = os.path.join(folder, name)
    real, root = os.path.realpath(os.path.dirname(path)), os.path.realpath(folder)
    if os.path.commonpath([real, root]) != root:
        raise FormatError(f"{index}: weight_map names {name!r}, which leads outside its folder (through a symlink)")
    return path


def load(path):
    """name -> numpy array (bf16 as float32) for a file, folder or index.json. A malformed file raises FormatError
    naming the file and the tensor; shards an index names outside its folder are refused."""
    if os.path.isdir(path):
        single = os.path.join(path, "model.safetensors")
        path = single if os.path.exists(single) else os.path.join(path, "model.safetensors.index.json")
    if path.endswith(".json"):
        try:
            with open(path) as f:
                index = json.load(f)
        except (ValueError, RecursionError) as e:
            raise FormatError(f"{path}: not valid JSON: {e}") from None
        wmap = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wmap, dict) or not wmap:
            raise FormatError(f"{path}: no \"weight_map\" object naming the tensors' shards")
        bad = [v for v in wmap.values() if not isinstance(v, str)]
        if bad:
            raise FormatError(f"{path}: weight_map names {bad[0]!r}, which is not a file name")
        out = {}
        for s in sorted(set(wmap.values())):
            shard = _shard_path(path, s)
            if not os.path.isfile(shard):
                raise FormatError(f"{path}: weight_map names the shard {s!r}, which is not a file in its folder")
            out.update(load(shard))
        missing = sorted(set(wmap) - set(out))
        if missing:
            raise FormatError(f"{path}: the index names tensor '{missing[0]}', which its shard does not hold")
        return out
    header, start, data_size = _read_header(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r") if data_size else np.zeros(start, np.uint8)
    out, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape, b, e = _check_entry(path, name, info, data_size)
        if e > b:
            spans.append((b, e, name))
        buf = np.array(raw[start + b:start + e])
        arr = bf16_to_f32(buf.view(np.uint16)) if dt == "BF16" else buf.view(_NP[dt])
        out[name] = arr.reshape(shape)
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise FormatError(f"{path}: tensors '{n0}' [{b0}, {e0}) and '{n1}' [{b1}, {e1}) overlap in the data")
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
