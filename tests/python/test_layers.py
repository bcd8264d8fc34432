"""The house's layers, checked: the compiler's includes run one way, and no two runtime units call each other.

    compiler:  support <- ir <- {frontend, passes, planner} <- codegen <- tools <- main.cpp
    runtime:   the units of each library (runtime/io, runtime/text, runtime/kernels) call each other without a
               circle (read from the symbols of the built objects: what a unit defines and what it needs)
    python:    the modules of the ckc package import each other at load time without a circle (conductor/jit.py
               -> its stages -> cache, report)

CMake builds one library per compiler layer and links each only to the layers below it; this test is what
fails when a wrong-way include comes back (an include path reaches every header, so the compiler would not).
"""
import ast
import collections
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILER = os.path.join(ROOT, "compiler")

# layer -> the layers it may include (itself always)
ALLOWED = {
    "support": set(),
    "ir": {"support"},
    "frontend": {"ir", "support"},
    "passes": {"ir", "support"},
    "planner": {"ir", "support"},
    "codegen": {"planner", "ir", "support"},
    "tools": {"frontend", "ir", "support"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def compiler_includes():
    """[(file, its layer, the layer it includes)] for every quoted include of a compiler layer."""
    out = []
    for layer in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(COMPILER, layer)):
            for f in files:
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    for target in INCLUDE.findall(fh.read()):
                        if target in ALLOWED:
                            out.append((os.path.relpath(path, ROOT), layer, target))
    return out


def test_every_compiler_folder_is_a_layer():
    folders = {d for d in os.listdir(COMPILER) if os.path.isdir(os.path.join(COMPILER, d))}
    assert folders == set(ALLOWED), "a new compiler folder needs its place in ALLOWED (and a CMake layer)"


def test_compiler_includes_run_one_way():
    wrong = [f"{f} ({layer}) includes {target}/" for f, layer, target in compiler_includes()
             if target != layer and target not in ALLOWED[layer]]
    assert not wrong, "wrong-way includes:\n" + "\n".join(wrong)


def test_the_check_sees_a_wrong_way_include(tmp_path, monkeypatch):
    """The check is not vacuous: a pass including the planner is caught."""
    fake = tmp_path / "compiler"
    for layer in ALLOWED:
        (fake / layer).mkdir(parents=True)
    (fake / "passes" / "x.cpp").write_text('#include "planner/planner.h"\n#include "ir/graph.h"\n')
    monkeypatch.setattr(sys.modules[__name__], "COMPILER", str(fake))
    found = [(layer, target) for _f, layer, target in compiler_includes()]
    assert ("passes", "planner") in found and ("passes", "ir") in found


def test_codegen_reads_no_code_it_printed():
    """Targets render structured kernel calls (codegen/kernel_call.h): nothing in codegen parses generated C."""
    for f in os.listdir(os.path.join(COMPILER, "codegen")):
        with open(os.path.join(COMPILER, "codegen", f), encoding="utf-8") as fh:
            assert "<regex>" not in fh.read(), f"compiler/codegen/{f} includes <regex>"


def build_dir():
    ckc = os.environ.get("CKC_BIN") or os.path.join(ROOT, "build", "ckc")
    return os.path.dirname(ckc)


def unit_calls(archive):
    """{unit: set of units whose functions it calls} from `nm` of a static library of the runtime."""
    text = subprocess.run(["nm", "-A", archive], capture_output=True, text=True, check=True).stdout
    defined, needed = {}, collections.defaultdict(set)
    for line in text.splitlines():
        m = re.match(r"^[^:]+:([^:]+\.o):\s*(?:[0-9a-f]+)?\s+([A-Za-z])\s+(\S+)$", line)
        if not m:
            continue
        unit, kind, sym = m.groups()
        unit = unit[:-2]
        if kind in "TDRB":
            defined[sym] = unit
        elif kind == "U":
            needed[unit].add(sym)
    return {u: {defined[s] for s in syms if s in defined and defined[s] != u} for u, syms in needed.items()}


def cycles(graph):
    """Every strongly connected set of more than one unit (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("library", ["ck_io", "ck_text", "ck_runtime"])
def test_runtime_units_call_without_circles(library):
    archive = os.path.join(build_dir(), f"lib{library}.a")
    if not os.path.exists(archive) or not shutil.which("nm"):
        pytest.skip(f"{archive} is not built")
    graph = unit_calls(archive)
    assert graph, f"no symbols read from {archive}"
    assert not cycles(graph), f"units of {library} that call each other: {cycles(graph)}"


def test_cycle_finder_finds_a_circle():
    assert cycles({"gguf.c": {"safetensors.c"}, "safetensors.c": {"gguf.c"}, "json.c": set()}) == \
        [["gguf.c", "safetensors.c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []


def python_imports(package_dir, package="ckc"):
    """{module: set of package modules it imports at load time} (top-level `import` / `from` statements; an
    import inside a function runs later and may go the other way). `from . import cache` imports ckc.conductor.cache,
    not the package ckc.conductor."""
    found = {}
    for dirpath, _, files in os.walk(package_dir):
        for f in files:
            if f.endswith(".py"):
                parts = [package] + os.path.relpath(os.path.join(dirpath, f), package_dir)[:-3].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = os.path.join(dirpath, f)
    graph = {}
    for name, path in found.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        here = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
        deps = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(max(node.level - 1, 0)):
                    base = base.rsplit(".", 1)[0]
                mod = ((f"{base}.{node.module}" if node.module else base) if node.level else node.module)
                submodules = {f"{mod}.{a.name}" for a in node.names} & set(found)
                deps |= submodules or {mod}
        graph[name] = {d for d in deps if d in found and d != name}
    return graph


def test_python_modules_import_without_circles():
    graph = python_imports(os.path.join(ROOT, "python", "ckc"))
    assert {"ckc.conductor.partition", "ckc.conductor.support"} <= graph["ckc.conductor.jit"]
    assert not cycles(graph), f"modules that import each other at load time: {cycles(graph)}"
