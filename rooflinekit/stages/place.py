"""Place: turn a capture and its attention rows into a typed Report on one hardware entry.

Everything here is a pure function of its inputs: the same capture placed on another entry, with
measured times or under planned parallelism is a new Report (rooflinekit.analyses), never an edit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rooflinekit.core.paths import default_depth, layer_pattern
from rooflinekit.core.report import (
    ROOT,
    AttentionRow,
    AttentionTotals,
    CaptureInfo,
    CollectiveInfo,
    CollectiveSummary,
    Communication,
    FusedTotals,
    HardwareInfo,
    ModelInfo,
    ModuleRow,
    OpRow,
    Placement,
    Report,
    Totals,
    UncountedOp,
    WorkloadInfo,
)
from rooflinekit.core.request import Workload
from rooflinekit.core.units import si
from rooflinekit.stages import collectives
from rooflinekit.stages.attribute import AttentionSite
from rooflinekit.stages.capture.records import CaptureResult, OpRecord
from rooflinekit.stages.expected import (
    Expected,
    expected_step,
    fused_expected,
    half_message,
    runs_two_batches,
    serving_gpus,
    throughput,
)
from rooflinekit.stages.fusion import Fusion, fuse, fused_totals, fusion_notes
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.roofline import op_figures, place_on, ridge
from rooflinekit.stages.spread import spread_for


def rollup_name(path: str, depth: int, group_layers: bool = False) -> str:
    """A module path cut to `depth` components; layer indices become '*' when grouping."""
    if not path or path == ROOT:
        return ROOT
    name = ".".join(path.split(".")[: max(1, depth)])
    return layer_pattern(name) if group_layers else name


@dataclass
class Aggregate:
    """Sums over a set of ops, with the dtype that dominates them."""

    flops: float = 0.0
    bytes: float = 0.0
    param_bytes: float = 0.0
    time_ops_s: float = 0.0
    count: int = 0
    dtype_flops: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    dtype_bytes: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, op: OpRecord, op_time: float) -> None:
        self.add_values(op.flops, op.bytes, op.param_bytes, op.dtype, op_time)

    def add_values(self, flops: float, nbytes: float, param_bytes: float, dtype: str, op_time: float) -> None:
        """add() of an op's figures, taken from it once (build_report adds each op twice)."""
        self.flops += flops
        self.bytes += nbytes
        self.param_bytes += param_bytes
        self.time_ops_s += op_time
        self.count += 1
        self.dtype_flops[dtype] += flops
        self.dtype_bytes[dtype] += nbytes

    def dtype(self, default: str) -> str:
        if any(self.dtype_flops.values()):
            return max(self.dtype_flops, key=self.dtype_flops.get)
        if any(self.dtype_bytes.values()):
            return max(self.dtype_bytes, key=self.dtype_bytes.get)
        return default


def _fields(p: Placement) -> dict:
    """A Placement's fields, to build a subclass (Totals, ModuleRow) from it."""
    return {k: getattr(p, k) for k in Placement.__dataclass_fields__}


def hardware_info(hw: HardwareSpec, dtype: str) -> HardwareInfo:
    """The report's view of a hardware entry, with the peak of `dtype`."""
    key = dtype if dtype in hw.peak_flops else hw.peak_key(dtype)
    peak = hw.peak(key)
    return HardwareInfo(name=hw.name, dtype=key, peak_flops=peak, bandwidth=hw.memory_bandwidth,
                        ridge=ridge(peak, hw.memory_bandwidth), peaks=dict(hw.peak_flops),
                        interconnect_bandwidth=hw.interconnect_bandwidth, calibrated=hw.calibrated,
                        source=hw.path)


def peak_fallbacks(hw: HardwareSpec, dtypes: set[str]) -> list[str]:
    """A note for each dtype the hardware entry has no peak for, naming the peak used instead."""
    notes = []
    for key in sorted(dtypes):
        if key not in hw.peak_flops:
            used = hw.peak_key(key)
            notes.append(f"{hw.name} lists no dense {key} peak: {key} work is placed against its {used} "
                         f"peak ({si(hw.peak_flops[used], 'FLOP/s')})")
    return notes


