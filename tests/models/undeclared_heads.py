"""Attention whose module declares no K/V heads: only the call shows them.

Heads live in attributes the built-in plugin does not know (``h``, ``hkv``, ``dh``), unless
``declare_heads=True`` adds ``n_heads`` (query heads only). K/V reach the attention either
widened with a stride-0 ``expand`` (MQA, ``kv_heads=1``: the cache is ``[B, S, d]``, no head
dimension) or copied with ``repeat_interleave`` (any ``kv_heads``). Attention is
``F.scaled_dot_product_attention`` (``attn="sdpa"``), or written as ``q @ k^T``, softmax,
``@ v`` (``attn="matmul"``) or with ``torch.einsum`` (``attn="einsum"``). Decode writes slot ``context - 1`` of a static cache.

Options: layers=1, hidden=256, heads=8, kv_heads=1, head_dim=32, attn="sdpa", declare_heads=False
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, attn, declare_heads):
        super().__init__()
        self.h, self.hkv, self.dh, self.attn = heads, kv_heads, head_dim, attn
        if declare_heads:
            self.n_heads = heads
        self.wq = nn.Linear(hidden, heads * head_dim, bias=False)
        self.wkv = nn.Linear(hidden, 2 * kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(heads * head_dim, hidden, bias=False)

    def widen(self, t):
        """[B, S, d] (MQA) or [B, Hkv, S, d] -> [B, H, S, d]."""
        if t.dim() == 3:
            return t.unsqueeze(1).expand(t.shape[0], self.h, t.shape[1], self.dh)
        return t.repeat_interleave(self.h // self.hkv, dim=1)

    def forward(self, x, k_cache, v_cache, pos):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.h, self.dh).transpose(1, 2)
        k, v = self.wkv(x).chunk(2, dim=-1)
        if k_cache.dim() == 3:  # [B, S, d]
            k_cache[:, pos:pos + n] = k
            v_cache[:, pos:pos + n] = v
            k, v = k_cache[:, :pos + n], v_cache[:, :pos + n]
        else:  # [B, Hkv, S, d]
            k_cache[:, :, pos:pos + n] = k.view(b, n, self.hkv, self.dh).transpose(1, 2)
            v_cache[:, :, pos:pos + n] = v.view(b, n, self.hkv, self.dh).transpose(1, 2)
            k, v = k_cache[:, :, :pos + n], v_cache[:, :, :pos + n]
        k, v = self.widen(k), self.widen(v)
        if self.attn == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
        else:
            if self.attn == "einsum":
                s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.dh)
            else:
                s = q @ k.transpose(-1, -2) / math.sqrt(self.dh)
            if n > 1:
                s = s + torch.full((n, n), float("-inf")).triu(1)
            p = torch.softmax(s, dim=-1)
            o = torch.einsum("bhqk,bhkd->bhqd", p, v) if self.attn == "einsum" else p @ v
        return self.wo(o.transpose(1, 2).reshape(b, n, -1))


class Model(nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, head_dim, attn, declare_heads):
        super().__init__()
        self.embed = nn.Embedding(1000, hidden)
        self.layers = nn.ModuleList(
            Attention(hidden, heads, kv_heads, head_dim, attn, declare_heads) for _ in range(layers)
        )

    def forward(self, ids, caches, pos):
        x = self.embed(ids)
        for layer, (kc, vc) in zip(self.layers, caches, strict=True):
            x = x + layer(x, kc, vc, pos)
        return x


def build_model(layers=1, hidden=256, heads=8, kv_heads=1, head_dim=32, attn="sdpa", declare_heads=False):
    if attn not in ("sdpa", "matmul", "einsum"):
        raise ValueError(f"attn must be sdpa, matmul or einsum, got {attn!r}")
    return Model(layers, hidden, heads, kv_heads, head_dim, attn, declare_heads)


def make_inputs(batch, context, phase, layers=1, kv_heads=1, head_dim=32):
    n, pos = (context, 0) if phase == "prefill" else (1, context - 1)
    shape = (batch, context, head_dim) if kv_heads == 1 else (batch, kv_heads, context, head_dim)
    caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(layers)]
    return (torch.randint(0, 1000, (batch, n), dtype=torch.long), caches, pos)
