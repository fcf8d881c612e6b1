"""Chart labels that never overlap: each placed beside its point where the renderer says it is free.

Labels are placed one by one, most important first. For each, offsets around its point are tried
at growing distances (eight directions each); the text's box is measured through the figure's
renderer and kept at the first offset where it lies inside the axes and overlaps no label placed
before it and no marker. Past the first rings a thin leader line joins label and point. A label
with no free place anywhere is left out and returned, so that the caller can say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Gaps tried between a marker's edge and its label, in points; from the third on, a leader line.
DISTANCES = (2.0, 7.0, 16.0, 30.0, 48.0, 72.0, 100.0, 135.0, 180.0)
LEADER_FROM = 2
#: Directions tried, in degrees counter-clockwise from the right.
ANGLES = (0, -35, 35, -90, 90, 180, -145, 145, -60, 60, -120, 120)


@dataclass
class Label:
    """One label to place: its point (data coordinates), text, colour and the marker's radius (points)."""

    x: float
    y: float
    text: str
    colour: str = "black"
    radius: float = 4.0
    fontsize: float = 7.0


def _overlaps(box, others, pad: float = 1.0) -> bool:
    for o in others:
        if (box.x0 - pad < o.x1 and o.x0 < box.x1 + pad and box.y0 - pad < o.y1 and o.y0 < box.y1 + pad):
            return True
    return False


def _inside(box, frame) -> bool:
    return box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1


def _alignment(angle: float) -> tuple[str, str]:
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    ha = "left" if c > 0.3 else "right" if c < -0.3 else "center"
    va = "bottom" if s > 0.3 else "top" if s < -0.3 else "center"
    return ha, va


def merge_close(ax, labels: list[Label], pixels: float = 4.0) -> list[Label]:
    """Labels whose points fall within `pixels` of each other on screen become one label, one line
    each (points drawn on top of each other get one list beside them, not a pile of texts)."""
    out: list[tuple[tuple[float, float], Label, list[str], set[str]]] = []
    for label in labels:
        px, py = ax.transData.transform((label.x, label.y))
        home = next((o for o in out if math.hypot(o[0][0] - px, o[0][1] - py) <= pixels), None)
        if home is None:
            out.append(((px, py), label, [label.text], {label.colour}))
        elif label.text not in home[2]:
            home[2].append(label.text)
            home[3].add(label.colour)
            home[1].radius = max(home[1].radius, label.radius)
    merged = []
    for _, label, texts, colours in out:
        merged.append(Label(label.x, label.y, "\n".join(texts), label.colour if len(colours) == 1 else "black",
                            label.radius, label.fontsize))
    return merged


def line_boxes(ax, xs: list[float], ys: list[float], step: float = 5.0, half: float = 1.5) -> list:
    """Small display-space boxes along a polyline (data coordinates), every `step` pixels: labels
    placed clear of them do not cross the line."""
    from matplotlib.transforms import Bbox

    pts = ax.transData.transform(list(zip(xs, ys, strict=True)))
    out = []
    for (x0, y0), (x1, y1) in zip(pts[:-1], pts[1:], strict=True):
        n = max(1, int(math.hypot(x1 - x0, y1 - y0) / step))
        for k in range(n + 1):
            x, y = x0 + (x1 - x0) * k / n, y0 + (y1 - y0) * k / n
            out.append(Bbox.from_extents(x - half, y - half, x + half, y + half))
    return out


def marker_boxes(ax, points: list[tuple[float, float, float]]) -> list:
    """Display-space boxes of markers: (x, y, radius in points) each."""
    from matplotlib.transforms import Bbox

    scale = ax.figure.dpi / 72.0
    out = []
    for x, y, r in points:
        px, py = ax.transData.transform((x, y))
        rr = r * scale
        out.append(Bbox.from_extents(px - rr, py - rr, px + rr, py + rr))
    return out


def place(ax, labels: list[Label], markers: list | None = None, taken: list | None = None) -> list[Label]:
    """Annotate `ax` with `labels` in order, none overlapping another or a marker box; returns the
    labels that found no free place (not drawn). `taken` (display boxes already used) grows."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    markers = list(markers or [])
    taken = taken if taken is not None else []
    scale = ax.figure.dpi / 72.0
    left_out = []
    for label in merge_close(ax, labels):
        px, py = ax.transData.transform((label.x, label.y))
        text = ax.annotate(label.text, (label.x, label.y), xytext=(0, 0), textcoords="offset points",
                           fontsize=label.fontsize, color=label.colour, zorder=6, annotation_clip=False)
        found = None
        for avoid_markers in (True, False):
            for ring, gap in enumerate(DISTANCES):
                dist = label.radius + gap
                for angle in ANGLES:
                    dx, dy = dist * math.cos(math.radians(angle)), dist * math.sin(math.radians(angle))
                    ha, va = _alignment(angle)
                    text.set_horizontalalignment(ha)
                    text.set_verticalalignment(va)
                    text.xyann = (dx, dy)
                    box = text.get_window_extent(renderer)
                    if not _inside(box, frame) or _overlaps(box, taken):
                        continue
                    if avoid_markers and _overlaps(box, markers, pad=0.0):
                        continue
                    found = (ring, box)
                    break
                if found:
                    break
            if found:
                break
        if not found:
            text.remove()
            left_out.append(label)
            continue
        ring, box = found
        taken.append(box)
        if ring >= LEADER_FROM:  # a thin line from the marker's edge to the nearest point of the box
            nx, ny = min(max(px, box.x0), box.x1), min(max(py, box.y0), box.y1)
            length = math.hypot(nx - px, ny - py) or 1.0
            sx = px + (nx - px) * label.radius * scale / length
            sy = py + (ny - py) * label.radius * scale / length
            inv = ax.transData.inverted()
            (x0, y0), (x1, y1) = inv.transform((sx, sy)), inv.transform((nx, ny))
            ax.plot([x0, x1], [y0, y1], "-", color=label.colour, linewidth=0.5, alpha=0.6, zorder=5)
    return left_out
