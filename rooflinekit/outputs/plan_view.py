"""`rooflinekit plan` as CSV (one row per priced configuration) and as a self-contained HTML page.

The page is drawn in Python: its header, the best configuration's card, the Pareto chart as inline
SVG (x tokens/s per user, y tokens/s per GPU: every configuration that fits in memory, aggregated
and disaggregated in two colours, filled where it meets the targets, the Pareto front as a line,
the best ringed, the TPOT target as a vertical line) and the Pareto front's table. A small inline
script (outputs/html_assets/plan.js) adds the hover tooltips and the table's sorting; without it
the chart and the table still render. The same Content-Security-Policy as the profile page forbids
every fetch. Every text goes through html.escape; the script's JSON through the page's embedder.
"""

from __future__ import annotations

import dataclasses
import math
from html import escape

from rooflinekit.core.plan import PlanConfig, PlanResult
from rooflinekit.core.units import plain, seconds
from rooflinekit.core.version import __version__
from rooflinekit.outputs.columns import View, shown
from rooflinekit.outputs.csv_tables import table_csv
from rooflinekit.outputs.html import ASSETS, CSP, embed
from rooflinekit.outputs.plan_columns import PLAN, PLAN_CSV, front_rows, gb_cell, rate_cell
from rooflinekit.outputs.plan_io import as_plan

#: Colours of the two serving modes (the PNG uses the same).
MODE_COLOURS = {"aggregated": "#1f77b4", "disaggregated": "#d95f02"}
#: The SVG chart's size and its plot area's margins (left, right, top, bottom), in SVG units.
WIDTH, HEIGHT = 960, 520
MARGIN = (74, 24, 30, 52)


# -- CSV -------------------------------------------------------------------------------------------------


def plan_to_csv(result: PlanResult | dict) -> str:
    """The plan as CSV (the fields of rooflinekit.outputs.plan_columns.PLAN_CSV): a header row, then
    one row per priced configuration in `configs` order (plain numbers in SI base units: seconds,
    bytes, tokens/s; empty where a field is None)."""
    plan = as_plan(result)
    return table_csv(PLAN_CSV, View(plan), list(enumerate(plan.configs)))


# -- words and figures -------------------------------------------------------------------------------------


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def targets_words(plan: PlanResult) -> str:
    """The request and its targets in words: 'ISL 4096, OSL 1024, TPOT <= 20 ms'."""
    t = plan.targets
    parts = [f"ISL {t.isl}", f"OSL {t.osl}"]
    if t.prefix_hit:
        parts.append(f"prefix hit {t.prefix_hit:.0%}")
    if t.ttft_s is not None:
        parts.append(f"TTFT <= {seconds(t.ttft_s)}")
    if t.tpot_s is not None:
        parts.append(f"TPOT <= {seconds(t.tpot_s)}")
    if getattr(t, "at", "expected") == "p90" and (t.ttft_s is not None or t.tpot_s is not None):
        parts.append("met at p90")
    return ", ".join(parts)


def figures(c: PlanConfig) -> list[tuple[str, str]]:
    """A configuration's figures as (name, value) pairs: the tooltip's and the card's."""
    out = [("TTFT", seconds(c.ttft_s)), ("TPOT", seconds(c.tpot_s)),
           *([("TPOT p10-p90", f"{seconds(c.tpot_p10_s)} to {seconds(c.tpot_p90_s)}")] if c.tpot_p90_s else []),
           ("end to end", seconds(c.e2e_s)),
           ("tokens/s per GPU", rate_cell(c.tokens_per_s_per_gpu)), ("tokens/s per user", rate_cell(c.tokens_per_s_per_user)),
           ("memory per GPU", f"{gb_cell(c.memory_per_gpu_bytes)} of {gb_cell(c.usable_bytes)}"),
           ("binds", c.binding or "-"), ("GPUs", str(c.gpus))]
    if c.mode == "disaggregated" and c.prefill is not None and c.decode is not None:
        out.append(("pools (prefill:decode GPUs)", c.pool_ratio or "-"))
        out.append(("prefill step", seconds(c.prefill.step_s)))
        out.append(("decode step", f"{seconds(c.decode.step_s)}, batch {c.decode.batch}"))
    if c.speculative is not None:
        out.append(("tokens per verify step", plain(c.speculative.tokens_per_step, 3)))
    reason = (c.reject_reason or "-").removeprefix("target: ")
    out.append(("meets the targets", "yes" if c.meets_slo else f"no: {reason}"))
    return out


