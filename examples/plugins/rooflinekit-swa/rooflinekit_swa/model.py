"""A Mistral-style decoder with sliding-window attention and a rolling KV cache (a rooflinekit model file).

Architecture (defaults: Mistral-7B-v0.1 shapes, two layers):
  * ``embed_tokens`` -> ``layers`` blocks -> ``norm`` -> ``lm_head``
  * each block: RMSNorm -> ``self_attn`` (:class:`SlidingWindowAttention`, GQA, rotary) ->
    RMSNorm -> ``mlp`` (SwiGLU; with ``experts > 0`` a Mixtral-style :class:`GroupedMoE` whose
    experts run as two ``torch._grouped_mm`` calls, torch >= 2.8)

Sliding window: each query attends to itself and the ``sliding_window - 1`` positions before it.
The KV cache is a rolling buffer (as Mistral's reference code): ``min(context, sliding_window)``
slots per layer, position ``p`` stored in slot ``p % slots``. So the *executed* decode traffic is
capped at the window too: a decode step reads ``min(context, window)`` cached positions per layer,
which is the architecture minimum rooflinekit's built-in `sliding_window` plugin reports.

Model-file contract (docs/model-files.md): ``build_model(**options)`` and
``make_inputs(batch, context, phase, **options)``; both run with the target device and default
dtype in effect, so nothing here passes ``device=`` or a floating ``dtype=``.

Phases:
  * prefill: ``context`` new tokens from position 0; attention is causal and banded (a boolean
    mask once ``context > sliding_window``, so a fused kernel with a mask computes every pair: its
    executed FLOPs exceed the windowed model FLOPs); the last ``slots`` positions go to the cache.
  * decode: one token at position ``context - 1``; its K/V overwrite slot ``(context - 1) % slots``
    and it attends over every slot (all hold positions within the window).
"""

from __future__ import annotations

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


