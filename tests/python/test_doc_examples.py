"""Docs that drift are bugs: the usage example at the top of each public header, and the README blocks marked
`<!-- doctest -->`, are compiled and run here against a tiny model.

A header's example is the first run of ` *   ` lines of its opening comment, taken as C: function definitions
(`static ... {` to its `}`) at file scope, the rest in main(). GIVEN declares what the example uses but does not
declare (a prompt, buffers); path literals become the test's folders. After it runs, nothing may have failed
(ck_last_error_code, gcu_last_error_message, the tokenizer's err).

A marked README block runs line by line in a scratch folder (sh blocks with `ckc` and `python` on PATH, python
blocks as one script), with its placeholder paths (path/to/config.json, hf-folder) made real: the tiny Llama and its
random weights. Two kinds of line are left to their own tests: `pip install .` (test_packaging) and `.chat(`
(test_text: chat needs a real tokenizer and template).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

import ckc
from conftest import ROOT

INCLUDE = os.path.join(ROOT, "runtime", "include")
TINY = os.path.join(ROOT, "models", "tiny-llama", "config.json")


def header_example(name):
    """(file-scope lines, statement lines) of the header's opening example."""
    with open(os.path.join(INCLUDE, name), encoding="utf-8") as f:
        lines = f.read().splitlines()
    block, started = [], False
    for line in lines[1:]:
        if line.startswith(" *   "):
            block.append(line[5:])
            started = True
        elif started:
            break
    assert block, f"{name} opens with no example"
    file_scope, body, depth = [], [], 0
    for line in block:
        if depth or (line.startswith("static ") and line.rstrip().endswith("{")):
            file_scope.append(line)
            depth += line.count("{") - line.count("}")
        else:
            body.append(line)
    return file_scope, body


# header -> (what it runs on, includes, declarations the example uses, the check after it)
EXAMPLES = {
    "ck_model.h": ("llm", ["ck_model.h"], "int32_t prompt[] = {1, 2, 3}; int n = 3; int32_t next_token = 4;",
                   "ck_last_error_code() == CK_OK"),
    "ck_trace.h": ("llm_trace", ["ck_model.h"],
                   "ck_model *m = ck_model_init(argv[1]); int32_t t[] = {1, 2};",
                   "ck_model_embed_tokens(m, t, 2) == CK_OK && ck_model_forward(m) == CK_OK && traced > 0"),
    "ck_generate.h": ("llm", ["ck_generate.h"],
                      "ck_model *m = ck_model_init(argv[1]); int32_t prompt[] = {1, 2, 3}; int n = 3; "
                      "int32_t out[64]; int cap = 64; void *user = NULL;",
                      "ck_last_error_code() == CK_OK && r.n_new > 0"),
    "ck_graph.h": ("graph", ["ck_graph.h"], "float x[2 * 8] = {0}, y[2 * 4];", "ck_last_error_code() == CK_OK"),
    "ck_tokenizer.h": ("tokenizer", ["ck_tokenizer.h"], 'const char *text = "Hello, world";', "err[0] == 0 && n > 0"),
    "gcu.h": ("gcu", ["gcu.h"], "float host[4] = {1, 2, 3, 4}; size_t bytes = sizeof host; struct { int k; } args = {1};",
              "gcu_last_error_message()[0] == 0"),
}
# what an example calls that GIVEN defines at file scope
FILE_SCOPE = {
    "ck_generate.h": ["static int on_token(void *user, int32_t id, const char *text, size_t len) { (void)user; "
                      "(void)id; (void)text; (void)len; return 0; }"],
    "gcu.h": ["static void my_kernel(void *args) { (void)args; }"],
    "ck_trace.h": ["static int traced;"],
}


def test_every_public_header_with_an_example_is_run():
    with_example = set()
    for name in os.listdir(INCLUDE):
        with open(os.path.join(INCLUDE, name), encoding="utf-8") as f:
            head = f.read().split("*/", 1)[0]
        if re.search(r"^ \*   \S.*\w\(.*\);\s*(//.*)?$", head, re.M):  # a line that calls something
            with_example.add(name)
    assert with_example == set(EXAMPLES)


