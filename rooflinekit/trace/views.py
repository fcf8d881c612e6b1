"""A trace report as the HTML page and the PNG/SVG chart `profile` draws (rooflinekit.outputs):
each kernel name a point at its counted work's intensity and achieved FLOP/s, sized by its GPU time,
under the roofs of every dtype the hardware entry lists."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from rooflinekit.core.units import seconds, share, si
from rooflinekit.core.views import register_views
from rooflinekit.outputs.chart_data import Chart, Series
from rooflinekit.outputs.html import page
from rooflinekit.outputs.html_data import (
    PLAIN_TABLE,
    SeriesView,
    TableView,
    col,
    item,
    point,
    roof,
    series,
    table,
)
from rooflinekit.outputs.notebook import html_table, notebook_view
from rooflinekit.outputs.roofline_svg import Point, roofline_svg
from rooflinekit.trace.render import render
from rooflinekit.trace.report import RankReport, Row, StepSummary, TraceReport

#: Kernel names without counted FLOPs the page names under the chart (the rest are counted).
OMITTED_SHOWN = 20
#: Roof colours per dtype, the report's main dtype solid.
_ROOF_COLOURS = {"fp32": "#444444", "tf32": "#7a5195", "bf16": "#1f77b4", "fp16": "#2ca02c", "fp8": "#d62728"}


def short_name(kernel: str, width: int = 48) -> str:
    """A kernel's name without its return type, template arguments and parameters."""
    name = re.sub(r"^void\s+", "", kernel).replace("->", "to")
    depth, out = 0, []
    for ch in name:
        depth += ch in "<("
        if depth == 0:
            out.append(ch)
        depth -= ch in ">)"
    text = "".join(out).split("::")[-1].strip() or kernel
    return text if len(text) <= width else text[: width - 2] + ".."


def _main_dtype(report: TraceReport) -> str:
    """The dtype most counted FLOPs ran at (the chart's solid roof)."""
    by: dict[str, float] = {}
    for rank in report.ranks:
        for row in rank.kernels:
            if row.rates.dtype:
                by[row.rates.dtype] = by.get(row.rates.dtype, 0.0) + row.rates.flops
    return max(by, key=by.get) if by else next(iter(report.peaks), "fp32")


def _tip(row: Row) -> list[list]:
    r = row.rates
    return [["class", row.klass, "text"], ["kernels", row.events, "int"], ["GPU time", r.time_s, "time"],
            ["achieved", r.flops_per_s, "si", "FLOP/s"], ["of the dtype's peak", r.peak_fraction, "pct"],
            ["bandwidth", r.bytes_per_s, "si", "B/s"], ["of HBM", r.bandwidth_fraction, "pct"],
            ["dtype", r.dtype, "text"], ["launched by", row.op or "-", "text"]]


def _kernel_points(rank: RankReport, sid: str, label: str) -> dict:
    """Every kernel name of the rank with counted FLOPs, sized by its share of the GPU time."""
    total = rank.total.kernel_time_s or 1.0
    drawn, omitted = [], []
    for row in rank.kernels:
        r = row.rates
        p = point(short_name(row.name, 64), r.intensity, r.flops_per_s, _tip(row), share=r.time_s / total, achieved=r.flops_per_s)
        (drawn.append(p) if p else omitted.append(short_name(row.name, 64)))
    if len(omitted) > OMITTED_SHOWN:
        omitted = omitted[:OMITTED_SHOWN] + [f"and {len(omitted) - OMITTED_SHOWN} more (the tables list them)"]
    return series(sid, label, drawn, omitted, SeriesView(style="modules", sized=True,
                                                         hint="each kernel name, sized by its GPU time"))


def _step_items(s: StepSummary) -> list[list]:
    return [item("span", s.span_s, "time"), item("busy", s.busy_s, "time"), item("idle", s.idle_s, "time"),
            item("HFU", s.hfu, "pct"), item("MBU", s.mbu, "pct"), item("GPU events", s.events, "int")]


def _header(report: TraceReport) -> dict:
    first = report.ranks[0]
    t = first.total
    tiles = [item("busy", t.busy_s, "time"), item("idle", t.idle_s, "time"),
             item("busy share", t.busy_s / t.span_s if t.span_s else None, "pct"), item("HFU", t.hfu, "pct"),
             item("MBU", t.mbu, "pct"), item("class known", first.class_coverage, "pct"),
             item("work counted", first.counted_coverage, "pct")]
    cards = [{"title": "Trace", "items": [item("file", report.source), item("ranks", len(report.ranks), "int"),
                                          item("device", first.device), item("step", report.step or "all")]},
             {"title": "Hardware", "items": [item("name", report.hardware),
                                             *[item(f"peak {k} (dense)", v, "si", "FLOP/s")
                                               for k, v in report.peaks.items()],
                                             item("bandwidth", report.bandwidth, "si", "B/s")]},
             {"title": t.label, "items": _step_items(t)}]
    return {"tiles": tiles, "cards": cards}


