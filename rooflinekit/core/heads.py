"""Heads: recognition, cost and tensor-parallel split shared by attention plugins.

Nothing here names an architecture. Plugins use these to read what a module declares (heads, K/V
heads, head sizes under the attribute names model code commonly uses, or its transformers
`config`, or its projection shapes), what an attention call shows (its q/k/v shapes), the cost
of softmax attention over cached K and V heads, and how such heads split over GPUs; the plugin
then decides which architecture the numbers mean.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rooflinekit.core.errors import UserError
from rooflinekit.core.keys import pairs_attended, positions_attended
from rooflinekit.core.specs import (
    AttentionCall,
    AttentionCost,
    AttentionShard,
    AttentionSpec,
    AttentionWorkload,
)

if TYPE_CHECKING:  # annotations only: this module (and so `rooflinekit.plugin`) loads without torch
    import torch

HEAD_ATTRS = ("num_heads", "n_heads", "num_attention_heads", "n_head", "n_local_heads", "heads")
KV_HEAD_ATTRS = ("num_kv_heads", "num_key_value_heads", "n_kv_heads", "n_local_kv_heads", "kv_heads")
HEAD_DIM_ATTRS = ("head_dim", "head_size", "d_head", "dim_head")
HIDDEN_ATTRS = ("hidden_size", "embed_dim", "d_model", "n_embd")
KV_GROUP_ATTRS = ("num_key_value_groups", "num_kv_groups")


def int_attr(obj: object, names: Iterable[str]) -> int | None:
    """The first of `names` that `obj` has as a positive int (not a bool), or None."""
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _is_linear(obj: object) -> bool:
    """isinstance(obj, torch.nn.Linear), without importing torch: no object is a torch Linear
    before torch has been imported, so plugins (and the commands that load them) stay torch-free."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Linear)


def lookup(module: object, names: Iterable[str]) -> int | None:
    """An attribute of the module, else of its transformers-style `config`."""
    names = tuple(names)
    value = int_attr(module, names)
    if value is None and getattr(module, "config", None) is not None:
        value = int_attr(module.config, names)
    return value


def call_heads(call: AttentionCall | None, heads: int) -> tuple[int | None, int | None]:
    """(head_dim, distinct K/V heads) the call shows for a module of `heads` query heads, or Nones
    when the call's shapes do not carry those heads (folded into batch, or a different layout)."""
    if call is None or len(call.q_shape) < 4 or call.q_shape[-3] != heads:
        return None, None
    return call.q_shape[-1], call.kv_heads_unique or call.k_shape[-3]


