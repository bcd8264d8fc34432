#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Generate tokens with a compiled model (libmodel.so) through ctypes.

    scripts/generate.py --lib out/libmodel.so --weights path/to/hf-folder --prompt 1 2 3 --max-new-tokens 32
"""
import argparse
import os
import sys
import time

import ckc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="the compiled model library (libmodel.so)")
    ap.add_argument("--weights", required=True, help="Hugging Face folder, .safetensors file or *.index.json")
    ap.add_argument("--prompt", type=int, nargs="+", required=True, help="prompt token ids")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="default: all cores")
    a = ap.parse_args()
    try:
        m = ckc.LlmModel(a.lib, a.weights, threads=a.threads)
    except (OSError, ckc.CkError) as e:
        sys.exit(f"error: {e}")
    t0 = time.perf_counter()
    out = m.generate(a.prompt, a.max_new_tokens, a.temperature, a.top_k, a.top_p, a.seed)
    dt = time.perf_counter() - t0
    print(" ".join(map(str, out)))
    print(f"{len(out) - len(a.prompt)} tokens in {dt * 1000:.1f} ms ({m.num_layers} layers, vocab {m.vocab_size}, "
          f"{m.threads} threads)", file=sys.stderr)


if __name__ == "__main__":
    main()
