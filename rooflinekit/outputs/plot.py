"""Roofline charts: a profile or sweep report drawn on its hardware's roofline (matplotlib, optional).

Log-log axes (x: FLOP/B, y: attainable FLOP/s); the memory slope and a flat compute ceiling per
dtype (the report's, plus fp8 dashed where the entry has it); the ridge point marked. Points: the
whole step, attention (all layers together, at its architecture minimum and as executed), and the
modules whose bytes are mostly weights, or every module at a chosen depth. A sweep draws one line
per context so that the drift with batch shows. Each point sits where the roofline puts it:
min(peak, I * bandwidth); there is no timing here.
"""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from rooflinekit.core.codec import encode
from rooflinekit.core.errors import UserError
from rooflinekit.core.files import check_writable, write_atomic
from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.report import ROOT, Report
from rooflinekit.outputs.report_io import attention_figures

SUFFIXES = {".png": "png", ".svg": "svg"}
MISSING = "matplotlib is not installed: pip install 'rooflinekit[plot]'"
#: A module is "weights-dominated" when at least this share of its bytes are parameters.
WEIGHT_SHARE = 0.5

STYLE = {
    "step": {"marker": "o", "size": 60},
    "attention_min": {"marker": "^", "size": 55},
    "attention_executed": {"marker": "v", "size": 45},
    "module": {"marker": "s", "size": 30},
}


@dataclass
class Series:
    """Points of one kind, drawn with one style; `joined` draws a line through them (a sweep)."""

    label: str
    kind: str  # "step" | "attention_min" | "attention_executed" | "module"
    points: list[tuple[float, str]] = field(default_factory=list)  # (intensity FLOP/B, point label)
    joined: bool = False
    colour: str | None = None  # default: the next colour of the cycle
    batches: list[int] = field(default_factory=list)  # a sweep's batch per point (second panel)


@dataclass
class Chart:
    """Everything one figure needs: the roofline (from the report's hardware) and the series."""

    title: str
    hardware: dict
    series: list[Series]
    skipped: list[str] = field(default_factory=list)  # points with no intensity (no FLOPs or bytes)

    @property
    def points(self) -> int:
        return sum(len(s.points) for s in self.series)


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")

#: Two members of a layer group are merged into one point when their FLOPs and bytes agree this closely.
MERGE_TOLERANCE = 1e-9


def _ok(intensity) -> bool:
    """A point a log axis can place: a positive, finite intensity (a ratio of huge FLOPs to tiny
    bytes can overflow to inf)."""
    return isinstance(intensity, (int, float)) and 0 < intensity < float("inf")


