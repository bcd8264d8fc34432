#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""Train a small byte-level Llama on a text with ckc's generated training code, then generate from it.

The model reads bytes (vocabulary 256: the text issue's tokenizers have not landed), starts from ckc's
deterministic random weights and learns the corpus (models/corpus/compilers.txt by default, written for
this project) with AdamW on random windows of the text. It prints the loss curve as it goes (and plots it
to a PNG with --plot when matplotlib is installed), saves the trained model (Hugging Face names,
safetensors) and greedily continues a prompt with the trained weights.

    scripts/train_text.py [--steps 300] [--seq 128] [--lr 3e-3] [--dim 128] [--layers 4] [--heads 4]
                          [--corpus FILE] [--prompt "A compiler"] [--generate 200] [--out DIR] [--plot loss.png]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import ckc


def config(dim, layers, heads, seq):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
            "hidden_size": dim, "intermediate_size": dim * 8 // 3 // 4 * 4, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": heads, "max_position_embeddings": max(seq, 256),
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32"}


def ascii_curve(losses, width=60, height=12):
    """The loss curve as text: one column per bucket of steps, '*' at its mean."""
    buckets = np.array_split(np.asarray(losses), min(width, len(losses)))
    means = [float(b.mean()) for b in buckets]
    lo, hi = min(means), max(means)
    rows = []
    for r in range(height):
        level = hi - (hi - lo) * r / (height - 1)
        line = "".join("*" if abs(m - level) <= (hi - lo) / (2 * (height - 1)) + 1e-12 else " " for m in means)
        rows.append(f"{level:7.3f} |{line}")
    rows.append(" " * 8 + "+" + "-" * len(means))
    rows.append(" " * 9 + f"step 1{' ' * max(len(means) - 12, 1)}{len(losses)}")
    return "\n".join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=os.path.join(ckc.ROOT, "models", "corpus", "compilers.txt"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seq", type=int, default=128, help="bytes per step (default 128)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0, help="0: every core")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt", default="A compiler")
    ap.add_argument("--generate", type=int, default=200, help="bytes to generate after training")
    ap.add_argument("--out", default=os.path.join(os.environ.get("CKC_CACHE_DIR") or
                                                  os.path.join(os.path.expanduser("~"), ".cache", "ckc"), "train_text"))
    ap.add_argument("--plot", help="write the loss curve to this PNG (needs matplotlib)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line: first and last losses, text")
    a = ap.parse_args(argv)

    with open(a.corpus, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int32)
    if len(data) < a.seq + 2:
        ap.error(f"{a.corpus}: {len(data)} bytes, fewer than --seq {a.seq} + 2")
    os.makedirs(a.out, exist_ok=True)
    cfg_path = os.path.join(a.out, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(config(a.dim, a.layers, a.heads, a.seq), f, indent=1)
    init = ckc.random_weights(cfg_path, os.path.join(a.out, "init"), seed=a.seed)
    so = ckc.build_library(ckc.compile_model(cfg_path, os.path.join(a.out, "c"), args=["--train"]))
    m = ckc.LlmModel(so, init, threads=a.threads or None)
    m.enable_training(a.seq)
    print(f"training a byte-level Llama (dim {a.dim}, {a.layers} layers, {a.heads} heads) on {a.corpus} "
          f"({len(data)} bytes), {a.steps} steps of {a.seq} bytes, AdamW lr {a.lr}", flush=True)
    rng = np.random.default_rng(a.seed)
    losses = []
    t0 = time.perf_counter()
    for step in range(a.steps):
        lr = a.lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * (1 - step / a.steps))  # warm-up, linear decay
        i = int(rng.integers(0, len(data) - a.seq - 1))
        losses.append(m.train_step(data[i:i + a.seq], data[i + 1:i + a.seq + 1], lr, betas=(0.9, 0.95),
                                   weight_decay=0.1, clip=1.0))
        if step == 0 or (step + 1) % max(a.steps // 10, 1) == 0:
            print(f"  step {step + 1:5d}  loss {losses[-1]:.4f}  ({(time.perf_counter() - t0) / (step + 1) * 1e3:.1f} "
                  f"ms/step)", flush=True)
    print(ascii_curve(losses))
    if a.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            plt.figure(figsize=(6, 3.5))
            plt.plot(range(1, len(losses) + 1), losses)
            plt.xlabel("step")
            plt.ylabel("loss (nats per byte)")
            plt.title("ckc --train: byte-level Llama on " + os.path.basename(a.corpus))
            plt.tight_layout()
            plt.savefig(a.plot, dpi=120)
            print(f"loss curve: {a.plot}")
        except ImportError:
            print("--plot: matplotlib is not installed (pip install matplotlib); the curve is printed above")
    trained = os.path.join(a.out, "trained")
    m.save(trained)
    m.disable_training()
    prompt = list(a.prompt.encode())
    ids = m.generate(prompt, max_new_tokens=min(a.generate, m.context_length - len(prompt)))
    text = bytes(ids).decode("utf-8", errors="replace")
    print(f"saved {trained}; greedy continuation of {a.prompt!r}:\n{text}")
    if a.json:
        print(json.dumps({"first_loss": losses[0], "last_loss": float(np.mean(losses[-10:])), "text": text}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
