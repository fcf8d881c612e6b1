"""Reports as pandas DataFrames (`to_dataframe()`): one row per module, op, attention layer, sweep
point, lever or plan configuration, in SI base units, each column named with its unit.

Column names are the JSON fields' (docs/schema.md), flattened with dots (`measured.time_s`,
`placement_min.bound`), the identifying column first (`name`; `module` for attention layers,
`lever` for advice, `label` for plan configurations). Where a JSON field's name does not say its
unit, the column's does (`RENAMED`): `flops` is `flop` (a count of FLOPs), `intensity` is
`flop_per_byte`, `attainable_flops` is `attainable_flop_per_s`. Times end in `_s`, byte counts say
`bytes`, shares and utilisations (`time_share`, `mfu_bound`) are fractions of 1.

The old names (rooflinekit 0.2's columns) stay accepted for one release: `to_dataframe(columns=[...])`
takes old or new names, and an old name gives its column under that old name with a
DeprecationWarning. A DataFrame cannot hold alias columns, so `frame["intensity"]` itself is
gone: select `frame["flop_per_byte"]`, or ask `columns=["intensity"]`.

pandas is optional: it is imported here only when a frame is asked for.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.codec import encode, flatten
from rooflinekit.core.plan import PlanResult
from rooflinekit.core.report import Report
from rooflinekit.core.sweep_report import SweepReport

#: A JSON field whose name does not carry its unit -> the column name that does (applied to the
#: last part of a dotted name: `placement_min.intensity` -> `placement_min.flop_per_byte`).
RENAMED = {
    "flops": "flop",
    "flops_model": "flop_model",
    "flops_executed": "flop_executed",
    "kv_reexpand_flops": "kv_reexpand_flop",
    "intensity": "flop_per_byte",
    "intensity_min": "flop_per_byte_min",
    "intensity_executed": "flop_per_byte_executed",
    "attainable_flops": "attainable_flop_per_s",
    "achieved_flops": "achieved_flop_per_s",
    "achieved_bandwidth": "achieved_bytes_per_s",
}
#: The sections each report kind has as frames (the first is the default).
SECTIONS = {
    "profile": ("modules", "ops", "attention", "uncounted_ops"),
    "sweep": ("points", "critical_batch", "critical_batch_attention_minimum"),
}
#: The identifying columns, first in every frame where they are.
FIRST = ("rank", "name", "module", "lever", "label", "batch", "context", "index")


def new_name(column: str) -> str:
    """The column's name with its unit (`intensity` -> `flop_per_byte`; unchanged when it has one)."""
    head, dot, last = column.rpartition(".")
    return head + dot + RENAMED.get(last, last)


def _pandas():
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("to_dataframe needs pandas: pip install pandas") from exc
    return pd


def _select(frame, aliases: dict[str, str], columns: Sequence[str] | None):
    """`frame` cut to `columns` (new names, or old ones with a DeprecationWarning)."""
    if columns is None:
        return frame
    if isinstance(columns, str) or not isinstance(columns, Iterable):
        raise TypeError(f"columns= takes a list of column names, got {columns!r}")
    picked, names, old = [], [], []
    for c in columns:
        new = c if c in frame.columns else aliases.get(c)
        if new is None:
            raise ValueError(f"no column {c!r}: the columns are {', '.join(map(str, frame.columns))}")
        if new != c:
            old.append(f"{c!r} (now {new!r})")
        picked.append(new)
        names.append(c)
    if old:
        warnings.warn(f"old column names {', '.join(old)}: the old names are accepted until rooflinekit 0.4",
                      DeprecationWarning, stacklevel=3)
    out = frame[picked]
    out.columns = names
    return out


def frame(rows: list[dict], columns: Sequence[str] | None = None):
    """A DataFrame of JSON rows: flattened, renamed with units (RENAMED), identifying columns first."""
    pd = _pandas()
    flat = [flatten(r) for r in rows]
    order: list[str] = []
    for r in flat:
        order += [k for k in r if k not in order]
    order.sort(key=lambda k: FIRST.index(k) if k in FIRST else len(FIRST))  # stable: the rest in JSON order
    aliases = {k: new_name(k) for k in order if new_name(k) != k}
    df = pd.DataFrame([[r.get(k) for k in order] for r in flat], columns=[new_name(k) for k in order])
    return _select(df, aliases, columns)


def _section(rows: object, section: str, kind: str) -> list:
    if section not in SECTIONS[kind] or not isinstance(rows, list):
        raise ValueError(f"no table section {section!r}: use {', '.join(SECTIONS[kind])}")
    return rows


def report_frame(report: Report, section: str = "modules", columns: Sequence[str] | None = None):
    """One section of a profile (`modules`, `ops`, `attention`, `uncounted_ops`): one row per item."""
    rows = [encode(r) for r in _section(getattr(report, section, None), section, "profile")]
    if section == "ops":  # the op's total bytes, as the CSV has it
        rows = [dict(r, bytes=op.bytes) for r, op in zip(rows, report.ops, strict=True)]
    return frame(rows, columns)


def sweep_frame(sweep: SweepReport, section: str = "points", columns: Sequence[str] | None = None):
    """One row per point (`points`), or per context (`critical_batch`, `..._attention_minimum`)."""
    return frame([encode(r) for r in _section(getattr(sweep, section, None), section, "sweep")], columns)


def advice_frame(advice: AdviceReport, columns: Sequence[str] | None = None):
    """The baseline, then every lever in rank order (`rank` 0 is the baseline)."""
    rows = [dict(encode(lv), rank=i) for i, lv in enumerate([advice.baseline, *advice.levers])]
    return frame(rows, columns)


def plan_frame(plan: PlanResult, columns: Sequence[str] | None = None):
    """One row per priced configuration, with its `label`, `pareto` (on the front) and `best`."""
    front = set(plan.pareto)
    rows = [dict(encode(c), label=c.label(), pareto=i in front, best=i == plan.best)
            for i, c in enumerate(plan.configs)]
    return frame(rows, columns)
