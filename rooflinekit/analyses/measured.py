"""A measured report: achieved FLOP/s and B/s, MFU, HFU and MBU, and measured over bound, per op,
module, attention layer and step, from a Measurement (rooflinekit.analyses.measure); which hardware
entry a CPU run is placed on; what a figure past its ceiling says about the run."""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch

from rooflinekit.analyses.calibrate import device_name
from rooflinekit.analyses.measure import Measurement, timed_op
from rooflinekit.core.report import (
    AttentionRow,
    Measured,
    ModuleRow,
    OpRow,
    Report,
    StepMeasured,
)
from rooflinekit.core.units import si
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.hardware import HardwareDB, HardwareSpec
from rooflinekit.stages.place import rollup_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# ----------------------------------------------------------------------------------------------
# Which entry a CPU run is placed on
# ----------------------------------------------------------------------------------------------


def calibrated_cpu_entry(db: HardwareDB) -> HardwareSpec | None:
    """The newest entry `rooflinekit calibrate --device cpu` wrote for this machine's CPU: calibrated,
    its [calibration] table naming device cpu and this CPU's model name; None when there is none."""
    here, best = device_name("cpu"), None
    for spec in db.entries:
        if not spec.calibrated or not spec.path:
            continue
        try:
            with open(spec.path, "rb") as fh:
                cal = tomllib.load(fh).get("calibration")
        except (OSError, ValueError):  # unreadable now, or not TOML (it loaded once: rare)
            continue
        if not isinstance(cal, dict) or not str(cal.get("device", "")).startswith("cpu"):
            continue
        if cal.get("device_name") != here:
            continue
        date = str(cal.get("date", ""))
        if best is None or date >= best[0]:
            best = (date, spec)
    return best[1] if best else None


def is_cpu_entry(spec: HardwareSpec) -> bool:
    """Whether `spec` describes a CPU: an entry `rooflinekit calibrate --device cpu` wrote."""
    if not spec.calibrated or not spec.path:
        return False
    try:
        with open(spec.path, "rb") as fh:
            cal = tomllib.load(fh).get("calibration")
    except (OSError, ValueError):
        return False
    return isinstance(cal, dict) and str(cal.get("device", "")).startswith("cpu")


def cpu_on_gpu_warning(device: str, spec: HardwareSpec) -> str | None:
    """The warning of CPU times placed on an accelerator's entry (None where the entry is a CPU's):
    achieved FLOP/s thousands of times under that entry's roofs, MFU/MBU near zero."""
    if not device.startswith("cpu") or is_cpu_entry(spec):
        return None
    return (f"measured on {device} but placed on {spec.name}, an accelerator's entry: the achieved points, "
            f"MFU and MBU compare CPU times with that device's ceilings; run `rooflinekit calibrate --device "
            f"cpu`, then pass -H \"CPU calibrated\"")


def cpu_hardware(db: HardwareDB, fallback: HardwareSpec, device: str = "cpu") -> tuple[HardwareSpec, str, str | None]:
    """(entry, note, warning) for a measured CPU run given no --hardware: this CPU's calibrated entry
    when there is one, else `fallback` (a GPU's datasheet entry) and a warning saying how to fix it."""
    entry = calibrated_cpu_entry(db)
    if entry is not None:
        return entry, (f"hardware auto: measured on {device} ({device_name('cpu')}): placed on its calibrated "
                       f"entry '{entry.name}' ({entry.path})"), None
    warning = (f"measured on {device} but placed on {fallback.name}: MFU/MBU compare CPU times with that "
               "device's ceilings; run `rooflinekit calibrate --device cpu`, then pass -H \"CPU calibrated\" "
               "(later measured CPU runs find that entry themselves)")
    return fallback, f"hardware auto: no calibrated entry for this CPU ({device_name('cpu')}); using {fallback.name}", warning


# ----------------------------------------------------------------------------------------------
# Measured fields of a report
# ----------------------------------------------------------------------------------------------


def _rate(amount: float, seconds: float | None) -> float | None:
    return amount / seconds if seconds else None


def utilisation(amount: float, seconds: float | None, ceiling: float) -> float | None:
    return amount / (seconds * ceiling) if seconds and ceiling else None


