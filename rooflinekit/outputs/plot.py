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
from dataclasses import dataclass, field
from pathlib import Path

import click

from rooflinekit.core.codec import encode
from rooflinekit.core.errors import UserError
from rooflinekit.core.files import check_writable, write_atomic
from rooflinekit.core.report import ROOT, Report
from rooflinekit.core.units import plain, ratio, si
from rooflinekit.core.units import share as share_text
from rooflinekit.outputs.groups import fold
from rooflinekit.outputs.labels import Label, line_boxes, marker_boxes, place
from rooflinekit.outputs.report_io import attention_figures
from rooflinekit.outputs.words import request_words
from rooflinekit.stages.roofline import ridge

SUFFIXES = {".png": "png", ".svg": "svg"}
MISSING = "matplotlib is not installed: pip install 'rooflinekit[plot]'"
#: A module is "weights-dominated" when at least this share of its bytes are parameters.
WEIGHT_SHARE = 0.5
#: Marker area (points^2) of a point that takes the whole step's time; areas scale with the share.
AREA_FULL = 900.0
#: The smallest marker area drawn (a point with a tiny share stays visible).
AREA_MIN = 14.0
#: Marker area of points without a share (sweeps).
AREA_FIXED = 50.0
#: Ops labelled on an op-level chart: the most expensive ones.
LABELLED_OPS = 10
#: How the report's warning of CPU times placed on an accelerator's entry begins (analyses.measure).
CPU_ON_GPU = "measured on cpu but placed on "

MARKERS = {"step": "o", "attention_min": "^", "attention_executed": "v", "module": "s", "op": "o"}
KIND_NAMES = {"step": "whole step", "attention_min": "attention (architecture minimum)",
              "attention_executed": "attention (as executed)", "module": "module", "op": "op"}
#: Profile charts: one colour per kind; ops by family.
KIND_COLOURS = {"step": "C0", "attention_min": "C1", "attention_executed": "C2", "module": "C4"}
OP_FAMILIES = (("matmul", ("mm", "matmul", "linear", "einsum", "conv"), "C4"),
               ("attention", ("attention", "attn"), "C2"),
               ("other op with FLOPs", ("",), "C7"))
#: Sweeps: one colour per context.
CONTEXT_COLOURS = ("C0", "C3", "C2", "C1", "C4", "C5", "C6", "C8", "C9", "C7")


@dataclass
class Series:
    """Points of one kind, drawn with one style; `joined` draws a line through them (a sweep).

    `shares` (share of the step's time, per point) sets marker areas; `achieved` (measured
    FLOP/s, per point, None where not measured) draws a point under its roof.
    """

    label: str
    kind: str  # "step" | "attention_min" | "attention_executed" | "module" | "op"
    points: list[tuple[float, str]] = field(default_factory=list)  # (intensity FLOP/B, point label)
    joined: bool = False
    colour: str | None = None  # default: the kind's colour
    batches: list[int] = field(default_factory=list)  # a sweep's batch per point (second panel)
    shares: list[float | None] = field(default_factory=list)
    achieved: list[float | None] = field(default_factory=list)
    family: str | None = None  # what the colour stands for (a sweep's context, a study's configuration)
    tag: str | None = None  # the one label of a joined series (default: label)
    labelled: int | None = None  # label only the first N points (None: all)

    def share(self, i: int) -> float | None:
        return self.shares[i] if i < len(self.shares) else None

    def measured(self, i: int) -> float | None:
        return self.achieved[i] if i < len(self.achieved) else None


@dataclass
class Chart:
    """Everything one figure needs: the roofline (from the report's hardware) and the series."""

    title: str
    hardware: dict
    series: list[Series]
    skipped: list[str] = field(default_factory=list)  # points with no intensity (no FLOPs or bytes)
    notes: list[str] = field(default_factory=list)  # printed under the chart
    warnings: list[str] = field(default_factory=list)  # printed in red over the plot
    left_out: list[str] = field(default_factory=list)  # labels with no free place (set by figure())

    @property
    def points(self) -> int:
        return sum(len(s.points) for s in self.series)

    @property
    def measured(self) -> bool:
        return any(a is not None for s in self.series for a in s.achieved)


def _ok(intensity) -> bool:
    """A point a log axis can place: a positive, finite intensity (a ratio of huge FLOPs to tiny
    bytes can overflow to inf)."""
    return isinstance(intensity, (int, float)) and 0 < intensity < float("inf")


