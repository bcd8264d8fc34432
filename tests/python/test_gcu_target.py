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
from ckc.trace import recording
from conftest import ROOT, mixture_of_experts

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
@pytest.mark.parametrize("device", ["integrated", "discrete"])
def test_gcu_gives_the_cpu_numbers_bit_for_bit(built, name, threads, device, monkeypatch):
    """integrated (the host device): the caller's buffers are registered and used in place; discrete
    (GCU_HOST_DISCRETE=1, as a vendor's card): inputs copied in, outputs copied out."""
    if device == "discrete":
        monkeypatch.setenv("GCU_HOST_DISCRETE", "1")
    libs, x, _ = built(name)
    cpu = ckc.GraphModel(libs["cpu"], threads=threads)(x)
    g = ckc.GraphModel(libs["gcu"], threads=threads)
    gcu = g(x)
    assert np.array_equal(cpu, gcu), float(np.max(np.abs(cpu - gcu)))
    assert np.array_equal(g(x), gcu)  # a second run (the integrated device registered and released the buffers)


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


def sections_and_kernels(src, prefix):
    """(section function bodies, trampoline bodies) of a generated gcu model.c; prefix "ckg" or "ck"."""
    blocks = re.findall(r"^(static (?:int|void) (\w+)\([^)]*\)\n\{\n.*?^\})", src, flags=re.M | re.S)
    sections = {n: b for b, n in blocks if re.fullmatch(prefix + r"_(header|block|footer)", n)}
    kernels = {n: b for b, n in blocks if re.fullmatch(prefix + r"_(header|block|footer)_k\d+", n)}
    return sections, kernels


def check_device_only_through_the_shim(c_path, prefix, handle, host_buffers, device_buffers):
    """The golden check: compiles cleanly; section functions only name pointers, fill the frame and queue
    work; every kernel runs in a launched trampoline that reads only its frame; outside them, host <-> device
    data moves only through gcu calls."""
    src = open(c_path).read()
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only", "-I",
                    os.path.join(ROOT, "runtime", "include"), c_path], check=True)
    assert '#include "gcu.h"' in src and os.path.join("gcu", "gcu_host.c") in open(c_path + ".kernels").read()
    sections, kernels = sections_and_kernels(src, prefix)
    assert set(sections) == {prefix + "_header", prefix + "_block", prefix + "_footer"} and len(kernels) >= 10
    for name, body in sections.items():
        for line in body.splitlines()[2:-1]:
            line = line.strip()
            if not line or line.startswith(("/*", "*")):
                continue
            ok = (re.match(r"^(const )?\w+ \*\w+ = .*;", line) or re.match(r"^(int|float) \w+ = .*;", line)
                  or re.match(r"^\w+_frame f_;$", line) or re.match(r"^f_\.\w+ = [\w>-]+;$", line)
                  or re.match(r"^CK_GCU\(gcu_(launch|memcpy_async)\(", line) or line == "return CK_OK;")
            assert ok, f"{name}: {line}"
        for buf in host_buffers:  # the caller's host buffers
            assert buf not in body, (name, buf)
    for name, body in kernels.items():
        assert handle + "->" not in body and "CK_GCU" not in body and "CK_LAYER_" not in body, name
        assert re.search(r"\bck_\w+\(", body), name
    outside = src
    for body in list(sections.values()) + list(kernels.values()):
        outside = outside.replace(body, "")
    assert not re.search(r"\bck_(linear|attention\w*|layernorm|rmsnorm|gelu|embedding\w*|add|unary|rope|kv_store)\(",
                         outside)
    for m in re.finditer(r"\b(mem(cpy|set|move)|realloc)\(([^;]*)\);", outside):
        assert not any(b in m.group(3) for b in device_buffers), m.group(0)
    return src


def test_generated_gcu_code_touches_the_device_only_through_the_shim(built):
    _, _, c_path = built("gpt")
    src = check_device_only_through_the_shim(c_path, "ckg", "g", ["g->in[", "g->out["],
                                             ["dev_", "g->act", "g->carry", "h->w", "g->w"])
    assert "ck_gcu_upload_weights(g)" in src


# ---- language models ------------------------------------------------------------------------------------------
# (a mixture of experts has no gcu kernels yet: test_a_mixture_of_experts_is_refused_on_gcu)
FAMILIES = sorted(d for d in os.listdir(os.path.join(ROOT, "models"))
                  if d.startswith("tiny-") and not mixture_of_experts(d[len("tiny-"):]))


@pytest.fixture(scope="module")
def llm(workdir):
    made = {}

    def get(family):
        if family not in made:
            cfg = os.path.join(ROOT, "models", family, "config.json")
            folder = os.path.join(workdir, "gcu-llm-" + family)
            libs = {t: ckc.build_library(ckc.compile_model(cfg, os.path.join(folder, t), args=["--target", t]))
                    for t in ("cpu", "gcu")}
            weights = os.path.join(folder, "weights")
            ckc.build.run([ckc.ckc_binary(), "random-weights", cfg, "-o", weights, "--seed", "3", "--std", "0.15"])
            made[family] = (libs, weights, os.path.join(folder, "gcu", "model.c"))
        return made[family]
    return get


