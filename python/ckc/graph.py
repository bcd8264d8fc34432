"""ctypes wrapper of a compiled graph (the ck_graph ABI, runtime/include/ck_graph.h).

    g = GraphModel("out/libmodel.so", "out/model.weights.safetensors")
    y = g(x)                     # numpy in, numpy out (a tuple when the module returns several)
    y = g(torch_x)               # torch tensors in, torch tensors out; contiguous CPU inputs are not copied

Inputs are checked against the compiled shapes and dtypes before the call;
a mismatch raises CkError naming the input. A graph exported with dynamic
sizes (ckc.export(..., dynamic_shapes=...)) takes any shape within its
bounds: each call binds the symbols from the inputs' shapes (a size outside
its bounds, or one symbol with two values, raises CkError naming the input,
the dimension and the bound), and the outputs get the shapes that follow.
"""
import ctypes
import os

import numpy as np

from .pool import host_pool
from .llm import CkError, _Handle, as_numpy, is_torch, spin_then_sleep

_DTYPES = {0: np.float32, 1: np.int64, 2: np.int32, 3: np.bool_}

ABI_VERSION = 5  # CK_GRAPH_ABI_VERSION in runtime/include/ck_graph.h: what this wrapper speaks

_SIGNATURES = {
    "ck_graph_abi_version": (ctypes.c_int, []),
    "ck_graph_init": (ctypes.c_void_p, [ctypes.c_char_p]),
    "ck_graph_free": (None, [ctypes.c_void_p]),
    "ck_graph_run": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]),
    "ck_graph_set_threads": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_graph_keep_input": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_graph_input_changed": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_last_error": (ctypes.c_char_p, []),
    "ck_last_error_code": (ctypes.c_int, []),
    "ck_graph_num_inputs": (ctypes.c_int, []),
    "ck_graph_num_outputs": (ctypes.c_int, []),
    "ck_graph_input_name": (ctypes.c_char_p, [ctypes.c_int]),
    "ck_graph_output_name": (ctypes.c_char_p, [ctypes.c_int]),
    "ck_graph_input_dtype": (ctypes.c_int, [ctypes.c_int]),
    "ck_graph_output_dtype": (ctypes.c_int, [ctypes.c_int]),
    "ck_graph_input_rank": (ctypes.c_int, [ctypes.c_int]),
    "ck_graph_output_rank": (ctypes.c_int, [ctypes.c_int]),
    "ck_graph_input_shape": (ctypes.POINTER(ctypes.c_int64), [ctypes.c_int]),
    "ck_graph_output_shape": (ctypes.POINTER(ctypes.c_int64), [ctypes.c_int]),
    "ck_graph_output_into": (ctypes.c_int, [ctypes.c_int]),
    "ck_graph_bind": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))]),
    "ck_graph_bound_output_shape": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]),
    "ck_graph_num_symbols": (ctypes.c_int, []),
    "ck_graph_symbol_name": (ctypes.c_char_p, [ctypes.c_int]),
    "ck_graph_symbol_min": (ctypes.c_int64, [ctypes.c_int]),
    "ck_graph_symbol_max": (ctypes.c_int64, [ctypes.c_int]),
    "ck_graph_symbol_rule": (ctypes.c_char_p, [ctypes.c_int]),
    "ck_graph_input_symbol": (ctypes.c_int, [ctypes.c_int, ctypes.c_int]),
    "ck_graph_input_size_terms": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                                 ctypes.POINTER(ctypes.c_int64)]),
}


class TensorSpec:
    """An input or output: name, numpy dtype, shape (-1 where the size is symbolic) and, for inputs, the
    symbol of each dimension (None where fixed) and its terms (a, b): the size is a * symbol + b ("2*half")."""

    def __init__(self, name, dtype, shape, symbols=None, terms=None):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)
        self.symbols = tuple(symbols) if symbols is not None else (None,) * len(self.shape)
        self.terms = tuple(terms) if terms is not None else ((1, 0),) * len(self.shape)

    def dims(self):
        return [d if s is None else (f"{a}*" if a != 1 else "") + s + (f"{b:+d}" if b else "")
                for d, s, (a, b) in zip(self.shape, self.symbols, self.terms)]

    def __repr__(self):
        return f"{self.name}: {np.dtype(self.dtype).name}{self.dims()}"


