#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Benchmark compiled exported graphs against PyTorch eager, in one run (the seeds' tables).

Workloads (python/ckc/examples.py, deterministic random weights):
  MLP    3 x (Linear + ReLU), batch x dim: 1x512 32x512 128x512 1x2048 32x2048
  Block  pre-norm transformer block, F.softmax attention (4 heads), batch x seq x dim:
         1x16x64 4x16x64 1x64x128 4x64x128 1x128x256 4x128x256

Contenders, each in its own worker process (its own OpenMP / OpenBLAS setup):
  ckc          the compiled library (one ctypes call per run), 2 threads
  torch        PyTorch eager with its default threading (python/ckc/contenders.py)
  torch-tuned  PyTorch eager with OMP_WAIT_POLICY=passive
  gcu          torch.compile(module, backend="gcu"): ckc behind dynamo (python/ckc/conductor)
  inductor     torch.compile(module): PyTorch's own compiler
The parent interleaves measurements round-robin so every contender sees the same
machine conditions, and reports medians; every contender's outputs are compared.
For gcu, the first call's time (dynamo + AOTAutograd + ckc + cc, cold cache) and the
first call of a second process on the warm cache (no cc) are reported too.

Then the memory plan of the MLP, the block and a GPT-style LM under each planner
ablation (`ckc inspect --json`): arena bytes vs naive sum vs max-live lower bound.

    scripts/bench_graph.py [--threads 2] [--reps 7] [--only mlp|block] [--no-arena]
                           [--contenders ckc,torch,torch-tuned,gcu,inductor]
    scripts/bench_graph.py --paired      eager vs gcu vs inductor in one process (see paired())
    scripts/bench_graph.py --targets     --target cpu vs --target gcu of each graph (see targets())
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import ckc
from ckc.contenders import configure_torch, machine, worker_env

MLP_CONFIGS = [(1, 512), (32, 512), (128, 512), (1, 2048), (32, 2048)]
BLOCK_CONFIGS = [(1, 16, 64), (4, 16, 64), (1, 64, 128), (4, 64, 128), (1, 128, 256), (4, 128, 256)]


def workloads(only):
    out = []
    if only in (None, "mlp"):
        out += [(f"mlp {b}x{d}", "mlp", (b, d)) for b, d in MLP_CONFIGS]
    if only in (None, "block"):
        out += [(f"block {b}x{s}x{d}", "block", (b, s, d)) for b, s, d in BLOCK_CONFIGS]
    return out


def make(kind, dims):
    import torch
    from ckc.examples import MLP, Block, randomize
    g = torch.Generator().manual_seed(1)
    if kind == "mlp":
        b, d = dims
        return randomize(MLP(d), seed=0, std=1.0 / d ** 0.5), torch.randn(b, d, generator=g)
    b, s, d = dims
    return randomize(Block(d, 4, "softmax"), seed=0, std=1.0 / d ** 0.5), torch.randn(b, s, d, generator=g)


# ---- worker -----------------------------------------------------------------------------

