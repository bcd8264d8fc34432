"""`ckc compile --standalone`: one model.c holding the runtime it calls, which builds with a C99 compiler and libm
alone (no OpenBLAS, no OpenMP, no ckc headers) for this CPU, ARM64 (run under qemu-aarch64) and wasm32-wasi (run
under wasmtime), and gives the logits of the manifest build (OpenBLAS + OpenMP) within 1e-4 and its greedy
tokens — for a tiny Llama, an exported GPT graph, and (slow) SmolLM2-135M Q4_1 under qemu."""
import os
import re
import subprocess

import numpy as np
import pytest
import torch

import ckc
from ckc import cross
from ckc.examples import GPT, randomize
from conftest import ROOT, TINY, max_diff, prompt

TOL = 1e-4
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Wunused-function", "-pedantic", "-Werror"]
IDS = prompt(12, TINY["vocab_size"], seed=3)


def run(cmd, timeout=300, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return p.stdout


def logits_of(target, exe, weights, ids=IDS):
    return np.array([[float(v) for v in line.split()] for line in
                     run(cross.command(target, exe, [weights, "--logits", *map(str, ids)])).splitlines()])


def greedy_of(target, exe, weights, ids=IDS, n=16):
    return [int(t) for t in run(cross.command(target, exe, [weights, "-n", str(n), *map(str, ids)])).split()]


def need(target):
    missing = cross.missing_tools(target)
    assert not missing, f"{target}: {', '.join(missing)} missing (scripts/install_deps.sh installs them)"


@pytest.fixture(scope="module")
def tiny_llama(build, tmp_path_factory):
    """The tiny Llama built both ways: the manifest build (reference: logits and greedy tokens from ctypes) and
    the one standalone file, in a folder of its own."""
    b = build(TINY)
    m = b.model()
    folder = tmp_path_factory.mktemp("standalone-llama")
    c = ckc.compile_model(os.path.join(b.folder, "config.json"), str(folder), args=["--standalone"])
    return {"c": c, "weights": b.weights, "folder": str(folder), "ref_logits": np.asarray(m.forward(IDS)),
            "ref_greedy": list(m.generate(IDS, max_new_tokens=16))}


def reference_logits(t):
    return t["ref_logits"]


def test_one_file_nothing_else(tiny_llama):
    c = tiny_llama["c"]
    assert os.listdir(tiny_llama["folder"]) == ["model.c"]  # no model.c.kernels
    src = open(c).read()
    assert not re.search(r'^\s*#\s*include\s*"', src, re.M)  # every ckc header pasted in
    for part in ("runtime/include/ck_kernels.h", "runtime/kernels/linear.c", "runtime/kernels/blas.c",
                 "runtime/io/safetensors.c", "runtime/text/tokenizer.c"):
        assert f" * {part}\n" in src, part
    assert "runtime/kernels/qlinear.c" not in src  # float weights: exactly what the model calls
    assert "cc -O3 -fPIC -shared model.c -lm -o libmodel.so" in src  # its own build line, in its frontmatter


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_builds_warning_free_with_libm_alone_and_matches_the_manifest_build(tiny_llama, cc, tmp_path):
    """The issue's first line: cc -O2 model.c -lm, here with every warning an error, in a folder with nothing but
    the file; the program links no BLAS and no OpenMP runtime, and computes what the manifest build does."""
    exe = str(tmp_path / "model")
    run([cc, "-O2", *STRICT, "-DCK_MODEL_MAIN", tiny_llama["c"], "-lm", "-o", exe])
    needed = run(["readelf", "-d", exe])
    assert "openblas" not in needed and "gomp" not in needed and "libm.so" in needed, needed
    got = logits_of("native", exe, tiny_llama["weights"])
    assert got.shape == (len(IDS), TINY["vocab_size"])
    assert max_diff(got, reference_logits(tiny_llama)) < TOL
    assert greedy_of("native", exe, tiny_llama["weights"]) == tiny_llama["ref_greedy"]


@pytest.mark.parametrize("flags,libs", [(["-march=native", "-fopenmp"], []), (["-DCK_BLAS=1", "-fopenmp"], ["-lopenblas"])],
                         ids=["march-native-openmp", "openblas"])
def test_the_fast_x86_builds_of_the_same_file(tiny_llama, flags, libs, tmp_path):
    exe = cross.build(tiny_llama["c"], str(tmp_path / "model"), opt="-O2", flags=[*STRICT[1:], *flags], libs=libs)
    assert max_diff(logits_of("native", exe, tiny_llama["weights"]), reference_logits(tiny_llama)) < TOL
    assert greedy_of("native", exe, tiny_llama["weights"]) == tiny_llama["ref_greedy"]


@pytest.mark.parametrize("target", ["aarch64", "wasm32"])
def test_tiny_llama_on_other_cpus(tiny_llama, target, tmp_path):
    """Built for ARM64 (run under qemu-aarch64) and wasm32-wasi (under wasmtime): the x86 logits within 1e-4,
    the same greedy tokens."""
    need(target)
    exe = cross.build(tiny_llama["c"], str(tmp_path / ("model.wasm" if target == "wasm32" else "model")), target,
                      opt="-O1", flags=STRICT[1:])
    assert max_diff(logits_of(target, exe, tiny_llama["weights"]), reference_logits(tiny_llama)) < TOL
    assert greedy_of(target, exe, tiny_llama["weights"]) == tiny_llama["ref_greedy"]


@pytest.fixture(scope="module")
def gpt_graph(compile_graph, tmp_path_factory):
    m = randomize(GPT(vocab=96, dim=64, heads=4, layers=3, max_len=32), seed=4)
    idx = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(5))
    c = compile_graph("gpt-standalone-ref", m, (idx,))
    folder = tmp_path_factory.mktemp("standalone-gpt")
    sa = ckc.compile_model(c.graph, str(folder), args=["--standalone"])
    inp = str(folder / "idx.bin")
    idx.numpy().astype(np.int64).tofile(inp)
    with torch.no_grad():
        ref = m(idx).numpy()
    return {"c": sa, "weights": os.path.join(str(folder), "model.weights.safetensors"), "input": inp, "ref": ref,
            "lib": c.model()(idx.numpy()), "graph": c.graph}


