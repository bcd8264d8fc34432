"""torch.compile(backend="gcu"): dynamo's FX graph -> ATen (AOTAutograd, core ATen decompositions) ->
partitions ckc compiles -> generated C -> cc -> loaded libraries, with the rest run eagerly in between.

Training: AOTAutograd's backward graph (the joint graph's second half) goes through the same partitioning,
per-node fallback and per-shape builds, so loss.backward() runs in ckc's C too; LayerNorm is decomposed in
training graphs (its mean / rstd are saved for the backward, which ckc's LAYERNORM does not return).

The compiled forward is specialised on first call for the concrete shapes it sees. A graph dynamo traced with
symbolic sizes that ckc runs whole (inference) compiles once, to one library for every size up to a bound
(symbolic.py); other symbolic graphs (an op ckc does not run, training) get one build per concrete shape. Every
placeholder, parameters included, is an input of the compiled C: parameters are read in place from the
module's tensors on each call (nothing is copied into the library), so an in-place update of a parameter
is seen by the next call without recompiling.

The stages, one module each:
  support.py      which nodes ckc can run, and why not
  specialize.py   one static graph per argument signature
  symbolic.py     one library for a symbolic graph, sizes bound per call
  rewrites.py     FX rewrites before partitioning (attention whole, in-place scatter, views, recompute)
  partition.py    partitions -> libraries (cache.py), per-node fallback to eager
  whole_graph.py  graphs that became one library, served from the cache without AOTAutograd
  buffers.py      read-only module buffers compiled in as constants, guarded
  report.py       what each graph became (ckc.explain)
"""
import functools
import importlib
import logging
import warnings

from .. import hugepages
from . import cache, partition, rewrites, specialize, symbolic, whole_graph
from .buffers import BakedBuffers, buffer_inputs, float_inputs
from .report import GraphReport, collect, collecting
from .support import LAYOUT_ONLY

ex = importlib.import_module("ckc.export")  # the module (the package's `export` attribute is the function)

log = logging.getLogger("ckc.conductor")


class _Specializing:
    """A compiled forward or backward graph: one static build per concrete argument signature."""

    def __init__(self, agm, name, options, whole_key=None, graph_outputs=0, training=False, constants=None,
                 boxed=False, fallback="eager", max_size=None):
        self.agm, self.name, self.options, self.whole_key = agm, name, options, whole_key
        self.fallback = fallback  # what runs the nodes ckc does not: "eager" or "inductor" (cache.fallback_of)
        self.boxed = boxed  # called through call_boxed (AOTAutograd's backward): its graph gets boxed code
        self.constants = constants or {}  # {argument index: value} compiled in (baked module buffers)
        self.graph_outputs = graph_outputs  # outputs of dynamo's graph (whole-graph plans must return exactly them)
        self.builds = {}
        self.plan = None  # set when the static graph became one library (whole_graph.plan_of)
        self.warned = False
        self.symbolic = _is_symbolic(agm)
        self.training = training  # a training forward or a backward graph: returned views stay views
        # a symbolic graph ckc runs whole (inference, a training forward, a backward): one library for every shape
        # within its bounds (symbolic.py)
        self.dynamic, self.why_static = None, None
        if self.symbolic:
            self.dynamic = symbolic.SymbolicGraph(agm, name, options, self.constants, max_size, boxed=boxed)
            self.why_static = self.dynamic.why_not()
            if self.why_static:
                self.dynamic = None

    def __call__(self, *args):
        gm, keep, perms = self._build_for(args)
        return gm(*specialize.feed(args, keep, perms))

    def call_boxed(self, args):
        """The boxed calling convention AOTAutograd uses for a backward: `args` (the saved activations and
        the incoming gradients) is a list this call empties, and the graph (boxed code) sets each value to
        None after its last use, so every saved activation is freed once the backward has read it, as eager
        autograd frees its saved tensors, instead of living to the end of the backward."""
        gm, keep, perms = self._build_for(args)
        fed = specialize.feed(args, keep, perms)
        args.clear()
        return gm(fed)

    def _build_for(self, args):
        """The build for these arguments: (graph module, indices of the arguments it takes, perms)."""
        import torch
        if self.builds and not self.symbolic:  # dynamo guards static shapes: one build serves every call
            return self.only
        if self.dynamic is not None:
            try:
                run, keep = self.dynamic.runner(args)
                return run, keep, None
            except (ex.ExportError, RuntimeError) as e:  # not convertible after all, or ckc compile / cc failed
                self.dynamic, self.why_static = None, partition.first_error_line(str(e))
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        hit = self.builds.get(key)
        if hit is None:
            if self.symbolic and self.builds and not self.warned:
                self.warned = True
                warnings.warn(f"ckc (gcu): graph {self.name} has symbolic sizes but is compiled per concrete shape "
                              f"(one library each): {self.why_static}", stacklevel=3)
            hit = self.builds[key] = self.only = self._build(args)
        return hit

    def _build(self, args):
        import torch
        gm, keep, record, perms = specialize.specialize(self.agm, args, self.constants)
        shapes = ", ".join(str(list(a.shape)) for a in args if isinstance(a, torch.Tensor))
        report = GraphReport(self.name, f"({shapes})")
        if self.training:
            rewrites.scatter_add_in_place(gm)
        eager = rewrites.split_returned_views(gm) if self.training else set()
        fused = partition.compile_partitions(gm, record, self.name, self.options, report, eager, self.fallback)
        if self.boxed:
            from torch.fx.graph import _BoxedCodeGen  # as torch's own aot_eager backend (boxed_nop)
            fused.graph.set_codegen(_BoxedCodeGen())
            fused.recompile()
        # the ops ckc does not run (a partition that failed to compile has had its own warning)
        eager = [r for r in report.eager() if r.op not in LAYOUT_ONLY and not r.reason.startswith("its partition")]
        if eager:
            listed = ", ".join(f"{r.node} ({r.op}: {r.reason})" for r in eager)
            by = "eagerly" if all(r.fallback == "eager" for r in eager) else "outside ckc (eagerly or by Inductor)"
            warnings.warn(f"ckc (gcu): {len(eager)} of {len(report.nodes)} ops of {self.name} run {by}: {listed}",
                          stacklevel=4)
        log.info("%s", report)
        collect(report)
        if (self.whole_key and not self.symbolic and not perms
                and set(range(len(args))) - set(keep) == set(self.constants)):
            plan = whole_graph.plan_of(fused)
            if plan:  # in terms of every argument (the constants' ones unread)
                plan = dict(plan, inputs=[keep[j] for j in plan["inputs"]])
            # AOTAutograd's forward returns more than dynamo's graph when the module mutates an input (the new
            # value, copied back by its runtime wrapper): such a graph keeps the wrapper
            if plan and len(plan["outputs"]) == self.graph_outputs:
                self.plan = plan
                cache.remember_whole_graph(self.whole_key, plan)
        return fused, keep, perms