def worker(kind, threads, out_dir, only, config=None):
    import numpy as np
    import torch

    runs, first_calls = {}, {}
    for name, wl, dims in workloads(only):
        if config and name != config:
            continue
        module, x = make(wl, dims)
        folder = os.path.join(out_dir, name.replace(" ", "-"))
        if kind in ("gcu", "gcu-load", "inductor"):
            configure_torch("torch", threads)
            # static shapes, one compile per workload (dynamo would go dynamic after two shapes of one module)
            compiled = torch.compile(module, backend="gcu" if kind.startswith("gcu") else "inductor", dynamic=False)

            def call(compiled=compiled, x=x):
                with torch.no_grad():
                    return compiled(x)
            t0 = time.perf_counter()
            call()
            first_calls[name] = time.perf_counter() - t0
            runs[name] = (call, lambda call=call: call().numpy())
        elif kind == "ckc":
            g = ckc.GraphModel(os.path.join(folder, "libmodel.so"), threads=threads)
            call = g.bind(x.numpy())
            runs[name] = (call, lambda call=call: call()[0])
        else:
            configure_torch(kind, threads)

            def call(module=module, x=x):
                with torch.no_grad():
                    return module(x)
            runs[name] = (call, lambda call=call: call().numpy())
        np.save(os.path.join(folder, f"out-{kind}.npy"), runs[name][1]())  # warm-up + the answer
    if first_calls:
        with open(os.path.join(out_dir, f"first-calls-{kind}.json"), "w") as f:
            json.dump(first_calls, f)
    print("ready", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if parts[0] == "quit":
            break
        name, n = " ".join(parts[1:-1]), int(parts[-1])
        call = runs[name][0]
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        print((time.perf_counter() - t0) / n, flush=True)


# ---- parent -------------------------------------------------------------------------------

def fmt_time(s):
    return f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def arena_report(out_dir):
    import torch
    from ckc.examples import GPT, randomize
    cases = [("mlp 32x512", *make("mlp", (32, 512))), ("block 4x64x128", *make("block", (4, 64, 128))),
             ("gpt 4 layers 2x64", randomize(GPT(vocab=256, dim=128, heads=4, layers=4, max_len=64)),
              torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(0)))]
    ablations = [("default (memory-aware, in-place, first-fit)", []), ("fifo order", ["--order", "fifo"]),
                 ("no in-place", ["--no-inplace"]), ("naive placement", ["--placement", "naive"]),
                 ("no passes", sum((["--disable-pass", p] for p in
                                   ("eliminate_reshapes", "absorb_blas", "absorb_causal_mask", "fuse_dags",
                                    "fuse_patterns", "fuse_matmul_add", "fuse_parallel_linears", "dce")), []))]
    print("\nmemory plan (activation arena; weights, inputs and outputs live outside it)")
    print(f"{'graph':20}{'planner':46}{'arena':>11}{'naive sum':>11}{'lower bound':>13}")
    for name, module, x in cases:
        graph = ckc.export(module, (x,), os.path.join(out_dir, "arena", name.replace(" ", "-")))
        for label, args in ablations:
            j = json.loads(ckc.build.run([ckc.ckc_binary(), "inspect", graph, "--json", *args]).stdout)["plan"]
            arena = j["arena_bytes_fixed"]
            naive = max(j[s]["naive_fixed"] for s in ("header", "block", "footer"))
            lower = max(j[s]["lower_bound_fixed"] for s in ("header", "block", "footer"))
            print(f"{name:20}{label:46}{arena / 1024:10.1f}K{naive / 1024:10.1f}K{lower / 1024:12.1f}K")


