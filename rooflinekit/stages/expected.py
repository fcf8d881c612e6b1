"""Expected time: what a step takes at the rates real kernels reach, beside the bound.

The bound (`totals.time_bound_s`) is pure physics: the whole step at the datasheet's peak and
bandwidth. The expected step (`totals.expected_step_s`) sums, over the step's kernels, each kernel's
larger of compute at the achievable fraction of its class's peak and traffic at the achievable
fraction of HBM bandwidth, plus a launch cost per kernel, plus the collectives at their expected
cost, none of them overlapped; in prefill, where the host issues each kernel eagerly ahead of the
GPU, the step waits for the host's issue time where that is longer (EfficiencyTable.launches_s).
The fractions are the committed table `efficiency.toml` (a source per value, from kernel-level
public measurements only); a calibrated hardware entry (`rooflinekit calibrate`) replaces it, its
measured ceilings taken as achievable (fraction 1).

A kernel is one op record of the report's view (each op launches one): the code as written, or the
serving view's records where a transform replaced them. Its class decides its fractions:

- matrix products (`aten.mm`, `addmm`, `bmm`, `baddbmm`, `_scaled_mm`, `linear`, ...) are GEMMs,
  small (memory-bound, a decode step's few rows) up to `small_gemm_max_rows` output rows, large above;
- fused attention records, matrix products inside an attention layer (its scores and output) and
  modelled records named for attention are attention, of the workload's phase (decode or prefill);
- modelled records with FLOPs and weights (MoE experts, absorbed projections) are GEMMs; where the
  table has an `[experts]` curve, a grouped expert GEMM (a record whose weights are its experts') takes
  its bandwidth fraction from that curve at one expert's matrix bytes on the GPU (expert_fractions);
- every other op (element-wise, normalisation, copies, gathers) is element-wise / copy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rooflinekit.core.experts import expected_distinct_experts
from rooflinekit.stages.efficiency_curve import Curve, compute_at, curve_words, micro_batch_size
from rooflinekit.stages.efficiency_table import (
    CLASSES,
    OWN_SOURCE_WORDS,
    TABLE_FILE,
    EfficiencyTable,
    Fractions,
    table_for,
)
from rooflinekit.stages.expected_words import TWO_BATCH_WORDS
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.kernel_times import answered, hold_shares, measured_time, queries_of, whole

if TYPE_CHECKING:  # a type only: the capture package imports torch, which pricing a report needs not
    from rooflinekit.stages.capture.records import OpRecord


#: Matrix-product ops: one GEMM kernel each.
MATMUL_OPS = frozenset({
    "aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.addbmm", "aten._scaled_mm", "aten.linear",
    "aten.matmul", "aten._int_mm", "aten._weight_int4pack_mm", "aten._weight_int8pack_mm", "aten.einsum",
})
#: The operand holding the product's rows: the bias or input comes first in these.
_ROWS_OPERAND = {"aten.addmm": 1, "aten.baddbmm": 1, "aten.addbmm": 1}
_ATTENTION_WORDS = ("attention", "attn", "sdpa", "flash")


def gemm_rows(name: str, shapes: str) -> int | None:
    """M, the output rows of one matrix product (per batch for bmm), from its recorded shapes."""
    operands = shapes.split(",") if shapes else []
    i = _ROWS_OPERAND.get(name, 0)
    if len(operands) <= i:
        return None
    try:
        dims = [int(d) for d in operands[i].split("x")]
    except ValueError:
        return None
    if len(dims) < 2:
        return 1
    if name in ("aten.bmm", "aten.baddbmm"):
        return dims[-2]
    return math.prod(dims[:-1])


def query_len(shapes: str) -> int | None:
    """A fused attention's query length: the second-last dim of its first operand (the query)."""
    first = shapes.split(",")[0] if shapes else ""
    try:
        dims = [int(d) for d in first.split("x")]
    except ValueError:
        return None
    return dims[-2] if len(dims) >= 2 else None


