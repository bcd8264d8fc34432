"""The on-disk cache of compiled graphs.

    $CKC_CACHE_DIR (default $XDG_CACHE_HOME/ckc, else ~/.cache/ckc) / graphs / <key> /
        graph.json, weights.safetensors     what ckc compiles (the ATen graph as ckc ops, its constants)
        model.c, model.c.kernels            the generated C
        model.weights.safetensors, libmodel.so
        manifest.json                       the key and the sha256 of every file above

The key is a sha256 over the graph document (ops, shapes, dtypes, attributes), the constants' bytes, the
compile options, the ckc compiler binary and the runtime sources the library is built from, so a new ckc
never reuses an old build. An entry is built in a temporary folder beside it and renamed into place:
concurrent processes compiling the same graph each build, one rename wins, the others use the winner's
entry. An entry whose files do not match its manifest (a truncated library, an edited file) is rebuilt.
"""
import hashlib
import json
import os
import shutil
import tempfile
import warnings

from .. import build
from ..build import cache_dir
from ..export import write_graph

_FILES = ("graph.json", "weights.safetensors", "model.c", "model.c.kernels", "libmodel.so")  # always there
_OPTIONAL = ("model.weights.safetensors",)  # when the graph has constants
_toolchain_digest = None


def cache_clear():
    """Deletes every cached graph (cache_dir()/graphs and the whole-graph records in cache_dir()/whole)."""
    for sub in ("graphs", "whole"):
        shutil.rmtree(os.path.join(cache_dir(), sub), ignore_errors=True)


def _sha256_file(path, h=None):
    h = h or hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h


def _toolchain():
    """A digest of what turns a graph into a library: the ckc binary and the runtime/ and templates/ files."""
    global _toolchain_digest
    if _toolchain_digest is None:
        h = _sha256_file(build.ckc_binary())
        home = os.path.dirname(build.include_dir())  # runtime/
        for top in (home, os.path.join(os.path.dirname(home), "templates")):
            for root, dirs, files in os.walk(top):
                dirs.sort()
                for f in sorted(files):
                    h.update(os.path.relpath(os.path.join(root, f), top).encode())
                    _sha256_file(os.path.join(root, f), h)
        _toolchain_digest = h.hexdigest()
    return _toolchain_digest


TARGETS = ("cpu", "gcu")


def compile_args(options, default_target):
    """The `ckc compile` arguments of a backend or AOT `options`: a dict {"target": "cpu" | "gcu", "args": [...]}
    (torch.compile(model, backend="gcu", options={...}) hands its dict over), or a sequence of ckc compile
    arguments. A missing --target is `default_target`."""
    if options is None:
        options = ()
    if isinstance(options, dict):
        unknown = sorted(set(options) - {"target", "args", "fallback", "max_size", "huge_pages"})
        if unknown:
            raise ValueError(f"ckc: unknown option(s) {', '.join(map(repr, unknown))}; the options are 'target' "
                             f"({' or '.join(TARGETS)}), 'args' (more `ckc compile` arguments), 'fallback' "
                             f"({' or '.join(map(repr, FALLBACKS))}: what runs the ops ckc does not), 'max_size' "
                             "(the bound of every symbolic size) and 'huge_pages' (False: leave the parameters on "
                             "the pages PyTorch gave them)")
        args = [str(a) for a in options.get("args", ())]
        target = options.get("target")
        if target is not None:
            if "--target" in args:
                raise ValueError("ckc: both options['target'] and --target in options['args']")
            args += ["--target", str(target)]
    else:
        args = [str(a) for a in options]
    if "--target" not in args:
        args += ["--target", default_target]
    i = args.index("--target")
    if i + 1 >= len(args) or args[i + 1] not in TARGETS:
        got = args[i + 1] if i + 1 < len(args) else "nothing"
        raise ValueError(f"ckc: target {got!r}; ckc compiles for {' or '.join(map(repr, TARGETS))}")
    return tuple(args)


FALLBACKS = ("eager", "inductor")


def fallback_of(options):
    """What runs the nodes ckc does not compile: options={"fallback": "eager"} (the default: PyTorch, op by op) or
    "inductor" (each group of them compiled by TorchInductor)."""
    value = options.get("fallback", "eager") if isinstance(options, dict) else "eager"
    if value not in FALLBACKS:
        raise ValueError(f"ckc: fallback {value!r}; the ops ckc does not compile run by {' or '.join(map(repr, FALLBACKS))}")
    return value