def paired(a):
    """eager, torch.compile(backend="gcu") and torch.compile (inductor) in one process, interleaved round by
    round: with several torch processes alive, this machine's timings of the torch ones swing by 10x. "direct"
    is the same module exported and compiled for the same target and called through GraphModel.bind (pointers
    bound once, one ctypes call): gcu minus direct is what a call costs between torch.compile and the library.
    "dynamo" is the module under torch.compile with a backend whose compiled function returns a ready output:
    dynamo's own cost per call (its frame, guards, the module call), which every backend pays, with its data in
    the caches. "cold" is the same call right after the direct library call (direct + dynamo, minus direct):
    dynamo's cost when the library has just streamed its weights through the caches, as in every gcu call. With
    weights larger than the last-level cache that cost is several times the warm one (14 -> 110 us after a 64 MiB
    stream, AMD EPYC Zen 5 VM). gcu minus direct minus cold is what ckc's side adds (its runner, and the library
    running between dynamo's frames)."""
    import shutil

    import torch
    torch.set_num_threads(a.threads)
    os.environ["CKC_CACHE_DIR"] = cache = os.path.join(a.out, "paired-cache")
    shutil.rmtree(cache, ignore_errors=True)
    kinds = ["eager", "gcu", "inductor", "direct", "dynamo", "direct+dynamo"]
    print(machine())
    print(f"\n{a.threads} threads, one process, median of {a.reps} interleaved rounds (ratio < 1: gcu is faster); "
          "overhead = gcu - direct, per call; of it, dynamo's own (a backend that returns a ready output; warm: "
          "alone, cold: right after the library's call) and ckc's (the rest: overhead - cold)")
    print(f"{'config':20}{'eager':>11}{'gcu':>11}{'inductor':>11}{'direct':>11}{'overhead':>10}{'dynamo':>9}"
          f"{'cold':>8}{'ckc':>9}{'gcu/eager':>11}{'gcu/ind.':>10}{'gcu 1st call':>14}{'ind. 1st':>10}")
    slower, overheads, tax = [], [], []
    for name, wl, dims in workloads(a.only):
        torch._dynamo.reset()  # dynamo recompiles a code object at most 8 times, then runs it eagerly
        module, x = make(wl, dims)
        fns, first = {"eager": module}, {}
        for k in ("gcu", "inductor"):
            fns[k] = torch.compile(module, backend=k, dynamic=False)
            t0 = time.perf_counter()
            with torch.no_grad():
                fns[k](x)
            first[k] = time.perf_counter() - t0
        folder = os.path.join(a.out, "paired-direct", name.replace(" ", "-"))
        graph = ckc.export(module, (x,), os.path.join(folder, "export"))
        lib = ckc.build_library(ckc.compile_model(graph, folder, args=["--target", "gcu"]))
        model = ckc.GraphModel(lib, threads=a.threads)
        bound = model.bind(x.numpy())
        fns["direct"] = lambda _x, bound=bound: bound()
        with torch.no_grad():
            ready = module(x)

        def ready_backend(gm, example_inputs, ready=ready):
            return lambda *args: (ready,)
        fns["dynamo"] = torch.compile(module, backend=ready_backend, dynamic=False)
        with torch.no_grad():
            fns["dynamo"](x)
        fns["direct+dynamo"] = lambda _x: (fns["direct"](_x), fns["dynamo"](_x))
        times = {k: [] for k in kinds}
        with torch.no_grad():
            n = max(1, int(a.min_time / max(min(timeit(fns[k], x, 1) for k in kinds), 1e-7)))
            for _ in range(a.reps):
                for k in kinds:
                    time.sleep(a.gap / 4)
                    times[k].append(timeit(fns[k], x, n))
        med = {k: statistics.median(v) for k, v in times.items()}
        if med["gcu"] >= med["eager"]:
            slower.append(name)
        cold = max(0.0, med["direct+dynamo"] - med["direct"])
        overheads.append(med["gcu"] - med["direct"])
        tax.append(med["gcu"] - med["direct"] - cold)
        print(f"{name:20}" + "".join(f"{fmt_time(med[k]):>11}" for k in kinds[:4]) +
              f"{fmt_time(med['gcu'] - med['direct']):>10}{fmt_time(med['dynamo']):>9}{fmt_time(cold):>8}"
              f"{fmt_time(tax[-1]):>9}"
              f"{med['gcu'] / med['eager']:10.2f}x{med['gcu'] / med['inductor']:9.2f}x{first['gcu']:13.2f}s"
              f"{first['inductor']:9.2f}s", flush=True)
    print(f"overhead per call (gcu - direct): median {fmt_time(statistics.median(overheads))}, "
          f"max {fmt_time(max(overheads))}; ckc's part (minus dynamo's own, cold): median "
          f"{fmt_time(statistics.median(tax))}, max {fmt_time(max(tax))}")
    print("gcu is faster than eager PyTorch at every config" if not slower else
          f"gcu is NOT faster than eager PyTorch at: {', '.join(slower)}")


