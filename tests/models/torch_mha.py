"""Small decoder built on ``torch.nn.MultiheadAttention`` (batch_first=True).

Each layer: LayerNorm -> ``nn.MultiheadAttention(hidden, heads)`` -> residual,
LayerNorm -> GELU MLP -> residual.  Layer 0 calls the attention with
``need_weights=False`` (PyTorch then uses SDPA inside); the other layers keep
the default ``need_weights=True`` (explicit bmm/softmax path that also returns
head-averaged weights).  A float causal mask keeps MHA off its fused CPU fast
path, so meta and cpu execute the same ops.

"KV cache": because ``nn.MultiheadAttention`` projects K/V itself, the cache
holds each layer's normalised *hidden states* (the attention input),
``kv_caches[i]`` of shape ``[B, context, hidden]``.
  * prefill: ``input_ids [B, context]``, ``start_pos=0``; each layer writes its
    attention input into slots ``[0, context)`` and runs causal self-attention.
  * decode: ``input_ids [B, 1]``, ``start_pos=context-1``; each layer writes the
    new token's hidden state into slot ``context-1`` and calls
    ``mha(x_new, cache, cache)`` over all ``context`` positions (K/V are
    re-projected from the cached hidden states every step).

Forward: ``model(input_ids, kv_caches=None, start_pos=0) -> logits``.

Options: layers=2, hidden=256, heads=8, vocab=1000, max_positions=65536
"""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden, heads, need_weights):
        super().__init__()
        self.need_weights = need_weights
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(hidden)
        self.fc_in = nn.Linear(hidden, 4 * hidden)
        self.fc_out = nn.Linear(4 * hidden, hidden)

    def _attend(self, q, kv, mask):
        if self.need_weights:
            out, _ = self.attn(q, kv, kv, attn_mask=mask)
        else:
            out, _ = self.attn(q, kv, kv, attn_mask=mask, need_weights=False)
        return out

    def forward(self, x, cache=None, start_pos=0):
        q_len = x.shape[1]
        h = self.ln_1(x)
        if cache is not None:
            cache[:, start_pos:start_pos + q_len].copy_(h)
        if q_len > 1:
            if start_pos != 0:
                raise ValueError("multi-token forward is only supported from start_pos=0")
            mask = torch.full((q_len, q_len), float("-inf")).triu(1)
            attn = self._attend(h, h, mask)
        else:
            kv = cache[:, :start_pos + 1] if cache is not None else h
            attn = self._attend(h, kv, None)
        x = x + attn
        return x + self.fc_out(F.gelu(self.fc_in(self.ln_2(x))))


class MHADecoder(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, max_positions):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, need_weights=i > 0) for i in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, kv_caches=None, start_pos=0):
        q_len = input_ids.shape[1]
        positions = torch.arange(start_pos, start_pos + q_len, dtype=torch.long)
        x = self.wte(input_ids) + self.wpe(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_caches[i] if kv_caches is not None else None, start_pos)
        return self.lm_head(self.ln_f(x))


def build_model(*, layers=2, hidden=256, heads=8, vocab=1000, max_positions=65536):
    return MHADecoder(layers, hidden, heads, vocab, max_positions)


def make_inputs(batch, context, phase, *, layers=2, hidden=256, vocab=1000):
    if phase == "prefill":
        q_len, start_pos = context, 0
    elif phase == "decode":
        q_len, start_pos = 1, context - 1
    else:
        raise ValueError(f"unknown phase {phase!r}")
    caches = [torch.zeros(batch, context, hidden) for _ in range(layers)]
    input_ids = torch.randint(0, vocab, (batch, q_len), dtype=torch.long)
    return {"input_ids": input_ids, "kv_caches": caches, "start_pos": start_pos}