def _rows_table(tid: str, title: str, rows: list[Row], first: str) -> dict:
    cols = [col(first), col("class"), col("n", "int"), col("GPU time", "time"), col("achieved", "si", "FLOP/s"),
            col("of peak", "pct"), col("bandwidth", "si", "B/s"), col("of HBM", "pct"), col("dtype"), col("bound")]
    body = [[short_name(r.name, 64), r.klass, r.events, r.rates.time_s, r.rates.flops_per_s, r.rates.peak_fraction,
             r.rates.bytes_per_s, r.rates.bandwidth_fraction, r.rates.dtype or "-", r.rates.bound or "-"] for r in rows]
    return table(tid, title, cols, body, TableView(sort=(3, "desc")))


def _counters_table(rank: RankReport, tag: str) -> dict:
    cols = [col("kernel"), col("ranges", "int"), col("fp64", "si", "FLOP"), col("fp32", "si", "FLOP"),
            col("fp16", "si", "FLOP"), col("counted from shapes", "si", "FLOP")]
    return table(f"counters{tag}", "CUPTI counters: FLOPs each kernel executed (add + mul + 2 x fma; tensor-core "
                 "work not included)", cols,
                 [[short_name(c.name, 64), c.ranges, c.fp64, c.fp32, c.fp16, c.counted] for c in rank.counters],
                 TableView(sort=(3, "desc")))


def _tables(rank: RankReport, tag: str) -> list[dict]:
    if rank.timing == "counters":  # CUPTI ranges and no kernel activity: nothing but the counters
        return [_counters_table(rank, tag)]
    out = []
    if rank.steps:
        cols = [col("window"), col("span", "time"), col("busy", "time"), col("idle", "time"), col("HFU", "pct"),
                col("MBU", "pct"), col("events", "int")]
        out.append(table(f"steps{tag}", "GPU time per step", cols,
                         [[s.label, s.span_s, s.busy_s, s.idle_s, s.hfu, s.mbu, s.events] for s in rank.steps],
                         PLAIN_TABLE))
    out.append(table(f"classes{tag}", "GPU time by kernel class", [col("class"), col("time", "time"),
                                                                    col("share", "pct"), col("events", "int")],
                     [[c.klass, c.time_s, c.share, c.events] for c in rank.total.by_class], TableView(sort=(1, "desc"))))
    out.append(_rows_table(f"kernels{tag}", "Kernels (counted work shared from the launching op by duration)",
                           rank.kernels, "kernel"))
    out.append(_rows_table(f"ops{tag}", "Counted ops", rank.ops, "op"))
    if rank.collectives:
        cols = [col("collective"), col("group", "int"), col("calls", "int"), col("time", "time"),
                col("bytes", "si", "B"), col("algbw", "si", "B/s"), col("busbw", "si", "B/s"), col("sizes from")]
        out.append(table(f"comm{tag}", "Collectives (bus bandwidth by nccl-tests' convention)", cols,
                         [[c.collective, c.group, c.calls, c.time_s, c.bytes, c.algbw, c.busbw, c.source]
                          for c in rank.collectives], TableView(sort=(3, "desc"))))
    if rank.counters:
        out.append(_counters_table(rank, tag))
    for tid, title, rows in ((f"uncounted{tag}", "Uncounted ops (kernel time without FLOPs or bytes)", rank.uncounted),
                             (f"unplaced{tag}", "Unplaced kernels (no launching aten op)", rank.unplaced)):
        if rows:
            cols = [col("name"), col("status"), col("class"), col("n", "int"), col("GPU time", "time")]
            out.append(table(tid, title, cols, [[short_name(r.name, 64), r.status or "-", r.klass, r.events, r.rates.time_s]
                                                for r in rows], TableView(sort=(4, "desc"))))
    return out


def trace_payload(report: TraceReport) -> dict:
    """The page's data for a trace report: the kernels on the roofline, the tables per rank."""
    main = _main_dtype(report)
    roofs = [roof(f"{report.hardware} {k}", v, report.bandwidth, dashed=k != main,
                  colour=_ROOF_COLOURS.get(k, "#444444")) for k, v in report.peaks.items() if k != "fp64"]
    many = len(report.ranks) > 1
    chart = [_kernel_points(r, f"kernels{i}", f"rank {r.rank}" if many else "kernels")
             for i, r in enumerate(report.ranks)]
    tables = [t for i, r in enumerate(report.ranks) for t in _tables(r, str(i) if many else "")]
    notes = list(report.notes) + [n for r in report.ranks for n in r.notes]
    return {"kind": "trace", "title": f"{Path(report.source).name} on {report.hardware}", "header": _header(report),
            "warnings": [], "notes": notes, "conventions": [],
            "chart": {"roofs": roofs, "series": [s for s in chart if s["points"] or s["omitted"]],
                      "y_label": "achieved (TFLOP/s): counted FLOPs over measured kernel time"},
            "tables": tables}


