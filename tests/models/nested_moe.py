"""A transformers-shaped decoder (model.layers.N.{self_attn, mlp.experts.M, input_layernorm}, lm_head)
whose layers read a large KV cache: at depth 3 each whole layer is cache-dominated, at the default
depth (the layer stack's children) its MoE MLP is a weights-dominated module of its own.

Options: layers=4, hidden=256, experts=4
"""

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, cache):  # x [B, 1, D], cache [B, S, D]
        scores = torch.softmax(self.q_proj(x) @ cache.transpose(1, 2), dim=-1)
        return self.o_proj(scores @ cache)


class Experts(nn.Module):
    def __init__(self, hidden, experts):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(hidden, 4 * hidden, bias=False) for _ in range(experts))
        self.down = nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x):
        return self.down(sum(e(x) for e in self.experts))


class Layer(nn.Module):
    def __init__(self, hidden, experts):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(hidden)
        self.self_attn = Attention(hidden)
        self.mlp = Experts(hidden, experts)

    def forward(self, x, cache):
        x = x + self.self_attn(self.input_layernorm(x), cache)
        return x + self.mlp(x)


class Inner(nn.Module):
    def __init__(self, layers, hidden, experts):
        super().__init__()
        self.layers = nn.ModuleList(Layer(hidden, experts) for _ in range(layers))

    def forward(self, x, cache):
        for layer in self.layers:
            x = layer(x, cache)
        return x


class Decoder(nn.Module):
    def __init__(self, layers, hidden, experts):
        super().__init__()
        self.model = Inner(layers, hidden, experts)
        self.lm_head = nn.Linear(hidden, 512, bias=False)

    def forward(self, x, cache):
        return self.lm_head(self.model(x, cache))


def build_model(*, layers=4, hidden=256, experts=4):
    return Decoder(layers, hidden, experts)


def make_inputs(batch, context, phase, *, hidden=256):
    return torch.randn(batch, 1, hidden), torch.randn(batch, context, hidden)