def attention_row(row: AttentionSite, hw: HardwareSpec) -> AttentionRow:
    """The report row of one attention layer: its spec, minimum and executed figures, placed."""
    spec, cost = row.spec, row.cost
    return AttentionRow(
        module=row.module,
        module_class=row.module_class,
        recognised=row.recognised,
        plugin=row.plugin,
        arch=spec.arch if spec else "unrecognised",
        mode=spec.mode if spec else None,
        num_heads=spec.num_heads if spec else None,
        num_kv_heads=spec.num_kv_heads if spec else None,
        head_dim=spec.head_dim if spec else None,
        v_head_dim=spec.v_head_dim if spec else None,
        window=spec.window if spec else None,
        cache_bytes_per_token=cost.cache_bytes_per_token if cost else None,
        kv_bytes_min=cost.kv_bytes_min if cost else None,
        bytes_min=cost.bytes_min if cost else None,
        kv_bytes_executed=row.kv_bytes_executed,
        kv_read_bytes=row.kv_read_bytes,
        kv_copy_bytes=row.kv_copy_bytes,
        kv_reexpand_flops=row.kv_reexpand_flops,
        amplification=row.amplification,
        read_amplification=row.read_amplification,
        flops_model=cost.flops_model if cost else None,
        flops_alt=dict(cost.flops_alt) if cost else {},
        flops_executed=row.flops_executed,
        bytes_executed=row.bytes_executed,
        intensity_min=row.intensity_min,
        intensity_executed=row.intensity_executed,
        dtype=row.dtype,
        placement_executed=place_on(hw, row.dtype, row.flops_executed, row.bytes_executed),
        placement_min=place_on(hw, row.dtype, cost.flops_model, cost.bytes_min) if cost else None,
        notes=list(row.notes) + (list(cost.notes) if cost else []),
        extra=dict(getattr(spec, "extra", None) or {}) if spec else {},
        op_indices=list(row.op_indices),
        chunk=getattr(spec, "chunk", None) if spec else None,
        cache_bytes_per_sequence=cost.cache_bytes_per_sequence if cost else None,
    )


def _op_row(op: OpRecord, intensity: float | None, bound: str, time_bound_s: float) -> OpRow:
    """The report's row of one op: OpRow(...) with every field, built without the frozen
    dataclass's per-field object.__setattr__ (one row per op: 10^4 of them for a 671B model).
    OpRow has no __post_init__ and no default factories; tests/test_report_types.py holds this
    equal to OpRow's own constructor, field for field."""
    attrs = op.attrs
    collective = None
    if op.kind == "collective":
        collective = CollectiveInfo(**{k: attrs.get(k) for k in ("collective", "group_size", "message_bytes",
                                                                   "wire_bytes", "algorithm", "source")})
    row = _new(OpRow)
    row.__dict__.update({  # every field of OpRow, in its order
        "index": op.index, "name": op.name, "module": op.module or ROOT, "kind": op.kind, "flops": op.flops,
        "bytes_read": op.bytes_read, "bytes_written": op.bytes_written, "param_bytes": op.param_bytes,
        "dtype": op.dtype, "counted": op.counted, "intensity": intensity, "bound": bound,
        "time_bound_s": time_bound_s, "shapes": op.shapes,
        "assumption": (attrs.get("assumption") or None) if attrs else None,
        "formula_error": (attrs.get("formula_error") or None) if attrs else None,
        "collective": collective, "flops_model": None, "measured": None, "expected_s": None,
    })
    return row


_new = object.__new__