def _measured(time_s: float | None, flops_exec: float, flops_model: float, nbytes: float,
              peak: float, bandwidth: float, bound_s: float | None, **more) -> Measured:
    return Measured(
        time_s=time_s,
        achieved_flops=_rate(flops_exec, time_s),
        achieved_bandwidth=_rate(nbytes, time_s),
        mfu=utilisation(flops_model, time_s, peak),
        hfu=utilisation(flops_exec, time_s, peak),
        mbu=utilisation(nbytes, time_s, bandwidth),
        time_vs_bound=time_s / bound_s if time_s is not None and bound_s else None,
        **more,
    )


def model_flops_per_op(report: Report) -> dict[int, float]:
    """Model FLOPs per op: executed FLOPs, except inside a recognised attention layer, where its
    architecture's model FLOPs are spread over the layer's ops in proportion to their executed
    FLOPs (so the ops of a layer sum to its model FLOPs and the step sums to totals.flops_model)."""
    by_index = {op.index: op for op in report.ops}
    out = {i: op.flops for i, op in by_index.items()}
    for row in report.attention:
        if not row.recognised or not row.flops_executed or row.flops_model is None:
            continue
        scale = row.flops_model / row.flops_executed
        for i in row.op_indices:
            if i in by_index:
                out[i] = by_index[i].flops * scale
    return out


def with_measurement(report: Report, hw: HardwareSpec, m: Measurement,
                     modelled_modules: list[str] | tuple[str, ...] = (), hardware_warning: str | None = None) -> Report:
    """A new report: `report` with the measured times of `m` joined to its ops, modules, attention
    layers and step. `modelled_modules`: modules whose analytic stand-in ran (their ops have no time).
    `hardware_warning`: why `hw` is not the measured device's own entry (a CPU run placed on a GPU's
    datasheet entry by default); it replaces the note that says so."""
    cuda = m.device.startswith("cuda")
    ops, modules = _measured_ops_and_modules(report, hw, m)
    attention = _measured_attention(report, hw, m)
    summary = _step_measured(report, hw, m)
    warnings, notes = list(report.warnings), list(report.notes)
    if m.unmatched:
        warnings.append(
            f"the timed forward ran a different op sequence from the counted one ({len(m.unmatched)} "
            "difference(s), e.g. " + m.unmatched[0] + "): unmatched ops are left out of op times "
            "and counted in unattributed_s"
        )
    modelled = sorted(set(modelled_modules))
    if modelled:
        notes.append(
            f"measured mode ran the analytic stand-in of {len(modelled)} modelled module(s) "
            f"({', '.join(modelled[:3])}{', ...' if len(modelled) > 3 else ''}), as the counts did: "
            "their records have no time, and the stand-in's own time is in unattributed_s"
        )
    if hardware_warning:
        warnings.append(hardware_warning)
    elif not cuda and not hw.calibrated:
        notes.append(
            f"measured on {m.device} but placed on {hw.name}: MFU/MBU compare CPU times with that "
            "device's ceilings; run `rooflinekit calibrate --device cpu` and pass --hardware with its name"
        )
    warnings += past_the_limit(summary, ops, modules, report, hw)
    return replace(report, ops=ops, modules=modules, attention=attention,
                   totals=replace(report.totals, measured=summary), warnings=warnings, notes=notes)


def _measured_ops_and_modules(report: Report, hw: HardwareSpec,
                              m: Measurement) -> tuple[list[OpRow], list[ModuleRow]]:
    """The report's op rows and module rows with their measured fields and model FLOPs: each op's
    own time, each module the sum of its ops' (rolled up as the rows were)."""
    depth, group = report.capture.depth, report.capture.group_layers
    model_flops = model_flops_per_op(report)
    cuda = m.device.startswith("cuda")
    module_time: dict[str, float] = defaultdict(float)
    module_model_flops: dict[str, float] = defaultdict(float)
    ops = []
    for row in report.ops:
        t = m.op_time_s.get(row.index)
        peak = hw.peak(row.dtype) if row.dtype else report.hardware.peak_flops
        measured = _measured(t, row.flops, model_flops[row.index], row.bytes, peak, hw.memory_bandwidth,
                             row.time_bound_s, cpu_time_s=m.op_cpu_time_s.get(row.index) if cuda else None)
        ops.append(replace(row, measured=measured, flops_model=model_flops[row.index]))
        name = rollup_name(row.module, depth, group)
        module_time[name] += t or 0.0
        module_model_flops[name] += model_flops[row.index]

    modules = [
        replace(mod, flops_model=module_model_flops.get(mod.name, 0.0), measured=_measured(
            module_time.get(mod.name, 0.0), mod.flops, module_model_flops.get(mod.name, 0.0), mod.bytes,
            hw.peak(mod.dtype), hw.memory_bandwidth, mod.time_bound_ops_s))
        for mod in report.modules
    ]
    return ops, modules


