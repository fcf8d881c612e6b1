"""Time on the GPU: the union of event intervals over all streams, step windows, and the busy,
idle and per-class times of a window. Microseconds throughout, as the trace records them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rooflinekit.trace.events import Step


def merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals (start, end) merged where they overlap or touch, in time order."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total time covered by at least one interval (overlaps counted once)."""
    return sum(end - start for start, end in merged(intervals))


def clipped(intervals: Iterable[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The parts of the intervals inside [start, end]."""
    return [(max(s, start), min(e, end)) for s, e in intervals if e > start and s < end]


@dataclass(frozen=True)
class Window:
    """A stretch of the trace the report sums over: one ProfilerStep, all of them, or the whole
    trace when it has no steps."""

    label: str
    start: float
    end: float
    step: int | None = None

    @property
    def span(self) -> float:
        return self.end - self.start

    def holds(self, ts: float) -> bool:
        return self.start <= ts < self.end


def windows(steps: list[Step], first: float, last: float, only: int | None = None) -> list[Window]:
    """One window per ProfilerStep (only step `only` if given), else the span first..last."""
    if not steps:
        return [Window("trace", first, last)]
    chosen = [s for s in steps if only is None or s.number == only]
    return [Window(f"step {s.number}", s.ts, s.end, s.number) for s in chosen]


@dataclass(frozen=True)
class Busy:
    """How one window's GPU time splits: busy (some stream runs), idle, and the kernels' own sum."""

    span_us: float
    busy_us: float
    kernel_sum_us: float

    @property
    def idle_us(self) -> float:
        return max(0.0, self.span_us - self.busy_us)

    @property
    def busy_share(self) -> float | None:
        return self.busy_us / self.span_us if self.span_us > 0 else None


def busy_in(window: Window, intervals: list[tuple[float, float]]) -> Busy:
    """Busy time of `window`: the union of the intervals clipped to it, over all streams."""
    inside = clipped(intervals, window.start, window.end)
    return Busy(window.span, union_length(inside), sum(e - s for s, e in inside))


@dataclass(frozen=True)
class SpanBreakdown:
    """Holistic Trace Analysis's temporal breakdown of a set of GPU events: the span from the first
    start to the last end, the idle part of it, and the union of the events of each group."""

    span_us: float
    idle_us: float
    by_group_us: dict[str, float]


def span_breakdown(events: list[tuple[float, float, str]]) -> SpanBreakdown:
    """(start, end, group) events: span, idle = span - union, and the union of each group."""
    if not events:
        return SpanBreakdown(0.0, 0.0, {})
    span = max(e for _, e, _ in events) - min(s for s, _, _ in events)
    groups: dict[str, list[tuple[float, float]]] = {}
    for s, e, g in events:
        groups.setdefault(g, []).append((s, e))
    busy = union_length((s, e) for s, e, _ in events)
    return SpanBreakdown(span, span - busy, {g: union_length(v) for g, v in groups.items()})
