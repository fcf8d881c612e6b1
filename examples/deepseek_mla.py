"""DeepSeek-V3-style decoder with Multi-head Latent Attention (MLA).

Follows DeepSeek-V3 ``inference/model.py`` (class ``MLA``), with both of its
attention implementations selectable by the ``mode`` option:

  * ``mode="absorbed"`` (DeepSeek's ``attn_impl="absorb"``): the cache holds the
    normalised KV latent ``kv_cache [B, context, kv_lora_rank]`` and the rotary
    key ``pe_cache [B, context, qk_rope_head_dim]`` (shared by all heads).  The
    key up-projection (first ``qk_nope_head_dim`` rows of each head of
    ``wkv_b``) is folded into the query, scores are taken against the latent
    directly, and the value up-projection is applied after the attention
    weighted sum.  Attention is written with ``torch.einsum``; softmax runs in
    float32; prefill adds a causal ``-inf`` mask.
  * ``mode="naive"``: the latent is up-projected by ``wkv_b`` into per-head
    K_nope and V, the rotary key is broadcast to every head and concatenated,
    and the cache holds per-head ``k_cache [B, heads, context, nope+rope]`` and
    ``v_cache [B, heads, context, v_head_dim]``; attention is
    ``F.scaled_dot_product_attention`` (q/k dim 192, v dim 128, explicit scale).

Both modes compute the same function (same weights give the same logits).

Per layer (module names as in DeepSeek): ``attn_norm`` (RMSNorm) -> ``attn``
(:class:`MLAAttention`: ``wq_a`` hidden->q_lora_rank, ``q_norm``, ``wq_b``
q_lora_rank->heads*(nope+rope), ``wkv_a`` hidden->kv_lora_rank+rope,
``kv_norm``, ``wkv_b`` kv_lora_rank->heads*(nope+v), ``wo`` heads*v->hidden),
then ``ffn_norm`` (RMSNorm) -> ``ffn`` (dense SwiGLU ``w2(silu(w1(x)) * w3(x))``).
Model: ``embed`` -> layers -> ``norm`` -> ``head``.  Rotary embeddings use the
rotate-half form (DeepSeek uses interleaved complex pairs; same cost) and no
YaRN scaling; softmax scale is ``(nope+rope) ** -0.5``.  MoE layers are not
modelled (every layer has the dense MLP of DeepSeek-V3's first 3 layers).

Options (keyword-only; defaults are DeepSeek-V3's):
  layers=2, mode="absorbed", hidden=7168, heads=128 (e.g. 16 for the per-GPU
  view at TP=8), q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
  qk_rope_head_dim=64, v_head_dim=128, intermediate=18432, vocab=129280,
  rope_theta=10000.0

Forward signature::

    model(input_ids, kv_caches=None, start_pos=0) -> logits [B, q_len, vocab]

``kv_caches``: one pair per layer, ``(kv_cache, pe_cache)`` in absorbed mode or
``(k_cache, v_cache)`` in naive mode (shapes above); ``start_pos`` is a python
int.  prefill: ``input_ids [B, context]``, ``start_pos=0``, slots ``[0,
context)`` are written.  decode: ``input_ids [B, 1]``, ``start_pos=context-1``,
slot ``context-1`` is written and all ``context`` slots are attended.  decode
with ``q_len=N`` (multi-token decode): ``input_ids [B, N]``,
``start_pos=context-N``, the last N slots are written and new token i attends
slots ``[0, context-N+i]`` (causal among the new tokens).
"""

import torch
import torch.nn.functional as F
from torch import nn

