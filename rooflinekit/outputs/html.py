"""The HTML report: one self-contained file (inline script and styles, no network) with an
interactive roofline and sortable tables, for a profile, a sweep, a comparison or an advice report.

Python decides what is shown and gathers the raw numbers into one JSON payload; the inline script
(outputs/html_assets/report.js) formats and draws them, so every number on the page goes through
one formatter. A Content-Security-Policy in the page forbids every fetch: nothing can reach the
network, by construction.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rooflinekit.core.report import AttentionRow, Report
from rooflinekit.core.sweep_report import SweepPoint, SweepReport
from rooflinekit.core.units import seconds
from rooflinekit.core.version import __version__
from rooflinekit.outputs.groups import Group, fold
from rooflinekit.outputs.words import deployment_words, options_words, request_words

ASSETS = Path(__file__).resolve().parent / "html_assets"
#: Ops shown before "show all" (all of them are in the page, up to MAX_OPS).
TOP_OPS = 50
#: The most ops a page carries (the most expensive by time bound); the caption says when cut.
MAX_OPS = 20_000
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

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


# -- values: raw numbers with how the page formats them ------------------------------------------


def _clean(value: Any) -> Any:
    """A JSON-safe copy: non-finite floats become None, floats keep 6 significant digits."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
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


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _attainable(peak: float, bandwidth: float, intensity: float | None) -> float | None:
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


def _placed(points: Iterable[tuple[str, dict | None]]) -> tuple[list[dict], list[str]]:
    drawn, omitted = [], []
    for name, p in points:
        (drawn.append(p) if p else omitted.append(name))
    return drawn, omitted


# -- profile ----------------------------------------------------------------------------------------


def _op_time(report: Report, row: AttentionRow) -> float:
    """An attention row's time as the predicted step counts it: the sum of its ops' bounds."""
    if row.op_indices and len(report.ops) > max(row.op_indices):
        return sum(report.ops[i].time_bound_s for i in row.op_indices)
    return row.placement_executed.time_bound_s


def _measured_tip(m) -> list[list]:
    if m is None or m.time_s is None:
        return []
    return [item("measured time", m.time_s, "time"), item("achieved", m.achieved_flops, "si", "FLOP/s"),
            item("MFU", m.mfu, "pct"), item("MBU", m.mbu, "pct")]


def _module_points(report: Report, group: bool = True) -> dict:
    step = report.totals.predicted_step_s
    rows = []
    groups = _module_groups(report, group)
    for g in groups:
        members, m = g.members, g.members[0]
        share = sum(x.time_share for x in members)
        tip = [item("FLOPs", sum(x.flops for x in members), "si", "FLOP"),
               item("bytes", sum(x.bytes for x in members), "si", "B"),
               item("weights", sum(x.weight_bytes for x in members), "si", "B"),
               item("intensity", m.intensity, "num", "FLOP/B"),
               item("bound", m.bound), item("attainable", m.attainable_flops, "si", "FLOP/s"),
               item("time bound (sum of its ops)", sum(x.time_bound_ops_s for x in members), "time"),
               item("share of predicted step", share, "pct"),
               *(_measured_tip(m.measured) if g.count == 1 else [])]
        achieved = _folded_measured(members)[1] if m.measured else None
        rows.append((g.label, point(g.label, m.intensity, m.attainable_flops, tip, share, achieved)))
    drawn, omitted = _placed(rows)
    return series("modules", "modules", drawn, omitted, SeriesView(
        sized=True, hint=f"one point per module row; area proportional to its share of the predicted step "
                         f"({len(groups)} rows)" if step else ""))


def _mixer_kind(report: Report) -> str:
    recurrent = any(getattr(a, "cache_bytes_per_sequence", None) for a in report.attention)
    return "attention / mixer layers" if recurrent else "attention layers"


def _attention_points(report: Report) -> tuple[dict, dict]:
    step = report.totals.predicted_step_s
    executed, minimum = [], []
    for a in report.attention:
        pe, pm = a.placement_executed, a.placement_min
        share = _ratio(_op_time(report, a), step)
        common = [item("architecture", a.arch + (f"/{a.mode}" if a.mode else ""))]
        tip = [*common, item("FLOPs executed", a.flops_executed, "si", "FLOP"),
               item("bytes executed", a.bytes_executed, "si", "B"),
               item("intensity executed", a.intensity_executed, "num", "FLOP/B"), item("bound", pe.bound),
               item("attainable", pe.attainable_flops, "si", "FLOP/s"),
               item("time bound (sum of its ops)", _op_time(report, a), "time"),
               item("share of predicted step", share, "pct"),
               item("KV executed / minimum", a.amplification, "num", "x"), *_measured_tip(a.measured)]
        achieved = a.measured.achieved_flops if a.measured else None
        executed.append((a.module, point(a.module, pe.intensity, pe.attainable_flops, tip, share, achieved)))
        if pm is not None:
            tip_min = [*common, item("FLOPs (model)", pm.flops, "si", "FLOP"),
                       item("bytes (architecture minimum)", pm.bytes, "si", "B"),
                       item("intensity minimum", pm.intensity, "num", "FLOP/B"), item("bound", pm.bound),
                       item("attainable", pm.attainable_flops, "si", "FLOP/s"),
                       item("time bound", pm.time_bound_s, "time"),
                       item("share of predicted step", _ratio(pm.time_bound_s, step), "pct")]
            minimum.append((a.module, point(a.module, pm.intensity, pm.attainable_flops, tip_min,
                                            _ratio(pm.time_bound_s, step))))
    kind = _mixer_kind(report)
    drawn, omitted = _placed(executed)
    s_exec = series("attention", f"{kind}, as executed", drawn, omitted,
                    SeriesView(sized=True, hint="one point per layer row, at the bytes its code moved",
                               suffix="executed"))
    drawn_min, omitted_min = _placed(minimum)
    s_min = series("attention_min", f"{kind}, architecture minimum", drawn_min, omitted_min,
                   SeriesView(sized=True, link="attention", suffix="minimum",
                              hint="each recognised layer at its architecture's minimum bytes (cache read once), "
                                   "joined to its executed point"))
    return s_exec, s_min


