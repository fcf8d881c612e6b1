"""GPT-2 style decoder with multi-head attention (MHA) and a static KV cache.

Architecture (defaults are GPT-2 small shapes, but only 2 layers; GPT-2 small
has 12):
  * token embedding ``wte`` (vocab -> hidden) + learned position embedding
    ``wpe`` (max_positions -> hidden)
  * ``layers`` pre-LayerNorm blocks ``h.{i}``:
      - ``ln_1`` (LayerNorm) -> ``attn`` (:class:`MHAAttention`): one fused
        projection ``c_attn`` (hidden -> 3*hidden, with bias) split into q, k,
        v; ``F.scaled_dot_product_attention`` with equal q/k/v head counts;
        output projection ``c_proj`` (with bias)
      - ``ln_2`` (LayerNorm) -> ``mlp``: ``c_fc`` (hidden -> 4*hidden),
        GELU (tanh approximation), ``c_proj`` (4*hidden -> hidden)
  * final ``ln_f`` (LayerNorm) and ``lm_head`` (hidden -> vocab, no bias); its
    weight is tied to ``wte`` when ``tied=True`` (as in GPT-2)

Options (keyword-only):
  layers=2, hidden=768, heads=12 (head_dim = hidden // heads = 64),
  vocab=50257, max_positions=32768, tied=True
  (GPT-2 itself has max_positions=1024; the default is larger so long-context
  sweeps run.  ``make_inputs`` needs context <= max_positions on real devices.)

Forward signature::

    model(input_ids, kv_caches=None, start_pos=0) -> logits [B, q_len, vocab]

``kv_caches`` is a list with one ``(k_cache, v_cache)`` pair per layer, each
``[B, heads, context, head_dim]``; ``start_pos`` is a python int.
  * prefill: ``input_ids`` ``[B, context]``, ``start_pos=0``; K/V are written to
    cache slots ``[0, context)`` and attention is causal over the fresh K/V.
  * decode: ``input_ids`` ``[B, 1]``, ``start_pos=context-1``; the new K/V go
    into slot ``context-1`` and the token attends over all ``context`` slots.
"""

import torch
import torch.nn.functional as F
from torch import nn


class MHAAttention(nn.Module):
    def __init__(self, hidden, num_heads):
        super().__init__()
        if hidden % num_heads:
            raise ValueError("hidden must be a multiple of heads")
        self.num_heads = num_heads
        self.head_dim = hidden // num_heads
        self.hidden = hidden
        self.c_attn = nn.Linear(hidden, 3 * hidden, bias=True)
        self.c_proj = nn.Linear(hidden, hidden, bias=True)

    def forward(self, x, kv_cache=None, start_pos=0):
        bsz, seq_len, _ = x.shape
        q, k, v = self.c_attn(x).split(self.hidden, dim=-1)
        q = q.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        v = v.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)

        if kv_cache is not None:
            k_cache, v_cache = kv_cache
            end_pos = start_pos + seq_len
            k_cache[:, :, start_pos:end_pos].copy_(k)
            v_cache[:, :, start_pos:end_pos].copy_(v)
            if seq_len == 1:
                # decode: attend over every cached position, including the new one
                k, v = k_cache[:, :, :end_pos], v_cache[:, :, :end_pos]
        if seq_len > 1 and start_pos != 0:
            raise ValueError("multi-token forward is only supported from start_pos=0")

        out = F.scaled_dot_product_attention(q, k, v, is_causal=seq_len > 1)
        out = out.transpose(1, 2).reshape(bsz, seq_len, self.hidden)
        return self.c_proj(out)


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.c_fc = nn.Linear(hidden, 4 * hidden, bias=True)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * hidden, hidden, bias=True)

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = MHAAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = MLP(hidden)

    def forward(self, x, kv_cache=None, start_pos=0):
        x = x + self.attn(self.ln_1(x), kv_cache, start_pos)
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, max_positions, tied):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)
        self.h = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, kv_caches=None, start_pos=0):
        seq_len = input_ids.shape[1]
        positions = torch.arange(start_pos, start_pos + seq_len, dtype=torch.long)
        x = self.wte(input_ids) + self.wpe(positions)
        for i, block in enumerate(self.h):
            cache = kv_caches[i] if kv_caches is not None else None
            x = block(x, cache, start_pos)
        return self.lm_head(self.ln_f(x))


def build_model(*, layers=2, hidden=768, heads=12, vocab=50257, max_positions=32768, tied=True):
    return GPT2(layers, hidden, heads, vocab, max_positions, tied)


def make_inputs(batch, context, phase, *, layers=2, hidden=768, heads=12, vocab=50257):
    if phase == "prefill":
        q_len, start_pos = context, 0
    elif phase == "decode":
        q_len, start_pos = 1, context - 1
    else:
        raise ValueError(f"unknown phase {phase!r}")
    head_dim = hidden // heads
    input_ids = torch.randint(0, vocab, (batch, q_len), dtype=torch.long)
    caches = [
        (torch.zeros(batch, heads, context, head_dim), torch.zeros(batch, heads, context, head_dim))
        for _ in range(layers)
    ]
    return {"input_ids": input_ids, "kv_caches": caches, "start_pos": start_pos}
