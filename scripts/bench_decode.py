#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Decode at the memory roofline: how fast one token's matrix-vector products read the weights, per format,
per thread count and per kernel path, against the read bandwidth measured in the same run.

Decode of a large model is bound by memory: every weight is read once per token. This runs exactly the kernels
decode runs (ck_linear_q, one token) over every layer of a model shape, with a copy of the weights per layer
(far beyond the caches) read in place from one mapped file, as a model reads a GGUF (on 2 MiB pages where the
file system can, as the runtime's loader puts a model's weights), and prints GB/s of weights
read and the percentage of a streaming read of 1 GiB (the best of 128-bit loads with and without software
prefetch, 256- and 512-bit loads, as the CPU has them), each measured interleaved with the others.

    scripts/bench_decode.py [--shape 1.1b|stories110m] [--formats f16,q8_0,q4_0,...] [--threads 1,2]
                            [--paths auto,avx512] [--reps 5] [--baseline CHECKOUT]

--baseline: another checkout of ckc (say `git worktree add /tmp/base HEAD~1`): its kernels are built too and
run interleaved with these, pass for pass, and each row gets the ratio of times (new / baseline; < 1: faster).
This machine's timings drift by 10-20% over minutes; only an interleaved pair says which build is faster.

--paths: the kernel paths to run (cpu.c: portable, avx2, avx2-vnni, avx512, avx512-vbmi, amx; auto = the CPU's
best); a path the CPU lacks is skipped, said on stderr. Shapes: 1.1b is TinyLlama's (hidden 2048, intermediate
5632, 4 KV heads of 64, 22 layers), stories110m llama2.c's (768, 2048, 12 heads, 12 layers).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import ckc
from ckc.contenders import machine

SHAPES = {"1.1b": (2048, 5632, 256, 22), "stories110m": (768, 2048, 768, 12)}
FORMATS = "f16,bf16,q8_0,q6_K,q5_K,q5_0,q5_1,q4_K,q4_1,q4_0"
PATHS = ["portable", "avx2", "avx2-vnni", "avx512", "avx512-vbmi", "amx"]


