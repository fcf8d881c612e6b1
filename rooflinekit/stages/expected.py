"""Expected time: what a step takes at the rates real kernels reach, beside the bound.

The bound (`totals.time_bound_s`) is pure physics: the whole step at the datasheet's peak and
bandwidth. The expected step (`totals.expected_step_s`) sums, over the step's kernels, each kernel's
larger of compute at the achievable fraction of its class's peak and traffic at the achievable
fraction of HBM bandwidth, plus a launch cost per kernel, plus the collectives at their expected
cost, none of them overlapped. The fractions are the committed table `efficiency.toml` (a source per
value, from kernel-level public measurements only); a calibrated hardware entry (`rooflinekit
calibrate`) replaces it, its measured ceilings taken as achievable (fraction 1).

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

import hashlib
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from rooflinekit.core.errors import UserError
from rooflinekit.core.experts import expected_distinct_experts
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.stages.efficiency_curve import (
    Curve,
    bandwidth_at,
    compute_at,
    curve_words,
    micro_batch_size,
    parse_curve,
)
from rooflinekit.stages.expected_words import TWO_BATCH_WORDS
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.kernel_times import KernelTimes, measured_time, queries_of, resolve

if TYPE_CHECKING:  # a type only: the capture package imports torch, which pricing a report needs not
    from rooflinekit.stages.capture.records import OpRecord

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The committed table of achievable fractions (docs/accounting.md, "Expected time").
TABLE_FILE = Path(__file__).resolve().with_name("efficiency.toml")
#: The committed table as plugins name it (`--efficiency published`).
PUBLISHED_EFFICIENCY = TABLE_FILE
CLASSES = ("gemm_large", "gemm_small", "attention_decode", "attention_prefill", "elementwise")
#: Matrix-product ops: one GEMM kernel each.
MATMUL_OPS = frozenset({
    "aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.addbmm", "aten._scaled_mm", "aten.linear",
    "aten.matmul", "aten._int_mm", "aten._weight_int4pack_mm", "aten._weight_int8pack_mm", "aten.einsum",
})
#: The operand holding the product's rows: the bias or input comes first in these.
_ROWS_OPERAND = {"aten.addmm": 1, "aten.baddbmm": 1, "aten.addbmm": 1}
_ATTENTION_WORDS = ("attention", "attn", "sdpa", "flash")
#: How the conventions name an efficiency source other than the committed tables (its path follows).
OWN_SOURCE_WORDS = "fractions from the efficiency source "


@dataclass(frozen=True)
class Fractions:
    """The achievable fractions of one kernel class: of the dtype's dense peak and of HBM bandwidth;
    with a `curve`, those of a kernel of a given size (`at`)."""

    compute: float
    bandwidth: float
    compute_by_dtype: dict[str, float] = field(default_factory=dict)
    curve: Curve | None = None
    bandwidth_by_dtype: dict[str, float] = field(default_factory=dict)

    def compute_for(self, dtype: str) -> float:
        return self.compute_by_dtype.get(dtype, self.compute)

    def bandwidth_for(self, dtype: str) -> float:
        return self.bandwidth_by_dtype.get(dtype, self.bandwidth)

    def at(self, size: float | None) -> Fractions:
        """The fractions of a kernel of `size` on the class's curve (rooflinekit.stages.efficiency_curve),
        flat ones; itself where the class has no curve or the size is not known."""
        if self.curve is None or size is None:
            return self
        key = (id(self), float(size))
        kept = _AT.get(key)
        if kept is None or kept[0] is not self:
            if len(_AT) > 50000:
                _AT.clear()
            kept = _AT[key] = (self, _resolved(self, self.curve, float(size)))
        return kept[1]


#: (id(fractions), size) -> (fractions, the flat fractions at that size): Fractions.at's cache
_AT: dict[tuple[int, float], tuple[Fractions, Fractions]] = {}


def _resolved(f: Fractions, c: Curve, size: float) -> Fractions:
    """Flat fractions at `size`: a format's own curve, else its own constant, else the class curve,
    else the class constant."""
    compute = compute_at(c.at, c.compute, size) if c.compute else f.compute
    bandwidth = bandwidth_at(c.at, c.bandwidth, size) if c.bandwidth else f.bandwidth
    by_dtype = {**f.compute_by_dtype, **{d: compute_at(c.at, v, size) for d, v in c.compute_by_dtype.items()}}
    by_bw = {**f.bandwidth_by_dtype, **{d: bandwidth_at(c.at, v, size) for d, v in c.bandwidth_by_dtype.items()}}
    return Fractions(compute, bandwidth, by_dtype, None, by_bw)


@dataclass(frozen=True)
class EfficiencyTable:
    classes: dict[str, Fractions]
    small_gemm_max_rows: int
    launch_decode_s: float
    launch_prefill_s: float
    sources: dict[str, str] = field(default_factory=dict)
    path: str = ""
    calibrated: bool = False
    #: grouped expert GEMMs' bandwidth fraction by one expert's matrix bytes (the table's `[experts]`)
    experts: Curve | None = None
    #: the table's `[kernel_times]`: a database of measured kernels by shape (rooflinekit.stages.kernel_times)
    kernel_times_spec: dict | None = None

    def times(self) -> KernelTimes | None:
        """The database of measured kernels the table names, resolved through the plugins; None if none."""
        if not self.kernel_times_spec or self.calibrated:
            return None
        return resolve(self.kernel_times_spec, self.path)

    def launch_s(self, phase: str) -> float:
        """Per kernel: a CUDA graph node's cost in decode and in a mixed step (engines replay the
        step's non-attention kernels as graphs: vLLM's piecewise CUDA graphs), an eager launch's
        in prefill."""
        return self.launch_decode_s if phase in ("decode", "mixed") else self.launch_prefill_s


def _fraction(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{where} must be a fraction in (0, 1], not {value!r}")
    return float(value)


def load_table(path: str | None = None) -> EfficiencyTable:
    """The table of achievable fractions (default: the committed `efficiency.toml`), read again
    when the file changes (a source rewritten by `calibrate --trace` in the same process)."""
    file = Path(path) if path else TABLE_FILE
    try:
        stat = file.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = None
    return _load_table(str(file), stamp)


@lru_cache(maxsize=16)
def _load_table(path: str, stamp: tuple[int, int] | None) -> EfficiencyTable:
    file = Path(path)
    try:
        return _parsed(tomllib.loads(file.read_text()), file)
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"no key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise UserError(f"efficiency source {file}: {what} (rooflinekit calibrate --trace writes a valid one; "
                        "docs/accounting.md, Expected time)") from None


def _parsed(data: dict, file: Path) -> EfficiencyTable:
    """The table from a parsed efficiency source (KeyError, ValueError where it is not one)."""
    classes, sources = {}, {}
    for name in CLASSES:
        entry = data["classes"][name]
        extra = {k.removeprefix("compute_"): _fraction(v, f"{name}.{k}") for k, v in entry.items()
                 if k.startswith("compute_")}
        extra_bw = {k.removeprefix("bandwidth_"): _fraction(v, f"{name}.{k}") for k, v in entry.items()
                    if k.startswith("bandwidth_")}
        curve = parse_curve(entry["curve"], name) if "curve" in entry else None
        classes[name] = Fractions(_fraction(entry["compute"], f"{name}.compute"),
                                  _fraction(entry["bandwidth"], f"{name}.bandwidth"), extra, curve, extra_bw)
        sources.update({f"{name}.{k}": v for k, v in entry.get("sources", {}).items()})
    launch = data["launch"]
    sources.update({f"launch.{k}": v for k, v in launch.get("sources", {}).items()})
    experts = None
    if "experts" in data:
        experts = parse_curve(data["experts"]["curve"], "experts")
        if experts.bandwidth is None or experts.compute or experts.compute_by_dtype or experts.bandwidth_by_dtype:
            raise ValueError("experts.curve gives one bandwidth list (its compute is the GEMM classes')")
    spec = data.get("kernel_times")
    if spec is not None and not isinstance(spec, dict):
        raise ValueError("kernel_times must be a table: source = NAME and its settings")
    table = EfficiencyTable(classes=classes, small_gemm_max_rows=int(data["small_gemm_max_rows"]),
                            launch_decode_s=float(launch["decode_s"]), launch_prefill_s=float(launch["prefill_s"]),
                            sources=sources, path=str(file), experts=experts, kernel_times_spec=spec)
    return table  # its kernel-times database is resolved where it is used (with_efficiency, times())


def with_efficiency(hw: HardwareSpec, source: str | None, host: PluginHost | None = None) -> HardwareSpec:
    """`hw` priced with the efficiency source `source` (`--efficiency`; None or "": the entry's own,
    its `efficiency` key, else the committed table). The plugins' rooflinekit_efficiency_source
    answers name the file (built in: `published`, a path); it is read here, so a bad file or an
    unknown name stops with one line."""
    if not source:
        return hw
    host = host or get_host()
    path, _ = host.first(host.hook.rooflinekit_efficiency_source, source=source, hardware=hw)
    if path is None:
        raise UserError(f"--efficiency {source!r}: no such efficiency source (give published, the path of an "
                        "efficiency file such as `rooflinekit calibrate --trace` writes, or a name a plugin "
                        "provides: `rooflinekit plugins`)")
    table = load_table(str(path))  # a UserError naming the file where it is not one
    if table.kernel_times_spec:  # its database from this host's plugins, kept for the process
        resolve(table.kernel_times_spec, table.path, host)
    published = Path(path).resolve() == TABLE_FILE
    if published and hw.calibrated:
        raise UserError(f"--efficiency {source}: '{hw.name}' is a calibrated entry, whose measured ceilings are "
                        "taken as achievable; the published fractions apply to datasheet entries (use the "
                        "datasheet entry, or --efficiency FILE)")
    return replace(hw, efficiency="" if published else str(path))


def generation_table(generation: str) -> Path:
    """The committed table of a GPU generation: `efficiency-<generation>.toml` beside the Hopper
    table (`efficiency.toml`) where one is committed, else the Hopper table."""
    if generation and generation != "hopper":
        own = TABLE_FILE.with_name(f"efficiency-{generation}.toml")
        if own.is_file():
            return own
    return TABLE_FILE


def committed_tables() -> list[Path]:
    """Every committed table (the Hopper one first): what a published-row result depends on."""
    return [TABLE_FILE, *sorted(TABLE_FILE.parent.glob("efficiency-*.toml"))]


def tables_digest() -> str:
    """sha256[:16] of every committed table (names and contents): what a published-row result and
    the spread computed from them depend on."""
    digest = hashlib.sha256()
    for path in committed_tables():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def table_for(hw: HardwareSpec) -> EfficiencyTable:
    """The table an entry is priced with: its own efficiency source where it names one; a
    calibrated entry's measured ceilings are achievable (every fraction 1); any other entry takes
    the committed table of its generation (generation_table)."""
    if hw.efficiency:
        return load_table(hw.efficiency)
    path = generation_table(hw.generation)
    table = load_table(None if path == TABLE_FILE else str(path))
    if not hw.calibrated:
        return table
    return _at_ones(table)


#: id(table) -> (table, the same at fraction 1): one per loaded table (they are kept by load_table)
_ONES: dict[int, tuple[EfficiencyTable, EfficiencyTable]] = {}


def _at_ones(table: EfficiencyTable) -> EfficiencyTable:
    """`table` with every fraction 1 (a calibrated entry's measured ceilings), one per table."""
    kept = _ONES.get(id(table))
    if kept is None or kept[0] is not table:
        ones = {name: Fractions(1.0, 1.0) for name in CLASSES}
        kept = _ONES[id(table)] = (table, replace(table, classes=ones, calibrated=True, experts=None,
                                                  kernel_times_spec=None))
    return kept[1]


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


#: (id(fractions), id(curve), bytes) -> (fractions, curve, the fractions for those experts): expert_fractions' cache
_EXPERTS: dict[tuple[int, int, float], tuple[Fractions, Curve, Fractions]] = {}


def expert_fractions(fractions: Fractions, table: EfficiencyTable, per_expert: float | None) -> Fractions:
    """A grouped expert GEMM's fractions: its class's (compute by its tokens per expert) with the
    bandwidth fraction of the table's `[experts]` curve at one expert's matrix bytes (narrow experts,
    a TP shard's, stream slower); `fractions` as they are where the table has no such curve."""
    curve = table.experts
    if curve is None or per_expert is None:
        return fractions
    key = (id(fractions), id(curve), float(per_expert))
    kept = _EXPERTS.get(key)
    if kept is None or kept[0] is not fractions or kept[1] is not curve:
        if len(_EXPERTS) > 50000:
            _EXPERTS.clear()
        # the bytes grow with the size: the compute envelope keeps bytes / fraction from falling
        bw = compute_at(curve.at, curve.bandwidth or (), float(per_expert))
        kept = _EXPERTS[key] = (fractions, curve, replace(fractions, bandwidth=bw, bandwidth_by_dtype={}))
    return kept[2]


def op_fractions(op: OpRecord, cls: str, table: EfficiencyTable, micro: bool = False) -> Fractions:
    """One op record's fractions: its class's, read on the class's curve at its size (with `micro`,
    one micro-batch's), a grouped expert GEMM's bandwidth by its width (expert_fractions)."""
    fractions, size = table.classes[cls], kernel_size(op)
    at = fractions.at(micro_batch_size(fractions.curve, size) if micro else size)
    return expert_fractions(at, table, expert_bytes(op) if table.experts is not None else None)


def expected_step(ops: Sequence[OpRecord], attention_ops: Iterable[int], hw: HardwareSpec, phase: str,
                  comm_expected_s: float, comm_source: str, overlap: str = "none", comm_halves_s: float = 0.0) -> Expected:
    """The expected step of one report's op records on `hw` (see the module docstring); with
    `overlap` "two-batch", two micro-batches whose collectives (`comm_halves_s`: every call twice at
    half its message, half_message) run under each other's kernels."""
    table = table_for(hw)
    attention = frozenset(attention_ops)
    launch = table.launch_s(phase)
    bandwidth = hw.memory_bandwidth
    two = overlap == "two-batch"
    measured = table.times()
    queries = queries_of(ops, attention) if measured is not None else [None] * len(ops)
    peaks: dict[str, float] = {}
    times, counts = [], dict.fromkeys(CLASSES, 0)
    kernels_s, kernels = 0.0, 0
    for op, q in zip(ops, queries, strict=True):
        if not launches(op):
            times.append(0.0)
            continue
        cls = kernel_class(op, phase, attention, table)
        peak = peaks.get(op.dtype) or peaks.setdefault(op.dtype, hw.peak(op.dtype))
        n = op.attrs.get("merged", 1)  # a sweep's compact record stands for n equal kernels
        if two:
            f, b = halved(op.flops, op.bytes, op.param_bytes, half_expert_weights(op))
            t = None if q is None else measured_time(measured, q.halved(), f, b, peak, bandwidth, n)
            if t is None:
                t = kernel_time(f, b, peak, bandwidth, op_fractions(op, cls, table, micro=True), op.dtype)
            t *= 2
            n *= 2
        else:
            t = None if q is None else measured_time(measured, q, op.flops, op.bytes, peak, bandwidth, n)
            if t is None:
                t = kernel_time(op.flops, op.bytes, peak, bandwidth, op_fractions(op, cls, table), op.dtype)
        kernels_s += t
        kernels += n
        counts[cls] += n
        times.append(t + n * launch)
    launch_s = kernels * launch
    words = conventions(table, phase, comm_source, hw.generation)
    if not two:
        return Expected(step_s=kernels_s + launch_s + comm_expected_s, kernels_s=kernels_s, launch_s=launch_s,
                        comm_s=comm_expected_s, kernels=kernels, op_times=times, classes=counts, conventions=words)
    comm_s = comm_halves_s
    step_s = max(kernels_s + launch_s, comm_s)
    words = [w.replace("; nothing overlapped", "; the two micro-batches' streams overlapped (below)")
             .replace(", not overlapped with compute", ", under the other micro-batch's kernels") for w in words]
    return Expected(step_s=step_s, kernels_s=kernels_s, launch_s=launch_s, comm_s=comm_s, kernels=kernels,
                    op_times=times, classes=counts, conventions=[*words, TWO_BATCH_WORDS], overlap=overlap,
                    hidden_s=kernels_s + launch_s + comm_s - step_s)


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


def fused_expected(op_times: Sequence[float], kernel_of: Sequence[int], fused_kernels, hw: HardwareSpec,
                   phase: str, micro_batches: int = 1) -> float:
    """The fused view's expected step: each anchor at its op's expected time, each fused kernel as
    one element-wise kernel (with one launch per micro-batch: its time is linear in the tokens);
    collectives are not in it (the caller adds them)."""
    table = table_for(hw)
    total = sum(t for t, k in zip(op_times, kernel_of, strict=True) if k < 0)
    fractions, bandwidth = table.classes["elementwise"], hw.memory_bandwidth
    for kernel in fused_kernels:
        total += kernel_time(kernel.flops, kernel.bytes, hw.peak(kernel.dtype), bandwidth, fractions, kernel.dtype)
        total += micro_batches * table.launch_s(phase)
    return total


def conventions(table: EfficiencyTable, phase: str, comm_source: str, generation: str = "") -> list[str]:
    """What expected_step_s means and the figures it used, in words (totals.expected_conventions)."""
    lines = [
        "expected_step_s: sum over kernels (one per op record of the report's view) of max(FLOPs / (compute "
        "fraction x the dtype's dense peak), bytes / (bandwidth fraction x HBM bandwidth)), plus a launch "
        "cost per kernel, plus collectives at their expected cost; nothing overlapped",
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
    lines.append(f"a matrix product with at most {table.small_gemm_max_rows} output rows is a small "
                 "(memory-bound) GEMM; fused attention and the products inside attention layers are "
                 f"{phase} attention; other ops are element-wise / copy")
    if phase == "decode":
        lines.append(f"launch: {table.launch_decode_s * 1e6:g} us per kernel, the decode step replayed as a "
                     f"CUDA graph, as serving engines run it ({table.sources.get('launch.decode_s', '')})")
    else:
        lines.append(f"launch: {table.launch_prefill_s * 1e6:g} us per kernel, prefill launched eagerly (no "
                     f"CUDA graph), as serving engines run it ({table.sources.get('launch.prefill_s', '')})")
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
