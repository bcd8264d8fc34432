#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""What a `ckc compile --standalone` file costs without OpenBLAS: the same model.c built twice, in one run.

    scripts/bench_standalone.py [--shape stories110m|1.1b] [--weights f32] [--threads 1,2] [--paths best,avx2]

  builtin    cc -O3 -fPIC -shared -fopenmp model.c -lm                      (CK_BLAS=0: runtime/kernels/blas.c)
  openblas   cc -O3 -fPIC -shared -fopenmp -DCK_BLAS=1 model.c -lopenblas -lm
Both run the random-weight model at the shape (default stories110M: dim 768, 12 layers, vocab 32000) through
scripts/bench_llm.py's worker: prefill 128 tokens (logits of every position), decode 64 steps after a 16-token
prompt; the measurements alternate between the two (same threads, same machine conditions) and the medians are
compared as builtin / openblas (> 1: the own GEMM is faster). OpenBLAS runs the kernels of the CPU the path stands
for (OPENBLAS_CORETYPE: SkylakeX, Haswell or Prescott), not whatever its detection picks. Each kernel path (CK_KERNELS) is a row: on a CPU
with AVX-512 the float GEMMs from 8 tokens on are fgemm.c's either way, so `avx2` shows what a CPU without it runs
(the own GEMM against OpenBLAS's in every linear layer). The logits of the two builds are compared too.
The first line names the CPU: a ratio holds for the machine it was measured on.

Before / after: --baseline CKC compares two versions of ckc instead, each compiling the same model to a standalone
file built the default way (cc -O3 -fopenmp -DCK_BLAS=1 ... -lopenblas): "baseline" from the ckc binary given (e.g.
a worktree of an older commit, built with cmake), "current" from this checkout's; the ratio is current / baseline.
"""
import argparse
import os
import statistics
import subprocess
import sys

import numpy as np

import ckc
from ckc import cross
from ckc.contenders import machine

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {"stories110m": "stories110m", "1.1b": "tinyllama-1.1b"}
BUILDS = {"builtin": ([], []), "openblas": (["-DCK_BLAS=1"], ["-lopenblas"])}


def openblas_core(path):
    """OpenBLAS at its best for the CPU the kernel path stands for: Debian's 0.3.21 picks its SSE3 "Prescott"
    kernels on CPUs it does not know (this Xeon VM, Nov 2026: 31 GFLOP/s against 127 with SkylakeX, one thread,
    128 x 768 x 768), so the core is named (OPENBLAS_CORETYPE): SkylakeX with AVX-512, Haswell with AVX2."""
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    if path == "portable":
        return "Prescott"
    if path == "best" and "avx512f" in flags:
        return "SkylakeX"
    return "Haswell" if "avx2" in flags else "Prescott"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="stories110m")
    ap.add_argument("--weights", default="f32", help="ckc compile --weights (default f32: the float GEMMs)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--paths", default="best,avx2", help="CK_KERNELS values, best = whatever the CPU has")
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ckc.ROOT or ".", "out", "bench-standalone"))
    ap.add_argument("--baseline", help="a ckc binary (another version): compare this checkout's ckc with it")
    a = ap.parse_args()
    print(machine())
    config = os.path.join(ckc.ROOT, "models", SHAPES[a.shape], "config.json")
    out = os.path.join(a.out, f"{a.shape}-{a.weights}")
    args = ["--standalone", "--weights", a.weights]
    if a.baseline:  # (name, model.c, flags, libs): the same default build of two versions' files
        base = os.path.join(out, "baseline")
        os.makedirs(base, exist_ok=True)
        subprocess.run([a.baseline, "compile", config, *args, "-o", os.path.join(base, "model.c")], check=True)
        builds = [("baseline", os.path.join(base, "model.c"), *BUILDS["openblas"]),
                  ("current", ckc.compile_model(config, out, args=args), *BUILDS["openblas"])]
    else:
        c = ckc.compile_model(config, out, args=args)
        builds = [(name, c, flags, libs) for name, (flags, libs) in BUILDS.items()]
    sos = {}
    for name, c, flags, libs in builds:
        print(f"== build {name}", file=sys.stderr)
        sos[name] = cross.build(c, os.path.join(out, f"lib{name}.so"), opt="-O3", main=None,
                                flags=["-fPIC", "-shared", "-fopenmp", *flags], libs=libs)
    names = list(sos)  # the ratio: builtin / openblas, or current / baseline
    num, den = (names[1], names[0]) if a.baseline else (names[0], names[1])
    weights = os.path.join(out, "weights")
    if not os.path.exists(os.path.join(weights, "model.safetensors")):
        ckc.random_weights(config, weights, seed=0)

    for path in a.paths.split(","):
        for threads in [int(t) for t in a.threads.split(",")]:
            env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
            if path != "best":
                env["CK_KERNELS"] = path
            procs = {}
            core = openblas_core(path)
            for name, so in sos.items():
                cmd = [sys.executable, os.path.join(HERE, "bench_llm.py"), "--worker", "ckc", "--so", so, "--weights",
                       weights, "--config", config, "--threads", str(threads), "--prefill", str(a.prefill),
                       "--decode", str(a.decode), "--logits", os.path.join(out, f"logits-{name}.npy")]
                wenv = dict(env, OPENBLAS_CORETYPE=core) if name != "builtin" else env
                procs[name] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=wenv)
            for name, p in procs.items():
                if p.stdout.readline().strip() != "ready":
                    sys.exit(f"bench_standalone: the {name} worker failed to start")

            def ask(name, cmd):
                procs[name].stdin.write(cmd + "\n")
                procs[name].stdin.flush()
                return float(procs[name].stdout.readline())

            t = {n: {"prefill": [], "decode": []} for n in sos}
            for _ in range(a.reps):
                for what in ("prefill", "decode"):
                    for n in sos:
                        t[n][what].append(ask(n, what))
            for p in procs.values():
                p.stdin.write("quit\n")
                p.stdin.flush()
                p.wait()
            rate = {n: {"prefill": a.prefill / statistics.median(t[n]["prefill"]),
                        "decode": a.decode / statistics.median(t[n]["decode"])} for n in sos}
            la, lb = (np.load(os.path.join(out, f"logits-{n}.npy")) for n in sos)
            r = {w: f"{num} {rate[num][w]:.1f} / {den} {rate[den][w]:.1f} tok/s = {rate[num][w] / rate[den][w]:.2f}x"
                 for w in ("prefill", "decode")}
            print(f"{a.shape} {a.weights}, kernels {path} (OpenBLAS core {core}), {threads} thread(s), median of {a.reps}: "
                  f"prefill {a.prefill} {r['prefill']}; decode {r['decode']}; "
                  f"max |logit diff| {float(np.max(np.abs(la - lb))):.1e}", flush=True)


if __name__ == "__main__":
    main()