def torch_dtypes():
    """numpy dtype -> torch dtype, for the dtypes a compiled graph's inputs and outputs have."""
    import torch
    return {np.float32: torch.float32, np.int64: torch.int64, np.int32: torch.int32, np.bool_: torch.bool}


def _resident_setter(lib, h, kept, in_p, empty_p):
    """resident(i, t): input i of the graph is tensor t, which differs from what kept[i] records (another tensor,
    storage or version, or nothing kept). A Parameter is kept resident on a device library
    (ck_graph_keep_input) and marked changed so that the next run uploads it again; a plain tensor in its place
    forgets the kept one (and marks it changed: the next Parameter is uploaded anew). Sets in_p[i]."""
    import torch
    keep, changed, Parameter = lib.ck_graph_keep_input, lib.ck_graph_input_changed, torch.nn.Parameter

    def resident(i, t):
        ptr = t.data_ptr() or empty_p
        if type(t) is Parameter:
            if kept[i] is None:
                keep(h, i)
            changed(h, i)
            kept[i] = (t, t._version, ptr)  # holds t: its address cannot be another tensor's
        else:
            if kept[i] is not None:
                changed(h, i)
            kept[i] = None
        in_p[i] = ptr
    return resident


class GraphModel(_Handle):
    """A compiled exported graph, callable on numpy arrays."""

    def __init__(self, lib_path, weights_path=None, threads=None):
        spin_then_sleep()
        self.lib = ctypes.CDLL(os.path.abspath(lib_path))
        if not hasattr(self.lib, "ck_graph_abi_version"):
            raise CkError(-5, f"{lib_path}: not a ckc graph library of ABI version {ABI_VERSION} (no "
                              "ck_graph_abi_version; rebuild it with this ckc)")
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = res, args
        if self.lib.ck_graph_abi_version() != ABI_VERSION:
            raise CkError(-5, f"{lib_path}: ck_graph ABI version {self.lib.ck_graph_abi_version()}, this ckc speaks "
                              f"{ABI_VERSION}: rebuild the library with this ckc")
        self._free = self.lib.ck_graph_free
        lib = self.lib
        # the symbolic sizes: name -> (min, max); none for a graph of fixed shapes
        self.symbols = {lib.ck_graph_symbol_name(k).decode(): (lib.ck_graph_symbol_min(k), lib.ck_graph_symbol_max(k))
                        for k in range(lib.ck_graph_num_symbols())}
        self._sym_names = list(self.symbols)
        # the derived ones among them: name -> rule ("seq_p1_div2": "(seq+1)//2"), computed from the others
        self.derived = {n: r for n, r in ((n, lib.ck_graph_symbol_rule(k).decode()) for k, n in enumerate(self._sym_names))
                        if r}
        self._bound_key = self._bound_outputs = None  # the input shapes the handle is bound to (bind_shapes)
        self.inputs = [self._spec(i, "input") for i in range(self.lib.ck_graph_num_inputs())]
        self.outputs = [self._spec(i, "output") for i in range(self.lib.ck_graph_num_outputs())]
        # per output: the input it is written into (graph.json "into": updated in place), else None
        self.into = [j if j >= 0 else None for j in map(self.lib.ck_graph_output_into, range(len(self.outputs)))]
        if weights_path is None:
            d, base = os.path.split(os.path.splitext(lib_path)[0])  # out/libmodel -> out/model.weights.safetensors
            guess = os.path.join(d, (base[3:] if base.startswith("lib") else base) + ".weights.safetensors")
            weights_path = guess if os.path.exists(guess) else None
        self.h = self.lib.ck_graph_init(None if weights_path is None else str(weights_path).encode())
        if not self.h:
            raise CkError(self.lib.ck_last_error_code(), self.lib.ck_last_error().decode())
        if threads:
            self._check(self.lib.ck_graph_set_threads(self.h, threads))

    def _spec(self, i, kind):
        lib = self.lib
        name = getattr(lib, f"ck_graph_{kind}_name")(i).decode()
        dt = _DTYPES[getattr(lib, f"ck_graph_{kind}_dtype")(i)]
        rank = getattr(lib, f"ck_graph_{kind}_rank")(i)
        shape_p = getattr(lib, f"ck_graph_{kind}_shape")(i)
        syms = terms = None
        if kind == "input" and self.symbols:
            syms, terms = [], []
            for d in range(rank):
                a, b = ctypes.c_int64(), ctypes.c_int64()
                k = lib.ck_graph_input_size_terms(i, d, ctypes.byref(a), ctypes.byref(b))
                syms.append(self._sym_names[k] if k >= 0 else None)
                terms.append((a.value, b.value) if k >= 0 else (1, 0))
        return TensorSpec(name, dt, [shape_p[k] for k in range(rank)], syms, terms)

    def bind_shapes(self, shapes):
        """Binds the symbols from the inputs' shapes (checked: fixed sizes as exported, each symbol within its
        bounds and one value wherever it appears); returns the outputs' shapes. A graph without symbols: its
        compiled output shapes, after the same check of the inputs."""
        if not self.symbols:
            for spec, shape in zip(self.inputs, shapes):
                if tuple(shape) != spec.shape:
                    raise CkError(-1, f"input '{spec.name}' must have shape {list(spec.shape)}, got {list(shape)}")
            return [s.shape for s in self.outputs]
        key = tuple(map(tuple, shapes))
        if key == self._bound_key:  # the handle is bound to these already (a loop over one shape pays nothing)
            return self._bound_outputs
        self._bound_key = None
        values = {}
        for spec, shape in zip(self.inputs, shapes):
            shape = tuple(shape)
            if len(shape) != len(spec.shape):
                raise CkError(-1, f"input '{spec.name}' must have {len(spec.shape)} dimensions {spec.dims()}, got "
                                  f"{list(shape)}")
            for d, (v, fixed, sym, (a, b), text) in enumerate(zip(shape, spec.shape, spec.symbols, spec.terms,
                                                                   spec.dims())):
                if sym is None:
                    if v != fixed:
                        raise CkError(-1, f"input '{spec.name}' dimension {d} must be {fixed} (a fixed size; the "
                                          f"dynamic ones are {[n for n in spec.symbols if n]}), got {v}")
                    continue
                lo, hi = self.symbols[sym]
                if (a, b) != (1, 0):  # a * sym + b: the value of sym it gives
                    if v < b or (v - b) % a:
                        raise CkError(-1, f"input '{spec.name}' dimension {d} is {v}, which is not {text} for any "
                                          f"'{sym}' (in [{lo}, {hi}]: {a * lo + b}, {a * (lo + 1) + b}, ..., "
                                          f"{a * hi + b})")
                    v = (v - b) // a
                if not lo <= v <= hi:
                    raise CkError(-1, f"input '{spec.name}' dimension {d} is {shape[d]}: the dynamic size '{sym}' "
                                      f"{'' if text == sym else f'(the size is {text}) '}must be "
                                      f"in [{lo}, {hi}] (the bounds it was exported with)")
                if values.setdefault(sym, (v, spec.name, d))[0] != v:
                    first = values[sym]
                    raise CkError(-1, f"input '{spec.name}' dimension {d} is {shape[d]}, but it is the dynamic size "
                                      f"'{sym}'{'' if text == sym else f' (as {text}: {sym} = {v})'}, which input "
                                      f"'{first[1]}' dimension {first[2]} sets to {first[0]}")
        arrays = [(ctypes.c_int64 * max(1, len(s)))(*s) for s in shapes]
        ptrs = (ctypes.POINTER(ctypes.c_int64) * max(1, len(arrays)))(
            *[ctypes.cast(a, ctypes.POINTER(ctypes.c_int64)) for a in arrays])
        self._check(self.lib.ck_graph_bind(self.h, ptrs))
        out = []
        for j, spec in enumerate(self.outputs):
            dims = (ctypes.c_int64 * max(1, len(spec.shape)))()
            self._check(self.lib.ck_graph_bound_output_shape(self.h, j, dims))
            out.append(tuple(dims[k] for k in range(len(spec.shape))))
        self._bound_key, self._bound_outputs = key, out
        return out

    def _check(self, rc):
        if rc != 0:
            raise CkError(rc, self.lib.ck_last_error().decode())

    def run(self, *inputs, out=None):
        """Runs the graph; returns the list of outputs (fresh arrays, or `out`). An output written into an input
        (self.into) is that input's array, updated in place."""
        if self.h is None:
            raise CkError(-3, "the graph is closed")
        if len(inputs) != len(self.inputs):
            raise CkError(-1, f"the graph takes {len(self.inputs)} inputs ({', '.join(map(repr, self.inputs))}), "
                              f"got {len(inputs)}")
        arrays = self.prepare(*inputs)
        shapes = self.bind_shapes([a.shape for a in arrays])
        outs = out if out is not None else [np.empty(sh, s.dtype) for sh, s in zip(shapes, self.outputs)]
        outs = [o if j is None else arrays[j] for o, j in zip(outs, self.into)]
        for spec, sh, o in zip(self.outputs, shapes, outs):
            if o.shape != sh or o.dtype != spec.dtype or not o.flags.c_contiguous:
                raise CkError(-1, f"output buffer '{spec.name}' must be a contiguous {np.dtype(spec.dtype).name}"
                                  f"{list(sh)}")
        in_p = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        out_p = (ctypes.c_void_p * max(1, len(outs)))(*[o.ctypes.data if j is None else None
                                                          for o, j in zip(outs, self.into)])
        self._check(self.lib.ck_graph_run(self.h, in_p, out_p))
        return outs

    def prepare(self, *inputs):
        """The C-contiguous numpy arrays the graph reads, checked against the compiled inputs. numpy arrays
        and CPU torch tensors of the right dtype and layout are used in place (no copy)."""
        arrays = []
        updated = {j for j in self.into if j is not None}
        for i, (spec, x) in enumerate(zip(self.inputs, inputs)):
            a = as_numpy(x)
            if i in updated and (a.dtype != spec.dtype or not a.flags.c_contiguous or not a.flags.writeable):
                raise CkError(-1, f"input '{spec.name}' is updated in place by the graph: pass a writable contiguous "
                                  f"{np.dtype(spec.dtype).name} array, got {a.dtype}"
                                  f"{'' if a.flags.c_contiguous else ' (not contiguous)'}")
            if a.shape != spec.shape and not self.symbols:  # (symbolic sizes: bind_shapes checks them)
                raise CkError(-1, f"input '{spec.name}' must have shape {list(spec.shape)}, got {list(a.shape)}")
            if a.dtype != spec.dtype:
                if np.can_cast(a.dtype, spec.dtype, casting="same_kind"):
                    a = a.astype(spec.dtype)
                else:
                    raise CkError(-1, f"input '{spec.name}' must be {np.dtype(spec.dtype).name}, got {a.dtype}")
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def bind(self, *inputs):
        """A zero-argument function running the graph on these inputs into fixed output arrays (returned
        as `.outputs`): the per-call cost is one C call, for benchmarks and tight loops."""
        arrays = self.prepare(*inputs)
        shapes = self.bind_shapes([a.shape for a in arrays])  # (stays bound for the calls: one handle, one shape)
        outs = [np.empty(sh, s.dtype) if j is None else arrays[j] for sh, s, j in zip(shapes, self.outputs, self.into)]
        self.run(*arrays, out=outs)  # validates once
        in_p = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        out_p = (ctypes.c_void_p * max(1, len(outs)))(*[o.ctypes.data if j is None else None
                                                          for o, j in zip(outs, self.into)])
        run, h = self.lib.ck_graph_run, self.h
        rebind = None
        if self.symbols:  # another call on this handle may have bound other sizes: bind these again
            dims = [(ctypes.c_int64 * max(1, a.ndim))(*a.shape) for a in arrays]
            shape_p = (ctypes.POINTER(ctypes.c_int64) * max(1, len(dims)))(
                *[ctypes.cast(d, ctypes.POINTER(ctypes.c_int64)) for d in dims])
            rebind = (self.lib.ck_graph_bind, dims, shape_p)

        def call():
            if rebind is not None:
                self._bound_key = None  # (bound here, not through bind_shapes)
                self._check(rebind[0](h, rebind[2]))
            rc = run(h, in_p, out_p)
            if rc != 0:
                self._check(rc)
            return outs
        call.outputs, call.keep = outs, (arrays, in_p, out_p)
        return call

    def torch_runner(self):
        """A function running the graph on torch CPU tensors and returning a list of fresh torch tensors, with
        the per-call work cut to pointers: inputs of the compiled dtype and shape that are contiguous are read in
        place (others are converted first, or refused naming the input). For the torch backend's hot path.

        Parameters (torch.nn.Parameter) are resident: a device library (--target gcu) on a discrete device
        keeps its copy of one and uploads it again only when the call passes another tensor for it, or the same
        tensor after an in-place change (torch's version counter: optimizer steps, `p.add_()` under no_grad). A
        write that bypasses the counter (through `.data` or a NumPy view) is not seen there: use --target cpu
        for such code. An integrated device (the host implementation) reads every input in place, like cpu."""
        import torch
        dtypes = torch_dtypes()
        ins = [(s.name, s.shape, dtypes[s.dtype]) for s in self.inputs]
        outs = [(s.shape, dtypes[s.dtype], s.dtype) for s in self.outputs]
        pool = host_pool()
        new = (lambda shape, dt, npdt: torch.empty(shape, dtype=dt)) if pool is None else pool.empty
        in_p = (ctypes.c_void_p * max(1, len(ins)))()
        out_p = (ctypes.c_void_p * max(1, len(outs)))()
        run, h, check = self.lib.ck_graph_run, self.h, self._check
        empty = ctypes.c_int64(0)  # what an input with no elements points at (torch gives it address 0)
        empty_p = ctypes.addressof(empty)
        kept = [None] * len(ins)  # per input: (the Parameter, its version, its address) of the library's copy
        resident = _resident_setter(self.lib, h, kept, in_p, empty_p)
        into = self.into
        updated = sorted({j for j in into if j is not None})
        bump = torch.autograd.graph.increment_version
        symbolic = bool(self.symbols)
        bind_shapes = self.bind_shapes

        def call(*args):
            if len(args) != len(ins):
                raise CkError(-1, f"the graph takes {len(ins)} inputs, got {len(args)}")
            converted = []
            for i, (t, (name, shape, dt)) in enumerate(zip(args, ins)):
                k = kept[i]
                if k is not None and k[0] is t and k[1] == t._version and k[2] == (t.data_ptr() or empty_p):
                    continue  # the resident Parameter as last time: same storage, unchanged, pointer in place
                if t.dtype is not dt or not t.is_contiguous() or t.device.type != "cpu":
                    if i in updated:
                        raise CkError(-1, f"input '{name}' is updated in place by the graph: pass a contiguous CPU "
                                          f"{dt} tensor, got a {t.dtype} tensor on {t.device}"
                                          f"{'' if t.is_contiguous() else ' (not contiguous)'}")
                    if tuple(t.shape) != shape and not symbolic:
                        raise CkError(-1, f"input '{name}' must have shape {list(shape)}, got {list(t.shape)}")
                    t = t.detach().to(device="cpu", dtype=dt).contiguous()
                    converted.append(t)
                elif t.shape != shape and not symbolic:
                    raise CkError(-1, f"input '{name}' must have shape {list(shape)}, got {list(t.shape)}")
                resident(i, t)
            shapes = bind_shapes([tuple(a.shape) for a in args]) if symbolic else [o[0] for o in outs]
            results = [new(shape, dt, npdt) if j is None else args[j]
                       for shape, (_, dt, npdt), j in zip(shapes, outs, into)]
            for j, o in enumerate(results):
                out_p[j] = None if into[j] is not None else o.data_ptr() or empty_p
            rc = run(h, in_p, out_p)
            if rc != 0:
                check(rc)
            for j in updated:  # written in place: what torch's in-place ops do to the version counter
                bump(args[j])
            return results
        return call

    def guarded_torch_runner(self, n_args, picks, outputs, params=()):
        """The torch backend's whole-graph call (conductor/whole_graph.py), for a graph whose inputs dynamo's
        guards already pin: static shapes and strides, dtype and device, all contiguous CPU tensors of the
        compiled dtypes (the caller checked the example inputs; dynamo re-checks each call before this runs).
        Called on dynamo's n_args arguments, it reads argument picks[i] as input i and returns the tuple of
        the library's outputs `outputs`. Generated as straight-line Python: per call one data_ptr() per input,
        one new tensor per output, one C call (torch_runner's checks and loops cost ~10-25 us per call more).
        Inputs listed in `params` (those that were Parameters) stay resident as in torch_runner: kept, and
        marked changed when another tensor, another storage or a new version comes. No output may be written
        into an input (ValueError)."""
        import torch
        from . import pool as pools
        dtypes = torch_dtypes()
        if any(j is not None for j in self.into):
            raise ValueError("guarded_torch_runner: the graph writes an output into an input")
        pool = host_pool()
        h = self.h
        in_p = (ctypes.c_void_p * max(1, len(self.inputs)))()
        empty = ctypes.c_int64(0)  # what an input or output with no elements points at (torch gives it address 0)
        empty_p = ctypes.addressof(empty)
        kept = [None] * len(self.inputs)  # per resident input: the Parameter, its version, its pointer
        resident = _resident_setter(self.lib, h, kept, in_p, empty_p)
        env = {"run": self.lib.ck_graph_run, "h": h, "check": self._check, "torch": torch, "in_p": in_p,
               "out_p": (ctypes.c_void_p * max(1, len(self.outputs)))(), "empty_p": empty_p, "kept": kept,
               "resident": resident, "new": pool.empty if pool is not None else None}
        lines = [f"def compiled({', '.join(f'a{i}' for i in range(n_args))}{',' if n_args == 1 else ''}):"]
        for i, (k, spec) in enumerate(zip(picks, self.inputs)):
            if i in params:
                lines += [f"    k = kept[{i}]",
                          f"    if k is None or k[0] is not a{k} or k[1] != a{k}._version or k[2] != (a{k}.data_ptr() or empty_p):",
                          f"        resident({i}, a{k})"]
            else:
                lines.append(f"    in_p[{i}] = a{k}.data_ptr()" if int(np.prod(spec.shape)) else f"    in_p[{i}] = empty_p")
        for j, spec in enumerate(self.outputs):
            env[f"s{j}"], env[f"d{j}"], env[f"n{j}"] = tuple(spec.shape), dtypes[spec.dtype], spec.dtype
            nbytes = int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize
            make = (f"new(s{j}, d{j}, n{j})" if pool is not None and nbytes >= max(pools.DIRECT, pools.SMALL)
                    else f"torch.empty(s{j}, dtype=d{j})")
            lines.append(f"    o{j} = {make}")
            lines.append(f"    out_p[{j}] = o{j}.data_ptr()" if nbytes else f"    out_p[{j}] = empty_p")
        lines += ["    rc = run(h, in_p, out_p)", "    if rc != 0:", "        check(rc)",
                  f"    return ({''.join(f'o{j}, ' for j in outputs)})"]
        exec(compile("\n".join(lines), f"<ckc whole-graph runner of {os.path.basename(self.lib._name)}>", "exec"), env)
        fn = env["compiled"]
        fn.keep = (env, empty)  # the pointer arrays and the empty placeholder live as long as the function
        return fn

    def __call__(self, *inputs):
        """numpy in, numpy out; torch tensors in, torch tensors out (sharing the result arrays)."""
        outs = self.run(*inputs)
        if any(is_torch(x) for x in inputs):
            import torch
            outs = [torch.from_numpy(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)
