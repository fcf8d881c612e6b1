"""`rooflinekit plan`'s chart as a PNG (or SVG): the HTML page's Pareto chart drawn with matplotlib.

x is tokens/s per user (1 / TPOT), y output tokens/s per GPU, both linear from zero. Every
configuration that fits in memory is a point, aggregated and disaggregated in two colours, filled
where it meets the targets and hollow where it misses them; the Pareto front is a line, the best
configuration is ringed and labelled (placed where it stays inside the frame and clear of the
points, outputs/labels.py), the TPOT target a dashed vertical line.
"""

from __future__ import annotations

import io
import math

from rooflinekit.core.files import write_atomic
from rooflinekit.core.plan import PlanResult
from rooflinekit.core.units import seconds
from rooflinekit.outputs.labels import Label, line_boxes, marker_boxes, place
from rooflinekit.outputs.plan_io import as_plan
from rooflinekit.outputs.plan_view import MODE_COLOURS, drawn, target_rate, targets_words
from rooflinekit.outputs.plot import _matplotlib, check_target

#: The figure's size (inches) and resolution: a PNG of 1100 x 700 pixels.
FIGSIZE, DPI = (11.0, 7.0), 100
#: Marker area (points^2) of a configuration, and the best's ring.
AREA, AREA_BEST = 22.0, 160.0


def _plain(text: str) -> str:
    """Text matplotlib draws as it is (a '$' would start mathtext)."""
    return text.replace("$", r"\$")


def _scatter(ax, plan: PlanResult, indices: list[int]) -> list[tuple[float, float, float]]:
    """Draw the points (hollow under filled); returns their (x, y, radius in points)."""
    markers = []
    for mode, colour in MODE_COLOURS.items():
        for meets in (False, True):
            group = [plan.configs[i] for i in indices if plan.configs[i].mode == mode and plan.configs[i].meets_slo == meets]
            if not group:
                continue
            xs = [c.tokens_per_s_per_user for c in group]
            ys = [c.tokens_per_s_per_gpu for c in group]
            ax.scatter(xs, ys, s=AREA, facecolors=colour if meets else "white", edgecolors=colour,
                       linewidths=0.9, alpha=0.8, zorder=3 if meets else 2)
            markers += [(x, y, math.sqrt(AREA) / 2) for x, y in zip(xs, ys, strict=True)]
    return markers


def _legend(ax, plan: PlanResult) -> None:
    from matplotlib.lines import Line2D

    handles = []
    for mode, colour in MODE_COLOURS.items():
        if any(c.mode == mode and c.fits for c in plan.configs):
            handles.append(Line2D([], [], marker="o", linestyle="", color=colour, label=mode))
    handles.append(Line2D([], [], marker="o", linestyle="", color="grey", markerfacecolor="white",
                          label="hollow: misses the targets"))
    handles.append(Line2D([], [], color="#222222", linewidth=1.4, label="Pareto front"))
    if plan.best is not None:
        handles.append(Line2D([], [], marker="o", linestyle="", markersize=12, markerfacecolor="none",
                              markeredgecolor="black", markeredgewidth=1.8, label="best"))
    if target_rate(plan) is not None:
        handles.append(Line2D([], [], color="#c0392b", linestyle="--", linewidth=1.2,
                              label=f"TPOT target {seconds(plan.targets.tpot_s)}"))
    ax.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.92)


def plan_figure(result: PlanResult | dict):
    """The matplotlib Figure of the plan's Pareto chart (module doc); `fig.left_out` names a best
    label that found no free place."""
    from matplotlib.ticker import FuncFormatter

    Figure, FigureCanvasAgg = _matplotlib()
    plan = as_plan(result)
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    name = plan.model.get("name") or plan.model.get("path") or "model"
    ax.set_title(_plain(f"{name} on {plan.gpus} x {plan.hardware}: {targets_words(plan)}"), fontsize=10)
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(True, linewidth=0.4, alpha=0.5)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    indices = drawn(plan)
    rate = target_rate(plan)
    xs = [plan.configs[i].tokens_per_s_per_user for i in indices] + ([rate] if rate else []) + [1.0]
    ys = [plan.configs[i].tokens_per_s_per_gpu for i in indices] + [1.0]
    ax.set_xlim(0, max(xs) * 1.06)
    ax.set_ylim(0, max(ys) * 1.22)  # room above the points for the legend
    ax.set_autoscale_on(False)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.09, top=0.94)
    markers = _scatter(ax, plan, indices)
    keep_clear = []
    if rate is not None:
        ax.axvline(rate, color="#c0392b", linestyle="--", linewidth=1.2, zorder=1)
        keep_clear += line_boxes(ax, [rate, rate], [0, max(ys) * 1.22])
    front = sorted((plan.configs[i] for i in plan.pareto if i in set(indices)),
                   key=lambda c: c.tokens_per_s_per_user)
    if front:
        fx, fy = [c.tokens_per_s_per_user for c in front], [c.tokens_per_s_per_gpu for c in front]
        ax.plot(fx, fy, "-", color="#222222", linewidth=1.4, zorder=4)
        keep_clear += line_boxes(ax, fx, fy)
    _legend(ax, plan)
    fig.canvas.draw()  # the legend's box, so that the label keeps clear of it
    legend = [ax.get_legend().get_window_extent(fig.canvas.get_renderer())]
    fig.left_out = []
    if plan.best is not None:
        c = plan.configs[plan.best]
        ax.scatter([c.tokens_per_s_per_user], [c.tokens_per_s_per_gpu], s=AREA_BEST, facecolors="none",
                   edgecolors="black", linewidths=1.8, zorder=5)
        label = Label(c.tokens_per_s_per_user, c.tokens_per_s_per_gpu, _plain(f"best: {c.label()}"), "black",
                      math.sqrt(AREA_BEST) / 2, 8.5)
        fig.left_out = [lb.text for lb in place(ax, [label], marker_boxes(ax, markers) + keep_clear, legend)]
    return fig


def draw_plan(result: PlanResult | dict, fmt: str = "png") -> bytes:
    """The plan's chart as the bytes of a .png or .svg file (fixed size: FIGSIZE at DPI)."""
    buf = io.BytesIO()
    plan_figure(result).savefig(buf, format=fmt)
    return buf.getvalue()


def plot_plan(result: PlanResult | dict, path: str) -> int:
    """Draw the plan's Pareto chart to `path` (.png or .svg) atomically; returns the number of
    configurations drawn."""
    fmt = check_target(path)
    write_atomic(path, draw_plan(result, fmt))
    return len(drawn(as_plan(result)))
