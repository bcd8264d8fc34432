#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""How the model executable's threads hold up when other programs keep the cores busy.

Generates N tokens with the compiled executable (default: the SmolLM-135M shape, random weights)
while 0, 1 or 2 busy loops run, three ways, interleaved, median of --reps:
  t=1             one thread
  t=2 spin        two threads with libgomp's default wait (GOMP_SPINCOUNT=300000: spin, spin, spin)
  t=2 ckc         two threads with ckc's default (GOMP_SPINCOUNT=CK_GOMP_SPINCOUNT: spin briefly, then sleep)
and prints seconds and the ratio to one thread.

    scripts/bench_threads.py [--config models/smollm-135m/config.json] [--tokens 16] [--reps 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import ckc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(ckc.ROOT, "models", "smollm-135m", "config.json"))
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ckc.ROOT, "out", "bench-threads"))
    a = ap.parse_args()

    c = ckc.compile_model(a.config, a.out)
    exe = os.path.join(a.out, "model")
    ckc.build.run(["sh", "-c", f'cc -O3 -DCK_MODEL_MAIN -I "{ckc.include_dir()}" {c} $(cat {c}.kernels) '
                               f"-lopenblas -lm -fopenmp -o {exe}"])
    weights = os.path.join(a.out, "weights")
    if not os.path.exists(os.path.join(weights, "model.safetensors")):
        print(f"writing random weights to {weights} ...", file=sys.stderr)
        ckc.random_weights(a.config, weights)

    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    ways = {"t=1": (["-t", "1"], base), "t=2 spin": (["-t", "2"], dict(base, GOMP_SPINCOUNT="300000")),
            "t=2 ckc": (["-t", "2"], base)}

    def run(args, env):
        t0 = time.perf_counter()
        subprocess.run([exe, weights, "-n", str(a.tokens), *args, "1", "2", "3"], env=env, check=True,
                       capture_output=True)
        return time.perf_counter() - t0

    print(f"{a.tokens} tokens, {os.path.basename(os.path.dirname(a.config))}, median of {a.reps} (seconds; ratio to t=1)")
    print(f"{'busy loops':<12}" + "".join(f"{w:>18}" for w in ways))
    for busy in (0, 1, 2):
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            time.sleep(0.5)
            times = {w: [] for w in ways}
            for _ in range(a.reps):  # interleaved: every way sees the same machine
                for w, (args, env) in ways.items():
                    times[w].append(run(args, env))
        finally:
            for p in loops:
                p.kill()
        med = {w: statistics.median(v) for w, v in times.items()}
        print(f"{busy:<12}" + "".join(f"{med[w]:>9.2f} ({med[w] / med['t=1']:.2f}x)" for w in ways))


if __name__ == "__main__":
    main()
