"""Llama-style decoder with grouped-query attention (GQA) and a static KV cache.

Architecture (defaults match Mistral-7B / Llama-style 7-8B shapes):
  * token embedding ``embed_tokens`` (vocab -> hidden)
  * ``layers`` decoder blocks, each:
      - ``input_layernorm`` (RMSNorm) -> ``self_attn`` (:class:`GQAAttention`)
        with ``q_proj``/``k_proj``/``v_proj``/``o_proj`` (no bias), rotary
        position embeddings on q and k, and
        ``F.scaled_dot_product_attention(..., enable_gqa=True)`` where K/V keep
        their ``kv_heads`` heads (they are NOT repeated to ``heads``)
      - ``post_attention_layernorm`` (RMSNorm) -> ``mlp`` (SwiGLU:
        ``down_proj(silu(gate_proj(x)) * up_proj(x))``, no bias)
  * final ``norm`` (RMSNorm) and ``lm_head`` (hidden -> vocab, untied)

Options (keyword-only, accepted by both ``build_model`` and ``make_inputs``
where relevant):
  layers=2, heads=32, kv_heads=8, head_dim=128, hidden=4096,
  intermediate=14336, vocab=32000, rope_theta=10000.0

Forward signature::

    model(input_ids, kv_caches=None, start_pos=0) -> logits [B, q_len, vocab]

``kv_caches`` is a list with one ``(k_cache, v_cache)`` pair per layer, each of
shape ``[B, kv_heads, context, head_dim]``.  ``start_pos`` is a python int.

Phases (see ``make_inputs``):
  * prefill: ``input_ids`` is ``[B, context]``, ``start_pos=0``; every layer
    writes its K/V into cache slots ``[0, context)`` and attends causally over
    the freshly computed K/V.
  * decode: ``input_ids`` is ``[B, 1]``, ``start_pos=context-1``; every layer
    writes the new token's K/V into slot ``context-1`` of its cache and attends
    over all ``context`` slots.
  * decode with ``q_len=N`` (multi-token decode, a speculative or MTP verify
    step): ``input_ids`` is ``[B, N]``, ``start_pos=context-N``; the N new
    tokens' K/V go into the last N slots and new token i attends slots
    ``[0, context-N+i]`` (a boolean mask, causal among the new tokens).
"""

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    """x: [B, H, S, D]; cos/sin: [S, D] (broadcast over batch and heads)."""
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim, theta=10000.0):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, start_pos, seq_len, dtype):
        positions = torch.arange(start_pos, start_pos + seq_len, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)          # [S, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)                # [S, D]
        return emb.cos().to(dtype), emb.sin().to(dtype)


class GQAAttention(nn.Module):
    def __init__(self, hidden, num_heads, num_kv_heads, head_dim):
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, kv_cache=None, start_pos=0):
        bsz, seq_len, _ = x.shape
        q = self.q_proj(x).view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)

        if kv_cache is not None:
            k_cache, v_cache = kv_cache
            end_pos = start_pos + seq_len
            k_cache[:, :, start_pos:end_pos].copy_(k)
            v_cache[:, :, start_pos:end_pos].copy_(v)
            if seq_len == 1 or start_pos > 0:
                # decode: attend over every cached position, including the new ones
                k, v = k_cache[:, :, :end_pos], v_cache[:, :, :end_pos]
        elif seq_len > 1 and start_pos != 0:
            raise ValueError("multi-token forward from start_pos > 0 needs a kv_cache")

        if seq_len > 1 and start_pos > 0:
            # multi-token decode: new token i sees the cache and new tokens 0..i (bottom-right causal)
            mask = torch.ones(seq_len, end_pos, dtype=torch.bool).tril_(start_pos)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=seq_len > 1, enable_gqa=True)
        out = out.transpose(1, 2).reshape(bsz, seq_len, self.num_heads * self.head_dim)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, intermediate):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = GQAAttention(hidden, heads, kv_heads, head_dim)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = MLP(hidden, intermediate)

    def forward(self, x, cos, sin, kv_cache=None, start_pos=0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, start_pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaGQA(nn.Module):
    def __init__(self, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, rope_theta):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.rotary = RotaryEmbedding(head_dim, rope_theta)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, heads, kv_heads, head_dim, intermediate) for _ in range(layers)
        )
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, kv_caches=None, start_pos=0):
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary(start_pos, input_ids.shape[1], x.dtype)
        for i, layer in enumerate(self.layers):
            cache = kv_caches[i] if kv_caches is not None else None
            x = layer(x, cos, sin, cache, start_pos)
        return self.lm_head(self.norm(x))


def build_model(*, layers=2, heads=32, kv_heads=8, head_dim=128, hidden=4096,
                intermediate=14336, vocab=32000, rope_theta=10000.0):
    return LlamaGQA(layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, rope_theta)


def make_kv_caches(batch, context, *, layers=2, kv_heads=8, head_dim=128):
    """One (k, v) pair per layer, each [batch, kv_heads, context, head_dim]."""
    return [
        (torch.zeros(batch, kv_heads, context, head_dim), torch.zeros(batch, kv_heads, context, head_dim))
        for _ in range(layers)
    ]


def make_inputs(batch, context, phase, *, q_len=1, layers=2, kv_heads=8, head_dim=128, vocab=32000):
    """Inputs of one step; in decode, ``q_len`` new tokens per sequence (multi-token decode)."""
    if phase == "prefill":
        q_len, start_pos = context, 0
    elif phase == "decode":
        start_pos = context - q_len
    else:
        raise ValueError(f"unknown phase {phase!r}")
    input_ids = torch.randint(0, vocab, (batch, q_len), dtype=torch.long)
    caches = make_kv_caches(batch, context, layers=layers, kv_heads=kv_heads, head_dim=head_dim)
    return {"input_ids": input_ids, "kv_caches": caches, "start_pos": start_pos}