# -- what a profile report puts on its chart ---------------------------------------------------------


@dataclass
class _Figures:
    """One module (or op) to place: counts, share of the step's time, measured time (None: not timed)."""

    name: str
    flops: float
    bytes: float
    share: float = 0.0
    time_s: float | None = None


def _folded(members: list[_Figures]) -> list[tuple[str, _Figures]]:
    """Repeated layers with equal FLOPs and bytes folded into one point (rooflinekit.outputs.groups)."""
    out = []
    for g in fold(members, lambda f: f.name, lambda f: (f.flops, f.bytes)):
        times = [m.time_s for m in g.members]
        out.append((g.label, _Figures(g.label, sum(m.flops for m in g.members), sum(m.bytes for m in g.members),
                                      sum(m.share for m in g.members),
                                      None if any(t is None for t in times) else sum(times))))
    return out


def _module_figures(report: Report, depth: int | None) -> list[_Figures]:
    members: dict[str, _Figures] = {}
    measured = getattr(report, "totals", None) is not None and report.totals.measured is not None
    step = report.totals.measured.step_time_s if measured else None
    if depth is None:
        for m in report.modules:
            if not m.bytes or (m.weight_bytes or 0) < WEIGHT_SHARE * m.bytes:
                continue
            me = getattr(m, "measured", None)
            t = me.time_s if me is not None else None
            share = t / step if (step and t is not None) else (getattr(m, "time_share", 0.0) or 0.0)
            f = members.setdefault(m.name, _Figures(m.name, 0.0, 0.0, 0.0, 0.0 if t is not None else None))
            f.flops += m.flops or 0.0
            f.bytes += m.bytes
            f.share += share
            if f.time_s is not None and t is not None:
                f.time_s += t
        return list(members.values())
    if not report.ops:
        raise UserError("--plot-depth needs the report's ops (a profile report written with -f json)")
    predicted = report.totals.predicted_step_s or 0.0
    for op in report.ops:
        name = op.module
        if name != ROOT:
            name = ".".join(name.split(".")[: max(1, depth)])
        t = op.measured.time_s if op.measured is not None else None
        f = members.setdefault(name, _Figures(name, 0.0, 0.0, 0.0, 0.0 if measured else None))
        f.flops += op.flops
        f.bytes += op.bytes
        f.share += (t / step if step and t is not None else op.time_bound_s / predicted if predicted else 0.0)
        if f.time_s is not None:
            f.time_s = f.time_s + t if t is not None else None
    return list(members.values())


def module_points(report: Report, depth: int | None = None) -> tuple[list[tuple[float, str]], list[str]]:
    """(intensity, name) per module: weights-dominated ones at the report's depth, or all at `depth`.

    Repeated layers with equal FLOPs and bytes are merged into one point (layers.*.mlp (x32)):
    their intensity is the same, one point says it. Returns (points, labels not plotted).
    """
    series, skipped = _module_series(report, depth)
    return (series.points if series else []), skipped


def _module_series(report: Report, depth: int | None) -> tuple[Series | None, list[str]]:
    points, shares, achieved, skipped = [], [], [], []
    for label, f in _folded(_module_figures(report, depth)):
        if f.flops > 0 and f.bytes > 0 and _ok(f.flops / f.bytes):
            points.append((f.flops / f.bytes, label))
            shares.append(f.share)
            achieved.append(f.flops / f.time_s if f.time_s else None)
        else:
            skipped.append(label)
    if not points:
        return None, skipped
    what = "weights-dominated modules" if depth is None else f"modules at depth {depth}"
    return Series(what, "module", points, shares=shares, achieved=achieved), skipped


def op_family(name: str) -> int:
    """The index in OP_FAMILIES of an op name: a matmul, an attention call, or any other."""
    low = name.lower()
    for i, (_, needles, _) in enumerate(OP_FAMILIES):
        if any(n in low for n in needles):
            return i
    return len(OP_FAMILIES) - 1


