"""nn.TransformerEncoderLayer + nn.TransformerDecoderLayer (batch_first), prefill only.

The encoder's self-attention has no mask (every token sees every token); the decoder's is causal
(``tgt_is_causal=True``); its cross-attention sees the whole encoder output. Source and target
are both ``context`` tokens long.

Options: d_model=64, nhead=4, ffn=128
"""

import torch
from torch import nn


class EncoderDecoder(nn.Module):
    def __init__(self, d_model, nhead, ffn):
        super().__init__()
        self.embed = nn.Embedding(1000, d_model)
        self.encoder = nn.TransformerEncoderLayer(d_model, nhead, ffn, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoderLayer(d_model, nhead, ffn, dropout=0.0, batch_first=True)

    def forward(self, src, tgt):
        memory = self.encoder(self.embed(src))
        n = tgt.shape[1]
        mask = torch.full((n, n), float("-inf")).triu(1)
        return self.decoder(self.embed(tgt), memory, tgt_mask=mask, tgt_is_causal=True)


def build_model(d_model=64, nhead=4, ffn=128):
    return EncoderDecoder(d_model, nhead, ffn)


def make_inputs(batch, context, phase):
    if phase != "prefill":
        raise ValueError("this encoder-decoder has no KV cache: use --phase prefill")
    ids = torch.randint(0, 1000, (batch, context), dtype=torch.long)
    return (ids, ids.clone())