def graph_output(target, exe, g):
    lines = run(cross.command(target, exe, [g["weights"], g["input"]])).splitlines()
    assert lines[0] == "output output f32 2x16x96", lines[0]
    return np.array([float(v) for v in lines[1:]]).reshape(2, 16, 96)


@pytest.mark.parametrize("target", ["native", "aarch64", "wasm32"])
def test_exported_gpt_graph_on_every_cpu(gpt_graph, target, tmp_path):
    """ckc compile graph.json --standalone, built with -DCK_GRAPH_MAIN (inputs from files, outputs printed):
    eager PyTorch's output within 1e-4 on x86, ARM64 and wasm32."""
    need(target)
    assert set(os.listdir(os.path.dirname(gpt_graph["c"]))) >= {"model.c", "model.weights.safetensors"}
    assert not os.path.exists(gpt_graph["c"] + ".kernels")
    exe = cross.build(gpt_graph["c"], str(tmp_path / ("model.wasm" if target == "wasm32" else "model")), target,
                      opt="-O1", flags=STRICT[1:], main="-DCK_GRAPH_MAIN")
    y = graph_output(target, exe, gpt_graph)
    assert max_diff(y, gpt_graph["ref"]) < TOL
    assert max_diff(y, gpt_graph["lib"]) < TOL


def test_graph_main_says_what_is_wrong(gpt_graph, tmp_path):
    exe = cross.build(gpt_graph["c"], str(tmp_path / "model"), opt="-O0", main="-DCK_GRAPH_MAIN")
    p = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "idx: i64, 256 bytes" in p.stderr
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 10)
    p = subprocess.run([exe, gpt_graph["weights"], str(short)], capture_output=True, text=True)
    assert p.returncode == 1 and "input idx needs exactly 256 bytes" in p.stderr
    p = subprocess.run([exe, gpt_graph["weights"]], capture_output=True, text=True)
    assert p.returncode == 1 and "0 input files for the graph's 1 inputs" in p.stderr
    p = subprocess.run([exe, gpt_graph["weights"], str(tmp_path / "missing.bin")], capture_output=True, text=True)
    assert p.returncode == 1 and "missing.bin: cannot open it (input idx)" in p.stderr


