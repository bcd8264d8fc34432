#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Tokenizer throughput: ckc's C encoder against Hugging Face `tokenizers` (Rust) on the test corpus, the same
tokenizer files, interleaved repetitions in one process, one thread each (tokenizers' encode of one text runs
on one thread). Prints MB/s for both and the ratio (> 1: ckc is faster), per tokenizer, and checks the ids agree.

    scripts/bench_tokenizer.py [--reps 7] [--size 1000000]
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import text_corpus  # noqa: E402
import tokenizer_cases  # noqa: E402
from ckc.build import cache_dir  # noqa: E402
from ckc.models import fetch  # noqa: E402
from ckc.text import Tokenizer  # noqa: E402


def smollm2_hf(path):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path)).backend_tokenizer
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return hf


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--size", type=int, default=1_000_000, help="bytes of text per repetition (the corpus repeated)")
    a = ap.parse_args()
    from tokenizers import Tokenizer as HF
    corpus = text_corpus.text()
    text = (corpus * (a.size // len(corpus.encode()) + 1))
    text = text[:a.size]
    # documents of the size text usually comes in (a few KB), as a tokenizer sees them
    docs = [text[i:i + 4096] for i in range(0, len(text), 4096)]
    mb = len(text.encode()) / 1e6
    cases = []
    for fam in ("gpt2", "llama3", "qwen2", "llama2", "gemma"):
        path = tokenizer_cases.save_family(fam, os.path.join(cache_dir(), "tokenizers", fam))
        cases.append((f"{fam} (1.2k vocab)", Tokenizer(path), HF.from_file(path)))
    g = fetch("smollm2-135m-instruct")
    cases.append(("SmolLM2 (49k vocab, GGUF)", Tokenizer(g), smollm2_hf(g)))
    print(f"{mb:.2f} MB of text in {len(docs)} documents, {a.reps} interleaved repetitions, 1 thread each")
    print(f"{'tokenizer':28s} {'ckc MB/s':>9s} {'HF MB/s':>9s} {'ratio':>6s}")
    for name, ours, hf in cases:
        for d in docs[:50]:
            assert ours.encode(d, add_special=False) == hf.encode(d, add_special_tokens=False).ids, name
        t_ours, t_hf = [], []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            for d in docs:
                ours.encode(d, add_special=False)
            t_ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for d in docs:
                hf.encode(d, add_special_tokens=False)
            t_hf.append(time.perf_counter() - t0)
        o, h = statistics.median(t_ours), statistics.median(t_hf)
        print(f"{name:28s} {mb / o:9.2f} {mb / h:9.2f} {h / o:6.2f}x")


if __name__ == "__main__":
    main()
