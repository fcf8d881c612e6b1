"""Place: turn a capture and its attention rows into a report on one hardware entry.

Everything here is a pure function of its inputs; rendering lives in render.py.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.version import SCHEMA_VERSION, __version__
from rooflinekit.stages import collectives
from rooflinekit.stages.attribute import AttentionRow
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.roofline import place_on
from rooflinekit.stages.workload import Workload

ROOT = "(root)"


def rollup_name(path: str, depth: int, group_layers: bool = False) -> str:
    """A module path cut to `depth` components; layer indices become '*' when grouping."""
    if not path:
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
        self.flops += op.flops
        self.bytes += op.bytes
        self.param_bytes += op.param_bytes
        self.time_ops_s += op_time
        self.count += 1
        self.dtype_flops[op.dtype] += op.flops
        self.dtype_bytes[op.dtype] += op.bytes

    def dtype(self, default: str) -> str:
        if any(self.dtype_flops.values()):
            return max(self.dtype_flops, key=self.dtype_flops.get)
        if any(self.dtype_bytes.values()):
            return max(self.dtype_bytes, key=self.dtype_bytes.get)
        return default


def _placed(hw: HardwareSpec, dtype: str, flops: float, nbytes: float) -> dict:
    p = place_on(hw, dtype, flops, nbytes)
    return {
        "flops": flops,
        "bytes": nbytes,
        "intensity": p.intensity,
        "attainable_flops": p.attainable_flops,
        "bound": p.bound,
        "time_bound_s": p.time_bound_s,
        "mfu_bound": p.mfu_bound,
        "dtype": dtype,
    }


def peak_fallbacks(hw: HardwareSpec, dtypes: set[str]) -> list[str]:
    """A note for each dtype the hardware entry has no peak for, naming the peak used instead."""
    notes = []
    for key in sorted(dtypes):
        if key not in hw.peak_flops:
            used = hw.peak_key(key)
            notes.append(f"{hw.name} lists no dense {key} peak: {key} work is placed against its {used} "
                         f"peak ({hw.peak_flops[used]:.4g} FLOP/s)")
    return notes


def attention_dict(row: AttentionRow, hw: HardwareSpec) -> dict:
    spec, cost = row.spec, row.cost
    out = {
        "module": row.module,
        "module_class": row.module_class,
        "recognised": row.recognised,
        "plugin": row.plugin,
        "arch": spec.arch if spec else "unrecognised",
        "mode": spec.mode if spec else None,
        "num_heads": spec.num_heads if spec else None,
        "num_kv_heads": spec.num_kv_heads if spec else None,
        "head_dim": spec.head_dim if spec else None,
        "v_head_dim": spec.v_head_dim if spec else None,
        "window": spec.window if spec else None,
        "cache_bytes_per_token": cost.cache_bytes_per_token if cost else None,
        "kv_bytes_min": cost.kv_bytes_min if cost else None,
        "bytes_min": cost.bytes_min if cost else None,
        "kv_bytes_executed": row.kv_bytes_executed,
        "kv_read_bytes": row.kv_read_bytes,
        "kv_copy_bytes": row.kv_copy_bytes,
        "kv_reexpand_flops": row.kv_reexpand_flops,
        "amplification": row.amplification,
        "read_amplification": row.read_amplification,
        "flops_model": cost.flops_model if cost else None,
        "flops_alt": dict(cost.flops_alt) if cost else {},
        "flops_executed": row.flops_executed,
        "bytes_executed": row.bytes_executed,
        "intensity_min": row.intensity_min,
        "intensity_executed": row.intensity_executed,
        "dtype": row.dtype,
        "placement_executed": _placed(hw, row.dtype, row.flops_executed, row.bytes_executed),
        "placement_min": _placed(hw, row.dtype, cost.flops_model, cost.bytes_min) if cost else None,
        "notes": list(row.notes) + (list(cost.notes) if cost else []),
    }
    if spec and spec.arch == "mla":
        out["mla"] = {
            "kv_lora_rank": spec.kv_lora_rank,
            "qk_rope_head_dim": spec.qk_rope_head_dim,
            "qk_nope_head_dim": spec.qk_nope_head_dim,
            "v_head_dim": spec.mla_v_head_dim,
        }
    return out


def build_report(
    cap: CaptureResult,
    attention: list[AttentionRow],
    hw: HardwareSpec,
    workload: Workload,
    *,
    model_info: dict | None = None,
    depth: int = 3,
    group_layers: bool = False,
    warnings: list[str] | None = None,
    notes: list[str] | None = None,
) -> dict:
    """The report as a JSON-ready dict (schema in docs/schema.md)."""
    fallback_notes = peak_fallbacks(hw, {workload.dtype} | {op.dtype for op in cap.ops})
    wdtype = workload.dtype if workload.dtype in hw.peak_flops else hw.peak_key(workload.dtype)
    op_rows = []
    total = Aggregate()
    modules: dict[str, Aggregate] = defaultdict(Aggregate)
    uncounted: dict[str, dict] = {}
    for op in cap.ops:
        p = place_on(hw, op.dtype, op.flops, op.bytes)
        if op.kind == "collective":  # link traffic, not HBM: its own time bound (rooflinekit.stages.collectives)
            p = replace(p, bound="communication", time_bound_s=collectives.comm_time(
                op.attrs.get("wire_bytes", 0.0), hw.interconnect_bandwidth))
        total.add(op, p.time_bound_s)
        modules[rollup_name(op.module, depth, group_layers)].add(op, p.time_bound_s)
        row = {
            "index": op.index,
            "name": op.name,
            "module": op.module or ROOT,
            "kind": op.kind,
            "flops": op.flops,
            "bytes_read": op.bytes_read,
            "bytes_written": op.bytes_written,
            "param_bytes": op.param_bytes,
            "dtype": op.dtype,
            "counted": op.counted,
            "intensity": p.intensity,
            "bound": p.bound,
            "time_bound_s": p.time_bound_s,
            "shapes": op.shapes,
        }
        if op.time_s is not None:
            row["time_s"] = op.time_s
        if op.attrs.get("assumption"):
            row["assumption"] = op.attrs["assumption"]
        if op.kind == "collective":
            row["collective"] = {k: op.attrs.get(k) for k in ("collective", "group_size", "message_bytes",
                                                              "wire_bytes", "algorithm", "source")}
        op_rows.append(row)
        if not op.counted:
            u = uncounted.setdefault(op.name, {"name": op.name, "count": 0, "bytes": 0.0, "time_bound_s": 0.0})
            u["count"] += 1
            u["bytes"] += op.bytes
            u["time_bound_s"] += p.time_bound_s
            if op.attrs.get("formula_error"):
                u["formula_error"] = op.attrs["formula_error"]
                row["formula_error"] = op.attrs["formula_error"]

    total_bytes = total.bytes or 1.0
    total_time = total.time_ops_s or 1.0
    uncounted_rows = sorted(uncounted.values(), key=lambda u: -u["bytes"])
    for u in uncounted_rows:
        u["bytes_share"] = u["bytes"] / total_bytes
        u["time_share"] = u["time_bound_s"] / total_time

    module_rows = []
    for name, agg in modules.items():
        placed = _placed(hw, agg.dtype(wdtype), agg.flops, agg.bytes)
        placed.update(
            name=name,
            ops=agg.count,
            weight_bytes=agg.param_bytes,
            time_bound_ops_s=agg.time_ops_s,
            time_share=agg.time_ops_s / total_time,
        )
        module_rows.append(placed)
    module_rows.sort(key=lambda r: -r["time_bound_ops_s"])

    att_rows = [attention_dict(r, hw) for r in attention]
    recognised = [r for r in attention if r.recognised]
    att_exec_flops = sum(r.flops_executed for r in recognised)
    att_model_flops = sum(r.cost.flops_model for r in recognised)
    kv_exec = sum(r.kv_bytes_executed for r in attention)
    # the minimum is known only for recognised layers; None (not 0) when there are none
    kv_min = sum(r.cost.kv_bytes_min for r in recognised) if recognised else None
    kv_exec_recognised = sum(r.kv_bytes_executed for r in recognised)
    reexpand = sum(r.kv_reexpand_flops for r in attention)
    flops_model = total.flops - att_exec_flops + att_model_flops - reexpand

    totals = _placed(hw, wdtype, total.flops, total.bytes)
    peak = hw.peak(wdtype)
    predicted = total.time_ops_s
    totals.update(
        flops_executed=total.flops,
        flops_model=flops_model,
        predicted_step_s=predicted,
        tokens_per_s=workload.tokens / predicted if predicted else None,
        sequences_per_s=workload.batch / predicted if predicted and workload.phase == "decode" else None,
        mfu_bound_model=flops_model / (totals["time_bound_s"] * peak) if totals["time_bound_s"] else 0.0,
        weight_bytes=total.param_bytes,
        kv_bytes_executed=kv_exec,
        kv_bytes_min=kv_min,
        other_bytes=max(0.0, total.bytes - total.param_bytes - kv_exec),
        uncounted_bytes=sum(u["bytes"] for u in uncounted_rows),
        ops=total.count,
        flop_conventions={
            "flops": "executed: FLOPs of the ops the code ran (formula per op)",
            "mfu_bound": "attainable / peak at the executed intensity (roofline ceiling, executed FLOPs)",
            "flops_model": "executed FLOPs with each recognised attention layer's executed FLOPs "
            "replaced by its architecture's model FLOPs, less projections that re-compute K/V of "
            "cached positions every step (kv_reexpand_flops)",
            "mfu_bound_model": "flops_model / (time_bound_s * peak)",
        },
        time_conventions={
            "time_bound_s": "max(flops/peak, bytes/bandwidth) over the whole step (perfect overlap)",
            "predicted_step_s": "sum over ops of each op's own time bound (ops run one after another; "
            "a collective's is its wire bytes over the link bandwidth)",
            "time_compute_s": "flops / peak", "time_memory_s": "bytes / bandwidth (HBM)",
            "time_comm_s": "sum over collectives of wire bytes / link bandwidth per direction",
            "binding": "the largest of time_compute_s, time_memory_s and time_comm_s",
        },
    )
    comm = collectives.summary(cap.ops, hw.interconnect_bandwidth)
    totals.update(time_compute_s=total.flops / peak, time_memory_s=total.bytes / hw.memory_bandwidth,
                  time_comm_s=comm["time_s"])
    totals["binding"] = collectives.binding(totals["time_compute_s"], totals["time_memory_s"], comm["time_s"])
    attention_totals = {
        "layers": len(attention),
        "recognised": len(recognised),
        "flops_model": att_model_flops,
        "flops_executed": sum(r.flops_executed for r in attention),
        "kv_reexpand_flops": reexpand,
        "kv_bytes_min": kv_min,
        "kv_bytes_executed": kv_exec,
        "kv_bytes_executed_unrecognised": kv_exec - kv_exec_recognised,
        "amplification": kv_exec_recognised / kv_min if kv_min else None,
        "cache_bytes_per_token": sum(r.cost.cache_bytes_per_token for r in recognised) if recognised else None,
        "intensity_min": att_model_flops / sum(r.cost.bytes_min for r in recognised) if recognised else None,
    }

    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "rooflinekit", "version": __version__},
        "workload": workload.to_dict(),
        "model": model_info or {},
        "hardware": {
            "name": hw.name,
            "dtype": wdtype,
            "peak_flops": peak,
            "bandwidth": hw.memory_bandwidth,
            "ridge": peak / hw.memory_bandwidth,
            "peaks": dict(hw.peak_flops),
            "interconnect_bandwidth": hw.interconnect_bandwidth,
            "calibrated": hw.calibrated,
            "source": hw.path,
        },
        "totals": totals,
        "attention_totals": attention_totals,
        "modules": module_rows,
        "attention": att_rows,
        "uncounted_ops": uncounted_rows,
        "comm": comm,
        "ops": op_rows,
        "capture": {"wall_s": cap.wall_s, "depth": depth, "group_layers": group_layers},
        "warnings": list(warnings or []),
        "notes": list(notes or []) + list(cap.notes) + fallback_notes,
    }
