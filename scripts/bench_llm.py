#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Benchmark a compiled LLM against PyTorch eager on the same weights, in one run.

Default: the stories110M shape (models/stories110m: dim 768, 12 layers, 12 heads,
FFN 2048, vocab 32000, tied) with deterministic random weights, 2 threads:
  prefill  128 tokens from position 0 (logits for every position)
  decode   64 single-token steps through the KV cache after a 16-token prompt

Contenders, each in its own worker process (so each has its own OpenMP setup):
  ckc            the compiled library, 2 threads
  torch          transformers' model class, eager, torch.set_num_threads(2): the defaults
  torch-tuned    the same with OMP_WAIT_POLICY=passive (python/ckc/contenders.py)
The parent interleaves single measurements round-robin, so every contender sees
the same machine conditions (shared VMs drift), and reports medians. Logits of
every contender are compared, so a fast wrong answer cannot pass.

    scripts/bench_llm.py [--config models/stories110m/config.json] [--threads 2] [--reps 7]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import ckc
from ckc import safetensors
from ckc.contenders import configure_torch, worker_env


# ---- worker: one contender, driven over stdin/stdout --------------------------

def worker(kind, so, weights, config, threads, n_prefill, n_decode, logits_path):
    import numpy as np

    cfg = json.load(open(config))
    toks = [int(t) for t in np.random.default_rng(0).integers(0, cfg["vocab_size"], max(n_prefill, 16 + n_decode))]
    prompt = toks[:16]
    if kind == "ckc":
        m = ckc.LlmModel(so, weights, threads=threads)

        def prefill():
            m.kv_cache_disable()  # a fresh sequence from position 0
            return m.forward(toks[:n_prefill])

        def decode():
            m.kv_cache_enable(16 + n_decode)
            m.forward(prompt)
            t0 = time.perf_counter()
            for i in range(n_decode):
                m.decode(toks[16 + i])
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
                    past = ref(torch.tensor([[toks[16 + i]]]), past_key_values=past, use_cache=True).past_key_values
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
        elif cmd == "quit":
            break


# ---- parent ----------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(ckc.ROOT, "models", "stories110m", "config.json"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(ckc.ROOT, "out", "bench"))
    ap.add_argument("--ckc-args", default="", help="extra `ckc compile` arguments, e.g. '--disable-pass fuse_matmul_add'")
    ap.add_argument("--contenders", default="ckc,torch,torch-tuned")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--so", help=argparse.SUPPRESS)
    ap.add_argument("--weights", help=argparse.SUPPRESS)
    ap.add_argument("--logits", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.so, a.weights, a.config, a.threads, a.prefill, a.decode, a.logits)

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
               "--decode", str(a.decode), "--logits", os.path.join(out, f"logits-{k}.npy")]
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


if __name__ == "__main__":
    main()
