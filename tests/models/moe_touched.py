"""Tiny mixture-of-experts stack whose expert weight traffic grows with batch (for critical-batch search).

T tokens each pick ``top_k`` of ``experts`` experts; with uniform routing the expected number of
distinct experts touched is E*(1-(1-k/E)^T). The forward runs that many experts (rounded up), so
the step reads only their weights, and splits the T*k token-expert rows evenly between them: FLOPs
are exactly 2*T*k*(2*hidden*inter) per MoE layer (affine in batch), weight bytes are not.
No attention and no KV cache; ``context`` is ignored. Routing is decided from shapes alone, so the
model runs on the meta device.

Options: layers=1, hidden=512, inter=512, experts=64, top_k=2
"""

import math

import torch
from torch import nn


def experts_touched(tokens, experts, top_k):
    """Expected distinct experts for `tokens` tokens choosing `top_k` of `experts` (uniform), rounded up."""
    return min(experts, max(1, math.ceil(experts * (1 - (1 - top_k / experts) ** tokens) - 1e-9)))


class Expert(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down(self.up(x))


class MoE(nn.Module):
    def __init__(self, hidden, inter, experts, top_k):
        super().__init__()
        self.top_k = top_k
        self.experts = nn.ModuleList(Expert(hidden, inter) for _ in range(experts))

    def forward(self, x):  # x: [T, hidden]
        tokens = x.shape[0]
        n = experts_touched(tokens, len(self.experts), self.top_k)
        rows = x.repeat(self.top_k, 1)  # [T*k, hidden]: each token once per chosen expert
        parts = torch.tensor_split(rows, n)
        out = torch.cat([self.experts[i](p) for i, p in enumerate(parts)])
        return out.view(self.top_k, tokens, -1).sum(0)


class Stack(nn.Module):
    def __init__(self, layers, hidden, inter, experts, top_k):
        super().__init__()
        self.layers = nn.ModuleList(MoE(hidden, inter, experts, top_k) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def build_model(*, layers=1, hidden=512, inter=512, experts=64, top_k=2):
    return Stack(layers, hidden, inter, experts, top_k)


def make_inputs(batch, context, phase, *, hidden=512):
    return (torch.zeros(batch, hidden),)
