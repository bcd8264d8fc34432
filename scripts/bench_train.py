#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Training step time and peak memory: a `ckc compile --train` library against PyTorch eager, in one run.

Models (random weights, the same for both; a Hugging Face config, built by transformers):
  stories15m   Llama, dim 288, 6 layers, 6 heads, ffn 768, vocab 32000 (llama2.c's stories15M), seq 256
  gpt2-small   GPT-2, dim 768, 12 layers, 12 heads, vocab 50257, seq 256

A step is zero_grad, forward, cross-entropy over the sequence, backward, global-norm clipping to 1.0 and
AdamW, on one batch of `--seq` tokens.

--graph compares torch.compile(model, backend="gcu") (ckc's torch backend: the forward and AOTAutograd's
backward graph compiled, per-node eager fallback) with eager PyTorch on the GPT-style module of
python/ckc/examples.py (`--graph-dims vocab,dim,heads,layers`, default GPT-2-small's 50257,768,12,12): the
same step through torch.optim.AdamW, the compile in the warm-up step. Each contender runs in its own worker process with the same thread
count (its own OpenMP / MKL / OpenBLAS setup); the parent interleaves their steps round-robin so both see the
same machine conditions, and reports median step times, their ratio, the first-step losses (they must agree:
the same weights and batch) and each worker's peak RSS (VmHWM), with the RSS it had before loading the
model (Python + numpy, or Python + torch + transformers) for reference.

    scripts/bench_train.py [--model stories15m|gpt2-small] [--seq 256] [--threads 2] [--steps 7]
    scripts/bench_train.py --graph [--graph-dims 50257,768,12,12] [--seq 256] [--target gcu|cpu]

--adamw fused runs torch.optim.AdamW(fused=True) (one C++ kernel per step) wherever the optimizer is PyTorch's
(eager, and the --graph gcu contender, whose optimizer step is eager); the default, loop, is PyTorch's default on
the CPU (a loop of per-tensor ops). On GPT-2-small the optimizer is 230-330 ms of a ~2 s step with loop, ~45 ms
fused. --adamw compiled (--graph) has the gcu contender compile its (default) AdamW step as well,
torch.compile(opt.step, backend="gcu"): one library updating the parameters and the optimizer state in place
(~115 ms), against eager running the default; --adamw compiled-vs-fused against eager's fastest optimizer,
fused=True (~75 ms). The warm-up step then also compiles the optimizer (~2 min from a cold cache).

--keep-freed runs both workers with glibc keeping the memory they free (MALLOC_MMAP_THRESHOLD_=256 MiB,
MALLOC_TRIM_THRESHOLD_=4 GiB): tensors allocated anew every step (gradients after zero_grad(set_to_none=True),
the optimizer's temporaries, activations) reuse pages instead of faulting fresh ones in. On GPT-2-small that takes
both contenders' steps down by ~0.3-0.5 s and removes most of their run-to-run swing (page faults and heap trims
are the noisiest part of a step here); the peak RSS then stays at its high-water mark.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

MODELS = {
    "stories15m": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 288, "intermediate_size": 768,
                   "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 6,
                   "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
    # no dropout: ckc trains without it (both must compute the same step)
    "gpt2-small": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12,
                   "n_positions": 1024, "bos_token_id": 0, "eos_token_id": 0, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                   "attn_pdrop": 0.0},
}


def cache_dir():
    from ckc.build import cache_dir as ckc_cache
    return os.path.join(ckc_cache(), "bench_train")


def prepare(name):
    """The model folder (transformers, random weights) and the --train library, cached."""
    import ckc
    folder = os.path.join(cache_dir(), name)
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        cfg = dict(MODELS[name])
        config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
        torch.manual_seed(0)
        print(f"creating {name} in {folder} ...", file=sys.stderr)
        AutoModelForCausalLM.from_config(config).save_pretrained(folder + ".tmp")
        os.replace(folder + ".tmp", folder)
    so = ckc.build_library(ckc.compile_model(os.path.join(folder, "config.json"), os.path.join(folder, "c"),
                                             args=["--train"]))
    return folder, so


def batch(vocab, seq):
    import numpy as np
    ids = np.random.default_rng(0).integers(0, vocab, seq + 1)
    return ids[:-1], ids[1:]


def rss_mib():
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent at exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(kind, folder, so, seq, threads, adamw):
    """Runs steps on request: reads 'step' / 'quit' lines, answers one JSON line each."""
    base = rss_mib()
    if kind == "ckc":
        import ckc
        m = ckc.LlmModel(so, folder, threads=threads)
        m.enable_training(seq)
        x, y = batch(m.vocab_size, seq)

        def step():
            return m.train_step(x, y, 3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, clip=1.0)
    else:
        import torch
        from transformers import AutoModelForCausalLM
        from ckc.contenders import configure_torch
        configure_torch("torch", threads)
        base = rss_mib()
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        x, y = batch(model.config.vocab_size, seq)
        step = torch_step(model, lambda ids: model(ids).logits, torch.tensor(x[None]), torch.tensor(y), adamw)
    print(json.dumps({"ready": True, "base_rss": base}), flush=True)
    serve(step)


def torch_step(model, logits_of, x, y, adamw="loop", compile_optimizer=False):
    """One PyTorch training step as ckc's: cross-entropy of logits_of(x)[0] against y, backward, clipping
    to 1.0, AdamW (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D weights only; adamw "fused": PyTorch's
    fused implementation, else its default; compile_optimizer: the default's step through
    torch.compile(backend="gcu")). Returns the loss."""
    import torch
    import torch.nn.functional as F
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True if adamw == "fused" else None)
    update = torch.compile(opt.step, backend="gcu") if compile_optimizer else opt.step

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(logits_of(x)[0], y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        update()
        return loss.item()
    return step


def graph_worker(kind, dims, seq, threads, target, adamw):
    """The GPT-style module, eager or torch.compile(backend="gcu"), one training step per request."""
    import torch
    import ckc  # noqa: F401  (registers the backend)
    from ckc.contenders import configure_torch
    from ckc.examples import GPT, randomize
    configure_torch("torch", threads)
    base = rss_mib()
    vocab, dim, heads, layers = dims
    model = randomize(GPT(vocab=vocab, dim=dim, heads=heads, layers=layers, max_len=seq), seed=0, std=0.02)
    run = torch.compile(model, backend="gcu", options={"target": target}) if kind == "gcu" else model
    ids = torch.randint(0, vocab, (1, seq + 1), generator=torch.Generator().manual_seed(0))
    # compiled: the gcu contender compiles PyTorch's default AdamW step, eager runs it (or, with
    # compiled-vs-fused, its fastest, fused=True)
    compiled = kind == "gcu" and adamw.startswith("compiled")
    eager_adamw = "fused" if adamw == "compiled-vs-fused" and not compiled else \
        "loop" if adamw.startswith("compiled") else adamw
    step = torch_step(model, run, ids[:, :-1], ids[0, 1:], eager_adamw, compiled)
    print(json.dumps({"ready": True, "base_rss": base}), flush=True)
    serve(step)


def serve(step):
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        t0 = time.perf_counter()
        loss = step()
        dt = time.perf_counter() - t0
        print(json.dumps({"time": dt, "loss": loss, "rss": rss_mib()}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="stories15m")
    ap.add_argument("--seq", type=int, default=256, help="tokens per step (default 256)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=7, help="timed steps per contender, after one warm-up")
    ap.add_argument("--graph", action="store_true", help="torch.compile(backend='gcu') vs eager on the GPT module")
    ap.add_argument("--graph-dims", default="50257,768,12,12", help="--graph: vocab,dim,heads,layers")
    ap.add_argument("--target", choices=["gcu", "cpu"], default="gcu", help="--graph: the backend's target")
    ap.add_argument("--keep-freed", action="store_true",
                    help="both workers: glibc keeps freed memory (no fresh page faults per step; steadier times)")
    ap.add_argument("--adamw", choices=["loop", "fused", "compiled", "compiled-vs-fused"], default="loop",
                    help="PyTorch's AdamW where the optimizer is PyTorch's: its CPU default (loop) or fused=True; "
                         "compiled (--graph): the gcu contender compiles its AdamW step with torch.compile(opt.step, "
                         "backend='gcu'), eager runs the default; compiled-vs-fused: eager runs fused=True")
    ap.add_argument("--worker", choices=["ckc", "torch", "gcu", "eager"], help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--so", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.adamw.startswith("compiled") and not (a.graph or a.worker in ("gcu", "eager")):
        ap.error("--adamw compiled compiles the optimizer through torch.compile: it needs --graph")
    dims = [int(v) for v in a.graph_dims.split(",")]
    if a.worker in ("gcu", "eager"):
        return graph_worker(a.worker, dims, a.seq, a.threads, a.target, a.adamw)
    if a.worker:
        return worker(a.worker, a.folder, a.so, a.seq, a.threads, a.adamw)
    procs = {}
    base_env = dict(os.environ)
    if a.keep_freed:
        base_env.update(MALLOC_MMAP_THRESHOLD_=str(256 << 20), MALLOC_TRIM_THRESHOLD_=str(4 << 30))
    if a.graph:
        title = f"GPT module {a.graph_dims} (vocab,dim,heads,layers)"
        mine, theirs = "gcu", "eager"
        for kind in (mine, theirs):
            procs[kind] = subprocess.Popen([sys.executable, __file__, "--worker", kind, "--graph-dims", a.graph_dims,
                                            "--seq", str(a.seq), "--threads", str(a.threads), "--target", a.target,
                                            "--adamw", a.adamw],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                           env=dict(base_env, OMP_NUM_THREADS=str(a.threads)))
    else:
        title, mine, theirs = a.model, "ckc", "torch"
        folder, so = prepare(a.model)
        for kind in (mine, theirs):
            env = dict(base_env)
            if kind == "torch":
                env["OMP_NUM_THREADS"] = str(a.threads)
            procs[kind] = subprocess.Popen([sys.executable, __file__, "--worker", kind, "--folder", folder, "--so", so,
                                            "--seq", str(a.seq), "--threads", str(a.threads), "--adamw", a.adamw],
                                           stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, env=env)
    info = {k: json.loads(p.stdout.readline()) for k, p in procs.items()}
    times = {k: [] for k in procs}
    losses = {k: [] for k in procs}
    rss, r_time = {}, {}
    print(f"{title}, {a.seq} tokens per step, {a.threads} threads: 1 warm-up + {a.steps} steps each, interleaved",
          file=sys.stderr)
    for i in range(a.steps + 1):
        for k, p in procs.items():
            p.stdin.write("step\n")
            p.stdin.flush()
            r = json.loads(p.stdout.readline())
            r_time[k] = r["time"]
            losses[k].append(r["loss"])
            rss[k] = r["rss"]
            if i > 0:
                times[k].append(r["time"])
        print(f"  step {i}: " + ", ".join(f"{k} {losses[k][-1]:.4f} ({r_time[k] * 1e3:.0f} ms)" for k in procs),
              file=sys.stderr)
    for p in procs.values():
        p.stdin.write("quit\n")
        p.stdin.flush()
        p.wait()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{title} training step ({a.seq} tokens, {a.threads} threads, PyTorch AdamW {a.adamw}"
          f"{', freed memory kept' if a.keep_freed else ''}), medians of {a.steps}:")
    print(f"  {'':8} {'step':>10} {'peak RSS':>12} {'RSS before model':>18} {'first loss':>12}")
    for k in procs:
        print(f"  {k:8} {med[k] * 1e3:8.1f} ms {rss[k]:9.1f} MiB {info[k]['base_rss']:15.1f} MiB {losses[k][0]:12.5f}")
    print(f"  {mine} speed-up over torch eager: {med[theirs] / med[mine]:.2f}x; peak RSS {mine}/{theirs} "
          f"{rss[mine] / rss[theirs]:.2f}x (above the pre-model RSS: "
          f"{(rss[mine] - info[mine]['base_rss']) / max(rss[theirs] - info[theirs]['base_rss'], 1e-9):.2f}x)")
    if abs(losses[mine][0] - losses[theirs][0]) > 1e-3 * abs(losses[theirs][0]):
        print("  WARNING: the first-step losses differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