def _step_points(report: Report) -> list[dict]:
    t, hw = report.totals, report.hardware
    m = t.measured
    tip = [item("whole step", report.model.name or "model"), item("FLOPs executed", t.flops, "si", "FLOP"),
           item("FLOPs model", t.flops_model, "si", "FLOP"), item("bytes", t.bytes, "si", "B"),
           item("intensity", t.intensity, "num", "FLOP/B"), item("bound", t.bound),
           item("attainable", t.attainable_flops, "si", "FLOP/s"),
           item("time bound (whole step)", t.time_bound_s, "time"),
           item("predicted step (sum of op bounds)", t.predicted_step_s, "time"),
           item("share of predicted step", 1.0, "pct")]
    if m:
        tip += [item("measured step", m.step_time_s, "time"), item("achieved", m.achieved_flops, "si", "FLOP/s"),
                item("MFU", m.mfu, "pct")]
    out = [series("step", "whole step", [p for p in [point("whole step", t.intensity, t.attainable_flops, tip,
                                                           achieved=m.achieved_flops if m else None)] if p])]
    fused = getattr(t, "fused", None)
    if fused is not None and getattr(fused, "intensity", None):
        x = fused.intensity
        ftip = [item("whole step, fused", "elementwise chains fused between anchors"),
                item("bytes", getattr(fused, "bytes", None), "si", "B"), item("intensity", x, "num", "FLOP/B"),
                item("time bound", getattr(fused, "time_bound_s", None), "time"),
                item("predicted step", getattr(fused, "predicted_step_s", None), "time")]
        p = point("whole step, fused", x, _attainable(hw.peak_flops, hw.bandwidth, x), ftip)
        out.append(series("step_fused", "whole step, fused", [p] if p else []))
    return out


def _roofs(report: Report, colour: str = "#444444", prefix: str = "") -> list[dict]:
    """The roof of the report's dtype, and a dashed compute roof for every other dtype a row runs in."""
    hw = report.hardware
    roofs = [roof(f"{prefix}{hw.name} {hw.dtype}", hw.peak_flops, hw.bandwidth, colour=colour)]
    dtypes = {m.dtype for m in report.modules if m.flops} | {a.dtype for a in report.attention}
    for d in sorted(dtypes - {hw.dtype}):
        if hw.peaks.get(d):
            roofs.append(roof(f"{prefix}{d}", hw.peaks[d], hw.bandwidth, dashed=True, colour=colour))
    return roofs


def _header_profile(report: Report) -> dict:
    w, hw, t, model, at = report.workload, report.hardware, report.totals, report.model, report.attention_totals
    m = t.measured
    tiles = [item("intensity", t.intensity, "num", "FLOP/B"), item("bound", f"{t.bound}-bound"),
             item("bound MFU", t.mfu_bound, "pct"), item("expected step", t.expected_step_s, "time"),
             *([item("expected p10-p90", f"{seconds(t.expected_low_s)} to {seconds(t.expected_high_s)}")]
               if t.expected_low_s is not None else []),
             *([item("engine host time (in the expected step)", t.engine_host_s, "time")]
               if t.engine_host_s is not None else []),
             *([item("hidden by two-batch overlap", t.overlap_hidden_s, "time")]
               if t.overlap_hidden_s is not None else []),
             item("predicted step (bound)", t.predicted_step_s, "time"),
             item("tokens/s per GPU (expected)", t.tokens_per_s_per_gpu, "num"),
             item("tokens/s (bound)", t.tokens_per_s, "num")]
    if m:
        tiles += [item("measured step", m.step_time_s, "time"), item("MFU", m.mfu, "pct")]
    mem = getattr(report, "memory", None)
    if mem is not None and getattr(mem, "fits", None) is not None:
        tiles += [item("fits in memory", "yes" if mem.fits else "no"),
                  item("memory needed per GPU", mem.total_bytes, "si", "B")]
    d = report.deployment
    quant = [item("deployment", deployment_words(d, w.dtype) or "one GPU, as run"),
             item("weight format", d.weight_dtype), item("KV cache format", d.kv_dtype)]
    cards = [
        {"title": "Model", "items": [item("name", model.name), item("kind", model.kind), item("path", model.path),
                                     item("parameters", model.parameters, "si"),
                                     item("weights", model.param_bytes, "si", "B")]},
        {"title": "Workload", "items": [item("phase", w.phase), item("batch", w.batch, "int"),
                                        item("context", w.context, "int"), item("new tokens", w.tokens, "int"),
                                        item("dtype", w.dtype), *quant, item("device", w.device),
                                        *([item("options", options_words(w.options))]
                                          if w.options else [])]},
        {"title": "Hardware", "items": [item("name", hw.name + (" (calibrated)" if hw.calibrated else "")),
                                        item(f"peak {hw.dtype} (dense)", hw.peak_flops, "si", "FLOP/s"),
                                        item("bandwidth", hw.bandwidth, "si", "B/s"),
                                        item("ridge", hw.ridge, "num", "FLOP/B"),
                                        item("source", Path(hw.source).name if hw.source else None)]},
        {"title": "Step", "items": [
            item("FLOPs executed", t.flops, "si", "FLOP"), item("FLOPs model", t.flops_model, "si", "FLOP"),
            item("bytes", t.bytes, "si", "B"), item("weights", t.weight_bytes, "si", "B"),
            item("KV cache executed", t.kv_bytes_executed, "si", "B"),
            item("KV cache minimum", t.kv_bytes_min, "si", "B"), item("other", t.other_bytes, "si", "B"),
            item("uncounted ops' bytes", t.uncounted_bytes, "si", "B"),
            item("time bound (whole step)", t.time_bound_s, "time"),
            item("predicted step (sum of op bounds)", t.predicted_step_s, "time"),
            item("expected step (achievable fractions)", t.expected_step_s, "time"),
            item("model-FLOP MFU bound", t.mfu_bound_model, "pct")]},
    ]
    if report.attention:
        cards.append({"title": _mixer_kind(report).capitalize(), "items": [
            item("layers recognised", f"{at.recognised} of {at.layers}"),
            item("cache per token", at.cache_bytes_per_token, "si", "B"),
            item("KV executed", at.kv_bytes_executed, "si", "B"), item("KV minimum", at.kv_bytes_min, "si", "B"),
            item("executed / minimum", at.amplification, "num", "x"),
            item("intensity minimum", at.intensity_min, "num", "FLOP/B")]})
    cards += _optional_cards(report)
    return {"tiles": tiles, "cards": cards}