def kernel_size(op: OpRecord) -> float | None:
    """Where a kernel sits on its class's curve (size_of), from its record."""
    return size_of(op.name, op.kind, op.shapes, op.attrs)


def size_of(name: str, kind: str, shapes: str, attrs: dict | None = None) -> float | None:
    """Where a kernel sits on its class's curve: a matrix product's output rows, a fused attention's
    query length, an MoE record's tokens per expert (tokens x k / experts); None where not recorded."""
    if name in MATMUL_OPS:
        return gemm_rows(name, shapes)
    if kind == "fused" and any(w in name.lower() for w in _ATTENTION_WORDS):
        return query_len(shapes)
    terms = (attrs or {}).get("expected_experts")
    if terms and terms.get("experts"):
        return terms["tokens"] * terms["k"] / terms["experts"]
    return None


def kernel_class(op: OpRecord, phase: str, attention_ops: frozenset[int], table: EfficiencyTable) -> str:
    """The class of one op record's kernel (see the module docstring)."""
    rows = gemm_rows(op.name, op.shapes) if op.name in MATMUL_OPS else None
    return classify(op.name, op.kind, op.index in attention_ops, op.flops > 0 and op.param_bytes > 0, rows, phase,
                    table)


def classify(name: str, kind: str, in_attention: bool, modelled_gemm: bool, rows: float | None, phase: str,
             table: EfficiencyTable) -> str:
    """A kernel's class from what decides it: its name and kind, whether it is a matrix product
    inside an attention layer, whether a modelled record has FLOPs and weights, its output rows."""
    lowered = name.lower()
    matmul = name in MATMUL_OPS
    if (kind in ("fused", "modelled") and any(w in lowered for w in _ATTENTION_WORDS)) or (matmul and in_attention):
        return "attention_decode" if phase == "decode" else "attention_prefill"
    if matmul or (kind == "modelled" and modelled_gemm):
        small = phase == "decode" if rows is None else rows <= table.small_gemm_max_rows
        return "gemm_small" if small else "gemm_large"
    return "elementwise"


def kernel_time(flops: float, nbytes: float, dtype_peak: float, bandwidth: float, fractions: Fractions,
                dtype: str) -> float:
    """One kernel at its class's achievable rates: the larger of compute and traffic time."""
    return max(flops / (fractions.compute_for(dtype) * dtype_peak), nbytes / (fractions.bandwidth_for(dtype) * bandwidth))


@dataclass(frozen=True)
class Expected:
    """The expected step and its parts; `op_times` per op record (launch included, 0 for collectives).
    Under two-batch overlap the parts are both micro-batches' and `hidden_s` is what ran under the other
    stream (kernels + launches + collectives - step)."""

    step_s: float
    kernels_s: float
    launch_s: float
    comm_s: float
    kernels: int
    op_times: list[float]
    classes: dict[str, int]
    conventions: list[str]
    overlap: str = "none"
    hidden_s: float = 0.0
    #: per op record, (its kernels' time without launches, its kernels): (0.0, 0) for collectives
    op_kernels: list[tuple[float, int]] = field(default_factory=list)

    def with_kernels(self, kernels_and_launches_s: float) -> float:
        """A step of these collectives beside other kernels (the fused view's): added, or under
        two-batch overlap the longer of the two streams."""
        if self.overlap == "two-batch":
            return max(kernels_and_launches_s, self.comm_s)
        return kernels_and_launches_s + self.comm_s


def launches(op: OpRecord) -> bool:
    """Whether an op record is a kernel of its own (collectives are priced as communication)."""
    return op.kind != "collective" and (op.flops > 0 or op.bytes_read + op.bytes_written > 0)


def halved(flops: float, nbytes: float, weights: float, half_weights: float | None = None) -> tuple[float, float]:
    """(FLOPs, bytes) of one kernel at half its tokens: FLOPs and activation bytes halved, the
    weights it reads (at most its bytes) read whole, or `half_weights` of them where half the tokens
    read fewer (an MoE record's distinct experts; two-batch overlap's micro-batch)."""
    weights = min(max(weights, 0.0), nbytes)
    return flops / 2, (nbytes - weights) / 2 + (weights if half_weights is None else min(half_weights, weights))


