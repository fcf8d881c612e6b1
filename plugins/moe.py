"""Built-in plugin: mixture-of-experts layers under an expected-load model of routing.

Routing is data-dependent and cannot run on the meta device, and on real data one batch's routing
says little about the next. This plugin replaces the experts' forward during capture: T tokens
each choosing k of E experts touch, under uniform routing, E*(1-(1-k/E)^T) distinct experts in
expectation; each touched expert's weights are read once per step; FLOPs count T*k expert
applications. The router and shared experts still run as ordinary ops.

Recognised: expert containers holding per-expert weights as 3-D parameters [E, out, in]
(transformers 5.x: `gate_up_proj`, `down_proj`; forward(hidden, top_k_index, top_k_weights)).
Also routing that reads its choice back to Python (moe_routing): JetMoE's router, which hands
its experts their row counts with `.tolist()` (split evenly), and LongCat-Flash's experts with
zero-computation experts, found with `torch.nonzero()`.
Other MoE implementations can return an `ExpertsModel` from their own `rooflinekit_module_model`.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING

from rooflinekit.plugin import (
    ModuleModel,
    UserError,
    dtype_key,
    expected_distinct_experts,  # the one formula, which moe_model's records follow
    hookimpl,
)

__all__ = ["expected_distinct_experts", "experts_model", "rooflinekit_module_model", "routing_model"]

if TYPE_CHECKING:
    import torch

PROVIDES = ("MoE expert models",)
#: ExpertsModel's module (it needs torch): imported when the hook first finds an experts container.
MODEL_MODULE = "rooflinekit_plugins.moe_model"
#: The module of the routing models (EvenRouting, ZeroExpertsModel; torch too), imported likewise.
ROUTING_MODULE = "rooflinekit_plugins.moe_routing"
#: Routers that hand their experts the rows each received as Python integers (`.tolist()`, which
#: the meta device cannot give), by class name: modelled by EvenRouting.
SIZED_ROUTERS = ("JetMoeTopKGating",)


def __getattr__(name: str):
    """`rooflinekit_plugins.moe.ExpertsModel`, served from its module on first use (PEP 562)."""
    if name == "ExpertsModel":
        return importlib.import_module(MODEL_MODULE).ExpertsModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def experts_model(module: torch.nn.Module, ep_size: int = 1, tp_size: int = 1) -> ModuleModel | None:
    """An ExpertsModel (rooflinekit_plugins.moe_model) for a container of 3-D per-expert weights, or
    None (a convolution's 3-D weight [out, in, kernel] is not experts: Whisper's and Mamba's Conv1d)."""
    if any(cls.__name__ == "_ConvNd" for cls in type(module).__mro__):
        return None
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
    if top_k is None and not _takes_routing(module):
        return None  # 3-D weights without routing: RecurrentGemma's per-head RG-LRU gates, not experts
    model_class = importlib.import_module(MODEL_MODULE).ExpertsModel
    return model_class(num_experts=int(num), matrices=matrices, itemsize=first.element_size(),
                       dtype=dtype_key(first.dtype), top_k=top_k, gated=gated, biases=biases,
                       ep_size=ep_size, tp_size=tp_size)


#: Forward parameters that carry a router's choice (transformers 5.x experts, gpt-oss, others).
ROUTING_PARAMS = ("top_k_index", "router_indices", "top_k_weights", "routing_weights", "selected_experts")


def _takes_routing(module) -> bool:
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False
    return any(name in params for name in ROUTING_PARAMS)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def routing_model(module: torch.nn.Module, ep_size: int = 1, tp_size: int = 1) -> ModuleModel | None:
    """EvenRouting for a router of SIZED_ROUTERS; ZeroExpertsModel for an experts container with
    zero-computation experts (`zero_expert_num` > 0: LongCat-Flash); else None."""
    if type(module).__name__ in SIZED_ROUTERS and _whole(getattr(module, "num_experts", None)) \
            and _whole(getattr(module, "top_k", None)):
        return importlib.import_module(ROUTING_MODULE).EvenRouting(module.num_experts, module.top_k)
    zero = getattr(module, "zero_expert_num", None)
    routed = getattr(module, "num_routed_experts", None)
    if not (_whole(zero) and _whole(routed)):
        return None
    params = dict(module.named_parameters(recurse=False))
    mats = [(n, int(p.shape[1]), int(p.shape[2])) for n, p in params.items() if p.dim() == 3]
    if not mats:
        return None
    first = next(p for p in params.values() if p.dim() == 3)
    return importlib.import_module(ROUTING_MODULE).ZeroExpertsModel(
        num_experts=routed, matrices=mats, itemsize=first.element_size(), dtype=dtype_key(first.dtype),
        gated=len(mats) > 1 and mats[0][1] == 2 * mats[-1][2], ep_size=ep_size, tp_size=tp_size,
        zero_experts=zero)


@hookimpl
def rooflinekit_module_model(module, path, workload, deployment):
    ep, tp = deployment.ep, deployment.tp
    model = routing_model(module, ep_size=ep, tp_size=tp) or experts_model(module, ep_size=ep, tp_size=tp)
    if model is None:
        return None
    redundant = getattr(deployment, "redundant_experts", 0)
    if (model.num_experts + redundant) % ep:
        more = -(model.num_experts + redundant) % ep
        raise UserError(f"--ep {ep} does not divide the {model.num_experts} experts"
                        f"{f' and {redundant} redundant copies' if redundant else ''} of {path or 'the model'}: "
                        f"give --redundant-experts {redundant + more} (whole slots per GPU) or an EP that divides them")
    model.redundant = redundant
    model.imbalance = float(getattr(deployment, "ep_imbalance", 1.0))
    return model