def _memory_cards(report: Any) -> list[dict]:
    """The memory card, where the report has a memory section."""
    mem = getattr(report, "memory", None)
    if mem is None:
        return []
    g = lambda k: getattr(mem, k, None)  # noqa: E731
    fits = g("fits")
    gpus = g("gpus") or 1
    return [{"title": "Memory" + (f" (one of {gpus} GPUs)" if gpus > 1 else " (one GPU)"), "items": [
        item("weights", g("weights_bytes"), "si", "B"), item("KV cache", g("kv_cache_bytes"), "si", "B"),
        item("activation peak", g("activation_peak_bytes"), "si", "B"), item("total", g("total_bytes"), "si", "B"),
        item("capacity", g("capacity_bytes"), "si", "B"),
        item(f"usable ({g('fraction') or 0:.0%} of capacity)", g("usable_bytes"), "si", "B"),
        item("headroom", g("headroom_bytes"), "si", "B"),
        item("fits", None if fits is None else ("yes" if fits else "no")),
        item("largest batch that fits", g("max_batch"), "int")]}]


def _optional_cards(report: Report) -> list[dict]:
    """Cards for what only some reports hold: memory, the fused view, a measured run, parallelism."""
    cards = _memory_cards(report)
    fused = getattr(report.totals, "fused", None)
    if fused is not None:
        g = lambda k: getattr(fused, k, None)  # noqa: E731
        cards.append({"title": "Fused view", "items": [
            item("bytes", g("bytes"), "si", "B"), item("intensity", g("intensity"), "num", "FLOP/B"),
            item("bound", g("bound")), item("time bound", g("time_bound_s"), "time"),
            item("predicted step", g("predicted_step_s"), "time"), item("tokens/s", g("tokens_per_s"), "num"),
            item("kernels formed", g("kernels"), "int"), item("ops fused", g("ops_fused"), "int")]})
    m = report.totals.measured
    if m is not None:
        cards.append({"title": f"Measured ({m.device})", "items": [
            item("step (mean)", m.step_time_s, "time"), item("repeats", m.repeats, "int"),
            item("ops", m.op_time_s, "time"), item("unattributed", m.unattributed_s, "time"),
            item("achieved", m.achieved_flops, "si", "FLOP/s"), item("bandwidth", m.achieved_bandwidth, "si", "B/s"),
            item("MFU (model FLOPs)", m.mfu, "pct"), item("HFU (executed)", m.hfu, "pct"), item("MBU", m.mbu, "pct"),
            item("tokens/s", m.tokens_per_s, "num")]})
    par = report.parallel
    if par:
        cards.append({"title": "Per GPU (planned parallelism)", "items": [
            item("tensor parallel", par.get("tp"), "int"), item("expert parallel", par.get("ep"), "int"),
            item("weights held", par.get("weights_per_gpu"), "si", "B"),
            item("communication bound", report.totals.time_comm_s, "time"), item("binds", report.totals.binding)]})
    return cards


def _notes(report: Report) -> list[str]:
    notes = list(report.notes) + [f"parallel: {n}" for n in (report.parallel or {}).get("notes", [])]
    notes += [f"memory: {n}" for n in getattr(getattr(report, "memory", None), "notes", None) or []]
    if report.comm.calls and report.comm.assumption:
        notes.append(f"collectives: {report.comm.assumption}")
    return notes


def _conventions(report: Report) -> list[list[str]]:
    t = report.totals
    return [[k, v] for k, v in {**t.flop_conventions, **t.time_conventions}.items()]


def _module_groups(report: Report, group: bool = True) -> list[Group]:
    """The module rows, identical layers folded into one (rooflinekit.outputs.groups) unless `group` is off."""
    if not group:
        return [Group(m.name, [m]) for m in report.modules]
    return fold(report.modules, lambda m: m.name, lambda m: (m.flops, m.bytes, m.weight_bytes, m.dtype))


def _folded_measured(members: list) -> list:
    """[time, achieved, MFU, MBU] of folded members: times summed, rates over the summed time."""
    me = [m.measured for m in members]
    if any(x is None for x in me):
        return [None] * 4
    time_s = sum(x.time_s for x in me)
    if not time_s:
        return [time_s, None, None, None]
    rates = [sum((getattr(x, k) or 0.0) * x.time_s for x in me) / time_s
             if all(getattr(x, k) is not None for x in me) else None for k in ("mfu", "mbu")]
    return [time_s, sum(m.flops for m in members) / time_s, *rates]


