"""The page's data for one profile report: its chart (modules, attention layers, the whole step and
the roofs), its header (tiles and cards), its notes and its tables (rooflinekit.outputs.html_tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rooflinekit.core.report import Report
from rooflinekit.core.request import deployment_settings
from rooflinekit.core.units import seconds
from rooflinekit.outputs.columns import op_time
from rooflinekit.outputs.groups import Group, fold
from rooflinekit.outputs.html_data import (
    SeriesView,
    attainable,
    item,
    placed,
    point,
    quotient,
    roof,
    series,
)
from rooflinekit.outputs.html_tables import (
    attention_table,
    comm_table,
    mixer_kind,
    module_table,
    ops_table,
    uncounted_table,
)
from rooflinekit.outputs.words import (
    deployment_words,
    efficiency_name,
    options_words,
    request_words,
)


def _measured_tip(m) -> list[list]:
    if m is None or m.time_s is None:
        return []
    return [item("measured time", m.time_s, "time"), item("achieved", m.achieved_flops, "si", "FLOP/s"),
            item("MFU", m.mfu, "pct"), item("MBU", m.mbu, "pct")]


def module_points(report: Report, group: bool = True) -> dict:
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
    drawn, omitted = placed(rows)
    return series("modules", "modules", drawn, omitted, SeriesView(
        sized=True, hint=f"one point per module row; area proportional to its share of the predicted step "
                         f"({len(groups)} rows)" if step else ""))



def attention_points(report: Report) -> tuple[dict, dict]:
    step = report.totals.predicted_step_s
    executed, minimum = [], []
    for a in report.attention:
        pe, pm = a.placement_executed, a.placement_min
        share = quotient(op_time(report, a), step)
        common = [item("architecture", a.arch + (f"/{a.mode}" if a.mode else ""))]
        tip = [*common, item("FLOPs executed", a.flops_executed, "si", "FLOP"),
               item("bytes executed", a.bytes_executed, "si", "B"),
               item("intensity executed", a.intensity_executed, "num", "FLOP/B"), item("bound", pe.bound),
               item("attainable", pe.attainable_flops, "si", "FLOP/s"),
               item("time bound (sum of its ops)", op_time(report, a), "time"),
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
                       item("share of predicted step", quotient(pm.time_bound_s, step), "pct")]
            minimum.append((a.module, point(a.module, pm.intensity, pm.attainable_flops, tip_min,
                                            quotient(pm.time_bound_s, step))))
    kind = mixer_kind(report)
    drawn, omitted = placed(executed)
    s_exec = series("attention", f"{kind}, as executed", drawn, omitted,
                    SeriesView(sized=True, hint="one point per layer row, at the bytes its code moved",
                               suffix="executed"))
    drawn_min, omitted_min = placed(minimum)
    s_min = series("attention_min", f"{kind}, architecture minimum", drawn_min, omitted_min,
                   SeriesView(sized=True, link="attention", suffix="minimum",
                              hint="each recognised layer at its architecture's minimum bytes (cache read once), "
                                   "joined to its executed point"))
    return s_exec, s_min


def step_points(report: Report) -> list[dict]:
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
        p = point("whole step, fused", x, attainable(hw.peak_flops, hw.bandwidth, x), ftip)
        out.append(series("step_fused", "whole step, fused", [p] if p else []))
    return out


def report_roofs(report: Report, colour: str = "#444444", prefix: str = "") -> list[dict]:
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
             *(item(s.title, getattr(d, s.name)) for s in deployment_settings() if s.title)]
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
            item(f"expected step (efficiency {efficiency_name(report)})", t.expected_step_s, "time"),
            item("model-FLOP MFU bound", t.mfu_bound_model, "pct")]},
    ]
    if report.attention:
        cards.append({"title": mixer_kind(report).capitalize(), "items": [
            item("layers recognised", f"{at.recognised} of {at.layers}"),
            item("cache per token", at.cache_bytes_per_token, "si", "B"),
            item("KV executed", at.kv_bytes_executed, "si", "B"), item("KV minimum", at.kv_bytes_min, "si", "B"),
            item("executed / minimum", at.amplification, "num", "x"),
            item("intensity minimum", at.intensity_min, "num", "FLOP/B")]})
    cards += _optional_cards(report)
    return {"tiles": tiles, "cards": cards}


def memory_cards(report: Any) -> list[dict]:
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
    cards = memory_cards(report)
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



def profile_payload(report: Report, group_layers: bool = True) -> dict:
    """The page's data for one profile report (identical layers folded into one row unless
    `group_layers` is off)."""
    w, hw = report.workload, report.hardware
    chart_series = [module_points(report, group_layers), *attention_points(report), *step_points(report)]
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
            "chart": {"roofs": report_roofs(report), "series": chart_series,
                      "y_label": "achieved or attainable (TFLOP/s)" if report.totals.measured
                      else "attainable (TFLOP/s): the roofline bound"},
            "tables": tables}

