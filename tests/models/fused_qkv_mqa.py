"""Small multi-query-attention (MQA) decoder with a fused QKV projection.

Each layer's attention has one ``qkv_proj`` Linear (hidden ->
(heads + 2) * head_dim, with bias) whose output is split into ``heads`` query
heads and a SINGLE key head and value head.  Attention is
``F.scaled_dot_product_attention(q, k, v, enable_gqa=True)`` with k/v of 1 head
(not repeated).  Pre-LayerNorm blocks with a GELU MLP, learned position
embedding (``max_positions``).

Static KV cache as in the model-file contract: ``kv_caches`` holds one
``(k_cache, v_cache)`` pair per layer, each ``[B, 1, context, head_dim]``.
  * prefill: ``input_ids [B, context]``, ``start_pos=0``; slots ``[0, context)``
    are written, causal attention over the fresh K/V.
  * decode: ``input_ids [B, 1]``, ``start_pos=context-1``; slot ``context-1`` is
    written and all ``context`` slots are attended.

Forward: ``model(input_ids, kv_caches=None, start_pos=0) -> logits``.

Options: layers=2, hidden=256, heads=8, head_dim=32, vocab=1000,
max_positions=65536
"""

import torch
import torch.nn.functional as F
from torch import nn


class MQAAttention(nn.Module):
    def __init__(self, hidden, num_heads, head_dim):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = 1
        self.head_dim = head_dim
        self.qkv_proj = nn.Linear(hidden, (num_heads + 2) * head_dim, bias=True)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=True)

    def forward(self, x, kv_cache=None, start_pos=0):
        bsz, q_len, _ = x.shape
        d = self.head_dim
        q, k, v = self.qkv_proj(x).split([self.num_heads * d, d, d], dim=-1)
        q = q.view(bsz, q_len, self.num_heads, d).transpose(1, 2)
        k = k.view(bsz, q_len, 1, d).transpose(1, 2)
        v = v.view(bsz, q_len, 1, d).transpose(1, 2)
        if kv_cache is not None:
            k_cache, v_cache = kv_cache
            k_cache[:, :, start_pos:start_pos + q_len].copy_(k)
            v_cache[:, :, start_pos:start_pos + q_len].copy_(v)
            if q_len == 1:
                k, v = k_cache[:, :, :start_pos + 1], v_cache[:, :, :start_pos + 1]
        if q_len > 1 and start_pos != 0:
            raise ValueError("multi-token forward is only supported from start_pos=0")
        out = F.scaled_dot_product_attention(q, k, v, is_causal=q_len > 1, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, q_len, -1))


class Block(nn.Module):
    def __init__(self, hidden, heads, head_dim):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = MQAAttention(hidden, heads, head_dim)
        self.ln_2 = nn.LayerNorm(hidden)
        self.fc_in = nn.Linear(hidden, 4 * hidden)
        self.fc_out = nn.Linear(4 * hidden, hidden)

    def forward(self, x, kv_cache=None, start_pos=0):
        x = x + self.attn(self.ln_1(x), kv_cache, start_pos)
        return x + self.fc_out(F.gelu(self.fc_in(self.ln_2(x))))


class MQADecoder(nn.Module):
    def __init__(self, layers, hidden, heads, head_dim, vocab, max_positions):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, head_dim) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, kv_caches=None, start_pos=0):
        q_len = input_ids.shape[1]
        positions = torch.arange(start_pos, start_pos + q_len, dtype=torch.long)
        x = self.wte(input_ids) + self.wpe(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_caches[i] if kv_caches is not None else None, start_pos)
        return self.lm_head(self.ln_f(x))


def build_model(*, layers=2, hidden=256, heads=8, head_dim=32, vocab=1000, max_positions=65536):
    return MQADecoder(layers, hidden, heads, head_dim, vocab, max_positions)


def make_inputs(batch, context, phase, *, layers=2, head_dim=32, vocab=1000):
    if phase == "prefill":
        q_len, start_pos = context, 0
    elif phase == "decode":
        q_len, start_pos = 1, context - 1
    else:
        raise ValueError(f"unknown phase {phase!r}")
    caches = [
        (torch.zeros(batch, 1, context, head_dim), torch.zeros(batch, 1, context, head_dim))
        for _ in range(layers)
    ]
    input_ids = torch.randint(0, vocab, (batch, q_len), dtype=torch.long)
    return {"input_ids": input_ids, "kv_caches": caches, "start_pos": start_pos}