def module_table(report: Report, group: bool = True) -> dict:
    measured = any(m.measured is not None for m in report.modules)
    cols = [col("module"), col("ops", "int"), col("FLOPs", "si", "FLOP"), col("bytes", "si", "B"),
            col("weights", "si", "B"), col("FLOP/B", "num", hint="arithmetic intensity"), col("bound"),
            col("attainable", "si", "FLOP/s", "min(peak, bandwidth x intensity)"),
            col("time bound", "time", hint="sum of its ops' time bounds"),
            col("share", "pct", hint="share of the predicted step (sum of op bounds)"),
            col("MFU bound", "pct"), col("dtype")]
    if measured:
        cols += [col("measured", "time"), col("achieved", "si", "FLOP/s"), col("MFU", "pct"), col("MBU", "pct")]
    rows = []
    groups = _module_groups(report, group)
    for g in groups:
        members, m = g.members, g.members[0]
        row = [g.label, sum(x.ops for x in members), sum(x.flops for x in members), sum(x.bytes for x in members),
               sum(x.weight_bytes for x in members), m.intensity, m.bound, m.attainable_flops,
               sum(x.time_bound_ops_s for x in members), sum(x.time_share for x in members), m.mfu_bound, m.dtype]
        if measured:
            row += _folded_measured(members)
        rows.append(row)
    folded = len(groups) < len(report.modules)
    return table("modules", "Modules", cols, rows, TableView(
        sort=(8, "desc"), series="modules",
        caption=f"{len(rows)} modules, rolled up to depth {report.capture.depth}"
                + (", repeated layers merged" if report.capture.group_layers else "")
                + ("; (xN): N identical layers in one row, FLOPs, bytes, times and shares summed" if folded else "")))


def attention_table(report: Report) -> dict:
    per_seq = any(getattr(a, "cache_bytes_per_sequence", None) for a in report.attention)
    cols = [col("layer"), col("class"), col("arch"), col("H", "int", hint="query heads"),
            col("H_kv", "int", hint="key/value heads"), col("d", "int", hint="head dim"),
            col("window", "int"), col("cache/token", "si", "B", "cache bytes per token, per layer")]
    if per_seq:
        cols.append(col("state/sequence", "si", "B", "recurrent state bytes per sequence"))
    cols += [col("KV min", "si", "B", "architecture minimum: cache read once"),
             col("KV executed", "si", "B", "KV bytes the code moved"),
             col("executed/min", "num", hint="amplification"), col("FLOPs model", "si", "FLOP"),
             col("FLOPs executed", "si", "FLOP"), col("bytes executed", "si", "B"),
             col("I min", "num", "FLOP/B", "intensity at the architecture minimum"),
             col("I executed", "num", "FLOP/B", "intensity as executed"), col("bound"),
             col("time bound", "time", hint="sum of its ops' time bounds"),
             col("share", "pct", hint="share of the predicted step"), col("notes")]
    step = report.totals.predicted_step_s
    rows = []
    for a in report.attention:
        arch = a.arch + (f"/{a.mode}" if a.mode else "") + ("" if a.recognised else " (not recognised)")
        row = [a.module, a.module_class, arch, a.num_heads, a.num_kv_heads, a.head_dim, a.window,
               a.cache_bytes_per_token]
        if per_seq:
            row.append(getattr(a, "cache_bytes_per_sequence", None))
        row += [a.kv_bytes_min, a.kv_bytes_executed, a.amplification, a.flops_model, a.flops_executed,
                a.bytes_executed, a.intensity_min, a.intensity_executed, a.placement_executed.bound,
                _op_time(report, a), _ratio(_op_time(report, a), step), " | ".join(a.notes)]
        rows.append(row)
    return table("attention", _mixer_kind(report).capitalize(), cols, rows, TableView(
        series="attention", caption=f"{len(rows)} layers in model order; KV min and I min are the architecture's "
                                    "minimum (the cache read once), the others what the code executed"))


def ops_table(report: Report) -> dict:
    step = report.totals.predicted_step_s
    ops = sorted(report.ops, key=lambda o: -o.time_bound_s)[:MAX_OPS]
    cols = [col("#", "int", hint="index in execution order"), col("op"), col("module"), col("kind"),
            col("FLOPs", "si", "FLOP"), col("bytes", "si", "B"), col("FLOP/B", "num"), col("bound"),
            col("time bound", "time"), col("share", "pct", hint="share of the predicted step"), col("dtype"),
            col("counted", "bool", hint="has a FLOP formula"), col("shapes")]
    rows = [[o.index, o.name, o.module, o.kind, o.flops, o.bytes, o.intensity, o.bound, o.time_bound_s,
             _ratio(o.time_bound_s, step), o.dtype, o.counted, o.shapes] for o in ops]
    cut = len(report.ops) - len(ops)
    caption = (f"the {TOP_OPS} most expensive of {len(report.ops):,} ops by time bound; show all for every one"
               + (f" (the page holds the top {MAX_OPS:,}; {cut:,} cheaper ones are in the JSON report)" if cut else ""))
    return table("ops", "Ops", cols, rows,
                 TableView(sort=(8, "desc"), limit=TOP_OPS, caption=caption, total=len(report.ops)))


def uncounted_table(report: Report) -> dict:
    cols = [col("op"), col("count", "int"), col("bytes", "si", "B"), col("bytes share", "pct"),
            col("time bound", "time"), col("time share", "pct"), col("formula error")]
    rows = [[u.name, u.count, u.bytes, u.bytes_share, u.time_bound_s, u.time_share, u.formula_error]
            for u in report.uncounted_ops]
    return table("uncounted", "Ops without a FLOP formula", cols, rows,
                 TableView(sort=(2, "desc"), caption="bytes counted, FLOPs not: listed so that none is a silent zero"))


