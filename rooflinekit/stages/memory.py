"""Memory: what one GPU holds for a step (weights, KV cache, activations) against its capacity.

A pure function of a placed report, the capture it came from and a hardware entry:

- weights: the parameter and buffer bytes resident on one GPU, as the report states them (one
  GPU's share under planned TP/EP: `parallel.weights_per_gpu`; else `model.param_bytes`);
- KV cache: per recognised attention layer, its cache bytes per token x the positions it holds
  (the context, or its window or chunk where smaller) x batch, plus a per-sequence state where a
  layer's plugin gives `cache_bytes_per_sequence` (recurrent, SSM and linear-attention layers);
- activations: the peak measured during the capture (rooflinekit.stages.capture.liveness): the most bytes
  of storages the forward allocated that were alive at once. K/V storages the forward allocated
  and still held when it returned (a cache grown by concatenation) are the KV cache, counted above.

Capacity is what the device reports (the entry's `memory_bytes`), less the entry's
`memory_reserve_bytes` (CUDA context, communication buffers), then the memory fraction:
usable = (capacity - reserve) x fraction. `max_batch` is the largest batch that fits at the
report's context (docs/advise.md writes both forms out):

- as written: the activations scaled per sequence (the peak measured at the report's batch, / batch),
  floor((usable - weights) / (KV per sequence + activations per sequence));
- serving view (`deployment.kernels == "serving"`): a paged KV cache, as serving engines allocate it.
  The activation peak is held once; what is left holds blocks of `kv_block_size` tokens of every
  layer's cache; each sequence takes ceil(held / block) blocks of each layer's cache (held: the
  context, or the layer's window or chunk where smaller):
  kv_blocks = floor((usable - weights - activations) / block bytes),
  max_batch = floor(kv_blocks / blocks per sequence).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rooflinekit.core.attention_layers import layer_names, uncounted_layers
from rooflinekit.core.report import Memory, Report
from rooflinekit.stages.capture.liveness import GARBAGE
from rooflinekit.stages.capture.records import CaptureResult
from rooflinekit.stages.hardware import HardwareSpec

RULE = ("max_batch = floor(((capacity - reserve) x fraction - weights) / (KV cache per sequence + activation "
        "peak per sequence)): the activation peak measured at the report's batch is scaled per sequence")
PAGED_RULE = ("serving view, paged KV cache: kv_blocks = floor(((capacity - reserve) x fraction - weights - "
              "activation peak) / (block size x KV bytes per token over the layers)); max_batch = floor(kv_blocks / "
              "blocks per sequence), each sequence taking ceil(tokens held / block size) blocks of each layer's cache")
ACTIVATION_NOTE = (
    "activation peak measured during the capture: the most bytes of storages the forward's ops "
    "allocated (neither parameters, buffers nor tensors passed in) that were alive at once, each "
    "freed when its last reference went (checked at every allocation); K/V the forward allocated "
    "and kept are counted in the KV cache instead")
KV_NOTE = ("KV cache: per recognised attention layer, its cache bytes per token (the architecture's: "
           "MLA's latent, K/V heads at the cache dtype) x the positions it holds (the context, or its "
           "window or chunk where smaller) x batch, plus any per-sequence state a layer's plugin gives")


def _allocations(cap: CaptureResult) -> dict[int, tuple[int, float]]:
    """Storage -> (index of the op that first wrote it, bytes it wrote there)."""
    wanted = {sid for sid, _ in cap.live}
    first: dict[int, tuple[int, float]] = {}
    for i, op in enumerate(cap.ops):
        for sid, nbytes in op.writes:
            if sid in wanted and sid not in first:
                first[sid] = (i, nbytes)
    return first


def _garbage_ends(cap: CaptureResult, first: dict[int, tuple[int, float]]) -> dict[int, int]:
    """Allocation -> its end, for those freed only by the garbage collector: after the last op
    that read or wrote them (as reference counting frees a temporary)."""
    garbage = {sid: i for i, (sid, end) in enumerate(cap.live) if end == GARBAGE}
    if not garbage:
        return {}
    last: dict[int, int] = {}
    for i, op in enumerate(cap.ops):
        for sid, _ in (*op.reads, *op.writes):
            if sid in garbage:
                last[sid] = i
    made = sorted(first[sid][0] for sid, _ in cap.live if sid in first)  # op of each allocation, in order
    return {i: bisect_right(made, last.get(sid, first.get(sid, (0, 0))[0])) for sid, i in garbage.items()}


def live_allocations(source: CaptureResult) -> list[tuple[int, int, int, float]] | None:
    """(op that made it, start, end, bytes) of each allocation the forward made, K/V it kept
    excluded, in allocation order (start and end index the allocations); None when not measured.
    The part of activation_peak that depends on the capture's liveness only (a sweep computes it
    once per fit)."""
    if not source.live:
        return None
    first = _allocations(source)
    kept_kv = {sid for op in source.ops for sid in op.sinks}
    n = len(source.live)
    ends = _garbage_ends(source, first)
    out = []
    for i, (sid, end) in enumerate(source.live):
        if sid not in first or (end is None and sid in kept_kv):
            continue
        end = ends.get(i, end)
        index, nbytes = first[sid]
        out.append((index, i, n if end is None else end, nbytes))
    return out


def activation_peak(cap: CaptureResult) -> float | None:
    """The peak of live bytes the forward allocated, K/V it kept excluded; None when not measured."""
    steps = _live_steps(cap)
    return None if steps is None else max(0.0, *steps)


def _live_steps(cap: CaptureResult) -> list[float] | None:
    """Live bytes the forward allocated after each allocation (activation_peak's running sum)."""
    allocations = live_allocations(cap)
    if allocations is None:
        return None
    delta = [0.0] * (len(cap.live) + 1)
    for _, start, end, nbytes in allocations:
        delta[start] += nbytes
        delta[end] -= nbytes
    out, live = [], 0.0
    for d in delta:
        live += d
        out.append(live)
    return out


@dataclass(frozen=True)
class PeakInBatch:
    """The activation peak as a function of batch, exactly, from captures at two batches of one
    context: every allocation's bytes are affine in batch on the meta device, so the live bytes at
    each point of the forward are a line in batch and the peak is the upper envelope of those lines
    (`lines`, the non-dominated ones); `at` holds peaks of batches captured one by one (counts not
    polynomial in batch), used as they are."""

    lines: tuple[tuple[float, float], ...] = ()
    at: tuple[tuple[int, float], ...] = ()

    def __call__(self, batch: int) -> float:
        for b, peak in self.at:
            if b == batch:
                return peak
        if not self.lines:
            return 0.0
        return max(0.0, max(a + b * batch for a, b in self.lines))

    @classmethod
    def from_captures(cls, b1: int, cap1: CaptureResult, b2: int, cap2: CaptureResult) -> PeakInBatch:
        """The envelope through two captures' liveness (the same forward at batches b1 != b2);
        when their allocations do not align, the line through their two peaks (the peak's own
        points, exact at b1 and b2)."""
        one, two = _live_steps(cap1), _live_steps(cap2)
        if one is None or two is None:
            return cls()
        if len(one) != len(two):
            pairs = [(max(one), max(two))]
        else:
            pairs = list(zip(one, two, strict=True))
        lines = {((y1 * b2 - y2 * b1) / (b2 - b1), (y2 - y1) / (b2 - b1)) for y1, y2 in pairs}
        kept, steepest = [], -math.inf
        for a, b in sorted(lines, reverse=True):  # by intercept, then slope, largest first
            if b > steepest:  # not below a line with a larger intercept and at least its slope
                kept.append((a, b))
                steepest = b
        return cls(lines=tuple(kept))


class ScaledPeak:
    """The activation peak at many points of one fit: the template's liveness (`allocations`, its
    live_allocations), each allocation's bytes scaled as its op's bytes written, which is one of
    the fit's polynomials (`poly_of_op[i]`). Built once; each point is then a few vector operations
    on the polynomials' values."""

    def __init__(self, template: CaptureResult, allocations: list[tuple[int, int, int, float]],
                 poly_of_op: Sequence[int]):
        scale, poly, start, end = [], [], [], []
        for index, first, last, nbytes in allocations:
            was = template.ops[index].bytes_written
            scale.append(nbytes / was if was else 0.0)
            poly.append(poly_of_op[index])
            start.append(first)
            end.append(last)
        self._scale = torch.tensor(scale, dtype=torch.float64, device="cpu")
        self._poly = torch.tensor(poly, dtype=torch.long, device="cpu")
        self._start = torch.tensor(start, dtype=torch.long, device="cpu")
        self._end = torch.tensor(end, dtype=torch.long, device="cpu")
        self._steps = len(template.live) + 1

    def __call__(self, values: Sequence[float]) -> float:
        """The peak at a point, given every polynomial's value there."""
        if not len(self._scale):
            return 0.0
        nbytes = self._scale * torch.tensor(values, dtype=torch.float64, device="cpu")[self._poly]
        delta = torch.zeros(self._steps, dtype=torch.float64, device="cpu")
        delta.index_add_(0, self._start, nbytes).index_add_(0, self._end, -nbytes)
        return max(0.0, float(delta.cumsum(0).max()))


def resident_weights(report: Report) -> float:
    """Weight bytes one GPU holds, from the report's own figures."""
    par = report.parallel or {}
    if par.get("weights_per_gpu") is not None:
        return float(par["weights_per_gpu"])
    return float(report.model.param_bytes or 0.0)


def kv_per_sequence(report: Report, block: int = 1) -> tuple[float, list[str]]:
    """Cache bytes one sequence holds at the report's context, over the attention layers; with
    `block` > 1, each layer's tokens rounded up to whole blocks of that many (a paged cache)."""
    context = report.workload.context
    total = 0.0
    for row in report.attention:
        per_sequence = getattr(row, "cache_bytes_per_sequence", None) or row.extra.get("cache_bytes_per_sequence")
        if row.cache_bytes_per_token is None and per_sequence is None:
            continue
        held = context
        for cap in (row.window, row.chunk):
            if cap:
                held = min(held, cap)
        held = math.ceil(held / block) * block
        total += (row.cache_bytes_per_token or 0.0) * held + float(per_sequence or 0.0)
    uncounted = uncounted_layers(report)
    notes = [f"attention layer(s) not recognised by a plugin, their cache not counted: {layer_names(uncounted)}"] \
        if uncounted else []
    return total, notes


def unrecognised_warnings(report: Report, library: str | None = None) -> list[str]:
    """The report's warnings where attention layers were not recognised, one per layer class: which
    layers, and what it leaves out; `library` (e.g. 'transformers 5.26.0, tested 5.4.0 to 5.25.0')
    names the code that wrote the model, since a newer release can rename what plugins read."""
    by_class: dict[str, list[str]] = {}
    for row in report.attention:
        if not row.recognised:
            by_class.setdefault(row.module_class, []).append(row.module)
    written = f"; the model's code is {library}" if library else ""
    return [f"attention not recognised in {layer_names(names)} ({cls}): no plugin read its heads "
            f"(attributes such as num_heads, num_key_value_heads and head_dim, or an attention plugin: "
            f"docs/plugins.md), so its KV cache is left out of the memory section (KV cache, max batch) and its "
            f"minimum KV bytes are unknown; its executed FLOPs and bytes are counted{written}"
            for cls, names in by_class.items()]


MIXED_KV_NOTE = ("mixed step: the KV cache held is each segment's attention rows at the segment's own context "
                 "(a decode group: its context; the prefill chunk: offset + chunk) x its sequences, summed; per "
                 "sequence and max_batch: that total over the step's sequences (more sequences of the same mix)")


def mixed_kv(report: Report, block: int = 1) -> float:
    """Cache bytes a mixed step holds: each attention row (one per layer and segment, its segment in
    `extra["segment"]`) at its segment's context and sequences; with `block` > 1, whole blocks."""
    total = 0.0
    for row in report.attention:
        segment = (row.extra or {}).get("segment")
        if not segment:
            continue
        per_sequence = getattr(row, "cache_bytes_per_sequence", None) or row.extra.get("cache_bytes_per_sequence")
        held = segment["context"]
        for cap in (row.window, row.chunk):
            if cap:
                held = min(held, cap)
        held = math.ceil(held / block) * block
        total += ((row.cache_bytes_per_token or 0.0) * held + float(per_sequence or 0.0)) * segment["batch"]
    return total


def block_bytes(report: Report, block: int) -> float:
    """Bytes of one paged KV block: `block` tokens of every recognised layer's cache."""
    return block * sum(row.cache_bytes_per_token or 0.0 for row in report.attention)


def paged(report: Report, usable: float, weights: float, activations: float | None,
          block: int) -> tuple[int | None, int | None]:
    """(kv_blocks, max_batch) of the serving view's paged cache; (None, None) when nothing is paged."""
    size = block_bytes(report, block)
    per_seq, _ = kv_per_sequence(report, block)
    if size <= 0 or per_seq <= 0:
        return None, None
    blocks = max(0, math.floor((usable - weights - (activations or 0.0)) / size))
    per_seq_blocks = per_seq / size  # whole when every layer holds the context and no state is kept
    return blocks, math.floor(blocks / per_seq_blocks + 1e-9)


def memory_of(report: Report, hw: HardwareSpec, fraction: float, activations: float | None,
              activations_note: str = ACTIVATION_NOTE, *, weights: float | None = None) -> Memory:
    """The Memory section of `report` on `hw` with `fraction` of (capacity - reserve) usable and the
    activation peak given (`weights`: the resident weight bytes, when not the report's own). In the
    serving view (`report.deployment.kernels`) the KV cache is paged in blocks."""
    batch = report.workload.batch
    weights = resident_weights(report) if weights is None else weights
    deployment = report.deployment
    block = deployment.kv_block_size if deployment.kernels == "serving" else None
    kv_seq, notes = kv_per_sequence(report, block or 1)
    kv = kv_seq * batch
    if report.workload.mix or report.workload.chunk:  # a mixed step: each segment's rows at its own context
        kv = mixed_kv(report, block or 1)
        kv_seq = kv / batch
        notes.append(MIXED_KV_NOTE)
    total = weights + kv + (activations or 0.0)
    act_seq = activations / batch if activations is not None else None
    capacity = hw.memory_bytes
    gpus = int((report.parallel or {}).get("gpus", 1))
    where = f"one GPU's share of {gpus}" if gpus > 1 else "one GPU"
    notes = [f"memory figures are {where}'s: the weights it holds, the KV cache at the workload's context and "
             "batch, the activation peak", KV_NOTE, activations_note] + notes
    if activations is None:
        notes.append("activation peak not measured here: the total counts weights and KV cache only")
    if not capacity:
        notes.append(f"hardware entry {hw.name} lists no memory_bytes: whether it fits is unknown")
        return Memory(weights_bytes=weights, kv_cache_bytes=kv, activation_peak_bytes=activations,
                      total_bytes=total, capacity_bytes=None, fits=None, max_batch=None, fraction=fraction,
                      kv_bytes_per_sequence=kv_seq, activation_bytes_per_sequence=act_seq, gpus=gpus, notes=notes)
    reserve = hw.reserve_bytes
    usable = max(0.0, capacity - reserve) * fraction
    notes.append(f"usable = (capacity {capacity:,.0f} B as the device reports it - reserve {reserve:,.0f} B "
                 f"(CUDA context, communication buffers{'' if hw.memory_reserve_bytes is not None else ': default'}"
                 f")) x fraction {fraction:g}")
    per_seq = kv_seq + (act_seq or 0.0)
    max_batch = kv_blocks = None
    if block:
        kv_blocks, max_batch = paged(report, usable, weights, activations, block)
        notes.append(PAGED_RULE if kv_blocks is not None else "serving view: no paged KV cache (no recognised layer)")
    elif per_seq > 0:
        max_batch = max(0, math.floor((usable - weights) / per_seq))
        notes.append(RULE)
    if max_batch is None:
        notes.append("nothing held grows with batch: max_batch has no bound from memory")
    return Memory(weights_bytes=weights, kv_cache_bytes=kv, activation_peak_bytes=activations, total_bytes=total,
                  capacity_bytes=capacity, fits=total <= usable, max_batch=max_batch, fraction=fraction,
                  usable_bytes=usable, headroom_bytes=usable - total, kv_bytes_per_sequence=kv_seq,
                  activation_bytes_per_sequence=act_seq, gpus=gpus, notes=notes, reserve_bytes=reserve,
                  kv_block_size=block, kv_blocks=kv_blocks)


def at_point(template: Memory, report: Report, hw: HardwareSpec, activations: float | None,
             how: str) -> Memory:
    """The Memory of a report evaluated from fitted counts (a sweep point): the weights of the
    profiled `template` (they change with neither batch nor context), its fraction, and the
    activation peak given (`how` says how it was obtained)."""
    return memory_of(report, hw, template.fraction, activations, how, weights=template.weights_bytes)