FLOP_CONVENTIONS = {
    "flops": "executed: FLOPs of the ops the code ran (formula per op)",
    "mfu_bound": "attainable / peak at the executed intensity (roofline ceiling, executed FLOPs)",
    "flops_model": "executed FLOPs with each recognised attention layer's executed FLOPs "
    "replaced by its architecture's model FLOPs, less projections that re-compute K/V of "
    "cached positions every step (kv_reexpand_flops)",
    "mfu_bound_model": "flops_model / (time_bound_s * peak)",
    "sdpa": "F.scaled_dot_product_attention is one call whatever the backend: 2 * query-key pairs * "
    "(E + Ev) per batch-head, softmax and scaling not counted; a causal call counts the triangle of "
    "pairs it scores (a fused kernel skips the masked blocks) where torch's FlopCounterMode counts "
    "the full square",
    "out_overloads": "an op's out= overload (torch.mm(a, b, out=c)) counts its op's FLOPs; its out= "
    "tensor is written once and not read",
}
TIME_CONVENTIONS = {
    "time_bound_s": "max(flops/peak, bytes/bandwidth, time_comm_s) over the whole step: compute, HBM and the "
    "collectives (one after another on the GPU's links) each overlapped perfectly with the others, so no "
    "schedule runs faster",
    "predicted_step_s": "sum over ops of each op's own time bound (ops run one after another; "
    "a collective's is the link's latency floor plus its wire bytes over the link bandwidth)",
    "time_compute_s": "flops / peak", "time_memory_s": "bytes / bandwidth (HBM)",
    "time_comm_s": "sum over collectives of the link's latency floor per call plus wire bytes / link "
    "bandwidth per direction (comm.expected_time_s: at the library's measured latency and algorithm)",
    "binding": "the largest of time_compute_s, time_memory_s and time_comm_s",
    "fused": "the same step with elementwise chains fused between matmul/attention anchors "
    "(docs/accounting.md, Fused view): fused.predicted_step_s sums each fused kernel's own time "
    "bound and each anchor's eager one; every other time here is eager (op by op)",
}


def communication(ops: list[OpRecord], hw: HardwareSpec) -> Communication:
    s = collectives.summary(ops, hw)
    return Communication(**{**s, "collectives": [CollectiveSummary(**c) for c in s["collectives"]]})


@dataclass(frozen=True)
class Presentation:
    """What a report shows beside the counts: module rows cut to `depth` (None: relative to the
    layer stack, core.paths.default_depth; repeated layers merged
    with `group_layers`), the op rows and the fused view (`detail`), and the model facts, warnings,
    notes and parallel plan it carries."""

    depth: int | None = 3
    group_layers: bool = False
    detail: bool = True
    model_info: dict | None = None
    warnings: Sequence[str] = ()
    notes: Sequence[str] = ()
    parallel: dict | None = None
    #: How the expected step overlaps communication with compute (Deployment.overlap).
    overlap: str = "none"
    #: What the expected time states and leaves out (rooflinekit.stages.expected_words.stated_factors).
    factors: Sequence[str] = ()


@dataclass
class _OpWalk:
    """One pass over the ops: their rows, the step's and each module row's sums, the uncounted ops."""

    op_rows: list[OpRow] = field(default_factory=list)
    total: Aggregate = field(default_factory=Aggregate)
    modules: dict[str, Aggregate] = field(default_factory=lambda: defaultdict(Aggregate))
    uncounted_rows: list[UncountedOp] = field(default_factory=list)