@pytest.fixture(scope="module")
def subjects(build, compile_graph, tmp_path_factory):
    torch = pytest.importorskip("torch")
    import tokenizer_cases
    d = tmp_path_factory.mktemp("doc")
    llm = build(dict(json_load(TINY), max_position_embeddings=512))  # the example's cache holds 256
    tok = str(d / "tok")
    tokenizer_cases.save_family("llama3", tok)
    torch.manual_seed(0)
    g = compile_graph("doc_linear", torch.nn.Linear(8, 4).eval(), (torch.randn(2, 8),))
    return {"llm": (os.path.join(llm.folder, "model.c"), llm.weights), "tokenizer": (None, tok),
            "graph": (g.c_path, os.path.join(os.path.dirname(g.c_path), "model.weights.safetensors")), "gcu": (None, "")}


def json_load(path):
    import json
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("header", sorted(EXAMPLES))
def test_header_example_compiles_and_runs(header, subjects, tmp_path):
    kind, includes, given, check = EXAMPLES[header]
    file_scope, body = header_example(header)
    c_path, data = subjects["llm" if kind.startswith("llm") else kind]
    src = ["#include <stdio.h>", "#include <string.h>", *[f'#include "{h}"' for h in includes], *FILE_SCOPE.get(header, []),
           *file_scope, "int main(int argc, char **argv)", "{", "    (void)argc;", "    " + given]
    for line in body:
        src.append("    " + re.sub(r'"(path/to/hf-folder|out/model\.weights\.safetensors)"', "argv[1]", line))
    if header == "ck_trace.h":  # count the events instead of printing them all
        src = [s.replace('printf("%s layer', 'traced++; if (0) printf("%s layer') for s in src]
    why = ' fprintf(stderr, "%s\\n", ck_last_error());' if kind.startswith("llm") or kind == "graph" else ""
    src += [f"    if (!({check})) {{ fprintf(stderr, \"check failed: {check}\\n\");{why} return 1; }}", "    return 0;", "}"]
    main_c = tmp_path / "example.c"
    main_c.write_text("\n".join(src) + "\n")
    exe = str(tmp_path / "example")
    flags = ["-std=c99", "-Wall", "-Werror", "-Wno-unused-variable", "-I", INCLUDE]
    if kind == "gcu":
        cmd = ["cc", *flags, str(main_c), os.path.join(ROOT, "runtime", "gcu", "gcu_host.c"), "-lpthread", "-o", exe]
    elif kind == "tokenizer":
        from ckc.text import _sources
        srcs = [f for f in _sources() if f.endswith(".c") and not f.endswith("chat.c")]
        cmd = ["cc", *flags, "-Wno-unused-function", str(main_c), *srcs, "-lm", "-o", exe]
    else:
        extra = ["-DCK_TRACE"] if kind == "llm_trace" else []
        with open(c_path + ".kernels") as f:
            objs = ckc.build.runtime_objects([ln.strip() for ln in f if ln.strip()])
        cmd = ["cc", *flags, *extra, str(main_c), c_path, *objs, "-fopenmp", "-lopenblas", "-lm", "-o", exe]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"{header}'s example does not compile:\n{main_c.read_text()}\n{p.stderr}"
    p = subprocess.run([exe, data], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{header}'s example fails:\n{main_c.read_text()}\n{p.stdout}{p.stderr}"


def readme_blocks():
    """The README's code blocks under a `<!-- doctest -->` line: [(language, text)]."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"<!-- doctest -->\n```(\w+)\n(.*?)```", text, re.S)


def test_readme_marked_blocks_run(build, tmp_path):
    blocks = readme_blocks()
    assert len(blocks) >= 2, "the README's first examples are marked <!-- doctest -->"
    weights = build(json_load(TINY)).weights
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(ckc.ckc_binary(), bin_dir / "ckc")
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # this environment's python
    (bin_dir / "python").chmod(0o755)
    python_path = os.pathsep.join(filter(None, [os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=python_path)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(weights, work / "hf-folder")

    def real(line):
        return line.replace("path/to/config.json", TINY).replace("path/to/hf-folder", "hf-folder")
    ran = 0
    for lang, block in blocks:
        lines = [real(ln) for ln in block.splitlines() if ln.strip() and "pip install ." not in ln and ".chat(" not in ln]
        if lang == "sh":
            for ln in lines:
                p = subprocess.run(["sh", "-c", ln], cwd=work, env=env, capture_output=True, text=True, timeout=600)
                assert p.returncode == 0, f"README line failed: {ln}\n{p.stdout}{p.stderr}"
                ran += 1
        elif lang == "python":
            p = subprocess.run([sys.executable, "-c", "\n".join(lines)], cwd=work, env=env, capture_output=True,
                               text=True, timeout=600)
            assert p.returncode == 0, f"README block failed:\n{block}\n{p.stdout}{p.stderr}"
            ran += 1
    assert ran >= 4
