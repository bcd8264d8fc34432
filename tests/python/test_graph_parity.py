"""Exported PyTorch modules: ckc.export -> ckc compile -> cc -> run, against
eager PyTorch (within 1e-4), with the fusions asserted to fire and the
results unchanged with the pipeline off."""
import importlib
import json
import os
import re

import numpy as np
import pytest
import torch

from ckc.examples import GPT, MLP, Block, randomize
from conftest import max_diff, op_counts

EXPORT = importlib.import_module("ckc.export")  # the module (ckc.export is the function)

TOL = 1e-4
ALL_PASSES = ["eliminate_reshapes", "absorb_blas", "constant_fold", "absorb_causal_mask", "fuse_dags", "fuse_patterns",
              "fuse_matmul_add", "fuse_parallel_linears", "dce"]


def no_passes(*keep):
    args = []
    for p in ALL_PASSES:
        if p not in keep:
            args += ["--disable-pass", p]
    return args


def eager(module, *inputs):
    with torch.no_grad():
        return module(*inputs).numpy()


def test_mlp(compile_graph):
    torch.manual_seed(0)
    m = randomize(MLP(64, 96), seed=1)
    x = torch.randn(4, 64)
    c = compile_graph("mlp", m, (x,))
    y = c.model()(x.numpy())
    assert y.shape == (4, 64) and y.dtype == np.float32
    assert max_diff(y, eager(m, x)) < TOL
    ops = op_counts(c.inspect())
    assert ops == {"MATMUL": 2, "BIAS_RELU": 2, "MATMUL_ADD": 1}, ops  # two Linear+ReLU, then Linear + bias

    # the pipeline off: the same numbers
    off = compile_graph("mlp_off", m, (x,), args=no_passes())
    assert op_counts(off.inspect())["TRANSPOSE"] == 3  # nothing absorbed
    assert max_diff(off.model()(x.numpy()), y) < 1e-5


ATTN = ["hand", "softmax", "sdpa"]


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("causal", [False, True])
def test_block_three_ways(compile_graph, attn, causal):
    m = randomize(Block(32, 4, attn, causal), seed=2)
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(3))
    name = f"block_{attn}_{int(causal)}"
    c = compile_graph(name, m, (x,))
    ref = eager(m, x)
    assert max_diff(c.model()(x.numpy()), ref) < TOL
    ins = c.inspect()
    ops = op_counts(ins)
    atts = [n for n in ins["header"]["nodes"] if n["op"] == "ATTENTION"]
    assert len(atts) == 1 and atts[0]["attrs"]["causal"] == int(causal), ops
    assert abs(atts[0]["attrs"]["scale"] - 1 / np.sqrt(8)) < 1e-6
    for gone in ("SOFTMAX", "EXP", "REDUCE_MAX", "REDUCE_SUM", "MASKED_FILL", "CAUSAL_MASK"):
        assert gone not in ops, ops
    assert ops["MATMUL_ADD"] == 4  # qkv, proj (+ residual), fc, out (+ residual)

    off = compile_graph(name + "_off", m, (x,), args=no_passes("constant_fold"))
    # F.scaled_dot_product_attention lowers to ATTENTION itself; the others need the passes
    assert ("ATTENTION" in op_counts(off.inspect())) == (attn == "sdpa")
    assert max_diff(off.model()(x.numpy()), ref) < TOL