def test_gcu_target_standalone_has_the_host_shim(tiny_llama, tmp_path):
    """--target gcu --standalone: the gcu host shim (a worker thread: -pthread) pasted in too; same logits."""
    folder = tmp_path / "gcu"
    c = ckc.compile_model(os.path.join(os.path.dirname(tiny_llama["weights"]), "config.json"), str(folder),
                          args=["--standalone", "--target", "gcu"])
    assert " * runtime/gcu/gcu_host.c\n" in open(c).read()
    exe = cross.build(c, str(tmp_path / "model"), opt="-O1", flags=[*STRICT[1:], "-pthread"])
    assert max_diff(logits_of("native", exe, tiny_llama["weights"]), reference_logits(tiny_llama)) < TOL


@pytest.mark.parametrize("args,parts", [
    (["--train"], ["kernels/train.c", "kernels/fgemm.c"]),
    (["--weights", "q4_K"], ["kernels/qlinear.c", "kernels/qdot4.c", "kernels/qgemm.c", "kernels/fgemm.c"])],
    ids=["train", "q4_K"])
def test_the_other_runtime_parts_paste_cleanly(args, parts, tmp_path):
    """Training and stored 4-bit weights bring the rest of the runtime: its files' statics live together without a
    clash, with every warning an error, on x86 and ARM64."""
    cfg = tmp_path / "config.json"
    cfg.write_text(__import__("json").dumps(TINY))
    c = ckc.compile_model(str(cfg), str(tmp_path), args=["--standalone", *args])
    src = open(c).read()
    for part in parts:
        assert f" * runtime/{part}\n" in src, part
    run(["gcc", *STRICT, "-fsyntax-only", c])  # a clash is an error before code generation
    need("aarch64")
    run(["aarch64-linux-gnu-gcc", *STRICT, "-fsyntax-only", c])


@pytest.mark.parametrize("target,flags", [("aarch64", []), ("aarch64", ["-march=armv8.2-a+dotprod"])],
                         ids=["aarch64", "aarch64-dotprod"])
def test_every_formats_dot_product_equals_the_reference(target, flags, tmp_path):
    """tests/c/vec_dot_check.c: ck_vec_dot as ARM64 runs it (NEON, with SDOT or without) against the scalar
    reference, every stored format, under qemu (x86's paths: test_quant.cpp's "every kernel path")."""
    need(target)
    rt = os.path.join(ckc.ROOT, "runtime")
    sources = sorted(os.path.join(rt, "kernels", f) for f in os.listdir(os.path.join(rt, "kernels")) if f.endswith(".c"))
    exe = cross.build(os.path.join(ckc.ROOT, "tests", "c", "vec_dot_check.c"), str(tmp_path / "check"), target,
                      opt="-O1", main=None, flags=["-std=c99", "-DCK_BLAS=0", "-I", os.path.join(rt, "include"), *flags],
                      libs=[*sources, os.path.join(rt, "io", "quant.c")])
    out = run(cross.command(target, exe, []))
    lines = out.splitlines()
    assert lines[0] == "path neon", out
    # f32, f16, bf16, q8_0, q4_0, q4_1, q4_K, q5_K, q6_K
    assert int(re.search(r"(\d+) formats with a body", out).group(1)) >= 9 and " 0 mismatches" in out, out


def test_cortex_m7_compiles_and_links(tiny_llama, tmp_path):
    """A 32-bit microcontroller (arm-none-eabi-gcc -mcpu=cortex-m7, newlib): the tiny Llama's file compiles with
    every warning an error and links (newlib's nosys stubs stand in for the file system); its sizes are printed."""
    need("cortex-m7")
    exe = cross.build(tiny_llama["c"], str(tmp_path / "model.elf"), "cortex-m7", opt="-Os", flags=STRICT[1:])
    sizes = cross.size(exe)
    print(f"cortex-m7 tiny Llama: {sizes}")
    assert 50_000 < sizes["text"] < 600_000 and sizes["bss"] < 64_000, sizes