def half_expert_weights(op: OpRecord) -> float | None:
    """The weight bytes an MoE record reads at half its tokens: the distinct experts half the tokens
    touch (its `expected_experts` terms, rooflinekit.stages.modelled.emit); None for other records."""
    terms = op.attrs.get("expected_experts")
    if not terms:
        return None
    k, experts, redundant = terms["k"], terms["experts"], terms.get("redundant", 0)
    full = expected_distinct_experts(terms["tokens"], k, experts, redundant)
    return op.param_bytes * expected_distinct_experts(terms["tokens"] / 2, k, experts, redundant) / full if full else None


def expert_bytes(op: OpRecord) -> float | None:
    """One expert's weight matrix on this GPU, in bytes, of a grouped expert GEMM record (its weight
    bytes over the distinct experts it touches, from its `expected_experts` terms); None for others."""
    terms = op.attrs.get("expected_experts")
    if not terms or op.flops <= 0 or op.param_bytes <= 0:
        return None
    touched = expected_distinct_experts(terms["tokens"], terms["k"], terms["experts"], terms.get("redundant", 0))
    touched *= terms.get("share", 1.0)
    return op.param_bytes / touched if touched > 0 else None


#: (id(fractions), id(curve), bytes) -> (fractions, curve, the fractions at those bytes): on_bytes_curve's cache
_ON_CURVE: dict[tuple[int, int, float], tuple[Fractions, Curve, Fractions]] = {}


def on_bytes_curve(fractions: Fractions, curve: Curve | None, size: float | None) -> Fractions:
    """`fractions` with the bandwidth fraction of a table's curve by bytes (`[experts]`, `[weights]`)
    at `size`; as they are where there is no curve or no size. The bytes grow with the size, so the
    curve is read at its compute envelope: bytes / fraction never falls."""
    if curve is None or not size or size <= 0:
        return fractions
    key = (id(fractions), id(curve), float(size))
    kept = _ON_CURVE.get(key)
    if kept is None or kept[0] is not fractions or kept[1] is not curve:
        if len(_ON_CURVE) > 50000:
            _ON_CURVE.clear()
        bw = compute_at(curve.at, curve.bandwidth or (), float(size))
        kept = _ON_CURVE[key] = (fractions, curve, replace(fractions, bandwidth=bw, bandwidth_by_dtype={}))
    return kept[2]


def expert_fractions(fractions: Fractions, table: EfficiencyTable, per_expert: float | None) -> Fractions:
    """A grouped expert GEMM's fractions: its class's (compute by its tokens per expert) with the
    bandwidth fraction of the table's `[experts]` curve at one expert's matrix bytes (narrow experts,
    a TP shard's, stream slower); `fractions` as they are where the table has no such curve."""
    return on_bytes_curve(fractions, table.experts, per_expert)


def weight_fractions(fractions: Fractions, table: EfficiencyTable, weight_bytes: float | None) -> Fractions:
    """A dense GEMM's fractions: its class's (compute by its rows) with the bandwidth fraction of the
    table's `[weights]` curve at its weight matrix's bytes on the GPU (a small matrix leaves much of
    the GPU idle and streams slower); `fractions` as they are where the table has no such curve or
    the kernel reads no weights."""
    return on_bytes_curve(fractions, table.weights, weight_bytes)


GEMM_CLASSES = frozenset({"gemm_small", "gemm_large"})


def kernel_weights(ops: Sequence[OpRecord]) -> list[float]:
    """Each record's weight matrix as its kernel reads it: its own (a sweep's compact record's over
    the n kernels it stands for), or where the serving view runs sibling projections as one merged
    GEMM (attrs["siblings"], as kernel_times.queries_of asks it), the merged GEMM's: its siblings'
    summed."""
    own = [op.param_bytes / op.attrs.get("merged", 1) for op in ops]
    groups: dict[tuple, list[int]] = {}
    for i, op in enumerate(ops):
        group = op.attrs.get("siblings")
        if group is not None and op.name in MATMUL_OPS and op.param_bytes > 0:
            groups.setdefault((group, op.dtype, gemm_rows(op.name, op.shapes)), []).append(i)
    for members in groups.values():
        total = sum(own[i] for i in members)
        for i in members:
            own[i] = total
    return own


