#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Benchmark a compiled LLM against PyTorch eager on the same weights, in one run.

Default: the stories110M shape (models/stories110m: dim 768, 12 layers, 12 heads,
FFN 2048, vocab 32000, tied) with deterministic random weights, 2 threads:
  prefill  128 tokens from position 0 (logits for every position)
  decode   64 single-token steps through the KV cache after a 16-token prompt (--context N: an N-token one)

Contenders, each in its own worker process (so each has its own OpenMP setup):
  ckc            the compiled library, 2 threads
  torch          transformers' model class, eager, torch.set_num_threads(2): the defaults
  torch-tuned    the same with OMP_WAIT_POLICY=passive (python/ckc/contenders.py)
The parent interleaves single measurements round-robin, so every contender sees
the same machine conditions (shared VMs drift), and reports medians. Logits of
every contender are compared, so a fast wrong answer cannot pass.

    scripts/bench_llm.py [--shape stories110m|1.1b|moe | --config CONFIG] [--threads 2] [--reps 7]

Against llama.cpp (llama-cpp-python; scripts/llama_cpp.sh builds it once):
    scripts/bench_llm.py --against llama.cpp [--shape 1.1b|moe] [--threads 1,2]
                         [--formats f32,f16,q8_0,q4_0,q4_1,q4_K_M,q4_0-mix] [--gguf FILE]
writes the random weights as one GGUF per format with `ckc quantize` (pure: every
matrix in that type; or, for q4_K_M, q5_K_M and the NAME-mix formats, with
llama-quantize's default mix: the embedding/output matrix in Q6_K or Q8_0, as the
files people download) or takes --gguf, a published file (the demo's SmolLM2 Q4_1:
~/.cache/ckc/models), and both run that same file: ckc compiled from it,
llama.cpp loading it. Prefill is 128 tokens with the last position's logits
(what llama-bench measures), decode 64 steps; both at --threads, KV cache in
f32 for both. Besides tokens/s and ratios it prints decode as a fraction of
this machine's read bandwidth, measured in the same run (bytes of weights
read per token / time per token). Every table starts with the CPU's model and flags.

--kernels LEVEL (avx512, avx2-vnni or avx2) runs both at an instruction-set level below this CPU's, as
another x86 CPU would: ckc with CK_KERNELS=LEVEL, llama.cpp built at that level (scripts/llama_cpp.sh --lib,
cached) and loaded through LLAMA_CPP_LIB_PATH; the header says what each ran. On an AVX-512 machine this
measures the AVX2 kernels an AMD Zen 2/3 or an Intel client CPU runs, against llama.cpp's AVX2 build.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import ckc
from ckc import safetensors
from ckc.contenders import configure_torch, machine, worker_env


# ---- worker: one contender, driven over stdin/stdout --------------------------

def huge_share(path):
    """% of this process's resident pages of the file at `path` held by 2 MiB page-table entries, from
    /proc/self/smaps (-1 where it does not say): decode streams the weights, and 4 KiB pages cost TLB walks"""
    try:
        text = open("/proc/self/smaps").read()
    except OSError:
        return -1.0
    rss = pmd = 0
    mine = False
    real = os.path.realpath(path)
    for line in text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and ":" not in head[0]:  # a mapping's first line: range perms offset dev inode path
            mine = len(head) == 6 and head[5].strip() == real
        elif mine and line.startswith("Rss:"):
            rss += int(line.split()[1])
        elif mine and line.startswith("FilePmdMapped:"):
            pmd += int(line.split()[1])
    return 100.0 * pmd / rss if rss else -1.0


