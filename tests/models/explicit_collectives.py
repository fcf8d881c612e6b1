"""Calls collectives directly (dist.all_reduce, a functional all-reduce, an all-gather) when a
process group is initialised: for checking how rooflinekit records them.

Options: hidden=64
"""

import torch
import torch.distributed as dist
from torch import nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        y = self.proj(x)
        if dist.is_initialized():
            import torch.distributed._functional_collectives as funcol

            dist.all_reduce(y)
            y = funcol.wait_tensor(funcol.all_reduce(y, "sum", dist.group.WORLD))
            parts = [torch.empty_like(y) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, y)
            y = torch.cat(parts, dim=-1)
        return y


def build_model(*, hidden=64):
    return Model(hidden)


def make_inputs(batch, context, phase, *, hidden=64):
    return (torch.randn(batch, 1, hidden),)