def _walk_ops(cap: CaptureResult, hw: HardwareSpec, view: Presentation) -> _OpWalk:
    """Each op placed once (its row when `view.detail`) and added to the step and its module row."""
    walk = _OpWalk()
    total, modules, op_rows = walk.total, walk.modules, walk.op_rows
    uncounted: dict[str, dict] = {}
    peaks: dict[str, float] = {}  # per dtype
    rollups: dict[str, Aggregate] = {}  # module path -> its row's sums
    bandwidth = hw.memory_bandwidth
    depth, group_layers, detail = view.depth, view.group_layers, view.detail
    for op in cap.ops:
        dtype = op.dtype
        peak = peaks.get(dtype)
        if peak is None:
            peak = peaks[dtype] = hw.peak(dtype)
        flops, nbytes = op.flops, op.bytes_read + op.bytes_written
        intensity, bound, time_bound_s = op_figures(flops, nbytes, peak, bandwidth)  # = place_on's
        if op.kind == "collective":  # link traffic, not HBM: its own time bound (stages.collectives)
            bound = "communication"
            time_bound_s = collectives.call_bound(op.attrs, hw)
        total.add_values(flops, nbytes, op.param_bytes, dtype, time_bound_s)
        agg = rollups.get(op.module)
        if agg is None:
            agg = rollups[op.module] = modules[rollup_name(op.module, depth, group_layers)]
        agg.add_values(flops, nbytes, op.param_bytes, dtype, time_bound_s)
        if detail:
            op_rows.append(_op_row(op, intensity, bound, time_bound_s))
        if not op.counted:
            u = uncounted.setdefault(op.name, {"name": op.name, "count": 0, "bytes": 0.0, "time_bound_s": 0.0})
            u["count"] += 1
            u["bytes"] += op.bytes
            u["time_bound_s"] += time_bound_s
            if op.attrs.get("formula_error"):
                u["formula_error"] = op.attrs["formula_error"]
    total_bytes = total.bytes or 1.0
    total_time = total.time_ops_s or 1.0
    walk.uncounted_rows = [
        UncountedOp(**u, bytes_share=u["bytes"] / total_bytes, time_share=u["time_bound_s"] / total_time)
        for u in sorted(uncounted.values(), key=lambda u: -u["bytes"])
    ]
    return walk


def _module_rows(cap: CaptureResult, hw: HardwareSpec, walk: _OpWalk, wdtype: str, fusion: Fusion | None,
                 view: Presentation) -> list[ModuleRow]:
    """The module rows, most time first; each with its bytes in the fused view when there is one."""
    total_time = walk.total.time_ops_s or 1.0
    fused_rows: dict[str, float] = defaultdict(float)
    if fusion is not None:
        fused_paths: dict[str, float] = defaultdict(float)
        for op, nbytes in zip(cap.ops, fusion.op_bytes, strict=True):
            fused_paths[op.module] += nbytes
        for path, nbytes in fused_paths.items():
            fused_rows[rollup_name(path, view.depth, view.group_layers)] += nbytes
    module_rows = [
        ModuleRow(**_fields(place_on(hw, agg.dtype(wdtype), agg.flops, agg.bytes)), name=name, ops=agg.count,
                  weight_bytes=agg.param_bytes, time_bound_ops_s=agg.time_ops_s,
                  time_share=agg.time_ops_s / total_time,
                  fused_bytes=fused_rows[name] if fusion is not None else None)
        for name, agg in walk.modules.items()
    ]
    module_rows.sort(key=lambda r: -r.time_bound_ops_s)
    return module_rows


def _attention_totals(attention: list[AttentionSite]) -> tuple[AttentionTotals, float]:
    """All attention layers together, and the executed FLOPs of the recognised ones (which model
    FLOPs replace)."""
    recognised = [r for r in attention if r.recognised]
    att_model_flops = sum(r.cost.flops_model for r in recognised)
    kv_exec = sum(r.kv_bytes_executed for r in attention)
    # the minimum is known only for recognised layers; None (not 0) when there are none
    kv_min = sum(r.cost.kv_bytes_min for r in recognised) if recognised else None
    kv_exec_recognised = sum(r.kv_bytes_executed for r in recognised)
    totals = AttentionTotals(
        layers=len(attention),
        recognised=len(recognised),
        flops_model=att_model_flops,
        flops_executed=sum(r.flops_executed for r in attention),
        kv_reexpand_flops=sum(r.kv_reexpand_flops for r in attention),
        kv_bytes_min=kv_min,
        kv_bytes_executed=kv_exec,
        kv_bytes_executed_unrecognised=kv_exec - kv_exec_recognised,
        amplification=kv_exec_recognised / kv_min if kv_min else None,
        cache_bytes_per_token=sum(r.cost.cache_bytes_per_token for r in recognised) if recognised else None,
        cache_bytes_per_sequence=sum(r.cost.cache_bytes_per_sequence for r in recognised) if recognised else None,
        intensity_min=att_model_flops / sum(r.cost.bytes_min for r in recognised) if recognised else None,
    )
    return totals, sum(r.flops_executed for r in recognised)