def rotary(start_pos, seq_len, head_dim, theta, dtype):
    """cos, sin of shape [seq_len, head_dim] for positions start_pos .. start_pos + seq_len - 1."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(start_pos, start_pos + seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class SlidingWindowAttention(nn.Module):
    def __init__(self, hidden, num_heads, num_kv_heads, head_dim, sliding_window):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.sliding_window = sliding_window  # what rooflinekit's `sliding_window` plugin reads
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, kv_cache, start_pos):
        bsz, seq_len, _ = x.shape
        q = self.q_proj(x).view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k_cache, v_cache = kv_cache
        slots = k_cache.shape[2]
        if seq_len == 1:
            slot = start_pos % slots
            k_cache[:, :, slot:slot + 1].copy_(k)
            v_cache[:, :, slot:slot + 1].copy_(v)
            out = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)
        else:
            if start_pos != 0:
                raise ValueError("multi-token forward is only supported from start_pos=0")
            keep = min(seq_len, slots)
            # position p goes to slot p % slots: the last `keep` positions, rolled into place
            k_cache[:, :, :keep].copy_(torch.roll(k[:, :, seq_len - keep:], seq_len % keep, dims=2))
            v_cache[:, :, :keep].copy_(torch.roll(v[:, :, seq_len - keep:], seq_len % keep, dims=2))
            if seq_len <= self.sliding_window:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
                band = ones.tril() & ones.triu(-(self.sliding_window - 1))
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seq_len, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GroupedMoE(nn.Module):
    """Top-k routed SwiGLU experts run as grouped matrix multiplies (one launch for all experts).

    Token-expert pairs are sorted by expert; ``offs`` (the cumulative count per expert) splits
    the sorted rows into groups, and ``torch._grouped_mm(rows, weight[E, in, out], offs=offs)``
    multiplies each group by its expert's weights. Runs on meta: the counts come from ``histc``
    (fixed size), so nothing depends on tensor values except the grouping itself.

    Weights are stored ``[E, out, in]`` as transformers 5.x stores them (``gate_up_proj``,
    ``down_proj``), so rooflinekit's built-in ``moe`` plugin recognises this container and, by
    default, replaces it during capture with its expected-load model (only the experts T tokens
    touch are read). With that plugin disabled (``ROOFLINEKIT_DISABLE_PLUGINS=moe``) the two
    grouped multiplies run as written and rooflinekit-swa's formula counts their FLOPs.
    """

    def __init__(self, hidden, intermediate, experts, top_k):
        super().__init__()
        if not hasattr(torch, "_grouped_mm"):
            raise RuntimeError(f"experts > 0 needs torch._grouped_mm (torch >= 2.8); this is torch {torch.__version__}")
        self.num_experts, self.top_k = experts, top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * intermediate, hidden))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, intermediate))

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = torch.topk(self.router(flat).softmax(dim=-1), self.top_k, dim=-1)
        order = chosen.reshape(-1).argsort()
        token = order // self.top_k
        counts = torch.histc(chosen.float(), bins=self.num_experts, min=0, max=self.num_experts - 1)
        offs = counts.cumsum(0).to(torch.int32)
        gate, up = torch._grouped_mm(flat[token], self.gate_up_proj.transpose(1, 2), offs=offs).chunk(2, dim=-1)
        rows = torch._grouped_mm(F.silu(gate) * up, self.down_proj.transpose(1, 2), offs=offs)
        rows = rows * weights.reshape(-1)[order].unsqueeze(-1).to(rows.dtype)
        return torch.zeros_like(flat).index_add_(0, token, rows).view_as(x)


class Block(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.input_layernorm = RMSNorm(o["hidden"])
        self.self_attn = SlidingWindowAttention(o["hidden"], o["heads"], o["kv_heads"], o["head_dim"],
                                                o["sliding_window"])
        self.post_attention_layernorm = RMSNorm(o["hidden"])
        self.mlp = (GroupedMoE(o["hidden"], o["intermediate"], o["experts"], o["top_k"]) if o["experts"]
                    else MLP(o["hidden"], o["intermediate"]))

    def forward(self, x, cos, sin, kv_cache, start_pos):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, start_pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class MistralSWA(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.head_dim, self.rope_theta = o["head_dim"], o["rope_theta"]
        self.embed_tokens = nn.Embedding(o["vocab"], o["hidden"])
        self.layers = nn.ModuleList(Block(o) for _ in range(o["layers"]))
        self.norm = RMSNorm(o["hidden"])
        self.lm_head = nn.Linear(o["hidden"], o["vocab"], bias=False)

    def forward(self, input_ids, kv_caches, start_pos=0):
        x = self.embed_tokens(input_ids)
        cos, sin = rotary(start_pos, input_ids.shape[1], self.head_dim, self.rope_theta, x.dtype)
        for layer, cache in zip(self.layers, kv_caches, strict=True):
            x = layer(x, cos, sin, cache, start_pos)
        return self.lm_head(self.norm(x))


def build_model(*, layers=2, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336,
                vocab=32000, sliding_window=4096, rope_theta=10000.0, experts=0, top_k=2):
    if sliding_window < 1:
        raise ValueError(f"sliding_window must be at least 1, got {sliding_window}")
    return MistralSWA(dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                           head_dim=head_dim, intermediate=intermediate, vocab=vocab,
                           sliding_window=sliding_window, rope_theta=rope_theta, experts=experts,
                           top_k=top_k))


def make_inputs(batch, context, phase, *, layers=2, kv_heads=8, head_dim=128, vocab=32000,
                sliding_window=4096):
    """input_ids, one rolling (k, v) cache pair per layer of min(context, sliding_window) slots."""
    if phase == "prefill":
        q_len, start_pos = context, 0
    elif phase == "decode":
        q_len, start_pos = 1, context - 1
    else:
        raise ValueError(f"unknown phase {phase!r}")
    slots = min(context, sliding_window)
    caches = [(torch.zeros(batch, kv_heads, slots, head_dim), torch.zeros(batch, kv_heads, slots, head_dim))
              for _ in range(layers)]
    input_ids = torch.randint(0, vocab, (batch, q_len), dtype=torch.long)
    return {"input_ids": input_ids, "kv_caches": caches, "start_pos": start_pos}