@pytest.fixture(scope="module")
def embedded(tiny_llama, tmp_path_factory):
    """The tiny Llama with its weights (model.safetensors, 0.5 MB) compiled into the one file."""
    folder = tmp_path_factory.mktemp("embedded")
    c = ckc.compile_model(os.path.join(os.path.dirname(tiny_llama["weights"]), "config.json"), str(folder),
                          args=["--standalone", "--embed-weights", tiny_llama["weights"]])
    return c


@pytest.mark.parametrize("target", ["native", "wasm32"])
def test_embedded_weights_run_with_no_file_system(tiny_llama, embedded, target, tmp_path):
    """--embed-weights: ck_model_init(NULL) (the executable's @embedded) reads the weights compiled in; the program
    runs in an empty folder, and under wasmtime with no folder opened at all; same logits as from the file."""
    need(target)
    exe = cross.build(embedded, str(tmp_path / ("model.wasm" if target == "wasm32" else "model")), target, opt="-O1",
                      flags=STRICT[1:])
    args = ["@embedded", "--logits", *map(str, IDS)]
    cmd = cross.command(target, exe, args)
    if target == "wasm32":
        cmd.insert(cmd.index(exe), "--no-cwd")
    empty = tmp_path / "empty"
    empty.mkdir()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=empty)
    assert p.returncode == 0, p.stderr
    got = np.array([[float(v) for v in line.split()] for line in p.stdout.splitlines()])
    assert max_diff(got, reference_logits(tiny_llama)) < TOL
    # without the weights compiled in, NULL is an error that says how to get them
    plain = cross.build(tiny_llama["c"], str(tmp_path / "plain"), opt="-O0")
    p = subprocess.run([plain, "@embedded", "1", "2"], capture_output=True, text=True)
    assert p.returncode == 1 and "no weights compiled in" in p.stderr and "--embed-weights" in p.stderr


def test_embedded_weights_on_a_cortex_m7(embedded, tmp_path):
    """The tiny Llama (0.5 MB of f32 weights) compiled in, built for a Cortex-M7: the weights are read-only data."""
    need("cortex-m7")
    sizes = cross.size(cross.build(embedded, str(tmp_path / "model.elf"), "cortex-m7", opt="-Os", flags=STRICT[1:]))
    print(f"cortex-m7 tiny Llama with embedded weights: {sizes}")
    assert sizes["text"] > 497_000, sizes  # .rodata (the weights) counts as text


def test_an_embedded_gguf_brings_its_tokenizer(build, tmp_path):
    """A GGUF compiled in (--embed-weights alone: the input file) carries its tokenizer: the program takes text with
    no file beside it, and answers as the same program reading the file."""
    import shutil
    import tokenizer_cases
    from references import CACHE
    b = build(dict(TINY, vocab_size=1200, max_position_embeddings=64))
    folder = tmp_path / "hf"
    shutil.copytree(b.weights, folder)
    shutil.copyfile(tokenizer_cases.save_family("gpt2", os.path.join(CACHE, "tokenizers", "gpt2")),
                    folder / "tokenizer.json")
    gguf = str(tmp_path / "tiny.q8_0.gguf")
    run([ckc.ckc_binary(), "quantize", str(folder), "-o", gguf, "--type", "q8_0"])
    c = ckc.compile_model(gguf, str(tmp_path / "out"), args=["--standalone", "--embed-weights"])
    exe = cross.build(c, str(tmp_path / "out" / "model"), opt="-O1")
    prompt = ["--raw", "--prompt", "hello world", "-n", "6"]
    empty = tmp_path / "empty"
    empty.mkdir()
    p = subprocess.run([exe, "@embedded", *prompt], capture_output=True, text=True, cwd=empty)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("hello world") and p.stdout == run([exe, gguf, *prompt])


def failing_compile(tmp_path):
    """compile_err(*args): `ckc compile *args -o m.c`, which must fail and write nothing; returns its stderr"""
    def compile_err(*args):
        p = subprocess.run([ckc.ckc_binary(), "compile", *args, "-o", str(tmp_path / "m.c")], capture_output=True,
                           text=True)
        assert p.returncode != 0 and not os.path.exists(tmp_path / "m.c")
        return p.stderr
    return compile_err