def targets(a):
    """The gcu device's cost: each graph compiled with --target cpu and --target gcu, every measurement in a
    fresh process with no other worker alive (an idle worker's threads, or two OpenMP pools in one process,
    skew a 2-core machine by more than the difference measured), alternating cpu and gcu, medians."""
    rows = []
    print(f"\n{a.threads} threads, median of {a.reps} alternating runs, one process per run (ratio > 1: gcu costs more)")
    print(f"{'config':20}{'cpu':>11}{'gcu':>11}{'gcu/cpu':>10}")
    for name, wl, dims in workloads(a.only):
        module, x = make(wl, dims)
        folder = os.path.join(a.out, "targets", name.replace(" ", "-"))
        graph = ckc.export(module, (x,), os.path.join(folder, "export"))
        libs = {t: ckc.build_library(ckc.compile_model(graph, os.path.join(folder, t), args=["--target", t]))
                for t in ("cpu", "gcu")}
        times = {t: [] for t in libs}
        for _ in range(a.reps):
            for t, lib in libs.items():
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", "lib", "--config", lib, "--threads",
                       str(a.threads), "--min-time", str(a.min_time)]
                times[t].append(float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
        med = {t: statistics.median(v) for t, v in times.items()}
        rows.append(med["gcu"] / med["cpu"])
        print(f"{name:20}{fmt_time(med['cpu']):>11}{fmt_time(med['gcu']):>11}{med['gcu'] / med['cpu']:9.2f}x",
              flush=True)
    print(f"gcu/cpu: {min(rows):.2f}x .. {max(rows):.2f}x")


def lib_worker(lib, threads, min_time):
    """One measurement of a compiled library on random inputs: prints seconds per run."""
    import numpy as np
    g = ckc.GraphModel(lib, threads=threads)
    rng = np.random.default_rng(0)
    call = g.bind(*[rng.standard_normal(s.shape).astype(s.dtype) for s in g.inputs])
    call()
    # Debian's OpenBLAS starts its thread pool when it loads, and each pool thread spins (sched_yield) for
    # ~0.1 s before it sleeps: on 2 cores that can push the model's two OpenMP threads onto one core, and
    # runs then cost ~GOMP_SPINCOUNT spins each (measured 2 ms instead of 30 us). The run is timed after it.
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.25:
        call()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < min_time / 5:  # calls per measurement
        call()
        n += 1
    n = max(1, 5 * n)
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    print((time.perf_counter() - t0) / n)


def timeit(fn, x, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn(x)
    return (time.perf_counter() - t0) / n


def first_call_report(a, kinds, gcu_cache):
    """gcu's first call in the measured worker (cold cache: ckc + cc) and in a fresh process on the warm cache;
    inductor's first call for comparison."""
    load = lambda k: json.load(open(os.path.join(a.out, f"first-calls-{k}.json")))  # noqa: E731
    cold, warm = load("gcu"), {}
    for name in cold:  # each in a fresh process, as a second run of a program would be
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "gcu-load", "--threads", str(a.threads),
               "--out", a.out, "--config", name]
        env = dict(os.environ, CKC_CACHE_DIR=gcu_cache)
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        p.communicate("quit\n")
        warm.update(load("gcu-load"))
    ind = load("inductor") if "inductor" in kinds else {}
    print(f"\nfirst call (compile) times{'':10}{'gcu cold':>12}{'gcu cached':>12}{'inductor':>12}")
    for name in cold:
        print(f"{name:36}{cold[name]:11.2f}s{warm[name]:11.2f}s" + (f"{ind[name]:11.2f}s" if name in ind else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.05, help="seconds per measurement (calls are batched)")
    ap.add_argument("--only", choices=["mlp", "block"])
    ap.add_argument("--gap", type=float, default=0.2,
                    help="seconds of rest before each measurement (PyTorch's OpenMP threads spin after a call)")
    ap.add_argument("--no-arena", action="store_true", help="skip the memory-plan report")
    ap.add_argument("--contenders", default="ckc,torch,torch-tuned")
    ap.add_argument("--out", default=os.path.join(ckc.ROOT, "out", "bench-graph"))
    ap.add_argument("--paired", action="store_true",
                    help="only eager vs torch.compile (gcu, inductor), in one process, interleaved")
    ap.add_argument("--targets", action="store_true",
                    help="only the compiled graphs for --target cpu vs --target gcu, one process per run")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)  # a worker for one workload
    a = ap.parse_args()
    if a.worker == "lib":
        return lib_worker(a.config, a.threads, a.min_time)
    if a.worker:
        return worker(a.worker, a.threads, a.out, a.only, a.config)
    if a.targets:
        return targets(a)
    if a.paired:
        return paired(a)

    import numpy as np

    wls = workloads(a.only)
    kinds = a.contenders.split(",")
    for i, (name, wl, dims) in enumerate(wls):
        print(f"== [{i + 1}/{len(wls)}] export + compile + build {name}", file=sys.stderr)
        module, x = make(wl, dims)
        folder = os.path.join(a.out, name.replace(" ", "-"))
        graph = ckc.export(module, (x,), os.path.join(folder, "export"))
        ckc.build_library(ckc.compile_model(graph, folder))

    gcu_cache = os.path.join(a.out, "gcu-cache")
    if "gcu" in kinds:
        import shutil
        shutil.rmtree(gcu_cache, ignore_errors=True)  # the first call compiles (cold)
    procs = {}
    for k in kinds:
        env = worker_env(k, os.environ)
        env["CKC_CACHE_DIR"] = gcu_cache
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", k, "--threads", str(a.threads), "--out", a.out]
        if a.only:
            cmd += ["--only", a.only]
        procs[k] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for k, p in procs.items():
        if p.stdout.readline().strip() != "ready":
            sys.exit(f"worker {k} failed to start")

    def ask(k, name, n):
        time.sleep(a.gap)  # the previous contender's idle threads stop spinning before this one runs
        procs[k].stdin.write(f"run {name} {n}\n")
        procs[k].stdin.flush()
        return float(procs[k].stdout.readline())

    rows = []
    for name, _, _ in wls:
        # calls per measurement: enough for --min-time on the slowest contender's first run
        n = {k: max(1, int(a.min_time / max(ask(k, name, 1), 1e-7))) for k in kinds}
        times = {k: [] for k in kinds}
        for _ in range(a.reps):
            for k in kinds:
                times[k].append(ask(k, name, n[k]))
        med = {k: statistics.median(times[k]) for k in kinds}
        folder = os.path.join(a.out, name.replace(" ", "-"))
        outs = {k: np.load(os.path.join(folder, f"out-{k}.npy")) for k in kinds}
        err = max(float(np.max(np.abs(outs[kinds[0]] - outs[k]))) for k in kinds[1:]) if len(kinds) > 1 else 0.0
        rows.append((name, med, err))
        print(f"== {name}: " + ", ".join(f"{k} {fmt_time(med[k])}" for k in kinds), file=sys.stderr)
    for p in procs.values():
        p.stdin.write("quit\n")
        p.stdin.flush()
        p.wait()

    print(f"\n{a.threads} threads, median of {a.reps} interleaved measurements (ratio < 1: {kinds[0]} is faster)")
    head = f"{'config':22}" + "".join(f"{k:>13}" for k in kinds) + "".join(
        f"{kinds[0] + '/' + k:>18}" for k in kinds[1:]) + f"{'max |diff|':>12}"
    print(head)
    slower = []
    for name, med, err in rows:
        line = f"{name:22}" + "".join(f"{fmt_time(med[k]):>13}" for k in kinds)
        for k in kinds[1:]:
            r = med[kinds[0]] / med[k]
            line += f"{r:17.2f}x"
            if k == "torch" and r >= 1.0:
                slower.append(name)
        print(line + f"{err:12.1e}")
    if kinds[0] == "ckc" and "torch" in kinds:
        print("ckc is faster than eager PyTorch at every config" if not slower else
              f"ckc is NOT faster than eager PyTorch at: {', '.join(slower)}")
    if "gcu" in kinds:
        others = [k for k in ("torch", "inductor") if k in kinds]
        print(f"\ntorch.compile(backend=\"gcu\") (ratio < 1: gcu is faster)")
        print(f"{'config':22}" + "".join(f"{'gcu/' + k:>16}" for k in others))
        gcu_slower = []
        for name, med, _ in rows:
            print(f"{name:22}" + "".join(f"{med['gcu'] / med[k]:15.2f}x" for k in others))
            if "torch" in med and med["gcu"] >= med["torch"]:
                gcu_slower.append(name)
        if "torch" in kinds:
            print("gcu is faster than eager PyTorch at every config" if not gcu_slower else
                  f"gcu is NOT faster than eager PyTorch at: {', '.join(gcu_slower)}")
        first_call_report(a, kinds, gcu_cache)
    if not a.no_arena:
        arena_report(a.out)


if __name__ == "__main__":
    main()