def trace_html(report: TraceReport) -> str:
    """The trace report as a self-contained HTML page."""
    return page(trace_payload(report))


def trace_chart(report: TraceReport) -> Chart:
    """The matplotlib chart of `--plot`: each kernel name at its achieved FLOP/s, sized by time."""
    main = _main_dtype(report)
    hw = {"name": report.hardware, "dtype": main, "peak_flops": report.peaks.get(main, max(report.peaks.values())),
          "bandwidth": report.bandwidth, "peaks": dict(report.peaks)}
    out, skipped = [], []
    for rank in report.ranks:
        total = rank.total.kernel_time_s or 1.0
        rows = [r for r in rank.kernels if r.rates.intensity and r.rates.flops_per_s]
        skipped += [r for r in rank.kernels if r not in rows]
        out.append(Series(f"rank {rank.rank}" if len(report.ranks) > 1 else "kernels", "op",
                          [(r.rates.intensity, short_name(r.name, 32)) for r in rows],
                          shares=[r.rates.time_s / total for r in rows], achieved=[r.rates.flops_per_s for r in rows],
                          labelled=8))
    notes = ["each kernel name at its counted FLOPs over its measured time, sized by GPU time"]
    if skipped:
        notes.append(f"{len(skipped)} kernel names without counted FLOPs ({sum(r.rates.time_s for r in skipped) * 1e3:.3g} "
                     "ms) are not drawn: the report's tables list them")
    return Chart(f"{Path(report.source).name}: kernels on {report.hardware}", hw, out, notes=notes)


def top_rows(report: TraceReport, n: int) -> TraceReport:
    """The report with the first `n` rows of each rank's kernel and op tables (most time first)."""
    return replace(report, ranks=[replace(r, kernels=r.kernels[:n], ops=r.ops[:n], uncounted=r.uncounted[:n],
                                          unplaced=r.unplaced[:n]) for r in report.ranks])


def _svg_points(rank: RankReport) -> list[Point]:
    total = rank.total.kernel_time_s or 1.0
    return [Point(r.rates.intensity, r.rates.flops_per_s, "point",
                  f"{short_name(r.name)}: {si(r.rates.flops_per_s, 'FLOP/s')}, {seconds(r.rates.time_s)}",
                  2.5 + 12 * (r.rates.time_s / total) ** 0.5)
            for r in rank.kernels if r.rates.intensity and r.rates.flops_per_s]


def notebook_html(report: TraceReport, rows: int = 15) -> str:
    """The notebook view: the first rank's kernels on the roofline, its steps, classes and top kernels."""
    rank, main = report.ranks[0], _main_dtype(report)
    steps = rank.steps or [rank.total]
    parts = [roofline_svg(_svg_points(rank), report.peaks.get(main, max(report.peaks.values())), report.bandwidth,
                          main, f"Kernels of {Path(report.source).name} on {report.hardware}"),
             html_table("GPU time per step", [("window", False), ("busy", True), ("idle", True), ("HFU", True),
                                              ("MBU", True)],
                        [[s.label, seconds(s.busy_s), seconds(s.idle_s), share(s.hfu), share(s.mbu)] for s in steps]),
             html_table("GPU time by kernel class", [("class", False), ("time", True), ("share", True)],
                        [[c.klass, seconds(c.time_s), share(c.share)] for c in rank.total.by_class]),
             html_table(f"Kernels (the first {rows} by time)",
                        [("kernel", False), ("class", False), ("time", True), ("achieved", True), ("of peak", True),
                         ("of HBM", True)],
                        [[short_name(r.name), r.klass, seconds(r.rates.time_s), si(r.rates.flops_per_s, "FLOP/s")
                          if r.rates.flops_per_s else "-", share(r.rates.peak_fraction),
                          share(r.rates.bandwidth_fraction)] for r in rank.kernels[:rows]])]
    title = f"trace {Path(report.source).name} on {report.hardware}: {len(report.ranks)} rank(s)"
    return notebook_view(title, parts, list(report.notes) + list(rank.notes))


def trace_repr(report: TraceReport) -> str:
    """One line: the trace file, the hardware, the ranks, and the first rank's busy time and HFU."""
    t = report.ranks[0].total if report.ranks else None
    busy = f", busy {seconds(t.busy_s)} of {seconds(t.span_s)}, HFU {share(t.hfu)}" if t else ""
    return f"<rooflinekit trace {Path(report.source).name} on {report.hardware}: {len(report.ranks)} rank(s){busy}>"


def trace_text(report: TraceReport) -> str:
    """The text `rooflinekit trace` prints, its tables cut to 15 rows."""
    return render(top_rows(report, 15), "table", 100)


register_views(TraceReport, repr=trace_repr, text=trace_text, html=notebook_html)
