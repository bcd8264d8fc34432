#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""What the NEON bodies give on ARM64: one `ckc compile --standalone` model.c per weight format, built for aarch64
(aarch64-linux-gnu-gcc -O2 -static; --dotprod adds -march=armv8.2-a+dotprod: SDOT), run with its NEON bodies and
with CK_KERNELS=portable (the plain C the compiler vectorizes), alternating, one thread; prints prefill and decode
tok/s and the ratio NEON / C per format.

    scripts/bench_neon.py [--formats f32,q8_0,q4_0,q4_K] [--dotprod] [--reps 3]

On an x86 machine the programs run under qemu-aarch64: the ratio is then the emulation's (how much work the NEON
bodies save in translated instructions), not a chip's; on an ARM64 machine they run natively and the ratio is that
CPU's. The first line names the machine either way. The shape is small (dim 256, 4 layers, vocab 4096: whole q4_K
blocks) so that emulation finishes in seconds; the model is random weights (ckc random-weights).
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess

import ckc
from ckc import cross
from ckc.contenders import machine

CONFIG = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 768,
          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 256,
          "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def run_once(exe, weights, prompt, steps, portable):
    target = "native" if platform.machine() == "aarch64" else "aarch64"
    env = dict(os.environ)
    env.pop("CK_KERNELS", None)
    if portable:
        env["CK_KERNELS"] = "portable"
    p = subprocess.run(cross.command(target, exe, [weights, "-n", str(steps), *map(str, prompt)]), capture_output=True,
                       text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"bench_neon: {exe} failed:\n{p.stderr}")
    rate = lambda what: float(re.search(what + r": ([\d.]+) tok/s", p.stderr).group(1))
    return rate("prefill"), rate("decode"), p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default="f32,q8_0,q4_0,q4_K")
    ap.add_argument("--dotprod", action="store_true", help="build for armv8.2-a+dotprod (SDOT)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens (prefill)")
    ap.add_argument("--decode", type=int, default=32, help="decode steps")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ckc.ROOT or ".", "out", "bench-neon"))
    a = ap.parse_args()
    if platform.machine() != "aarch64" and cross.missing_tools("aarch64"):
        raise SystemExit(f"bench_neon: {', '.join(cross.missing_tools('aarch64'))} missing (scripts/install_deps.sh)")
    print(machine())
    print("aarch64 programs run " + ("natively" if platform.machine() == "aarch64" else
                                     "under qemu-aarch64: the ratios are the emulation's, not an ARM chip's"))
    os.makedirs(a.out, exist_ok=True)
    cfg = os.path.join(a.out, "config.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    weights = os.path.join(a.out, "weights")
    if not os.path.exists(os.path.join(weights, "model.safetensors")):
        ckc.random_weights(cfg, weights)
    prompt = [(7 * i + 3) % CONFIG["vocab_size"] for i in range(a.prompt)]
    flags = ["-march=armv8.2-a+dotprod"] if a.dotprod else []
    for fmt in a.formats.split(","):
        c = ckc.compile_model(cfg, os.path.join(a.out, fmt), args=["--standalone", "--weights", fmt])
        exe = cross.build(c, os.path.join(a.out, fmt, "model-arm64"), "aarch64", opt="-O2", flags=flags)
        runs = {True: [], False: []}
        for _ in range(a.reps):
            for portable in (False, True):  # alternating: the same conditions for both
                runs[portable].append(run_once(exe, weights, prompt, a.decode, portable))
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in runs.items()}
        same = runs[False][0][2] == runs[True][0][2]
        print(f"{fmt:>5}{' +dotprod' if a.dotprod else ''}, 1 thread, median of {a.reps}: "
              f"prefill {a.prompt} NEON {med[False][0]:.1f} / C {med[True][0]:.1f} tok/s = "
              f"{med[False][0] / med[True][0]:.2f}x; decode NEON {med[False][1]:.1f} / C {med[True][1]:.1f} tok/s = "
              f"{med[False][1] / med[True][1]:.2f}x; greedy tokens {'equal' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
