"""FX rewrites the backend makes before partitioning, each for a cost eager PyTorch would not pay or a
decomposition that would hide what ckc runs whole: attention kept as one op (ckc::sdpa), LayerNorm's statistics
for a training forward, the tied embedding's gradient scattered in place, returned views kept views, and the
joint graph's partition that recomputes pointwise chains in the backward instead of saving them."""
import importlib

from .support import LAYOUT_ONLY

ex = importlib.import_module("ckc.export")


def product_permuted(n):
    """When node n ends a chain of transposes / permutes (each read only by the next) of an mm / bmm result that
    nothing else reads: (the chain's nodes, their composed permutation); else None. A weight gradient comes
    as such a chain: dW^T transposed once (the chain swaps the last two dims), or twice (it undoes itself)."""
    import torch
    perm, chain = None, []
    while True:
        src = n.args[0] if n.args else None
        if not isinstance(src, torch.fx.Node) or not isinstance(src.meta.get("val"), torch.Tensor):
            return None
        name, rank = ex._target_name(n), src.meta["val"].dim()
        if name == "aten.t" and rank == 2:
            step = [1, 0]
        elif name == "aten.permute":
            step = [d % rank for d in n.args[1]]
        elif name == "aten.transpose":
            step = list(range(rank))
            a, b = n.args[1] % rank, n.args[2] % rank
            step[a], step[b] = step[b], step[a]
        else:
            return None
        perm = step if perm is None else [step[p] for p in perm]
        chain.append(n)
        if len(src.users) != 1:
            return None
        if ex._target_name(src) in ("aten.mm", "aten.bmm"):
            return chain, perm
        n = src


# ops whose result is a view of their first argument and nothing else
PURE_VIEWS = {"aten.view", "aten._unsafe_view", "aten.permute", "aten.t", "aten.transpose", "aten.unsqueeze",
               "aten.squeeze", "aten.alias", "aten.detach"}


def scatter_add_in_place(gm):
    """A + index_put(zeros, indices, values, accumulate=True) becomes A.index_put_(indices, values,
    accumulate=True) where nothing else reads A's memory: the gradient of an embedding tied to the LM head
    (the embedding backward's scatter-add into zeros, plus the head's dW). Saves a zero fill and an add the
    size of the vocabulary matrix, and their fresh memory, every step; the sums differ from eager's only in
    order ((A + v1) + v2 for A + (v1 + v2))."""
    import torch
    aten = torch.ops.aten
    changed = False
    for add in list(gm.graph.nodes):
        if add.op != "call_function" or add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs:
            continue
        for k in (0, 1):
            base, scatter = add.args[k], add.args[1 - k]
            if not (isinstance(base, torch.fx.Node) and isinstance(scatter, torch.fx.Node)):
                continue
            if scatter.target is not aten.index_put.default or len(scatter.users) != 1 or scatter.kwargs:
                continue
            zeros = scatter.args[0]
            if len(scatter.args) != 4 or scatter.args[3] is not True or zeros.target is not aten.full.default \
                    or zeros.args[1] != 0 or len(zeros.users) != 1:
                continue
            vals = [n.meta.get("val") for n in (zeros, base, add)]
            root = sole_owner(base)
            if any(v is None for v in vals) or len({(tuple(v.shape), v.dtype) for v in vals}) != 1 or root is None:
                continue
            # base a view of root in root's own layout (dW^T transposed back): write root, return root; a
            # view returned as a gradient would be copied by AccumulateGrad (it keeps only a plain tensor)
            rv = root.meta.get("val")
            target = root if rv is not None and rv.shape == vals[1].shape and rv.stride() == vals[1].stride() \
                else base
            with gm.graph.inserting_before(add):
                in_place = gm.graph.call_function(aten.index_put_.default,
                                                  (target, scatter.args[1], scatter.args[2], True))
            in_place.meta = dict(add.meta)
            add.replace_all_uses_with(in_place)
            dead = [add, scatter, zeros]
            view = base
            while view is not target:  # the views from base down to root, read by nothing now
                dead.append(view)
                view = view.args[0]
            for n in dead:
                gm.graph.erase_node(n)
            changed = True
            break
    if changed:
        gm.recompile()


def sole_owner(node):
    """The node computing node's memory (fresh, in the graph) when node reaches it through pure views, each
    value read once; else None."""
    while len(node.users) == 1 and node.op == "call_function":
        if ex._target_name(node) not in PURE_VIEWS:  # (other layout ops may alias: contiguous, expand)
            return None if ex._target_name(node) in LAYOUT_ONLY else node
        node = node.args[0]
    return None