def comm_table(report: Report) -> dict:
    cols = [col("collective"), col("group", "int"), col("calls", "int"), col("message", "si", "B"),
            col("wire bytes per GPU", "si", "B"), col("time bound", "time")]
    rows = [[c.collective, c.group_size, c.calls, c.message_bytes, c.wire_bytes, c.time_bound_s]
            for c in report.comm.collectives]
    return table("comm", "Collectives per GPU", cols, rows, TableView(sort=(5, "desc"), caption=report.comm.assumption))


def profile_payload(report: Report, group_layers: bool = True) -> dict:
    """The page's data for one profile report (identical layers folded into one row unless
    `group_layers` is off)."""
    w, hw = report.workload, report.hardware
    chart_series = [_module_points(report, group_layers), *_attention_points(report), *_step_points(report)]
    chart_series = [s for s in chart_series if s["points"] or s["omitted"]]
    tables = [module_table(report, group_layers)]
    if report.attention:
        tables.append(attention_table(report))
    if report.ops:
        tables.append(ops_table(report))
    if report.uncounted_ops:
        tables.append(uncounted_table(report))
    if report.comm.collectives:
        tables.append(comm_table(report))
    words = request_words(w.dtype, report.deployment, w.q_len if w.phase == "decode" else None, w.options)
    title = f"{report.model.name or 'model'}: {w.phase}, batch {w.batch}, context {w.context}{words} on {hw.name}"
    return {"kind": "profile", "title": title, "header": _header_profile(report),
            "warnings": list(report.warnings), "notes": _notes(report), "conventions": _conventions(report),
            "chart": {"roofs": _roofs(report), "series": chart_series,
                      "y_label": "achieved or attainable (TFLOP/s)" if report.totals.measured
                      else "attainable (TFLOP/s): the roofline bound"},
            "tables": tables}


# -- sweep ------------------------------------------------------------------------------------------


def _sweep_tip(p, what: str, intensity: float | None, flops: float, nbytes: float) -> list[list]:
    return [item(what, f"batch {p.batch}, context {p.context}"), item("FLOPs", flops, "si", "FLOP"),
            item("bytes", nbytes, "si", "B"), item("intensity", intensity, "num", "FLOP/B")]


def _critical_items(c) -> list[list]:
    if c.critical_batch:
        return [item(f"context {c.context:,}", c.critical_batch, "int")]
    if c.saturation_intensity is not None:
        return [item(f"context {c.context:,}", "never"),
                item("\u2003saturates at", c.saturation_intensity, "num", "FLOP/B")]
    return [item(f"context {c.context:,}", c.summary)]


def _sweep_step_tip(p: SweepPoint) -> list[list]:
    """A sweep point's tip on the whole-step chart: its counts, its placement and its memory."""
    return _sweep_tip(p, "whole step", p.intensity, p.flops, p.bytes) + [
        item("bound", p.bound), item("attainable", p.attainable_flops, "si", "FLOP/s"),
        item("time bound (whole step)", p.time_bound_s, "time"),
        item("predicted step (sum of op bounds)", p.predicted_step_s, "time"),
        item("tokens/s", p.tokens_per_s, "num"), item("bound MFU", p.mfu_bound, "pct"),
        item("weights' share of bytes", p.weight_share, "pct"), item("KV cache's share", p.kv_share, "pct"),
        item("memory per GPU", getattr(getattr(p, "memory", None), "total_bytes", None), "si", "B"),
        item("fits", getattr(p, "fits", None), "bool")]


def _sweep_series(sweep: SweepReport) -> list[dict]:
    """A sweep's chart series: every point's whole step (also as the trail of its context), its step
    with attention at its minimum, and its attention as executed and at its minimum."""
    hw = sweep.hardware
    att = lambda x: _attainable(hw.peak_flops, hw.bandwidth, x)  # noqa: E731
    step, step_min, a_exec, a_min, trail = [], [], [], [], []
    for p in sweep.points:
        where = {"b": p.batch, "c": p.context}
        tip = _sweep_step_tip(p)
        step.append(point(f"step B={p.batch} S={p.context}", p.intensity, p.attainable_flops, tip, **where))
        trail.append(point(f"B={p.batch}", p.intensity, p.attainable_flops, tip, **where))
        sm = p.step_at_attention_minimum
        step_min.append(point(f"step at attention minimum B={p.batch} S={p.context}", sm.intensity,
                              att(sm.intensity), _sweep_tip(p, "whole step, attention at its minimum",
                                                            sm.intensity, sm.flops, sm.bytes), **where))
        a = p.attention
        a_exec.append(point(f"attention B={p.batch} S={p.context}", a.intensity_executed, att(a.intensity_executed),
                            _sweep_tip(p, f"attention, {a.recognised} layers, as executed", a.intensity_executed,
                                       a.flops_executed, a.bytes_executed), **where))
        a_min.append(point(f"attention minimum B={p.batch} S={p.context}", a.intensity_min, att(a.intensity_min),
                           _sweep_tip(p, f"attention, {a.recognised} layers, architecture minimum",
                                      a.intensity_min, a.flops_model, a.bytes_min), **where))
    return [
        series("trail", "whole step, every batch at this context", [p for p in trail if p],
               view=SeriesView(select="context")),
        series("step", "whole step", [p for p in step if p], view=SeriesView(select="point")),
        series("step_min", "whole step, attention at its minimum", [p for p in step_min if p],
               view=SeriesView(select="point")),
        series("attention", "attention (all layers), as executed", [p for p in a_exec if p],
               view=SeriesView(select="point")),
        series("attention_min", "attention (all layers), architecture minimum", [p for p in a_min if p],
               view=SeriesView(select="point", link="attention")),
    ]


