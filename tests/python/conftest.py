"""Shared fixtures: compile a config with ckc, build it with the documented cc
line, write deterministic random weights, load the library; export and compile
PyTorch modules. (Parity with transformers: test_hf_parity.py.)

Run with the project's Python (scripts/install_deps.sh makes it):
    scripts/py -m pytest tests/python
"""
import contextlib
import functools
import hashlib
import json
import os

import numpy as np
import pytest

import ckc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# one object cache for the runtime sources (ckc.build.runtime_objects) whatever CKC_CACHE_DIR a test sets
os.environ.setdefault("CKC_OBJECT_CACHE_DIR", ckc.build.object_cache_dir())

TINY = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 172,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


@functools.lru_cache(maxsize=None)
def registry():
    """What this ckc supports, read from its own tables (`ckc list --json`): families (with their GGUF
    architecture), weight formats, IR ops, passes. Tests that cover "every family / format / op" iterate these, so
    a new row is tested by being added."""
    return json.loads(ckc.build.run([ckc.ckc_binary(), "list", "--json"]).stdout)


def mixture_of_experts(config):
    """Whether a config (a dict, or a model_type with models/tiny-<type>/config.json) is a mixture of experts:
    those have no gcu kernels yet (test_a_mixture_of_experts_is_refused_on_gcu)."""
    if isinstance(config, str):
        config = json.load(open(os.path.join(ROOT, "models", f"tiny-{config}", "config.json")))
    return any(k in config for k in ("num_experts", "num_local_experts"))


def formats(*, floats=True):
    """The names of the stored weight formats (registry), f32 included unless floats=False drops f32."""
    return [f["name"] for f in registry()["formats"] if floats or f["name"] != "f32"]


def gguf_writes(qtype):
    """Whether the gguf package quantizes this GGML type itself (ckc's bytes can then be compared with its)."""
    import numpy
    from gguf import quants
    from gguf.constants import GGML_QUANT_SIZES
    try:
        quants.quantize(numpy.zeros((1, GGML_QUANT_SIZES[qtype][0]), numpy.float32), qtype)
        return True
    except NotImplementedError:
        return False


def tiny(**overrides):
    c = dict(TINY)
    c.update(overrides)
    return c


@contextlib.contextmanager
def float_prefill(model):
    """Prefill over quantized weights as a CPU without AVX2 runs it (or an ARM one): float activations times
    dequantized tiles, i.e. exactly the float32 model of the dequantized weights (on x86 with AVX2 the default is
    the int8 GEMM: 8-bit activations, as decode and llama.cpp). The switch is the library's own
    (ck_cpu_force_portable: the portable kernels), so it holds for every model of that library until the block
    ends."""
    model.lib.ck_cpu_force_portable(1)
    try:
        yield model
    finally:
        model.lib.ck_cpu_force_portable(0)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    # one folder per pytest process: ctest runs the test files in parallel
    return str(tmp_path_factory.mktemp("ckc"))


class Built:
    """A compiled model: its folder, config, library and weights."""

    def __init__(self, folder, config, so, weights):
        self.folder, self.config, self.so, self.weights = folder, config, so, weights

    def model(self, weights=None, threads=None):
        return ckc.LlmModel(self.so, weights or self.weights, threads=threads)


@pytest.fixture(scope="session")
def build(workdir):
    """build(config_dict, args=(), seed=0, std=0.15) -> Built, cached per session. std 0.15 keeps random
    models far from degenerate (greedy generation varies), so parity checks mean something."""
    cache = {}

    def _build(config, args=(), seed=0, std=0.15, dtype="f32"):
        key = hashlib.sha1(json.dumps([config, list(args), seed, std, dtype], sort_keys=True).encode()).hexdigest()[:12]
        if key in cache:
            return cache[key]
        folder = os.path.join(workdir, "m-" + key)
        os.makedirs(folder, exist_ok=True)
        cfg_path = os.path.join(folder, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(config, f, indent=1)
        c_path = ckc.compile_model(cfg_path, folder, args=args)
        so = ckc.build_library(c_path)
        weights = os.path.join(folder, "weights")
        ckc.build.run([ckc.ckc_binary(), "random-weights", cfg_path, "-o", weights, "--seed", str(seed),
                       "--std", str(std), "--dtype", dtype])
        cache[key] = Built(folder, config, so, weights)
        return cache[key]

    return _build


class Compiled:
    """An exported + compiled graph: its graph.json, C file, library; `model()` loads it."""

    def __init__(self, graph, c_path, so, args):
        self.graph, self.c_path, self.so, self.args = graph, c_path, so, list(args)

    def model(self, threads=None):
        return ckc.GraphModel(self.so, threads=threads)

    def inspect(self, *args):
        out = ckc.build.run([ckc.ckc_binary(), "inspect", self.graph, "--json", *self.args, *args]).stdout
        return json.loads(out)


@pytest.fixture(scope="session")
def compile_graph(workdir):
    """compile_graph(name, module, inputs, args=()) -> Compiled: ckc.export -> ckc compile -> cc."""
    def _compile(name, module, inputs, args=()):
        folder = os.path.join(workdir, "g-" + name)
        graph = ckc.export(module, inputs, os.path.join(folder, "export"))
        c_path = ckc.compile_model(graph, folder, args=args)
        # every graph the tests compile must be type-correct C: a call passing a uint8_t * where a float * is
        # expected (a bool tensor copied as floats) is an error here, not a warning
        return Compiled(graph, c_path, ckc.build_library(c_path, extra_flags=["-Werror=incompatible-pointer-types"]),
                        args)
    return _compile


def op_counts(inspected, programs=False):
    """{op: count} over all sections of `ckc inspect --json` output; programs=True also counts the ops inside
    fused elementwise programs (EW nodes' attr program, "mul(i0, i1); tanh(v0)": MUL and TANH)."""
    counts = {}
    for sec in ("header", "block", "footer"):
        for n in inspected[sec]["nodes"]:
            ops = [n["op"]]
            if programs and n["op"] == "EW":
                ops += [ins.split("(")[0].strip().upper() for ins in n["attrs"]["program"].split(";")]
            for op in ops:
                counts[op] = counts.get(op, 0) + 1
    return counts


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def prompt(n, vocab, seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def pytest_collection_modifyitems(config, items):
    """The files with a test marked slow run first: pytest-xdist (--dist loadfile) hands files out in this order,
    so the longest ones (the pip install into a fresh venv: ~2 min) overlap the rest instead of running alone at
    the end. CKC_SKIP_SLOW=1 skips the tests marked slow (CI runs them all)."""
    slow_files = {item.path for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order within each group stays
    if os.environ.get("CKC_SKIP_SLOW"):
        skip = pytest.mark.skip(reason="CKC_SKIP_SLOW is set")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


def pytest_report_header(config):
    """The CPU and the llama.cpp reference build, on the first lines of every run: a result holds for a machine."""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mark = os.path.join(ROOT, ".venv", "ckc-llama-cpp-config")
    ref = open(mark).read().strip() if os.path.exists(mark) else "not installed"
    return [f"cpu: {cpu}, {os.cpu_count()} cores", f"llama.cpp reference: {ref} (scripts/llama_cpp.sh --print)"]