def _model_name(plan: PlanResult) -> str:
    return str(plan.model.get("name") or plan.model.get("path") or "model")


# -- the header and the best configuration -----------------------------------------------------------------


def _tile(label: str, value: str) -> str:
    return (f'<div class="rk-tile"><div class="rk-tile-value">{_e(value)}</div>'
            f'<div class="rk-tile-label">{_e(label)}</div></div>')


def _header(plan: PlanResult) -> str:
    t = plan.targets
    fits = sum(c.fits for c in plan.configs)
    meets = sum(c.meets_slo for c in plan.configs)
    tiles = [("model", _model_name(plan)), ("hardware", f"{plan.gpus} x {plan.hardware}"),
             ("input / output tokens (ISL / OSL)", f"{t.isl} / {t.osl}")]
    if t.prefix_hit:
        tiles.append(("prompt found in the prefix cache", f"{t.prefix_hit:.0%}"))
    tiles += [("TTFT target", seconds(t.ttft_s) if t.ttft_s is not None else "none"),
              ("TPOT target", seconds(t.tpot_s) if t.tpot_s is not None else "none"),
              ("candidates priced", f"{plan.candidates:,}"), ("fit in memory", f"{fits:,}"),
              ("meet the targets", f"{meets:,}"), ("on the Pareto front", f"{len(plan.pareto):,}")]
    return (f'<div class="rk-kicker">rooflinekit plan</div>\n<h1>{_e(_model_name(plan))} on {plan.gpus} x '
            f'{_e(plan.hardware)}: {_e(targets_words(plan))}</h1>\n'
            f'<div class="rk-tiles">{"".join(_tile(k, v) for k, v in tiles)}</div>\n')


def _card(title: str, c: PlanConfig, extra: str = "") -> str:
    rows = "".join(f"<dt>{_e(k)}</dt><dd class=\"rk-text\">{_e(v)}</dd>" for k, v in figures(c))
    return (f'<div class="rk-card rk-plan-best"><h2>{_e(title)}</h2>'
            f'<p class="rk-plan-label">{_e(c.label())}</p>{extra}<dl>{rows}</dl></div>\n')


def _best(plan: PlanResult) -> str:
    if plan.best is not None:
        body = _card("best configuration (meets the targets, most tokens/s per GPU)", plan.configs[plan.best])
    elif plan.closest is not None:
        miss = f'<p class="rk-plan-miss">misses the targets by {_e(plan.closest_miss or "?")}</p>'
        body = _card("none meets the targets: the closest", plan.configs[plan.closest], miss)
    else:
        body = '<div class="rk-card rk-plan-best"><h2>best configuration</h2><p>none: no configuration fits in memory</p></div>\n'
    return f'<section class="rk-plan-cards">{body}</section>\n'


def _lists(plan: PlanResult) -> str:
    out = ""
    if plan.warnings:
        items = "".join(f"<li>{_e(w)}</li>" for w in plan.warnings)
        out += f'<div class="rk-warnings"><h2>Warnings</h2><ul>{items}</ul></div>\n'
    if plan.notes:
        items = "".join(f"<li>{_e(n)}</li>" for n in plan.notes)
        out += f'<details class="rk-notes" open><summary>Notes</summary><ul>{items}</ul></details>\n'
    return out


# -- the Pareto chart (inline SVG) ---------------------------------------------------------------------------


