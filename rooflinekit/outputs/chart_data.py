"""What a report puts on its roofline chart, as plain data (Series of points, one Chart): a
profile's step, modules, attention and ops, a sweep's points per context (drawn by
rooflinekit.outputs.plot; the HTML page and the trace views read the same data)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rooflinekit.core.codec import encode
from rooflinekit.core.errors import UserError
from rooflinekit.core.report import ROOT, Report
from rooflinekit.core.units import share as share_text
from rooflinekit.outputs.groups import fold
from rooflinekit.outputs.report_io import attention_figures
from rooflinekit.outputs.words import request_words

#: A module is "weights-dominated" when at least this share of its bytes are parameters.
WEIGHT_SHARE = 0.5
#: Ops labelled on an op-level chart: the most expensive ones.
LABELLED_OPS = 10
#: How the report's warning of CPU times placed on an accelerator's entry begins (analyses.measure).
CPU_ON_GPU = "measured on cpu but placed on "
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
