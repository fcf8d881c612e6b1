"""A model whose own code runs fp8: float8_e4m3fn weights with per-tensor fp32 scales, activations
cast to float8 before each product, and torch._scaled_mm producing bf16 (as fp8 inference kernels do).

Options: layers=2, hidden=256, intermediate=512.
"""

import torch
from torch import nn

FP8 = torch.float8_e4m3fn


class FP8Linear(nn.Module):
    """y = x W^T with W stored in float8 (one fp32 scale for the tensor), run by torch._scaled_mm."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=FP8), requires_grad=False)
        self.weight_scale = nn.Parameter(torch.ones((), dtype=torch.float32), requires_grad=False)
        self.input_scale = nn.Parameter(torch.ones((), dtype=torch.float32), requires_grad=False)

    def forward(self, x):
        shape = x.shape
        x8 = x.reshape(-1, shape[-1]).to(FP8)
        y = torch._scaled_mm(x8, self.weight.t(), self.input_scale, self.weight_scale, out_dtype=torch.bfloat16)
        return y.reshape(*shape[:-1], y.shape[-1])


class Block(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.up = FP8Linear(hidden, intermediate)
        self.down = FP8Linear(intermediate, hidden)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class FP8MLP(nn.Module):
    def __init__(self, layers, hidden, intermediate):
        super().__init__()
        self.layers = nn.ModuleList(Block(hidden, intermediate) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def build_model(*, layers=2, hidden=256, intermediate=512):
    return FP8MLP(layers, hidden, intermediate)


def make_inputs(batch, context, phase, *, hidden=256):
    q_len = 1 if phase == "decode" else context
    return (torch.randn(batch, q_len, hidden, dtype=torch.bfloat16),)
