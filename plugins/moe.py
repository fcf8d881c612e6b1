"""Built-in plugin: mixture-of-experts layers under an expected-load model of routing.

Routing is data-dependent and cannot run on the meta device, and on real data one batch's routing
says little about the next. This plugin replaces the experts' forward during capture: T tokens
each choosing k of E experts touch, under uniform routing, E*(1-(1-k/E)^T) distinct experts in
expectation; each touched expert's weights are read once per step; FLOPs count T*k expert
applications. The router and shared experts still run as ordinary ops.

Recognised: expert containers holding per-expert weights as 3-D parameters [E, out, in]
(transformers 5.x: `gate_up_proj`, `down_proj`; forward(hidden, top_k_index, top_k_weights)).
Other MoE implementations can return an `ExpertsModel` from their own `rooflinekit_module_model`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from rooflinekit.hardware import dtype_key
from rooflinekit.hookspecs import hookimpl
from rooflinekit.modelled import ModuleModel, emit, suppressed


def expected_distinct_experts(tokens: int, top_k: int, num_experts: int) -> float:
    """E*(1-(1-k/E)^T): expected distinct experts hit by T tokens choosing k of E, uniformly."""
    if tokens <= 0 or num_experts <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


@dataclass
class ExpertsModel(ModuleModel):
    """Expected-load model of one experts container.

    `matrices` are the per-expert weight matrices in execution order, as (name, out, in);
    a gated MLP (`gated=True`) has its first matrix produce 2*inter (gate and up) and an
    elementwise act(gate)*up between the matrices. `biases` are per-expert bias sizes.
    `ep_size` > 1 gives one expert-parallel rank's share: E/ep_size local experts.
    """

    num_experts: int
    matrices: list[tuple[str, int, int]]
    itemsize: int
    dtype: str
    top_k: int | None = None
    gated: bool = True
    biases: list[tuple[str, int]] = field(default_factory=list)
    ep_size: int = 1

    @property
    def assumption(self) -> str:  # type: ignore[override]
        return ("MoE experts modelled under uniform routing: T tokens choosing k of E experts "
                "touch E*(1-(1-k/E)^T) distinct experts, each expert's weights read once per step; "
                "FLOPs count T*k expert applications")

    def forward(self, module, path, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        index = args[1] if len(args) > 1 else kwargs.get("top_k_index", kwargs.get("router_indices"))
        k = int(index.shape[-1]) if isinstance(index, torch.Tensor) else int(self.top_k or 1)
        tokens = math.prod(hidden.shape[:-1])
        self.account(path, tokens, k, hidden.shape[-1])
        with suppressed():
            return torch.zeros_like(hidden)

    def account(self, path: str, tokens: int, k: int, hidden: int) -> None:
        """Emit the modelled records for `tokens` tokens routed to `k` experts each."""
        e_total = self.num_experts
        local = e_total / self.ep_size
        # This rank's experts each get hit with probability 1-(1-k/E)^T; it runs T*k/ep applications.
        touched = local * (1.0 - (1.0 - k / e_total) ** tokens) if tokens else 0.0
        rows = tokens * k / self.ep_size
        isz = self.itemsize
        note = self.assumption + f" (T={tokens}, k={k}, E={e_total}: {touched:.1f} experts" + (
            f" of {local:g} local" if self.ep_size > 1 else "") + ")"
        for i, (name, out_f, in_f) in enumerate(self.matrices):
            weights = touched * out_f * in_f * isz
            emit(
                f"moe.{name}", module=path, dtype=self.dtype, assumption=note,
                flops=2 * rows * out_f * in_f,
                bytes_read=weights + rows * in_f * isz,
                bytes_written=rows * out_f * isz,
                param_bytes=weights, shapes=f"{rows:g}x{in_f},{touched:.1f}x{out_f}x{in_f}",
            )
            if self.gated and i == 0 and len(self.matrices) > 1:
                inter = out_f // 2
                emit("moe.act_and_mul", module=path, dtype=self.dtype, assumption=note, counted=False,
                     flops=0, bytes_read=rows * out_f * isz, bytes_written=rows * inter * isz)
        for name, size in self.biases:
            emit(f"moe.{name}", module=path, dtype=self.dtype, assumption=note, flops=0,
                 bytes_read=touched * size * isz, bytes_written=0, param_bytes=touched * size * isz)
        # weighted combine of each token's k expert outputs
        emit("moe.combine", module=path, dtype=self.dtype, assumption=note, flops=0,
             bytes_read=rows * hidden * isz, bytes_written=tokens * hidden * isz / self.ep_size)


def experts_model(module: torch.nn.Module, ep_size: int = 1) -> ExpertsModel | None:
    """An ExpertsModel for a container of 3-D per-expert weights, or None."""
    params = dict(module.named_parameters(recurse=False))
    mats = [(n, p) for n, p in params.items() if p.dim() == 3]
    if not mats:
        return None
    num = mats[0][1].shape[0]
    if any(p.shape[0] != num for _, p in mats) or num < 2:
        return None
    matrices = [(n, int(p.shape[1]), int(p.shape[2])) for n, p in mats]
    biases = [(n, int(p[0].numel())) for n, p in params.items() if p.dim() == 2 and p.shape[0] == num]
    first = mats[0][1]
    gated = len(matrices) > 1 and matrices[0][1] == 2 * matrices[-1][2]
    top_k = getattr(module, "top_k", None) or getattr(getattr(module, "config", None), "num_experts_per_tok", None)
    return ExpertsModel(num_experts=int(num), matrices=matrices, itemsize=first.element_size(),
                        dtype=dtype_key(first.dtype), top_k=top_k, gated=gated, biases=biases,
                        ep_size=ep_size)


@hookimpl
def rooflinekit_module_model(module, path, workload):
    model = experts_model(module, ep_size=int(dict(workload.options).get("_ep", 1)))
    return model