def op_series(report: Report) -> tuple[list[Series], list[str], list[str]]:
    """Every op with FLOPs and bytes, equal ops of repeated layers folded ('aten.mm in
    layers.*.mlp.up_proj (x28)'); one series per op family, the most expensive ops labelled.
    Returns (series, ops not plotted by name, notes)."""
    if not report.ops:
        raise UserError("--plot-ops needs the report's ops (a profile report written with -f json)")
    step = report.totals.measured.step_time_s if report.totals.measured else None
    predicted = report.totals.predicted_step_s or 0.0
    figures = []
    for op in report.ops:
        t = op.measured.time_s if op.measured is not None else None
        share = t / step if step and t is not None else (op.time_bound_s / predicted if predicted else 0.0)
        figures.append(_Figures(f"{op.name} in {op.module}", op.flops, op.bytes, share, t))
    placed_, unplaced = [], {}
    unplaced_share = 0.0
    for g in fold(figures, lambda f: f.name, lambda f: (f.flops, f.bytes)):
        flops = sum(m.flops for m in g.members)
        nbytes = sum(m.bytes for m in g.members)
        share = sum(m.share for m in g.members)
        times = [m.time_s for m in g.members]
        if flops > 0 and nbytes > 0 and _ok(flops / nbytes):
            placed_.append((g.label, flops / nbytes, share,
                            flops / sum(times) if all(t is not None for t in times) and sum(times) else None))
        else:
            op = g.label.split(" in ", 1)[0]
            unplaced[op] = unplaced.get(op, 0) + g.count
            unplaced_share += share
    placed_.sort(key=lambda p: -p[2])
    labelled = {p[0] for p in placed_[:LABELLED_OPS]}
    series = []
    for i, (family, _, colour) in enumerate(OP_FAMILIES):
        rows = [p for p in placed_ if op_family(p[0].split(" in ", 1)[0]) == i]
        rows.sort(key=lambda p: (p[0] not in labelled, -p[2]))
        if rows:
            series.append(Series(f"ops: {family}", "op", [(p[1], p[0]) for p in rows], colour=colour,
                                 shares=[p[2] for p in rows], achieved=[p[3] for p in rows],
                                 labelled=sum(1 for p in rows if p[0] in labelled)))
    skipped = [f"{name} (x{n})" if n > 1 else name for name, n in sorted(unplaced.items(), key=lambda kv: -kv[1])]
    notes = []
    if unplaced:
        notes.append(f"{sum(unplaced.values())} ops without FLOPs not plotted ({share_text(unplaced_share)} of the "
                     f"step's time): {', '.join(skipped[:6])}{', ...' if len(skipped) > 6 else ''}")
    return series, skipped, notes


def _attention_share(report: Report, rows, minimum: bool) -> tuple[float, float | None]:
    """(share of the step's time, achieved FLOP/s or None) of the recognised attention layers together."""
    step = report.totals.measured.step_time_s if report.totals.measured else None
    predicted = report.totals.predicted_step_s or 0.0
    bound_of = {op.index: op.time_bound_s for op in report.ops}
    if minimum:
        t = sum(a.placement_min.time_bound_s for a in rows if a.placement_min)
        return (t / predicted if predicted else 0.0), None
    times = [a.measured.time_s if a.measured is not None else None for a in rows]
    if step and rows and all(t is not None for t in times) and sum(times):
        return sum(times) / step, sum(a.flops_executed for a in rows) / sum(times)
    bound = sum(sum(bound_of.get(i, 0.0) for i in a.op_indices) or a.placement_executed.time_bound_s
                for a in rows)
    return (bound / predicted if predicted else 0.0), None