def test_embed_weights_bad_input(tiny_llama, tmp_path):
    from references import smollm2_gguf
    cfg = os.path.join(os.path.dirname(tiny_llama["weights"]), "config.json")

    compile_err = failing_compile(tmp_path)
    big = smollm2_gguf()
    assert re.search(r"--embed-weights .*SmolLM2.*: [\d.]+ MiB is more than the 32.0 MiB a C file sensibly holds",
                     compile_err(big, "--embed-weights"))
    txt = tmp_path / "weights.bin"
    txt.write_bytes(b"x" * 100)
    assert "not a .safetensors or .gguf file" in compile_err(cfg, "--embed-weights", str(txt))
    assert "cannot open" in compile_err(cfg, "--embed-weights", str(tmp_path / "none.safetensors"))
    # another config's weights compiled in: ck_model_init says which tensor does not fit
    other = tmp_path / "other"
    ckc.random_weights(os.path.join(ckc.ROOT, "models", "tiny-llama", "config.json"), str(other))
    import json
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps(dict(TINY, hidden_size=96)))
    c = ckc.compile_model(str(wide), str(tmp_path / "wide"), args=["--standalone", "--embed-weights", str(other)])
    exe = cross.build(c, str(tmp_path / "wide" / "model"), opt="-O0")
    p = subprocess.run([exe, "@embedded", "1", "2"], capture_output=True, text=True)
    assert p.returncode == 1 and "model.safetensors (compiled in)" in p.stderr and "shape" in p.stderr, p.stderr


WRAP = "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free"


@pytest.fixture(scope="module")
def static_embedded(tiny_llama, tmp_path_factory):
    """The tiny Llama as a microcontroller would take it: --static (8 tokens per call, 64 positions of KV cache: one
    block of CK_MODEL_MEMORY_BYTES) with its weights compiled in."""
    folder = tmp_path_factory.mktemp("static")
    return ckc.compile_model(os.path.join(os.path.dirname(tiny_llama["weights"]), "config.json"), str(folder),
                             args=["--standalone", "--static", "--max-tokens", "8", "--kv", "64",
                                   "--embed-weights", tiny_llama["weights"]])


def test_static_build_answers_as_the_allocating_one(tiny_llama, static_embedded, tmp_path):
    """The static build gives the logits of the manifest build (a 12-token call with -DCK_STATIC_LOGITS_ROWS=12 and
    --max-tokens 12: the bound is the C compiler's) and its 16 greedy tokens, the 12-token prompt fed in parts of 8."""
    c12 = ckc.compile_model(os.path.join(os.path.dirname(tiny_llama["weights"]), "config.json"), str(tmp_path / "12"),
                            args=["--standalone", "--static", "--max-tokens", "12"])
    exe = cross.build(c12, str(tmp_path / "m12"), opt="-O1", flags=STRICT[1:] + ["-DCK_STATIC_LOGITS_ROWS=12"])
    assert max_diff(logits_of("native", exe, tiny_llama["weights"]), reference_logits(tiny_llama)) < TOL
    exe = cross.build(static_embedded, str(tmp_path / "m8"), opt="-O1", flags=STRICT[1:])
    assert greedy_of("native", exe, "@embedded") == tiny_llama["ref_greedy"]
    p = subprocess.run([exe, "@embedded", "--logits", *map(str, IDS[:3])], capture_output=True, text=True)
    assert p.returncode == 1 and "keeps 1 row(s) (build model.c with -DCK_STATIC_LOGITS_ROWS=3)" in p.stderr, p.stderr


def test_static_embedded_on_a_cortex_m7(static_embedded, tmp_path):
    """Static memory and the weights as const data, for a Cortex-M7: the model's block is .bss (CK_MODEL_MEMORY_BYTES,
    printed with the sizes), the weights .rodata."""
    need("cortex-m7")
    exe = cross.build(static_embedded, str(tmp_path / "model.elf"), "cortex-m7", opt="-Os", flags=STRICT[1:])
    sizes = cross.size(exe)
    print(f"cortex-m7 tiny Llama, --static --max-tokens 8 --kv 64 --embed-weights: {sizes}")
    assert sizes["text"] > 497_000 and 60_000 < sizes["bss"] < 400_000, sizes


