"""A trace recorded without a GPU (ProfilerActivity.CPU only): each op with work (counted, or bytes
only) that holds no other such op on its thread stands for a kernel, its whole CPU duration as its
time (views and allocations inside it included), with the ops around it; the attribution then
charges it as it charges a kernel launched from inside those ops."""

from __future__ import annotations

from collections import defaultdict

from rooflinekit.trace.attribution import OpCounts
from rooflinekit.trace.counts import ShapeCounter
from rooflinekit.trace.events import CpuOp, GpuEvent, Trace
from rooflinekit.trace.join import Launched

#: The kind of the events a CPU trace's ops stand for.
CPU_KIND = "cpu_op"
#: Statuses of ops that do work (a count, or bytes without a FLOP formula).
WORK = ("counted", "no_formula")
#: The report's line for a CPU trace.
CPU_TIMING = "CPU trace: op CPU time, no GPU kernels"


def _innermost_work(ops: list[CpuOp], counts: OpCounts) -> list[tuple[CpuOp, tuple[CpuOp, ...]]]:
    """One thread's ops with work that hold no other op with work, each with the ops around it
    (itself first)."""
    ops = sorted(ops, key=lambda o: (o.ts, -o.dur))
    out: list[tuple[CpuOp, tuple[CpuOp, ...]]] = []
    stack: list[CpuOp] = []
    for op in ops:
        while stack and stack[-1].end <= op.ts:
            stack.pop()
        if op.cat == "cpu_op" and counts.of(op).status in WORK:
            if out and out[-1][0] in stack:
                out.pop()  # it holds this op: not innermost
            out.append((op, (op, *reversed(stack))))
        stack.append(op)
    return out


def _event(op: CpuOp) -> GpuEvent:
    """The op as a timed event: on device -1, its thread for a stream."""
    tid = op.tid if isinstance(op.tid, int) else 0
    return GpuEvent(kind=CPU_KIND, name=op.name, ts=op.ts, dur=op.dur, device=-1, stream=tid, correlation=None)


def cpu_launched(trace: Trace, counter: ShapeCounter) -> list[Launched]:
    """Every innermost CPU op with work as a Launched event, in time order."""
    by_thread: dict[tuple, list[CpuOp]] = defaultdict(list)
    for op in trace.ops:
        if not op.name.startswith(("ProfilerStep#", "nn.Module: ")):
            by_thread[(str(op.pid), str(op.tid))].append(op)
    counts = OpCounts(counter)
    found = [op for ops in by_thread.values() for op in _innermost_work(ops, counts)]
    return [Launched(_event(op), None, chain, "cpu") for op, chain in sorted(found, key=lambda x: x[0].ts)]
