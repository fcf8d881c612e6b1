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
from rooflinekit.core.units import ratio, seconds, share, si
from rooflinekit.outputs.groups import Group, fold
from rooflinekit.outputs.tables import PLAIN, Column, Style

Rows = list[list[str]]
_COUNT = re.compile(r" \(x\d+\)$")


def num(value, unit: str = "") -> str:
    return si(value, unit) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


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


def _weighted(members: list[ModuleRow], field_name: str, times: list[float]) -> float | None:
    """A utilisation of folded members: each weighted by its measured time (exactly the utilisation
    of their summed counts over their summed time)."""
    values = [getattr(m.measured, field_name) for m in members]
    if any(v is None for v in values) or not sum(times):
        return None
    return sum(v * t for v, t in zip(values, times, strict=True)) / sum(times)


def module_lines(report: Report, group: bool = True) -> list[ModuleLine]:
    """The module rows, folded where layers repeat, in order of time (measured where measured)."""
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
        out.append(ModuleLine(
            name=g.label, count=g.count, flops=sum(m.flops for m in members),
            bytes=sum(m.bytes for m in members), intensity=first.intensity, bound=first.bound,
            time_bound_ops_s=sum(m.time_bound_ops_s for m in members),
            time_share=sum(m.time_share for m in members), mfu_bound=first.mfu_bound,
            time_s=sum(times) if timed else None,
            mfu=_weighted(members, "mfu", times) if timed else None,
            mbu=_weighted(members, "mbu", times) if timed else None,
        ))
    measured = report.totals.measured is not None
    out.sort(key=lambda m: -(m.time_s or 0.0) if measured else -m.time_bound_ops_s)
    return out


def module_table(report: Report, top: int | None, group: bool = True,
                 style: Style = PLAIN) -> tuple[list[Column], Rows, int]:
    """(columns, rows, rows not shown) of the module table."""
    lines = module_lines(report, group)
    shown = lines[: top or None]
    measured = report.totals.measured is not None
    cols = [Column("module", "left"), Column("FLOP", drop=3), Column("bytes", drop=5), Column("FLOP/B"),
            Column("bound", "left", drop=4), Column("t bound"), Column("share"), Column("MFU bd", drop=2)]
    if measured:
        cols += [Column("measured"), Column("x bound", drop=1), Column("MFU"), Column("MBU")]
    rows = []
    for m in shown:
        row = [m.name, num(m.flops), num(m.bytes, "B"), ratio(m.intensity), style.bound(m.bound),
               seconds(m.time_bound_ops_s), share(m.time_share), share(m.mfu_bound)]
        if measured:
            row += [seconds(m.time_s), ratio(m.time_s / m.time_bound_ops_s) if m.time_s is not None
                    and m.time_bound_ops_s else "-", share(m.mfu), share(m.mbu)]
        rows.append(row)
    return cols, rows, len(lines) - len(shown)


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


def arch_label(a: AttentionRow) -> str:
    """'gqa', 'mla/absorbed', 'gqa win 4096', 'gqa chunk 8192'."""
    label = a.arch + (f"/{a.mode}" if a.mode else "")
    if a.window:
        label += f" win {a.window}"
    if a.chunk:
        label += f" chunk {a.chunk}"
    return label


def has_states(report: Report) -> bool:
    """Whether some layer keeps a fixed state (SSM, linear attention, RNN): the table says "mixers"."""
    return any(getattr(a, "cache_bytes_per_sequence", None) for a in report.attention)


def cache_cell(a: AttentionRow, states: bool) -> str:
    """A row's cache: per token (K/V), or per sequence for a fixed state."""
    per_seq = getattr(a, "cache_bytes_per_sequence", None)
    if per_seq:
        return num(per_seq, "B") + "/seq"
    return num(a.cache_bytes_per_token, "B") + ("/tok" if states and a.cache_bytes_per_token is not None else "")


