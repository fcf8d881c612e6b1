"""Small Llama-HF-style GQA decoder that repeats K/V before SDPA.

Like HF ``LlamaAttention`` with the SDPA backend: K/V (``kv_heads`` heads) are
expanded to ``heads`` with ``repeat_kv`` (``x[:, :, None].expand(...)
.reshape(...)``, which materialises a copy) and then passed to
``F.scaled_dot_product_attention`` WITHOUT ``enable_gqa``.  Pre-RMSNorm blocks,
SwiGLU MLP, no position embedding.

Static KV cache as in the model-file contract: ``kv_caches`` holds one
``(k_cache, v_cache)`` pair per layer, each ``[B, kv_heads, context, head_dim]``.
  * prefill: ``input_ids [B, context]``, ``start_pos=0``; slots ``[0, context)``
    are written, causal attention over the fresh K/V.
  * decode: ``input_ids [B, 1]``, ``start_pos=context-1``; slot ``context-1`` is
    written and all ``context`` slots are attended.

Forward: ``model(input_ids, kv_caches=None, start_pos=0) -> logits``.

Options: layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32,
intermediate=512, vocab=1000
"""

import torch
import torch.nn.functional as F
from torch import nn


def repeat_kv(x, n_rep):
    """[B, Hkv, S, d] -> [B, Hkv * n_rep, S, d] (HF ``repeat_kv``)."""
    bsz, kv_heads, seq_len, head_dim = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None].expand(bsz, kv_heads, n_rep, seq_len, head_dim)
    return x.reshape(bsz, kv_heads * n_rep, seq_len, head_dim)


class RepeatKVAttention(nn.Module):
    def __init__(self, hidden, num_heads, num_kv_heads, head_dim):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=False)

    def forward(self, x, kv_cache=None, start_pos=0):
        bsz, q_len, _ = x.shape
        q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if kv_cache is not None:
            k_cache, v_cache = kv_cache
            k_cache[:, :, start_pos:start_pos + q_len].copy_(k)
            v_cache[:, :, start_pos:start_pos + q_len].copy_(v)
            if q_len == 1:
                k, v = k_cache[:, :, :start_pos + 1], v_cache[:, :, :start_pos + 1]
        if q_len > 1 and start_pos != 0:
            raise ValueError("multi-token forward is only supported from start_pos=0")
        n_rep = self.num_heads // self.num_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=q_len > 1)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, q_len, -1))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


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
        self.self_attn = RepeatKVAttention(hidden, heads, kv_heads, head_dim)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = MLP(hidden, intermediate)

    def forward(self, x, kv_cache=None, start_pos=0):
        x = x + self.self_attn(self.input_layernorm(x), kv_cache, start_pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class RepeatKVDecoder(nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, head_dim, intermediate, vocab):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, heads, kv_heads, head_dim, intermediate) for _ in range(layers)
        )
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, kv_caches=None, start_pos=0):
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, kv_caches[i] if kv_caches is not None else None, start_pos)
        return self.lm_head(self.norm(x))


def build_model(*, layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32, intermediate=512,
                vocab=1000):
    return RepeatKVDecoder(layers, hidden, heads, kv_heads, head_dim, intermediate, vocab)


def make_inputs(batch, context, phase, *, layers=2, kv_heads=2, head_dim=32, vocab=1000):
    if phase == "prefill":
        q_len, start_pos = context, 0
    elif phase == "decode":
        q_len, start_pos = 1, context - 1
    else:
        raise ValueError(f"unknown phase {phase!r}")
    caches = [
        (torch.zeros(batch, kv_heads, context, head_dim), torch.zeros(batch, kv_heads, context, head_dim))
        for _ in range(layers)
    ]
    input_ids = torch.randint(0, vocab, (batch, q_len), dtype=torch.long)
    return {"input_ids": input_ids, "kv_caches": caches, "start_pos": start_pos}