def nice_ticks(top: float, count: int = 6) -> list[float]:
    """Ticks 0, step, 2 step, ... covering [0, top], step 1, 2 or 5 times a power of ten."""
    top = top if top > 0 else 1.0
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [k * step for k in range(int(math.ceil(top / step - 1e-9)) + 1)]


@dataclasses.dataclass(frozen=True)
class Frame:
    """The chart's linear axes: data (tokens/s per user, tokens/s per GPU) to SVG coordinates."""

    x_top: float
    y_top: float

    def x(self, value: float) -> float:
        left, right = MARGIN[0], WIDTH - MARGIN[1]
        return round(left + (right - left) * value / self.x_top, 1)

    def y(self, value: float) -> float:
        top, bottom = MARGIN[2], HEIGHT - MARGIN[3]
        return round(bottom - (bottom - top) * value / self.y_top, 1)


def drawn(plan: PlanResult) -> list[int]:
    """Indices of the configurations the chart draws: those that fit, with both rates."""
    return [i for i, c in enumerate(plan.configs)
            if c.fits and c.tokens_per_s_per_gpu is not None and c.tokens_per_s_per_user is not None]


def target_rate(plan: PlanResult) -> float | None:
    """Tokens/s per user the TPOT target asks for (1 / TPOT target), None without one."""
    t = plan.targets.tpot_s
    return 1.0 / t if t else None


def _axes(frame: Frame, xt: list[float], yt: list[float]) -> str:
    left, right, top, bottom = MARGIN[0], WIDTH - MARGIN[1], MARGIN[2], HEIGHT - MARGIN[3]
    out = [f'<rect class="rk-plot-bg" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"/>',
           '<g class="rk-grid">']
    out += [f'<line x1="{frame.x(v)}" y1="{top}" x2="{frame.x(v)}" y2="{bottom}"/>' for v in xt]
    out += [f'<line x1="{left}" y1="{frame.y(v)}" x2="{right}" y2="{frame.y(v)}"/>' for v in yt]
    out.append('</g><g class="rk-axes">')
    out += [f'<text x="{frame.x(v)}" y="{bottom + 16}" text-anchor="middle">{rate_cell(v)}</text>' for v in xt]
    out += [f'<text x="{left - 6}" y="{frame.y(v) + 4}" text-anchor="end">{rate_cell(v)}</text>' for v in yt]
    out.append(f'<text class="rk-axis-title" x="{(left + right) / 2}" y="{HEIGHT - 12}" text-anchor="middle">'
               'tokens/s per user (1 / TPOT)</text>')
    out.append(f'<text class="rk-axis-title" transform="translate(16 {(top + bottom) / 2}) rotate(-90)" '
               'text-anchor="middle">output tokens/s per GPU</text>')
    out.append(f'<rect class="rk-frame" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"/></g>')
    return "\n".join(out)


def _target_line(plan: PlanResult, frame: Frame) -> str:
    rate = target_rate(plan)
    if rate is None:
        return ""
    x, top, bottom = frame.x(rate), MARGIN[2], HEIGHT - MARGIN[3]
    right_half = x > (MARGIN[0] + WIDTH - MARGIN[1]) / 2
    anchor, dx = ("end", -5) if right_half else ("start", 5)
    return (f'<line class="rk-plan-target" x1="{x}" y1="{top}" x2="{x}" y2="{bottom}"/>'
            f'<text class="rk-label" x="{x + dx}" y="{top + 14}" text-anchor="{anchor}">TPOT target '
            f'{_e(seconds(plan.targets.tpot_s))} ({rate_cell(rate)} tokens/s per user)</text>')


