"""The benchmarks' worker still builds against the runtime and answers its commands.

scripts/bench_decode.c is what bench_decode.py and bench_llm.py's bandwidth probe run. The measurements themselves
are the scripts' job, not a test's (timings are never asserted here): this catches a worker that no longer
compiles after a kernel API change, reads the wrong number of bytes, or runs a path other than the one asked.
"""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

# bytes per block and elements per block of the formats checked (llama.cpp's layouts)
BLOCKS = {"f16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32), "q4_1": (20, 32), "q5_0": (22, 32), "q5_1": (24, 32),
          "q4_K": (144, 256), "q6_K": (210, 256)}


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    import bench_decode
    return bench_decode.build(str(tmp_path_factory.mktemp("bench_decode")))


def forced_paths():
    """A forced kernel path to check besides portable: AVX2, where the CPU has it"""
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    return ["avx2"] if " avx2" in flags else []


@pytest.mark.parametrize("fmt", sorted(BLOCKS))
def test_the_decode_worker_reads_every_layer_and_runs_the_path_asked(worker, fmt):
    D, F, KV, L = 256, 512, 64, 2  # (multiples of 256: every format's rows are whole blocks)
    p = subprocess.run([worker, fmt, str(D), str(F), str(KV), str(L)], input="bytes\ngemv 1 auto\ngemv 2 portable\n"
                       + "".join(f"gemv 1 {path}\n" for path in forced_paths()), capture_output=True, text=True,
                       timeout=300, env={k: v for k, v in os.environ.items() if k != "CK_KERNELS"})  # (no cap)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "ready"
    per_block, elems = BLOCKS[fmt]
    shapes = [(D + 2 * KV, D), (D, D), (2 * F, D), (D, F)]  # q|k|v, o, gate|up, down: (rows, K)
    assert int(lines[1]) == L * sum(n * k // elems * per_block for n, k in shapes)
    answers = [line.split() for line in lines[2:]]
    assert len(answers) == 2 + len(forced_paths())
    for secs, _ in answers:
        assert float(secs) > 0
    assert answers[1][1] == "portable"
    for (_, ran), asked in zip(answers[2:], forced_paths()):
        assert ran == asked


def test_the_decode_worker_refuses_bad_arguments(worker):
    for args in (["q9_9", "256", "512", "64", "2"], ["q4_0", "0", "512", "64", "2"], ["q4_0", "256"]):
        p = subprocess.run([worker, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2
        assert "bench_decode" in p.stderr


def test_the_read_probe_measures_a_bandwidth(worker):
    """`read THREADS`: the streaming read every %bw divides by (its 128-, 256- and 512-bit loops as the CPU has them)
    answers a positive GB/s for one and two threads"""
    p = subprocess.run([worker, "q8_0", "256", "256", "64", "1"], input="read 1\nread 2\n", capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "ready" and len(lines) == 3
    assert all(float(v) > 0.1 for v in lines[1:])


def test_the_llm_worker_decodes_after_a_prompt_of_context_tokens(build, tmp_path):
    """bench_llm.py's ckc worker (what --against llama.cpp runs for ckc): --context N decodes after an N-token
    prompt, so the cache holds N + decode positions; a cache one position short would fail the last step.
    Timings are printed by the worker, not checked."""
    from conftest import tiny
    b = build(tiny())
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_llm.py"), "--worker", "ckc", "--so", b.so,
           "--weights", b.weights, "--config", os.path.join(b.folder, "config.json"), "--threads", "1",
           "--prefill", "8", "--decode", "5", "--context", "40", "--logits", str(tmp_path / "logits.npy")]
    p = subprocess.run(cmd, input="decode\nquit\n", capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert lines[0] == "ready" and float(lines[1]) > 0
    # the prompt really is --context tokens: past the tiny model's 128 positions the model refuses it
    i = cmd.index("--context") + 1
    long = subprocess.run(cmd[:i] + ["130"] + cmd[i + 1:], input="decode\nquit\n", capture_output=True, text=True,
                          timeout=300)
    assert long.returncode != 0 and "capacity 135 outside 1..128" in long.stderr
    bad = subprocess.run(cmd[:2] + ["--context", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--context 0: at least 1 token" in bad.stderr


def test_bench_llm_kernels_level_caps_both_contenders(tmp_path, monkeypatch):
    """bench_llm --kernels LEVEL: ckc runs with CK_KERNELS=LEVEL and llama.cpp loads the libraries that
    llama_cpp.sh --lib printed (here a stand-in script printing the installed build's folder), and the header line
    lists what that llama.cpp build reports; a level the CPU lacks is refused by name."""
    import argparse
    import bench_llm
    llama_cpp = pytest.importorskip("llama_cpp")
    lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    script = tmp_path / "llama_cpp.sh"
    script.write_text(f"#!/bin/sh\necho building >&2\necho \"level $CKC_LLAMA_CPP_CONFIG\"\necho {lib}\n")
    script.chmod(0o755)
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx f16c fma avx2\n")
    monkeypatch.setenv("CKC_CPUINFO", str(info))
    monkeypatch.delenv("CK_KERNELS", raising=False)
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    envs, header = bench_llm.level_envs(argparse.Namespace(kernels="avx2"), str(script))
    assert envs["ckc"]["CK_KERNELS"] == "avx2" and "LLAMA_CPP_LIB_PATH" not in envs["ckc"]
    assert envs["llama.cpp"]["LLAMA_CPP_LIB_PATH"] == lib and "CK_KERNELS" not in envs["llama.cpp"]
    assert header.startswith("kernels: avx2 (ckc: CK_KERNELS=avx2; llama.cpp built at it, " + lib) and " AVX2" in header
    assert "CPU" not in header.split(lib)[1]
    with pytest.raises(SystemExit, match="--kernels avx2-vnni: this CPU has no avx_vnni"):
        bench_llm.level_envs(argparse.Namespace(kernels="avx2-vnni"), str(script))
    broken = tmp_path / "broken.sh"  # a build that fails: a message naming the level, not a traceback
    broken.write_text("#!/bin/sh\necho 'cmake failed' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(SystemExit, match="--kernels avx2: llama_cpp.sh --lib gave no llama.cpp build"):
        bench_llm.level_envs(argparse.Namespace(kernels="avx2"), str(broken))
    envs, header = bench_llm.level_envs(argparse.Namespace(kernels=None), str(script))
    assert "CK_KERNELS" not in envs["ckc"] and "LLAMA_CPP_LIB_PATH" not in envs["llama.cpp"]
