"""The ckc command line, the generated C as a C compiler sees it, the
executable main(), the build_examples, and the real-shaped configs."""
import glob
import json
import os
import re
import subprocess

import numpy as np
import pytest

import ckc
from conftest import ROOT, prompt, registry, tiny

REAL = sorted(p for p in glob.glob(os.path.join(ROOT, "models", "*", "config.json")) if "/tiny-" not in p)


def ckc_run(*args, check=True):
    p = subprocess.run([ckc.ckc_binary(), *args], cwd=ROOT, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"ckc {' '.join(args)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p


def sh(line, cwd=ROOT):
    p = subprocess.run(["sh", "-c", line], cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, f"{line}\n{p.stdout}{p.stderr}"
    return p.stdout


def test_help_and_version():
    out = ckc_run("--help").stdout
    for word in ("compile", "inspect", "random-weights", "Exit codes"):
        assert word in out
    assert 'cc -O3 -fPIC -shared -I "$(ckc --include-dir)"' in ckc_run("compile", "--help").stdout
    assert ckc_run("--include-dir").stdout.strip() == os.path.join(ROOT, "runtime", "include") == ckc.include_dir()
    assert re.match(r"ckc \d+\.\d+\.\d+", ckc_run("--version").stdout)


def test_list_passes_in_pipeline_order():
    names = [line.split()[0] for line in ckc_run("--list-passes").stdout.splitlines()]
    assert names == ["eliminate_reshapes", "absorb_blas", "constant_fold", "absorb_causal_mask", "fuse_dags",
                     "fuse_patterns", "fuse_matmul_add", "fuse_parallel_linears", "dce", "fuse_elementwise", "fold_layers"]


def test_report_counts_nodes_around_every_pass(tmp_path):
    cfg = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    rep = ckc_run("compile", cfg, "-o", str(tmp_path / "m.c"), "--report").stdout
    rows = {l.split()[0]: (int(l.split()[1]), int(l.split()[3])) for l in rep.splitlines()
            if l.startswith("  ") and "->" in l}
    assert list(rows) == [line.split()[0] for line in ckc_run("--list-passes").stdout.splitlines()]
    assert rows["fuse_parallel_linears"][1] < rows["fuse_parallel_linears"][0] + 4  # 2 GEMMs instead of 5, + slices
    assert rows["fuse_matmul_add"][1] < rows["fuse_matmul_add"][0]  # the residual adds went into the GEMMs
    assert all(rows[a][1] == rows[b][0] for a, b in zip(list(rows), list(rows)[1:]))  # counts chain up
    off = ckc_run("compile", cfg, "-o", str(tmp_path / "n.c"), "--report", "--disable-pass", "fuse_matmul_add").stdout
    assert "fuse_matmul_add" not in off.split("memory plan")[0]


def test_inspect_text_json_weights():
    cfg = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    text = ckc_run("inspect", cfg).stdout
    assert "block  L  MATMUL attn_in[T, 64], self_attn.{q,k,v}_proj.weight[128, 64]:weight -> {q,k,v}[T, 128]" in text
    assert text.count("\n  block ") == len([l for l in text.splitlines() if l.startswith("  block ")])
    j = json.loads(ckc_run("inspect", cfg, "--json").stdout)
    assert set(j) >= {"header", "block", "footer", "plan", "model", "passes"}
    assert j["block"]["layers"] == 2
    assert j["plan"]["block"]["arena_per_token"] <= j["plan"]["block"]["naive_per_token"]
    names = [l.split()[0] for l in ckc_run("inspect", cfg, "--weights").stdout.splitlines()]
    assert "model.layers.1.self_attn.k_proj.weight" in names and "lm_head.weight" in names
    assert len(names) == 3 + 2 * 9


def test_inspect_plan_and_compile_report(tmp_path):
    cfg = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    plan = ckc_run("inspect", cfg, "--plan").stdout
    assert "memory plan: first-fit placement, memory-aware order, in-place on" in plan
    rep = ckc_run("compile", cfg, "-o", str(tmp_path / "m.c"), "--report").stdout
    assert re.search(r"block\s+[\d.]+ KiB\s+[\d.]+ KiB\s+[\d.]+ KiB", rep)
    naive = ckc_run("compile", cfg, "-o", str(tmp_path / "n.c"), "--report", "--placement", "naive", "--no-inplace").stdout
    assert "naive placement" in naive and "in-place off" in naive


@pytest.mark.parametrize("family", [f["model_type"] for f in registry()["families"]])
def test_train_report_and_warning_free_c(family, tmp_path):
    """--train: the report adds training memory (the gradient arena reuses memory: planned < naive), the
    generated C with its backward is warning-free C99, and the manifest adds train.c."""
    cfg = os.path.join(ROOT, "models", f"tiny-{family}", "config.json")
    c = str(tmp_path / "m.c")
    p = ckc_run("compile", cfg, "--train", "-o", c, "--report")
    rep = p.stdout
    assert "in-place off" in rep and "training memory (ckc compile --train):" in rep
    assert "saved activations" in rep and "AdamW state" in rep
    units = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
    row = re.search(r"gradient arena: block\s+([\d.]+) (\S+)\s+([\d.]+) (\S+)\s+([\d.]+) (\S+)", rep).groups()
    planned, naive, lower = [float(row[i]) * units[row[i + 1]] for i in (0, 2, 4)]
    assert lower <= planned < naive
    if family == "gpt2":  # GPT2Config's default dropout
        assert "uses dropout (attn_pdrop 0.1, embd_pdrop 0.1, resid_pdrop 0.1); ckc trains without dropout" in p.stderr
    for flags in ("", "-DCK_MODEL_MAIN", "-DCK_TRACE"):
        sh(f"cc -std=c99 -Wall -Wextra -pedantic -Werror {flags} -fsyntax-only -I runtime/include {c}")
    assert any(k.endswith("kernels/train.c") for k in open(c + ".kernels").read().split())
    bad = ckc_run("compile", cfg, "--train", "--target", "gcu", "-o", str(tmp_path / "g.c"), check=False)
    assert bad.returncode == 1 and ("--train runs on --target cpu" in bad.stderr or
                                    "--target gcu has no mixture-of-experts kernels" in bad.stderr), bad.stderr


def test_dump_after_prints_the_ir(tmp_path):
    cfg = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    p = ckc_run("compile", cfg, "-o", str(tmp_path / "m.c"), "--dump-after", "fuse_matmul_add")
    assert "; IR after fuse_matmul_add" in p.stderr
    assert "MATMUL_ADD" in p.stderr


@pytest.mark.parametrize("config", [tiny(), tiny(attention_bias=True, mlp_bias=True, tie_word_embeddings=True)])
def test_generated_c_is_warning_free_c99(build, config):
    b = build(config)
    c = os.path.join(b.folder, "model.c")
    sh(f"cc -std=c99 -Wall -Wextra -pedantic -Werror -fsyntax-only -I runtime/include {c}")
    sh(f"cc -std=c99 -Wall -Wextra -pedantic -Werror -DCK_MODEL_MAIN -fsyntax-only -I runtime/include {c}")
    sh(f"cc -std=c99 -Wall -Wextra -pedantic -Werror -DCK_TRACE -fsyntax-only -I runtime/include {c}")
    kernels = open(c + ".kernels").read().split()
    assert all(os.path.isabs(k) and os.path.exists(k) for k in kernels)
    sh("cc -std=c99 -Wall -Wextra -pedantic -Werror -fopenmp -fsyntax-only -I runtime/include " + " ".join(kernels))


def test_the_documented_cc_line_from_any_folder(tmp_path):
    """`python -m ckc` (what the `ckc` command runs) from a folder outside the checkout, then the README's
    cc line with -I "$(ckc --include-dir)" and relative paths."""
    import sys
    cfg = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    ckc_cmd = f"{sys.executable} -m ckc"
    sh(f"{ckc_cmd} compile {cfg} -o out/model.c", cwd=tmp_path)
    sh(f'cc -O3 -fPIC -shared -I "$({ckc_cmd} --include-dir)" out/model.c $(cat out/model.c.kernels) '
       f"-lopenblas -lm -fopenmp -o out/libmodel.so", cwd=tmp_path)
    assert (tmp_path / "out" / "libmodel.so").exists()
    assert "-I \"$(ckc --include-dir)\"" in (tmp_path / "out" / "model.c").read_text()


def test_main_executable_and_build_examples_generate_like_python(build, tmp_path):
    b = build(tiny())
    c = os.path.join(b.folder, "model.c")
    p = prompt(4, 256, seed=9)
    expected = " ".join(map(str, b.model().generate(p, 12)))
    exe = tmp_path / "model"
    sh(f"cc -O2 -DCK_MODEL_MAIN -I runtime/include {c} $(cat {c}.kernels) -lopenblas -lm -fopenmp -o {exe}")
    assert sh(f"{exe} {b.weights} -n 12 -t 2 {' '.join(map(str, p))}").strip() == expected
    dl = tmp_path / "dlopen_generate"
    sh(f"cc -O2 -o {dl} build_examples/dlopen_generate.c -ldl")
    # it dlclose()s the model: OpenMP's idle threads must not crash the exit (they did 18/20 before
    # the runtime pinned libgomp), so run it enough times to catch a regression
    for _ in range(10):
        assert sh(f"{dl} {b.so} {b.weights} 12 {' '.join(map(str, p))}").strip() == expected
    linked = tmp_path / "linked_generate"
    sh(f"cc -O2 -I runtime/include -o {linked} build_examples/linked_generate.c {c} $(cat {c}.kernels) "
       f"-lopenblas -lm -fopenmp")
    assert sh(f"{linked} {b.weights} 12 {' '.join(map(str, p))}").strip() == expected
    # several prompts in one handle (ck_model_batch): each line what that prompt alone gives
    prompts = [p, prompt(9, 256, seed=10), prompt(1, 256, seed=11)]
    m = b.model()
    want = [" ".join(map(str, m.generate(q, 12, stop_at_eos=False)[len(q):])) for q in prompts]
    batched = tmp_path / "batch_generate"
    sh(f"cc -O2 -Wall -Werror -I runtime/include -o {batched} build_examples/batch_generate.c {c} $(cat {c}.kernels) "
       f"-lopenblas -lm -fopenmp")
    got = sh(f"{batched} {b.weights} 12 {' '.join(','.join(map(str, q)) for q in prompts)}").strip().splitlines()
    assert got == want


@pytest.mark.parametrize("config", REAL, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_real_shaped_configs_plan_and_emit(config, tmp_path):
    """Real model shapes compile without weights; the plan is sane and the C compiles."""
    cfg = json.load(open(config))
    out = tmp_path / "model.c"
    rep = ckc_run("compile", config, "-o", str(out), "--report").stdout
    j = json.loads(ckc_run("inspect", config, "--json").stdout)
    blk = j["plan"]["block"]
    C = cfg.get("hidden_size", cfg.get("n_embd"))
    # the plan holds at least the block's largest activation, and reuse keeps it under the naive sum
    largest = max(4 * int(np.prod([d for d in t["shape"] if d != "T"]))
                  for t in j["block"]["tensors"].values() if t["storage"] == "activation" and "T" in t["shape"])
    assert largest <= blk["lower_bound_per_token"] <= blk["arena_per_token"] <= blk["naive_per_token"]
    assert blk["arena_per_token"] < 2 * blk["lower_bound_per_token"]
    assert j["model"]["num_layers"] == cfg.get("num_hidden_layers", cfg.get("n_layer"))
    assert "arena:" in rep
    src = out.read_text()
    assert f"#define CK_DIM {C} " in src
    assert src.count("static int ck_block(") == 1
    sh(f"cc -std=c99 -Wall -Wextra -pedantic -Werror -fsyntax-only -I runtime/include {out}")
    sh(f"cc -std=c99 -Wall -Wextra -pedantic -Werror -DCK_TRACE -fsyntax-only -I runtime/include {out}")


def test_outputs_never_replace_a_non_regular_file(tmp_path):
    """-o /dev/null once replaced the device node with a regular file (the output is renamed into place)."""
    cfg = os.path.join(ROOT, "models", "tiny-llama", "config.json")
    fifo = tmp_path / "pipe.c"
    os.mkfifo(fifo)
    (tmp_path / "dir.c").mkdir()
    for dest in (str(fifo), str(tmp_path / "dir.c")):
        p = ckc_run("compile", cfg, "-o", dest, check=False)
        assert p.returncode != 0 and "is not a regular file" in p.stderr
    assert fifo.is_fifo() and (tmp_path / "dir.c").is_dir()
    assert not (tmp_path / "pipe.c.kernels").exists()