def _points(plan: PlanResult, frame: Frame, indices: list[int]) -> str:
    order = sorted(indices, key=lambda i: plan.configs[i].meets_slo)  # hollow under filled
    out = ['<g class="rk-plan-points">']
    for i in order:
        c = plan.configs[i]
        colour = MODE_COLOURS.get(c.mode, "#7a7a7a")
        fill = colour if c.meets_slo else "#ffffff"
        out.append(f'<circle class="rk-point" data-i="{i}" cx="{frame.x(c.tokens_per_s_per_user)}" '
                   f'cy="{frame.y(c.tokens_per_s_per_gpu)}" r="4" fill="{fill}" stroke="{colour}" '
                   f'stroke-width="1.3" fill-opacity="0.75"/>')
    out.append("</g>")
    return "\n".join(out)


def _front_and_best(plan: PlanResult, frame: Frame) -> str:
    front = sorted(plan.pareto, key=lambda i: plan.configs[i].tokens_per_s_per_user or 0.0)
    pts = " ".join(f"{frame.x(plan.configs[i].tokens_per_s_per_user)},{frame.y(plan.configs[i].tokens_per_s_per_gpu)}"
                   for i in front if plan.configs[i].tokens_per_s_per_user is not None)
    out = f'<polyline class="rk-plan-front" points="{pts}"/>' if pts else ""
    if plan.best is not None:
        c = plan.configs[plan.best]
        x, y = frame.x(c.tokens_per_s_per_user), frame.y(c.tokens_per_s_per_gpu)
        right_half = x > (MARGIN[0] + WIDTH - MARGIN[1]) / 2
        anchor, dx = ("end", -13) if right_half else ("start", 13)
        out += (f'<circle class="rk-plan-best-ring" cx="{x}" cy="{y}" r="9"/>'
                f'<text class="rk-label rk-plan-best-tag" x="{x + dx}" y="{y - 8}" text-anchor="{anchor}">best</text>')
    return out


def chart_svg(plan: PlanResult) -> str:
    """The Pareto chart as an inline SVG element (module doc)."""
    indices = drawn(plan)
    if not indices:
        return '<p class="rk-caption">No configuration fits in memory: nothing to chart.</p>'
    xs = [plan.configs[i].tokens_per_s_per_user for i in indices] + [target_rate(plan) or 0.0]
    ys = [plan.configs[i].tokens_per_s_per_gpu for i in indices]
    xt, yt = nice_ticks(max(xs) * 1.04), nice_ticks(max(ys) * 1.06)
    frame = Frame(xt[-1], yt[-1])
    return (f'<svg id="rk-plan-svg" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'role="img" aria-label="Pareto chart: tokens/s per GPU against tokens/s per user">\n'
            f'{_axes(frame, xt, yt)}\n{_target_line(plan, frame)}\n{_points(plan, frame, indices)}\n'
            f'{_front_and_best(plan, frame)}\n</svg>')


def _legend(plan: PlanResult) -> str:
    keys = []
    for mode, colour in MODE_COLOURS.items():
        if any(c.mode == mode and c.fits for c in plan.configs):
            keys.append(f'<svg width="14" height="14"><circle cx="7" cy="7" r="5" fill="{colour}" stroke="{colour}"/>'
                        f'</svg>{_e(mode)}')
    keys.append('<svg width="14" height="14"><circle cx="7" cy="7" r="5" fill="#fff" stroke="#555" '
                'stroke-width="1.3"/></svg>hollow: misses the targets (filled: meets them)')
    keys.append('<svg width="22" height="14"><line x1="1" y1="7" x2="21" y2="7" stroke="#222" stroke-width="1.6"/>'
                '</svg>Pareto front')
    if plan.best is not None:
        keys.append('<svg width="22" height="22"><circle cx="11" cy="11" r="9" fill="none" stroke="#000" '
                    'stroke-width="2"/></svg>best')
    if target_rate(plan) is not None:
        keys.append('<svg width="14" height="22"><line x1="7" y1="1" x2="7" y2="21" stroke="#c0392b" '
                    'stroke-dasharray="4 3" stroke-width="1.5"/></svg>TPOT target')
    return '<div class="rk-legend">' + "".join(f'<span class="rk-legend-key">{k}</span>' for k in keys) + "</div>"