def _is_symbolic(gm):
    import torch
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
            return True
    return False


_graph_counter = 0


def gcu(gm, example_inputs, options=()):
    """The torch.compile backend: torch.compile(model, backend="gcu"). The partitions run on the gcu device
    (--target gcu: parameters stay resident there, see GraphModel.torch_runner) unless
    options={"target": "cpu"}; options={"args": [...]} passes more `ckc compile` arguments.

    Module buffers the graph only reads (a causal mask, RoPE tables) and the Python floats dynamo passes as inputs
    (dynamic=True: a norm's eps, an attention's scaling) are compiled in as constants, guarded
    (buffers.BakedBuffers); parameters and every other input are read in place on each call.

    options={"fallback": "inductor"} hands the nodes ckc does not compile to TorchInductor, each group of them
    between ckc's partitions one Inductor graph, instead of running them op by op (the default, "eager");
    ckc.explain says which ran where.

    A graph with symbolic sizes (dynamic=True) compiles to one library for every size up to a bound:
    options={"max_size": N}, else the backend's choice (conductor/symbolic.py).

    The parameters the libraries read in place are moved onto huge pages where Linux allows (ckc.hugepages:
    the same addresses and values; options={"huge_pages": False} leaves them)."""
    fallback, max_size = cache.fallback_of(options), cache.max_size_of(options)
    huge = cache.huge_pages_of(options)
    options = cache.compile_args(options, "gcu")
    if huge:
        import torch
        hugepages.collapse([t for t in example_inputs if isinstance(t, torch.nn.Parameter)])
    compile_graph = functools.partial(_compile_graph, fallback=fallback, max_size=max_size)
    buffers, floats = buffer_inputs(gm, example_inputs), float_inputs(gm, example_inputs)
    if buffers or floats:
        return BakedBuffers(gm, example_inputs, options, buffers, compile_graph, floats)
    return compile_graph(gm, example_inputs, options)