def _totals(walk: _OpWalk, at: AttentionTotals, flops_model: float, hardware: HardwareInfo, hw: HardwareSpec,
            workload: Workload, comm: Communication, fused: FusedTotals | None) -> Totals:
    """The whole step: placed at the workload's dtype, its byte split, time bounds and binding."""
    total = walk.total
    whole = place_on(hw, hardware.dtype, total.flops, total.bytes)
    peak = hardware.peak_flops
    predicted = total.time_ops_s
    time_compute, time_memory = total.flops / peak, total.bytes / hw.memory_bandwidth
    fields = _fields(whole)
    fields["time_bound_s"] = max(whole.time_bound_s, comm.time_s)  # every resource overlapped
    return Totals(
        **fields,
        flops_executed=total.flops,
        flops_model=flops_model,
        predicted_step_s=predicted,
        tokens_per_s=workload.tokens / predicted if predicted else None,
        sequences_per_s=workload.batch / predicted if predicted and workload.phase == "decode" else None,
        mfu_bound_model=flops_model / (whole.time_bound_s * peak) if whole.time_bound_s else 0.0,
        weight_bytes=total.param_bytes,
        kv_bytes_executed=at.kv_bytes_executed,
        kv_bytes_min=at.kv_bytes_min,
        other_bytes=max(0.0, total.bytes - total.param_bytes - at.kv_bytes_executed),
        uncounted_bytes=sum(u.bytes for u in walk.uncounted_rows),
        ops=total.count,
        time_compute_s=time_compute,
        time_memory_s=time_memory,
        time_comm_s=comm.time_s,
        binding=collectives.binding(time_compute, time_memory, comm.time_s),
        flop_conventions=dict(FLOP_CONVENTIONS),
        time_conventions=dict(TIME_CONVENTIONS),
        fused=fused,
    )


def comm_expected(comm: Communication) -> tuple[float, str]:
    """The collectives' expected time, and where it comes from: `comm.expected_time_s` where the
    report has it, else the bound's communication time."""
    expected_s = getattr(comm, "expected_time_s", None)
    if expected_s is not None and (expected_s > 0 or not comm.calls):
        return float(expected_s), "comm.expected_time_s (the library's algorithm and measured per-call latency)"
    return comm.time_s, "at the bound's communication time (comm.time_s): no expected cost per call known"


def with_expected(totals: Totals, expected: Expected, workload: Workload, parallel: dict | None,
                  own_table: bool = False) -> Totals:
    """The totals with the expected step, tokens/s per GPU and per user at it, and its conventions;
    the p10-p90 range where the step is priced with the committed table (`own_table`: a hardware
    entry's own efficiency source, whose residuals nobody measured: no range)."""
    gpus = serving_gpus(parallel)
    if expected.overlap != "none":
        totals = replace(totals, overlap_hidden_s=expected.hidden_s)
    per_gpu, per_user = throughput(workload.tokens, workload.q_len, workload.phase, expected.step_s, gpus)
    words = [f"tokens_per_s_per_gpu: tokens / expected_step_s / {gpus} GPU(s) serving them (under TP the "
             "step's tokens are served by the TP group; under EP alone the batch is per GPU)",
             "tokens_per_s_per_user: q_len accepted tokens per sequence per step / expected_step_s (decode only)"]
    if own_table:
        words.append("expected_low_s / expected_high_s: not given: the step is priced with the hardware entry's own "
                     "efficiency source, and the validation's residuals are the committed table's")
        return replace(totals, expected_step_s=expected.step_s, tokens_per_s_per_gpu=per_gpu,
                       tokens_per_s_per_user=per_user, expected_conventions=expected.conventions + words)
    exposed = max(0.0, expected.comm_s - expected.hidden_s)  # the collectives no kernels hide
    spread = spread_for(workload.phase, exposed / expected.step_s if expected.step_s else 0.0)
    low, high = spread.range(expected.step_s)
    words.append(f"expected_low_s / expected_high_s ({spread.step_class} step): {spread.words()}")
    return replace(totals, expected_step_s=expected.step_s, tokens_per_s_per_gpu=per_gpu,
                   tokens_per_s_per_user=per_user, expected_conventions=expected.conventions + words,
                   expected_low_s=low, expected_high_s=high, expected_class=spread.step_class)


