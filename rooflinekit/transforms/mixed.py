"""The mixed step's merge, `MixedStep`: the segments' counted forwards (each captured, attributed and
transformed as its plain step) restated as ONE step, the weights read once and attention per segment.

The request side (the segments' words, their checks) is rooflinekit.stages.mixed; the rules of the
merge are in its module docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rooflinekit.core.request import Segment
from rooflinekit.stages.attribute import AttentionSite
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.stages.memory import live_allocations
from rooflinekit.stages.mixed import label
from rooflinekit.transforms.base import Counted, TransformContext


def _shift(sid: int, offset: int, params: set[int]) -> int:
    return sid if sid < 0 or sid in params else sid + offset


def _renumbered(cap: CaptureResult, offset: int) -> CaptureResult:
    """`cap` with its non-parameter storages numbered `offset` higher (segments' storages kept apart)."""
    if not offset:
        return cap
    params = cap.param_storages
    ops = []
    for op in cap.ops:
        attrs = op.attrs
        if "operand_sids" in attrs:
            attrs = dict(attrs, operand_sids=[_shift(s, offset, params) for s in attrs["operand_sids"]])
        ops.append(replace(op, reads=tuple((_shift(s, offset, params), b) for s, b in op.reads),
                           writes=tuple((_shift(s, offset, params), b) for s, b in op.writes),
                           sinks=tuple(_shift(s, offset, params) for s in op.sinks), attrs=attrs))
    live = [(_shift(s, offset, params), end) for s, end in cap.live]
    return replace(cap, ops=ops, live=live)


def _keys(cap: CaptureResult, attention: set[int]) -> dict[tuple[str, str, int], int]:
    """(module, op name, ordinal) -> position, for the ops outside attention."""
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for i, op in enumerate(cap.ops):
        if op.index in attention:
            continue
        n = seen.get((op.module, op.name), 0)
        seen[(op.module, op.name)] = n + 1
        out[(op.module, op.name, n)] = i
    return out


def merged_record(ops: Sequence[OpRecord]) -> OpRecord:
    """One record of the same op in several segments: FLOPs and activation bytes summed, parameter
    reads once when every segment read the same parameter bytes (else summed: gathered rows)."""
    first = ops[0]
    if len(ops) == 1:
        return first
    once = all(op.param_bytes == first.param_bytes for op in ops)
    params = first.param_bytes if once else sum(op.param_bytes for op in ops)
    read = sum(op.bytes_read - op.param_bytes for op in ops) + params
    reads = list(first.reads)
    param_sids = {s for s, _ in first.reads} if once and first.param_bytes else set()
    for op in ops[1:]:
        reads += [(s, b) for s, b in op.reads if s not in param_sids]
    flops = sum(op.flops for op in ops)
    return replace(first, flops=flops, bytes_read=read, bytes_written=sum(op.bytes_written for op in ops),
                   param_bytes=params, reads=tuple(reads), writes=tuple(w for op in ops for w in op.writes),
                   sinks=tuple(s for op in ops for s in op.sinks), time_s=None,
                   attrs=dict(first.attrs, segments=len(ops)))


def _attention_ops(counted: Counted) -> set[int]:
    return {i for row in counted.attention for i in (*row.op_indices, *row.kv_op_indices)}


def _matches(parts: Sequence[Counted]) -> list[dict[int, int]]:
    """Per segment after the first: its op position -> the first segment's matched position."""
    base = _keys(parts[0].capture, _attention_ops(parts[0]))
    out = []
    for part in parts[1:]:
        keys = _keys(part.capture, _attention_ops(part))
        out.append({i: base[k] for k, i in keys.items() if k in base})
    return out


def _merge_ops(parts: Sequence[Counted]) -> tuple[list[OpRecord], list[dict[int, int]]]:
    """The merged op list (each segment's own order kept: its unmatched ops before the matched op
    they precede) and, per segment, old op index -> new index."""
    matches = _matches(parts)
    # first segment's position -> [(segment, position)] of the ops merged into it
    partners: dict[int, list[tuple[int, int]]] = {}
    for s, match in enumerate(matches, start=1):
        for i, j in match.items():
            partners.setdefault(j, []).append((s, i))
    out: list[OpRecord] = []
    index: list[dict[int, int]] = [{} for _ in parts]
    done = [0] * len(parts)

    def flush(s: int, upto: int) -> None:
        ops = parts[s].capture.ops
        while done[s] < upto:
            op = ops[done[s]]
            if done[s] not in matches[s - 1]:
                index[s][op.index] = len(out)
                out.append(replace(op, index=len(out)))
            done[s] += 1

    for j, op in enumerate(parts[0].capture.ops):
        group = [op]
        for s, i in sorted(partners.get(j, ())):
            if i < done[s]:  # crossed an op already placed: kept apart (its weights read again)
                matches[s - 1].pop(i, None)
                continue
            flush(s, i)
            group.append(parts[s].capture.ops[i])
            done[s] = i + 1
        record = merged_record(group)
        for s, i in [(0, j)] + sorted(partners.get(j, ())):
            index[s][parts[s].capture.ops[i].index] = len(out)
        out.append(replace(record, index=len(out)))
    for s in range(1, len(parts)):
        flush(s, len(parts[s].capture.ops))
    if len(parts) > 1:  # a layer of a mixed step runs at each segment's shape: no one measured layer
        # (rooflinekit.transforms.serving, "layer_kernel") prices it, so its records keep their own kernels
        out = [replace(op, attrs={k: v for k, v in op.attrs.items() if k != "layer_kernel"})
               if "layer_kernel" in op.attrs else op for op in out]
    return out, index


def _segment_peaks(caps: Sequence[CaptureResult]) -> list[tuple[int, int | None]]:
    """One liveness list for the merged capture whose peak is the segments' peaks added: each
    segment's allocations up to its own peak first, then the rest, in each segment's own order."""
    resolved, peaks = [], []
    for cap in caps:
        allocations = live_allocations(cap) or []
        ends = {start: end for _, start, end, _ in allocations}
        delta = [0.0] * (len(cap.live) + 1)
        for _, start, end, nbytes in allocations:
            delta[start] += nbytes
            delta[end] -= nbytes
        level, best, at = 0.0, 0.0, -1
        for t, d in enumerate(delta[:-1]):
            level += d
            if level > best:
                best, at = level, t
        peaks.append(at)
        resolved.append(ends)
    order = [(s, t) for s, cap in enumerate(caps) for t in range(peaks[s] + 1)]
    order += [(s, t) for s, cap in enumerate(caps) for t in range(peaks[s] + 1, len(cap.live))]
    position = {slot: n for n, slot in enumerate(order)}
    total = len(order)
    live: list[tuple[int, int | None]] = []
    for s, t in order:
        sid, end = caps[s].live[t]
        end = resolved[s].get(t, end)
        if isinstance(end, int) and end >= 0:
            end = total if end >= len(caps[s].live) else position[(s, end)]
        live.append((sid, end))
    return live


def _segment_rows(counted: Counted, segment: Segment, index: dict[int, int]) -> list[AttentionSite]:
    """A segment's attention rows, their ops renumbered, the segment named in module and extra."""
    rows = []
    info = segment._asdict()
    for row in counted.attention:
        spec = row.spec
        if spec is not None:
            spec = replace(spec, extra={**dict(spec.extra or {}), "segment": info})
        rows.append(replace(row, module=f"{row.module} [{label(segment)}]", spec=spec,
                            op_indices=[index[i] for i in row.op_indices if i in index],
                            kv_op_indices=[index[i] for i in row.kv_op_indices if i in index]))
    return rows


def _merge(parts: Sequence[Counted], segments: Sequence[Segment], note: str) -> Counted:
    """The segments' counted forwards (`parts`, in the order of `segments`) as one mixed step."""
    if len(parts) == 1 and not note:
        return parts[0]
    top = max((max((s for op in p.capture.ops for s, _ in (*op.reads, *op.writes)), default=0)
               for p in parts), default=0) + 1
    parts = [replace(p, capture=_renumbered(p.capture, k * top)) for k, p in enumerate(parts)]
    ops, index = _merge_ops(parts)
    rows = [row for k, p in enumerate(parts) for row in _segment_rows(p, segments[k], index[k])]
    caps = [p.capture for p in parts]
    first = caps[0]
    cap = replace(first, ops=ops, wall_s=sum(c.wall_s for c in caps),
                  notes=list(dict.fromkeys(n for c in caps for n in c.notes)),
                  live=_segment_peaks(caps),
                  memo_counts=(sum(c.memo_counts[0] for c in caps), sum(c.memo_counts[1] for c in caps)))
    notes = tuple(dict.fromkeys([note] + [n for p in parts for n in p.notes]))
    return replace(parts[0], capture=cap, attention=rows, notes=notes)


@dataclass(frozen=True)
class MixedStep:
    """The mixed step as one `Transform`: `apply(counted, ctx)` merges `counted`, the first
    segment's counted forward, with `others`, the other segments' (in the order of `segments`),
    and adds `note`, the step's words."""

    others: Sequence[Counted]
    segments: Sequence[Segment]
    note: str
    name: str = "mixed step"

    def applies(self, ctx: TransformContext) -> bool:
        """A mixed workload (`--mix`/`--chunk`)."""
        return ctx.workload.mixed

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        return _merge([counted, *self.others], self.segments, self.note)