def _sweep_tables(sweep: SweepReport) -> list[dict]:
    """A sweep's tables: its points (a row selects its point on the chart), then the critical batch
    per context, as counted and with attention at its minimum, where the sweep found them."""
    cols = [col("batch", "int"), col("context", "int"), col("FLOPs", "si", "FLOP"), col("bytes", "si", "B"),
            col("FLOP/B", "num"), col("bound"), col("predicted step", "time"), col("tokens/s", "num"),
            col("bound MFU", "pct"), col("weights", "pct", hint="weights' share of the step's bytes"),
            col("KV", "pct", hint="KV cache's share"), col("other", "pct"),
            col("attn I min", "num", "FLOP/B"), col("attn I executed", "num", "FLOP/B")]
    rows = [[p.batch, p.context, p.flops, p.bytes, p.intensity, p.bound, p.predicted_step_s, p.tokens_per_s,
             p.mfu_bound, p.weight_share, p.kv_share, p.other_share, p.attention.intensity_min,
             p.attention.intensity_executed] for p in sweep.points]
    if any(getattr(p, "memory", None) is not None for p in sweep.points):
        # beside tokens/s, where the page shows them without scrolling the table sideways
        cols[8:8] = [col("fits", "bool", hint="fits one GPU's memory"),
                     col("memory per GPU", "si", "B", "weights, KV cache and activation peak")]
        for row, p in zip(rows, sweep.points, strict=True):
            mem = getattr(p, "memory", None)
            row[8:8] = [getattr(p, "fits", None), getattr(mem, "total_bytes", None)]
    tables = [{**table("points", "Sweep points", cols, rows, TableView(caption="click a row to show it on the chart")),
               "selects": True}]
    for tid, title, crit in (("critical", "Critical batch per context", sweep.critical_batch),
                             ("critical_min", "Critical batch, attention at its minimum",
                              sweep.critical_batch_attention_minimum)):
        if crit:
            ccols = [col("context", "int"), col("critical batch", "int"),
                     col("saturates at", "num", "FLOP/B", "the intensity the step tends to as batch grows"),
                     col("ridge", "num", "FLOP/B"), col("largest batch that fits", "int"), col("method"),
                     col("summary")]
            crows = [[c.context, c.critical_batch, c.saturation_intensity, c.ridge,
                      getattr(c, "max_batch_fits", None), c.method, c.summary] for c in crit]
            tables.append(table(tid, title, ccols, crows))
    return tables


def _sweep_header(sweep: SweepReport) -> dict:
    """A sweep's header: its tiles (points, captures, wall time) and its model, workload, hardware and
    critical batch cards."""
    hw, w = sweep.hardware, sweep.workload
    return {"tiles": [item("points", len(sweep.points), "int"), item("captures", sweep.profiles, "int"),
                      item("evaluated from fitted counts", sweep.evaluated, "int"),
                      item("analysis time (after start-up and model import)", sweep.wall_s, "time")],
            "cards": [
                {"title": "Model", "items": [item("name", sweep.model.name), item("kind", sweep.model.kind),
                                             item("path", sweep.model.path),
                                             item("parameters", sweep.model.parameters, "si"),
                                             item("weights", sweep.model.param_bytes, "si", "B")]},
                {"title": "Workload", "items": [item("phase", w.phase), item("dtype", w.dtype),
                                                item("deployment", deployment_words(sweep.deployment, w.dtype)
                                                     or "one GPU, as run"),
                                                *([item("options", options_words(w.options))] if w.options else []),
                                                item("device", w.device),
                                                item("batches", ", ".join(map(str, w.batches))),
                                                item("contexts", ", ".join(map(str, w.contexts)))]},
                {"title": "Hardware", "items": [item("name", hw.name),
                                                item(f"peak {hw.dtype} (dense)", hw.peak_flops, "si", "FLOP/s"),
                                                item("bandwidth", hw.bandwidth, "si", "B/s"),
                                                item("ridge", hw.ridge, "num", "FLOP/B")]},
                {"title": "Critical batch",
                 "items": [x for c in sweep.critical_batch for x in _critical_items(c)]},
            ]}


def sweep_payload(sweep: SweepReport) -> dict:
    """The page's data for a sweep: every point, drawn for the selected batch and context."""
    hw, w = sweep.hardware, sweep.workload
    chart_series = _sweep_series(sweep)
    tables = _sweep_tables(sweep)
    first = sweep.points[0] if sweep.points else None
    header = _sweep_header(sweep)
    words = request_words(w.dtype, sweep.deployment, w.q_len, w.options)
    title = f"{sweep.model.name or 'model'}: {w.phase} sweep{words} on {hw.name}"
    return {"kind": "sweep", "title": title, "header": header, "warnings": list(sweep.warnings),
            "notes": list(sweep.notes) + ([] if not sweep.interrupted else ["interrupted: the points done are shown"]),
            "conventions": [],
            "selector": {"batches": list(w.batches), "contexts": list(w.contexts),
                         "batch": first.batch if first else None, "context": first.context if first else None},
            "chart": {"roofs": [roof(f"{hw.name} {hw.dtype}", hw.peak_flops, hw.bandwidth)], "series": chart_series,
                      "y_label": "attainable (TFLOP/s): the roofline bound"},
            "tables": tables}


# -- compare ----------------------------------------------------------------------------------------

#: Compare units -> (format kind, unit).
_UNITS = {"FLOP": ("si", "FLOP"), "B": ("si", "B"), "s": ("time", ""), "%": ("pct", ""), "1/s": ("num", "/s"),
          "FLOP/B": ("num", "FLOP/B"), "": ("num", "")}


