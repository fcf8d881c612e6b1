"""A block that keeps the top-k of its scores over a cache it is given and gathers those rows (a
sparse-attention indexer's selection), with projections around it and no MoE anywhere: the serving
view's routing kernel must leave its top-k and gather as they are.

Options: hidden=64, k=16
"""

import torch
from torch import nn


class Select(nn.Module):
    def __init__(self, hidden, k):
        super().__init__()
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.k = k

    def forward(self, x, cache):  # x [B, 1, H], cache [B, S, H]
        q = self.q(x)
        scores = (q @ cache.transpose(1, 2)).squeeze(1)
        index = scores.topk(self.k, dim=-1).indices
        rows = cache.gather(1, index.unsqueeze(-1).expand(-1, -1, cache.shape[-1]))
        return self.out(rows.mean(1, keepdim=True))


class Model(nn.Module):
    def __init__(self, hidden, k):
        super().__init__()
        self.select = Select(hidden, k)

    def forward(self, x, cache):
        return x + self.select(x, cache)


def build_model(*, hidden=64, k=16):
    return Model(hidden, k)


def make_inputs(batch, context, phase, *, hidden=64, **_):
    return (torch.randn(batch, 1, hidden), torch.randn(batch, context, hidden))
