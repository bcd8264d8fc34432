"""Writes the fuzzers' seed corpora into tests/fuzz/seeds/<harness>/ (committed; run again after a format
change): small valid files of every kind each harness reads, so the fuzzers start deep inside the readers, and
the reproducers of tests/hostile/. Needs the project's venv (gguf, numpy) and a built ckc:
    .venv/bin/python tests/fuzz/seeds.py [path/to/ckc]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")
HOSTILE = os.path.join(ROOT, "tests", "hostile")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))


def out(harness, name, data):
    d = os.path.join(SEEDS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st_bytes(tensors, meta=None):
    """safetensors bytes of {name: (dtype, shape, raw bytes)}"""
    header, blobs, off = {}, [], 0
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def safetensors_seeds():
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    out("safetensors", "f32", b"\0" + st_bytes({"w": ("F32", (2, 32), f32(2, 32).tobytes()),
                                                "b": ("F32", (32,), f32(32).tobytes())}, {"format": "pt"}))
    out("safetensors", "mixed", b"\0" + st_bytes({
        "h": ("F16", (4, 32), f32(4, 32).astype(np.float16).tobytes()),
        "bf": ("BF16", (2, 32), (f32(2, 32).view(np.uint32) >> 16).astype(np.uint16).tobytes()),
        "i": ("I64", (3,), np.arange(3, dtype=np.int64).tobytes()),
        "u": ("U8", (5,), bytes(range(5))),
        "e": ("F32", (0,), b""),
        "s": ("F32", (), f32(1).tobytes())}))
    out("safetensors", "index", b"\1" + json.dumps({"metadata": {"total_size": 512}, "weight_map": {
        "a": "shard-1.safetensors", "b": "shard-2.safetensors"}}).encode())
    out("safetensors", "index-one", b"\1" + json.dumps({"weight_map": {"a": "shard-1.safetensors"}}).encode())
    for name in ("safetensors-overlap.safetensors", "weights-outside.safetensors"):
        out("safetensors", "hostile-" + name, b"\0" + open(os.path.join(HOSTILE, name), "rb").read())
    for d in ("index-escape", "index-absolute", "index-empty"):
        out("safetensors", "hostile-" + d, b"\1" + open(os.path.join(HOSTILE, d, "model.safetensors.index.json"),
                                                         "rb").read())


def gguf_seeds(ckc):
    import gguf
    rng = np.random.default_rng(1)
    tmp = tempfile.mkdtemp()
    try:
        # metadata of every type, tensors of several formats (each row a whole block)
        path = os.path.join(tmp, "kinds.gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_uint32("llama.block_count", 2)
        w.add_float32("llama.rope.freq_base", 10000.0)
        w.add_uint8("k.u8", 7), w.add_int8("k.i8", -7), w.add_uint16("k.u16", 700), w.add_int16("k.i16", -700)
        w.add_int32("k.i32", -70000), w.add_uint64("k.u64", 1 << 40), w.add_int64("k.i64", -(1 << 40))
        w.add_float64("k.f64", 0.125), w.add_bool("k.bool", True), w.add_string("k.str", "hello")
        w.add_array("k.ints", [1, 2, 3]), w.add_array("k.strs", ["a", "bb", ""]), w.add_array("k.floats", [0.5, 1.5])
        x = rng.standard_normal((2, 256)).astype(np.float32)
        w.add_tensor("t.f32", x)
        w.add_tensor("t.f16", x.astype(np.float16))
        for qt in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1,
                   gguf.GGMLQuantizationType.Q5_0):  # (the K formats: the models below, written by ckc quantize)
            w.add_tensor(f"t.{qt.name.lower()}", gguf.quantize(x, qt), raw_dtype=qt)
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
        out("gguf", "kinds", open(path, "rb").read())
        # whole tiny models, as `ckc quantize` writes them (also the compile harness's seeds)
        for family, qtype in (("llama", "q8_0"), ("gemma2", "q4_0"), ("phi", "q8_0"), ("qwen2", "q4_K")):
            cfg = json.load(open(os.path.join(ROOT, "models", f"tiny-{family}", "config.json")))
            cfg.update(vocab_size=64, num_hidden_layers=1, max_position_embeddings=32)
            if family == "gemma2":
                cfg["query_pre_attn_scalar"] = cfg["head_dim"]
            d = os.path.join(tmp, family)
            os.makedirs(d)
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
            subprocess.run([ckc, "random-weights", os.path.join(d, "config.json"), "-o", d], check=True,
                           capture_output=True)
            g = os.path.join(tmp, f"{family}.gguf")
            subprocess.run([ckc, "quantize", d, "-o", g, "--type", qtype], check=True, capture_output=True)
            data = open(g, "rb").read()
            out("gguf-models", family, data)  # (seeds of both GGUF harnesses: tests/fuzz/CMakeLists.txt)
    finally:
        shutil.rmtree(tmp)
    out("gguf", "truncated", open(os.path.join(SEEDS, "gguf", "kinds"), "rb").read()[:200])
    out("gguf", "hostile-many-layers", open(os.path.join(HOSTILE, "gguf-many-layers.gguf"), "rb").read())
    # (seeds/gguf/hostile-zero-heads: a phi2 file with head_count 0 the compile-gguf fuzzer wrote; kept as found)


def config_seeds():
    for i, d in enumerate(sorted(os.listdir(os.path.join(ROOT, "models")))):
        p = os.path.join(ROOT, "models", d, "config.json")
        if os.path.exists(p):
            out("compile-config", d, bytes([i % 8]) + open(p, "rb").read())
    out("compile-config", "hostile-number-overflow", b"\0" + open(os.path.join(HOSTILE, "config-number-overflow.json"),
                                                                 "rb").read())


def graph_seeds():
    from ckc import synthetic
    out("compile-graph", "chain", json.dumps(synthetic.chain(8)))
    out("compile-graph", "chain-reversed", json.dumps(synthetic.chain(8, reverse=True)))
    doc, _ = synthetic.mlp(1)
    doc["constants"] = [{"name": "0.weight", "shape": [8, 8], "dtype": "f32"},
                        {"name": "0.bias", "shape": [8], "dtype": "f32"}]
    out("compile-graph", "mlp", json.dumps(doc))
    out("compile-graph", "ops", json.dumps({
        "schema": "ckc.graph", "version": 1, "module": "Ops", "weights": "weights.safetensors",
        "inputs": [{"name": "x", "shape": [2, 4], "dtype": "f32"}],
        "constants": [{"name": "w", "shape": [4, 4], "dtype": "f32"}, {"name": "b", "shape": [4], "dtype": "f32"}],
        "nodes": [{"name": "t", "op": "TRANSPOSE", "inputs": ["w"], "attrs": {"dim0": 0, "dim1": 1}},
                  {"name": "m", "op": "MATMUL", "inputs": ["x", "t"]},
                  {"name": "a", "op": "ADD", "inputs": ["m", "b"]},
                  {"name": "s", "op": "SOFTMAX", "inputs": ["a"], "attrs": {"axis": -1}},
                  {"name": "r", "op": "RESHAPE", "inputs": ["s"], "attrs": {"shape": [8]}},
                  {"name": "g", "op": "GELU", "inputs": ["r"], "attrs": {"act": "gelu"}}],
        "outputs": [{"name": "y", "tensor": "g"}]}))
    for d in ("graph-module-array", "graph-weights-escape", "graph-softmax-axis"):
        out("compile-graph", "hostile-" + d, open(os.path.join(HOSTILE, d, "graph.json"), "rb").read())


def tokenizer_seeds():
    # the first byte picks the loader: 0 tokenizer.json, 1 tokenizer.model, 2 GGUF (tests/fuzz/fuzz_tokenizer_load.c)
    bpe = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġa": 4, "<s>": 5},
                     "merges": ["a b", "Ġ a"], "byte_fallback": False},
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
           "decoder": {"type": "ByteLevel"},
           "added_tokens": [{"id": 5, "content": "<s>", "special": True}],
           "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
                                                                       {"Sequence": {"id": "A"}}]}}
    out("tokenizer-load", "bpe-byte-level", b"\0" + json.dumps(bpe).encode())
    sp = {"model": {"type": "BPE", "vocab": {"<unk>": 0, "▁": 1, "a": 2, "▁a": 3, "<0x41>": 4}, "merges": [["▁", "a"]],
                    "byte_fallback": True, "unk_token": "<unk>"},
          "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                             {"type": "Replace", "pattern": {"String": " "},
                                                              "content": "▁"}]},
          "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
                                                       {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}
    out("tokenizer-load", "bpe-sentencepiece-style", b"\0" + json.dumps(sp, ensure_ascii=False).encode())
    out("tokenizer-load", "sentencepiece", b"\1" + open(os.path.join(HOSTILE, "sentencepiece-tiny.model"), "rb").read())
    for name in ("tokenizer-huge-id.json", "tokenizer-shared-id.json", "tokenizer-refused.json"):
        out("tokenizer-load", "hostile-" + name, b"\0" + open(os.path.join(HOSTILE, name), "rb").read())
    import gguf
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "tok.gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(["a", "b", "ab", "Ġ", "Ġa", "<|endoftext|>"])
        w.add_token_types([1, 1, 1, 1, 1, 3])
        w.add_token_merges(["a b", "Ġ a"])
        w.add_eos_token_id(5)
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                            "{% endfor %}")
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
        out("tokenizer-load", "gguf", b"\2" + open(path, "rb").read())
    finally:
        shutil.rmtree(tmp)
    import text_corpus
    for i, d in enumerate(text_corpus.documents()[:12]):
        out("tokenizer-encode", f"doc{i}", d[:400])
    for i, b in enumerate(text_corpus.invalid_utf8()[:6]):
        out("tokenizer-encode", f"bad{i}", b)


def python_seeds():
    # the first byte picks the reader (tests/fuzz/fuzz_python_readers.py): 0 safetensors, 1 index, 2 AOT
    # signature.json, 3 cache manifest / plan
    for f in sorted(os.listdir(os.path.join(SEEDS, "safetensors"))):
        data = open(os.path.join(SEEDS, "safetensors", f), "rb").read()
        out("python", "st-" + f, data)  # (the same selector bytes: 0 file, 1 index)
    sig = {"signature_version": 1, "ckc_version": "0.1.0", "abi_version": 1, "target": "cpu-x86_64",
           "module": "MLP", "graph_sha256": "0" * 64, "library_sha256": "1" * 64, "weights_sha256": "2" * 64,
           "inputs": [{"name": "x", "shape": [2, 4], "dtype": "float32"}],
           "outputs": [{"name": "y", "shape": [2, 4], "dtype": "float32"}]}
    out("python", "signature", b"\2" + json.dumps(sig, indent=1).encode())
    out("python", "manifest", b"\3" + json.dumps({"files": {"libmodel.so": "0" * 64}, "entry": "entry"}).encode())


def chat_seeds():
    import test_chat
    turns = [("system", "You are terse."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Sum 2+2?")]
    templates = {name: t for name, (t, _, _) in test_chat.TEMPLATES.items()}
    folder = os.path.join(os.path.dirname(os.path.abspath(test_chat.__file__)), "chat_templates")
    for f in sorted(os.listdir(folder)):  # published templates kept as files (SmolLM3's)
        templates[os.path.splitext(f)[0]] = open(os.path.join(folder, f), encoding="utf-8").read()
    turns[0] = ("system", "You are terse. /no_think")
    for name, template in sorted(templates.items()):
        parts = [template] + [x for t in turns for x in t]
        out("chat", name, "\0".join(parts) + "\0\1")
        out("chat", name + "-no-system", "\0".join([template] + [x for t in turns[1:] for x in t]))


if __name__ == "__main__":
    ckc = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "ckc")
    for d in ("safetensors", "gguf-models", "compile-config", "compile-graph", "tokenizer-load",
              "tokenizer-encode", "chat", "python"):
        shutil.rmtree(os.path.join(SEEDS, d), ignore_errors=True)
    safetensors_seeds()
    gguf_seeds(ckc)
    config_seeds()
    graph_seeds()
    tokenizer_seeds()
    chat_seeds()
    python_seeds()
    for d in sorted(os.listdir(SEEDS)):
        files = os.listdir(os.path.join(SEEDS, d))
        size = sum(os.path.getsize(os.path.join(SEEDS, d, f)) for f in files)
        print(f"{d:18} {len(files):3} seeds, {size / 1024:7.1f} KiB")
