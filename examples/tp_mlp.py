"""A tensor-parallel MLP stack (Megatron-style column- and row-parallel linears) for torchrun.

Every rank holds 1/world of each layer:

  * ``gate`` and ``up`` (:class:`ColumnParallelLinear`) split their output features: each rank
    computes its slice of the intermediate activations, with no communication;
  * ``down`` (:class:`RowParallelLinear`) splits its input features: each rank produces a partial
    sum of the full output, and an all-reduce adds them up.

Per layer (pre-norm, residual): ``x + down(silu(gate(norm(x))) * up(norm(x)))``.

The model reads its rank and world size from torch.distributed (rooflinekit initialises the
process group before calling ``build_model`` under torchrun); without a process group the world
size is 1 and this is the whole single-GPU MLP, whose planned split ``--tp N`` reports::

    torchrun --nproc-per-node 2 -m rooflinekit profile examples/tp_mlp.py --device cpu
    rooflinekit profile examples/tp_mlp.py --tp 2          # the same split, planned

Options: layers=2, hidden=1024, intermediate=4096, collective="c10d" (``dist.all_reduce``) or
"functional" (``torch.distributed._functional_collectives.all_reduce``), fail_rank=-1 and
fail_in="build" (raise in ``build_model``, or with fail_in="forward" in the forward, on that rank:
to see how a failing rank is reported).

Inputs: hidden states ``[batch, q_len, hidden]`` (q_len 1 in decode, ``context`` in prefill).
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

COLLECTIVES = ("c10d", "functional")


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce(x, collective):
    if collective == "functional":
        import torch.distributed._functional_collectives as funcol

        return funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))
    dist.all_reduce(x)
    return x


class ColumnParallelLinear(nn.Linear):
    """Output features split over the ranks: y_local = x @ W_local^T (W_local: out/world rows)."""

    def __init__(self, in_features, out_features, world_size):
        if out_features % world_size:
            raise ValueError(f"{out_features} output features do not split over {world_size} ranks")
        super().__init__(in_features, out_features // world_size, bias=False)


class RowParallelLinear(nn.Linear):
    """Input features split over the ranks: partial sums x_local @ W_local^T, then an all-reduce."""

    def __init__(self, in_features, out_features, world_size, collective):
        if in_features % world_size:
            raise ValueError(f"{in_features} input features do not split over {world_size} ranks")
        super().__init__(in_features // world_size, out_features, bias=False)
        self.world_size = world_size
        self.collective = collective

    def forward(self, x):
        y = super().forward(x)
        return all_reduce(y, self.collective) if self.world_size > 1 else y


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class MLP(nn.Module):
    def __init__(self, hidden, intermediate, world_size, collective):
        super().__init__()
        self.gate = ColumnParallelLinear(hidden, intermediate, world_size)
        self.up = ColumnParallelLinear(hidden, intermediate, world_size)
        self.down = RowParallelLinear(intermediate, hidden, world_size, collective)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, hidden, intermediate, world_size, collective):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.mlp = MLP(hidden, intermediate, world_size, collective)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class TPMLP(nn.Module):
    def __init__(self, layers, hidden, intermediate, world_size, collective, fail=False):
        super().__init__()
        self.layers = nn.ModuleList(Block(hidden, intermediate, world_size, collective) for _ in range(layers))
        self.fail = fail

    def forward(self, x):
        if self.fail:
            raise RuntimeError(f"the forward fails on rank {world()[0]}")
        for layer in self.layers:
            x = layer(x)
        return x


def build_model(*, layers=2, hidden=1024, intermediate=4096, collective="c10d", fail_rank=-1, fail_in="build"):
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")
    rank, world_size = world()
    if rank == fail_rank and fail_in == "build":
        raise RuntimeError(f"build_model fails on rank {rank} (fail_rank={fail_rank})")
    return TPMLP(layers, hidden, intermediate, world_size, collective, fail=rank == fail_rank)


def make_inputs(batch, context, phase, *, hidden=1024):
    q_len = 1 if phase == "decode" else context
    return (torch.randn(batch, q_len, hidden),)