def op_fractions(op: OpRecord, cls: str, table: EfficiencyTable, micro: bool = False,
                 weights: float | None = None) -> Fractions:
    """One op record's fractions: its class's, read on the class's curve at its size (with `micro`,
    one micro-batch's), a grouped expert GEMM's bandwidth by its width (expert_fractions), a dense
    GEMM's by the weight matrix its kernel reads (`weights`, kernel_weights; weight_fractions)."""
    fractions, size = table.classes[cls], kernel_size(op)
    at = fractions.at(micro_batch_size(fractions.curve, size) if micro else size)
    per_expert = expert_bytes(op) if table.experts is not None or table.weights is not None else None
    if per_expert is None and cls in GEMM_CLASSES and table.weights is not None:
        return weight_fractions(at, table, op.param_bytes / op.attrs.get("merged", 1) if weights is None else weights)
    return expert_fractions(at, table, per_expert)


def expected_step(ops: Sequence[OpRecord], attention_ops: Iterable[int], hw: HardwareSpec, phase: str,
                  comm_expected_s: float, comm_source: str, overlap: str = "none", comm_halves_s: float = 0.0) -> Expected:
    """The expected step of one report's op records on `hw` (see the module docstring); with
    `overlap` "two-batch", two micro-batches whose collectives (`comm_halves_s`: every call twice at
    half its message, half_message) run under each other's kernels."""
    table = table_for(hw)
    attention = frozenset(attention_ops)
    bandwidth = hw.memory_bandwidth
    two = overlap == "two-batch"
    measured = table.times()
    queries = queries_of(ops, attention) if measured is not None else [None] * len(ops)
    peaks: dict[str, float] = {}
    own, counts = [], dict.fromkeys(CLASSES, 0)  # own: (kernel time, kernels) per op record
    shares: list = []  # records that are shares of one measured kernel (kernel_times.hold_shares)
    kernels = 0
    weights = kernel_weights(ops) if table.weights is not None else [None] * len(ops)
    for op, q, w in zip(ops, queries, weights, strict=True):
        if not launches(op):
            own.append((0.0, 0))
            continue
        cls = kernel_class(op, phase, attention, table)
        peak = peaks.get(op.dtype) or peaks.setdefault(op.dtype, hw.peak(op.dtype))
        n = op.attrs.get("merged", 1)  # a sweep's compact record stands for n equal kernels
        f, b = halved(op.flops, op.bytes, op.param_bytes, half_expert_weights(op)) if two else (op.flops, op.bytes)
        asked = None if q is None else answered(measured, q.halved() if two else q)
        t = None if asked is None else measured_time(measured, asked, f, b, peak, bandwidth, n)
        if t is not None and asked.get("share") is not None:
            # its roofline: f and b count the n kernels a compact record stands for already
            shares.append((len(own), whole(asked), (2 if two else 1) * max(f / peak, b / bandwidth)))
        if t is None:
            t = kernel_time(f, b, peak, bandwidth, op_fractions(op, cls, table, micro=two, weights=w), op.dtype)
        if two:
            t, n = 2 * t, 2 * n
        kernels += n
        counts[cls] += n
        own.append((t, n))
    times = [t for t, _ in own]
    hold_shares(times, shares)
    own = [(t, n) for t, (_, n) in zip(times, own, strict=True)]
    kernels_s = sum(times)
    # the host issues prefill's kernels ahead of the GPU: its launches cover the GPU's work (the
    # collectives' too, one after another; under two-batch overlap only the kernels' stream)
    launch_s = table.launches_s(phase, kernels, kernels_s if two else kernels_s + comm_expected_s)
    per = launch_s / kernels if kernels else 0.0
    times = [t + n * per for t, n in own]
    words = conventions(table, phase, comm_source, hw.generation)
    if launch_s > kernels * table.launch_s(phase) * (1 + 1e-9):
        issue = kernels * table.host_s(phase)
        words.append(f"host-bound: issuing the {kernels} kernels takes {issue * 1e6:,.1f} us, longer than the "
                     f"GPU's {(issue - launch_s) * 1e6:,.1f} us of work: the step waits for the host (fewer kernels, "
                     "by fusion, or a CUDA graph would shorten it)")
    if not two:
        return Expected(step_s=kernels_s + launch_s + comm_expected_s, kernels_s=kernels_s, launch_s=launch_s,
                        comm_s=comm_expected_s, kernels=kernels, op_times=times, classes=counts, conventions=words,
                        op_kernels=own)
    comm_s = comm_halves_s
    step_s = max(kernels_s + launch_s, comm_s)
    words = [w.replace("; nothing overlapped", "; the two micro-batches' streams overlapped (below)")
             .replace(", not overlapped with compute", ", under the other micro-batch's kernels") for w in words]
    return Expected(step_s=step_s, kernels_s=kernels_s, launch_s=launch_s, comm_s=comm_s, kernels=kernels,
                    op_times=times, classes=counts, conventions=[*words, TWO_BATCH_WORDS], overlap=overlap,
                    hidden_s=kernels_s + launch_s + comm_s - step_s, op_kernels=own)


