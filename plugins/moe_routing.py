"""The MoE plugin's module models for routing that reads its own choice back to Python, which the
meta device cannot give (see rooflinekit_plugins.moe, which builds them):

- `EvenRouting`: a router that hands its experts the number of rows each received as Python
  integers (JetMoE's `JetMoeTopKGating`: `expert_size.tolist()`, for its MoE and its mixture of
  attention heads). Under uniform routing the T*k token-expert pairs are split evenly over the E
  experts; the router's own projection runs as usual and the experts' GEMMs run at those sizes,
  so their counts are the code's own.
- `ZeroExpertsModel`: an experts container with zero-computation (identity) experts beside its
  routed ones (LongCat-Flash: `zero_expert_num`), which finds the experts hit with
  `torch.nonzero()`. Uniform routing over all E+Z experts: a share E/(E+Z) of the T*k picks runs
  a real expert (the expected-load model of `ExpertsModel`, at k*E/(E+Z) real experts per token),
  the rest pass the token through, scaled, into the combine.

Apart from the plugin's hooks because they need torch (imported when the hook first finds one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rooflinekit.plugin import ModuleModel, OpCounts, Provenance, emit, suppressed
from rooflinekit_plugins.moe_model import ExpertsModel


def even_split(pairs: int, experts: int) -> list[int]:
    """`pairs` rows over `experts` experts as evenly as whole rows allow (the first `pairs % experts`
    experts one row more)."""
    base, extra = divmod(pairs, experts)
    return [base + (1 if i < extra else 0) for i in range(experts)]


@dataclass
class EvenRouting(ModuleModel):
    """A router returning (sorted pair order, token of each pair, gate of each pair, rows per expert as
    a Python list, router logits), as JetMoE's top-k gating does, under uniform routing."""

    num_experts: int
    top_k: int

    assumption = ("router modelled under uniform routing: the T*k token-expert pairs are split evenly over the E "
                  "experts (floor or ceil of T*k/E rows each); the router's projection and the experts' GEMMs "
                  "run as the code runs them, at those sizes")

    def forward(self, module, path, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        logits = module.layer(hidden).float()  # the router's projection: counted as it runs
        tokens = math.prod(hidden.shape[:-1])
        pairs = tokens * self.top_k
        isz = hidden.element_size()
        emit("router.topk_sort",
             OpCounts(flops=0, bytes_read=tokens * self.num_experts * 4, bytes_written=pairs * (8 + 8 + isz)),
             at=Provenance(module=path, dtype="fp32", assumption=self.assumption), counted=False,
             shapes=f"{tokens}x{self.num_experts}")
        with suppressed():
            order = torch.zeros(pairs, dtype=torch.long, device=hidden.device)
            rows = torch.zeros(pairs, dtype=torch.long, device=hidden.device)
            gates = torch.zeros(pairs, dtype=hidden.dtype, device=hidden.device)
        return order, rows, gates, even_split(pairs, self.num_experts), logits


@dataclass
class ZeroExpertsModel(ExpertsModel):
    """ExpertsModel for `num_experts` routed experts beside `zero_experts` identity experts, the
    T*k picks spread uniformly over all of them."""

    zero_experts: int = 0

    @property
    def assumption(self) -> str:  # type: ignore[override]
        return ("MoE experts with zero-computation experts modelled under uniform routing over the E routed and Z "
                "identity experts: T tokens choosing k touch E*(1-(1-k/(E+Z))^T) distinct routed experts, each "
                "one's weights read once per step; FLOPs count T*k*E/(E+Z) expert applications; the T*k*Z/(E+Z) "
                "identity picks pass their token, scaled, into the combine")

    def forward(self, module, path, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        index = args[1] if len(args) > 1 else kwargs.get("top_k_index")
        k = int(index.shape[-1]) if isinstance(index, torch.Tensor) else int(self.top_k or 1)
        tokens = math.prod(hidden.shape[:-1])
        share = self.num_experts / (self.num_experts + self.zero_experts)
        self.account(path, tokens, k * share, hidden.shape[-1])
        identity = tokens * k * (1 - share)
        isz = self.itemsize
        emit("moe.zero_experts",
             OpCounts(flops=identity * hidden.shape[-1], bytes_read=identity * hidden.shape[-1] * isz,
                      bytes_written=0),
             at=Provenance(module=path, dtype=self.dtype, assumption=self.assumption),
             shapes=f"{identity:g}x{hidden.shape[-1]}")
        with suppressed():
            return torch.zeros_like(hidden)
