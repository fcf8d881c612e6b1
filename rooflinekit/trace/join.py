"""Join each GPU event to the runtime call that launched it (by correlation id, else by flow
events) and to the CPU ops enclosing that call on its thread (by time nesting), innermost first."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from rooflinekit.trace.events import CpuOp, GpuEvent, RuntimeCall, Trace


@dataclass(frozen=True)
class Launched:
    """A GPU event with its launch and the ops around the launch (innermost first)."""

    event: GpuEvent
    launch: RuntimeCall | None = None
    ops: tuple[CpuOp, ...] = ()
    #: How the launch was found: "correlation", "flow", or "" when it was not.
    via: str = ""

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.ops)


def _flow_ids(trace: Trace) -> tuple[dict, dict]:
    """Flow ids by their start (a launch's thread and time) and by their end (a stream and time)."""
    starts, ends = {}, {}
    for f in trace.flows:
        (starts if f.phase == "s" else ends)[(str(f.tid), f.ts)] = f.id
    return starts, ends


def _runtime_by_correlation(trace: Trace, flow_starts: dict) -> dict[int, RuntimeCall]:
    """Runtime calls by correlation id (a call without one takes the id of the flow it starts)."""
    out: dict[int, RuntimeCall] = {}
    for call in trace.runtime:
        key = call.correlation if call.correlation is not None else flow_starts.get((str(call.tid), call.ts))
        if key is not None:
            out.setdefault(key, call)
    return out


def _enclosing_on_thread(ops: list[CpuOp], calls: list[RuntimeCall]) -> dict[int, tuple[CpuOp, ...]]:
    """For each call (by id()), the ops of its thread whose span holds its start, innermost first."""
    ops = sorted(ops, key=lambda o: (o.ts, -o.dur))
    out: dict[int, tuple[CpuOp, ...]] = {}
    stack: list[CpuOp] = []
    i = 0
    for call in sorted(calls, key=lambda c: c.ts):
        while i < len(ops) and ops[i].ts <= call.ts:
            while stack and stack[-1].end < ops[i].ts:
                stack.pop()
            stack.append(ops[i])
            i += 1
        while stack and stack[-1].end < call.ts:
            stack.pop()
        out[id(call)] = tuple(op for op in reversed(stack) if op.ts <= call.ts <= op.end)
    return out


def enclosing_ops(trace: Trace, calls: list[RuntimeCall]) -> dict[int, tuple[CpuOp, ...]]:
    """The ops enclosing each call (by id()), ProfilerStep windows left out."""
    by_thread: dict[tuple, list[CpuOp]] = defaultdict(list)
    for op in trace.ops:
        if not op.name.startswith("ProfilerStep#"):
            by_thread[(str(op.pid), str(op.tid))].append(op)
    calls_by_thread: dict[tuple, list[RuntimeCall]] = defaultdict(list)
    for call in calls:
        calls_by_thread[(str(call.pid), str(call.tid))].append(call)
    out: dict[int, tuple[CpuOp, ...]] = {}
    for thread, thread_calls in calls_by_thread.items():
        out.update(_enclosing_on_thread(by_thread.get(thread, []), thread_calls))
    return out


def join(trace: Trace) -> list[Launched]:
    """Every GPU event of the trace with its launch and enclosing ops, in GPU time order."""
    starts, ends = _flow_ids(trace)
    runtime = _runtime_by_correlation(trace, starts)
    found: list[tuple[GpuEvent, RuntimeCall | None, str]] = []
    for event in sorted(trace.gpu, key=lambda e: e.ts):
        call, via = runtime.get(event.correlation) if event.correlation is not None else None, "correlation"
        if call is None:
            flow = ends.get((str(event.stream), event.ts))
            call, via = runtime.get(flow) if flow is not None else None, "flow"
        found.append((event, call, via if call is not None else ""))
    chains = enclosing_ops(trace, [c for _, c, _ in found if c is not None])
    return [Launched(event, call, chains.get(id(call), ()) if call is not None else (), via)
            for event, call, via in found]
