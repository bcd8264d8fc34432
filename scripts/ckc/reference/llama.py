"""The Hugging Face Llama forward pass in plain PyTorch (float32), written from
transformers' modeling_llama.py / modeling_rope_utils.py semantics:

  * RMSNorm: x * rsqrt(mean(x^2) + eps), then weight * that;
  * RoPE: rotate_half pairing (i, i + d/2), cos/sin of float32 pos * inv_freq,
    inv_freq = 1 / theta^(arange(0, d, 2) / d) in float32, optional "linear"
    or "llama3" scaling;
  * attention: GQA via repeat_kv, scores * head_dim^-0.5, causal mask,
    softmax in float32;
  * MLP: down(silu(gate(x)) * up(x)); biases per attention_bias / mlp_bias;
  * tied head when tie_word_embeddings (LlamaConfig default: false).

It knows nothing of ckc; the same class with a KV cache is the eager baseline
of scripts/bench_llm.py.
"""
import math

import torch
import torch.nn.functional as F


def rope_inv_freq(config, head_dim):
    params = config.get("rope_parameters") or {}
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    scaling = params if params else (config.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    dim = head_dim
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_ctx = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        inv_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(medium, smoothed, inv_llama)
    elif kind != "default":
        raise ValueError(f"reference: rope type {kind} not implemented")
    return inv_freq


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class KVCache:
    """Preallocated [layer][kv_head, capacity, head_dim] keys and values."""

    def __init__(self, layers, kv_heads, capacity, head_dim):
        self.k = [torch.zeros(kv_heads, capacity, head_dim) for _ in range(layers)]
        self.v = [torch.zeros(kv_heads, capacity, head_dim) for _ in range(layers)]
        self.length = 0


class LlamaReference:
    def __init__(self, config, weights):
        c = config
        self.C = c.get("hidden_size", 4096)
        self.H = c.get("num_attention_heads", 32)
        self.KVH = c.get("num_key_value_heads") or self.H
        self.D = c.get("head_dim") or self.C // self.H
        self.L = c.get("num_hidden_layers", 32)
        self.eps = c.get("rms_norm_eps", 1e-6)
        tie = c.get("tie_word_embeddings", False)
        W = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in weights.items()}
        self.embed = W["model.embed_tokens.weight"]
        self.lm_head = self.embed if tie else W["lm_head.weight"]
        self.norm = W["model.norm.weight"]
        self.layers = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            self.layers.append({k[len(p):]: v for k, v in W.items() if k.startswith(p)})
        self.inv_freq = rope_inv_freq(c, self.D)

    def rms_norm(self, x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + self.eps))

    def new_cache(self, capacity):
        return KVCache(self.L, self.KVH, capacity, self.D)

    @torch.no_grad()
    def forward(self, tokens, cache=None):
        """Logits [T, vocab] for `tokens`; appended to `cache` when given."""
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        T, H, KVH, D = tokens.shape[0], self.H, self.KVH, self.D
        pos0 = cache.length if cache is not None else 0
        pos = torch.arange(pos0, pos0 + T, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        keys = torch.arange(pos0 + T)[None, :]
        allowed = keys <= (pos0 + torch.arange(T))[:, None]
        x = self.embed[tokens]
        for li, p in enumerate(self.layers):
            h = self.rms_norm(x, p["input_layernorm.weight"])
            q = F.linear(h, p["self_attn.q_proj.weight"], p.get("self_attn.q_proj.bias")).view(T, H, D).transpose(0, 1)
            k = F.linear(h, p["self_attn.k_proj.weight"], p.get("self_attn.k_proj.bias")).view(T, KVH, D).transpose(0, 1)
            v = F.linear(h, p["self_attn.v_proj.weight"], p.get("self_attn.v_proj.bias")).view(T, KVH, D).transpose(0, 1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if cache is not None:
                cache.k[li][:, pos0:pos0 + T] = k
                cache.v[li][:, pos0:pos0 + T] = v
                k, v = cache.k[li][:, :pos0 + T], cache.v[li][:, :pos0 + T]
            k = k.repeat_interleave(H // KVH, dim=0)
            v = v.repeat_interleave(H // KVH, dim=0)
            scores = (q @ k.transpose(1, 2)) * D ** -0.5
            scores = scores.masked_fill(~allowed, float("-inf"))
            probs = torch.softmax(scores.float(), dim=-1)
            o = (probs @ v).transpose(0, 1).reshape(T, H * D)
            x = x + F.linear(o, p["self_attn.o_proj.weight"], p.get("self_attn.o_proj.bias"))
            h = self.rms_norm(x, p["post_attention_layernorm.weight"])
            gate = F.linear(h, p["mlp.gate_proj.weight"], p.get("mlp.gate_proj.bias"))
            up = F.linear(h, p["mlp.up_proj.weight"], p.get("mlp.up_proj.bias"))
            x = x + F.linear(F.silu(gate) * up, p["mlp.down_proj.weight"], p.get("mlp.down_proj.bias"))
        if cache is not None:
            cache.length += T
        return F.linear(self.rms_norm(x, self.norm), self.lm_head)

    def generate(self, prompt, max_new_tokens):
        """Greedy ids through a KV cache."""
        cache = self.new_cache(len(prompt) + max_new_tokens)
        row = self.forward(prompt, cache)[-1]
        out = list(prompt)
        for i in range(max_new_tokens):
            nxt = int(torch.argmax(row))
            out.append(nxt)
            if i + 1 < max_new_tokens:
                row = self.forward([nxt], cache)[-1]
        return out
