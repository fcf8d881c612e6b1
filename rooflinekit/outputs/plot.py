"""Roofline charts: a profile or sweep report drawn on its hardware's roofline (matplotlib, optional).

Log-log axes (x: FLOP/B, y: TFLOP/s); the memory slope and a flat compute ceiling per dtype (the
report's, plus fp8 dashed where the entry has it); the ridge point marked. A profile chart shows
the whole step, attention (all layers together, at its architecture minimum and as executed), and
the modules whose bytes are mostly weights, or every module at a chosen depth, or every op
(`ops=True`); marker area is proportional to each point's share of the step's time. Where the
report was measured, each measured point is drawn at its achieved FLOP/s and joined to its bound
on the roof above it; otherwise every point sits where the roofline puts it, min(peak, I * bandwidth).
A sweep draws one line per (kind, context) through the batches, one colour per context, and a
second panel of intensity against batch. No two labels overlap (rooflinekit.outputs.labels).
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

import click

from rooflinekit.core.errors import UserError
from rooflinekit.core.files import check_writable, write_atomic
from rooflinekit.core.report import Report
from rooflinekit.core.units import plain, ratio, si
from rooflinekit.outputs.chart_data import Chart, Series, chart_for
from rooflinekit.outputs.labels import Label, line_boxes, marker_boxes, place
from rooflinekit.stages.roofline import ridge

SUFFIXES = {".png": "png", ".svg": "svg"}
MISSING = "matplotlib is not installed: pip install 'rooflinekit[plot]'"
#: Marker area (points^2) of a point that takes the whole step's time; areas scale with the share.
AREA_FULL = 900.0
#: The smallest marker area drawn (a point with a tiny share stays visible).
AREA_MIN = 14.0
#: Marker area of points without a share (sweeps).
AREA_FIXED = 50.0

MARKERS = {"step": "o", "attention_min": "^", "attention_executed": "v", "module": "s", "op": "o"}
KIND_NAMES = {"step": "whole step", "attention_min": "attention (architecture minimum)",
              "attention_executed": "attention (as executed)", "module": "module", "op": "op"}
#: Profile charts: one colour per kind; ops by family.
KIND_COLOURS = {"step": "C0", "attention_min": "C1", "attention_executed": "C2", "module": "C4"}


# -- drawing ----------------------------------------------------------------------------------------------


def _matplotlib():
    """Import matplotlib lazily with the Agg backend (no display needed)."""

    try:
        import matplotlib
    except ImportError:
        raise UserError(MISSING) from None
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return Figure, FigureCanvasAgg


def check_target(path: str) -> str:
    """Fail before any work if `path` is not a .png/.svg we can write, or matplotlib is missing."""

    fmt = SUFFIXES.get(Path(path).suffix.lower())
    if fmt is None:
        raise UserError(f"cannot plot to {path}: give a .png or .svg file name")
    check_writable(path)
    _matplotlib()
    return fmt


def _ceilings(hw: dict) -> list[tuple[str, float, str]]:
    """(label, peak, linestyle): the report's dtype solid, fp8 dashed when the entry has it."""
    peaks = hw.get("peaks") or {}
    out = [(hw["dtype"], hw["peak_flops"], "-")]
    if "fp8" in peaks and hw["dtype"] != "fp8":
        out.append(("fp8", peaks["fp8"], "--"))
    return out


def roof(hw: dict, intensity: float) -> float:
    """The attainable FLOP/s at `intensity` on the report dtype's roofline."""
    return min(hw["peak_flops"], intensity * hw["bandwidth"])


def placed(chart: Chart) -> list[list[tuple[float, float]]]:
    """Per series, each point where the chart draws it (FLOP/s): its achieved FLOP/s where measured,
    else (I, min(peak, I * bandwidth)) on the report dtype's roofline."""
    hw = chart.hardware
    return [[(x, s.measured(i) if s.measured(i) else roof(hw, x)) for i, (x, _) in enumerate(s.points)]
            for s in chart.series]