def test_gpt(compile_graph):
    m = randomize(GPT(vocab=96, dim=64, heads=4, layers=3, max_len=32), seed=4)
    idx = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(5))
    c = compile_graph("gpt", m, (idx,))
    g = c.model()
    assert [(s.name, s.shape, np.dtype(s.dtype).name) for s in g.inputs] == [("idx", (2, 16), "int64")]
    assert [(s.name, s.shape) for s in g.outputs] == [("output", (2, 16, 96))]
    ref = eager(m, idx)
    y = g(idx.numpy())
    assert max_diff(y, ref) < TOL
    ins = c.inspect()
    # folded: one block run 3 times; its weights are per layer, the mask is gone
    assert ins["model"]["num_layers"] == 3
    block = ins["block"]["nodes"]
    assert [n["attrs"].get("causal") for n in block if n["op"] == "ATTENTION"] == [1]
    assert [n["attrs"]["act"] for n in block if n["op"] == "GELU"] == ["gelu_tanh"]
    ops = op_counts(ins)
    for gone in ("MASKED_FILL", "CMP", "TRIL", "ARANGE", "SOFTMAX", "TANH", "POW", "CAUSAL_MASK"):
        assert gone not in ops, ops
    assert any("h.L.attn.qkv.weight" in n["inputs"] for n in block)
    with open(c.c_path) as f:
        src = f.read()
    assert "#define CK_N_LAYERS 3" in src and src.count("ck_attention_") == 1
    assert "/* h.{L}.attn" in src  # each call names its module

    # unrolled (no folding) and with the pipeline off: the same numbers
    flat = compile_graph("gpt_flat", m, (idx,), args=["--no-fold-layers"])
    assert flat.inspect()["model"]["num_layers"] == 0
    assert flat.inspect("--disable-pass", "fold_layers")["model"]["num_layers"] == 0  # the same thing, by pass name
    assert "fold_layers" in c.inspect()["passes"] and "fold_layers" not in flat.inspect()["passes"]
    assert max_diff(flat.model()(idx.numpy()), y) < 1e-5
    off = compile_graph("gpt_off", m, (idx,), args=no_passes("constant_fold"))
    assert max_diff(off.model()(idx.numpy()), ref) < TOL


def test_input_reshape_and_multiple_outputs(compile_graph):
    """A reshape of a graph input (the seeds' open problem) is a view of the caller's buffer; an input returned
    as is gets its own output buffer; a tuple return becomes several outputs."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(12, 5)

        def forward(self, x, ids):
            flat = x.view(-1, 12)
            return self.lin(flat).relu(), x, ids

    m = randomize(M(), seed=6)
    x = torch.randn(2, 3, 12)
    ids = torch.arange(6).view(2, 3)
    c = compile_graph("multi", m, (x, ids))
    g = c.model()
    assert [s.name for s in g.outputs] == ["output0", "output1", "output2"]
    y0, y1, y2 = g(x.numpy(), ids.numpy())
    r0, r1, r2 = m(x, ids)
    assert max_diff(y0, r0.detach().numpy()) < TOL
    assert np.array_equal(y1, x.numpy()) and np.array_equal(y2, ids.numpy())
    assert y2.dtype == np.int64


def test_reshaped_bool_and_int_inputs_returned(compile_graph):
    """A reshape of a bool or int64 input returned as an output is a copy of its bytes (it was copied as floats:
    4x a bool's bytes, past the end of both buffers)."""
    class M(torch.nn.Module):
        def forward(self, x, mask, ids):
            return x * 2.0, mask.unsqueeze(-1), ids.view(-1, 1)

    x, mask, ids = torch.randn(4, 16), torch.rand(16) > 0.5, torch.arange(7) * 3
    g = compile_graph("reshaped-bool", M(), (x, mask, ids)).model()
    y, ym, yi = g(x.numpy(), mask.numpy(), ids.numpy())
    assert ym.dtype == np.bool_ and np.array_equal(ym, mask.numpy()[:, None])
    assert yi.dtype == np.int64 and np.array_equal(yi, ids.numpy()[:, None])
    assert max_diff(y, 2 * x.numpy()) == 0


def test_threads_and_repeated_calls(compile_graph):
    m = randomize(Block(32, 4, "softmax", True), seed=7)
    x = torch.randn(1, 16, 32)
    c = compile_graph("block_threads", m, (x,))
    ref = eager(m, x)
    for threads in (1, 2):
        g = c.model(threads=threads)
        for _ in range(3):
            assert max_diff(g(x.numpy()), ref) < TOL
        g.close()


def test_torch_tensors_in_and_out_without_copies(compile_graph):
    m = randomize(MLP(16, 24), seed=7)
    x = torch.randn(3, 16)
    g = compile_graph("mlp_torch", m, (x,)).model()
    a = g.prepare(x)[0]
    assert a.ctypes.data == x.data_ptr()  # a contiguous CPU float32 tensor is read in place
    strided = torch.randn(16, 3).t()       # not contiguous: copied, same values
    assert g.prepare(strided)[0].ctypes.data != strided.data_ptr()
    y = g(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (3, 16)
    assert max_diff(y.numpy(), g(x.numpy())) == 0.0
    assert max_diff(g(strided).numpy(), eager(m, strided.contiguous())) < TOL
    with torch.no_grad():
        assert max_diff(y.numpy(), m(x).numpy()) < TOL
    p = torch.nn.Parameter(x.clone())      # requires_grad: detached, not refused
    assert max_diff(g(p).numpy(), y.numpy()) == 0.0


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_torch_transformer_encoder(compile_graph, norm_first, activation):
    """nn.TransformerEncoder of three nn.TransformerEncoderLayer (batch_first, eval mode): the layers fold
    into one block with one fused attention."""
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, activation=activation, batch_first=True,
                                             norm_first=norm_first)
    m = randomize(torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False), seed=3)
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(4))
    c = compile_graph(f"encoder_{int(norm_first)}_{activation}", m, (x,))
    assert max_diff(c.model()(x).numpy(), eager(m, x)) < TOL
    ins = c.inspect()
    assert ins["block"]["layers"] == 3
    block = op_counts({"header": {"nodes": []}, "block": ins["block"], "footer": {"nodes": []}})
    assert block["ATTENTION"] == 1 and block["LAYERNORM"] == 2, block
    assert "SOFTMAX" not in block
    assert ("GELU" in block) == (activation == "gelu") and ("BIAS_RELU" in block) == (activation == "relu")


