"""A static graph for one call: the ATen graph with its SymInt / scalar computations replaced by their values
for the arguments at hand, chosen inputs compiled in as constants, and permuted inputs read in their memory
order. ckc plans memory for static shapes; the backend builds one such graph per argument signature."""
import copy
import importlib

ex = importlib.import_module("ckc.export")


def record_shapes(gm, args, keep):
    """ex.run_recording of the values keep() accepts, with the tensor arguments on the meta device when every op
    allows (what depends on constants only is still real), else for real (a scalar read from a tensor's values)."""
    import torch
    values = ex.run_recording_meta(gm, args, [isinstance(a, torch.Tensor) for a in args], keep=keep)
    return values if values is not None else ex.run_recording(gm, args, keep=keep)


def specialize(agm, args, constants=None):
    """A copy of the ATen graph with every SymInt / scalar placeholder and size computation replaced by its
    value for these arguments, and the placeholders at the indices of `constants` by those values (graph
    constants): a static graph. Returns (graph module, indices of the arguments it still takes, record, perms):
    record(names) runs it eagerly on these arguments and returns {name: value} of those nodes only (holding
    every value of a backward graph at once would cost more than its training step); perms says which
    arguments the graph takes permuted (read_in_place, feed)."""
    import torch
    import torch.fx
    gm = torch.fx.GraphModule(agm, copy.deepcopy(agm.graph))
    constants = constants or {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in constants.items():
        attr = f"_ckc_constant_{i}"
        gm.register_buffer(attr, value)
        with gm.graph.inserting_before(placeholders[i]):
            const = gm.graph.get_attr(attr)
        const.meta = dict(placeholders[i].meta)
        placeholders[i].replace_all_uses_with(const)
        gm.graph.erase_node(placeholders[i])
    if constants:
        gm.recompile()
    live = [i for i in range(len(args)) if i not in constants]

    def is_scalar(_n, v):
        return isinstance(v, (int, float, bool)) and not isinstance(v, torch.Tensor)
    values = record_shapes(gm, [args[i] for i in live], is_scalar)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    scalar = {n: values[n] for n in gm.graph.nodes
              if n.op in ("placeholder", "call_function") and isinstance(values.get(n), (int, float, bool))
              and not isinstance(values.get(n), torch.Tensor)}
    if scalar:
        def sub(a):
            return scalar[a] if isinstance(a, torch.fx.Node) and a in scalar else a
        for n in gm.graph.nodes:
            if n not in scalar:
                n.args = torch.fx.node.map_aggregate(n.args, sub)
                n.kwargs = torch.fx.node.map_aggregate(n.kwargs, sub)
        for n in reversed(list(gm.graph.nodes)):
            if n in scalar and not n.users:
                gm.graph.erase_node(n)
        gm.recompile()
    keep = [live[j] for j, p in enumerate(placeholders) if p not in scalar]
    kept_args = [args[i] for i in keep]
    perms = read_in_place(gm, kept_args)

    def record(names):
        """{name: value} of the nodes named: on the meta device when every op allows (an optimizer step's
        values are the model's size several times over; what depends on constants only is real), else real."""
        values = record_shapes(gm, kept_args, lambda n, _v: n.name in names)
        return {n.name: v for n, v in values.items()}
    return gm, keep, record, perms


def layout_perm(t):
    """For a tensor that is a permutation of a contiguous one (a weight's transpose a training forward saves
    for its backward), the permutation making it contiguous; else None."""
    import torch
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.is_contiguous():
        return None
    perm = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return perm if t.permute(perm).is_contiguous() else None


def read_in_place(gm, args):
    """Arguments laid out as a permutation of a contiguous tensor (layout_perm) are taken in their memory
    order, and the graph permutes them back: a compiled partition reads them in place (a GEMM absorbs the
    transpose into its flags) instead of a contiguous copy per call. Rewrites gm and args (in place); returns
    {position among the arguments: permutation} for feed."""
    import torch
    perms = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for j, (p, a) in enumerate(zip(placeholders, args)):
        perm = layout_perm(a)
        if perm is None:
            continue
        inverse = [perm.index(d) for d in range(len(perm))]
        with gm.graph.inserting_after(p):
            back = gm.graph.call_function(torch.ops.aten.permute.default, (p, inverse))
        p.replace_all_uses_with(back, delete_user_cb=lambda u, back=back: u is not back)
        back.meta = dict(p.meta)
        compose_permutes(gm, back, p, inverse)
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            p.meta = dict(p.meta, val=val.permute(perm))
        args[j] = a.permute(perm)
        perms[j] = perm
    if perms:
        gm.recompile()
    return perms


def compose_permutes(gm, back, src, inverse):
    """Users of back (= permute(src, inverse)) that permute it again read src, permuted once (or not at all): the
    saved transpose of a weight, transposed back by the backward's dX = dY @ W, is the weight itself."""
    import torch
    aten = torch.ops.aten
    for u in list(back.users):
        if u.op != "call_function" or u.args[0] is not back:
            continue
        rank = len(inverse)
        if u.target is aten.permute.default:
            q = [d % rank for d in u.args[1]]
        elif u.target is aten.t.default and rank == 2:
            q = [1, 0]
        elif u.target is aten.transpose.int:
            q = list(range(rank))
            a, b = u.args[1] % rank, u.args[2] % rank
            q[a], q[b] = q[b], q[a]
        else:
            continue
        combined = [inverse[q[i]] for i in range(rank)]
        if combined == list(range(rank)):
            u.replace_all_uses_with(src)
            gm.graph.erase_node(u)
        else:
            u.target, u.args, u.kwargs = aten.permute.default, (src, combined), {}


def feed(args, keep, perms):
    """The arguments a specialized graph takes (specialize: those at `keep`, permuted as read_in_place said)."""
    if not perms:
        return [args[i] for i in keep]
    return [args[i].permute(perms[j]) if j in perms else args[i] for j, i in enumerate(keep)]