def _compile_graph(gm, example_inputs, options, constants=None, fallback="eager", max_size=None):
    """gcu() for a graph; `constants` ({input index: value}) are the inputs compiled in (the compiled function
    still takes them, and ignores them)."""
    global _graph_counter
    import torch
    from torch._decomp import core_aten_decompositions
    from torch._functorch.aot_autograd import aot_module_simplified

    _graph_counter += 1
    name = f"graph{_graph_counter}"
    table = core_aten_decompositions()
    for op in ex._preserved(torch):
        table.pop(op, None)
    training = torch.is_grad_enabled()  # (AOTAutograd calls the forward compiler with grad disabled)
    if training:
        # training: the forward saves LayerNorm's mean and rstd for the backward, which ckc's LAYERNORM does not
        # return; decomposed into ops ckc runs, they are ordinary tensors of the compiled forward
        table[torch.ops.aten.native_layer_norm.default] = rewrites.layer_norm_with_stats

    whole_key = None
    if not training:
        rewrites.keep_attention_whole(gm)
        whole_key = whole_graph.key_of(gm, example_inputs, options, constants)
        hit = whole_key and whole_graph.cached_runner(whole_key, example_inputs)
        if hit:  # compiled before, to one library: no AOTAutograd, no partitioning
            whole_graph.HITS[0] += 1
            return hit

    outs = gm.graph.output_node().args[0]
    built, graph_outputs = [], len(outs) if isinstance(outs, (tuple, list)) else 1
    updates = []  # inference graphs: the inputs the graph updates in place (AOTAutograd's copy_ nodes)

    def forward(agm, _fake_inputs):
        updates.extend(n for n in agm.graph.nodes if n.op == "call_function" and
                       n.target is torch.ops.aten.copy_.default)
        n_args = sum(1 for n in agm.graph.nodes if n.op == "placeholder")
        # the forward's arguments are dynamo's, in order (else nothing is compiled in: the buffers stay inputs)
        built.append(_Specializing(agm, name, options, whole_key, graph_outputs, training=training,
                                   constants=constants if n_args == len(example_inputs) else None,
                                   fallback=fallback, max_size=max_size))
        return built[-1]

    def backward(agm, _fake_inputs):
        # the joint graph's backward half: the same partitioning, per-node fallback and per-shape builds
        graph = _Specializing(agm, name + "_backward", options, training=True, boxed=True, fallback=fallback)

        def run(args):
            return graph.call_boxed(args)
        run._boxed_call = True
        return run

    # inference: an input updated in place (an optimizer's parameters and state) stays a copy_ in the graph, which
    # ckc writes into the input's buffer (graph.json "into"), instead of a new tensor AOTAutograd copies back
    compiled = aot_module_simplified(gm, example_inputs, fw_compiler=forward, bw_compiler=backward,
                                     decompositions=table, keep_inference_input_mutations=not training,
                                     partition_fn=rewrites.partition_joint)
    # a symbolic graph's size arguments, as the values of this call (dynamo's hints)
    hints = [a.node.hint if isinstance(a, torch.SymInt) else a for a in example_inputs]
    sizes = any(isinstance(a, torch.SymInt) for a in example_inputs)
    if (whole_key or (sizes and not training and all(h is not None for h in hints))) and not updates:
        # (a build-ahead run would apply the update once too often)
        # dynamo hands over real example inputs: build now, and when the graph became one library, return the
        # library itself, without AOTAutograd's runtime wrapper around it (its per-call cost is that of the
        # kernels on small inputs)
        # (on copies of the inputs other than parameters: a module may update an input in place)
        with torch.no_grad():
            compiled(*[t.clone() if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) else t
                       for t in hints])
        plan = built and built[-1].plan
        if plan:
            return whole_graph.runner_of(plan, example_inputs)
        direct = built and built[-1].dynamic and built[-1].dynamic.direct(graph_outputs, len(example_inputs))
        if direct:  # a symbolic graph that is one library: called on dynamo's arguments, nothing in between
            return direct
    return compiled


def explain(model, example_inputs, backward=False, options=None):
    """Compiles `model` with the gcu backend, runs it once on `example_inputs`, and returns the Reports of every
    graph dynamo handed over: per node, whether it was compiled (and in which partition) or ran eagerly, and
    why. backward=True also runs the backward of the outputs' sum (the graphs named *_backward), leaving the
    parameters' .grad as they were. options: the backend's (gcu())."""
    import torch
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    with collecting() as reports:
        torch._dynamo.reset()
        out = torch.compile(model, backend=gcu, options=options)(*example_inputs)
        if backward:
            outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                    if isinstance(o, torch.Tensor) and o.requires_grad]
            if not outs:
                raise ValueError("explain(backward=True): no output of the model requires grad")
            params = [p for p in model.parameters()] if isinstance(model, torch.nn.Module) else []
            saved = [p.grad for p in params]
            sum(o.float().sum() for o in outs).backward()
            for p, g in zip(params, saved):
                p.grad = g
    return reports
