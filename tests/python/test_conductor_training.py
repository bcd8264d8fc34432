"""torch.compile(backend="gcu") in training: AOTAutograd's backward graph runs through ckc's C as well.

For the seeds' MLP, the transformer block and a GPT-style LM (python/ckc/examples.py), on the gcu device
and with --target cpu: three SGD steps of the compiled module against eager PyTorch from the same
weights; every step's loss and every parameter's .grad within 1e-4 (relative to the tensor's largest
gradient), so the backward is right and the optimizer's in-place updates reach the compiled forward.
ckc.explain(..., backward=True) reports the backward graphs per node.
"""
import copy
import warnings

import pytest
import torch

import ckc
from ckc.examples import GPT, MLP, Block, randomize


def workload(name):
    g = torch.Generator().manual_seed(3)
    if name == "mlp":
        return randomize(MLP(64), seed=0, std=0.1), torch.randn(8, 64, generator=g)
    if name == "block":
        return randomize(Block(64, 4, "softmax"), seed=0, std=0.1), torch.randn(2, 16, 64, generator=g)
    return randomize(GPT(vocab=96, dim=64, heads=4, layers=2, max_len=32), seed=0), \
        torch.randint(0, 96, (2, 16), generator=g)


def loss_of(y):
    return (y ** 2).mean()


def gpt_step_graphs(tmp_path, monkeypatch):
    """One forward and backward of the GPT workload through torch.compile(backend="gcu", target cpu) in a cache
    of its own, its .grad checked against eager within 1e-4; returns the graph.json documents it compiled."""
    import json
    monkeypatch.setenv("CKC_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    model, x = workload("gpt")
    ref = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss_of(torch.compile(model, backend="gcu", options={"target": "cpu"})(x)).backward()
    loss_of(ref(x)).backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad - q.grad).abs().max() <= 1e-4 * q.grad.abs().max(), n
    return [json.loads(f.read_text()) for f in tmp_path.glob("graphs/*/graph.json")]


@pytest.mark.parametrize("target", ["gcu", "cpu"])
@pytest.mark.parametrize("name", ["mlp", "block", "gpt"])
def test_backward_and_steps_match_eager(name, target):
    torch._dynamo.reset()
    model, x = workload(name)
    ref = copy.deepcopy(model)
    fast = torch.compile(model, backend="gcu", options={"target": target})
    # SGD: Adam would scale the rounding noise of gradients that are zero in exact arithmetic (an attention key
    # bias's) into lr-sized steps that differ between any two implementations
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ops that fall back to eager are reported, and tested below
        for step in range(3):
            opt.zero_grad()
            ref_opt.zero_grad()
            loss = loss_of(fast(x))
            loss.backward()
            ref_loss = loss_of(ref(x))
            ref_loss.backward()
            assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-4), f"step {step}"
            for (n, p), q in zip(model.named_parameters(), ref.parameters()):
                err = ((p.grad - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-30)).item()
                assert err < 1e-4, f"step {step}: {n}.grad relative error {err:.2e}"
            opt.step()
            ref_opt.step()