def compare_payload(comparison: dict, a: Report, b: Report) -> dict:
    """The page's data for a comparison (rooflinekit.analyses.compare) of reports A and B."""
    chart_series, roofs = [], []
    same = (a.hardware.name, a.hardware.dtype, a.hardware.peak_flops, a.hardware.bandwidth) == (
        b.hardware.name, b.hardware.dtype, b.hardware.peak_flops, b.hardware.bandwidth)
    for tag, report in (("A", a), ("B", b)):
        colour = AB_COLOURS[tag]
        mods = _module_points(report)
        att, _ = _attention_points(report)
        step = _step_points(report)[0]
        for s, sid, label in ((mods, "modules", "modules"), (att, "attention", "attention layers, as executed"),
                              (step, "step", "whole step")):
            if s["points"] or s["omitted"]:
                chart_series.append(series(f"{tag}_{sid}", f"{tag}: {label}", s["points"], s["omitted"],
                                           SeriesView(style=sid, colour=colour, sized=s["sized"], tag=tag)))
        roof_colour, prefix = ("#444444", "") if same else (colour, f"{tag}: ")
        for r in _roofs(report, colour=roof_colour, prefix=prefix):
            if not any(x["peak"] == r["peak"] and x["bandwidth"] == r["bandwidth"] for x in roofs):
                roofs.append(r)
    cols = [col("section"), col("name"), col("quantity"), col("A", "auto"), col("B", "auto"),
            col("A/B", "num", hint="A divided by B")]
    rows = []
    for r in comparison["rows"]:
        kind, unit = _UNITS.get(r.get("unit", ""), ("num", ""))
        rows.append([r["section"], r["name"], r["key"], [r["a"], kind, unit], [r["b"], kind, unit], r["ratio"]])
    header = {"tiles": [], "cards": [
        {"title": f"{tag}: {d['path']}", "items": [
            item("model", d["model"]), item("phase", d["workload"]["phase"]),
            item("batch", d["workload"]["batch"], "int"), item("context", d["workload"]["context"], "int"),
            item("dtype", d["workload"]["dtype"]), item("device", d["workload"]["device"]),
            item("deployment", deployment_words(d.get("deployment"), d["workload"]["dtype"]) or "one GPU, as run"),
            *([item("options", options_words(d["options"]))] if d.get("options") else []),
            item("hardware", d["hardware"])]} for tag, d in (("A", comparison["a"]), ("B", comparison["b"]))]}
    for tag, report in (("A", a), ("B", b)):
        t = report.totals
        header["tiles"] += [item(f"{tag}: intensity", t.intensity, "num", "FLOP/B"),
                            item(f"{tag}: predicted step", t.predicted_step_s, "time")]
    step_a, step_b = a.totals.predicted_step_s, b.totals.predicted_step_s
    header["tiles"].append(item("step A/B", _ratio(step_a, step_b), "num", "x"))
    return {"kind": "compare", "title": f"compare: {comparison['a']['path']} (A) vs {comparison['b']['path']} (B)",
            "header": header, "warnings": [f"A: {x}" for x in a.warnings] + [f"B: {x}" for x in b.warnings],
            "notes": list(comparison.get("notes", [])), "conventions": [],
            "chart": {"roofs": roofs, "series": chart_series, "y_label": "attainable (TFLOP/s): the roofline bound"},
            "tables": [table("compare", "A and B side by side", cols, rows, TableView(caption="every ratio is A/B"))]}


# -- advise -----------------------------------------------------------------------------------------

#: What binds a step after a lever -> its bar's colour.
BINDING_COLOURS = {"compute": "#1f77b4", "memory": "#d95f02", "communication": "#7570b3", "capacity": "#c0392b"}


def _lever_tip(lv: Any) -> list[list]:
    g = lambda k: getattr(lv, k, None)  # noqa: E731
    return [item("speed-up (tokens/s per GPU)", g("speedup"), "num", "x"),
            item("step speed-up", g("step_speedup"), "num", "x"),
            item("expected step", g("expected_step_s"), "time"), item("step bound", g("predicted_step_s"), "time"),
            item("tokens/s per GPU", g("tokens_per_s_per_gpu"), "num"),
            item("binds afterwards", g("binding")), item("fits in memory", g("fits"), "bool"),
            item("memory per GPU", g("memory_bytes"), "si", "B"), item("GPUs", g("gpus"), "int"),
            item("batch", g("batch"), "int"), item("compute bound", g("time_compute_s"), "time"),
            item("memory bound", g("time_memory_s"), "time"), item("communication bound", g("time_comm_s"), "time"),
            item("assumption", g("assumption"))]