def attention_table(report: Report, group: bool = True, style: Style = PLAIN) -> tuple[list[Column], Rows]:
    states = has_states(report)
    cols = [Column("mixer (per layer)" if states else "attention (per layer)", "left"), Column("arch", "left"),
            Column("H", drop=3), Column("Hkv", drop=3), Column("d", drop=2),
            Column("cache" if states else "cache/tok"), Column("KV min"), Column("KV exec"),
            Column("ampl"), Column("FLOP model", drop=5), Column("FLOP exec", drop=4), Column("I min"),
            Column("bound", "left", drop=1)]
    rows = []
    for a, name, _ in attention_groups(report, group):
        rows.append([
            name, arch_label(a), str(a.num_heads or "-"), str(a.num_kv_heads or "-"), str(a.head_dim or "-"),
            cache_cell(a, states), num(a.kv_bytes_min, "B"), num(a.kv_bytes_executed, "B"), ratio(a.amplification),
            num(a.flops_model), num(a.flops_executed), ratio(a.intensity_min),
            style.bound(a.placement_min.bound) if a.placement_min else "-",
        ])
    return cols, rows


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
    predicted = report.totals.predicted_step_s
    measured = report.totals.measured
    cols = [Column("op", "left"), Column("n" if group else "#"), Column("module", "left"),
            Column("FLOP", drop=3), Column("bytes", drop=4), Column("FLOP/B"), Column("bound", "left", drop=2),
            Column("t bound"), Column("share"), Column("shapes", "left", wide_only=True)]
    if measured:
        cols.insert(-1, Column("measured"))
        cols.insert(-1, Column("x bound", drop=1))
    rows = []
    for o in op_lines(report, group)[:n]:
        row = [o.first.name, str(o.count if group else o.first.index), o.label, num(o.flops), num(o.bytes, "B"),
               ratio(o.flops / o.bytes) if o.bytes else "-", style.bound(o.first.bound), seconds(o.time_bound_s),
               share((o.time_s / measured.step_time_s) if measured and o.time_s is not None and measured.step_time_s
                     else (o.time_bound_s / predicted if predicted else None))]
        if measured:
            row += [seconds(o.time_s), ratio(o.time_s / o.time_bound_s) if o.time_s is not None and o.time_bound_s
                    else "-"]
        row.append(o.first.shapes)
        rows.append(row)
    return cols, rows


def ops_title(report: Report, n: int, group: bool) -> str:
    by = "measured time" if report.totals.measured else "time bound"
    return (f"The {n} most expensive ops (by {by}"
            + ("; n: equal ops of repeated layers, figures summed" if group else "") + ")")


# -- ops without a FLOP formula, collectives, ranks ------------------------------------------------------


def uncounted_table(report: Report) -> tuple[list[Column], Rows]:
    cols = [Column("op without FLOP formula", "left"), Column("count"), Column("bytes"), Column("bytes share"),
            Column("time share")]
    rows = [[u.name + (" (formula failed)" if u.formula_error else ""), str(u.count), num(u.bytes, "B"),
             share(u.bytes_share), share(u.time_share)] for u in report.uncounted_ops]
    return cols, rows


def comm_table(report: Report) -> tuple[list[Column], Rows]:
    cols = [Column("collective", "left"), Column("group"), Column("calls"), Column("message"),
            Column("wire B/GPU"), Column("t bound"), Column("latency/call"), Column("t expected"),
            Column("algorithm", "left", drop=1)]
    rows = [[c.collective, str(c.group_size), str(c.calls), num(c.message_bytes, "B"), num(c.wire_bytes, "B"),
             seconds(c.time_bound_s), f"{seconds(c.latency_s)} / {seconds(c.expected_latency_s)}",
             seconds(c.expected_time_s), c.algorithm] for c in report.comm.collectives]
    return cols, rows


def ranks_table(report: Report, style: Style = PLAIN) -> tuple[list[Column], Rows]:
    cols = [Column("rank"), Column("FLOP"), Column("bytes"), Column("weights", drop=2), Column("compute"),
            Column("memory"), Column("comm"), Column("binds", "left"), Column("coll.", drop=1),
            Column("wire B", drop=3), Column("pred. step")]
    rows = [[str(r["rank"]), num(r["flops"]), num(r["bytes"], "B"), num(r["weight_bytes"], "B"),
             seconds(r["time_compute_s"]), seconds(r["time_memory_s"]), seconds(r["time_comm_s"]), r["binding"],
             str(r["comm_calls"]), num(r["comm_wire_bytes"], "B"), seconds(r["predicted_step_s"])]
            for r in report.distributed["ranks"]]
    return cols, rows


def attention_notes(report: Report) -> list[str]:
    """Each distinct attention note once, layer indices folded."""
    return sorted({layer_pattern(n) for a in report.attention for n in a.notes})
