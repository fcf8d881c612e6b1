"""The tables of the text report: modules, attention / mixers, the most expensive ops, ops without a
FLOP formula, collectives and ranks, as (columns, rows) for rooflinekit.outputs.tables.

Repeated layers are folded by default (rooflinekit.outputs.groups): `model.layers.* (x28)` in one
row, whose FLOPs, bytes, times and shares are the sum of its identical members; `group=False`
lists every layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.report import AttentionRow, ModuleRow, OpRow, Report
from rooflinekit.core.units import ratio
from rooflinekit.outputs.columns import (
    ATTENTION,
    COMM,
    MODULES,
    OPS,
    RANKS,
    UNCOUNTED,
    View,
    num,
    text_columns,
    text_rows,
)
from rooflinekit.outputs.groups import Group, fold
from rooflinekit.outputs.tables import PLAIN, Column, Style

Rows = list[list[str]]
_COUNT = re.compile(r" \(x\d+\)$")


# -- modules ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleLine:
    """A module row, or identical layers folded into one (sums over the members)."""

    name: str
    count: int
    flops: float
    bytes: float
    intensity: float | None
    bound: str
    time_bound_ops_s: float
    time_share: float
    mfu_bound: float
    time_s: float | None = None
    mfu: float | None = None
    mbu: float | None = None
    ops: int = 0
    weight_bytes: float = 0.0
    attainable_flops: float | None = None
    dtype: str = ""
    achieved: float | None = None


def _weighted(members: list[ModuleRow], field_name: str, times: list[float]) -> float | None:
    """A utilisation of folded members: each weighted by its measured time (exactly the utilisation
    of their summed counts over their summed time)."""
    values = [getattr(m.measured, field_name) for m in members]
    if any(v is None for v in values) or not sum(times):
        return None
    return sum(v * t for v, t in zip(values, times, strict=True)) / sum(times)


def module_lines(report: Report, group: bool = True, by_time: bool = True) -> list[ModuleLine]:
    """The module rows, folded where layers repeat, in order of time (measured where measured;
    `by_time` off: in report order)."""
    if group:
        groups = fold(report.modules, lambda m: m.name, lambda m: (m.flops, m.bytes, m.weight_bytes, m.dtype))
    else:
        groups = [Group(m.name, [m]) for m in report.modules]
    out = []
    for g in groups:
        members = g.members
        first = members[0]
        times = [m.measured.time_s if m.measured is not None else None for m in members]
        timed = all(t is not None for t in times) and any(m.measured is not None for m in members)
        flops, time_s = sum(m.flops for m in members), sum(times) if timed else None
        out.append(ModuleLine(
            name=g.label, count=g.count, flops=flops,
            bytes=sum(m.bytes for m in members), intensity=first.intensity, bound=first.bound,
            time_bound_ops_s=sum(m.time_bound_ops_s for m in members),
            time_share=sum(m.time_share for m in members), mfu_bound=first.mfu_bound,
            time_s=time_s,
            mfu=_weighted(members, "mfu", times) if timed else None,
            mbu=_weighted(members, "mbu", times) if timed else None,
            ops=sum(m.ops for m in members), weight_bytes=sum(m.weight_bytes for m in members),
            attainable_flops=first.attainable_flops, dtype=first.dtype,
            achieved=flops / time_s if time_s else None,
        ))
    if not by_time:
        return out
    measured = report.totals.measured is not None
    out.sort(key=lambda m: -(m.time_s or 0.0) if measured else -m.time_bound_ops_s)
    return out


def module_table(report: Report, top: int | None, group: bool = True,
                 style: Style = PLAIN) -> tuple[list[Column], Rows, int]:
    """(columns, rows, rows not shown) of the module table."""
    lines = module_lines(report, group)
    shown = lines[: top or None]
    view = View(report, style, group, measured=report.totals.measured is not None)
    return text_columns(MODULES, view), text_rows(MODULES, view, shown), len(lines) - len(shown)


# -- attention / mixers -------------------------------------------------------------------------------

_SAME_LAYER_KEYS = ("arch", "mode", "window", "chunk", "num_heads", "num_kv_heads", "head_dim", "cache_bytes_per_token",
                    "kv_bytes_min", "kv_bytes_executed", "flops_model", "flops_executed", "cache_bytes_per_sequence")


def _same_layer_key(a: AttentionRow) -> tuple:
    return tuple(-1 if v is None else v for v in (getattr(a, k, None) for k in _SAME_LAYER_KEYS))


def attention_groups(report: Report, group: bool = True) -> list[tuple[AttentionRow, str, int]]:
    """(first row, label, layers) per row of the attention table: identical layers folded."""
    if not group:
        return [(a, a.module, 1) for a in report.attention]
    return [(g.members[0], g.label, g.count) for g in fold(report.attention, lambda a: a.module, _same_layer_key)]


def has_states(report: Report) -> bool:
    """Whether some layer keeps a fixed state (SSM, linear attention, RNN): the table says "mixers"."""
    return any(getattr(a, "cache_bytes_per_sequence", None) for a in report.attention)


def attention_table(report: Report, group: bool = True, style: Style = PLAIN) -> tuple[list[Column], Rows]:
    """(columns, rows) of the attention / mixer table: one row per group of identical layers."""
    view = View(report, style, group, states=has_states(report))
    return text_columns(ATTENTION, view), text_rows(ATTENTION, view, attention_groups(report, group))


def attention_title(report: Report) -> str:
    a = report.attention_totals
    if a.recognised == a.layers:
        kv = (f"KV executed {num(a.kv_bytes_executed, 'B')} vs minimum "
              f"{num(a.kv_bytes_min, 'B')}, amplification {ratio(a.amplification)}")
    elif a.recognised:
        kv = (f"recognised layers: KV executed "
              f"{num(a.kv_bytes_executed - a.kv_bytes_executed_unrecognised, 'B')} vs "
              f"minimum {num(a.kv_bytes_min, 'B')}, amplification {ratio(a.amplification)}; "
              f"others: {num(a.kv_bytes_executed_unrecognised, 'B')} executed, minimum unknown")
    else:
        kv = f"KV executed {num(a.kv_bytes_executed, 'B')}, minimum unknown"
    if has_states(report):  # KV and fixed states (SSM, linear attention, RNN) together
        return (f"Mixers: attention and fixed-state layers ({a.recognised}/{a.layers} layers recognised; "
                f"{kv.replace('KV ', 'cache ')}; fixed state "
                f"{num(getattr(a, 'cache_bytes_per_sequence', None), 'B')} per sequence)")
    return f"Attention ({a.recognised}/{a.layers} layers recognised; {kv})"


# -- the most expensive ops ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OpLine:
    """An op, or the equal ops of repeated layers folded into one line (sums over the members)."""

    first: OpRow
    label: str  # the module, with layer indices folded
    count: int
    flops: float
    bytes: float
    time_bound_s: float
    time_s: float | None


def op_lines(report: Report, group: bool = True) -> list[OpLine]:
    """Every op (equal ops of repeated layers folded), most expensive first: by measured time where
    the report was measured, else by time bound."""
    if group:
        groups = fold(report.ops, lambda o: f"{o.name} {o.module}", lambda o: (o.flops, o.bytes, o.dtype))
        parts = [(g.members, _COUNT.sub("", g.label.split(" ", 1)[1] if " " in g.label else g.label))
                 for g in groups]
    else:
        parts = [([o], o.module) for o in report.ops]
    out = []
    for members, label in parts:
        times = [o.measured.time_s if o.measured is not None else None for o in members]
        out.append(OpLine(members[0], label, len(members), sum(o.flops for o in members),
                          sum(o.bytes for o in members), sum(o.time_bound_s for o in members),
                          sum(times) if all(t is not None for t in times) else None))
    measured = report.totals.measured is not None
    out.sort(key=lambda o: -(o.time_s or 0.0) if measured else -o.time_bound_s)
    return out


def ops_table(report: Report, n: int, group: bool = True, style: Style = PLAIN) -> tuple[list[Column], Rows]:
    """(columns, rows) of the `n` most expensive op lines."""
    view = View(report, style, group, measured=report.totals.measured is not None)
    return text_columns(OPS, view), text_rows(OPS, view, op_lines(report, group)[:n])


def ops_title(report: Report, n: int, group: bool) -> str:
    by = "measured time" if report.totals.measured else "time bound"
    return (f"The {n} most expensive ops (by {by}"
            + ("; n: equal ops of repeated layers, figures summed" if group else "") + ")")


# -- ops without a FLOP formula, collectives, ranks ------------------------------------------------------


def uncounted_table(report: Report) -> tuple[list[Column], Rows]:
    """(columns, rows) of the ops without a FLOP formula."""
    view = View(report)
    return text_columns(UNCOUNTED, view), text_rows(UNCOUNTED, view, report.uncounted_ops)


def comm_table(report: Report) -> tuple[list[Column], Rows]:
    """(columns, rows) of the collectives per GPU."""
    view = View(report)
    return text_columns(COMM, view), text_rows(COMM, view, report.comm.collectives)


def ranks_table(report: Report, style: Style = PLAIN) -> tuple[list[Column], Rows]:
    """(columns, rows) of a distributed run's ranks."""
    view = View(report, style)
    return text_columns(RANKS, view), text_rows(RANKS, view, report.distributed["ranks"])


def attention_notes(report: Report) -> list[str]:
    """Each distinct attention note once, layer indices folded."""
    return sorted({layer_pattern(n) for a in report.attention for n in a.notes})