def _same(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return all(abs(x - y) <= MERGE_TOLERANCE * max(abs(x), abs(y)) for x, y in zip(a, b, strict=True))


def _runs(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (the first three runs, then '..')."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    return ",".join(text[:3]) + (",.." if len(text) > 3 else "")


def _class_label(key: str, members: list[str], whole: bool) -> str:
    """The label of one merged class: 'layers.*.mlp (x32)' for a whole group, else 'layers.0-2.mlp (x3)'."""
    n = len(members)
    count = f" (x{n})" if n > 1 else ""
    if n == 1:
        return members[0]
    if whole:
        return key + count
    positions = [[int(m.group()) for m in _INDEX.finditer(name)] for name in members]
    parts = iter(_runs([p[i] for p in positions]) for i in range(len(positions[0])))
    return re.sub(r"(?<=\.)\*(?=\.|$)", lambda _m: next(parts), key) + count


def _merge(members: dict[str, tuple[float, float]]) -> list[tuple[str, float, float]]:
    """(label, flops, bytes) per point: repeated layers merged where each has the same FLOPs and bytes.

    Members are grouped by name with their layer indices starred (layers.*.mlp); a group whose
    members differ (DeepSeek's dense first layers and MoE layers) is split into classes of equal
    members, each labelled with its index ranges (layers.0-2.mlp, layers.3-60.mlp), so that every
    point is the intensity of real layers.
    """
    groups: dict[str, list[str]] = {}
    for name in members:
        groups.setdefault(layer_pattern(name), []).append(name)
    out = []
    for key, names in groups.items():
        classes: list[list[str]] = []
        for name in names:
            home = next((c for c in classes if _same(members[c[0]], members[name])), None)
            if home is None:
                classes.append([name])
            else:
                home.append(name)
        for c in classes:
            flops = sum(members[m][0] for m in c)
            nbytes = sum(members[m][1] for m in c)
            out.append((_class_label(key, c, len(classes) == 1), flops, nbytes))
    return out


def module_points(report: Report, depth: int | None = None) -> tuple[list[tuple[float, str]], list[str]]:
    """(intensity, name) per module: weights-dominated ones at the report's depth, or all at `depth`.

    Repeated layers with equal FLOPs and bytes are merged into one point (layers.*.mlp (x32)):
    their intensity is the same, one point says it. Returns (points, labels not plotted).
    """
    members: dict[str, tuple[float, float]] = {}
    if depth is None:
        for m in report.modules:
            if not m.bytes or (m.weight_bytes or 0) < WEIGHT_SHARE * m.bytes:
                continue
            f, b = members.get(m.name, (0.0, 0.0))
            members[m.name] = (f + (m.flops or 0.0), b + m.bytes)
    else:
        if not report.ops:
            raise UserError("--plot-depth needs the report's ops (a profile report written with -f json)")
        for op in report.ops:
            name = op.module
            if name != ROOT:
                name = ".".join(name.split(".")[: max(1, depth)])
            f, b = members.get(name, (0.0, 0.0))
            members[name] = (f + op.flops, b + op.bytes)
    points, skipped = [], []
    for label, flops, nbytes in _merge(members):
        if flops > 0 and nbytes > 0 and _ok(flops / nbytes):
            points.append((flops / nbytes, label))
        else:
            skipped.append(label)
    return points, skipped


def profile_chart(report: Report, depth: int | None = None) -> Chart:
    """The chart of one profile report."""
    w, model, t = report.workload, report.model, report.totals
    series = []
    skipped: list[str] = []
    if _ok(t.intensity):
        series.append(Series("whole step", "step", [(t.intensity, "step")]))
    else:
        skipped.append("whole step")
    att = attention_figures(report)
    if att["recognised"]:
        for kind, key, label, short in (
            ("attention_min", "intensity_min", "attention (architecture minimum)", "attention min"),
            ("attention_executed", "intensity_executed", "attention (as executed)", "attention exec"),
        ):
            if _ok(att[key]):
                series.append(Series(f"{label}, {att['recognised']} layers", kind, [(att[key], short)]))
            else:
                skipped.append(label)
    mods, skip = module_points(report, depth)
    skipped += skip
    if mods:
        what = "weights-dominated modules" if depth is None else f"modules at depth {depth}"
        series.append(Series(what, "module", mods))
    title = (f"{report.hardware.name}: {model.name or '?'}, {w.phase}, batch {w.batch}, "
             f"context {w.context}, {w.dtype}")
    return Chart(title, encode(report.hardware), series, skipped)


def sweep_series(sweep: dict, prefix: str = "", kinds: tuple[str, ...] = ("step", "attention_min", "attention_executed"),
                 colour: str | None = None, skipped: list[str] | None = None) -> list[Series]:
    """One line per (kind, context) through the sweep's batches; each point labelled B=...

    Points with no intensity (no FLOPs or no bytes) are left out and, given a `skipped` list,
    named there.
    """
    names = {"step": "step", "attention_min": "attention min", "attention_executed": "attention exec"}
    out = []
    for context in sweep["workload"]["contexts"]:
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
                out.append(Series(f"{prefix}{names[kind]}, S={context}", kind, pts, joined=len(pts) > 1,
                                  colour=colour, batches=batches))
    return out


def sweep_chart(sweep: dict) -> Chart:
    """The chart of one sweep report."""
    w, model = sweep["workload"], sweep.get("model", {})
    title = (f"{sweep['hardware']['name']}: {model.get('name', '?')}, {w['phase']} sweep, "
             f"batch {','.join(map(str, w['batches']))}, {w['dtype']}")
    skipped: list[str] = []
    series = sweep_series(sweep, skipped=skipped)
    return Chart(title, sweep["hardware"], series, skipped)


def chart_for(report: Report | dict, depth: int | None = None) -> Chart:
    """The chart of a profile report (a Report, or its JSON dict) or a sweep report's dict."""
    if isinstance(report, dict) and report.get("kind") != "sweep":
        report = Report.from_dict(report)
    if not isinstance(report, Report):
        if depth is not None:
            raise UserError("--plot-depth applies to a profile report, not a sweep")
        return sweep_chart(report)
    return profile_chart(report, depth)


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


def _labels(s: Series, ys: list[float]) -> list[tuple[float, float, str]]:
    """(x, y, text) to annotate: a joined series labels its two ends; points within 2% share a label."""
    points = list(zip(s.points, ys, strict=True))
    if s.joined and len(points) > 2:
        points = [points[0], points[-1]]
    out: list[tuple[float, float, str]] = []
    for (x, text), y in points:
        if not text:
            continue
        if out and abs(out[-1][0] - x) <= 0.02 * x:
            x0, y0, t0 = out[-1]
            sep = ".." if s.joined else ", "
            out[-1] = (x0, y0, f"{t0}{sep}{text.split('=', 1)[-1]}")
        else:
            out.append((x, y, text))
    return out


def _style(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)


def placed(chart: Chart) -> list[list[tuple[float, float]]]:
    """Per series, each point where the chart draws it: (I, min(peak, I * bandwidth)) on the
    report dtype's roofline."""
    hw = chart.hardware
    peak, bw = hw["peak_flops"], hw["bandwidth"]
    return [[(x, min(peak, x * bw)) for x, _ in s.points] for s in chart.series]


def draw(chart: Chart, fmt: str = "png") -> bytes:
    """Render the chart (plus an intensity-vs-batch panel for sweeps); returns the file's bytes."""
    Figure, FigureCanvasAgg = _matplotlib()
    hw = chart.hardware
    bw = hw["bandwidth"]
    ceilings = _ceilings(hw)
    ridge, peak = ceilings[0][1] / bw, ceilings[0][1]
    xs = [x for s in chart.series for x, _ in s.points]
    x_lo = min(xs + [1.0]) / 3
    x_hi = max(xs + [p / bw for _, p, _ in ceilings]) * 4
    by_batch = [s for s in chart.series if s.batches]
    fig = Figure(figsize=(15, 6.5) if by_batch else (11, 6.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2 if by_batch else 1, 1)
    _style(ax, chart.title, "arithmetic intensity (FLOP/B)", "attainable (FLOP/s)")
    for label, top, style in ceilings:
        r = top / bw
        ax.plot([x_lo, r, x_hi], [x_lo * bw, top, top], style, color="black" if style == "-" else "grey",
                linewidth=1.6 if style == "-" else 1.2,
                label=f"roofline {label}: {top / 1e12:.0f} TFLOP/s, {bw / 1e12:.3g} TB/s")
    ax.scatter([ridge], [peak], marker="D", s=50, color="red", zorder=5,
               label=f"ridge {ridge:.1f} FLOP/B ({ceilings[0][0]})")
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak), textcoords="offset points", xytext=(6, -14),
                fontsize=8, color="red")
    cmap = [f"C{i}" for i in range(10)]
    colours = [s.colour or cmap[i % len(cmap)] for i, s in enumerate(chart.series)]
    for s, colour, xy in zip(chart.series, colours, placed(chart), strict=True):
        st = STYLE[s.kind]
        x = [p[0] for p in xy]
        y = [p[1] for p in xy]
        if s.joined:
            ax.plot(x, y, "-", color=colour, linewidth=1, alpha=0.7)
        ax.scatter(x, y, marker=st["marker"], s=st["size"], color=colour, label=s.label, zorder=4,
                   edgecolors="black", linewidths=0.4)
        for xv, yv, text in _labels(s, y):
            ax.annotate(text, (xv, yv), textcoords="offset points", xytext=(5, -10), fontsize=7)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(x_lo * bw, max(p for _, p, _ in ceilings) * 3)
    if by_batch:
        bx = fig.add_subplot(1, 2, 2)
        _style(bx, "intensity against batch: weights amortise, attention does not move", "batch",
               "arithmetic intensity (FLOP/B)")
        for s, colour in zip(chart.series, colours, strict=True):
            if s.batches:
                st = STYLE[s.kind]
                bx.plot(s.batches, [p[0] for p in s.points], "-", marker=st["marker"], color=colour,
                        markersize=5, linewidth=1, markeredgecolor="black", markeredgewidth=0.4)
        bx.axhline(ridge, color="red", linestyle="--", linewidth=1)
        bx.annotate(f"ridge {ridge:.0f} FLOP/B", (min(b for s in by_batch for b in s.batches), ridge),
                    textcoords="offset points", xytext=(2, 4), fontsize=8, color="red")
        bx.set_ylim(x_lo, max(xs + [ridge]) * 3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="upper center", ncol=3, framealpha=0.9,
               bbox_to_anchor=(0.5, 0.0))
    # Fixed margins (what tight_layout chose for these charts) rather than tight_layout itself: it
    # lays every label out once more, a third of the drawing time; the saved bbox is tight anyway.
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=0.61 / height, top=1 - 0.34 / height,
                        wspace=0.12 if by_batch else 0.2)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    return buf.getvalue()


def write_chart(chart: Chart, path: str) -> int:
    """Draw `chart` to `path` (.png/.svg) atomically; returns the number of points plotted.

    Points that could not be placed (no FLOPs or no bytes) are named on stderr.
    """


    fmt = check_target(path)
    write_atomic(path, draw(chart, fmt))
    if chart.skipped:
        n = len(chart.skipped)
        click.echo(f"{n} point{'s' if n > 1 else ''} not plotted (no FLOPs or no bytes): "
                   + ", ".join(chart.skipped), err=True)
    return chart.points


def write_plot(report: Report | dict, path: str, depth: int | None = None) -> int:
    """Chart a profile or sweep report to `path`; returns the number of points plotted."""
    return write_chart(chart_for(report, depth), path)