def worker(kind, so, weights, config, threads, n_prefill, n_decode, logits_path, vocab=None, context=16):
    import numpy as np

    vocab = vocab or json.load(open(config))["vocab_size"]
    toks = [int(t) for t in np.random.default_rng(0).integers(0, vocab, max(n_prefill, context + n_decode))]
    prompt = toks[:context]
    last_only = weights.endswith(".gguf")  # the llama.cpp comparison: last-position logits, like llama-bench
    if kind == "llama.cpp":
        from llama_cpp import Llama
        L = Llama(weights, n_ctx=max(n_prefill, context + n_decode) + 16, n_threads=threads, n_threads_batch=threads,
                  n_batch=512, n_ubatch=512, type_k=0, type_v=0, verbose=False)

        def prefill():
            L.reset()
            L.eval(toks[:n_prefill])  # without logits_all, llama-cpp-python keeps no scores: read the context's
            return np.ctypeslib.as_array(L._ctx.get_logits(), shape=(1, L.n_vocab())).copy()

        def decode():
            L.reset()
            L.eval(prompt)
            t0 = time.perf_counter()
            for i in range(n_decode):
                L.eval([toks[context + i]])
            return time.perf_counter() - t0
    elif kind == "ckc":
        m = ckc.LlmModel(so, weights, threads=threads)

        def prefill():
            m.kv_cache_disable()  # a fresh sequence from position 0
            return m.forward(toks[:n_prefill], last_only=last_only)

        def decode():
            m.kv_cache_enable(context + n_decode)
            m.forward(prompt)
            t0 = time.perf_counter()
            for i in range(n_decode):
                m.decode(toks[context + i])
            return time.perf_counter() - t0
    else:
        import torch
        from transformers import AutoModelForCausalLM

        configure_torch(kind, threads)
        ref = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).eval()

        def prefill():
            with torch.no_grad():
                return ref(torch.tensor([toks[:n_prefill]])).logits[0].numpy()

        def decode():
            with torch.no_grad():
                past = ref(torch.tensor([prompt]), use_cache=True).past_key_values
                t0 = time.perf_counter()
                for i in range(n_decode):
                    past = ref(torch.tensor([[toks[context + i]]]), past_key_values=past, use_cache=True).past_key_values
                return time.perf_counter() - t0

    np.save(logits_path, prefill())  # warm-up, and the answer to compare
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "prefill":
            t0 = time.perf_counter()
            prefill()
            print(time.perf_counter() - t0, flush=True)
        elif cmd == "decode":
            print(decode(), flush=True)
        elif cmd == "rss":  # peak resident memory of this worker, MiB
            print(int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0]) / 1024, flush=True)
        elif cmd == "huge":  # % of the weights file's resident pages this worker maps on 2 MiB pages (-1: unknown)
            print(huge_share(weights), flush=True)
        elif cmd == "quit":
            break


