"""A tiny MoE block with transformers-5-style fused experts (3-D per-expert weights).

The experts container holds ``gate_up_proj [E, 2*inter, hidden]`` and ``down_proj [E, hidden,
inter]`` and is called as ``experts(hidden, top_k_index, top_k_weights)``: rooflinekit's built-in
``moe`` plugin models it (uniform routing), so the model runs on the meta device. A dense SwiGLU
MLP follows, so that tensor parallelism has ordinary linears to split as well.

Options: hidden=256, inter=128, experts=16, top_k=2, mlp=512
"""

import torch
import torch.nn.functional as F
from torch import nn


class Experts(nn.Module):
    def __init__(self, experts, hidden, inter, top_k):
        super().__init__()
        self.top_k = top_k
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * inter, hidden))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, inter))

    def forward(self, hidden, top_k_index, top_k_weights):  # replaced by the moe plugin's model
        raise NotImplementedError


class MoE(nn.Module):
    def __init__(self, hidden, inter, experts, top_k):
        super().__init__()
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = Experts(experts, hidden, inter, top_k)
        self.top_k = top_k

    def forward(self, x):
        weights, index = self.router(x).topk(self.top_k, dim=-1)
        return self.experts(x, index, weights.softmax(-1))


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Model(nn.Module):
    def __init__(self, hidden, inter, experts, top_k, mlp):
        super().__init__()
        self.moe = MoE(hidden, inter, experts, top_k)
        self.mlp = MLP(hidden, mlp)

    def forward(self, x):
        x = x + self.moe(x)
        return x + self.mlp(x)


def build_model(*, hidden=256, inter=128, experts=16, top_k=2, mlp=512):
    return Model(hidden, inter, experts, top_k, mlp)


def make_inputs(batch, context, phase, *, hidden=256):
    q_len = 1 if phase == "decode" else context
    return (torch.randn(batch, q_len, hidden),)