@pytest.mark.parametrize("weights", ["f32", "q4_0"])
def test_static_build_allocates_nothing_after_init(tiny_llama, weights, tmp_path):
    """tests/c/alloc_check.c -DCHECK_STATIC: in the caller's block (ck_model_init_with_memory), a prefill of
    --max-tokens tokens and 32 decode steps on one thread call no allocator, on every x86 kernel path; a call
    past the bounds (tokens, KV positions, the block's size, a second model in the static array) is CK_ERANGE /
    CK_ESTATE with a message that names the bound."""
    cfg = os.path.join(os.path.dirname(tiny_llama["weights"]), "config.json")
    # 64 tokens: past CK_FGEMM_SMALL_T, so f32 prefill takes fgemm's panels (from malloc before they were the
    # workspace's: 16 calls, measured) as well as q4_0's tiles and int8 panels
    c = ckc.compile_model(cfg, str(tmp_path), args=["--standalone", "--static", "--max-tokens", "64", "--kv", "128",
                                                   "--weights", weights])
    exe = cross.build(os.path.join(ckc.ROOT, "tests", "c", "alloc_check.c"), str(tmp_path / "check"), opt="-O1",
                      main="-DCHECK_STATIC", flags=["-fopenmp", "-I", ckc.include_dir()], libs=[c, WRAP])
    for path in ("auto", "avx2", "portable"):
        out = run([exe, tiny_llama["weights"]], env=dict(os.environ, CK_KERNELS=path))
        assert "64-token prefill and 32 decode steps: 0 allocator calls" in out, (path, out)
    assert "KV cache holds 128 of 128 tokens" in out
    assert "65 tokens: this static build takes at most 64 per call (ckc compile --static --max-tokens" in out
    assert "capacity 129 outside 1..128" in out and "needs CK_MODEL_MEMORY_BYTES = " in out
    assert "second model: -3 ck_model_init: the static memory holds one model and it is in use" in out, out


def test_static_bad_input(tiny_llama, gpt_graph, tmp_path):
    cfg = os.path.join(os.path.dirname(tiny_llama["weights"]), "config.json")

    compile_err = failing_compile(tmp_path)
    assert "--static needs --max-tokens N" in compile_err(cfg, "--static")
    assert "add --static" in compile_err(cfg, "--max-tokens", "8")
    assert re.search(r"--max-tokens 4096 / --kv 4096 is more than .*config.json's context of 128 positions",
                     compile_err(cfg, "--static", "--max-tokens", "4096"))
    assert "--kv 4 is below --max-tokens 8" in compile_err(cfg, "--static", "--max-tokens", "8", "--kv", "4")
    assert "--static builds for --target cpu" in compile_err(cfg, "--static", "--max-tokens", "8", "--target", "gcu")
    assert "--static applies to language models" in compile_err(gpt_graph["graph"], "--static", "--max-tokens", "8")


@pytest.mark.parametrize("family,weights", [("llama", "q4_K"), ("llama", "q4_0"), ("qwen3_moe", "f32"),
                                            ("qwen3_moe", "q4_K")])
def test_no_allocation_while_decoding(family, weights, tmp_path):
    """tests/c/alloc_check.c: 32 decode steps at 1 and 2 threads call no malloc/calloc/realloc/free (the
    quantized matmuls' activations come from the workspace the model allocated at init), on every x86 kernel path
    (q4_K: the K-quant activations, q4_0: the 4-block and block-sum bodies; f32 and q6_K measured the same). A
    mixture of experts too (router, gathers, the experts' ck_linear_q calls in f32 and q4_K), with experts wider
    than every other GEMM (CK_MAX_QK counts them; the workspace's generous per-K bound fit them before it did)."""
    import json
    cfg = tmp_path / "config.json"
    if family == "llama":
        config = dict(TINY, hidden_size=256, intermediate_size=768)  # whole q4_K blocks
    else:
        config = dict(json.load(open(os.path.join(ckc.ROOT, "models", "tiny-qwen3_moe", "config.json"))),
                      hidden_size=256, head_dim=64, moe_intermediate_size=512)  # down's K wider than any other
    cfg.write_text(json.dumps(config))
    ckc.random_weights(str(cfg), str(tmp_path / "w"))
    c = ckc.compile_model(str(cfg), str(tmp_path), args=["--standalone", "--weights", weights])
    exe = cross.build(os.path.join(ckc.ROOT, "tests", "c", "alloc_check.c"), str(tmp_path / "check"), opt="-O1",
                      main="-DCHECK_LLM", flags=["-fopenmp", "-I", ckc.include_dir()], libs=[c, WRAP])
    for path in ("auto", "avx2", "portable"):
        out = run([exe, str(tmp_path / "w")], env=dict(os.environ, CK_KERNELS=path))
        assert out.count(": 0 allocator calls") == 2, (path, out)


