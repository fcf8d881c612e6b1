"""The advise chart: each lever as a move from the current step on the latency/throughput plane.

x is the predicted step time, y the tokens per second (log-log): a lever that shortens the step
moves left, one that serves more tokens moves up; a larger batch moves up and right. An arrow runs
from the baseline to each lever's point, coloured by what binds afterwards (compute, memory,
communication, capacity); a hollow marker does not fit in memory. Every number is the advise
report's own (`predicted_step_s`, `tokens_per_s`, `speedup`, `binding`, `fits`).
"""

from __future__ import annotations

import io
import math

import click

from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.files import write_atomic
from rooflinekit.core.units import ratio, seconds, si
from rooflinekit.outputs.labels import Label, line_boxes, marker_boxes, place
from rooflinekit.outputs.plot import _matplotlib, _style, check_target
from rooflinekit.outputs.words import request_words

BINDING_COLOURS = {"compute": "C2", "memory": "C0", "communication": "C1", "capacity": "C3"}
#: Marker area (points^2) of the baseline and of each lever.
AREA_BASE, AREA_LEVER = 90.0, 45.0


def _dict(advice: AdviceReport | dict) -> dict:
    return advice if isinstance(advice, dict) else advice.to_dict()


def moves(advice: AdviceReport | dict) -> tuple[dict, list[dict], list[str]]:
    """(baseline, levers that can be drawn, names of those that cannot: no tokens/s or no time)."""
    data = _dict(advice)
    drawn, left = [], []
    for lever in data["levers"]:
        ok = lever.get("tokens_per_s") and lever.get("predicted_step_s")
        (drawn if ok and lever["tokens_per_s"] > 0 and lever["predicted_step_s"] > 0 else left).append(lever)
    return data["baseline"], drawn, [lv["lever"] for lv in left]


def advice_figure(advice: AdviceReport | dict):
    """The matplotlib Figure of the advise chart."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch

    Figure, FigureCanvasAgg = _matplotlib()
    data = _dict(advice)
    base, levers, _ = moves(data)
    w, hw = data["workload"], data["hardware"]
    fig = Figure(figsize=(11, 7.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    words = request_words(w["dtype"], data.get("deployment"), w.get("q_len") if w["phase"] == "decode" else None,
                          w.get("options"))
    _style(ax, f"{hw['name']}: {(data.get('model') or {}).get('name') or '?'}, {w['phase']}, batch {w['batch']}, "
               f"context {w['context']}{words}: levers from the current step",
           "predicted step time (ms)", "tokens/s")
    points = [(base["predicted_step_s"] * 1e3, base["tokens_per_s"])] + \
             [(lv["predicted_step_s"] * 1e3, lv["tokens_per_s"]) for lv in levers]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    ax.set_xlim(min(xs) / 2.5, max(xs) * 2.5)
    ax.set_ylim(min(ys) / 2.5, max(ys) * 2.5)
    ax.set_autoscale_on(False)
    bx, by = points[0]
    markers = [(bx, by, math.sqrt(AREA_BASE) / 2)]
    labels = [Label(bx, by, f"now: {seconds(base['predicted_step_s'])}, {si(base['tokens_per_s'])} tokens/s",
                    "black", math.sqrt(AREA_BASE) / 2, 8.0)]
    for lv, (x, y) in zip(levers, points[1:], strict=True):
        colour = BINDING_COLOURS.get(lv["binding"], "C7")
        ax.add_patch(FancyArrowPatch((bx, by), (x, y), arrowstyle="-|>", mutation_scale=9, color=colour,
                                     linewidth=0.9, alpha=0.7, shrinkA=5, shrinkB=4, zorder=3))
        fits = lv.get("fits") is not False
        ax.scatter([x], [y], s=AREA_LEVER, marker="o", zorder=4, facecolors=colour if fits else "none",
                   edgecolors=colour if not fits else "black", linewidths=1.2 if not fits else 0.4)
        markers.append((x, y, math.sqrt(AREA_LEVER) / 2))
        labels.append(Label(x, y, f"{lv['lever']} (x{ratio(lv['speedup'])})", colour, math.sqrt(AREA_LEVER) / 2))
    ax.scatter([bx], [by], s=AREA_BASE, marker="*", color="black", zorder=5)
    handles = [Line2D([], [], marker="*", color="black", linestyle="", markersize=10, label="the step now")]
    for binding in dict.fromkeys(lv["binding"] for lv in levers):
        handles.append(Line2D([], [], marker="o", color=BINDING_COLOURS.get(binding, "C7"), linestyle="",
                              label=f"after the lever, {binding} binds"))
    if any(lv.get("fits") is False for lv in levers):
        handles.append(Line2D([], [], marker="o", color="grey", markerfacecolor="none", linestyle="",
                              label="does not fit in memory"))
    fig.legend(handles=handles, fontsize=7, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 0.0))
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=0.61 / height, top=1 - 0.34 / height)
    arrows = [b for x, y in points[1:] for b in line_boxes(ax, [bx, x], [by, y])]
    left = place(ax, labels, marker_boxes(ax, markers) + arrows, [])
    fig.left_out = [lb.text for lb in left]
    return fig


def write_advice_plot(advice: AdviceReport | dict, path: str) -> int:
    """Draw the advise chart to `path` (.png/.svg) atomically; returns the number of levers drawn.
    Levers without tokens/s or step time are named on stderr."""
    fmt = check_target(path)
    fig = advice_figure(advice)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    write_atomic(path, buf.getvalue())
    _, drawn, left = moves(advice)
    if left:
        click.echo(f"{len(left)} lever(s) not drawn (no step time or tokens/s): {', '.join(left)}", err=True)
    if fig.left_out:
        click.echo(f"{len(fig.left_out)} label(s) left off the chart (no free place): {', '.join(fig.left_out)}",
                   err=True)
    return len(drawn)
