"""Hugging Face decoder forward passes in plain PyTorch (float32), one block
function per family, written from transformers' modeling code:

  llama    RMSNorm; q/k/v/o (+attention_bias), RoPE (rotate_half, linear/llama3
           scaling), GQA via repeat_kv, softmax in float32; down(silu(gate) * up)
  mistral  llama + sliding window: key j visible from query i iff i - W < j <= i
  qwen2    llama with biases on q/k/v only; sliding window per layer_types
  phi3     fused qkv_proj (q | k | v) and gate_up_proj (up * silu(gate)); window
  gemma    embeddings * sqrt(hidden) (float32 scalar); RMSNorm * (1 + w);
           GeGLU with gelu_pytorch_tanh; head_dim independent of hidden
  gemma2   gemma + sandwich norms, scale query_pre_attn_scalar^-1/2, attention
           soft-capping before the mask, windows on even layers, final soft-capping
  phi      LayerNorm; attention and MLP in parallel from one norm; partial
           rotary; dense; fc1 -> gelu_new -> fc2; lm_head with bias
  gpt2     wte + wpe; LayerNorm; Conv1D (x @ W + b, W [in, out]); fused c_attn;
           scores / sqrt(head_dim); gelu_new; tied head

It knows nothing of ckc: the parity tests compare the compiled libraries with
it, and scripts/bench_llm.py uses it as the PyTorch eager baseline.
"""
import math

import torch
import torch.nn.functional as F


# ---- shared pieces ---------------------------------------------------------------