def runs_two_batches(overlap: str, phase: str, batch: int) -> bool:
    """Whether a step runs as two micro-batches: with two-batch overlap, except a decode step of one
    sequence, which engines do not split (SGLang captures its two-batch graphs from two sequences up)."""
    return overlap == "two-batch" and not (phase == "decode" and batch < 2)


def half_message(attrs: dict) -> dict:
    """A collective call's attrs at half its message (one micro-batch's share; a declared shape's
    tokens halved as KernelQuery.halved halves them)."""
    out = {**attrs, "message_bytes": float(attrs.get("message_bytes", 0.0)) / 2,
           "wire_bytes": float(attrs.get("wire_bytes", 0.0)) / 2}
    if "tokens" in (attrs.get("kernel") or {}):
        out["kernel"] = {**attrs["kernel"], "tokens": math.ceil(attrs["kernel"]["tokens"] / 2)}
    return out


def fused_expected(expected: Expected, kernel_of: Sequence[int], fused_kernels, hw: HardwareSpec,
                   phase: str, micro_batches: int = 1) -> float:
    """The fused view's expected kernels and launches: each anchor at its op's kernel time, each fused
    kernel as one element-wise kernel (launched once per micro-batch: its time is linear in the
    tokens), launches as `expected` prices them; collectives are not in it (the caller adds them)."""
    table = table_for(hw)
    anchors = [own for own, k in zip(expected.op_kernels, kernel_of, strict=True) if k < 0]
    work, count = sum(t for t, _ in anchors), sum(n for _, n in anchors) + micro_batches * len(fused_kernels)
    fractions, bandwidth = table.classes["elementwise"], hw.memory_bandwidth
    for kernel in fused_kernels:
        work += kernel_time(kernel.flops, kernel.bytes, hw.peak(kernel.dtype), bandwidth, fractions, kernel.dtype)
    busy = work if expected.overlap == "two-batch" else work + expected.comm_s
    return work + table.launches_s(phase, count, busy)