def session(lib, weights, threads, tokens):
    """Every logits array of a session that uses the whole ABI: prefill, KV-cache prefill and decode, a
    cache reset, a longer prompt that grows the buffers, and a run with the cache off again."""
    m = ckc.LlmModel(lib, weights, threads=threads)
    out = [m.forward(tokens[:4])]
    m.kv_cache_enable(40)
    out.append(m.forward(tokens[:6]))
    out += [m.decode(int(t))[None] for t in tokens[6:12]]
    assert m.kv_cache_tokens == 12
    m.kv_cache_reset()
    out.append(m.forward(tokens[:3]))
    out.append(m.decode(int(tokens[3]))[None])
    m.kv_cache_disable()
    out.append(m.forward(tokens))  # 37 tokens: the per-call buffers grow past their first 16
    out.append(m.forward(tokens[:9], last_only=True))  # the last row moved to row 0 on the device
    return [np.array(o, copy=True) for o in out]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_language_model_on_gcu_gives_the_cpu_numbers_bit_for_bit(llm, family):
    libs, weights, _ = llm(family)
    tokens = np.random.default_rng(7).integers(0, 256, 37).astype(np.int32)
    for threads in (1, 2):
        cpu, gcu = (session(libs[t], weights, threads, tokens) for t in ("cpu", "gcu"))
        for i, (a, b) in enumerate(zip(cpu, gcu)):
            assert a.shape == b.shape and np.array_equal(a, b), (family, threads, i, float(np.max(np.abs(a - b))))


def test_generated_gcu_language_model_touches_the_device_only_through_the_shim(llm):
    _, _, c_path = llm("tiny-gemma2")  # per-layer windows and softcaps, two RoPE uses, a KV cache
    src = check_device_only_through_the_shim(c_path, "ck", "m", ["m->tokens", "m->logits"],
                                             ["dev_", "m->act", "m->x", "k_cache", "v_cache", "rope_cos", "rope_sin"])
    assert "int window = CK_LAYER_WINDOW[layer];" in src  # a per-layer table is read on the host
    # the logits come back once per run, the tokens go over once per run
    assert len(re.findall(r"gcu_memcpy_async\(m->logits, m->dev_logits", src)) == 1
    assert len(re.findall(r"gcu_memcpy_async\(m->dev_tokens, m->tokens", src)) == 1


def test_a_gcu_language_model_refuses_a_trace_and_reports_host_errors(llm, tmp_path):
    libs, weights, c_path = llm("tiny-llama")
    traced = ckc.build_library(c_path, str(tmp_path / "traced.so"), extra_flags=["-DCK_TRACE"])
    m = ckc.LlmModel(traced, weights)
    with pytest.raises(ckc.CkError, match="a --target gcu model has no node trace") as e:
        with recording(m):
            pass
    assert e.value.code == -7  # CK_ENOTSUP
    with pytest.raises(ckc.CkError, match="outside the vocabulary"):
        m.forward(np.array([1, 999], dtype=np.int32))
    m.kv_cache_enable(4)
    with pytest.raises(ckc.CkError, match="KV cache holds 0 of 4 tokens; 5 more do not fit"):
        m.forward(np.arange(5, dtype=np.int32))
    assert np.array_equal(m.forward(np.arange(4, dtype=np.int32)),
                          ckc.LlmModel(libs["cpu"], weights).forward(np.arange(4, dtype=np.int32)))


class MatVec(torch.nn.Module):
    def forward(self, x, w):
        return x @ w


@pytest.mark.parametrize("runner", ["torch_runner", "guarded_torch_runner"])
def test_a_resident_input_slot_given_a_plain_tensor_in_between(workdir, runner, monkeypatch):
    """On a discrete device a Parameter input is uploaded once and kept; a plain tensor passed in its place, and
    then the Parameter again, are each read anew (the kept copy is forgotten, not reused from a stale pointer)."""
    monkeypatch.setenv("GCU_HOST_DISCRETE", "1")
    x = torch.randn(2, 4)
    w = torch.nn.Parameter(torch.randn(4, 3))
    plain = torch.randn(4, 3)
    folder = os.path.join(workdir, "gcu-matvec")
    graph = ckc.export(MatVec(), (x, w.detach()), os.path.join(folder, "export"))
    g = ckc.GraphModel(ckc.build_library(ckc.compile_model(graph, folder, args=["--target", "gcu"])))
    run = g.torch_runner() if runner == "torch_runner" else g.guarded_torch_runner(2, [0, 1], [0], params={1})
    with torch.no_grad():
        for t in (w, plain, w, plain, w):
            got = run(x, t)[0]
            assert torch.allclose(got, x @ t, atol=1e-5), runner


def test_a_mixture_of_experts_is_refused_on_gcu(tmp_path):
    cfg = os.path.join(ROOT, "models", "tiny-qwen3_moe", "config.json")
    r = subprocess.run([ckc.ckc_binary(), "compile", cfg, "--target", "gcu", "-o", str(tmp_path / "m.c")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--target gcu has no mixture-of-experts kernels yet" in r.stderr, r.stderr
    assert not (tmp_path / "m.c").exists()