def area(share: float | None) -> float:
    """Marker area (points^2) for a share of the step's time: proportional, never below AREA_MIN."""
    if share is None:
        return AREA_FIXED
    return max(AREA_MIN, AREA_FULL * share)


def _tick(value: float, _pos=None) -> str:
    """Axis ticks in plain numbers (0.001, 1, 1000, 100000), SI-prefixed from a million on."""
    value = float(value)
    return plain(value, 3) if 1e-4 <= abs(value) < 1e6 else si(value)


def _style(ax, title: str, xlabel: str, ylabel: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    ax.grid(True, which="minor", linewidth=0.2, alpha=0.3)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10))
        axis.set_major_formatter(FuncFormatter(_tick))
        axis.set_minor_formatter(NullFormatter())


def _hollow(s: Series) -> bool:
    """The whole step of a profile chart is a ring (what lies inside it shows), in the legend too."""
    return s.kind == "step" and bool(s.shares)


def _colour(s: Series) -> str:
    return s.colour or KIND_COLOURS.get(s.kind, "C7")


def _legend(fig, ax, chart: Chart, ceilings, bw: float, ridge_x: float) -> None:
    from matplotlib.lines import Line2D

    handles = []
    for label, top, style in ceilings:
        handles.append(Line2D([], [], color="black" if style == "-" else "grey", linestyle=style,
                              label=f"roofline {label}: {si(top, 'FLOP/s')}, {si(bw, 'B/s')}"))
    handles.append(Line2D([], [], marker="D", color="red", linestyle="", label=f"ridge {ratio(ridge_x)} FLOP/B"))
    families = list(dict.fromkeys((s.family, _colour(s)) for s in chart.series if s.family))
    if families:
        for family, colour in families:
            handles.append(Line2D([], [], color=colour, marker="o", markersize=6, label=family))
        for kind in dict.fromkeys(s.kind for s in chart.series):
            handles.append(Line2D([], [], color="grey", marker=MARKERS[kind], linestyle="", markersize=6,
                                  markeredgecolor="black", markeredgewidth=0.4, label=KIND_NAMES[kind]))
    else:
        for s in chart.series:
            hollow = _hollow(s)  # drawn as it is on the chart: the whole step a ring
            handles.append(Line2D([], [], color=_colour(s), marker=MARKERS[s.kind], linestyle="", markersize=7,
                                  markerfacecolor="none" if hollow else _colour(s),
                                  markeredgecolor=_colour(s) if hollow else "black",
                                  markeredgewidth=1.6 if hollow else 0.4, label=s.label))
        if any(s.shares for s in chart.series):
            for share in (0.1, 0.5):
                handles.append(Line2D([], [], color="lightgrey", marker="o", linestyle="",
                                      markersize=math.sqrt(area(share)), markeredgecolor="grey",
                                      label=f"marker area: {share:.0%} of the step's time"))
    if chart.measured:
        handles.append(Line2D([], [], color="grey", marker="o", linestyle="", markerfacecolor="none",
                              markersize=6, label="its roofline bound (hollow), joined to the measured point"))
    fig.legend(handles=handles, fontsize=7, loc="upper center", ncol=3, framealpha=0.9,
               bbox_to_anchor=(0.5, 0.0), labelspacing=1.0 if not families else 0.5)


