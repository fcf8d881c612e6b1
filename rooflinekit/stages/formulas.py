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


def register_flops(*ops: object, override: bool = False) -> Callable[[FlopFormula], FlopFormula]:
    """Decorator: register `fn(*args, out=..., **kwargs) -> flops` for one or more ops.

    An op that already has a formula is refused (ValueError naming both) unless `override=True`:
    replacing a formula is then a visible choice, not the accident of which module loaded last.
    """

    def wrap(fn: FlopFormula) -> FlopFormula:
        keys = [op_key(op) for op in ops]
        taken = [k for k in keys if k in FLOP_FORMULAS and FLOP_FORMULAS[k] is not fn]
        if taken and not override:
            held = ", ".join(f"{k} ({_formula_name(FLOP_FORMULAS[k])})" for k in taken)
            raise ValueError(f"register_flops: {held} already has a FLOP formula; {_formula_name(fn)} "
                             "does not replace it unless registered with override=True")
        for key in keys:
            FLOP_FORMULAS[key] = fn
        return fn

    return wrap


def _formula_name(fn: FlopFormula) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


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


@register_flops("aten._scaled_mm")
def _scaled_mm(a, b, *args, out=None, **kwargs) -> int:
    # fp8 (or int8) product with scales: 2*m*k*n, as for mm; applying the scales is not counted.
    # The op's dtype is its operands' (float8 -> "fp8"), so it is placed at the fp8 peak.
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


def torch_formula(op_name: str) -> FlopFormula | None:
    """torch.utils.flop_counter's formula for an op, adapted to (args, out=, kwargs)."""
    registry = compat.torch_flop_registry()
    for packet, fn in registry.items():
        if str(packet) == op_name:

            def adapted(*args, out=None, _fn=fn, **kwargs):
                return _fn(*args, **kwargs, out_val=out)

            return adapted
    return None


#: More FLOPs than this in one op is no count but a bug (a zetta-FLOP op would take a week on
#: any machine); a formula answering more is not used.
MAX_OP_FLOPS = 1e30


def flops_problem(value: object) -> str | None:
    """Why a formula's answer is no FLOP count (not a real number, NaN, inf, negative, absurd), or None."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        return f"a non-number ({type(value).__name__} {value!r:.40})"
    try:
        number = float(value)  # ints, floats, torch SymInts, numpy scalars
    except (TypeError, ValueError, OverflowError) as exc:
        return f"a non-number ({type(value).__name__}: {exc})"
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return f"{number} (not finite)"
    if number < 0:
        return f"a negative count ({number:g})"
    if number > MAX_OP_FLOPS:
        return f"an implausible count ({number:g} > {MAX_OP_FLOPS:g})"
    return None


class FormulaBook:
    """Which formula answers for each op: plugins', then ours, then torch's; cached per op name.

    `owners` names the plugin of each plugin formula; `warn` (the plugin host's) is told, once per
    op, when a formula fails or answers something that is no FLOP count (`evaluate`)."""

    def __init__(self, extra: dict[str, FlopFormula] | None = None, owners: dict[str, str] | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.extra = dict(extra or {})
        self.owners = dict(owners or {})
        self.warn = warn
        self._cache: dict[str, FlopFormula | None] = {}
        self._blamed: set[str] = set()
        self.sources: dict[str, str] = {}

    def evaluate(self, op_name: str, fn: FlopFormula, args, kwargs, out) -> tuple[float, str | None]:
        """(FLOPs, None), or (0.0, why) when the formula raises or answers no usable count: the op
        is then listed as uncounted with `why`, and a plugin's formula is blamed in one warning."""
        try:
            value = fn(*args, out=out, **kwargs)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            self._blame(op_name, f"failed: {error}", always=False)
            return 0.0, error
        problem = flops_problem(value)
        if problem is not None:
            self._blame(op_name, f"returned {problem}", always=True)
            return 0.0, f"formula returned {problem}"
        return float(value), None

    def _blame(self, op_name: str, what: str, always: bool) -> None:
        plugin = self.owners.get(op_name)
        if self.warn is None or op_name in self._blamed or (plugin is None and not always):
            return
        self._blamed.add(op_name)
        who = f"plugin '{plugin}':" if plugin else f"{self.sources.get(op_name, 'rooflinekit')}'s"
        self.warn(f"{who} FLOP formula for {op_name} {what}; {op_name} is listed as uncounted")

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
    # `each` answers first-asked first: the first plugin to name an op keeps it
    for answer, plugin in host.each(host.hook.rooflinekit_op_formulas):
        for op, fn in answer.items():
            key = op_key(op)
            if not callable(fn):
                host.warn(f"plugin '{plugin}' gave a FLOP formula for {key} that is not callable "
                          f"({type(fn).__name__}); ignored")
                continue
            if owner.get(key, plugin) != plugin:
                host.warn(f"plugins '{owner[key]}' and '{plugin}' both give a FLOP formula for {key}: "
                          f"'{owner[key]}''s is used (asked first)")
                continue
            extra[key], owner[key] = fn, plugin
    return FormulaBook(extra, owner, warn=host.warn)
