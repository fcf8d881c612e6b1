"""An MLP split by DTensor tensor parallelism (torch.distributed.tensor.parallel), for torchrun.

``up`` is ColwiseParallel, ``down`` RowwiseParallel: DTensor runs each rank's local matmuls and
the all-reduce after ``down`` (a functional collective). Needs an initialised process group
(rooflinekit profile --distributed, or torchrun).

Options: hidden=256, inter=1024
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.up(x)))


def build_model(*, hidden=256, inter=1024):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return parallelize_module(MLP(hidden, inter), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


def make_inputs(batch, context, phase, *, hidden=256):
    return (torch.randn(batch, 1 if phase == "decode" else context, hidden),)