def max_size_of(options):
    """options={"max_size": N}: the bound the backend compiles every symbolic size of a dynamic graph for (None:
    its own choice, conductor/symbolic.py)."""
    value = options.get("max_size") if isinstance(options, dict) else None
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"ckc: max_size {value!r}; a positive integer (the largest size a symbolic dimension takes)")
    return value


def huge_pages_of(options):
    """options={"huge_pages": False}: leave the parameters on PyTorch's pages (default True: ckc.hugepages)."""
    value = options.get("huge_pages", True) if isinstance(options, dict) else True
    if not isinstance(value, bool):
        raise ValueError(f"ckc: huge_pages {value!r}; True (move the parameters onto huge pages) or False")
    return value


def target_of(args):
    """The target named in compile_args() output."""
    return args[args.index("--target") + 1]


def key_of(doc, const_data, options):
    h = hashlib.sha256()
    h.update(json.dumps(doc, sort_keys=True, allow_nan=True).encode())
    for name in sorted(const_data):
        a = const_data[name]
        h.update(f"{name}:{a.dtype}:{a.shape}".encode())
        h.update(a.tobytes())
    h.update(json.dumps(list(options)).encode())
    h.update(_toolchain().encode())
    return h.hexdigest()[:32]


def _valid(entry):
    try:
        with open(os.path.join(entry, "manifest.json")) as f:
            manifest = json.load(f)
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, dict) or not set(_FILES) <= set(files):
            return False
        # (names are the entry's own files: a name that leaves the folder makes the entry corrupt)
        return all(isinstance(name, str) and os.path.basename(name) == name and isinstance(digest, str) and
                   _sha256_file(os.path.join(entry, name)).hexdigest() == digest for name, digest in files.items())
    except (OSError, ValueError, RecursionError):
        return False


def _build(tmp, doc, const_data, options):
    graph = write_graph(tmp, doc, const_data)
    c_path = build.compile_model(graph, tmp, args=list(options))
    build.build_library(c_path)
    names = list(_FILES) + [f for f in _OPTIONAL if os.path.exists(os.path.join(tmp, f))]
    manifest = {"files": {name: _sha256_file(os.path.join(tmp, name)).hexdigest() for name in names}}
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def remember_whole_graph(key, plan):
    """Records that the dynamo graph with this key (whole_graph.key_of) compiles to one library, run as
    `plan` says; None records nothing."""
    if plan is None:
        return
    root = os.path.join(cache_dir(), "whole")
    os.makedirs(root, exist_ok=True)
    plan = dict(plan, entry=os.path.basename(plan["entry"]))
    fd, tmp = tempfile.mkstemp(prefix=f".{key}-", dir=root)
    with os.fdopen(fd, "w") as f:
        json.dump(plan, f)
    os.replace(tmp, os.path.join(root, key + ".json"))


def recall_whole_graph(key):
    """The plan remember_whole_graph stored for this key, its entry a valid folder; else None."""
    try:
        with open(os.path.join(cache_dir(), "whole", key + ".json")) as f:
            plan = json.load(f)
        if not isinstance(plan, dict) or not isinstance(plan.get("entry"), str) or \
                os.path.basename(plan["entry"]) != plan["entry"]:
            return None
        entry = os.path.join(cache_dir(), "graphs", plan["entry"])
        if not _valid(entry):
            return None
        return dict(plan, entry=entry)
    except (OSError, ValueError, RecursionError):
        return None


def get_or_build(doc, const_data, options=()):
    """The cache entry folder for this graph (its libmodel.so and model.weights.safetensors), building it when
    it is missing or corrupt. Returns (folder, built)."""
    root = os.path.join(cache_dir(), "graphs")
    key = key_of(doc, const_data, options)
    entry = os.path.join(root, key)
    if os.path.isdir(entry):
        if _valid(entry):
            return entry, False
        warnings.warn(f"ckc: the cached graph {entry} is corrupt (its files do not match manifest.json); "
                      "rebuilding it", stacklevel=3)
        shutil.rmtree(entry, ignore_errors=True)
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{key}-", dir=root)
    try:
        _build(tmp, doc, const_data, options)
        try:
            os.rename(tmp, entry)  # atomic; fails when another process got there first
        except OSError:
            if not _valid(entry):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry, True