def conventions(table: EfficiencyTable, phase: str, comm_source: str, generation: str = "") -> list[str]:
    """What expected_step_s means and the figures it used, in words (totals.expected_conventions)."""
    host = " (or the host's issue time where it is longer, below)" if table.host_s(phase) else ""
    lines = [
        "expected_step_s: sum over kernels (one per op record of the report's view) of max(FLOPs / (compute "
        f"fraction x the dtype's dense peak), bytes / (bandwidth fraction x HBM bandwidth)), plus a launch "
        f"cost per kernel{host}, plus collectives at their expected cost; nothing overlapped",
    ]
    if table.calibrated:
        lines.append("the hardware entry is calibrated: its measured ceilings are taken as achievable "
                     "(fraction 1 of each); the table of achievable fractions is not applied")
    else:
        for name in CLASSES:
            f = table.classes[name]
            extra = "".join(f", {v:g} for {k}" for k, v in f.compute_by_dtype.items())
            curve = curve_words(f.curve) if f.curve is not None else ""
            lines.append(f"{name}: {curve}{f.compute:g} of peak compute{extra}, {f.bandwidth:g} of HBM bandwidth "
                         f"({table.sources.get(name + '.compute', '')}; {table.sources.get(name + '.bandwidth', '')})")
        if Path(table.path) == TABLE_FILE:
            lines.append(f"fractions from {Path(table.path).name} (kernel-level public measurements on Hopper; "
                         "docs/accounting.md, Expected time)")
            if generation and generation != "hopper":
                lines.append(f"no table of {generation} fractions is committed: the Hopper fractions are applied to "
                             f"this {generation} part as they are")
        elif Path(table.path).parent == TABLE_FILE.parent:
            lines.append(f"fractions from {Path(table.path).name} (kernel-level public measurements on "
                         f"{generation or 'its generation'}; docs/accounting.md, Expected time)")
        else:
            lines.append(f"{OWN_SOURCE_WORDS}{table.path} (its sources above)")
    measured = table.times()
    if measured is not None:
        lines.append(f"kernel times: measured by shape from the {measured.label} where it answers (GEMMs by M, N "
                     "and K; attention by batch, lengths and heads; an MoE layer's experts; collectives by message "
                     "size, an expert-parallel all-to-all by its tokens), held at the roofline; other kernels at the "
                     "fractions above")
    if table.experts is not None and not table.calibrated:
        lines.append(f"grouped expert GEMMs (MoE experts): bandwidth {curve_words(table.experts)}"
                     "the GEMM class's; compute the GEMM class's by tokens per expert (the table's [experts] "
                     "curve names its source per point)")
    if table.weights is not None and not table.calibrated:
        lines.append(f"dense GEMMs: bandwidth {curve_words(table.weights)}the GEMM class's; compute the GEMM "
                     "class's by rows; an expert GEMM's by the [experts] curve (the table's [weights] curve names "
                     "its source per point)")
    lines.append(f"a matrix product with at most {table.small_gemm_max_rows} output rows is a small "
                 "(memory-bound) GEMM; fused attention and the products inside attention layers are "
                 f"{phase} attention; other ops are element-wise / copy")
    if phase == "decode":
        lines.append(f"launch: {table.launch_decode_s * 1e6:g} us per kernel, the decode step replayed as a "
                     f"CUDA graph, as serving engines run it ({table.sources.get('launch.decode_s', '')})")
    else:
        lines.append(f"launch: {table.launch_prefill_s * 1e6:g} us per kernel on the GPU, prefill launched eagerly "
                     f"(no CUDA graph), as serving engines run it ({table.sources.get('launch.prefill_s', '')})")
        if table.launch_host_prefill_s:
            lines.append(f"host: {table.launch_host_prefill_s * 1e6:g} us to issue each kernel, ahead of the GPU: "
                         "the step is the longer of the GPU's work with its launches and the host's issue time "
                         f"({table.sources.get('launch.host_prefill_s', '')})")
    lines.append(f"collectives: {comm_source}, not overlapped with compute")
    return lines


def serving_gpus(parallel: dict | None) -> int:
    """The GPUs one step's tokens are served by: the TP group (under EP alone the batch is per GPU)."""
    if not parallel:
        return 1
    return max(1, int(parallel.get("tp") or 1))


def throughput(tokens: int, q_len: int, phase: str, step_s: float, gpus: int) -> tuple[float | None, float | None]:
    """(tokens/s per GPU, tokens/s per user) at the expected step; per user is decode's q_len
    accepted tokens per sequence per step (None in prefill)."""
    if not step_s or step_s <= 0:
        return None, None
    per_gpu = tokens / step_s / gpus
    per_user = q_len / step_s if phase == "decode" else None
    return per_gpu, per_user
