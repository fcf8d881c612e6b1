"""Each GPU event's class, the op whose counts it shares and its share of them: the innermost
enclosing op the formula registry counts (outward when an inner one has no formula), its FLOPs and
bytes split over that op's kernels by duration."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from rooflinekit.trace.classes import classify
from rooflinekit.trace.counts import RecordedCount, ShapeCounter, recorded_op
from rooflinekit.trace.events import CpuOp
from rooflinekit.trace.join import Launched

#: Status of an event no aten op launched (NCCL, Triton, library kernels, CUDA-graph replays).
NO_OP = "no_op"


@dataclass(frozen=True)
class Attributed:
    """A GPU event, its class, the op it is charged to and its share of that op's counts."""

    launched: Launched
    klass: str
    op: CpuOp | None = None
    status: str = NO_OP
    flops: float = 0.0
    bytes: float = 0.0
    dtype: str = ""
    formula: str = ""
    reason: str = ""

    @property
    def dur(self) -> float:
        return self.launched.event.dur


class OpCounts:
    """RecordedCount per CPU op, asked of the ShapeCounter once per op."""

    def __init__(self, counter: ShapeCounter):
        self.counter = counter
        self.cache: dict[int, RecordedCount] = {}

    def of(self, op: CpuOp) -> RecordedCount:
        """The op's count (status no_shapes when the trace records nothing to count it from)."""
        key = id(op)
        if key not in self.cache:
            recorded = recorded_op(op.event)
            self.cache[key] = (self.counter.count(recorded) if recorded is not None
                               else RecordedCount(status="no_shapes", reason="no recorded shapes"))
        return self.cache[key]


def _charged(launched: Launched, counts: OpCounts) -> tuple[CpuOp | None, RecordedCount | None]:
    """The innermost counted op around the launch, else the innermost op with its own status."""
    ops = [op for op in launched.ops if op.cat == "cpu_op"]
    for op in ops:
        count = counts.of(op)
        if count.status == "counted":
            return op, count
    if not ops:
        return None, None
    return ops[0], counts.of(ops[0])


def _overlapping_fallbacks(picked: list[tuple[Launched, CpuOp | None, RecordedCount | None]]) -> set[int]:
    """Ops (by id) that some kernel falls back to while other kernels inside them are charged to a
    counted op nested deeper: their counts include those inner ops' and would be counted twice."""
    outer_of_inner = set()
    for launched, op, count in picked:
        if op is None or count is None or count.status != "counted":
            continue
        inner = [o for o in launched.ops if o.cat == "cpu_op"]
        for o in inner[inner.index(op) + 1:] if op in inner else ():
            outer_of_inner.add(id(o))
    return outer_of_inner


def _share(picked, skip: set[int]) -> dict[int, float]:
    """Each counted op's total kernel time (the denominator of its kernels' shares)."""
    total: dict[int, float] = defaultdict(float)
    for launched, op, count in picked:
        if op is not None and count is not None and count.status == "counted" and id(op) not in skip:
            total[id(op)] += launched.event.dur
    return total


def _one(launched, op, count, total: dict[int, float], skip: set[int]) -> Attributed:
    klass = classify(launched.event.name, launched.op_names)
    if op is None or count is None:
        return Attributed(launched, klass)
    if count.status == "counted" and id(op) in skip:
        return Attributed(launched, klass, op, "overlaps", reason=f"{op.name} also holds counted inner ops")
    if count.status != "counted":
        return Attributed(launched, klass, op, count.status, formula=count.formula, reason=count.reason)
    part = launched.event.dur / total[id(op)] if total[id(op)] > 0 else 0.0
    return Attributed(launched, klass, op, "counted", count.flops * part, count.bytes * part, count.dtype,
                      count.formula)


def attribute(launched: list[Launched], counter: ShapeCounter | None = None) -> list[Attributed]:
    """Every GPU event classed and charged to an op, with its share of the op's counts."""
    counts = OpCounts(counter or ShapeCounter())
    picked = [(lx, *_charged(lx, counts)) for lx in launched]
    skip = _overlapping_fallbacks(picked)
    total = _share(picked, skip)
    return [_one(lx, op, count, total, skip) for lx, op, count in picked]