MODES = ("absorbed", "naive")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def apply_rotary(x, cos, sin):
    """x: [B, S, H, R]; cos/sin: [S, R]."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class MLAAttention(nn.Module):
    def __init__(self, hidden, num_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                 qk_rope_head_dim, v_head_dim, mode):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.num_heads = num_heads
        self.q_lora_rank = q_lora_rank
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.mode = mode
        self.softmax_scale = self.qk_head_dim ** -0.5

        self.wq_a = nn.Linear(hidden, q_lora_rank, bias=False)
        self.q_norm = RMSNorm(q_lora_rank)
        self.wq_b = nn.Linear(q_lora_rank, num_heads * self.qk_head_dim, bias=False)
        self.wkv_a = nn.Linear(hidden, kv_lora_rank + qk_rope_head_dim, bias=False)
        self.kv_norm = RMSNorm(kv_lora_rank)
        self.wkv_b = nn.Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), bias=False)
        self.wo = nn.Linear(num_heads * v_head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, kv_cache=None, start_pos=0):
        bsz, seq_len, _ = x.shape
        end_pos = start_pos + seq_len
        if seq_len > 1 and start_pos != 0 and kv_cache is None:
            raise ValueError("multi-token forward from start_pos > 0 needs a kv_cache")

        q = self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(bsz, seq_len, self.num_heads, self.qk_head_dim)
        q_nope, q_pe = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        q_pe = apply_rotary(q_pe, cos, sin)
        kv, k_pe = torch.split(self.wkv_a(x), [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        k_pe = apply_rotary(k_pe.unsqueeze(2), cos, sin)           # [B, S, 1, rope]

        if self.mode == "naive":
            q = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)   # [B, H, S, 192]
            kv = self.wkv_b(self.kv_norm(kv))
            kv = kv.view(bsz, seq_len, self.num_heads, self.qk_nope_head_dim + self.v_head_dim)
            k_nope, v = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
            k = torch.cat([k_nope, k_pe.expand(-1, -1, self.num_heads, -1)], dim=-1)
            k, v = k.transpose(1, 2), v.transpose(1, 2)              # [B, H, S, d]
            if kv_cache is not None:
                k_cache, v_cache = kv_cache
                k_cache[:, :, start_pos:end_pos].copy_(k)
                v_cache[:, :, start_pos:end_pos].copy_(v)
                if seq_len == 1 or start_pos > 0:
                    k, v = k_cache[:, :, :end_pos], v_cache[:, :, :end_pos]
            if seq_len > 1 and start_pos > 0:
                # multi-token decode: new token i sees the cache and new tokens 0..i
                mask = torch.ones(seq_len, end_pos, dtype=torch.bool).tril_(start_pos)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.softmax_scale)
            else:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=seq_len > 1,
                                                     scale=self.softmax_scale)
            out = out.transpose(1, 2)                                # [B, S, H, v]
        else:
            wkv_b = self.wkv_b.weight.view(self.num_heads, -1, self.kv_lora_rank)
            q_nope = torch.einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :self.qk_nope_head_dim])
            kv = self.kv_norm(kv)
            k_pe = k_pe.squeeze(2)
            if kv_cache is not None:
                kv_lat, pe = kv_cache
                kv_lat[:, start_pos:end_pos].copy_(kv)
                pe[:, start_pos:end_pos].copy_(k_pe)
                kv, k_pe = kv_lat[:, :end_pos], pe[:, :end_pos]
            scores = (torch.einsum("bshc,btc->bsht", q_nope, kv)
                      + torch.einsum("bshr,btr->bsht", q_pe, k_pe)) * self.softmax_scale
            if seq_len > 1:
                t = kv.shape[1]
                mask = torch.full((seq_len, t), float("-inf")).triu_(t - seq_len + 1)
                scores = scores + mask.unsqueeze(1)
            probs = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
            out = torch.einsum("bsht,btc->bshc", probs, kv)
            out = torch.einsum("bshc,hdc->bshd", out, wkv_b[:, -self.v_head_dim:])
        return self.wo(out.flatten(2))


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.w1 = nn.Linear(hidden, intermediate, bias=False)
        self.w2 = nn.Linear(intermediate, hidden, bias=False)
        self.w3 = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, hidden, intermediate, **attn_args):
        super().__init__()
        self.attn_norm = RMSNorm(hidden)
        self.attn = MLAAttention(hidden, **attn_args)
        self.ffn_norm = RMSNorm(hidden)
        self.ffn = MLP(hidden, intermediate)

    def forward(self, x, cos, sin, kv_cache=None, start_pos=0):
        x = x + self.attn(self.attn_norm(x), cos, sin, kv_cache, start_pos)
        return x + self.ffn(self.ffn_norm(x))


class DeepSeekMLA(nn.Module):
    def __init__(self, layers, hidden, intermediate, vocab, rope_theta, **attn_args):
        super().__init__()
        rope = attn_args["qk_rope_head_dim"]
        self.embed = nn.Embedding(vocab, hidden)
        inv_freq = 1.0 / (rope_theta ** (torch.arange(0, rope, 2, dtype=torch.float32) / rope))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.layers = nn.ModuleList(Block(hidden, intermediate, **attn_args) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, kv_caches=None, start_pos=0):
        seq_len = input_ids.shape[1]
        x = self.embed(input_ids)
        positions = torch.arange(start_pos, start_pos + seq_len, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for i, layer in enumerate(self.layers):
            cache = kv_caches[i] if kv_caches is not None else None
            x = layer(x, cos, sin, cache, start_pos)
        return self.head(self.norm(x))


def build_model(*, layers=2, mode="absorbed", hidden=7168, heads=128, q_lora_rank=1536,
                kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                intermediate=18432, vocab=129280, rope_theta=10000.0):
    return DeepSeekMLA(layers, hidden, intermediate, vocab, rope_theta, num_heads=heads,
                       q_lora_rank=q_lora_rank, kv_lora_rank=kv_lora_rank,
                       qk_nope_head_dim=qk_nope_head_dim, qk_rope_head_dim=qk_rope_head_dim,
                       v_head_dim=v_head_dim, mode=mode)


def make_kv_caches(batch, context, *, layers=2, mode="absorbed", heads=128, kv_lora_rank=512,
                   qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128):
    if mode == "absorbed":
        shapes = [(batch, context, kv_lora_rank), (batch, context, qk_rope_head_dim)]
    elif mode == "naive":
        shapes = [(batch, heads, context, qk_nope_head_dim + qk_rope_head_dim),
                  (batch, heads, context, v_head_dim)]
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return [tuple(torch.zeros(s) for s in shapes) for _ in range(layers)]


def make_inputs(batch, context, phase, *, q_len=1, layers=2, mode="absorbed", heads=128, kv_lora_rank=512,
                qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab=129280):
    """Inputs of one step; in decode, ``q_len`` new tokens per sequence (multi-token decode)."""
    if phase == "prefill":
        q_len, start_pos = context, 0
    elif phase == "decode":
        start_pos = context - q_len
    else:
        raise ValueError(f"unknown phase {phase!r}")
    input_ids = torch.randint(0, vocab, (batch, q_len), dtype=torch.long)
    caches = make_kv_caches(batch, context, layers=layers, mode=mode, heads=heads,
                            kv_lora_rank=kv_lora_rank, qk_nope_head_dim=qk_nope_head_dim,
                            qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim)
    return {"input_ids": input_ids, "kv_caches": caches, "start_pos": start_pos}