def _chart_section(plan: PlanResult) -> str:
    n = len(drawn(plan))
    return (f'<section class="rk-chart-section"><h2>Throughput against interactivity</h2>\n'
            f'<p class="rk-caption">{n:,} configuration{"s" if n != 1 else ""} that fit in memory; hover a point '
            f'for its configuration and figures.</p>\n{_legend(plan)}\n'
            f'<div class="rk-chart" id="rk-plan-chart">{chart_svg(plan)}'
            f'<div class="rk-tip" id="rk-tip" hidden></div></div></section>\n')


# -- the Pareto front's table ----------------------------------------------------------------------------------

def _sort_value(value) -> str:
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return "" if value is None else str(value)


def pareto_table(plan: PlanResult) -> str:
    """The Pareto front as a sortable table (one row per configuration on the front, by tokens/s
    per GPU descending; each cell carries its raw value for the script's sort)."""
    view = View(plan)
    cols = [(c, "text" if c.kind == "text" else "num") for c in shown(PLAN, view, "html")]
    head = "".join(f'<th class="{"rk-num" if kind == "num" else ""}" data-kind="{kind}"><button type="button">'
                   f'{_e(c.html)}<span class="rk-arrow"></span></button></th>' for c, kind in cols)
    rows = []
    for r in front_rows(plan):
        i = r[0]
        cells = "".join(f'<td class="{"rk-num" if kind == "num" else ""}" data-v="{_e(_sort_value(c.value(r, view)))}">'
                        f"{_e(c.page_text(r, view))}</td>" for c, kind in cols)
        best = " rk-plan-best-row" if i == plan.best else ""
        rows.append(f'<tr class="rk-clickable{best}" data-i="{i}">{cells}</tr>')
    return (f'<section class="rk-table-section"><h2>Pareto front</h2>\n<p class="rk-caption">{len(rows)} '
            'configurations no other beats on both tokens/s per GPU and tokens/s per user; click a header to sort, '
            'hover a row to find its point.</p>\n<div class="rk-scroll"><table class="rk-table" id="rk-plan-table">'
            f'<thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(rows) + "\n</tbody></table></div></section>\n")


# -- the page ---------------------------------------------------------------------------------------------------


def _tips(plan: PlanResult) -> dict:
    """The script's tooltips: per drawn configuration (by index), its label, mode and figures."""
    return {str(i): [plan.configs[i].label(), plan.configs[i].mode, figures(plan.configs[i])] for i in drawn(plan)}


def plan_to_html(result: PlanResult | dict) -> str:
    """The plan as one self-contained HTML page (module doc)."""
    plan = as_plan(result)
    css = (ASSETS / "report.css").read_text(encoding="utf-8") + (ASSETS / "plan.css").read_text(encoding="utf-8")
    js = (ASSETS / "plan.js").read_text(encoding="utf-8")
    title = f"rooflinekit plan: {_model_name(plan)} on {plan.gpus} x {plan.hardware}"
    body = (_header(plan) + _best(plan) + _lists(plan) + _chart_section(plan) + pareto_table(plan)
            + f'<div class="rk-foot">rooflinekit {_e(__version__)}; plan schema {_e(plan.schema_version)}; '
            f'searched in {plan.wall_s:.1f} s ({plan.captures} captures)</div>\n')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"rooflinekit {_e(__version__)}\">\n"
        f"<title>{_e(title).encode('ascii', 'xmlcharrefreplace').decode()}</title>\n<style>\n{css}</style>\n"
        f"</head>\n<body>\n<main id=\"rk-plan\">\n{body}</main>\n"
        f"<script id=\"rk-plan-data\" type=\"application/json\">{embed({'tips': _tips(plan)})}</script>\n"
        f"<script>\n{js}</script>\n</body>\n</html>\n"
    )