def _roofline_panel(ax, chart: Chart, ceilings, x_lo: float, x_hi: float) -> tuple[list[Label], list, list]:
    """The roofline, the points (and their measured bounds); returns the labels to place, the
    markers (x, y, radius in points) and the polylines (xs, ys) they must keep clear of."""
    hw = chart.hardware
    bw = hw["bandwidth"]
    peak = ceilings[0][1]
    ridge_x = ridge(peak, bw)
    lines = []
    for _label, top, style in ceilings:
        r = ridge(top, bw)
        xs, ys = [x_lo, r, x_hi], [x_lo * bw / 1e12, top / 1e12, top / 1e12]
        ax.plot(xs, ys, style, color="black" if style == "-" else "grey", linewidth=1.6 if style == "-" else 1.1,
                zorder=2)
        lines.append((xs, ys))
    ax.scatter([ridge_x], [peak / 1e12], marker="D", s=40, color="red", zorder=5)
    labels = [Label(ridge_x, peak / 1e12, f"ridge {ratio(ridge_x)} FLOP/B", "red", 4.0, 7.5)]
    markers: list[tuple[float, float, float]] = [(ridge_x, peak / 1e12, 4.0)]
    for s, xy in zip(chart.series, placed(chart), strict=True):
        colour = _colour(s)
        x = [p[0] for p in xy]
        y = [p[1] / 1e12 for p in xy]
        areas = [area(s.share(i)) if s.shares else AREA_FIXED for i in range(len(x))]
        if s.joined:
            ax.plot(x, y, "-", color=colour, linewidth=1, alpha=0.7, zorder=3)
            lines.append((x, y))
        for i, (xv, yv) in enumerate(zip(x, y, strict=True)):
            if s.measured(i):
                top = roof(hw, xv) / 1e12
                ax.plot([xv, xv], [yv, top], ":", color=colour, linewidth=0.9, zorder=3)
                lines.append(([xv, xv], [yv, top]))
                ax.scatter([xv], [top], marker=MARKERS[s.kind], s=max(AREA_MIN, areas[i] * 0.35),
                           facecolors="none", edgecolors=colour, linewidths=0.8, zorder=4)
        for i, (xv, yv) in enumerate(zip(x, y, strict=True)):
            # the whole step is the sum of the rest: a ring, so that what lies inside shows; larger
            # markers lower
            hollow = _hollow(s)
            ax.scatter([xv], [yv], marker=MARKERS[s.kind], s=areas[i], zorder=4 + 1 / (1 + areas[i]),
                       facecolors="none" if hollow else colour, edgecolors=colour if hollow else "black",
                       linewidths=1.6 if hollow else 0.4, alpha=0.85)
        edge = (1.6 if _hollow(s) else 0.4) / 2  # a marker reaches half its edge past its area
        radii = [math.sqrt(a) / 2 + edge for a in areas]
        markers += [(xv, yv, r) for xv, yv, r in zip(x, y, radii, strict=True)]
        if s.joined:  # one label per series, at its last point
            labels.append(Label(x[-1], y[-1], s.tag or s.label, colour, radii[-1]))
        else:
            limit = len(s.points) if s.labelled is None else s.labelled
            labels += [Label(xv, yv, text, "black", r)
                       for (_, text), xv, yv, r in list(zip(s.points, x, y, radii, strict=True))[:limit]]
    return labels, markers, lines


def _order(labels: list[Label]) -> list[Label]:
    """The ridge first, then the biggest markers (the most time)."""
    return labels[:1] + sorted(labels[1:], key=lambda lb: -lb.radius)


