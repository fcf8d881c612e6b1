"""A roofline as one inline SVG element, for notebooks: log-log, arithmetic intensity (FLOP/B) across,
FLOP/s up, the hardware's roof (the HBM slope up to the ridge, then the dense peak), and the points
given. Every colour and size is an attribute (no stylesheet, no script), so the chart renders the
same in JupyterLab, VS Code, GitHub and a static nbconvert export; each point carries a <title>
(the browser's own tooltip). Every text goes through html.escape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from rooflinekit.core.units import plain, si

#: The chart's size and its plot area's margins (left, right, top, bottom), in SVG units (px).
WIDTH, HEIGHT = 560, 360
MARGIN = (62, 16, 14, 76)
#: Marker shape and colour per kind of point.
KINDS = {
    "step": ("diamond", "#d62728", "step"),
    "module": ("circle", "#1f77b4", "modules"),
    "attention": ("square", "#ff7f0e", "attention (executed)"),
    "attention_min": ("hollow", "#ff7f0e", "attention (minimum)"),
    "point": ("circle", "#1f77b4", "points"),
}
FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif\""


@dataclass(frozen=True)
class Point:
    """One point: `intensity` FLOP/B, `flops` FLOP/s, its kind (KINDS), its tooltip and its marker's
    radius (px); `label` is written beside it when given."""

    intensity: float
    flops: float
    kind: str
    title: str
    radius: float = 4.0
    label: str = ""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _decades(lo: float, hi: float) -> tuple[int, int]:
    return math.floor(math.log10(lo)), math.ceil(math.log10(hi))


@dataclass(frozen=True)
class Axes:
    """Log-log axes: decades [x0, x1] of FLOP/B and [y0, y1] of FLOP/s onto the plot area."""

    x0: int
    x1: int
    y0: int
    y1: int

    def x(self, value: float) -> float:
        left, right = MARGIN[0], WIDTH - MARGIN[1]
        return round(left + (right - left) * (math.log10(value) - self.x0) / (self.x1 - self.x0), 1)

    def y(self, value: float) -> float:
        top, bottom = MARGIN[2], HEIGHT - MARGIN[3]
        return round(bottom - (bottom - top) * (math.log10(value) - self.y0) / (self.y1 - self.y0), 1)


def axes_for(points: list[Point], peak: float, bandwidth: float) -> Axes:
    """Decades that hold every point, the ridge and the peak (at least two decades each way)."""
    ridge = peak / bandwidth
    xs = [p.intensity for p in points] + [ridge / 10, ridge * 10]
    x0, x1 = _decades(min(xs), max(xs))
    ys = [p.flops for p in points] + [peak * 1.2, bandwidth * 10 ** x0]
    y0, y1 = _decades(min(ys), max(ys))
    return Axes(x0, max(x1, x0 + 2), min(y0, y1 - 2), y1)


def _tick(value: float, unit: str) -> str:
    return si(value, unit) if value >= 1000 else plain(value, 3)


def _frame(ax: Axes) -> list[str]:
    left, right, top, bottom = MARGIN[0], WIDTH - MARGIN[1], MARGIN[2], HEIGHT - MARGIN[3]
    out = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fafafa" '
           'stroke="#888" stroke-width="1"/>']
    for d in range(ax.x0, ax.x1 + 1):
        x = ax.x(10.0 ** d)
        out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#e2e2e2"/>')
        out.append(f'<text x="{x}" y="{bottom + 15}" text-anchor="middle">{_e(_tick(10.0 ** d, ""))}</text>')
    for d in range(ax.y0, ax.y1 + 1):
        y = ax.y(10.0 ** d)
        out.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#e2e2e2"/>')
        out.append(f'<text x="{left - 5}" y="{y + 4}" text-anchor="end">{_e(si(10.0 ** d, ""))}</text>')
    out.append(f'<text x="{(left + right) / 2}" y="{bottom + 32}" text-anchor="middle" font-size="12">'
               'arithmetic intensity (FLOP/B, log)</text>')
    out.append(f'<text transform="translate(13 {(top + bottom) / 2}) rotate(-90)" text-anchor="middle" '
               'font-size="12">attainable FLOP/s (log)</text>')
    return out


def _roof(ax: Axes, peak: float, bandwidth: float, dtype: str) -> list[str]:
    ridge = peak / bandwidth
    lo = 10.0 ** ax.x0
    start = max(lo, 10.0 ** ax.y0 / bandwidth)
    pts = f"{ax.x(start)},{ax.y(bandwidth * start)} {ax.x(ridge)},{ax.y(peak)} {ax.x(10.0 ** ax.x1)},{ax.y(peak)}"
    xr, yp = ax.x(ridge), ax.y(peak)
    return [f'<polyline points="{pts}" fill="none" stroke="#222" stroke-width="2"/>',
            f'<line x1="{xr}" y1="{yp}" x2="{xr}" y2="{HEIGHT - MARGIN[3]}" stroke="#888" stroke-dasharray="3 3"/>',
            f'<text x="{xr + 4}" y="{HEIGHT - MARGIN[3] - 5}" font-size="10" fill="#555">ridge '
            f'{_e(plain(ridge, 4))} FLOP/B</text>',
            f'<text x="{WIDTH - MARGIN[1] - 4}" y="{yp - 5}" text-anchor="end" font-size="10" fill="#333">'
            f'peak {_e(si(peak, "FLOP/s"))} {_e(dtype)}, HBM {_e(si(bandwidth, "B/s"))}</text>']


def _marker(shape: str, colour: str, x: float, y: float, r: float) -> str:
    if shape == "diamond":
        d = r * 1.4
        return (f'<path d="M{x} {round(y - d, 1)}L{round(x + d, 1)} {y}L{x} {round(y + d, 1)}L{round(x - d, 1)} '
                f'{y}Z" fill="{colour}" stroke="#fff" stroke-width="1"')
    if shape in ("square", "hollow"):
        fill = "none" if shape == "hollow" else colour
        return (f'<rect x="{round(x - r, 1)}" y="{round(y - r, 1)}" width="{round(2 * r, 1)}" '
                f'height="{round(2 * r, 1)}" fill="{fill}" stroke="{colour}" stroke-width="1.5" fill-opacity="0.8"')
    return f'<circle cx="{x}" cy="{y}" r="{r}" fill="{colour}" fill-opacity="0.7" stroke="#fff" stroke-width="0.8"'


def _points(ax: Axes, points: list[Point]) -> list[str]:
    out = []
    for p in sorted(points, key=lambda p: (p.kind == "step", -p.radius)):  # small on large, the step on top
        shape, colour, _ = KINDS.get(p.kind, KINDS["point"])
        x, y = ax.x(p.intensity), ax.y(p.flops)
        out.append(f'<g data-kind="{_e(p.kind)}">{_marker(shape, colour, x, y, p.radius)}>'
                   f'<title>{_e(p.title)}</title></{_closing(shape)}></g>')
        if p.label:
            out.append(f'<text x="{round(x + p.radius + 4, 1)}" y="{round(y + 4, 1)}" font-size="11" '
                       f'fill="{colour}">{_e(p.label)}</text>')
    return out


def _closing(shape: str) -> str:
    return {"diamond": "path", "square": "rect", "hollow": "rect"}.get(shape, "circle")


def _legend(points: list[Point]) -> list[str]:
    kinds = [k for k in KINDS if any(p.kind == k for p in points)]
    out, x, y = [], MARGIN[0], HEIGHT - 18
    for k in kinds:
        shape, colour, words = KINDS[k]
        out.append(_marker(shape, colour, x + 5, y - 4, 4.5) + "/>")
        out.append(f'<text x="{x + 14}" y="{y}">{_e(words)}</text>')
        x += 28 + 6.2 * len(words)
    return out


def roofline_svg(points: list[Point], peak: float, bandwidth: float, dtype: str, title: str = "") -> str:
    """The chart (module doc) as one <svg> element; `title` is its accessible name."""
    points = [p for p in points if p.intensity and p.intensity > 0 and p.flops and p.flops > 0
              and math.isfinite(p.intensity) and math.isfinite(p.flops)]
    if not (peak > 0 and bandwidth > 0):
        return ""
    ax = axes_for(points, peak, bandwidth)
    body = _frame(ax) + _roof(ax, peak, bandwidth, dtype) + _points(ax, points) + _legend(points)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="rk-roofline" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_e(title or "roofline")}" font-size="11" '
            f'{FONT} style="max-width:100%;height:auto;background:#fff">'
            f'<title>{_e(title or "roofline")}</title>' + "".join(body) + "</svg>")
