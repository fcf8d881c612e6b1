"""Attention-only decoder with a sliding window or chunks: declared, or only written into the mask.

Each layer projects q/k/v (GQA), attends with F.scaled_dot_product_attention and projects out.
Decode writes the new token's K/V into the last slot of a `context`-slot cache and attends over
all slots; prefill attends over its own K/V.

Options:
  window   positions each query attends (0: full attention)
  chunk    chunked attention: keys of the query's own chunk of `chunk` positions (0: none)
  declare  the module attribute that declares the window: "sliding_window", "window_size"
           (flash-attn's (left, right) tuple), or none (not declared: the mask alone shows it)
  mask     pass the window/chunk as a boolean mask (True: attend) to SDPA; otherwise the call is
           causal (prefill) or unmasked (decode), and only the declaration tells
  layers, hidden, heads, kv_heads, head_dim, vocab
"""

import torch
import torch.nn.functional as F
from torch import nn


class WindowedAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, window, chunk, declare, mask):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.window, self.chunk, self.mask = window, chunk, mask
        if window and declare == "sliding_window":
            self.sliding_window = window
        elif window and declare == "window_size":
            self.window_size = (window - 1, 0)  # flash-attn: (left, right)
        if chunk and declare is not None:
            self.attention_chunk_size = chunk
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def visible(self, q_len, kv_len):
        """[q_len, kv_len] boolean mask: key j is visible to the query at position p."""
        p = torch.arange(kv_len - q_len, kv_len).unsqueeze(-1)
        j = torch.arange(kv_len).unsqueeze(0)
        keep = j <= p
        if self.window:
            keep = keep & (j > p - self.window)
        if self.chunk:
            keep = keep & (j // self.chunk == p // self.chunk)
        return keep

    def forward(self, x, cache):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:  # decode: the new K/V into the last slot, attend over every slot
            k_cache, v_cache = cache
            k_cache[:, :, -1:].copy_(k)
            v_cache[:, :, -1:].copy_(v)
            k, v = k_cache, v_cache
        kv_len = k.shape[2]
        if self.mask and (self.window or self.chunk):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.visible(s, kv_len), enable_gqa=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim))


class Model(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.embed = nn.Embedding(o["vocab"], o["hidden"])
        self.layers = nn.ModuleList(
            WindowedAttention(o["hidden"], o["heads"], o["kv_heads"], o["head_dim"], o["window"], o["chunk"],
                              o["declare"], o["mask"])
            for _ in range(o["layers"]))

    def forward(self, input_ids, caches=None):
        x = self.embed(input_ids)
        for i, layer in enumerate(self.layers):
            x = x + layer(x, caches[i] if caches is not None else None)
        return x


def build_model(*, layers=1, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=100, window=0, chunk=0,
                declare="sliding_window", mask=False):
    if declare not in ("sliding_window", "window_size", None):
        raise ValueError(f"declare={declare!r}: use sliding_window, window_size or none")
    return Model(dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                      vocab=vocab, window=window, chunk=chunk, declare=declare, mask=mask))


def make_inputs(batch, context, phase, *, layers=1, kv_heads=2, head_dim=16, vocab=100):
    if phase == "prefill":
        return {"input_ids": torch.randint(0, vocab, (batch, context), dtype=torch.long)}
    caches = [(torch.zeros(batch, kv_heads, context, head_dim), torch.zeros(batch, kv_heads, context, head_dim))
              for _ in range(layers)]
    return {"input_ids": torch.randint(0, vocab, (batch, 1), dtype=torch.long), "caches": caches}