class FiveBranches(torch.nn.Module):
    """Five bias-free projections of one input, each read by another GEMM: more parallel GEMMs than the
    weight loader concatenates (CK_WEIGHT_MAX_PARTS = 4)."""

    def __init__(self, n=5):
        super().__init__()
        self.inp = torch.nn.ModuleList(torch.nn.Linear(16, 8, bias=False) for _ in range(n))
        self.out = torch.nn.ModuleList(torch.nn.Linear(8, 4, bias=False) for _ in range(n))

    def forward(self, x):
        return sum(o(i(x)) for i, o in zip(self.inp, self.out))


def test_more_parallel_gemms_than_the_loader_takes(compile_graph):
    m = randomize(FiveBranches(), seed=9)
    x = torch.randn(3, 16)
    c = compile_graph("five_branches", m, (x,))
    assert max_diff(c.model()(x).numpy(), eager(m, x)) < TOL
    fused = [n for n in c.inspect()["header"]["nodes"] if n["op"] == "MATMUL" and "," in n["inputs"][1]]
    assert fused, "the parallel GEMMs did not fuse"


class AtenOp(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x * 1.5 - 0.25)


@pytest.mark.parametrize("aten", sorted(k for k, h in EXPORT._HANDLERS.items() if hasattr(h, "ck_unary")))
def test_every_unary_op_against_pytorch(compile_graph, aten):
    """Every ATen op mapped to an op of the unary table compiles (into one fused elementwise program with the
    scaling before it) and matches PyTorch (positive inputs, so that RSQRT is defined)."""
    m = AtenOp(getattr(torch.ops.aten, aten.split(".")[1]))
    x = torch.rand(3, 50, generator=torch.Generator().manual_seed(5)) + 0.5
    c = compile_graph("unary_" + aten.split(".")[1], m, (x,))
    counts = op_counts(c.inspect(), programs=True)
    assert counts.get(EXPORT._HANDLERS[aten].ck_unary) == 1
    assert counts.get("EW") == 1, counts  # fused with the scaling before it
    assert max_diff(c.model()(x).numpy(), eager(m, x)) < TOL