def figure(chart: Chart):
    """The matplotlib Figure of `chart` (Agg canvas attached); `chart.left_out` gets the labels
    that found no free place."""
    Figure, FigureCanvasAgg = _matplotlib()
    hw = chart.hardware
    bw = hw["bandwidth"]
    ceilings = _ceilings(hw)
    ridge_x = ridge(ceilings[0][1], bw)
    xs = [x for s in chart.series for x, _ in s.points]
    x_lo = min(xs + [1.0]) / 4
    x_hi = max(xs + [ridge(p, bw) for _, p, _ in ceilings]) * 5
    ys = [y for row in placed(chart) for _, y in row]
    y_lo = min(ys + [x_lo * bw]) / 3
    by_batch = [s for s in chart.series if s.batches]
    fig = Figure(figsize=(15, 6.8) if by_batch else (11, 7.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2 if by_batch else 1, 1)
    _style(ax, chart.title, "arithmetic intensity (FLOP/B)",
           "achieved (measured) or attainable (TFLOP/s)" if chart.measured else "attainable (TFLOP/s)")
    labels, markers, lines = _roofline_panel(ax, chart, ceilings, x_lo, x_hi)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo / 1e12, max(p for _, p, _ in ceilings) * 3 / 1e12)
    ax.set_autoscale_on(False)
    bx = None
    if by_batch:
        bx = fig.add_subplot(1, 2, 2)
        _style(bx, "intensity against batch: weights amortise, attention does not move", "batch",
               "arithmetic intensity (FLOP/B)")
        batches = sorted({b for s in by_batch for b in s.batches})
        for s in by_batch:
            bx.plot(s.batches, [p[0] for p in s.points], "-", marker=MARKERS[s.kind], color=_colour(s),
                    markersize=5, linewidth=1, markeredgecolor="black", markeredgewidth=0.4)
        bx.axhline(ridge_x, color="red", linestyle="--", linewidth=1)
        bx.set_xlim(min(batches) / 1.5, max(batches) * 1.5)
        from matplotlib.ticker import FixedLocator, NullLocator

        bx.xaxis.set_major_locator(FixedLocator(batches))
        bx.xaxis.set_minor_locator(NullLocator())
        bx.set_ylim(min(xs + [ridge_x]) / 4, max(xs + [ridge_x]) * 4)
        bx.set_autoscale_on(False)
    _legend(fig, ax, chart, ceilings, bw, ridge_x)
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=0.61 / height, top=1 - 0.34 / height,
                        wspace=0.14 if by_batch else 0.2)
    taken: list = []
    keep_clear = marker_boxes(ax, markers) + [b for xs_, ys_ in lines for b in line_boxes(ax, xs_, ys_)]
    left = place(ax, _order(labels), keep_clear, taken)
    if bx is not None:
        marks, tags, keep_clear = [], [], []
        for s in by_batch:
            ys_ = [p[0] for p in s.points]
            marks += [(b, v, 3.0) for b, v in zip(s.batches, ys_, strict=True)]
            keep_clear += line_boxes(bx, s.batches, ys_)
            tags.append(Label(s.batches[-1], ys_[-1], s.tag or s.label, _colour(s), 3.0))
        lo, hi = bx.get_xlim()
        keep_clear += line_boxes(bx, [lo, hi], [ridge_x, ridge_x])
        tags.insert(0, Label(min(s.batches[0] for s in by_batch), ridge_x, f"ridge {ratio(ridge_x)} FLOP/B", "red",
                             0.0, 7.5))
        left += place(bx, tags, marker_boxes(bx, marks) + keep_clear, [])
    for k, text in enumerate(chart.warnings):
        ax.text(0.5, 0.985 - 0.04 * k, text, transform=ax.transAxes, ha="center", va="top", fontsize=8,
                color="firebrick", wrap=True, bbox={"facecolor": "white", "edgecolor": "firebrick", "alpha": 0.9})
    for k, note in enumerate(chart.notes):
        fig.text(0.5, 1.0 + 0.03 * k, note, ha="center", va="bottom", fontsize=7, color="dimgrey")
    chart.left_out = [lb.text for lb in left]
    return fig


def draw(chart: Chart, fmt: str = "png") -> bytes:
    """Render the chart (plus an intensity-vs-batch panel for sweeps); returns the file's bytes."""
    fig = figure(chart)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    return buf.getvalue()


def write_chart(chart: Chart, path: str) -> int:
    """Draw `chart` to `path` (.png/.svg) atomically; returns the number of points plotted.

    Points that could not be placed (no FLOPs or no bytes) and labels that found no free place
    are named on stderr.
    """
    fmt = check_target(path)
    write_atomic(path, draw(chart, fmt))
    if chart.skipped:
        n = len(chart.skipped)
        click.echo(f"{n} point{'s' if n > 1 else ''} not plotted (no FLOPs or no bytes): "
                   + ", ".join(chart.skipped), err=True)
    if chart.left_out:
        click.echo(f"{len(chart.left_out)} label(s) left off the chart (no free place): "
                   + ", ".join(chart.left_out), err=True)
    return chart.points


def write_plot(report: Report | dict, path: str, depth: int | None = None, ops: bool = False) -> int:
    """Chart a profile or sweep report to `path`; returns the number of points plotted."""
    return write_chart(chart_for(report, depth, ops), path)