@dataclass(frozen=True)
class Heads:
    """Heads and head sizes of an attention layer, before a plugin names its architecture."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    notes: tuple[str, ...] = ()

    def spec(self, arch: str, **fields) -> AttentionSpec:
        """An AttentionSpec of these heads for `arch` (more fields by keyword)."""
        return AttentionSpec(arch=arch, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                             head_dim=self.head_dim, v_head_dim=self.v_head_dim,
                             notes=self.notes + tuple(fields.pop("notes", ())), **fields)


def module_heads(module: torch.nn.Module, call: AttentionCall | None = None) -> Heads | None:
    """Heads a module declares, filled from its projections and its attention call.

    Query heads from HEAD_ATTRS (required); the head size from HEAD_DIM_ATTRS, else q_proj's width,
    the call's q, or the hidden size over the heads; K/V heads from KV_HEAD_ATTRS, else the query
    heads over KV_GROUP_ATTRS, k_proj's width, the distinct heads the call attends over, or (with a
    note) the query heads. None when the module declares no heads or no head size can be found.
    """
    heads = lookup(module, HEAD_ATTRS)
    if heads is None:
        return None
    call_dim, call_kv = call_heads(call, heads)
    head_dim = lookup(module, HEAD_DIM_ATTRS)
    q_proj = getattr(module, "q_proj", None)
    if head_dim is None:
        hidden = lookup(module, HIDDEN_ATTRS)
        if _is_linear(q_proj):
            head_dim = q_proj.out_features // heads
        elif call_dim is not None:
            head_dim = call_dim
        elif hidden is not None:
            head_dim = hidden // heads
    if head_dim is None:
        return None
    notes: tuple[str, ...] = ()
    kv_heads = lookup(module, KV_HEAD_ATTRS)
    if kv_heads is None:
        groups = lookup(module, KV_GROUP_ATTRS)
        k_proj = getattr(module, "k_proj", None)
        if groups is not None:
            kv_heads = heads // groups
        elif _is_linear(k_proj):
            kv_heads = k_proj.out_features // head_dim
        elif call_kv is not None:
            kv_heads = call_kv  # what the attention call attends over, repeats undone
        else:
            kv_heads = heads
            notes = (f"K/V heads neither declared by the module nor visible in its call: taken as "
                     f"{heads}, the query heads (MHA)",)
    elif call_kv is not None and call_kv != kv_heads:
        notes = (f"the module declares {kv_heads} K/V heads; its attention call attends over "
                 f"{call_kv} distinct heads",)
    return Heads(heads, kv_heads, head_dim, head_dim, notes)


def call_layout(call: AttentionCall) -> Heads | None:
    """Heads an attention call shows by its shapes alone, or None when heads are folded into the
    batch dimension (fewer than 4 dimensions)."""
    if len(call.q_shape) < 4 or len(call.k_shape) < 4:
        return None
    heads = call.q_shape[-3]
    kv_heads = call.kv_heads_unique or call.k_shape[-3]
    notes: tuple[str, ...] = ()
    if call.kv_heads_unique:
        notes = (f"K/V widened from {call.kv_heads_unique} to {call.k_shape[-3]} heads (repeat or "
                 "expand) before the call",)
    return Heads(heads, kv_heads, call.q_shape[-1], call.v_shape[-1], notes)


def heads_cost(spec: AttentionSpec, workload: AttentionWorkload) -> AttentionCost:
    """Softmax attention over cached K and V heads: `num_kv_heads` heads of `head_dim` (K) and
    `v_head_dim` (V) per cached position read once, q read and the output written once, and
    2 FLOPs per multiply-add of QK^T and PV over the pairs scored (the spec's window or chunk
    honoured, rooflinekit.core.keys)."""
    chunk = getattr(spec, "chunk", None)
    positions = positions_attended(workload.q_len, workload.context, spec.window, chunk)
    pairs = pairs_attended(workload.q_len, workload.context, workload.is_causal, spec.window, chunk)
    b, h = workload.batch, spec.num_heads
    cache_per_token = spec.num_kv_heads * (spec.head_dim + spec.v_head_dim) * workload.cache_itemsize
    kv_min = b * positions * cache_per_token
    q_out = b * workload.q_len * h * (spec.head_dim + spec.v_head_dim) * workload.act_itemsize
    flops = 2 * b * h * pairs * (spec.head_dim + spec.v_head_dim)
    return AttentionCost(flops_model=flops, kv_bytes_min=kv_min, bytes_min=kv_min + q_out,
                         cache_bytes_per_token=cache_per_token)


def split_heads(spec: AttentionSpec, tp: int) -> AttentionShard:
    """Query heads split N ways; K/V heads split while N <= H_kv and replicated beyond (each GPU
    holds one K/V head, each head on N / H_kv GPUs: its K/V projection's columns computed there).

    Raises UserError when N does not divide the heads, or N and H_kv (below the query heads) do not
    divide one another.
    """
    h, hkv, d, dv = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    if h % tp:
        raise UserError(f"--tp {tp} does not divide the {h} attention heads")
    if hkv < h and ((hkv >= tp and hkv % tp) or (hkv < tp and tp % hkv)):
        raise UserError(f"--tp {tp} and the {hkv} KV heads: one must divide the other")
    heads = h // tp
    shares: dict[int, float] = {}
    if hkv >= tp:
        kv_heads, kv = hkv // tp, "split"
        note = f"TP {tp}: {heads} of {h} heads and {kv_heads} of {hkv} KV heads per GPU"
    else:
        kv_heads, kv = 1, "replicated"
        note = (f"TP {tp}: {heads} of {h} heads per GPU; KV heads replicated: {hkv} KV heads over "
                f"{tp} GPUs, each GPU holds 1 (each KV head on {tp // hkv} GPUs)")
        if hkv < h:
            fused = h * d + hkv * (d + dv)  # a fused qkv projection: its q columns / N, one K/V head
            shares[fused] = (h / tp * d + kv_heads * (d + dv)) / fused
            for width in (hkv * d, hkv * dv, hkv * (d + dv)):  # k, v, or a fused kv projection
                shares[width] = kv_heads / hkv
    return AttentionShard(
        spec=replace(spec, num_heads=heads, num_kv_heads=kv_heads, notes=tuple(spec.notes) + (note,)),
        kv=kv, colwise_shares=shares, note=note,
    )
