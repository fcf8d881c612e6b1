"""Reports in a notebook: a one-line `repr` and a small, self-contained HTML view (`_repr_html_`).

The HTML view is real tables (numbers right-aligned in tabular figures, units in the headers, every
number through rooflinekit.core.units) and, for a profile and a sweep, an inline SVG roofline
(rooflinekit.outputs.roofline_svg). It needs no script and no stylesheet of the page: alignment is
in each cell's own `style` (a notebook front end that drops the <style> block loses only the
borders and padding). Every text goes through html.escape. The tables show the largest rows
(folded layers as in the text report); `to_dataframe()` has every row. The modules, attention,
sweep points, advice and plan tables are those of rooflinekit.outputs.columns (the plan's in
plan_columns): the text report's columns and cells under the page's longer names, or the notebook
columns a table names itself (the advice's, the plan's); headers wrap before the table overflows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.plan import PlanResult
from rooflinekit.core.report import Report
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.core.units import plain, ratio, seconds, share, si
from rooflinekit.outputs.advice_columns import ADVICE
from rooflinekit.outputs.columns import (
    ATTENTION,
    MODULES,
    Col,
    View,
    notebook_columns,
    notebook_header,
    notebook_rows,
)
from rooflinekit.outputs.plan_columns import PLAN, rate_cell
from rooflinekit.outputs.plan_view import figures, targets_words
from rooflinekit.outputs.roofline_svg import Point, roofline_svg
from rooflinekit.outputs.sections import attention_groups, has_states, module_lines
from rooflinekit.outputs.sweep_columns import SWEEP_POINTS
from rooflinekit.outputs.words import deployment_words

#: Rows each table shows before "N more rows" (the DataFrame has them all).
TOP = 15
#: Cosmetics only, scoped to the view; alignment is in each cell's style attribute.
STYLE = ("<style>.rk-nb table{border-collapse:collapse;margin:4px 0 12px 0;font-size:12px}"
         ".rk-nb th,.rk-nb td{padding:2px 8px;border:none}.rk-nb td{white-space:nowrap}"
         ".rk-nb th{border-bottom:1px solid #999;font-weight:600;vertical-align:bottom}"
         ".rk-nb tbody tr:nth-child(even){background:rgba(127,127,127,.08)}"
         ".rk-nb caption{caption-side:top;text-align:left;font-weight:600;padding:4px 0}</style>")
_TABLE = 'style="border-collapse:collapse;margin-left:0;margin-right:0;table-layout:auto"'
_NUM = 'style="text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap"'
_TEXT = 'style="text-align:left;white-space:nowrap"'
#: Headers may wrap between words, so that a wide table fits the output by wrapping its headers first.
_HEAD_NUM = 'style="text-align:right;vertical-align:bottom"'
_HEAD_TEXT = 'style="text-align:left;vertical-align:bottom"'


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def html_table(caption: str, columns: list[tuple[str, bool]], rows: list[list[str]], cls: str = "",
               hints: Sequence[str] = ()) -> str:
    """A table: `columns` as (header, numeric); numeric columns are right-aligned. `hints`, where
    given, are the headers' hover texts."""
    titles = [f' title="{_e(h)}"' if h else "" for h in hints] or [""] * len(columns)
    head = "".join(f"<th {_HEAD_NUM if n else _HEAD_TEXT}{t}>{_e(h)}</th>" for (h, n), t in zip(columns, titles, strict=True))
    body = "".join("<tr>" + "".join(f"<td {_NUM if n else _TEXT}>{_e(v)}</td>"
                                    for v, (_, n) in zip(row, columns, strict=True)) + "</tr>" for row in rows)
    return (f'<div style="overflow-x:auto;max-width:100%"><table class="{_e(cls)}" {_TABLE}><caption>'
            f"{_e(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def _more(count: int, what: str, call: str) -> str:
    return f'<p style="margin:0 0 10px 0;font-size:12px;color:#666">{count} more {_e(what)}: {_e(call)}</p>' \
        if count > 0 else ""


def _notes(notes: list[str], warnings: list[str]) -> str:
    out = "".join(f'<p style="margin:2px 0;color:#b00020">warning: {_e(w)}</p>' for w in warnings)
    if notes:
        items = "".join(f"<li>{_e(n)}</li>" for n in notes)
        out += (f'<details style="font-size:12px;margin:4px 0"><summary>notes ({len(notes)})</summary>'
                f'<ul style="margin:4px 0">{items}</ul></details>')
    return out


def _wrap(title: str, parts: list[str]) -> str:
    return (f'<div class="rk-nb" style="font-family:system-ui,-apple-system,\'Segoe UI\',Helvetica,Arial,'
            f'sans-serif;font-size:13px;line-height:1.35">{STYLE}<div style="font-weight:600;font-size:14px;'
            f'margin:2px 0 6px 0">{_e(title)}</div>' + "".join(parts) + "</div>")


def notebook_view(title: str, parts: list[str], notes: list[str] = (), warnings: list[str] = ()) -> str:
    """A notebook view of a report this module does not know (a trace's): its title, its parts
    (html_table, roofline_svg), then its notes and warnings."""
    return _wrap(title, [*parts, _notes(list(notes), list(warnings))])


# -- one line --------------------------------------------------------------------------------------


def _where(model, workload_words: str, hardware: str, deployment, dtype: str) -> str:
    words = deployment_words(deployment, dtype)
    return f"{model.name or '?'} {workload_words} on {hardware}" + (f", {words}" if words else "")


def _step_words(w) -> str:
    if getattr(w, "mix", None) or getattr(w, "chunk", None):
        return f"{w.phase} B={w.batch} S={w.context}"
    q = f" q_len={w.q_len}" if w.phase == "decode" and w.q_len > 1 else ""
    return f"{w.phase} B={w.batch} S={w.context}{q}"


def report_repr(report: Report) -> str:
    """`<Report llama_gqa decode B=4 S=32768 on H800 SXM5, TP 2: step 371 us bound (memory-bound)>`."""
    t = report.totals
    binding = t.binding if t.binding and t.binding != "none" else t.bound
    return (f"<Report {_where(report.model, _step_words(report.workload), report.hardware.name, report.deployment, report.workload.dtype)}: "
            f"step {seconds(t.time_bound_s)} bound ({binding}-bound)>")


def _list(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


def sweep_repr(sweep: SweepReport) -> str:
    """`<SweepReport llama_gqa decode B=1,4 S=4096,32768 on H800 SXM5: 4 points; critical batch ...>`."""
    w = sweep.workload
    crit = "; ".join(f"S={c.context}: critical batch {c.critical_batch}" if c.critical_batch is not None
                     else f"S={c.context}: no critical batch up to {c.max_batch or '?'}" for c in sweep.critical_batch[:3])
    return (f"<SweepReport {_where(sweep.model, f'{w.phase} B={_list(w.batches)} S={_list(w.contexts)}', sweep.hardware.name, sweep.deployment, w.dtype)}: "
            f"{len(sweep.points)} points" + (f"; {crit}" if crit else "") + ">")


def advice_repr(advice: AdviceReport) -> str:
    """`<AdviceReport llama_gqa decode B=4 S=32768 on H800 SXM5: baseline 1.2 ms (memory-bound); best: ...>`."""
    b = advice.baseline
    best = advice.levers[0] if advice.levers else None
    tail = (f"; best: {best.lever} ({ratio(best.speedup)}x tokens/s)" if best is not None and best.speedup else "")
    return (f"<AdviceReport {_where(advice.model, _step_words(advice.workload), advice.hardware.name, advice.deployment, advice.workload.dtype)}: "
            f"baseline {seconds(b.predicted_step_s)} ({b.binding}-bound), {len(advice.levers)} levers{tail}>")


# -- a profile ----------------------------------------------------------------------------------------


def _radius(share_of_step: float) -> float:
    return round(max(2.5, min(14.0, 14.0 * math.sqrt(max(share_of_step, 0.0)))), 1)


def report_points(report: Report) -> list[Point]:
    """The step, the modules (folded layers) and each attention layer as executed and at its minimum."""
    t, pts = report.totals, []
    for m in module_lines(report, True):
        if m.intensity and m.bytes and m.flops:
            flops = min(report.hardware.peak_flops, m.intensity * report.hardware.bandwidth)
            pts.append(Point(m.intensity, flops, "module", f"{m.name}: {ratio(m.intensity)} FLOP/B, {m.bound}-bound, "
                             f"{seconds(m.time_bound_ops_s)} ({share(m.time_share)} of the step)",
                             _radius(m.time_share)))
    for a, label, count in attention_groups(report, True):
        for kind, p in (("attention", a.placement_executed), ("attention_min", a.placement_min)):
            if p is not None and p.intensity:
                pts.append(Point(p.intensity, p.attainable_flops, kind,
                                 f"{label} ({'executed' if kind == 'attention' else 'minimum'}): "
                                 f"{ratio(p.intensity)} FLOP/B, {seconds(p.time_bound_s * count)}", 5.0))
    if t.intensity:
        pts.append(Point(t.intensity, t.attainable_flops, "step", f"the step: {ratio(t.intensity)} FLOP/B, "
                         f"{t.bound}-bound, {seconds(t.time_bound_s)}", 7.0, "step"))
    return pts


def totals_table(report: Report) -> str:
    """The whole step, one figure a row (its unit in its name)."""
    t, hw = report.totals, report.hardware
    rows = [("FLOP executed", si(t.flops)), ("FLOP model", si(t.flops_model)), ("bytes moved [B]", si(t.bytes, "B")),
            ("of which weights [B]", si(t.weight_bytes, "B")), ("of which KV cache [B]", si(t.kv_bytes_executed, "B")),
            ("intensity [FLOP/B]", ratio(t.intensity)), ("ridge [FLOP/B]", plain(hw.ridge, 4)),
            ("bound", f"{t.bound}-bound" + (f", {t.binding} binds" if t.binding not in ("none", t.bound) else "")),
            ("step bound [s]", seconds(t.time_bound_s)), ("predicted step, sum of op bounds [s]", seconds(t.predicted_step_s))]
    if t.expected_step_s:
        rows.append(("expected step [s]", seconds(t.expected_step_s)))
        if t.expected_low_s is not None:
            rows.append(("expected p10-p90 [s]", f"{seconds(t.expected_low_s)} to {seconds(t.expected_high_s)}"))
        if t.engine_host_s is not None:
            rows.append(("engine host time in it [s]", seconds(t.engine_host_s)))
        if t.overlap_hidden_s is not None:
            rows.append(("hidden by two-batch overlap [s]", seconds(t.overlap_hidden_s)))
    if t.tokens_per_s:
        rows.append(("tokens/s at the predicted step", si(t.tokens_per_s)))
    rows.append(("MFU bound [%]", share(t.mfu_bound)))
    m = report.memory
    if m is not None and m.fits is not None:
        rows.append(("memory per GPU [B]", f"{si(m.total_bytes, 'B')}, {'fits' if m.fits else 'does NOT fit'}"))
    return html_table("The step", [("figure", False), ("value", True)], [list(r) for r in rows], "rk-totals")


def column_table(caption: str, cols: Sequence[Col], view: View, rows: Sequence[Any], cls: str) -> str:
    """A table of rooflinekit.outputs.columns: the notebook's columns and cells (the text report's
    unless the table names its own; right-aligned where aligned right) under their notebook headers,
    each explained on hover."""
    kept = notebook_columns(cols, view)
    heads = [(notebook_header(c, view), c.align == "right") for c in kept]
    return html_table(caption, heads, notebook_rows(cols, view, rows), cls, [c.hint or c.legend(view) for c in kept])


def modules_table(report: Report) -> str:
    """The modules, most expensive first, identical layers folded, as the text report has them."""
    lines = module_lines(report, True)
    view = View(report, measured=report.totals.measured is not None)
    return (column_table("Modules (by time bound; identical layers folded: xN)", MODULES, view, lines[:TOP],
                         "rk-modules")
            + _more(len(lines) - TOP, "modules", 'report.to_dataframe("modules")'))


def attention_html(report: Report) -> str:
    """The attention / mixer layers, identical layers folded, per layer as the text report has them."""
    groups = attention_groups(report, True)
    if not groups:
        return ""
    view = View(report, states=has_states(report))
    return (column_table("Attention and mixer layers (per layer; identical layers folded: xN)", ATTENTION, view,
                         groups[:TOP], "rk-attention")
            + _more(len(groups) - TOP, "layer groups", 'report.to_dataframe("attention")'))


def report_html(report: Report) -> str:
    """The notebook view of a profile (module doc)."""
    hw = report.hardware
    title = report_repr(report)[1:-1]
    svg = roofline_svg(report_points(report), hw.peak_flops, hw.bandwidth, hw.dtype, f"Roofline of {title}")
    top = (f'<div style="display:flex;flex-wrap:wrap;gap:8px 24px;align-items:flex-start">{totals_table(report)}'
           f"<div>{svg}</div></div>")
    return _wrap(title, [top, modules_table(report), attention_html(report),
                         _notes(list(report.notes), list(report.warnings))])


# -- a sweep and advice ---------------------------------------------------------------------------------


def sweep_html(sweep: SweepReport) -> str:
    """The notebook view of a sweep: its points on the roofline, one row per point, the critical batch."""
    hw = sweep.hardware
    data = sweep.to_dict()
    pts = [Point(p.intensity, p.attainable_flops, "point", f"B={p.batch} S={p.context}: {ratio(p.intensity)} FLOP/B, "
                 f"{seconds(p.predicted_step_s)}", 4.5) for p in sweep.points if p.intensity]
    title = sweep_repr(sweep)[1:-1]
    crit = [f"S={c.context}: {c.summary}" for c in sweep.critical_batch]
    return _wrap(title, [roofline_svg(pts, hw.peak_flops, hw.bandwidth, hw.dtype, f"Roofline of {title}"),
                         column_table("Points", SWEEP_POINTS, View(data), data["points"], "rk-points"),
                         "".join(f'<p style="margin:2px 0">critical batch: {_e(c)}</p>' for c in crit),
                         _notes(list(sweep.notes), list(sweep.warnings))])


def advice_html(advice: AdviceReport) -> str:
    """The notebook view of advice: the baseline and every lever, ranked as `rooflinekit advise` ranks them."""
    levers = [(0, advice.baseline), *enumerate(advice.levers, 1)]
    skipped = [f"{s.lever}: {s.reason}" for s in advice.skipped]
    return _wrap(advice_repr(advice)[1:-1], [column_table("Levers", ADVICE, View(advice), levers, "rk-levers"),
                                             _notes(skipped + list(advice.notes), list(advice.warnings))])


# -- a plan ------------------------------------------------------------------------------------------------


def plan_repr(plan: PlanResult) -> str:
    """`<PlanResult llama_gqa on 2 x H800: ISL 512, OSL 128, TPOT <= 2 ms: best agg TP 1 x2, ...>`."""
    best = plan.best_config
    name = plan.model.get("name") or plan.model.get("path") or "?"
    tail = (f"best {best.label()}: {rate_cell(best.tokens_per_s_per_gpu)} tokens/s per GPU" if best is not None
            else "no configuration meets the targets")
    return (f"<PlanResult {name} on {plan.gpus} x {plan.hardware}, {targets_words(plan)}: {tail}; "
            f"{len(plan.configs)} configurations, {len(plan.pareto)} on the Pareto front>")


def plan_html(plan: PlanResult) -> str:
    """The notebook view of a plan: the best configuration and the Pareto front as tables."""
    front = sorted(plan.pareto, key=lambda i: -(plan.configs[i].tokens_per_s_per_gpu or 0.0))
    rows = [(i, plan.configs[i]) for i in front]
    parts = []
    best = plan.best_config
    if best is not None:
        parts.append(html_table(f"Best: {best.label()}", [("figure", False), ("value", True)],
                                [list(f) for f in figures(best)], "rk-best"))
    elif plan.closest_miss:
        parts.append(f'<p style="margin:2px 0">closest: {_e(plan.closest_miss)}</p>')
    parts.append(column_table("Pareto front (tokens/s per GPU against per user; * the best)", PLAN, View(plan),
                              rows[:TOP], "rk-front"))
    parts.append(_more(len(rows) - TOP, "configurations on the front", "plan.to_dataframe()"))
    return _wrap(plan_repr(plan)[1:-1], parts + [_notes(list(plan.notes), list(plan.warnings))])