def profile_chart(report: Report, depth: int | None = None, ops: bool = False) -> Chart:
    """The chart of one profile report: its modules (default, or at `depth`) or its ops."""
    w, model, t = report.workload, report.model, report.totals
    series = []
    skipped: list[str] = []
    notes: list[str] = []
    if _ok(t.intensity):
        achieved = t.measured.achieved_flops if t.measured else None
        series.append(Series("whole step", "step", [(t.intensity, "step")], shares=[1.0], achieved=[achieved]))
    else:
        skipped.append("whole step")
    att = attention_figures(report)
    if att["recognised"]:
        rows = [a for a in report.attention if a.recognised]
        for kind, key, label, short, minimum in (
            ("attention_min", "intensity_min", "attention (architecture minimum)", "attention min", True),
            ("attention_executed", "intensity_executed", "attention (as executed)", "attention exec", False),
        ):
            if _ok(att[key]):
                share, achieved = _attention_share(report, rows, minimum)
                series.append(Series(f"{label}, {att['recognised']} layers", kind, [(att[key], short)],
                                     shares=[share], achieved=[achieved]))
            else:
                skipped.append(label)
    if ops:
        more, skip, notes = op_series(report)
        series += more
        skipped += skip
    else:
        mods, skip = _module_series(report, depth)
        skipped += skip
        if mods:
            series.append(mods)
    words = request_words(w.dtype, report.deployment, w.q_len if w.phase == "decode" else None, w.options)
    title = (f"{report.hardware.name}: {model.name or '?'}, {w.phase}, batch {w.batch}, "
             f"context {w.context}{words}" + (f", measured on {t.measured.device}" if t.measured else ""))
    warning = next((x for x in report.warnings if x.startswith(CPU_ON_GPU)), None)
    chart = Chart(title, encode(report.hardware), series, skipped, notes)
    if warning:
        chart.warnings.append(f"warning: CPU times against {report.hardware.name}'s roofs: the measured points "
                              "sit far under them; calibrate this CPU (rooflinekit calibrate --device cpu) "
                              "and pass -H \"CPU calibrated\"")
    return chart


# -- what a sweep report puts on its chart -------------------------------------------------------------


def sweep_series(sweep: dict, prefix: str = "", kinds: tuple[str, ...] = ("step", "attention_min", "attention_executed"),
                 colour: str | None = None, skipped: list[str] | None = None) -> list[Series]:
    """One line per (kind, context) through the sweep's batches, one colour per context (or
    `colour` for all); each point labelled B=...

    Points with no intensity (no FLOPs or no bytes) are left out and, given a `skipped` list,
    named there.
    """
    names = {"step": "step", "attention_min": "attention min", "attention_executed": "attention exec"}
    out = []
    for i, context in enumerate(sweep["workload"]["contexts"]):
        rows = sorted((p for p in sweep["points"] if p["context"] == context), key=lambda p: p["batch"])
        if not rows:
            continue
        for kind in kinds:
            pts, batches = [], []
            for r in rows:
                if kind != "step" and not r["attention"].get("recognised"):
                    continue  # no attention recognised: nothing to place
                value = r["intensity"] if kind == "step" else r["attention"][
                    "intensity_min" if kind == "attention_min" else "intensity_executed"]
                if _ok(value):
                    pts.append((value, f"B={r['batch']}"))
                    batches.append(r["batch"])
                elif skipped is not None:
                    skipped.append(f"{prefix}{names[kind]}, S={context}, B={r['batch']}")
            if pts:
                one = len(sweep["workload"]["contexts"]) == 1  # the context is in the title, not on every label
                out.append(Series(f"{prefix}{names[kind]}, S={context}", kind, pts, joined=len(pts) > 1,
                                  colour=colour or CONTEXT_COLOURS[i % len(CONTEXT_COLOURS)], batches=batches,
                                  family=(prefix.rstrip(": ") or f"S={context}") if one else f"{prefix}S={context}",
                                  tag=f"{prefix}{names[kind]}" + ("" if one else f", S={context}")))
    return out


def sweep_chart(sweep: dict) -> Chart:
    """The chart of one sweep report."""
    w, model = sweep["workload"], sweep.get("model", {})
    title = (f"{sweep['hardware']['name']}: {model.get('name', '?')}, {w['phase']} sweep, "
             f"batch {','.join(map(str, w['batches']))}" + (f", context {w['contexts'][0]}" if len(w["contexts"]) == 1
                                                          else "")
             + request_words(w["dtype"], sweep.get("deployment"), w.get("q_len"), w.get("options")))
    skipped: list[str] = []
    series = sweep_series(sweep, skipped=skipped)
    return Chart(title, sweep["hardware"], series, skipped)


def chart_for(report: Report | dict, depth: int | None = None, ops: bool = False) -> Chart:
    """The chart of a profile report (a Report, or its JSON dict) or a sweep report's dict."""
    if isinstance(report, dict) and report.get("kind") != "sweep":
        report = Report.from_dict(report)
    if not isinstance(report, Report):
        if depth is not None or ops:
            raise UserError(f"{'--plot-depth' if depth is not None else '--plot-ops'} applies to a profile "
                            "report, not a sweep")
        return sweep_chart(report)
    if depth is not None and ops:
        raise UserError("--plot-depth and --plot-ops are two kinds of chart: give one")
    return profile_chart(report, depth, ops)


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
