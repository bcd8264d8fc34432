"""Hostile and malformed documents through `ckc compile` (issue #32): the reproducers in tests/hostile/ are input
errors (exit 1) naming the file and the place, and every value of a valid config.json / graph.json replaced by a
value of another type is an input error (or an I/O error for a file it names) or a compile, never "internal error" (exit 4) or a crash.
(The runtime readers' reproducers: tests/unit/test_hostile.cpp; the fuzzers: tests/fuzz/.)"""
import copy
import json
import os
import subprocess

import pytest

import ckc
from ckc import synthetic
from conftest import ROOT

HOSTILE = os.path.join(ROOT, "tests", "hostile")


def compile_(path, out, *args):
    return subprocess.run([ckc.ckc_binary(), "compile", str(path), "-o", str(out), *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name, wants", [
    # a JSON number beyond a double: the JSON library's exception escaped as "internal error"
    ("config-number-overflow.json", ["config-number-overflow.json:1:213", "number overflow parsing '1e606'"]),
    # "module" of another type than a string: the same
    ("graph-module-array/graph.json", ["graph-module-array/graph.json", '"module" must be a string, is array']),
    # "weights": "../weights-outside.safetensors" was followed out of the folder
    ("graph-weights-escape/graph.json", ['"weights": names "../weights-outside.safetensors"', "leaves the folder",
                                         "--allow-outside-paths"]),
    # found by the fuzzers (tests/fuzz): a block_count of 3.9e9 in a GGUF (the compiler allocated until it died), and
    # a SOFTMAX axis outside the rank (checked only when the C was generated: "internal error")
    ("gguf-many-layers.gguf", ["gguf-many-layers.gguf", "metadata 'qwen2.block_count' is 3858759681, above ckc's "
                               "limit of 1024"]),
    ("graph-softmax-axis/graph.json", ["graph-softmax-axis/graph.json:1:464", "node 's' (SOFTMAX): axis -4 outside rank 2"]),
])
def test_reproducers_are_input_errors(tmp_path, name, wants):
    r = compile_(os.path.join(HOSTILE, name), tmp_path / "model.c")
    assert r.returncode == 1, r.stderr
    assert "internal error" not in r.stderr
    for w in wants:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "model.c").exists()


def test_the_path_rule_has_an_explicit_opt_out(tmp_path):
    r = compile_(os.path.join(HOSTILE, "graph-weights-escape", "graph.json"), tmp_path / "model.c",
                 "--allow-outside-paths")
    assert r.returncode == 0, r.stderr
    # a symlinked folder inside the model folder that leads out is refused too
    doc, weights = synthetic.mlp(1)
    outside = tmp_path / "outside"
    synthetic.write(doc, str(outside), weights)
    model = tmp_path / "model"
    model.mkdir()
    os.symlink(outside, model / "sub")
    doc["weights"] = "sub/weights.safetensors"
    (model / "graph.json").write_text(json.dumps(doc))
    r = compile_(model / "graph.json", tmp_path / "m.c")
    assert r.returncode == 1 and "outside the folder" in r.stderr, r.stderr
    assert compile_(model / "graph.json", tmp_path / "m.c", "--allow-outside-paths").returncode == 0


@pytest.mark.parametrize("key, value", [("num_hidden_layers", 5000), ("hidden_size", 1 << 21), ("vocab_size", 1 << 25),
                                        ("intermediate_size", 1 << 21), ("max_position_embeddings", 1 << 31)])
def test_config_sizes_above_the_limits_are_input_errors(tmp_path, key, value):
    cfg = json.load(open(os.path.join(ROOT, "models", "tiny-llama", "config.json")))
    cfg[key] = value
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = compile_(tmp_path / "config.json", tmp_path / "model.c")
    assert r.returncode == 1 and f'"{key}"' in r.stderr and "above ckc's limit" in r.stderr, r.stderr


def test_python_readers_refuse_with_their_error_types(tmp_path):
    """The Python readers' findings (tests/fuzz/fuzz_python_readers.py): a malformed file is the reader's error,
    a corrupt cache entry is a cache miss, never an AttributeError / KeyError / TypeError."""
    from ckc import safetensors as st
    from ckc.conductor import cache
    for bad in (b"", b"\x08\0\0\0\0\0\0\0[1, 2] ", b"\x02\0\0\0\0\0\0\0[]",
                b"\x30\0\0\0\0\0\0\0" + json.dumps({"a": {"dtype": "F32", "shape": [1 << 40],
                                                               "data_offsets": [0, 4]}}).encode().ljust(48)):
        (tmp_path / "x.safetensors").write_bytes(bad)
        with pytest.raises(st.FormatError):
            st.load(str(tmp_path / "x.safetensors"))
    for case in ("index-escape", "index-absolute", "index-empty"):
        with pytest.raises(st.FormatError):
            st.load(os.path.join(HOSTILE, case))
    with pytest.raises(st.FormatError, match="overlap"):
        st.load(os.path.join(HOSTILE, "safetensors-overlap.safetensors"))
    entry = tmp_path / "entry"
    entry.mkdir()
    for manifest in ('{"files": "libmodel.so"}', '[1]', '{"files": {"../../etc/passwd": "0"}}', '"x"'):
        (entry / "manifest.json").write_text(manifest)
        assert cache._valid(str(entry)) is False


# values of every JSON type, and numbers at the edges
ODD_VALUES = [None, True, -1, 0, 2 ** 31, 2 ** 63, 1e308, 0.5, "x", "", [], [1], {}, {"a": 1}]


def positions(doc, path=()):
    """Every value's path in a JSON document."""
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from positions(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from positions(v, path + (i,))


def replaced(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    at = doc
    for k in path[:-1]:
        at = at[k]
    at[path[-1]] = value
    return doc


def sweep(tmp_path, doc, name, extra_files=lambda folder: None, stride=1):
    """Each value of doc replaced by each of ODD_VALUES, compiled: exit 0, 1 (input) or 3 (a file the document
    names is missing), never 4 or a signal."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    extra_files(folder)
    seen = 0
    for i, path in enumerate(positions(doc)):
        for value in ODD_VALUES[i % stride::stride]:
            (folder / name).write_text(json.dumps(replaced(doc, path, value)))
            r = compile_(folder / name, folder / "model.c")
            where = f"{'.'.join(map(str, path)) or '(top level)'} = {json.dumps(value)}"
            assert r.returncode in (0, 1, 3), f"{where}: exit {r.returncode}\n{r.stderr}"
            assert "internal error" not in r.stderr, f"{where}: {r.stderr}"
            if r.returncode in (1, 3):
                assert name in r.stderr, f"{where}: the message does not name the file: {r.stderr}"
            seen += 1
    return seen


def test_every_graph_json_value_of_another_type_is_an_input_error(tmp_path):
    doc, weights = synthetic.mlp(1)
    n = sweep(tmp_path, doc, "graph.json",
              lambda folder: synthetic.write(doc, str(folder), weights))
    assert n > 400


def test_every_config_json_value_of_another_type_is_an_input_error(tmp_path):
    doc = json.load(open(os.path.join(ROOT, "models", "tiny-llama", "config.json")))
    doc["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    assert sweep(tmp_path, doc, "config.json") > 150
