"""Small GQA decoder whose attention is hand-written with ``torch.einsum``.

No SDPA: scores ``einsum("bhqd,bhkd->bhqk")``, an explicit softmax
(max-subtract, exp, sum, divide) and ``einsum("bhqk,bhkd->bhqd")``.  K/V have
``kv_heads`` heads and are expanded to ``heads`` with ``repeat_interleave``
along the head dim before the einsums.  Pre-RMSNorm blocks with a GELU MLP;
no position embedding (not needed for profiling).

The KV cache is HF-"dynamic" style, grown with ``torch.cat``:
  * prefill: ``input_ids [B, context]``, no cache (``past_kv=None``); causal
    attention over the fresh K/V (mask built with ``torch.full(...).triu``).
  * decode: ``input_ids [B, 1]`` and ``past_kv``, one ``(k, v)`` pair per layer,
    each ``[B, kv_heads, context-1, head_dim]``; the forward concatenates the
    new token's K/V, so the token attends over ``context`` positions.

Forward: ``model(input_ids, past_kv=None) -> logits [B, q_len, vocab]``.

Options: layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32,
intermediate=512, vocab=1000
"""

import torch
import torch.nn.functional as F
from torch import nn


class EinsumAttention(nn.Module):
    def __init__(self, hidden, num_heads, num_kv_heads, head_dim):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=False)

    def forward(self, x, past=None):
        bsz, q_len, _ = x.shape
        q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        groups = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)

        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.head_dim ** -0.5
        if q_len > 1:
            kv_len = k.shape[2]
            mask = torch.full((q_len, kv_len), float("-inf")).triu(kv_len - q_len + 1)
            scores = scores + mask
        scores = scores - scores.amax(dim=-1, keepdim=True)
        weights = scores.exp()
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, q_len, -1))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, intermediate):
        super().__init__()
        self.attn_norm = RMSNorm(hidden)
        self.attn = EinsumAttention(hidden, heads, kv_heads, head_dim)
        self.mlp_norm = RMSNorm(hidden)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x, past=None):
        x = x + self.attn(self.attn_norm(x), past)
        return x + self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))


class EinsumDecoder(nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, head_dim, intermediate, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            Block(hidden, heads, kv_heads, head_dim, intermediate) for _ in range(layers)
        )
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, past_kv=None):
        x = self.embed(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, past_kv[i] if past_kv is not None else None)
        return self.lm_head(self.norm(x))


def build_model(*, layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32, intermediate=512,
                vocab=1000):
    return EinsumDecoder(layers, hidden, heads, kv_heads, head_dim, intermediate, vocab)


def make_inputs(batch, context, phase, *, layers=2, kv_heads=2, head_dim=32, vocab=1000):
    if phase == "prefill":
        return {"input_ids": torch.randint(0, vocab, (batch, context), dtype=torch.long)}
    if phase != "decode":
        raise ValueError(f"unknown phase {phase!r}")
    past = [
        (torch.randn(batch, kv_heads, context - 1, head_dim),
         torch.randn(batch, kv_heads, context - 1, head_dim))
        for _ in range(layers)
    ]
    return {"input_ids": torch.randint(0, vocab, (batch, 1), dtype=torch.long), "past_kv": past}
