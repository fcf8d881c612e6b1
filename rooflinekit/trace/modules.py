"""Module paths of a trace's ops, from the `nn.Module: Class_N` ranges torch.profiler records
(python_function events with `with_stack=True`, or record_function ranges so named) nested on each
thread; named by the model's own attribute paths (`layers.0.self_attn.q_proj`) when the model is
given, since a trace records each module's class and call-order number, never its attribute name."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from rooflinekit.trace.events import CpuOp, Trace

MODULE_PREFIX = "nn.Module: "
#: The path of ops that ran in no recorded module, or directly in the top-level one.
TOP = ""


def module_ranges(trace: Trace) -> list[CpuOp]:
    """The trace's module ranges: python_function module events and user ranges named so."""
    found = list(getattr(trace, "modules", ()) or ())
    return found + [op for op in trace.ops if op.name.startswith(MODULE_PREFIX)]


def _thread(op: CpuOp) -> tuple[str, str]:
    return str(op.pid), str(op.tid)


def nested_paths(ranges: Iterable[CpuOp]) -> list[tuple[CpuOp, tuple[str, ...]]]:
    """Each range (time order) with its path: the names of the ranges around it and its own."""
    out: list[tuple[CpuOp, tuple[str, ...]]] = []
    stack: list[tuple[CpuOp, tuple[str, ...]]] = []
    for r in sorted(ranges, key=lambda o: (o.ts, -o.dur)):
        while stack and stack[-1][0].end <= r.ts:
            stack.pop()
        path = (stack[-1][1] if stack else ()) + (r.name.removeprefix(MODULE_PREFIX),)
        stack.append((r, path))
        out.append((r, path))
    return out


def _innermost(ops: list[CpuOp], ranges: list[tuple[CpuOp, tuple[str, ...]]]) -> dict[CpuOp, tuple[str, ...]]:
    """For each op of one thread, the path of the innermost range holding its start."""
    out: dict[CpuOp, tuple[str, ...]] = {}
    stack: list[tuple[CpuOp, tuple[str, ...]]] = []
    i = 0
    for op in sorted(ops, key=lambda o: o.ts):
        while i < len(ranges) and ranges[i][0].ts <= op.ts:
            stack.append(ranges[i])
            i += 1
        while stack and stack[-1][0].end < op.ts:
            stack.pop()
        if stack:
            out[op] = stack[-1][1]
    return out


def op_paths(trace: Trace) -> dict[CpuOp, tuple[str, ...]]:
    """Each CPU op that ran inside a module range: the module path, top-level module first."""
    ranges: dict[tuple, list[CpuOp]] = defaultdict(list)
    for r in module_ranges(trace):
        ranges[_thread(r)].append(r)
    ops: dict[tuple, list[CpuOp]] = defaultdict(list)
    for op in trace.ops:
        if not op.name.startswith(MODULE_PREFIX) and _thread(op) in ranges:
            ops[_thread(op)].append(op)
    out: dict[CpuOp, tuple[str, ...]] = {}
    for thread, thread_ops in ops.items():
        out.update(_innermost(thread_ops, nested_paths(ranges[thread])))
    return out


def backward_paths(trace: Trace, paths: dict[CpuOp, tuple[str, ...]]) -> dict[CpuOp, tuple[str, ...]]:
    """Backward ops given the path of the forward op whose sequence number they carry."""
    forward: dict[CpuOp, tuple[str, ...]] = {}
    for op in trace.ops:
        if op.sequence is not None and op in paths and not op.fwd_tid:
            forward.setdefault(op.sequence, paths[op])
    return {op: forward[op.sequence] for op in trace.ops
            if op.fwd_tid and op.sequence in forward and op not in paths}


def hierarchy_paths(trace: Trace) -> dict[CpuOp, tuple[str, ...]]:
    """Ops whose "Module Hierarchy" argument (TorchScript models) names their module."""
    out: dict[CpuOp, tuple[str, ...]] = {}
    for op in trace.ops:
        text = (op.event.get("args") or {}).get("Module Hierarchy")
        if isinstance(text, str) and text:
            out[op] = tuple(part.split("(")[0] for part in text.split("::") if part)
    return out