# ---- parent ----------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None, help="a config.json (default: --shape's)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="stories110m",
                    help="the model shape, with random weights: stories110m (llama2.c's), 1.1b (TinyLlama's)")
    ap.add_argument("--threads", default="2", help="threads; --against llama.cpp takes a list, e.g. 1,2 (a table each)")
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--context", type=int, default=16,
                    help="decode after a prompt of this many tokens (default 16): a chat's cache holds hundreds, and "
                         "attention reads all of them per step (not counted in %%bw, which is the weights' bytes)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(ckc.ROOT, "out", "bench"))
    ap.add_argument("--ckc-args", default="", help="extra `ckc compile` arguments, e.g. '--disable-pass fuse_matmul_add'")
    ap.add_argument("--contenders", default="ckc,torch,torch-tuned")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--so", help=argparse.SUPPRESS)
    ap.add_argument("--weights", help=argparse.SUPPRESS)
    ap.add_argument("--logits", help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--against", choices=["llama.cpp"], help="compare with llama.cpp on GGUF files instead")
    ap.add_argument("--formats", default="f32,f16,q8_0,q4_0,q4_1,q4_K_M",
                    help="--against llama.cpp: the formats to write the weights in (ckc quantize --type; "
                         f"{', '.join(LLAMA_MIXES)}: llama.cpp's own quantizer and its default mix)")
    ap.add_argument("--gguf", help="--against llama.cpp: a GGUF file to run instead of the random weights")
    ap.add_argument("--kernels", choices=sorted(LEVEL_FLAGS),
                    help="--against llama.cpp: both at this instruction-set level (ckc's CK_KERNELS, llama.cpp "
                         "built at it), below this CPU's")
    a = ap.parse_args()
    for name in ("prefill", "decode", "context"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} {getattr(a, name)}: at least 1 token")
    a.config = a.config or os.path.join(ckc.ROOT, "models", SHAPES[a.shape], "config.json")
    if a.worker:
        return worker(a.worker, a.so, a.weights, a.config, int(a.threads), a.prefill, a.decode, a.logits, a.vocab,
                      a.context)
    if a.against:
        return against_llama_cpp(a)
    if len(thread_counts(a)) != 1:
        sys.exit("bench_llm: one --threads value against PyTorch (a list is for --against llama.cpp)")
    print(machine())

    import numpy as np

    name = os.path.basename(os.path.dirname(os.path.abspath(a.config)))
    out = os.path.join(a.out, name)
    print(f"== {name}: compile, build, weights in {out}", file=sys.stderr)
    so = ckc.build_library(ckc.compile_model(a.config, out, args=a.ckc_args.split()))
    weights = os.path.join(out, "weights")
    if not os.path.exists(os.path.join(weights, "model.safetensors")):
        ckc.random_weights(a.config, weights, seed=0)

    kinds = a.contenders.split(",")
    procs = {}
    for k in kinds:
        env = worker_env(k, os.environ)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", k, "--so", so, "--weights", weights,
               "--config", a.config, "--threads", str(a.threads), "--prefill", str(a.prefill),
               "--decode", str(a.decode), "--context", str(a.context), "--logits", os.path.join(out, f"logits-{k}.npy")]
        procs[k] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for k, p in procs.items():
        if p.stdout.readline().strip() != "ready":
            sys.exit(f"worker {k} failed to start")
        print(f"== {k} ready", file=sys.stderr)

    def ask(k, cmd):
        procs[k].stdin.write(cmd + "\n")
        procs[k].stdin.flush()
        return float(procs[k].stdout.readline())

    times = {k: {"prefill": [], "decode": []} for k in kinds}
    for rep in range(a.reps):
        for k in kinds:  # round-robin: the same machine conditions for everyone
            times[k]["prefill"].append(ask(k, "prefill"))
        for k in kinds:
            times[k]["decode"].append(ask(k, "decode"))
        print(f"== rep {rep + 1}/{a.reps}", file=sys.stderr)
    for p in procs.values():
        p.stdin.write("quit\n")
        p.stdin.flush()
        p.wait()

    logits = {k: np.load(os.path.join(out, f"logits-{k}.npy")) for k in kinds}
    cfg = json.load(open(a.config))
    print(f"\n{name}: {cfg['num_hidden_layers']} layers, dim {cfg['hidden_size']}, vocab {cfg['vocab_size']}, "
          f"{a.threads} threads, median of {a.reps} interleaved runs")
    for k in kinds[1:]:
        print(f"max |logit {kinds[0]} - {k}| = {float(np.max(np.abs(logits[kinds[0]] - logits[k]))):.2e}")
    rate = {k: {"prefill": a.prefill / statistics.median(times[k]["prefill"]),
                "decode": a.decode / statistics.median(times[k]["decode"])} for k in kinds}
    header = f"{'tokens/s':18}" + "".join(f"{k:>13}" for k in kinds) + "".join(
        f"{kinds[0] + '/' + k:>20}" for k in kinds[1:])
    print(header)
    for what, n in (("prefill", a.prefill), ("decode", a.decode)):
        row = f"{what + ' ' + str(n):18}" + "".join(f"{rate[k][what]:13.1f}" for k in kinds)
        row += "".join(f"{rate[kinds[0]][what] / rate[k][what]:19.2f}x" for k in kinds[1:])
        print(row)
    n_params = sum(v.size for v in safetensors.load(weights).values())
    print(f"decode streams {n_params * 4 / 1e6:.0f} MB of f32 weights per token: "
          f"{n_params * 4 * rate[kinds[0]]['decode'] / 1e9:.1f} GB/s for {kinds[0]}")


# ---- ckc vs llama.cpp on GGUF files ------------------------------------------------

# folders of models/; moe: a scaled-down Qwen3-MoE (16 experts of 512, top 2, 12 layers of 1024)
SHAPES = {"stories110m": "stories110m", "1.1b": "tinyllama-1.1b", "moe": "qwen3-moe-mini"}

