"""`ckc compile graph.json --target gcu`: the kernels run on the gcu device (runtime/include/gcu.h, the host
implementation runtime/gcu/gcu_host.c) and give the --target cpu numbers bit for bit; the generated code
reaches device memory only through the shim."""
import os
import re
import subprocess

import numpy as np
import pytest
import torch

import ckc
from ckc.examples import GPT, MLP, Block, randomize
from conftest import ROOT

CASES = {
    "mlp": lambda: (randomize(MLP(64, 96), seed=1), torch.randn(4, 64, generator=torch.Generator().manual_seed(1))),
    "block": lambda: (randomize(Block(32, 4, "sdpa", True), seed=2),
                      torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(2))),
    # folded layers, embeddings with an id check, inline int64 constants (positions)
    "gpt": lambda: (randomize(GPT(vocab=96, dim=64, heads=4, layers=3, max_len=32), seed=4),
                    torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(5))),
}


@pytest.fixture(scope="module")
def built(workdir):
    made = {}

    def get(name):
        if name not in made:
            module, x = CASES[name]()
            folder = os.path.join(workdir, "gcu-" + name)
            graph = ckc.export(module, (x,), os.path.join(folder, "export"))
            libs = {t: ckc.build_library(ckc.compile_model(graph, os.path.join(folder, t), args=["--target", t]))
                    for t in ("cpu", "gcu")}
            made[name] = (libs, x.numpy(), os.path.join(folder, "gcu", "model.c"))
        return made[name]
    return get


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_gcu_gives_the_cpu_numbers_bit_for_bit(built, name, threads):
    libs, x, _ = built(name)
    cpu = ckc.GraphModel(libs["cpu"], threads=threads)(x)
    gcu = ckc.GraphModel(libs["gcu"], threads=threads)(x)
    assert np.array_equal(cpu, gcu), float(np.max(np.abs(cpu - gcu)))


def test_a_failed_check_on_the_device_is_reported_after_the_run(built):
    libs, x, _ = built("gpt")
    bad = x.copy()
    bad[1, 3] = 500
    with pytest.raises(ckc.CkError, match=r"'embedding': an id of 'idx' is outside the vocabulary \[0, 96\)") as e:
        ckc.GraphModel(libs["gcu"])(bad)
    assert e.value.code == -1  # CK_EINVAL, as on the cpu
    g = ckc.GraphModel(libs["gcu"])
    with pytest.raises(ckc.CkError):
        g(bad)
    assert np.array_equal(g(x), ckc.GraphModel(libs["cpu"])(x))  # the handle still works


def sections_and_kernels(src):
    """(section function bodies, trampoline bodies, everything else) of a generated gcu model.c."""
    blocks = re.findall(r"^(static (?:int|void) (\w+)\([^)]*\)\n\{\n.*?^\})", src, flags=re.M | re.S)
    sections = {n: b for b, n in blocks if re.fullmatch(r"ckg_(header|block|footer)", n)}
    kernels = {n: b for b, n in blocks if re.fullmatch(r"ckg_(header|block|footer)_k\d+", n)}
    return sections, kernels


def test_generated_gcu_code_touches_the_device_only_through_the_shim(built):
    _, _, c_path = built("gpt")
    src = open(c_path).read()
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only", "-I",
                    os.path.join(ROOT, "runtime", "include"), c_path], check=True)
    assert '#include "gcu.h"' in src and os.path.join("gcu", "gcu_host.c") in open(c_path + ".kernels").read()
    sections, kernels = sections_and_kernels(src)
    assert set(sections) == {"ckg_header", "ckg_block", "ckg_footer"} and len(kernels) >= 10
    # a section function declares pointers, fills the frame and queues work: no kernel call, no host copy
    for name, body in sections.items():
        for line in body.splitlines()[2:-1]:
            line = line.strip()
            if not line or line.startswith(("/*", "*")):
                continue
            ok = (re.match(r"^(const )?\w+ \*\w+ = .*;", line) or re.match(r"^\w+_frame f_;$", line)
                  or re.match(r"^f_\.\w+ = [\w>-]+;$", line) or re.match(r"^CK_GCU\(gcu_(launch|memcpy_async)\(", line)
                  or line == "return CK_OK;")
            assert ok, f"{name}: {line}"
        assert "g->in[" not in body and "g->out[" not in body  # the caller's host buffers
    # every kernel call runs inside a launched trampoline, reading only what its frame gives it
    for name, body in kernels.items():
        assert "g->" not in body and "CK_GCU" not in body, name
        assert re.search(r"\bck_\w+\(", body), name
    outside = src
    for body in list(sections.values()) + list(kernels.values()):
        outside = outside.replace(body, "")
    assert not re.search(r"\bck_(linear|attention\w*|layernorm|gelu|embedding\w*|add|unary)\(", outside)
    # host <-> device only through gcu calls
    for m in re.finditer(r"\bmem(cpy|set)\(([^;]*)\);", outside):
        assert "dev_" not in m.group(2) and "g->act" not in m.group(2) and "g->carry" not in m.group(2), m.group(0)


def test_a_language_model_is_refused_for_gcu_with_a_clear_error(tmp_path):
    cfg = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    r = subprocess.run([ckc.ckc_binary(), "compile", cfg, "-o", str(tmp_path / "m.c"), "--target", "gcu"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--target gcu compiles exported graphs" in r.stderr, r.stderr
    assert not (tmp_path / "m.c").exists()