def build(folder, root=None):
    """The worker, linked against the runtime objects generated models use (ckc.build's flags and cache); with
    root, the checkout at root's worker and kernels instead (compiled here, the same flags)."""
    import concurrent.futures
    here = os.path.dirname(os.path.abspath(__file__))
    runtime = os.path.join(root, "runtime") if root else os.path.dirname(ckc.build.include_dir())
    sources = [os.path.join(runtime, "kernels", f) for f in sorted(os.listdir(os.path.join(runtime, "kernels")))
               if f.endswith(".c")] + [os.path.join(runtime, "io", "quant.c")]
    include = os.path.join(runtime, "include")
    if root:
        def one(src):
            obj = os.path.join(folder, os.path.basename(src)[:-2] + ".o")
            ckc.build.run(["cc", *ckc.build.RUNTIME_FLAGS, "-I", include, "-c", src, "-o", obj])
            return obj
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            objs = list(pool.map(one, sources))
    else:
        objs = ckc.build.runtime_objects(sources)
    exe = os.path.join(folder, "bench_decode")
    worker = os.path.join(root, "scripts", "bench_decode.c") if root else os.path.join(here, "bench_decode.c")
    ckc.build.run(["cc", *ckc.build.RUNTIME_FLAGS, "-I", include, worker,
                   *objs, "-lopenblas", "-lm", "-o", exe])
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1.1b")
    ap.add_argument("--formats", default=FORMATS)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--paths", default="auto", help="comma-separated kernel paths (auto: the CPU's best)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions (the median is printed)")
    ap.add_argument("--baseline", metavar="CHECKOUT", help="another ckc checkout whose kernels run interleaved")
    a = ap.parse_args()
    D, F, KV, L = SHAPES[a.shape]
    formats, threads = a.formats.split(","), [int(t) for t in a.threads.split(",")]
    paths = a.paths.split(",")
    bad = [p for p in paths if p != "auto" and p not in PATHS]
    if bad:
        sys.exit(f"bench_decode: unknown path {bad[0]!r} (auto, {', '.join(PATHS)})")
    if a.baseline and not os.path.isdir(os.path.join(a.baseline, "runtime", "kernels")):
        sys.exit(f"bench_decode: --baseline {a.baseline}: not a ckc checkout (no runtime/kernels)")
    print(machine())
    builds = ["new", "base"] if a.baseline else ["new"]
    with tempfile.TemporaryDirectory() as tmp:
        exes = {"new": build(tmp)}
        if a.baseline:
            os.makedirs(os.path.join(tmp, "base"))
            print(f"== building the baseline's kernels ({a.baseline})", file=sys.stderr)
            exes["base"] = build(os.path.join(tmp, "base"), os.path.abspath(a.baseline))
        workers = {}
        for f in formats:
            for b in builds:
                print(f"== {f} ({b}): quantizing one layer, copying it to {L}", file=sys.stderr)
                p = subprocess.Popen([exes[b], f, str(D), str(F), str(KV), str(L)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
                if p.stdout.readline().strip() != "ready":
                    sys.exit(f"bench_decode: the {f} worker ({b}) failed")
                workers[b, f] = p

        def ask(b, f, cmd):
            workers[b, f].stdin.write(cmd + "\n")
            workers[b, f].stdin.flush()
            return workers[b, f].stdout.readline().split()

        nbytes = {f: int(ask("new", f, "bytes")[0]) for f in formats}
        huge = {f: int(ask("new", f, "huge")[0]) for f in formats}  # (a baseline's older worker may not answer)
        probe = formats[0]
        ran = {}  # (path asked) -> path that ran
        times = {(b, f, t, p): [] for b in builds for f in formats for t in threads for p in paths}
        bw = {t: [] for t in threads}
        for rep in range(a.reps):
            for t in threads:
                bw[t].append(float(ask("new", probe, f"read {t}")[0]))
                for f in formats:
                    for p in paths:
                        for b in (builds if rep % 2 == 0 else builds[::-1]):  # neither always first
                            secs, path = ask(b, f, f"gemv {t} {p}")
                            ran[p] = path
                            times[b, f, t, p].append(float(secs))
            print(f"== rep {rep + 1}/{a.reps}", file=sys.stderr)
        for p in workers.values():
            p.stdin.close()
            p.wait()
    for p in paths:
        if p != "auto" and ran.get(p) != p:
            print(f"note: this CPU has no {p} kernels; '{p}' ran {ran.get(p)}", file=sys.stderr)
    hd, ff, kvw, layers = D, F, KV, L
    print(f"{a.shape} shape (hidden {hd}, intermediate {ff}, kv {kvw}, {layers} layers): one token's GEMVs, "
          f"median of {a.reps} interleaved runs (each the best of 3 passes)")
    print("read bandwidth: " + ", ".join(f"{t} thread{'s' if t > 1 else ''} {statistics.median(bw[t]):.1f} GB/s"
                                         for t in threads))
    known = [f for f in formats if huge[f] >= 0]
    print("weights on 2 MiB pages (as a model's loader leaves them, where the file system can): " +
          (", ".join(f"{f} {100 * huge[f] / nbytes[f]:.0f}%" for f in known) if known else "not known here"))
    head = f"{'format':8}{'MB':>7} {'path':>12}" + (f"{'build':>6}" if a.baseline else "")
    for t in threads:
        head += f" | {f'{t}T ms':>8}{'GB/s':>7}{'%bw':>6}"
    print(head)
    for f in formats:
        for p in paths:
            for b in builds:
                line = f"{f:8}{nbytes[f] / 1e6:7.0f} {ran[p]:>12}" + (f"{b:>6}" if a.baseline else "")
                for t in threads:
                    s = statistics.median(times[b, f, t, p])
                    gbs = nbytes[f] / s / 1e9
                    line += f" | {s * 1e3:8.2f}{gbs:7.1f}{100 * gbs / statistics.median(bw[t]):5.0f}%"
                print(line)
            if a.baseline:  # the median of the per-pass ratios: each pair ran back to back
                line = f"{'':8}{'':7} {'':>12}{'new/b':>6}"
                for t in threads:
                    r = statistics.median(x / y for x, y in zip(times["new", f, t, p], times["base", f, t, p]))
                    line += f" | {r:8.3f}x{'':12}"
                print(line)


if __name__ == "__main__":
    main()
