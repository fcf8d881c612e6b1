"""Registries of per-op formulas: FLOPs (ours beside torch's) and bytes where the generic rule is wrong.

A FLOP formula takes the op's args, kwargs and output and returns FLOPs (2 per multiply-add).
Formulas registered here win over torch.utils.flop_counter's; plugins add more through the
`rooflinekit_op_formulas` hook.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rooflinekit.core import compat
from rooflinekit.core.keys import causal_pairs
from rooflinekit.core.plugins import PluginHost, get_host

aten = torch.ops.aten

FlopFormula = Callable[..., float]


@dataclass(frozen=True)
class OpFormula:
    """A formula for one op (an OpOverloadPacket or its 'ns.name' string)."""

    op: object
    flops: FlopFormula | None = None
    source: str = "rooflinekit"


#: Ours: packet -> formula. Filled by the decorator below.
FLOP_FORMULAS: dict[object, FlopFormula] = {}

#: Ops that move data but do no arithmetic: FLOPs are 0 by definition, not by omission.
DATA_MOVEMENT_OPS = {
    "aten.copy_", "aten.clone", "aten.cat", "aten.stack", "aten._to_copy", "aten.embedding",
    "aten.index_select", "aten.index", "aten.gather", "aten.scatter", "aten.scatter_",
    "aten.index_put", "aten.index_put_", "aten.index_copy", "aten.index_copy_", "aten.fill_",
    "aten.fill", "aten.zero_", "aten.zeros", "aten.zeros_like", "aten.ones", "aten.ones_like",
    "aten.full", "aten.full_like", "aten.arange", "aten.repeat", "aten.repeat_interleave",
    "aten.constant_pad_nd", "aten.flip", "aten.roll", "aten.slice_scatter", "aten.select_scatter",
    "aten.triu", "aten.tril", "aten.masked_fill", "aten.masked_fill_", "aten.where", "aten.contiguous",
    "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.scalar_tensor",
    "aten.one_hot", "aten.lift_fresh_copy", "aten.linspace", "aten.bernoulli", "aten.uniform_",
    "aten.normal_", "aten.random_", "aten.resize_", "aten.eye", "aten.embedding_dense_backward",
}

#: Ops that allocate or describe without moving data: no bytes, no FLOPs, not listed.
FREE_OPS = {
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten._unsafe_view", "aten.lift_fresh", "aten.detach", "aten.alias", "aten.set_",
    "aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset", "aten.dim",
    "aten.is_same_size", "aten._local_scalar_dense", "aten.record_stream", "aten._assert_async",
    "aten._assert_tensor_metadata", "aten.resolve_conj", "aten.resolve_neg", "aten.result_type",
    "prim.device", "aten._has_compatible_shallow_copy_type", "aten.is_nonzero",
}


def register_flops(*ops: object) -> Callable[[FlopFormula], FlopFormula]:
    """Decorator: register `fn(*args, out=..., **kwargs) -> flops` for one or more ops."""

    def wrap(fn: FlopFormula) -> FlopFormula:
        for op in ops:
            FLOP_FORMULAS[op_key(op)] = fn
        return fn

    return wrap


def op_key(op: object) -> str:
    """'aten.mm' for aten.mm, aten.mm.default or the string itself."""
    if isinstance(op, str):
        return op
    packet = getattr(op, "overloadpacket", op)
    return str(packet)


#: Query-key pairs scored: all of them, or the causal (top-left aligned, as torch) triangle
#: (rooflinekit.core.keys, shared with the attention plugins' costs).
attention_pairs = causal_pairs


def sdpa_flops(q_shape, k_shape, v_shape, is_causal: bool = False) -> int:
    """FLOPs of softmax(QK^T)V: 2*pairs*E for QK^T plus 2*pairs*Ev for PV, per batch-head.

    Softmax and scaling are lower-order and not counted (as in torch's convention). With a
    causal mask only the unmasked pairs count: a fused kernel skips the masked blocks.
    """
    batch_heads = math.prod(q_shape[:-2])
    q_len, e = q_shape[-2], q_shape[-1]
    kv_len, ev = k_shape[-2], v_shape[-1]
    return 2 * batch_heads * attention_pairs(q_len, kv_len, is_causal) * (e + ev)


@register_flops(compat.CPU_FLASH_SDPA)
def _cpu_flash_sdpa(query, key, value, *args, out=None, **kwargs) -> int:
    # torch's registry has no entry for the CPU flash kernel (counts 0 in torch 2.13).
    is_causal = bool(kwargs.get("is_causal", args[1] if len(args) > 1 else False))
    return sdpa_flops(query.shape, key.shape, value.shape, is_causal)


@register_flops("aten.mm")
def _mm(a, b, out=None, **kwargs) -> int:
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


@register_flops("aten.addmm")
def _addmm(bias, a, b, *args, out=None, **kwargs) -> int:
    # The bias add is one FLOP per output element, lower order; torch's convention omits it too.
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


@register_flops("aten.bmm")
def _bmm(a, b, out=None, **kwargs) -> int:
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]


@register_flops("aten.baddbmm")
def _baddbmm(bias, a, b, *args, out=None, **kwargs) -> int:
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]


def torch_formula(op_name: str) -> FlopFormula | None:
    """torch.utils.flop_counter's formula for an op, adapted to (args, out=, kwargs)."""
    registry = compat.torch_flop_registry()
    for packet, fn in registry.items():
        if str(packet) == op_name:

            def adapted(*args, out=None, _fn=fn, **kwargs):
                return _fn(*args, **kwargs, out_val=out)

            return adapted
    return None


class FormulaBook:
    """Which formula answers for each op: plugins', then ours, then torch's; cached per op name."""

    def __init__(self, extra: dict[str, FlopFormula] | None = None) -> None:
        self.extra = dict(extra or {})
        self._cache: dict[str, FlopFormula | None] = {}
        self.sources: dict[str, str] = {}

    def lookup(self, op_name: str) -> FlopFormula | None:
        if op_name not in self._cache:
            if op_name in self.extra:
                fn, src = self.extra[op_name], "plugin"
            elif op_name in FLOP_FORMULAS:
                fn, src = FLOP_FORMULAS[op_name], "rooflinekit"
            else:
                fn, src = torch_formula(op_name), "torch"
            self._cache[op_name] = fn
            if fn is not None:
                self.sources[op_name] = src
        return self._cache[op_name]


def formula_book(host: PluginHost | None = None) -> FormulaBook:
    """Plugins' formulas (`rooflinekit_op_formulas`) over ours and torch's. When two plugins give
    a formula for the same op, the first asked wins (as with every other hook: later-registered
    first, tryfirst before plain), and one warning names both."""
    host = host or get_host()
    extra: dict[str, FlopFormula] = {}
    owner: dict[str, str] = {}
    # call_all answers first-asked first: the first plugin to name an op keeps it
    for answer, plugin in host.call_all("rooflinekit_op_formulas", expect=dict):
        for op, fn in answer.items():
            key = op_key(op)
            if owner.get(key, plugin) != plugin:
                host.warn(f"plugins '{owner[key]}' and '{plugin}' both give a FLOP formula for {key}: "
                          f"'{owner[key]}''s is used (asked first)")
                continue
            extra[key], owner[key] = fn, plugin
    return FormulaBook(extra)