def _measured_attention(report: Report, hw: HardwareSpec, m: Measurement) -> list[AttentionRow]:
    """The report's attention rows with their measured fields: each layer's time the sum of its ops',
    against the sum of their roofline bounds."""
    bound_of = {op.index: op.time_bound_s for op in report.ops}
    attention = []
    for att in report.attention:
        t = sum(m.op_time_s.get(i, 0.0) for i in att.op_indices)
        pe = att.placement_executed
        predicted = sum(bound_of.get(i, 0.0) for i in att.op_indices)
        attention.append(replace(att, measured=_measured(
            t, pe.flops, att.flops_model if att.flops_model is not None else pe.flops, pe.bytes,
            hw.peak(att.dtype), hw.memory_bandwidth, predicted, predicted_ops_s=predicted,
            mbu_min=utilisation(att.bytes_min, t, hw.memory_bandwidth) if att.bytes_min else None)))
    return attention


def _step_measured(report: Report, hw: HardwareSpec, m: Measurement) -> StepMeasured:
    """The whole step's measured figures: its time and spread, what the op ranges cover of it, its
    utilisations against the report's ceilings, and how each was measured."""
    cuda = m.device.startswith("cuda")
    totals = report.totals
    step = m.step_time_s
    op_sum = sum(m.op_time_s.values())
    whole = _measured(step, totals.flops_executed, totals.flops_model, totals.bytes,
                      report.hardware.peak_flops, hw.memory_bandwidth, totals.predicted_step_s)
    return StepMeasured(
        step_time_s=step,
        step_times_s=list(m.step_times_s),
        op_time_s=op_sum,
        unattributed_s=step - op_sum,
        achieved_flops=whole.achieved_flops,
        achieved_bandwidth=whole.achieved_bandwidth,
        mfu=whole.mfu,
        hfu=whole.hfu,
        mbu=whole.mbu,
        time_vs_bound=whole.time_vs_bound,
        op_time_share=op_sum / step if step else None,
        step_time_plain_s=m.step_time_plain_s,
        time_vs_whole_step_bound=step / totals.time_bound_s if totals.time_bound_s else None,
        tokens_per_s=report.workload.tokens / step if step else None,
        step_time_min_s=min(m.step_times_s) if m.step_times_s else None,
        step_time_median_s=statistics.median(m.step_times_s) if m.step_times_s else None,
        step_time_max_s=max(m.step_times_s) if m.step_times_s else None,
        device=m.device,
        threads=torch.get_num_threads() if not cuda else None,
        warmup=m.warmup,
        repeats=m.repeats,
        timing=m.timing,
        ops_timed=len(m.op_time_s),
        ops_unmatched=list(m.unmatched),
        conventions={
            "step_time_s": "mean over repeats of the profiler range around one forward and its "
            "device synchronisation (instrumented run); step_time_min_s, step_time_median_s and "
            "step_time_max_s: the spread of the same repeats (step_times_s)",
            "op_time_s": "sum over ops of each op's mean time; " + m.timing,
            "unattributed_s": "step_time_s - op_time_s: Python, hooks, launch gaps, synchronisation",
            "step_time_plain_s": "mean wall time of the same forward with no modes and no profiler",
            "mfu": "model FLOPs / (time * dense peak of the dtype)",
            "hfu": "executed FLOPs / (time * dense peak of the dtype)",
            "mbu": "bytes moved (as executed) / (time * memory bandwidth)",
            "time_vs_bound": "measured time / sum of the ops' roofline time bounds "
            "(totals: predicted_step_s; modules: time_bound_ops_s; ops: time_bound_s)",
        },
    )