def _with_expected(rows: list[OpRow], op_times: list[float]) -> list[OpRow]:
    """The op rows (built here by _op_row, not yet shared) given each kernel's expected time
    (expected.op_times: one per op record, in order), set in place as _op_row builds them;
    collectives keep none (the step prices them as communication)."""
    if len(rows) == len(op_times):  # else no op rows (a compact sweep point)
        for row, t in zip(rows, op_times, strict=True):
            if row.kind != "collective":
                row.__dict__["expected_s"] = t
    return rows


def build_report(
    cap: CaptureResult,
    attention: list[AttentionSite],
    hw: HardwareSpec,
    workload: Workload,
    view: Presentation | None = None,
) -> Report:
    """The Report of one capture on one hardware entry (schema in docs/schema.md). `view.detail=False`
    leaves out the op rows and the fused view (totals.fused, module fused_bytes): a sweep's compact
    points, whose merged records carry no per-storage traffic to fuse and whose rows none reads."""
    view = view or Presentation()
    if view.depth is None:
        view = replace(view, depth=default_depth(op.module for op in cap.ops))
    fallback_notes = peak_fallbacks(hw, {workload.dtype} | {op.dtype for op in cap.ops})
    hardware = hardware_info(hw, workload.dtype)
    walk = _walk_ops(cap, hw, view)
    # the fused view (rooflinekit.stages.fusion): each op's bytes there
    fusion = fuse(cap.ops) if view.detail else None
    at, att_exec_flops = _attention_totals(attention)
    flops_model = walk.total.flops - att_exec_flops + at.flops_model - at.kv_reexpand_flops
    comm = communication(cap.ops, hw)
    fused = None if fusion is None else fused_totals(fusion, [r.time_bound_s for r in walk.op_rows], hw,
                                                     hardware.dtype, walk.total.flops, workload.tokens)
    halves = 0.0
    overlap = view.overlap if runs_two_batches(view.overlap, workload.phase, workload.batch) else "none"
    if overlap == "two-batch":
        halves = 2 * sum(collectives.call_expected(half_message(op.attrs), hw)[0] for op in cap.ops
                         if op.kind == "collective")
    expected = expected_step(cap.ops, {i for r in attention for i in r.op_indices}, hw, workload.phase,
                             *comm_expected(comm), overlap=overlap, comm_halves_s=halves)
    if overlap != view.overlap:
        expected = replace(expected, conventions=[*expected.conventions, "two-batch overlap: not applied to a decode "
                                                  "step of one sequence, which engines run as one batch"])
    if fused is not None:
        fused = replace(fused, expected_step_s=expected.with_kernels(fused_expected(
            expected, fusion.kernel_of, fusion.kernels, hw, workload.phase,
            2 if overlap == "two-batch" else 1)))
    expected = replace(expected, conventions=[*expected.conventions, *view.factors])
    totals = with_expected(_totals(walk, at, flops_model, hardware, hw, workload, comm, fused), expected, workload,
                           view.parallel, own_table=bool(hw.efficiency) or hw.calibrated)
    info = dict(view.model_info or {})
    return Report(
        workload=WorkloadInfo(**workload.to_dict()),
        model=ModelInfo(**{k: info.get(k) for k in ModelInfo.__dataclass_fields__}),
        hardware=hardware,
        totals=totals,
        attention_totals=at,
        modules=_module_rows(cap, hw, walk, hardware.dtype, fusion, view),
        attention=[attention_row(r, hw) for r in attention],
        uncounted_ops=walk.uncounted_rows,
        comm=comm,
        ops=_with_expected(walk.op_rows, expected.op_times),
        capture=CaptureInfo(wall_s=cap.wall_s, depth=view.depth, group_layers=view.group_layers),
        warnings=list(view.warnings),
        notes=list(view.notes) + list(cap.notes) + fallback_notes + (fusion_notes(fusion) if fusion else []),
        parallel=view.parallel,
    )
