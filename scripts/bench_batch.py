#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Decode throughput of several sequences in one handle (ck_model_batch) against llama.cpp's batched decoding, in
one run.

For each batch size B: B sequences, each prefilled with its own 16-token prompt (not timed), then `--steps` decode
steps, each one call that advances all B sequences by one token. Reported: aggregate tokens/s (B x steps / time),
the gain over B = 1 (decoding the B sequences one after another, in one handle each, runs at the B = 1 rate), and
llama.cpp doing the same on the same GGUF file (llama-cpp-python's low-level API: one llama_batch of B tokens with
their own sequence ids per llama_decode, n_seq_max = B, f32 KV cache as ckc's). Decode reads every weight once per
step whatever B is, so while it is bandwidth-bound B sequences cost little more than one.

Each contender runs in its own worker process; the parent interleaves single measurements round-robin (same
threads, same machine conditions) and reports medians, with the CPU's model and flags.

    scripts/bench_batch.py [--shape 1.1b|stories110m] [--format q4_0] [--gguf FILE] [--batches 1,4,8]
                           [--threads 2] [--steps 32] [--reps 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import ckc
from ckc.contenders import machine

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {"stories110m": "stories110m", "1.1b": "tinyllama-1.1b"}
PROMPT = 16


def tokens_for(vocab, n_seqs, n):
    import numpy as np
    rng = np.random.default_rng(7)
    return [[int(t) for t in rng.integers(0, vocab, n)] for _ in range(n_seqs)]


# ---- workers -------------------------------------------------------------------------------

def ckc_worker(so, gguf, threads, steps, vocab):
    m = ckc.LlmModel(so, gguf, threads=threads)

    def run(B):
        seqs = tokens_for(vocab, B, PROMPT + steps)
        m.kv_cache_enable_batch(PROMPT + steps, B)
        m.batch([t for s in seqs for t in s[:PROMPT]], [b for b in range(B) for _ in range(PROMPT)])
        ids = list(range(B))
        t0 = time.perf_counter()
        for i in range(steps):
            m.batch([s[PROMPT + i] for s in seqs], ids)
        return time.perf_counter() - t0
    return run


def llama_worker(gguf, threads, steps, vocab, max_batch):
    import llama_cpp as lc
    quiet = lc.llama_log_callback(lambda level, text, user: None)  # (kept alive with the worker)
    lc.llama_log_set(quiet, None)
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(gguf.encode(), mp)
    cp = lc.llama_context_default_params()
    cp.n_ctx = max_batch * (PROMPT + steps) + 64
    cp.n_batch = cp.n_ubatch = max(512, max_batch * PROMPT)
    cp.n_seq_max = max_batch
    cp.n_threads = cp.n_threads_batch = threads
    cp.type_k = cp.type_v = 0  # f32, as ckc's cache
    ctx = lc.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("llama.cpp: no context")
    batch = lc.llama_batch_init(cp.n_batch, 0, max_batch)

    def decode(toks, seqs, pos):
        batch.n_tokens = len(toks)
        last = {s: i for i, s in enumerate(seqs)}
        for i, (t, s, p) in enumerate(zip(toks, seqs, pos)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
            batch.seq_id[i][0] = s
            batch.logits[i] = 1 if last[s] == i else 0
        if lc.llama_decode(ctx, batch) != 0:
            sys.exit("llama.cpp: llama_decode failed")

    def run(B):
        seqs = tokens_for(vocab, B, PROMPT + steps)
        lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
        decode([t for s in seqs for t in s[:PROMPT]], [b for b in range(B) for _ in range(PROMPT)],
               [p for _ in range(B) for p in range(PROMPT)])
        ids = list(range(B))
        t0 = time.perf_counter()
        for i in range(steps):
            decode([s[PROMPT + i] for s in seqs], ids, [PROMPT + i] * B)
        return time.perf_counter() - t0
    return run


def worker(a):
    vocab = a.vocab
    if a.worker == "ckc":
        run = ckc_worker(a.so, a.gguf, a.threads, a.steps, vocab)
    else:
        run = llama_worker(a.gguf, a.threads, a.steps, vocab, max(int(b) for b in a.batches.split(",")))
    run(1)  # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "run":
            print(run(int(cmd[1])), flush=True)
        elif cmd[0] == "quit":
            break


# ---- parent ---------------------------------------------------------------------------------

def prepare(a):
    """The GGUF file (--gguf, or the shape's random weights quantized by ckc) and ckc's library for it."""
    subprocess.run([os.path.join(HERE, "llama_cpp.sh")], check=True, stdout=sys.stderr)
    if a.gguf:
        gguf = os.path.abspath(a.gguf)
        out = os.path.join(a.out, "gguf-" + os.path.basename(gguf))
    else:
        config = os.path.join(ckc.ROOT, "models", SHAPES[a.shape], "config.json")
        out = os.path.join(a.out, "batch-" + SHAPES[a.shape])
        os.makedirs(out, exist_ok=True)
        weights = os.path.join(out, "weights")
        if not os.path.exists(os.path.join(weights, "model.safetensors")):
            print("== random weights", file=sys.stderr)
            ckc.random_weights(config, weights, seed=0)
        gguf = os.path.join(out, f"model.{a.format}.gguf")
        if not os.path.exists(gguf):
            print(f"== ckc quantize --type {a.format}", file=sys.stderr)
            ckc.build.run([ckc.ckc_binary(), "quantize", weights, "-o", gguf, "--type", a.format])
    os.makedirs(out, exist_ok=True)
    so = ckc.build_library(ckc.compile_model(gguf, os.path.join(out, "c-" + os.path.basename(gguf))))
    import gguf as gguf_py  # (the gguf package llama.cpp's tools use)
    vocab = int(next(t for t in gguf_py.GGUFReader(gguf).tensors if t.name == "token_embd.weight").shape[1])
    return gguf, so, vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1.1b", help="the model shape, random weights")
    ap.add_argument("--format", default="q4_0", help="the weight type ckc quantize writes (pure)")
    ap.add_argument("--gguf", help="a GGUF file to run instead")
    ap.add_argument("--batches", default="1,4,8", help="batch sizes (sequences decoded together)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=32, help="decode steps timed per measurement")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ckc.ROOT, "out", "bench"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--so", help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    gguf, so, vocab = prepare(a)
    batches = [int(b) for b in a.batches.split(",")]
    procs = {}
    for k in ("ckc", "llama.cpp"):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", k, "--so", so, "--gguf", gguf, "--threads",
               str(a.threads), "--steps", str(a.steps), "--batches", a.batches, "--vocab", str(vocab)]
        procs[k] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for k, p in procs.items():
        if p.stdout.readline().strip() != "ready":
            code = p.wait()
            who = "the reference crashed: llama.cpp" if k == "llama.cpp" else "ckc"
            sys.exit(f"{who} died (exit {code}) while loading {gguf}")
    times = {(k, b): [] for k in procs for b in batches}
    for rep in range(a.reps):
        for b in batches:
            for k, p in procs.items():  # round-robin
                p.stdin.write(f"run {b}\n")
                p.stdin.flush()
                line = p.stdout.readline()
                if not line:
                    sys.exit(f"{k} died at batch {b}")
                times[k, b].append(float(line))
        print(f"== rep {rep + 1}/{a.reps}", file=sys.stderr)
    for p in procs.values():
        p.stdin.write("quit\n")
        p.stdin.flush()
        p.wait()
    print(machine())
    print(f"{os.path.basename(gguf)} ({os.path.getsize(gguf) / 1e6:.0f} MB): {a.threads} threads, {a.steps} decode steps "
          f"after {PROMPT}-token prompts, median of {a.reps} interleaved runs")
    print(f"{'batch':>5} | {'ckc tok/s':>9} {'vs B=1':>7} | {'llama.cpp':>9} {'vs B=1':>7} | {'ckc/llama.cpp':>13}")
    rate = {key: b * a.steps / statistics.median(v) for key, v in times.items() for b in [key[1]]}
    for b in batches:
        c, l = rate["ckc", b], rate["llama.cpp", b]
        print(f"{b:5d} | {c:9.1f} {c / rate['ckc', batches[0]]:6.2f}x | {l:9.1f} {l / rate['llama.cpp', batches[0]]:6.2f}x"
              f" | {c / l:12.2f}x")


if __name__ == "__main__":
    main()