class Clamps(torch.nn.Module):
    def forward(self, x):
        return (torch.clamp(x, -0.3, 0.6), torch.clamp(x, min=0.1), torch.clamp(x, max=-0.2),
                torch.nn.functional.hardtanh(x, -0.5, 0.25), torch.nn.functional.relu6(x * 8.0))


def test_clamps_against_pytorch(compile_graph):
    """torch.clamp with both bounds or one, clamp_min / clamp_max, hardtanh and relu6 (its decomposition): CLAMP
    nodes that match PyTorch, NaN and infinities included."""
    m = Clamps()
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(6))
    x[0, 0], x[0, 1], x[0, 2] = float("nan"), float("inf"), -float("inf")
    c = compile_graph("clamps", m, (x,))
    assert op_counts(c.inspect(), programs=True).get("CLAMP", 0) >= 5
    got = c.model()(x)
    with torch.no_grad():
        want = m(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w.numpy())  # NaN where PyTorch's is NaN, infinities kept


class MaskedAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_fully_masked_attention_row_is_zero_as_in_pytorch(compile_graph, kind):
    """A query whose mask lets it attend to nothing (a padded position's row): scaled_dot_product_attention gives
    0 there (its safe softmax), not softmax's NaN; ckc the same, the other rows as PyTorch's."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g),
               torch.randn(1, 2, 5, 8, generator=g))
    if kind == "bool":
        mask = torch.ones(1, 1, 4, 5, dtype=torch.bool)
        mask[0, 0, 2] = False
    else:
        mask = torch.zeros(1, 1, 4, 5)
        mask[0, 0, 2] = float("-inf")
    c = compile_graph(f"masked-{kind}", MaskedAttention(), (q, k, v, mask))
    got = np.asarray(c.model()(q, k, v, mask))
    want = MaskedAttention()(q, k, v, mask).numpy()
    assert not np.isnan(want).any() and (want[0, :, 2] == 0).all()  # (what PyTorch does, checked)
    assert (got[0, :, 2] == 0).all() and max_diff(got, want) < TOL


class GroupedMaskedAttention(torch.nn.Module):
    """transformers' attention with grouped K/V heads: repeat_kv, then SDPA with a mask."""
    def forward(self, q, k, v, mask):
        b, kvh, s, d = k.shape
        k = k[:, :, None].expand(b, kvh, 3, s, d).reshape(b, kvh * 3, s, d)
        v = v[:, :, None].expand(b, kvh, 3, s, d).reshape(b, kvh * 3, s, d)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kind", ["bool", "float", "bool-per-head"])
