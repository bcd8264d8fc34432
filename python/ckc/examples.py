"""Example PyTorch modules for the graph path: what the parity tests and
scripts/bench_graph.py export, compile and compare against eager PyTorch.

    MLP          3 Linear layers with ReLU (the seeds' MLP benchmark)
    Block        a pre-norm transformer block; attention written three ways:
                 "hand" (max/exp/sum softmax), "softmax" (F.softmax), "sdpa"
                 (F.scaled_dot_product_attention)
    GPT          a nanoGPT-style LM: token + position embeddings, a `tril`
                 mask buffer per layer, fused qkv split, tanh GELU written
                 out, weight-tied head, int64 token ids
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, dim=512, hidden=None):
        super().__init__()
        hidden = hidden or dim
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class SelfAttention(nn.Module):
    def __init__(self, dim, heads, attn="softmax", causal=False, max_len=None, bias_buffer=False):
        super().__init__()
        self.heads, self.attn, self.causal = heads, attn, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        if bias_buffer:  # nanoGPT: the causal mask as a registered buffer
            n = max_len
            self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, S, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        hd = C // self.heads
        q = q.view(B, S, self.heads, hd).transpose(1, 2)
        k = k.view(B, S, self.heads, hd).transpose(1, 2)
        v = v.view(B, S, self.heads, hd).transpose(1, 2)
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            if self.causal:
                if hasattr(self, "bias"):
                    att = att.masked_fill(self.bias[:, :, :S, :S] == 0, float("-inf"))
                else:
                    mask = torch.tril(torch.ones(S, S, dtype=torch.bool))
                    att = att.masked_fill(~mask, float("-inf"))
            if self.attn == "hand":
                att = att - att.max(dim=-1, keepdim=True)[0]
                att = att.exp()
                att = att / att.sum(dim=-1, keepdim=True)
            else:
                att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, S, C)
        return self.proj(y)


class NewGELU(nn.Module):
    """GPT-2's tanh GELU, written out (8 ATen ops after export)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, dim=64, heads=4, attn="softmax", causal=False, gelu="erf", max_len=None, bias_buffer=False):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, attn, causal, max_len, bias_buffer)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = NewGELU() if gelu == "tanh" else nn.GELU()
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=96, dim=64, heads=4, layers=3, max_len=32):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.h = nn.ModuleList([Block(dim, heads, "softmax", True, "tanh", max_len, True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx):
        B, S = idx.shape
        pos = torch.arange(0, S, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def randomize(module, seed=0, std=0.2):
    """Deterministic non-trivial parameters (LayerNorm weights away from 1, biases away from 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            norm_weight = p.dim() == 1 and name.endswith("weight")
            p.copy_(torch.randn(p.shape, generator=g) * std + (1.0 if norm_weight else 0.0))
    return module.eval()