def rope_inv_freq(config, rot_dim):
    params = config.get("rope_parameters") or {}
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    scaling = params if params else (config.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    dim = rot_dim
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


def apply_rope(x, cos, sin, rot_dim):
    """x [heads, T, D]; rotates the first rot_dim dims (partial rotary), passes the rest."""
    rot, rest = x[..., :rot_dim], x[..., rot_dim:]
    return torch.cat((rot * cos + rotate_half(rot) * sin, rest), dim=-1)


def rms_norm(x, w, eps, plus_one=False):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * (1.0 + w) if plus_one else w * x


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def gelu_new(x):  # transformers.activations.NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def activation(name):
    if name in ("silu", "swish"):
        return F.silu
    if name in ("gelu_new", "gelu_fast"):
        return gelu_new
    if name == "gelu_pytorch_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu
    raise ValueError(f"reference: activation {name}")


class KVCache:
    """Preallocated [layer][kv_head, capacity, head_dim] keys and values."""

    def __init__(self, layers, kv_heads, capacity, head_dim):
        self.k = [torch.zeros(kv_heads, capacity, head_dim) for _ in range(layers)]
        self.v = [torch.zeros(kv_heads, capacity, head_dim) for _ in range(layers)]
        self.length = 0


# ---- the model -----------------------------------------------------------------------

class DecoderReference:
    """A Hugging Face causal LM of family config["model_type"] on `weights` (HF names)."""

    def __init__(self, config, weights):
        c = self.c = config
        self.family = c["model_type"]
        W = self.W = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in weights.items()}
        if self.family == "gpt2":
            self.C, self.H, self.L = c.get("n_embd", 768), c.get("n_head", 12), c.get("n_layer", 12)
            self.KVH, self.D = self.H, self.C // self.H
            self.eps = c.get("layer_norm_epsilon", 1e-5)
            self.rot_dim = 0
            self.act = activation(c.get("activation_function", "gelu_new"))
            self.tie = c.get("tie_word_embeddings", True)
            pre = "transformer."
            self.embed, self.wpe = W[pre + "wte.weight"], W[pre + "wpe.weight"]
            self.lm_head, self.lm_bias = (self.embed if self.tie else W["lm_head.weight"]), None
            self.layers = [self._layer(f"{pre}h.{i}.") for i in range(self.L)]
            self.final_norm = lambda x: layer_norm(x, W[pre + "ln_f.weight"], W[pre + "ln_f.bias"], self.eps)
            return
        defaults = {  # HF config class defaults of the keys that differ by family
            "llama": dict(tie=False, eps=1e-6, act="silu", kv=None, head_dim=None, partial=1.0),
            "mistral": dict(tie=False, eps=1e-6, act="silu", kv=8, head_dim=None, partial=1.0),
            "qwen2": dict(tie=False, eps=1e-6, act="silu", kv=32, head_dim=None, partial=1.0),
            "phi3": dict(tie=False, eps=1e-5, act="silu", kv=None, head_dim=None, partial=1.0),
            "gemma": dict(tie=True, eps=1e-6, act="gelu_pytorch_tanh", kv=16, head_dim=256, partial=1.0),
            "gemma2": dict(tie=True, eps=1e-6, act="gelu_pytorch_tanh", kv=4, head_dim=256, partial=1.0),
            "phi": dict(tie=False, eps=1e-5, act="gelu_new", kv=None, head_dim=None, partial=0.5),
        }[self.family]
        self.C, self.H, self.L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
        self.KVH = c.get("num_key_value_heads") or defaults["kv"] or self.H
        self.D = c.get("head_dim") or defaults["head_dim"] or self.C // self.H
        self.eps = c.get("layer_norm_eps" if self.family == "phi" else "rms_norm_eps", defaults["eps"])
        self.tie = c.get("tie_word_embeddings", defaults["tie"])
        if self.family in ("gemma", "gemma2"):
            self.act = activation(c.get("hidden_activation") or "gelu_pytorch_tanh")
        else:
            self.act = activation(c.get("hidden_act", defaults["act"]))
        self.rot_dim = int(self.D * c.get("partial_rotary_factor", defaults["partial"]))
        self.inv_freq = rope_inv_freq(c, self.rot_dim)
        self.embed = W["model.embed_tokens.weight"]
        self.lm_head = self.embed if self.tie else W["lm_head.weight"]
        self.lm_bias = W.get("lm_head.bias")
        self.windows = self._windows()
        self.layers = [self._layer(f"model.layers.{i}.") for i in range(self.L)]
        if self.family == "phi":
            self.final_norm = lambda x: layer_norm(x, W["model.final_layernorm.weight"],
                                                   W["model.final_layernorm.bias"], self.eps)
        else:
            plus = self.family in ("gemma", "gemma2")
            self.final_norm = lambda x: rms_norm(x, W["model.norm.weight"], self.eps, plus)

    def _layer(self, prefix):
        return {k[len(prefix):]: v for k, v in self.W.items() if k.startswith(prefix)}

    def _windows(self):
        c, L = self.c, self.L
        if self.family in ("mistral", "phi3"):
            w = c.get("sliding_window", 4096 if self.family == "mistral" else None)
            return [w or 0] * L
        if self.family == "qwen2":
            w = c.get("sliding_window", 4096) if c.get("use_sliding_window", False) else None
            types = c.get("layer_types") or [
                "sliding_attention" if w is not None and i >= c.get("max_window_layers", 28) else "full_attention"
                for i in range(L)]
            return [(w or 0) if t == "sliding_attention" else 0 for t in types]
        if self.family == "gemma2":
            w = c.get("sliding_window", 4096)
            types = c.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
            return [(w or 0) if t == "sliding_attention" else 0 for t in types]
        return [0] * L

    def new_cache(self, capacity):
        return KVCache(self.L, self.KVH, capacity, self.D)

    # ---- attention: q [H, T, D], k/v [KVH, T, D] -> [T, H*D]
    def _attend(self, li, q, k, v, cache, pos0, scale, window, softcap):
        T = q.shape[1]
        if cache is not None:
            cache.k[li][:, pos0:pos0 + T] = k
            cache.v[li][:, pos0:pos0 + T] = v
            k, v = cache.k[li][:, :pos0 + T], cache.v[li][:, :pos0 + T]
        k = k.repeat_interleave(self.H // self.KVH, dim=0)
        v = v.repeat_interleave(self.H // self.KVH, dim=0)
        scores = (q @ k.transpose(1, 2)) * scale
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        qpos = (pos0 + torch.arange(T))[:, None]
        kpos = torch.arange(pos0 + T)[None, :]
        allowed = kpos <= qpos
        if window:
            allowed = allowed & (kpos > qpos - window)
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1)
        return (probs @ v).transpose(0, 1).reshape(T, self.H * self.D)

    def _heads(self, x, n):
        return x.view(x.shape[0], n, self.D).transpose(0, 1)

    # ---- one block per family
    def _block(self, li, p, x, cache, pos0, cos, sin):
        fam, H, KVH, D = self.family, self.H, self.KVH, self.D
        if fam == "gpt2":
            h = layer_norm(x, p["ln_1.weight"], p["ln_1.bias"], self.eps)
            qkv = h @ p["attn.c_attn.weight"] + p["attn.c_attn.bias"]
            q, k, v = qkv.split(self.C, dim=-1)
            q, k, v = self._heads(q, H), self._heads(k, H), self._heads(v, H)
            scale = 1.0 / math.sqrt(D) if self.c.get("scale_attn_weights", True) else 1.0
            if self.c.get("scale_attn_by_inverse_layer_idx", False):
                scale /= li + 1
            a = self._attend(li, q, k, v, cache, pos0, scale, 0, 0)
            x = x + (a @ p["attn.c_proj.weight"] + p["attn.c_proj.bias"])
            h = layer_norm(x, p["ln_2.weight"], p["ln_2.bias"], self.eps)
            f = self.act(h @ p["mlp.c_fc.weight"] + p["mlp.c_fc.bias"])
            return x + (f @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"])

        plus = fam in ("gemma", "gemma2")
        if fam == "phi":
            h = layer_norm(x, p["input_layernorm.weight"], p["input_layernorm.bias"], self.eps)
        else:
            h = rms_norm(x, p["input_layernorm.weight"], self.eps, plus)
        if fam == "phi3":
            qkv = F.linear(h, p["self_attn.qkv_proj.weight"])
            q, k, v = qkv.split([H * D, KVH * D, KVH * D], dim=-1)
        else:
            q = F.linear(h, p["self_attn.q_proj.weight"], p.get("self_attn.q_proj.bias"))
            k = F.linear(h, p["self_attn.k_proj.weight"], p.get("self_attn.k_proj.bias"))
            v = F.linear(h, p["self_attn.v_proj.weight"], p.get("self_attn.v_proj.bias"))
        q, k, v = self._heads(q, H), self._heads(k, KVH), self._heads(v, KVH)
        q, k = apply_rope(q, cos, sin, self.rot_dim), apply_rope(k, cos, sin, self.rot_dim)
        scale, softcap = D ** -0.5, 0
        if fam == "gemma2":
            scale = self.c.get("query_pre_attn_scalar", 256) ** -0.5
            softcap = self.c.get("attn_logit_softcapping", 50.0) or 0
        a = self._attend(li, q, k, v, cache, pos0, scale, self.windows[li], softcap)
        o_name = "self_attn.dense" if fam == "phi" else "self_attn.o_proj"
        a = F.linear(a, p[o_name + ".weight"], p.get(o_name + ".bias"))

        if fam == "phi":  # parallel attention and MLP from the same normed input
            f = F.linear(self.act(F.linear(h, p["mlp.fc1.weight"], p["mlp.fc1.bias"])), p["mlp.fc2.weight"],
                         p["mlp.fc2.bias"])
            return a + f + x
        if fam == "gemma2":
            a = rms_norm(a, p["post_attention_layernorm.weight"], self.eps, True)
        x = x + a
        if fam == "gemma2":
            h = rms_norm(x, p["pre_feedforward_layernorm.weight"], self.eps, True)
        else:
            h = rms_norm(x, p["post_attention_layernorm.weight"], self.eps, plus)
        if fam == "phi3":
            gate, up = F.linear(h, p["mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
            f = F.linear(up * self.act(gate), p["mlp.down_proj.weight"])
        else:
            gate = F.linear(h, p["mlp.gate_proj.weight"], p.get("mlp.gate_proj.bias"))
            up = F.linear(h, p["mlp.up_proj.weight"], p.get("mlp.up_proj.bias"))
            f = F.linear(self.act(gate) * up, p["mlp.down_proj.weight"], p.get("mlp.down_proj.bias"))
        if fam == "gemma2":
            f = rms_norm(f, p["post_feedforward_layernorm.weight"], self.eps, True)
        return x + f

    @torch.no_grad()
    def forward(self, tokens, cache=None):
        """Logits [T, vocab] for `tokens`; appended to `cache` when given."""
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        T = tokens.shape[0]
        pos0 = cache.length if cache is not None else 0
        x = self.embed[tokens]
        cos = sin = None
        if self.family == "gpt2":
            x = x + self.wpe[pos0:pos0 + T]
        else:
            if self.family in ("gemma", "gemma2"):
                x = x * torch.tensor(self.C ** 0.5, dtype=x.dtype)
            freqs = torch.arange(pos0, pos0 + T, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        for li, p in enumerate(self.layers):
            x = self._block(li, p, x, cache, pos0, cos, sin)
        if cache is not None:
            cache.length += T
        logits = F.linear(self.final_norm(x), self.lm_head, self.lm_bias)
        if self.family == "gemma2":
            cap = self.c.get("final_logit_softcapping", 30.0)
            if cap:
                logits = torch.tanh(logits / cap) * cap
        return logits

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
