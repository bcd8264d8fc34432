#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Generate with a compiled model (libmodel.so) through ctypes: text in, streamed text out (the tokenizer beside
the weights), or token ids in and out.

    scripts/generate.py --lib out/libmodel.so --weights model.gguf --prompt "The capital of France is"
    scripts/generate.py --lib out/libmodel.so --weights model.gguf --chat "Why is the sky blue?"
    scripts/generate.py --lib out/libmodel.so --weights hf-folder --ids 1 2 3 --max-new-tokens 32
"""
import argparse
import sys
import time

import ckc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="the compiled model library (libmodel.so)")
    ap.add_argument("--weights", required=True, help="Hugging Face folder, .safetensors, *.index.json or .gguf")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", help="text to continue")
    what.add_argument("--chat", help="a user message, under the model's chat template")
    what.add_argument("--ids", type=int, nargs="+", help="prompt token ids (prints ids)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--min-p", type=float, default=None)
    ap.add_argument("--repetition-penalty", type=float, default=None)
    ap.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="default: all cores")
    a = ap.parse_args()
    try:
        m = ckc.LlmModel(a.lib, a.weights, threads=a.threads)
    except (OSError, ckc.CkError) as e:
        sys.exit(f"error: {e}")
    sampling = dict(temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                    repetition_penalty=a.repetition_penalty, seed=a.seed)
    t0 = time.perf_counter()
    try:
        if a.ids:
            out = m.generate(a.ids, a.max_new_tokens, a.temperature, a.top_k, a.top_p, a.seed, a.min_p,
                             a.repetition_penalty)
            print(" ".join(map(str, out)))
            n = len(out) - len(a.ids)
        else:
            if a.prompt is not None:
                print(a.prompt, end="", flush=True)
            for piece in m.stream_text(a.prompt if a.prompt is not None else a.chat, a.max_new_tokens,
                                       chat=a.chat is not None, stop=a.stop, **sampling):
                print(piece, end="", flush=True)
            print()
            n = m.last_generation[2].n_new
            print(f"[stop: {m.last_generation[1]}]", file=sys.stderr)
    except ckc.CkError as e:
        sys.exit(f"error: {e}")
    dt = time.perf_counter() - t0
    print(f"{n} tokens in {dt * 1000:.1f} ms ({m.num_layers} layers, vocab {m.vocab_size}, {m.threads} threads)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
