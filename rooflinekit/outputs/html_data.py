"""The HTML page's data: labelled values, sortable tables and chart series as the page's script
(outputs/html_assets/report.js) reads them. Values stay raw numbers with how the page formats them,
so every number on the page goes through one formatter."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Rows of other tables shown before "show all".
TOP_ROWS = 200

#: Series styles: marker shape, colour, hollow. Area of a sized marker is proportional to its share.
STYLES = {
    "modules": ("circle", "#1f77b4", False),
    "attention": ("square", "#d95f02", False),
    "attention_min": ("square", "#d95f02", True),
    "step": ("diamond", "#222222", False),
    "step_fused": ("diamond", "#222222", True),
    "step_min": ("diamond", "#666666", True),
    "trail": ("circle", "#7a7a7a", False),
    "lever": ("triangle", "#2ca02c", False),
}
#: Report A and B of a comparison.
AB_COLOURS = {"A": "#1f77b4", "B": "#d62728"}


# -- values: raw numbers with how the page formats them ------------------------------------------


def clean(value: Any) -> Any:
    """A JSON-safe copy: non-finite floats become None, floats keep 6 significant digits."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return str(value)


def item(label: str, value: Any, kind: str = "text", unit: str = "") -> list:
    """One labelled value: kind is text, int, si (with unit), num, pct, time or bool."""
    return [label, value, kind, unit]


def col(label: str, kind: str = "text", unit: str = "", hint: str = "") -> dict:
    """A table column: how its cells are formatted and sorted, and a hover hint for its header."""
    return {"label": label, "f": kind, "u": unit, "hint": hint}


@dataclass(frozen=True)
class TableView:
    """How a table is shown: its first sort (column, "asc"/"desc"), the rows shown before "show all",
    its caption, the row count it speaks of (None: its rows'), and the chart series its rows link to
    by the first column (hovering a row highlights its point)."""

    sort: tuple[int, str] | None = None
    limit: int = TOP_ROWS
    caption: str = ""
    total: int | None = None
    series: str | None = None


PLAIN_TABLE = TableView()


def table(tid: str, title: str, columns: list[dict], rows: list[list], view: TableView = PLAIN_TABLE) -> dict:
    """A sortable table: rows are raw values in column order, shown as `view` says."""
    return {"id": tid, "title": title, "columns": columns, "rows": rows,
            "sort": list(view.sort) if view.sort else None, "limit": view.limit, "caption": view.caption,
            "total": len(rows) if view.total is None else view.total, "series": view.series}


def quotient(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def attainable(peak: float, bandwidth: float, intensity: float | None) -> float | None:
    return min(peak, bandwidth * intensity) if intensity else None


# -- chart -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesView:
    """How a chart series is drawn: `style` (a key of STYLES; None: the series' id) and `colour`
    (None: the style's). `sized`: marker area proportional to a point's share. `select` (sweeps):
    "point" draws only the selected (batch, context), "context" every batch at the selected context.
    `link`: the id of a series whose point of the same name this one is joined to. `hint`: the
    legend's hover text. `tag` prefixes the chart's labels of its points (a comparison's "A" and "B");
    `suffix` ends them (an attention layer's "executed" and "minimum" points, which share its name)."""

    style: str | None = None
    colour: str | None = None
    sized: bool = False
    select: str | None = None
    link: str | None = None
    hint: str = ""
    tag: str = ""
    suffix: str = ""


PLAIN_SERIES = SeriesView()


def series(sid: str, label: str, points: list[dict], omitted: Iterable[str] = (),
           view: SeriesView = PLAIN_SERIES) -> dict:
    """One chart series: points {n: name, x: FLOP/B, y: FLOP/s, s: share, a: achieved FLOP/s, tip},
    drawn as `view` says; `omitted`: rows of this series not drawn (no FLOPs)."""
    shape, default_colour, hollow = STYLES.get(view.style or sid, STYLES["modules"])
    return {"id": sid, "label": label, "shape": shape, "colour": view.colour or default_colour, "hollow": hollow,
            "sized": view.sized, "select": view.select, "link": view.link, "points": points,
            "omitted": list(omitted), "hint": view.hint, "tag": view.tag,
            "suffix": view.suffix}


def point(name: str, intensity: float | None, flops_rate: float | None, tip: list[list],
          share: float | None = None, achieved: float | None = None, **where: Any) -> dict | None:
    """A chart point, or None when it has no place on log axes (no FLOPs, no bytes)."""
    if not intensity or not flops_rate or intensity <= 0 or flops_rate <= 0:
        return None
    p = {"n": name, "x": intensity, "y": flops_rate, "tip": tip}
    if share is not None:
        p["s"] = share
    if achieved:
        p["a"] = achieved
    p.update(where)
    return p


def roof(label: str, peak: float, bandwidth: float, dashed: bool = False, colour: str = "#444444") -> dict:
    return {"label": label, "peak": peak, "bandwidth": bandwidth, "dashed": dashed, "colour": colour}


def placed(points: Iterable[tuple[str, dict | None]]) -> tuple[list[dict], list[str]]:
    drawn, omitted = [], []
    for name, p in points:
        (drawn.append(p) if p else omitted.append(name))
    return drawn, omitted