def test_no_allocation_in_a_graph_run(gpt_graph, tmp_path):
    exe = cross.build(os.path.join(ckc.ROOT, "tests", "c", "alloc_check.c"), str(tmp_path / "check"), opt="-O1",
                      main="-DCHECK_GRAPH", flags=["-fopenmp", "-I", ckc.include_dir()], libs=[gpt_graph["c"], WRAP])
    for path in ("auto", "avx2"):
        assert "3 graph runs: 0 allocator calls" in run([exe, gpt_graph["weights"]],
                                                         env=dict(os.environ, CK_KERNELS=path))


@pytest.mark.slow
def test_smollm2_answers_under_qemu_aarch64(tmp_path):
    """SmolLM2-135M-Instruct Q4_1 (the demo's GGUF) built for ARM64 completes a prompt under qemu-aarch64 with the
    first 16 greedy tokens of the x86 build running the same C (CK_KERNELS=portable; the AVX-512 bodies quantize
    prefill's activations to 8 bits, which moves this 30-layer model's close calls: here token 9). A raw prompt:
    the chat template's 30 tokens of system prompt would take qemu, whose float emulation is slow, 30 s more."""
    from references import smollm2_gguf
    need("aarch64")
    path = smollm2_gguf()
    c = ckc.compile_model(path, str(tmp_path), args=["--standalone"])
    args = [path, "--raw", "--prompt", "The sky is blue because", "-n", "16"]
    x86 = run(cross.command("native", cross.build(c, str(tmp_path / "model-x86"), opt="-O1"), args),
              env=dict(os.environ, CK_KERNELS="portable"))
    arm = run(cross.command("aarch64", cross.build(c, str(tmp_path / "model-arm64"), "aarch64"), args), timeout=600)
    assert arm == x86 and len(x86.split()) >= 12, (arm, x86)


def test_kernel_files_paste_into_one_file_without_name_clashes():
    """--standalone pastes the kernel files a model calls into one model.c, so a file-static function or struct
    type defined in two kernel files breaks every model that needs both (select.c's and binary.c's broadcast
    helper did once)."""
    import re
    files = {}
    import pathlib
    for path in sorted(pathlib.Path(ROOT, "runtime", "kernels").glob("*.c")):
        text = path.read_text()
        names = set(re.findall(r"^static\b[^;=(]*?\b(\w+)\s*\(", text, re.M))
        names |= set(re.findall(r"^typedef struct (\w+)", text, re.M))
        for n in names:
            files.setdefault(n, []).append(path.name)
    clashes = {n: f for n, f in files.items() if len(f) > 1}
    assert not clashes and len(files) > 100, clashes


class NoWeights(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x[:, 1:], x[:, :1]], 1) * 2


@pytest.mark.parametrize("target", ["cpu", "gcu"])
def test_a_graph_without_weights_compiles_warning_free(target, tmp_path):
    """A graph with no weight at all (CK_N_GLOBAL_WEIGHTS and CK_N_LAYER_WEIGHTS 0): its weight loops gave
    -Wtype-limits warnings (part of -Wextra) with an unsigned counter."""
    graph = ckc.export(NoWeights(), (torch.randn(2, 8),), str(tmp_path / "e"))
    c = ckc.compile_model(graph, str(tmp_path / "out"), args=["--target", target])
    assert "#define CK_N_GLOBAL_WEIGHTS 0" in open(c).read()
    subprocess.run(["cc", *STRICT, "-O1", "-I", ckc.include_dir(), "-c", c, "-o", str(tmp_path / "m.o")], check=True)
