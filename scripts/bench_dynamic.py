#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Shapes that change: one symbolic library against one library per shape, Inductor and eager (issue #30).

A stream of calls whose batch and sequence length change (the shapes below, each several times), through:
  eager         PyTorch eager
  gcu-dynamic   torch.compile(backend="gcu", dynamic=True): one ckc library for every shape (symbolic sizes)
  gcu-static    torch.compile(backend="gcu", dynamic=False): one ckc library per shape (a compile for each)
  inductor-dyn  torch.compile(dynamic=True): PyTorch's own compiler, symbolic
Models: block (a pre-norm transformer block), mlp, llama (a transformers LlamaForCausalLM of width --dim, 4
layers, random weights, called with input_ids and a padding attention_mask: row 1 of each batch left-padded).
Each contender compiles on cold caches (a temporary CKC_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR), after one
throwaway compile that pays dynamo's start-up. Reported per contender: the time
of the first pass over the shapes (what a serving loop pays while shapes are new: dynamo, AOTAutograd, ckc
compiles, cc builds) and how many ckc compiles it took; then the steady time of one call per shape, measured
interleaved round-robin across the contenders (medians of --reps rounds), with the ratio to eager.

    scripts/bench_dynamic.py [--threads 2] [--reps 7] [--model block|mlp|llama] [--dim 256]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

SHAPES = [(1, 16), (2, 16), (3, 40), (8, 64), (5, 100), (16, 128), (4, 7), (12, 96)]


class HfLlama:
    """A transformers Llama called as a serving loop calls it: (input_ids, attention_mask) -> logits."""

    @staticmethod
    def make(dim):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        class Logits(torch.nn.Module):
            def __init__(self):
                super().__init__()
                cfg = LlamaConfig(vocab_size=1024, hidden_size=dim, intermediate_size=2 * dim, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                  use_cache=False)
                self.m = LlamaForCausalLM(cfg)

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask).logits
        return Logits()


def model_of(kind, dim):
    import torch
    from ckc.examples import MLP, Block, randomize
    torch.manual_seed(0)
    if kind == "mlp":
        return randomize(MLP(dim), seed=0, std=1.0 / dim ** 0.5).eval()
    if kind == "llama":
        return randomize(HfLlama.make(dim), seed=0, std=1.0 / dim ** 0.5).eval()
    return randomize(Block(dim, 4, "sdpa", causal=True), seed=0, std=1.0 / dim ** 0.5).eval()


def inputs(kind, dim):
    """Per shape, the call's arguments (a tuple)."""
    import torch
    g = torch.Generator().manual_seed(1)
    if kind == "mlp":  # MLP takes [rows, dim]: batch x seq rows
        return [(torch.randn(b * s, dim, generator=g),) for b, s in SHAPES]
    if kind == "llama":
        out = []
        for b, s in SHAPES:
            mask = torch.ones(b, s, dtype=torch.int64)
            if b > 1:
                mask[1, :s // 2] = 0
            out.append((torch.randint(0, 1024, (b, s), generator=g), mask))
        return out
    return [(torch.randn(b, s, dim, generator=g),) for b, s in SHAPES]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--model", choices=("block", "mlp", "llama"), default="block")
    ap.add_argument("--dim", type=int, default=256)
    a = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import ckc
    from ckc import build
    from ckc.contenders import machine
    torch.set_num_threads(a.threads)
    # three compiled versions of one forward, a graph per shape for gcu-static: more than dynamo's default
    # recompile limit (8), past which it would run the frame eagerly without saying so in the numbers
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    print(machine())
    print(f"torch {torch.__version__}, {a.threads} threads; model {a.model} dim {a.dim}; shapes (batch x seq): "
          f"{' '.join(f'{b}x{s}' for b, s in SHAPES)}", flush=True)
    m = model_of(a.model, a.dim)
    xs = inputs(a.model, a.dim)
    with torch.no_grad():
        refs = [m(*x) for x in xs]
    contenders = {"eager": m}
    first = {}
    cache = tempfile.mkdtemp(prefix="ckc-bench-dynamic-")
    os.environ["CKC_CACHE_DIR"] = cache  # cold: the first pass pays every compile
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")  # Inductor's too
    with torch.no_grad():  # dynamo's and the backends' one-time start-up, paid before any contender is timed
        for backend in ("gcu", "inductor"):
            torch._dynamo.reset()
            torch.compile(torch.nn.Linear(8, 8), backend=backend)(torch.randn(2, 8))
    for name, make in (("gcu-dynamic", lambda: torch.compile(m, backend="gcu", dynamic=True)),
                       ("gcu-static", lambda: torch.compile(m, backend="gcu", dynamic=False)),
                       ("inductor-dyn", lambda: torch.compile(m, dynamic=True))):
        torch._dynamo.reset()
        fn = make()
        before = build.INVOCATIONS["ckc"]
        t0 = time.perf_counter()
        with torch.no_grad():
            worst = max((fn(*x) - r).abs().max().item() for x, r in zip(xs, refs))
        first[name] = (time.perf_counter() - t0, build.INVOCATIONS["ckc"] - before, worst)
        contenders[name] = fn
        print(f"  {name:<13} first pass over {len(SHAPES)} shapes {first[name][0]:7.2f} s, "
              f"{first[name][1]} ckc compiles, max |diff| vs eager {worst:.1e}", flush=True)
    # steady: every contender's own graphs are compiled now (dynamo keeps them: no reset from here on)
    times = {n: [[] for _ in SHAPES] for n in contenders}
    with torch.no_grad():
        for _ in range(a.reps):
            for k, x in enumerate(xs):
                for n, fn in contenders.items():
                    fn(*x)  # warm
                    t0 = time.perf_counter()
                    for _ in range(3):
                        fn(*x)
                    times[n][k].append((time.perf_counter() - t0) / 3)
    print(f"\nsteady, one call (median of {a.reps}, interleaved), us; ratio = eager / contender (>1: faster)")
    print(f"{'shape':>8}" + "".join(f"{n:>14}" for n in contenders) + "".join(f"{'x ' + n:>16}" for n in contenders
                                                                           if n != "eager"))
    total = {n: 0.0 for n in contenders}
    for k, (b, s) in enumerate(SHAPES):
        med = {n: statistics.median(times[n][k]) for n in contenders}
        for n in contenders:
            total[n] += med[n]
        print(f"{f'{b}x{s}':>8}" + "".join(f"{med[n] * 1e6:14.0f}" for n in contenders) +
              "".join(f"{med['eager'] / med[n]:16.2f}" for n in contenders if n != "eager"))
    print(f"{'sum':>8}" + "".join(f"{total[n] * 1e6:14.0f}" for n in contenders) +
          "".join(f"{total['eager'] / total[n]:16.2f}" for n in contenders if n != "eager"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
