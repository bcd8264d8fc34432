"""Bad input on the graph path gives clear errors naming the op / module /
file / tensor / input, and never a crash or a half-written output."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import ckc
from ckc import safetensors as st
from ckc.examples import MLP, randomize
from conftest import max_diff

TOL = 1e-4


class Sorter(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values


class WithSort(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.order = Sorter()

    def forward(self, x):
        return self.order(self.fc(x))


def test_export_names_the_op_and_module_without_a_handler(tmp_path):
    with pytest.raises(ckc.ExportError) as e:
        ckc.export(WithSort().eval(), (torch.randn(2, 4),), str(tmp_path / "x"))
    msg = str(e.value)
    assert "aten.sort" in msg and "module 'order'" in msg
    assert not os.path.exists(tmp_path / "x" / "graph.json")  # nothing half-written


def test_export_rejects_training_dropout_and_float64(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    with pytest.raises(ckc.ExportError, match="call model.eval"):
        ckc.export(m, (torch.randn(2, 4),), str(tmp_path / "d"))
    with pytest.raises(ckc.ExportError, match="float64"):
        ckc.export(MLP(4).eval(), (torch.randn(2, 4, dtype=torch.float64),), str(tmp_path / "f"))


class IdArithmetic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, idx):
        return self.emb(idx) * (idx + 1).unsqueeze(-1)  # integer math at run time, promoted to float32


class Int32Arithmetic(torch.nn.Module):
    def forward(self, idx):
        return (idx.int() * 3).float()


def test_integer_math_at_run_time_runs_int32_math_is_a_compile_error(tmp_path):
    """int64 ADD / SUB / MUL on run-time values run (ck_binary_i64), and an int64 operand of a float32 result is
    cast as torch promotes it; int32 arithmetic has no kernel: a compile error naming the node, no model.c."""
    m = IdArithmetic().eval()
    idx = torch.tensor([[0, 3, 9], [2, 2, 7]])
    graph = ckc.export(m, (idx,), str(tmp_path / "e"))
    g = ckc.GraphModel(ckc.build_library(ckc.compile_model(graph, str(tmp_path / "ok"))))
    with torch.no_grad():
        assert max_diff(g(idx.numpy()), m(idx).numpy()) < TOL
    graph = ckc.export(Int32Arithmetic().eval(), (idx,), str(tmp_path / "i32"))
    r = ckc_compile(graph, tmp_path / "model.c")
    assert r.returncode == 1, r.stderr
    assert "node 'mul'" in r.stderr and "i32" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "model.c")


def ckc_compile(graph, out):
    return subprocess.run([ckc.ckc_binary(), "compile", str(graph), "-o", str(out)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    return ckc.export(randomize(MLP(8)), (torch.randn(2, 8),), str(d / "export"))


def test_compile_errors_name_the_file_and_the_problem(exported, tmp_path):
    doc = json.load(open(exported))
    cases = {
        "malformed": ("{not json", "not valid JSON"),
        "unknown_op": (dict(doc, nodes=[dict(doc["nodes"][0], op="CONV9D")] + doc["nodes"][1:]), "unknown op 'CONV9D'"),
        "version": (dict(doc, version=99), "schema version 99 is not supported"),
        "reference_type": (dict(doc, nodes=[dict(doc["nodes"][0], reference=3)] + doc["nodes"][1:]),
                           '"reference" must be a string'),
        "int64_scalar": (dict(doc, inputs=[{"name": "i", "shape": [2], "dtype": "i64"}], constants=[],
                              nodes=[{"name": "a", "op": "ADD", "inputs": ["i"], "attrs": {"scalar": 1e30}}],
                              outputs=[{"name": "o", "tensor": "a"}]),
                         "node 'a' (ADD): the scalar 1e+30 of an integer op is outside int64"),
    }
    for name, (content, want) in cases.items():
        g = tmp_path / name / "graph.json"
        g.parent.mkdir()
        g.write_text(content if isinstance(content, str) else json.dumps(content))
        if not isinstance(content, str):
            os.symlink(os.path.join(os.path.dirname(exported), "weights.safetensors"), g.parent / "weights.safetensors")
        r = ckc_compile(g, tmp_path / name / "model.c")
        assert r.returncode == 1, (name, r.stderr)
        assert want in r.stderr and str(g) in r.stderr, (name, r.stderr)
        assert not os.path.exists(tmp_path / name / "model.c")


def test_missing_weight_and_missing_weights_file(exported, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (d / "graph.json").write_text(open(exported).read())
    weights = st.load(os.path.join(os.path.dirname(exported), "weights.safetensors"))
    r = ckc_compile(d / "graph.json", d / "model.c")
    assert r.returncode == 3 and "weights file cannot be read" in r.stderr, r.stderr
    del weights["fc2.bias"]
    st.save(str(d / "weights.safetensors"), weights)
    r = ckc_compile(d / "graph.json", d / "model.c")
    assert r.returncode == 1 and "'fc2.bias': not in the weights file" in r.stderr, r.stderr


def test_run_time_errors_name_the_input(exported, tmp_path):
    c = ckc.compile_model(exported, str(tmp_path / "m"))
    so = ckc.build_library(c)
    g = ckc.GraphModel(so)
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ckc.CkError, match="takes 1 inputs"):
        g(x, x)
    with pytest.raises(ckc.CkError, match=r"input 'x' must have shape \[2, 8\], got \[3, 8\]"):
        g(np.zeros((3, 8), np.float32))
    with pytest.raises(ckc.CkError, match="input 'x' must be float32, got complex64"):
        g(np.zeros((2, 8), np.complex64))
    assert g(x).shape == (2, 8)  # still usable after the errors

    # init: a weights file that lacks a tensor, or no weights file at all
    weights = str(tmp_path / "m" / "model.weights.safetensors")
    broken = st.load(weights)
    broken.pop(sorted(broken)[0])
    st.save(str(tmp_path / "broken.safetensors"), broken)
    with pytest.raises(ckc.CkError, match="ck_graph_init: .*" + sorted(st.load(weights))[0]):
        ckc.GraphModel(so, str(tmp_path / "broken.safetensors"))
    with pytest.raises(ckc.CkError, match="ck_graph_init: .*does-not-exist"):
        ckc.GraphModel(so, str(tmp_path / "does-not-exist.safetensors"))


def test_a_broken_environment_says_what_to_run(monkeypatch):
    """No numpy: `import ckc` says what to install; a torch older than 2.x: ckc.export says it needs 2.x."""
    import sys
    p = subprocess.run([sys.executable, "-c", "import sys; sys.modules['numpy'] = None; import ckc"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "ckc needs numpy" in p.stderr and "install_deps.sh" in p.stderr

    import types
    ex = sys.modules["ckc.export"]  # the module (ckc.export is the function)
    old = types.SimpleNamespace(__version__="1.13.1")
    monkeypatch.setitem(sys.modules, "torch", old)
    with pytest.raises(ckc.ExportError, match=r"needs PyTorch 2.x.*torch 1.13.1.*install_deps.sh"):
        ex.require_torch()
    monkeypatch.setitem(sys.modules, "torch", None)  # not installed
    with pytest.raises(ckc.ExportError, match=r"needs PyTorch 2.x, which is not installed"):
        ex.require_torch()


@pytest.mark.parametrize("into, message", [
    ("nope", "outputs[0]: \"into\": 'nope' is not an input of the graph (inputs: p, g)"),
    ("g", "outputs[0]: \"into\": input 'g' is f32[4], the output f32[3]"),
])
def test_an_output_into_a_bad_input_is_refused(tmp_path, into, message):
    f32 = lambda n, s: {"name": n, "shape": [s], "dtype": "f32"}  # noqa: E731
    doc = {"schema": "ckc.graph", "version": 1, "inputs": [f32("p", 3), f32("g", 4)], "constants": [],
           "nodes": [{"name": "y", "op": "NEG", "inputs": ["p"]}],
           "outputs": [{"name": "y", "tensor": "y", "into": into}]}
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(doc))
    r = ckc_compile(graph, tmp_path / "model.c")
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "model.c")


def test_two_outputs_into_one_input_are_refused(tmp_path):
    f32 = {"name": "p", "shape": [3], "dtype": "f32"}
    doc = {"schema": "ckc.graph", "version": 1, "inputs": [f32], "constants": [],
           "nodes": [{"name": "a", "op": "NEG", "inputs": ["p"]}, {"name": "b", "op": "EXP", "inputs": ["p"]}],
           "outputs": [{"name": "a", "tensor": "a", "into": "p"}, {"name": "b", "tensor": "b", "into": "p"}]}
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(doc))
    r = ckc_compile(graph, tmp_path / "model.c")
    assert r.returncode == 1 and "outputs[1]: \"into\": input 'p' is already written by another output" in r.stderr


@pytest.mark.parametrize("attrs, inputs, message", [
    ({"kv_groups": 1 << 62}, ["q", "k", "k"], "kv_groups 4611686018427387904 must be in [1, 4096]"),
    ({"kv_groups": 3}, ["q", "k", "k"], "k and v must be [B, H / kv_groups, S, D]"),
    ({"kv_groups": 2, "mask": "keep"}, ["q", "k", "k", "fm"], "a mask \"keep\" of dtype f32"),
    ({"kv_groups": 2, "mask": "add"}, ["q", "k", "k", "wide"], "the mask [2, 1, 5, 6] must end in the 5 keys"),
    ({"rows": -1}, None, "needs attr rows"),
    ({"rows": 1 << 40}, None, "are above ckc's limits"),
])
def test_bad_attention_and_index_put_attributes_are_refused(tmp_path, attrs, inputs, message):
    """graph.json from a stranger: ATTENTION's kv_groups and mask, INDEX_PUT's rows are checked before anything
    is sized from them (a huge kv_groups would overflow the heads' product)."""
    t = lambda n, s, dt="f32": {"name": n, "shape": s, "dtype": dt}  # noqa: E731
    ins = [t("q", [2, 4, 5, 8]), t("k", [2, 2, 5, 8]), t("fm", [2, 1, 5, 5]), t("wide", [2, 1, 5, 6]),
           t("ids", [3], "i64"), t("g", [3, 8])]
    if inputs is None:
        node = {"name": "y", "op": "INDEX_PUT", "inputs": ["ids", "g"], "attrs": attrs}
    else:
        node = {"name": "y", "op": "ATTENTION", "inputs": inputs, "attrs": dict(attrs, scale=0.5)}
    doc = {"schema": "ckc.graph", "version": 1, "inputs": ins, "constants": [], "nodes": [node],
           "outputs": [{"name": "y", "tensor": "y"}]}
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(doc))
    r = ckc_compile(graph, tmp_path / "model.c")
    assert r.returncode == 1 and message in r.stderr and "node 'y'" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "model.c")
