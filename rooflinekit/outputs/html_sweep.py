"""The page's data for a sweep: every point on the chart (the selected batch and context drawn),
its points and critical-batch tables, and its header."""

from __future__ import annotations

from rooflinekit.core.sweep_report import SweepPoint, SweepReport
from rooflinekit.outputs.columns import View, page_rows
from rooflinekit.outputs.html_data import (
    SeriesView,
    TableView,
    attainable,
    col,
    item,
    point,
    roof,
    series,
    table,
)
from rooflinekit.outputs.html_tables import page_columns
from rooflinekit.outputs.sweep_columns import SWEEP_POINTS
from rooflinekit.outputs.words import deployment_words, options_words, request_words


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
    att = lambda x: attainable(hw.peak_flops, hw.bandwidth, x)  # noqa: E731
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
    view = View(sweep, memory=any(getattr(p, "memory", None) is not None for p in sweep.points))
    cols = page_columns(SWEEP_POINTS, view)
    rows = page_rows(SWEEP_POINTS, view, sweep.points)
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