def _over(me: Measured | StepMeasured | None) -> list[str]:
    """The figures of `me` past the physical limit: MFU/HFU/MBU over 100%, faster than the bound."""
    if me is None:
        return []
    out = [f"{name} {value:.0%}" for name, value in (("MFU", me.mfu), ("HFU", me.hfu), ("MBU", me.mbu))
           if value is not None and value > 1.0]
    if me.time_vs_bound is not None and me.time_vs_bound < 1.0:
        out.append(f"{me.time_vs_bound:.2f}x the roofline bound")
    return out


def cpu_cache_bytes() -> float:
    """The largest CPU cache (bytes) Linux lists for cpu0; 32 MB when it lists none."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
            scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
            sizes.append(float(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    return max(sizes, default=32e6)


def _likely_cause(device: str, hw: HardwareSpec, flops_too: bool, bytes_too: bool, nbytes: float) -> str:
    """'likely <cause>; else <other causes>' for measured figures past the roofline."""
    entry = (f"'{hw.name}' is not this device's entry or its ceilings are low for it "
             + ("(rooflinekit calibrate --device cpu, then -H with its name)" if device.startswith("cpu")
                else "(rooflinekit hardware detect, or rooflinekit calibrate)"))
    counts = "a " + " or ".join(k for k, on in (("byte", bytes_too), ("FLOP", flops_too)) if on) + \
        " count too high (a plugin's formula or module model)"
    causes = [entry, counts]
    if bytes_too:
        cache = cpu_cache_bytes() if device.startswith("cpu") else (hw.l2_bytes or 0.0)
        where = "CPU caches" if device.startswith("cpu") else "L2 cache"
        held = (f"the {where} hold the working set ({si(nbytes, 'B')} moved), read faster than the entry's "
                "memory bandwidth")
        causes.insert(0 if nbytes <= cache else 1, held)
    return f"likely {causes[0]}; else {' or '.join(causes[1:])}"


def past_the_limit(step: StepMeasured, ops: list, modules: list, report: Report, hw: HardwareSpec) -> list[str]:
    """Warnings for measured figures past the physical limit (each with its likely cause): one for
    the step, one summing up the ops and modules."""
    out = []
    figures = _over(step)
    if figures:
        flops_too = any(f.startswith(("MFU", "HFU")) for f in figures)
        bytes_too = any(f.startswith("MBU") for f in figures) or not flops_too
        out.append(f"measured step past the physical limit ({', '.join(figures)} on '{hw.name}'): "
                   + _likely_cause(step.device, hw, flops_too, bytes_too, report.totals.bytes))
    rows = [(f"op {row.index} {row.name} in '{row.module}'", row.measured, row.bytes) for row in ops] + \
           [(f"module '{mod.name}'", mod.measured, mod.bytes) for mod in modules]
    flagged = [(what, me, nbytes, _over(me)) for what, me, nbytes in rows if me is not None and me.time_s]
    flagged = [f for f in flagged if f[3]]
    if flagged:
        n_ops = sum(1 for f in flagged if f[0].startswith("op "))
        worst = min(flagged, key=lambda f: f[1].time_vs_bound if f[1].time_vs_bound is not None else 1.0)
        flops_too = any(x.startswith(("MFU", "HFU")) for f in flagged for x in f[3])
        bytes_too = any(x.startswith("MBU") for f in flagged for x in f[3]) or not flops_too
        out.append(f"{n_ops} op(s) and {len(flagged) - n_ops} module(s) measured past the physical limit on "
                   f"'{hw.name}' (e.g. {worst[0]}: {', '.join(worst[3])}): "
                   + _likely_cause(step.device, hw, flops_too, bytes_too, worst[2]))
    return out


def modelled_modules(ops: list[OpRecord]) -> list[str]:
    """Modules whose records came from an analytic stand-in (not timed by the profiler)."""
    return sorted({op.module for op in ops if not timed_op(op)})