def test_the_gpt_trains_with_one_forward_library_and_gradients_in_place():
    """The GPT's causal mask is a module buffer: compiled in as a constant (guarded), the training forward and
    the backward are one library each with no eager op; the backward reads the weight transposes the forward saved in place and
    hands the weight gradients back in the parameters' layout, so AccumulateGrad takes them without a copy."""
    from ckc.conductor.support import LAYOUT_ONLY as _LAYOUT_ONLY
    torch._dynamo.reset()
    model, x = workload("gpt")
    contiguous = {}
    for n, p in model.named_parameters():
        p.register_hook(lambda g, n=n: contiguous.__setitem__(n, g.is_contiguous()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reports = ckc.explain(model, (x,), backward=True)
    fwd = next(r for r in reports if not r.name.endswith("_backward"))
    assert fwd.partitions == 1 and not [n for n in fwd.eager() if n.op not in _LAYOUT_ONLY], str(fwd)
    # the backward too, the embeddings' gradients included (index_put: INDEX_PUT into zeros, and into the tied
    # head's dW in place)
    bwd = next(r for r in reports if r.name.endswith("_backward"))
    assert bwd.partitions == 1 and not [n for n in bwd.eager() if n.op not in _LAYOUT_ONLY], str(bwd)
    assert len(contiguous) == len(list(model.parameters())) and all(contiguous.values()), contiguous


def test_explain_reports_the_backward_graph():
    model, x = workload("mlp")
    before = [p.grad for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reports = ckc.explain(model, (x,), backward=True)
    assert [p.grad for p in model.parameters()] == before  # left as they were (None)
    names = [r.name for r in reports]
    assert any(n.endswith("_backward") for n in names), names
    bwd = next(r for r in reports if r.name.endswith("_backward"))
    compiled = [n for n in bwd.nodes if n.compiled]
    assert any(n.op == "aten.mm" for n in compiled)  # the weight gradients' GEMMs run in ckc's C
    # ReLU's backward: the mask of run-time values (le, a CMP kernel) and the where that zeroes the gradient by it
    # (a masked fill) are compiled; only views the graph returns stay eager, with why
    assert {"aten.le", "aten.where"} <= {n.op for n in compiled}, str(bwd)
    assert all("view the graph returns" in n.reason for n in bwd.eager()), str(bwd)
    with pytest.raises(ValueError, match="no output of the model requires grad"):
        with torch.no_grad():
            ckc.explain(model, (x,), backward=True)


def test_a_big_fill_runs_eagerly_instead_of_becoming_a_constant():
    """A zeros tensor of more than 2^20 elements (an embedding gradient's base at a real vocabulary) is not
    compiled into the library as a constant: it runs eagerly and feeds the compiled add."""
    class M(torch.nn.Module):
        def forward(self, x):
            return x + torch.zeros(1100, 1000)

    m, x = M(), torch.randn(1100, 1000)
    with torch.no_grad():
        reports = ckc.explain(m, (x,))
        assert torch.equal(torch.compile(m, backend="gcu", options={"target": "cpu"})(x), x)
    nodes = {n.op: n for n in reports[0].nodes}
    assert not nodes["aten.full"].compiled and "a fill of 1100000 elements runs eagerly" in nodes["aten.full"].reason
    assert nodes["aten.add"].compiled


def test_no_copies_of_the_weights_stay_alive():
    """After training steps the process holds what eager holds for the tied [vocab, dim] embedding: the
    parameter, its gradient and AdamW's two moments. The example run that compiling records (every
    intermediate value) is not kept, and views the graphs return (transposed weights saved for the backward,
    weight gradients transposed back) are views, not copies."""
    import gc
    torch._dynamo.reset()
    vocab, dim = 4096, 64
    model = randomize(GPT(vocab=vocab, dim=dim, heads=4, layers=2, max_len=32), seed=0, std=0.02).train()
    fast = torch.compile(model, backend="gcu", options={"target": "cpu"})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (1, 32), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            opt.zero_grad()
            fast(x).float().pow(2).mean().backward()
            opt.step()
    # what is alive, not what waits for the cycle collector: compiling leaves dynamo's traced FX graphs (nodes
    # whose meta holds example tensors) in reference cycles; whether a collection ran before this line depends on
    # allocation counts (pytest's assertion rewriting alone changes it)
    gc.collect()
    big = set()
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.device.type == "cpu" and \
                    o.untyped_storage().nbytes() >= vocab * dim * 4 and o.untyped_storage().data_ptr():
                big.add(o.untyped_storage().data_ptr())
        except (RuntimeError, ReferenceError, NotImplementedError):
            pass
    assert len(big) == 4, f"{len(big)} live buffers of the embedding's size or larger (eager: 4)"


def test_compiling_leaves_no_recorded_values_for_the_cycle_collector(tmp_path, monkeypatch):
    """Compiling runs the graphs once on the example inputs and records node values (shapes, constants, the
    values the partitions need). None of them may end up in a reference cycle: a training loop allocates few
    Python containers, so the cycle collector may never run, and at GPT-2 small such garbage held ~1.3 GB
    (peak RSS 4.2 GB against eager's 3.0). With the collector off from the start, a collection afterwards finds
    no tensor with storage among the garbage."""
    import gc
    monkeypatch.setenv("CKC_CACHE_DIR", str(tmp_path))  # a cold compile: the recording runs
    torch._dynamo.reset()
    model, x = workload("gpt")
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss_of(torch.compile(model, backend="gcu", options={"target": "cpu"})(x)).backward()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    real = [o for o in garbage if type(o) in (torch.Tensor, torch.nn.Parameter)  # not weakref proxies, not fake
            and not o.is_meta and o.untyped_storage().nbytes() > 0]
    assert not real, f"{len(real)} tensors in reference cycles, e.g. {[tuple(t.shape) for t in real[:5]]}"


def test_a_value_the_forward_saves_twice_is_one_library_output(tmp_path, monkeypatch):
    """AOTAutograd's forward returns each attention softmax twice (the softmax, for its backward, and an expand
    of it to its own shape, for the P^T dY product: one tensor of the graph; and the layers' identical folded
    masks). The library has one output per tensor and the partition returns it at each place: two outputs would
    cost a second buffer of [heads, T, T] per layer and a copy per call."""
    docs = gpt_step_graphs(tmp_path, monkeypatch)
    softmax_returned = 0
    for doc in docs:
        ops = {n["name"]: n["op"] for n in doc["nodes"]}
        tensors = [o["tensor"] for o in doc["outputs"]]
        assert len(set(tensors)) == len(tensors), f"a library returns {len(tensors) - len(set(tensors))} values twice"
        softmax_returned += sum(ops.get(t) == "SOFTMAX" for t in tensors)
    assert softmax_returned == 2  # one per layer: the case this test is about occurs


def test_the_backward_frees_each_saved_activation_after_its_last_use(monkeypatch):
    """AOTAutograd hands the compiled backward its saved activations in a list it may empty (the boxed
    convention): the backward empties it and drops each value after its last use, as eager autograd frees its
    saved tensors, so the later partitions of the backward run with fewer of the forward's outputs alive.
    Held to the end (a plain call), every saved activation would live alongside all the weight gradients."""
    import weakref
    from ckc.conductor import support
    from ckc.export import _target_name
    from ckc.graph import GraphModel
    torch._dynamo.reset()
    # the bias gradients' sums run eagerly here, so the backward is several libraries in turn
    unsupported = support.unsupported_reason
    monkeypatch.setattr(support, "unsupported_reason", lambda node, *a: "(test) eager" if
                        _target_name(node) == "aten.sum" else unsupported(node, *a))
    phase, forward_outputs, alive_at_backward_calls = ["forward"], [], []
    runner = GraphModel.torch_runner

    def counting_runner(self):
        run = runner(self)

        def call(*args):
            if phase[0] == "backward":
                alive_at_backward_calls.append(sum(r() is not None for r in forward_outputs))
            outs = run(*args)
            if phase[0] == "forward":
                forward_outputs.extend(weakref.ref(o) for o in outs)
            return outs
        return call
    monkeypatch.setattr(GraphModel, "torch_runner", counting_runner)
    model, x = workload("gpt")
    fast = torch.compile(model, backend="gcu", options={"target": "cpu"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = loss_of(fast(x))
        phase[0] = "backward"
        loss.backward()
    assert len(alive_at_backward_calls) >= 2, alive_at_backward_calls
    assert alive_at_backward_calls[-1] < alive_at_backward_calls[0] <= len(forward_outputs), alive_at_backward_calls


def test_compiling_the_backward_records_only_what_partitions_read(monkeypatch):
    """Compiling runs the graph once to record example values for the partitions: their inputs and what one
    partition hands to another, not the weight gradients the backward returns (at GPT-2 small those are the
    size of the model, recorded on top of the step's own)."""
    from ckc.conductor import partition
    torch._dynamo.reset()
    recorded = []
    compile_partitions = partition.compile_partitions

    def spying(gm, record, *a, **k):
        returned_only = {n.name for n in gm.graph.nodes if n.op != "output" and n.users and
                         all(u.op == "output" for u in n.users)}

        def spy(names):
            recorded.append((set(names), returned_only))
            return record(names)
        return compile_partitions(gm, spy, *a, **k)
    monkeypatch.setattr(partition, "compile_partitions", spying)
    model, x = workload("gpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss_of(torch.compile(model, backend="gcu", options={"target": "cpu"})(x)).backward()
    assert len(recorded) >= 2  # the forward's and the backward's
    for names, returned_only in recorded:
        assert returned_only and not names & returned_only, sorted(names & returned_only)[:5]


def test_the_tied_embedding_gradient_is_scattered_into_the_head_gradient(monkeypatch):
    """The GPT's embedding is tied to its LM head. AOTAutograd's backward sums the head's dW and the
    embedding's scatter-add into zeros (index_put(full(0), ids, dY, accumulate=True)); the backward adds the
    rows into dW in place instead (index_put_): no zero fill nor add of a vocabulary-sized matrix per step.
    The gradient still matches eager's (test_backward_and_steps_match_eager)."""
    from ckc.conductor import partition
    torch._dynamo.reset()
    graphs = []
    compile_partitions = partition.compile_partitions

    def spying(gm, record, name, *a, **k):
        if name.endswith("_backward"):
            graphs.append([(str(n.target), [str(u.target) for u in n.users]) for n in gm.graph.nodes])
        return compile_partitions(gm, record, name, *a, **k)
    monkeypatch.setattr(partition, "compile_partitions", spying)
    model, x = workload("gpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss_of(torch.compile(model, backend="gcu", options={"target": "cpu"})(x)).backward()
    (nodes,) = graphs
    assert sum(t == "aten.index_put_.default" for t, _ in nodes) == 1  # the tied token embedding
    # the untied position embedding keeps its scatter into zeros, which nothing adds to
    scatters = [users for t, users in nodes if t == "aten.index_put.default"]
    assert len(scatters) == 1 and "aten.add.Tensor" not in scatters[0]


def test_a_compiled_adamw_step_runs_in_one_library_and_matches_eager(tmp_path, monkeypatch):
    """torch.compile(opt.step, backend="gcu"): AdamW's decomposed update (lerp's where on its constant weight,
    addcmul's prims.fma, the functional copy, the bias corrections beta ** step) compiles with no op left to
    eager PyTorch into one library that writes the parameters and the optimizer's state in place (graph.json
    "into": no new tensors for AOTAutograd to copy back), and three steps leave them where eager AdamW does."""
    import json
    monkeypatch.setenv("CKC_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    model, x = workload("mlp")
    ref = copy.deepcopy(model)

    def adamw(m):
        decay = [p for p in m.parameters() if p.dim() >= 2]
        rest = [p for p in m.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                 lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    opt, ref_opt = adamw(model), adamw(ref)
    step = torch.compile(opt.step, backend="gcu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for m, o in ((model, opt), (ref, ref_opt)):
                o.zero_grad()
                loss_of(m(x)).backward()
            step()
            ref_opt.step()
    eager = [str(w.message) for w in caught if "run eagerly" in str(w.message)]
    assert not eager, eager
    docs = [json.load(open(g)) for g in tmp_path.glob("graphs/*/graph.json")]
    n_params = len(list(model.parameters()))
    assert len(docs) == 1, len(docs)
    outs = docs[0]["outputs"]  # parameter, exp_avg, exp_avg_sq and step of each, and nothing else
    assert len(outs) == 4 * n_params and all("into" in o for o in outs), outs
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p - q).abs().max().item() < 1e-6, n
        for key in ("exp_avg", "exp_avg_sq", "step"):
            got, want = opt.state[p][key], ref_opt.state[q][key]
            assert ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item() < 1e-5, f"{n} {key}"


def test_compiling_the_adamw_step_records_shapes_not_values(monkeypatch):
    """Compiling runs the optimizer's graph on the meta device (its values are the model's size several times
    over: at GPT-2 small this compile peaked at +3.9 GB): no value recorded while compiling is a real tensor of
    more than one element, and the step still updates the parameters."""
    import importlib
    ex = importlib.import_module("ckc.export")
    recorded, real_run = [], ex.run_recording

    def spy(gm, args, **kwargs):
        values = real_run(gm, args, **kwargs)
        recorded.append(values)
        return values
    monkeypatch.setattr(ex, "run_recording", spy)
    torch._dynamo.reset()
    model, x = workload("mlp")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss_of(model(x)).backward()
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(opt.step, backend="gcu")()
    assert recorded
    big = [(n.name, v.device.type) for values in recorded for n, v in values.items()
           if isinstance(v, torch.Tensor) and v.numel() > 1 and v.device.type != "meta"]
    assert not big, big
    assert all(not torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_the_forward_saves_the_gelus_input_and_the_backward_recomputes_the_rest(tmp_path, monkeypatch):
    """rewrites.partition_joint: the GPT's written-out tanh GELU hangs off one tensor (the MLP's hidden layer, fc's
    output); the forward saves that one and the backward computes the chain again in its elementwise programs.
    With AOTAutograd's default partition the forward returned five tensors of the hidden size per layer (the
    hidden layer, tanh's result, 1 + tanh, x * 0.5 and the GELU's output): 12 KiB per token per layer of
    GPT-2-small, written, kept until the backward and read again. The gradients stay eager's."""
    # (2 layers, dim 64: the hidden layer is [2, 16, 256])
    forwards = [doc for doc in gpt_step_graphs(tmp_path, monkeypatch)
                if any(n["op"] == "EMBEDDING" for n in doc["nodes"])]  # the forward looks the token ids up
    assert len(forwards) == 1, len(forwards)
    shapes = {n["name"]: n.get("shape") for n in forwards[0]["nodes"]}
    shapes.update({i["name"]: i["shape"] for i in forwards[0]["inputs"]})
    saved = [o["tensor"] for o in forwards[0]["outputs"] if (shapes.get(o["tensor"]) or [0])[-1] == 256]
    assert len(saved) == 2, saved  # the hidden layer of each of the 2 layers, nothing else of its size