def split_returned_views(gm):
    """Training graphs return views: the forward saves a parameter's transpose for the backward, the backward
    returns weight gradients transposed back. torch makes a view for free; returned from a compiled partition
    it would be a copy (memory the size of the weights, and the copying). Each such view becomes a node that
    only the graph's output reads, run eagerly; compute users keep the original. Except for weight gradients
    (product_permuted): dW^T transposed once stays compiled (ckc computes it in the returned layout: a view of
    another layout would make AccumulateGrad copy it every step), transposed twice runs eagerly as a whole.
    Returns the names of the nodes left eager."""
    out = gm.graph.output_node()
    eager = set()
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or ex._target_name(n) not in LAYOUT_ONLY or out not in n.users:
            continue
        chain = product_permuted(n) if len(n.users) == 1 else None
        if chain:
            nodes, perm = chain
            rank = len(perm)
            if perm == list(range(rank - 2)) + [rank - 1, rank - 2]:
                continue  # compiled: ckc writes the product in the transposed layout (absorb_blas), no copy
            if perm == list(range(rank)):  # undoes itself: all eager, torch's views of the product are free
                eager.update(c.name for c in nodes)
                continue
        if len(n.users) > 1:
            with gm.graph.inserting_after(n):
                view = gm.graph.call_function(n.target, n.args, n.kwargs)
            view.meta = dict(n.meta)
            out.replace_input_with(n, view)
            eager.add(view.name)
        else:
            eager.add(n.name)
    if eager:
        gm.recompile()
    return eager


_sdpa = None


def sdpa_op():
    """ckc::sdpa: scaled_dot_product_attention as a custom op, which AOTAutograd keeps whole (it decomposes
    the ATen one into matmuls, softmax and a guard for fully masked rows that would hide the attention)."""
    global _sdpa
    if _sdpa is None:
        from typing import Optional

        import torch
        from torch import Tensor

        @torch.library.custom_op("ckc::sdpa", mutates_args=())
        def sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: Optional[float] = None) -> Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
                                                                    scale=scale)

        @sdpa.register_fake
        def _(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
            return q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))

        _sdpa = torch.ops.ckc.sdpa.default
    return _sdpa


def keep_attention_whole(gm):
    """Inference graphs: every scaled_dot_product_attention call becomes ckc::sdpa (training keeps the ATen op,
    whose backward PyTorch knows)."""
    import torch
    targets = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)
    changed = False
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in targets and not n.kwargs.get("enable_gqa", False):
            n.target = sdpa_op()
            n.kwargs = {k: v for k, v in n.kwargs.items() if k != "enable_gqa"}
            changed = True
    if changed:
        gm.recompile()


def layer_norm_with_stats(x, normalized_shape, weight, bias, eps):
    """aten.native_layer_norm in ops ckc compiles (mean, sub, mul, rsqrt): (out, mean, rstd) as ATen returns
    them, the statistics with the normalized dims kept as 1s."""
    import torch
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    rstd = torch.rsqrt((centred * centred).mean(dims, keepdim=True) + eps)
    out = centred * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def partition_joint(joint, joint_inputs, **kwargs):
    """AOTAutograd's default partition of the joint graph into forward and backward, with the forward's
    pointwise chains that hang off one tensor recomputed in the backward instead of saved: the backward saves
    that tensor and computes the chain again inside its fused elementwise programs (fuse_elementwise). GPT-2's
    tanh GELU, written out, saves its input instead of five tensors the size of the MLP's hidden layer: 12 MiB
    per layer less to write, keep and read again at 256 tokens, for ~10 flops per element recomputed.
    A pointwise node qualifies when the tensors it reads come, through qualifying nodes only, from a single
    tensor (constants and scalars aside): a residual add, which reads two, stays saved, as it would cost two
    saved tensors to recompute. Only floating-point results computed from a value of the graph (not straight from
    an input: masks made from a buffer are folded into the forward, they would be run-time work in the
    backward), and never random ops."""
    import torch
    from torch._functorch.partitioners import default_partition
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    views = {aten.alias.default, aten.view.default, aten._unsafe_view.default, aten.permute.default,
             aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim, aten.t.default, aten.transpose.int}
    root = {}       # node -> the one tensor a qualifying node is computed from (a node that does not: itself)
    backward = set()  # nodes that read a tangent (the backward half; left alone)
    for n in joint.graph.nodes:
        ins = n.all_input_nodes
        if n.op == "placeholder":
            if n.name.startswith("tangents"):  # (AOTAutograd's name for the outputs' gradients)
                backward.add(n)
            root[n] = n
            continue
        if any(a in backward for a in ins):
            backward.add(n)
            root[n] = n
            continue
        tags = getattr(n.target, "tags", ()) if n.op == "call_function" else ()
        val = n.meta.get("val")
        tensors = [a for a in ins if isinstance(a.meta.get("val"), torch.Tensor)]
        roots = {root[a] for a in tensors if a.op != "get_attr"}
        pointwise = (torch.Tag.pointwise in tags and torch.Tag.nondeterministic_seeded not in tags
                     and isinstance(val, torch.Tensor) and val.dtype.is_floating_point)
        # a view of a recomputed value (autograd's alias of tanh's result, say) is recomputed with it
        view = n.op == "call_function" and n.target in views and len(tensors) == 1 and root[tensors[0]] is not tensors[0]
        if (pointwise or view) and len(roots) == 1 and next(iter(roots)).op != "placeholder":
            root[n] = roots.pop()
            n.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
        else:
            root[n] = n
    return default_partition(joint, joint_inputs, **kwargs)