def test_masked_grouped_attention_is_one_op(compile_graph, kind):
    """SDPA with a mask over repeat_kv's copies: one ATTENTION reading the mask per row and the K/V heads
    themselves (kv_groups 3; no EXPAND, no scores tensor), equal to PyTorch, padded queries (no key left) 0."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 6, 7, 16, generator=g)
    k, v = torch.randn(2, 2, 9, 16, generator=g), torch.randn(2, 2, 9, 16, generator=g)
    keep = torch.rand(2, 6 if kind == "bool-per-head" else 1, 7, 9, generator=g) > 0.3
    keep[1, :, 3] = False
    mask = keep if kind != "float" else torch.where(keep, torch.randn(keep.shape, generator=g), float("-inf"))
    c = compile_graph(f"gqa-{kind}", GroupedMaskedAttention(), (q, k, v, mask))
    ops = op_counts(c.inspect())
    assert ops.get("ATTENTION") == 1 and not {"EXPAND", "SOFTMAX", "MATMUL"} & set(ops), ops
    got = np.asarray(c.model()(q, k, v, mask))
    want = GroupedMaskedAttention()(q, k, v, mask).numpy()
    assert (got[1, :, 3] == 0).all() and max_diff(got, want) < TOL


class IntClamps(torch.nn.Module):
    def forward(self, i, table):
        return table[torch.clamp(i, 0, 5)], torch.clamp(i, min=2), torch.clamp(i, max=3) + (1 << 40)


def test_clamps_of_integers_are_exact(compile_graph):
    """A clamp of int64 values (indices clamped into a table, as dynamo's graphs do) stays int64 and exact, past
    2^24 too (CLAMP computes float32; integers go through CMP and WHERE)."""
    m = IntClamps()
    i = torch.tensor([-3, 0, 4, 9, 5, 1 << 40])
    table = torch.randn(6, 3)
    c = compile_graph("int-clamps", m, (i, table))
    got = c.model()(i, table)
    for g, w in zip(got, m(i, table)):
        assert np.asarray(g).dtype == w.numpy().dtype and np.array_equal(np.asarray(g), w.numpy())


class Scatters(torch.nn.Module):
    """index_put in the forms graphs have: the embedding backward's scatter-add of rows into zeros (duplicate ids
    add up), into a computed tensor, and a put (no accumulate) with negative indices and broadcast values."""
    def forward(self, ids, g, base):
        grad = torch.zeros(7, 3).index_put((ids,), g, accumulate=True)
        into = (base * 2).index_put_((ids.flatten(),), g.reshape(-1, 3), accumulate=True)
        put = base.index_put((torch.tensor([-1, 2, 0]),), torch.tensor([5.0]))
        return grad, into, put


def test_index_put_against_pytorch(compile_graph):
    """INDEX_PUT: accumulated rows equal PyTorch's (sums in one order: within float32 rounding), the zero base
    not a constant of the library, puts exact; an index out of range is a CK_EINVAL naming the node, with
    nothing written."""
    m = Scatters()
    gen = torch.Generator().manual_seed(3)
    ids = torch.tensor([[1, 4, 1], [6, 1, 0]])
    g, base = torch.randn(2, 3, 3, generator=gen), torch.randn(7, 3, generator=gen)
    c = compile_graph("scatters", m, (ids, g, base))
    assert op_counts(c.inspect(), programs=True).get("INDEX_PUT", 0) == 3
    got = c.model()(ids, g, base)
    with torch.no_grad():
        want = m(ids, g, base)
    for a, b in zip(got, want):
        assert max_diff(np.asarray(a), b.numpy()) < 1e-6
    src = open(c.c_path).read()
    assert src.count("ck_index_put(") == 3 and len(re.findall(r"ck_index_put\(\w+, /\*x=\*/NULL,", src)) == 1  # zero base
    with pytest.raises(Exception, match="an index is outside the 7 rows"):
        c.model()(torch.tensor([[1, 7, 1], [6, 1, 0]]), g, base)


@pytest.mark.parametrize("fold", [True, False], ids=["folded", "flat"])
def test_trace_agrees_with_pytorch_node_by_node(compile_graph, fold):
    """-DCK_TRACE: every traced tensor with a reference (the FX node it equals) matches PyTorch's value of that
    node; a reference run with layer 1 changed diverges first in layer 1. Folded, the block's tensors stand for
    every layer and carry no reference; the header's and footer's do."""
    import ckc
    m = randomize(GPT(vocab=96, dim=64, heads=4, layers=3, max_len=32), seed=4)
    idx = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(5))
    c = compile_graph("gpt_trace" + ("" if fold else "_flat"), m, (idx,), args=[] if fold else ["--no-fold-layers"])
    so = ckc.build_library(c.c_path, c.c_path + ".traced.so", extra_flags=["-DCK_TRACE", "-O1"])
    g = ckc.GraphModel(so, c.c_path[:-2] + ".weights.safetensors")
    with ckc.trace.recording(g) as events:
        g(idx.numpy())
    refs = EXPORT.reference_values(m, (idx,))
    rows = ckc.trace.compare(events, refs)
    assert all(ok for *_, ok in rows), [(e.reference, d) for e, d, _, ok in rows if not ok]
    sections = {e.section for e, *_ in rows}
    assert sections == ({"header", "footer"} if fold else {"header"}), sections
    assert len(rows) >= (4 if fold else 30), len(rows)
    if not fold:
        with torch.no_grad():
            m.h[1].fc.weight[0] += 0.5
        first = ckc.trace.first_divergence(events, EXPORT.reference_values(m, (idx,)))
        assert first is not None and first.event.module.startswith("h.1.fc"), str(first)
        assert first.compared >= 10


def _update_graph(folder, late_reader, target):
    """p <- p - 0.1 * g written into input p (graph.json "into"); late_reader also returns q = p_new * p, which
    reads the old p after p_new is computed: p_new cannot go into p's buffer before the end."""
    import ckc
    from ckc import safetensors
    os.makedirs(folder, exist_ok=True)
    f32 = lambda n: {"name": n, "shape": [300], "dtype": "f32"}  # noqa: E731
    nodes = [{"name": "d", "op": "MUL", "inputs": ["g"], "attrs": {"scalar": 0.1}},
             {"name": "p_new", "op": "SUB", "inputs": ["p", "d"]}]
    outputs = [{"name": "p_out", "tensor": "p_new", "into": "p"}]
    if late_reader:
        nodes.append({"name": "q", "op": "MUL", "inputs": ["p_new", "p"]})
        outputs.insert(0, {"name": "q", "tensor": "q"})
    doc = {"schema": "ckc.graph", "version": 1, "module": "update", "weights": "weights.safetensors",
           "inputs": [f32("p"), f32("g")], "constants": [], "nodes": nodes, "outputs": outputs}
    safetensors.save(os.path.join(folder, "weights.safetensors"), {})
    with open(os.path.join(folder, "graph.json"), "w") as fh:
        json.dump(doc, fh)
    c_path = ckc.compile_model(os.path.join(folder, "graph.json"), folder, args=["--target", target])
    return c_path, ckc.build_library(c_path, extra_flags=["-Werror"])