# llama-quantize's ftypes (llama.h's LLAMA_FTYPE_MOSTLY_*) for the formats written by llama.cpp itself, with its
# default mix (the embedding / output matrix in a wider type, as in the files people download)
LLAMA_MIXES = {"q4_K_M": 15, "q5_K_M": 17, "q4_0-mix": 2, "q4_1-mix": 3, "q8_0-mix": 7, "q5_0-mix": 8,
               "q5_1-mix": 9, "q6_K-mix": 18}


def thread_counts(a):
    return [int(t) for t in str(a.threads).split(",")]


def bandwidth_probe(folder):
    """A worker that measures the read bandwidth on each "read THREADS" line (GB/s of a streaming read of 1 GiB):
    bench_decode.py's probe, the best of 3 passes of each loop the CPU runs (128-bit loads with and without
    software prefetch, 256- and 512-bit loads). Asked right before each decode measurement, so that each
    measurement's percentage divides by what the memory gave at that moment (a shared VM's bandwidth drifts:
    50 to 85 GB/s with 2 threads within minutes on an AMD EPYC VM, faster than a round of the contenders); %bw
    is the median of those per-measurement fractions."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_decode
    p = subprocess.Popen([bench_decode.build(folder), "f32", "64", "64", "64", "1"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "ready":
        sys.exit("bench_llm: the bandwidth probe (bench_decode) failed to start")
    return p


def read_bandwidth(probe, threads):
    probe.stdin.write(f"read {threads}\n")
    probe.stdin.flush()
    return float(probe.stdout.readline())


def decode_bytes(path):
    """Bytes of weights one decode step reads: every tensor but the token embedding's unread rows and, in a
    mixture of experts, the experts a token does not choose (k of n: attention + router + k experts)."""
    import gguf
    r = gguf.GGUFReader(path)
    names = {t.name for t in r.tensors}
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    used = r.fields.get(f"{arch}.expert_used_count")
    count = r.fields.get(f"{arch}.expert_count")
    total = 0
    for t in r.tensors:
        if t.name == "token_embd.weight" and "output.weight" in names:
            total += int(t.n_bytes) // int(t.shape[1])  # one row
        elif "_exps." in t.name and used and count:
            total += int(t.n_bytes) * int(used.parts[-1][0]) // int(count.parts[-1][0])
        else:
            total += int(t.n_bytes)
    return total, int(next(t for t in r.tensors if t.name == "token_embd.weight").shape[1])


# --kernels: the /proc/cpuinfo flags each level needs (as runtime/kernels/cpu.c's paths)
LEVEL_FLAGS = {"avx2": ("avx2", "fma", "f16c"), "avx2-vnni": ("avx2", "fma", "f16c", "avx_vnni"),
               "avx512": ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni")}


def level_envs(a, script):
    """Each contender's worker environment: at --kernels' level, ckc capped by CK_KERNELS and llama.cpp's
    libraries built at that level (LLAMA_CPP_LIB_PATH); and the header line saying so."""
    envs = {k: worker_env("ckc", os.environ) for k in ("ckc", "llama.cpp")}
    if not a.kernels:
        return envs, "kernels: this CPU's best (ckc's dispatch; llama.cpp: scripts/llama_cpp.sh --print)"
    flags = set()
    with open(os.environ.get("CKC_CPUINFO", "/proc/cpuinfo")) as f:  # (CKC_CPUINFO: tests)
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    missing = [x for x in LEVEL_FLAGS[a.kernels] if x not in flags]
    if missing:
        sys.exit(f"bench_llm: --kernels {a.kernels}: this CPU has no {' '.join(missing)}")
    print(f"== llama.cpp at {a.kernels} (scripts/llama_cpp.sh --lib; a build takes several minutes once)",
          file=sys.stderr)
    run = subprocess.run([script, "--lib"], env=dict(os.environ, CKC_LLAMA_CPP_CONFIG=a.kernels),
                         stdout=subprocess.PIPE, text=True)
    lib = run.stdout.split()[-1] if run.stdout.split() else ""
    if run.returncode or not os.path.isfile(os.path.join(lib, "libllama.so")):
        sys.exit(f"bench_llm: --kernels {a.kernels}: llama_cpp.sh --lib gave no llama.cpp build at that level "
                 f"(exit code {run.returncode}; its messages are above)")
    envs["ckc"]["CK_KERNELS"] = a.kernels
    envs["llama.cpp"]["LLAMA_CPP_LIB_PATH"] = lib
    info = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
                          env=envs["llama.cpp"], stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    # ("CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 0 | ...": the features it was built with)
    have = " ".join(x.split("=")[0].split(":")[-1].strip() for x in info.split("|") if x.strip().endswith("= 1"))
    return envs, (f"kernels: {a.kernels} (ckc: CK_KERNELS={a.kernels}; llama.cpp built at it, {lib}: {have})")


def against_llama_cpp(a):
    import numpy as np

    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([os.path.join(here, "llama_cpp.sh")], check=True, stdout=sys.stderr)
    envs, level = level_envs(a, os.path.join(here, "llama_cpp.sh"))
    name = "gguf-" + (os.path.basename(a.gguf) if a.gguf else
                      os.path.basename(os.path.dirname(os.path.abspath(a.config))))
    out = os.path.join(a.out, name)
    os.makedirs(out, exist_ok=True)
    files = {}
    if a.gguf:
        files[os.path.basename(a.gguf)] = os.path.abspath(a.gguf)
    else:
        weights = os.path.join(out, "weights")
        if not os.path.exists(os.path.join(weights, "model.safetensors")):
            ckc.random_weights(a.config, weights, seed=0)
        for f in a.formats.split(","):
            path = os.path.join(out, f"model.{f}.gguf")
            if not os.path.exists(path) and f in LLAMA_MIXES:  # llama-quantize's default mix for that type
                import ctypes
                import llama_cpp
                f32 = os.path.join(out, "model.f32.gguf")
                if not os.path.exists(f32):
                    ckc.build.run([ckc.ckc_binary(), "quantize", weights, "-o", f32, "--type", "f32"])
                print(f"== llama.cpp's quantizer: {f}", file=sys.stderr)
                p = llama_cpp.llama_model_quantize_default_params()
                p.ftype = LLAMA_MIXES[f]
                p.nthread = os.cpu_count() or 2
                if llama_cpp.llama_model_quantize(f32.encode(), path.encode(), ctypes.byref(p)) != 0:
                    sys.exit(f"llama.cpp could not quantize to {f}")
            elif not os.path.exists(path):
                print(f"== ckc quantize --type {f}", file=sys.stderr)
                ckc.build.run([ckc.ckc_binary(), "quantize", weights, "-o", path, "--type", f])
            files[f] = path
    sos = {f: ckc.build_library(ckc.compile_model(p, os.path.join(out, "c-" + f))) for f, p in files.items()}
    print(machine())
    print(level)
    for threads in thread_counts(a):
        compare_with_llama_cpp(a, name, out, files, sos, threads, envs)


def compare_with_llama_cpp(a, name, out, files, sos, threads, envs):
    """One table: every file in ckc and in llama.cpp at `threads` threads, interleaved."""
    import numpy as np

    probe = bandwidth_probe(out)

    procs = {}

    def died(key, what):
        code = procs[key].wait()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        who = "the reference crashed: llama.cpp" if key[1] == "llama.cpp" else "ckc"
        sys.exit(f"{who} ({key[0]}) died with {how} while {what}" +
                 (" (rebuild it for this CPU: scripts/llama_cpp.sh --rebuild)" if key[1] == "llama.cpp" else ""))

    # one worker at a time, each loaded before the next starts: ckc's loader reads a file that the page cache holds
    # on small pages again onto huge ones (runtime/io/huge_pages.c), which it cannot do while another process maps
    # those pages; llama.cpp then maps the same page cache
    for f, path in files.items():
        vocab = decode_bytes(path)[1]
        for k in ("ckc", "llama.cpp"):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", k, "--so", sos[f], "--weights", path,
                   "--config", a.config, "--threads", str(threads), "--prefill", str(a.prefill),
                   "--decode", str(a.decode), "--context", str(a.context), "--vocab", str(vocab),
                   "--logits", os.path.join(out, f"logits-{f}-{k}.npy")]
            procs[f, k] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                           env=envs[k])
            if procs[f, k].stdout.readline().strip() != "ready":
                died((f, k), "loading the model")

    def ask(key, cmd):
        try:
            procs[key].stdin.write(cmd + "\n")
            procs[key].stdin.flush()
        except BrokenPipeError:
            died(key, cmd)
        line = procs[key].stdout.readline()
        if not line:
            died(key, cmd)
        return float(line)

    times = {key: {"prefill": [], "decode": []} for key in procs}
    bws = {key: [] for key in procs}  # the probe right before each decode measurement
    for rep in range(a.reps):
        for what in ("prefill", "decode"):
            for key in procs:  # round-robin over formats and contenders
                if what == "decode":
                    bws[key].append(read_bandwidth(probe, threads))
                times[key][what].append(ask(key, what))
        print(f"== rep {rep + 1}/{a.reps}", file=sys.stderr)
    rss = {key: ask(key, "rss") for key in procs}
    huge = {key: ask(key, "huge") for key in procs}
    every_bw = [b for v in bws.values() for b in v]
    bw = statistics.median(every_bw)

    def pct_bw(key, nbytes):
        """decode's bytes per second as a % of the probe taken right before it, median over the rounds"""
        return statistics.median(100 * nbytes * a.decode / t / 1e9 / b for t, b in zip(times[key]["decode"], bws[key]))
    probe.stdin.close()
    probe.wait()
    for p in procs.values():
        p.stdin.write("quit\n")
        p.stdin.flush()
        p.wait()

    print(f"\n{name}: {threads} thread{'s' if threads > 1 else ''}, median of {a.reps} interleaved runs; prefill {a.prefill} tokens "
          f"(last-position logits), decode {a.decode} steps after a {a.context}-token prompt; read bandwidth {bw:.1f} GB/s "
          f"(median of the probes, one before each decode measurement: {min(every_bw):.1f}-{max(every_bw):.1f}; "
          f"%bw: the median of each measurement against its probe)")
    print(f"{'format':10}{'MB':>7} | {'prefill tok/s':>13}{'llama.cpp':>11}{'ratio':>7} | {'decode tok/s':>12}"
          f"{'llama.cpp':>11}{'ratio':>7} | {'ckc %bw':>8}{'l.cpp %bw':>10} | {'RSS MiB':>8}{'l.cpp':>7} | logits")
    for f, path in files.items():
        nb = decode_bytes(path)[0]
        r = {k: {w: (a.prefill if w == "prefill" else a.decode) / statistics.median(times[f, k][w])
                 for w in ("prefill", "decode")} for k in ("ckc", "llama.cpp")}
        la, lb = (np.load(os.path.join(out, f"logits-{f}-{k}.npy")).reshape(-1) for k in ("ckc", "llama.cpp"))
        agree = "same top-1" if la.argmax() == lb.argmax() else "top-1 differs"
        print(f"{f:10}{os.path.getsize(path) / 1e6:7.0f} | {r['ckc']['prefill']:13.1f}{r['llama.cpp']['prefill']:11.1f}"
              f"{r['ckc']['prefill'] / r['llama.cpp']['prefill']:6.2f}x | {r['ckc']['decode']:12.1f}"
              f"{r['llama.cpp']['decode']:11.1f}{r['ckc']['decode'] / r['llama.cpp']['decode']:6.2f}x | "
              f"{pct_bw((f, 'ckc'), nb):7.0f}%{pct_bw((f, 'llama.cpp'), nb):9.0f}% | "
              f"{rss[f, 'ckc']:8.0f}{rss[f, 'llama.cpp']:7.0f} | max|diff| {np.max(np.abs(la - lb)):.2e}, {agree}")
    for f, path in files.items():  # what %bw divides by: a mixture reads the chosen experts only
        pages = ", ".join(f"{k} {huge[f, k]:.0f}%" for k in ("ckc", "llama.cpp") if huge[f, k] >= 0)
        print(f"  {f}: a decode step reads {decode_bytes(path)[0] / 1e6:.0f} MB of the file's "
              f"{os.path.getsize(path) / 1e6:.0f} MB" + (f"; mapped on 2 MiB pages: {pages}" if pages else ""))


if __name__ == "__main__":
    main()
