"""Building a step model (rooflinekit.stages.stepmodel) from the transformed ops of its design
captures: equal kernels grouped across the design points, each group's FLOPs, bytes, parameter
bytes and rows fitted as exact polynomials, each collective call's message likewise, and an MoE
record's weights as its expected distinct experts (StepModel.extras)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rooflinekit.core.experts import expected_distinct_experts
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.efficiency_table import table_for
from rooflinekit.stages.expected import MATMUL_OPS, kernel_weights, launches, size_of
from rooflinekit.stages.fitting import Design, FitError
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.kernel_times import queries_of
from rooflinekit.stages.stepmodel import CallGroup, KernelGroup, StepModel


@dataclass
class DesignCapture:
    """One design point's transformed ops: which are attention's, and each op's multiplicity (the
    repeated layers it stands for) and whether it lies in a repeated layer."""

    ops: Sequence[OpRecord]
    attention_ops: frozenset[int]
    multiplicity: Sequence[int]
    in_layers: Sequence[bool]
    slots: Sequence[tuple]


def build_step_model(phase: str, design: Design, captures: list[DesignCapture], hw: HardwareSpec,
                     dtype: str, layers: int) -> StepModel:
    """The step model through `captures` (one per design point, in `design.points` order), whose
    ops must align one to one (same slots, names, kinds and dtypes); FitError otherwise."""
    first = captures[0]
    for cap in captures[1:]:
        if len(cap.ops) != len(first.ops) or any(
                a.name != b.name or a.kind != b.kind or a.dtype != b.dtype or sa != sb
                for a, b, sa, sb in zip(first.ops, cap.ops, first.slots, cap.slots, strict=True)):
            raise FitError("the design captures run different ops")
    kernels: Counter = Counter()
    calls: Counter = Counter()
    seen: Counter = Counter()
    extras: list[tuple[int, int, float, float, float, float, int]] = []

    def counts(ops: list[OpRecord]) -> tuple[int, int]:
        """(bytes, parameter bytes) poly indices; an op whose weights follow the expected experts
        gets slots past the design's (StepModel.extras), encoded negative until all polys exist."""
        terms = [o.attrs.get("expected_experts") for o in ops]
        if not all(terms):
            return (design.poly(tuple(o.bytes_read + o.bytes_written for o in ops)),
                    design.poly(tuple(o.param_bytes for o in ops)))
        shared = {(t["k"], t["experts"], t["share"], t.get("redundant", 0)) for t in terms}
        touched = [expected_distinct_experts(t["tokens"], t["k"], t["experts"], t.get("redundant", 0)) * t["share"]
                   for t in terms]
        per = {o.param_bytes / n for o, n in zip(ops, touched, strict=True) if n}
        if len(shared) != 1 or not per or max(per) - min(per) > 1e-9 * max(per):
            raise FitError(f"{ops[0].name}: its experts' terms differ between the design points")
        k, experts, share, redundant = shared.pop()
        rest = design.poly(tuple(o.bytes_read + o.bytes_written - o.param_bytes for o in ops))
        tokens = design.poly(tuple(float(t["tokens"]) for t in terms))
        zero = design.poly(tuple(0.0 for _ in ops))
        extras.append((rest, tokens, max(per), k, experts, share, redundant))
        extras.append((zero, tokens, max(per), k, experts, share, redundant))
        return -(len(extras) - 1), -len(extras)

    queries = kernel_queries(captures, design, hw)
    weights = [kernel_weights(c.ops) for c in captures]

    for i, op in enumerate(first.ops):
        ops = [c.ops[i] for c in captures]
        count, in_layers = first.multiplicity[i], first.in_layers[i]
        rel = first.slots[i]
        seen[rel] += 1
        key = (rel, seen[rel])
        if op.kind == "collective" or op.attrs.get("collective"):
            message = design.poly(tuple(float(o.attrs.get("message_bytes", 0.0)) for o in ops))
            calls[CallGroup(1, op.attrs["collective"], int(op.attrs.get("group_size", 1)), message,
                            design.poly(tuple(o.flops for o in ops)),
                            design.poly(tuple(o.bytes_read + o.bytes_written for o in ops)), in_layers,
                            int(op.attrs.get("copies", 0) or 0), int(op.attrs.get("experts", 0) or 0),
                            queries[i])] += count
            continue
        if not launches(op) and not any(launches(o) for o in ops):
            continue
        rows = None
        if op.name in MATMUL_OPS or (op.kind == "fused" and size_of(op.name, op.kind, op.shapes) is not None):
            counted = [size_of(o.name, o.kind, o.shapes) for o in ops]
            rows = None if any(r is None for r in counted) else design.poly(tuple(float(r) for r in counted))
        nbytes, params = counts(ops)
        group = KernelGroup(1, op.name, op.kind, op.dtype, op.index in first.attention_ops,
                            design.poly(tuple(o.flops for o in ops)), nbytes, params, rows, key, in_layers,
                            queries[i], design.poly(tuple(w[i] for w in weights)))
        kernels[group] += count
    base = len(design.polys)

    def slot(index: int) -> int:  # an extras slot (negative, from 1) past the design's polys
        return index if index >= 0 else base - index - 1

    groups = [replace(k, count=n, nbytes=slot(k.nbytes), params=slot(k.params)) for k, n in kernels.items() if n]
    return StepModel(phase, design, groups, [replace(c, count=n) for c, n in calls.items() if n], hw, dtype,
                     layers=layers, extras=tuple(extras))


def kernel_queries(captures: list[DesignCapture], design: Design, hw: HardwareSpec) -> list[tuple | None]:
    """Each op's KernelGroup.query: what a database of measured kernels is asked, a poly per
    dimension; None where a design point's record declares none or a different kind of kernel, and
    for every op where `hw`'s efficiency source names no such database."""
    if table_for(hw).kernel_times_spec is None:
        return [None] * len(captures[0].ops)
    asked = [queries_of(c.ops, c.attention_ops) for c in captures]
    return [_query_spec(found, design) for found in zip(*asked, strict=True)]


def _query_spec(found: tuple, design: Design) -> tuple | None:
    """One op's queries at the design points as a KernelGroup.query (its fallback's likewise); None
    where a point declares none or a different kind of kernel."""
    head = found[0]
    names = [d for d, _ in head.dims] if head is not None else []
    if any(q is None or (q.kind, q.variant, q.dtype, [d for d, _ in q.dims]) !=
           (head.kind, head.variant, head.dtype, names) for q in found):
        return None
    fallback = None
    if head.fallback is not None and all(q.fallback is not None for q in found):
        fallback = _query_spec(tuple(q.fallback for q in found), design)
    return (head.kind, head.variant, head.dtype, tuple(
        (name, design.poly(tuple(q.dims[j][1] for q in found))) for j, name in enumerate(names)), fallback)