@pytest.mark.parametrize("target", ["cpu", "gcu"])
@pytest.mark.parametrize("late_reader", [False, True], ids=["direct", "copied_at_the_end"])
def test_an_output_written_into_its_input(workdir, late_reader, target):
    """graph.json "into": the output is written into the input's buffer (the caller's array changes, its own
    output buffer is not used); written there directly when nothing reads the input afterwards, else computed
    aside and copied at the end, so a later reader still sees the old values."""
    import ckc
    c_path, so = _update_graph(os.path.join(workdir, f"into-{late_reader}-{target}"), late_reader, target)
    code = open(c_path).read()
    assert ("/* p_new -> p */" in code) == late_reader, "a copy exactly when the input is read after the update"
    g = ckc.GraphModel(so)
    assert g.into == ([None, 0] if late_reader else [0])
    rng = np.random.default_rng(0)
    p, grad = rng.standard_normal(300).astype(np.float32), rng.standard_normal(300).astype(np.float32)
    p0 = p.copy()
    outs = g.run(p, grad)
    want = p0 - np.float32(0.1) * grad
    assert outs[-1] is p and np.array_equal(p, want)
    if late_reader:
        assert np.array_equal(outs[0], want * p0)
    # torch: the parameter itself is updated and its version counter moves, as an in-place op's would
    t, tg = torch.from_numpy(p0.copy()), torch.from_numpy(grad)
    v = t._version
    res = g.torch_runner()(t, tg)
    assert res[-1] is t and torch.equal(t, torch.from_numpy(want)) and t._version > v
    with pytest.raises(ckc.CkError, match="updated in place"):
        g.run(p.astype(np.float64), grad)
