"""The page's data for a comparison of two profile reports: both on one chart, A and B side by side."""

from __future__ import annotations

from rooflinekit.core.report import Report
from rooflinekit.outputs.html_data import (
    AB_COLOURS,
    SeriesView,
    TableView,
    col,
    item,
    quotient,
    series,
    table,
)
from rooflinekit.outputs.html_profile import (
    attention_points,
    module_points,
    report_roofs,
    step_points,
)
from rooflinekit.outputs.words import deployment_words, options_words

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
        mods = module_points(report)
        att, _ = attention_points(report)
        step = step_points(report)[0]
        for s, sid, label in ((mods, "modules", "modules"), (att, "attention", "attention layers, as executed"),
                              (step, "step", "whole step")):
            if s["points"] or s["omitted"]:
                chart_series.append(series(f"{tag}_{sid}", f"{tag}: {label}", s["points"], s["omitted"],
                                           SeriesView(style=sid, colour=colour, sized=s["sized"], tag=tag)))
        roof_colour, prefix = ("#444444", "") if same else (colour, f"{tag}: ")
        for r in report_roofs(report, colour=roof_colour, prefix=prefix):
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
    header["tiles"].append(item("step A/B", quotient(step_a, step_b), "num", "x"))
    return {"kind": "compare", "title": f"compare: {comparison['a']['path']} (A) vs {comparison['b']['path']} (B)",
            "header": header, "warnings": [f"A: {x}" for x in a.warnings] + [f"B: {x}" for x in b.warnings],
            "notes": list(comparison.get("notes", [])), "conventions": [],
            "chart": {"roofs": roofs, "series": chart_series, "y_label": "attainable (TFLOP/s): the roofline bound"},
            "tables": [table("compare", "A and B side by side", cols, rows, TableView(caption="every ratio is A/B"))]}