def advise_payload(advice: Any) -> dict:
    """The page's data for an advice report (rooflinekit.core.advice_report.AdviceReport): the baseline,
    every lever as a bar from the baseline's tokens/s to its own, the levers skipped and why."""
    w, hw, model, base = advice.workload, advice.hardware, advice.model, advice.baseline
    levers = list(getattr(advice, "levers", []) or [])
    bars = [{"n": lv.lever, "v": lv.speedup, "c": BINDING_COLOURS.get(lv.binding, "#777777"), "k": lv.binding,
             "fits": lv.fits, "tip": _lever_tip(lv)} for lv in levers if lv.speedup]
    cols = [col("#", "int", hint="rank by speed-up"), col("lever"),
            col("speed-up", "num", "x", "tokens/s per GPU at the expected step over the baseline's"),
            col("step speed-up", "num", "x", "the baseline's expected step over this one's"),
            col("expected step", "time", hint="each kernel at its achievable fraction"),
            col("step bound", "time", hint="sum of op bounds"), col("tokens/s per GPU", "num"), col("binds"),
            col("fits", "bool"), col("memory per GPU", "si", "B"), col("GPUs", "int"), col("batch", "int"),
            col("compute time", "time", hint="compute time bound"), col("memory time", "time", hint="HBM time bound"),
            col("communication time", "time", hint="interconnect time bound"), col("assumption"), col("source"),
            col("changes", hint="what differs from the baseline's workload")]
    rows = []
    for rank, lv in [(0, base)] + list(enumerate(levers, 1)):
        changes = ", ".join(f"{k}={v}" for k, v in (getattr(lv, "changes", None) or {}).items())
        rows.append([rank, lv.lever, lv.speedup, getattr(lv, "step_speedup", None),
                     getattr(lv, "expected_step_s", None), lv.predicted_step_s,
                     getattr(lv, "tokens_per_s_per_gpu", None), lv.binding, lv.fits, getattr(lv, "memory_bytes", None), getattr(lv, "gpus", None),
                     getattr(lv, "batch", None), getattr(lv, "time_compute_s", None),
                     getattr(lv, "time_memory_s", None), getattr(lv, "time_comm_s", None), lv.assumption,
                     getattr(lv, "source", None), changes])
    tables = [table("levers", "Levers, ranked by speed-up", cols, rows, TableView(
        series="levers", caption="row 0 is the baseline; each lever is priced alone against it"))]
    skipped = list(getattr(advice, "skipped", []) or [])
    if skipped:
        tables.append(table("skipped", "Levers that do not apply", [col("lever"), col("reason"), col("source")],
                            [[x.lever, x.reason, getattr(x, "source", None)] for x in skipped]))
    best = levers[0] if levers else None
    tiles = [item("baseline expected step", getattr(base, "expected_step_s", None), "time"),
             item("its bound", base.predicted_step_s, "time"),
             item("baseline tokens/s per GPU", getattr(base, "tokens_per_s_per_gpu", None), "num"),
             item("binds", base.binding)]
    if best is not None:
        tiles += [item("best lever", best.lever), item("its speed-up", best.speedup, "num", "x")]
    tiles.append(item("levers priced / skipped", f"{len(levers)} / {len(skipped)}"))
    cards = [
        {"title": "Model", "items": [item("name", model.name), item("kind", model.kind), item("path", model.path),
                                     item("parameters", model.parameters, "si"),
                                     item("weights", model.param_bytes, "si", "B")]},
        {"title": "Workload", "items": [item("phase", w.phase), item("batch", w.batch, "int"),
                                        item("context", w.context, "int"), item("dtype", w.dtype),
                                        item("deployment", deployment_words(advice.deployment, w.dtype)
                                             or "one GPU, as run"),
                                        *([item("options", options_words(w.options))] if w.options else []),
                                        item("device", w.device)]},
        {"title": "Hardware", "items": [item("name", hw.name), item(f"peak {hw.dtype} (dense)", hw.peak_flops, "si", "FLOP/s"),
                                        item("bandwidth", hw.bandwidth, "si", "B/s"),
                                        item("ridge", hw.ridge, "num", "FLOP/B")]},
        *_memory_cards(advice),
        {"title": "Run", "items": [item("profiles", getattr(advice, "profiles", None), "int"),
                                   item("wall time", getattr(advice, "wall_s", None), "time")]},
    ]
    words = request_words(w.dtype, advice.deployment, w.q_len if w.phase == "decode" else None, w.options)
    title = f"{model.name or 'model'}: what would change {w.phase}, batch {w.batch}, context {w.context}{words} on {hw.name}"
    return {"kind": "advise", "title": title, "header": {"tiles": tiles, "cards": cards},
            "warnings": list(advice.warnings), "notes": list(advice.notes), "conventions": [],
            "bars": {"bars": bars, "series": "levers", "baseline": base.tokens_per_s,
                     "label": "speed-up of tokens/s per GPU at the expected step (log scale; 1\u00d7 is the baseline)",
                     "legend": [[k, c] for k, c in BINDING_COLOURS.items() if any(b["k"] == k for b in bars)]},
            "tables": tables}


# -- the page ---------------------------------------------------------------------------------------


def _embed(payload: dict) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' survives as itself, and ASCII only
    (the page is written the same whatever the locale's encoding)."""
    text = json.dumps(_clean(payload), separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(payload: dict) -> str:
    """The self-contained HTML document for a payload."""
    css = (ASSETS / "report.css").read_text(encoding="utf-8")
    js = (ASSETS / "report.js").read_text(encoding="utf-8")
    payload = {**payload, "tool": f"rooflinekit {__version__}"}
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"rooflinekit {__version__}\">\n"
        f"<title>{html.escape(payload['title']).encode('ascii', 'xmlcharrefreplace').decode()}</title>\n<style>\n{css}</style>\n</head>\n<body>\n"
        "<main id=\"rk-app\"><noscript>This report draws its chart and tables with JavaScript: "
        "open it in a browser with scripts enabled.</noscript></main>\n"
        f"<script id=\"rk-data\" type=\"application/json\">{_embed(payload)}</script>\n"
        f"<script>\n{js}</script>\n</body>\n</html>\n"
    )


def profile_html(report: Report, group_layers: bool = True) -> str:
    """A profile report as a self-contained HTML page (identical layers folded unless `group_layers` is off)."""
    return page(profile_payload(report, group_layers))


def sweep_html(sweep: SweepReport | dict) -> str:
    """A sweep (its report or the dict of one) as a self-contained HTML page."""
    return page(sweep_payload(sweep if isinstance(sweep, SweepReport) else SweepReport.from_dict(sweep)))


def compare_html(comparison: dict, a: Report, b: Report) -> str:
    """A comparison of two profile reports as a self-contained HTML page."""
    return page(compare_payload(comparison, a, b))


def advise_html(advice: Any) -> str:
    """An advice report (rooflinekit.core.advice_report.AdviceReport) as a self-contained HTML page."""
    return page(advise_payload(advice))
