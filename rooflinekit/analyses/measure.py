"""Measure: timed forwards on a real device, joined to the same op and module records as the counts.

How the join works
------------------
The counts come from one forward under capture's recording machinery, which numbers every op it
records (0, 1, 2, ...). The timed forwards run the same model on the same inputs under the same
machinery (capture's dispatch and function modes and SDPA patch) with a subclass of capture's
`Recorder` (`_TimedRecorder`), so every decision is the same: views and free ops skipped,
collectives classified, DTensor deferred, fused attention recorded as one call with its inner ops
suppressed. The subclass wraps each recorded op in a profiler range named ``rk#<index> <op>``
(through `Recorder.run_op`). The index is the one the op has in the capture, so a range joins to
its record by number; the op names of the two runs are compared, and where they differ
(data-dependent control flow, or a backend whose attention output layout makes a later reshape
copy, see `Recorder.canonical_sdpa_layout`) they are aligned by name and the difference is
reported.

Under torch.profiler, per op and per repeat:
- on CPU, the op's time is the duration of its range (the kernel and the dispatcher below it);
- on CUDA, the op's time is the device time of the kernels launched inside its range (the
  profiler's event tree attributes each kernel to the CPU op that launched it); the range's CPU
  duration is kept as ``cpu_time_s``.
Each repeat's forward (and device synchronisation) runs inside a range ``rk:step#<r>``; its duration
is the step time. Times are means over the repeats. What no op range covers (Python between ops,
module hooks, launch gaps, synchronisation) is ``unattributed_s = step_time_s - op_time_s``.

Then `apply_measurement` adds measured fields to a report (pure arithmetic over its rows):
achieved FLOP/s and B/s, MFU (model FLOPs), HFU (executed FLOPs), MBU, and measured time over the
roofline time bound, per op, module, attention layer and for the whole step.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from rooflinekit.analyses.calibrate import device_name
from rooflinekit.core.codec import encode
from rooflinekit.core.files import write_atomic
from rooflinekit.core.report import (
    AltPlacement,
    AttentionRow,
    Measured,
    ModuleRow,
    OpRow,
    Placement,
    Report,
    StepMeasured,
)
from rooflinekit.core.stdio import native_stderr_without
from rooflinekit.core.units import si
from rooflinekit.stages import collectives
from rooflinekit.stages.capture.forward import active, call_forward, hooked
from rooflinekit.stages.capture.modes import DispatchRecorder, FunctionRecorder
from rooflinekit.stages.capture.recorder import Recorder
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.capture.sdpa import SDPA_NAME, patched_sdpa
from rooflinekit.stages.formulas import FormulaBook, op_key
from rooflinekit.stages.hardware import HardwareDB, HardwareSpec
from rooflinekit.stages.place import hardware_info, rollup_name
from rooflinekit.stages.roofline import place_on

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

STEP_PREFIX = "rk:step#"
_RANGE = re.compile(r"^rk#(\d+)(?: |$)")

try:  # a C++ range: no op is dispatched, so no dispatch mode sees it (torch >= 2.2)
    _Range = torch._C._profiler._RecordFunctionFast
except AttributeError:  # pragma: no cover - older torch
    _Range = torch.autograd.profiler.record_function


# ----------------------------------------------------------------------------------------------
# Timed recording: the capture's numbering, with a profiler range around every recorded op
# ----------------------------------------------------------------------------------------------


class _TimedRecorder(Recorder):
    """Numbers ops exactly as capture's Recorder does, but records only name and module path.

    capture's dispatch mode, function mode and SDPA patch make every decision (what is skipped,
    what is a collective, what DTensor runs, what is suppressed inside fused attention); this
    recorder only wraps each op they record in a profiler range numbered by the capture's index.
    Byte accounting is skipped (the counts come from the capture run): the timed run pays for
    numbering only, and that bookkeeping runs outside the op's range. SDPA's output is returned
    as the backend gives it (no re-layout), so the range times the kernel alone and later ops see
    the layout they see without rooflinekit.
    """

    canonical_sdpa_layout = False

    def run_op(self, func, args, kwargs):
        name = self._recorded_name(func)
        if name is None:  # views and free ops: not recorded, so not timed
            return func(*args, **kwargs)
        with _Range(f"rk#{len(self.ops)} {name}"):
            return func(*args, **kwargs)

    def _recorded_name(self, func) -> str | None:
        if collectives.classify(func):  # the dispatch mode passes only recorded collectives here
            return _name(func)
        info = self._info(func)
        return info.name if info is not None else None

    def record_aten(self, func, args, kwargs, out) -> None:
        info = self._info(func)
        if info is None:
            return
        self.emit(OpRecord(0, info.name, self.module, 0.0, 0.0, 0.0, "", False))

    def record_collective(self, func, args, kwargs, kind) -> None:
        self.emit(OpRecord(0, _name(func), self.module, 0.0, 0.0, 0.0, "", True, kind="collective"))

    def record_sdpa(self, args, kwargs, out) -> None:
        self.emit(OpRecord(0, SDPA_NAME, self.module, 0.0, 0.0, 0.0, "", False, kind="fused"))

    def fused_sdpa(self, func, args, kwargs):
        with _Range(f"rk#{len(self.ops)} {SDPA_NAME}"):
            return super().fused_sdpa(func, args, kwargs)


_NAMES: dict[object, str] = {}


def _name(func) -> str:
    name = _NAMES.get(func)
    if name is None:
        name = _NAMES[func] = op_key(func)
    return name


@contextmanager
def timed_recording(model: torch.nn.Module, formulas: FormulaBook | None = None) -> Iterator[_TimedRecorder]:
    """capture.recording()'s modes and hooks, with a profiler range around each recorded op."""
    names = {id(m): n for n, m in model.named_modules()}
    recorder = _TimedRecorder(formulas or FormulaBook(), names)
    # modelled modules emit into the active recorder
    with (hooked(recorder), active(recorder), patched_sdpa(recorder), FunctionRecorder(recorder),
          DispatchRecorder(recorder)):
        yield recorder


# ----------------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """Mean times per captured op index and per step, over `repeats` profiled forwards."""

    device: str
    warmup: int
    repeats: int
    op_time_s: dict[int, float]  # captured op index -> mean time per step (CPU range / CUDA kernels)
    op_cpu_time_s: dict[int, float]  # captured op index -> mean CPU duration of its range
    step_times_s: list[float]  # each profiled repeat's step range
    step_time_plain_s: float | None  # mean wall time of a forward with no modes and no profiler
    timing: str
    unmatched: list[str] = field(default_factory=list)
    trace: dict | None = None  # the profiler's chrome trace, when asked for

    @property
    def step_time_s(self) -> float:
        return sum(self.step_times_s) / len(self.step_times_s) if self.step_times_s else 0.0

    @property
    def total_op_time_s(self) -> float:
        return sum(self.op_time_s.values())


@dataclass(frozen=True)
class FreshInputs:
    """Inputs `make()` makes anew, as the counted forward got them, for each forward `measure` runs:
    a forward that changes its inputs (a KV cache written in place, a cache that grows, positions
    that advance) leaves the next one another step to run, so each starts from the counted
    forward's state instead."""

    make: Callable[[], object]


def _sync(device: str):
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def align(captured: list[str], measured: list[str]) -> tuple[dict[int, int], list[str]]:
    """Map measured op positions to captured indices by name; list what did not match."""
    if captured == measured:
        return {i: i for i in range(len(measured))}, []
    matcher = difflib.SequenceMatcher(None, captured, measured, autojunk=False)
    mapping: dict[int, int] = {}
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            mapping[b + k] = a + k
    problems = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        problems.append(
            f"{tag}: captured ops {a0}..{a1 - 1} {captured[a0:a1][:3]} vs timed {measured[b0:b1][:3]}"
        )
    return mapping, problems


def measure(
    model: torch.nn.Module,
    inputs,
    captured: list[OpRecord],
    *,
    device: str,
    warmup: int = 2,
    repeats: int = 5,
    formulas: FormulaBook | None = None,
    trace: bool = False,
) -> Measurement:
    """Time `repeats` forwards (after `warmup`) and join the times to the captured ops by index.

    Call with the same device/dtype and module-model contexts the capture ran under. `inputs`:
    the forward's inputs, every forward runs on them as they are; or `FreshInputs`, made anew
    before every forward (outside its timing).
    """
    if warmup < 0:
        raise ValueError("warmup must be >= 0")
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    cuda = device.startswith("cuda")
    supply = inputs.make if isinstance(inputs, FreshInputs) else (lambda: inputs)
    plain = _plain_forwards(model, supply, device, warmup, repeats)
    sequences, prof = _profiled_forwards(model, supply, device, warmup, repeats, formulas)
    mappings, unmatched = _align_all([op.name for op in captured], sequences)
    per_op, per_op_cpu, steps = _op_times(prof, mappings, cuda)

    n = float(repeats)
    op_time = {i: per_op.get(i, 0.0) / n for i in range(len(captured)) if _timed(captured[i])}
    op_cpu = {i: per_op_cpu.get(i, 0.0) / n for i in op_time}
    events = None
    if trace:
        events = _export_events(prof)
    return Measurement(
        device=device,
        warmup=warmup,
        repeats=repeats,
        op_time_s=op_time,
        op_cpu_time_s=op_cpu,
        step_times_s=[steps[r] for r in sorted(steps)],
        step_time_plain_s=sum(plain) / len(plain),
        timing=(
            "cuda: device time of the kernels launched inside each op's profiler range"
            if cuda
            else "cpu: duration of each op's profiler range"
        ),
        unmatched=unmatched,
        trace=events,
    )


def _next_inputs(supply: Callable[[], object], sync: Callable[[], None]) -> object:
    """The next forward's inputs, made and settled on the device before its timing starts (a cache
    being filled on the GPU must not be waited for inside the step)."""
    inputs = supply()
    sync()
    return inputs


def _plain_forwards(model: torch.nn.Module, supply: Callable[[], object], device: str, warmup: int,
                    repeats: int) -> list[float]:
    """The wall time of each of `repeats` forwards (after `warmup`) with no modes and no profiler:
    what the model costs with nothing attached. `supply()` gives each forward its inputs."""
    sync = _sync(device)
    with torch.no_grad():
        for _ in range(warmup):
            call_forward(model, _next_inputs(supply, sync))
        sync()
        plain = []
        for _ in range(repeats):
            inputs = _next_inputs(supply, sync)
            start = time.perf_counter()
            call_forward(model, inputs)
            sync()
            plain.append(time.perf_counter() - start)
            del inputs  # freed before the next are made: one cache on the device at a time
    return plain


#: How Kineto's C++ log lines on profiler start and stop begin (held back: native_stderr_without).
KINETO_LOG = "USDT:"


def _profiled_forwards(model: torch.nn.Module, supply: Callable[[], object], device: str, warmup: int,
                       repeats: int, formulas: FormulaBook | None) -> tuple[list[list[str]], torch.profiler.profile]:
    """An instrumented warm-up (first-call costs of the modes and hooks), then `repeats` profiled
    forwards under timed recording: each repeat's recorded op names, and the profiler. `supply()`
    gives each forward its inputs, made outside the step range (and outside timed recording: their
    ops are not numbered)."""
    sync = _sync(device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad():
        for _ in range(warmup):
            inputs = _next_inputs(supply, sync)
            with timed_recording(model, formulas):
                call_forward(model, inputs)
            sync()
            del inputs
        sequences: list[list[str]] = []
        prof = torch.profiler.profile(activities=activities)
        with native_stderr_without(KINETO_LOG):  # its profiler_start line
            prof.__enter__()
        try:
            for r in range(repeats):
                inputs = _next_inputs(supply, sync)
                # the modes are entered outside the step range: hook set-up is not step time
                with timed_recording(model, formulas) as rec, _Range(f"{STEP_PREFIX}{r}"):
                    call_forward(model, inputs)
                    sync()
                del inputs
                sequences.append([op.name for op in rec.ops])
        finally:
            with native_stderr_without(KINETO_LOG):  # its profiler_stop line
                prof.__exit__(None, None, None)
    return sequences, prof


def _align_all(captured_names: list[str], sequences: list[list[str]]) -> tuple[list[dict[int, int]], list[str]]:
    """Per profiled repeat, its op positions mapped to captured indices; and every distinct
    difference between the two sequences, once, in the order first seen."""
    mappings = []
    unmatched: list[str] = []
    for seq in sequences:
        mapping, problems = align(captured_names, seq)
        mappings.append(mapping)
        for p in problems:
            if p not in unmatched:
                unmatched.append(p)
    return mappings, unmatched


def _op_times(prof, mappings: list[dict[int, int]],
              cuda: bool) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """From the profiler's events: per captured op index its time and its ranges' CPU time summed
    over the repeats, and per repeat its step time (all in seconds)."""
    per_op: dict[int, float] = defaultdict(float)
    per_op_cpu: dict[int, float] = defaultdict(float)
    steps: dict[int, float] = {}
    step_ranges: list[tuple[int, float, float]] = []
    op_events = []
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CPU:
            continue
        name = evt.name
        if name.startswith(STEP_PREFIX):
            r = int(name[len(STEP_PREFIX):])
            steps[r] = evt.cpu_time_total * 1e-6
            step_ranges.append((r, evt.time_range.start, evt.time_range.end))
            continue
        m = _RANGE.match(name)
        if m:
            op_events.append((int(m.group(1)), evt))
    step_ranges.sort(key=lambda s: s[1])
    for pos, evt in op_events:
        start = evt.time_range.start
        r = next((s[0] for s in step_ranges if s[1] <= start <= s[2]), None)
        if r is None or r >= len(mappings):
            continue
        index = mappings[r].get(pos)
        if index is None:
            continue
        cpu_s = evt.cpu_time_total * 1e-6
        per_op_cpu[index] += cpu_s
        per_op[index] += _device_us(evt) * 1e-6 if cuda else cpu_s
    return per_op, per_op_cpu, steps


def _device_us(evt) -> float:
    """Kernel time launched inside an event (its children included), in us; device_time_total
    replaced cuda_time_total in torch 2.4 (the old name stays as a deprecated alias)."""
    value = getattr(evt, "device_time_total", None)
    return float(value if value is not None else getattr(evt, "cuda_time_total", 0.0))


def _timed(op: OpRecord) -> bool:
    """Modelled records stand in for code that does not run: they cannot be timed."""
    return op.kind != "modelled"


def _export_events(prof) -> dict:
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix="rooflinekit-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, encoding="utf-8") as fh:
            return json.load(fh)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


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


def _util(amount: float, seconds: float | None, ceiling: float) -> float | None:
    return amount / (seconds * ceiling) if seconds and ceiling else None


def _measured(time_s: float | None, flops_exec: float, flops_model: float, nbytes: float,
              peak: float, bandwidth: float, bound_s: float | None, **more) -> Measured:
    return Measured(
        time_s=time_s,
        achieved_flops=_rate(flops_exec, time_s),
        achieved_bandwidth=_rate(nbytes, time_s),
        mfu=_util(flops_model, time_s, peak),
        hfu=_util(flops_exec, time_s, peak),
        mbu=_util(nbytes, time_s, bandwidth),
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
            mbu_min=_util(att.bytes_min, t, hw.memory_bandwidth) if att.bytes_min else None)))
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
    return sorted({op.module for op in ops if not _timed(op)})


# ----------------------------------------------------------------------------------------------
# A second hardware entry, side by side
# ----------------------------------------------------------------------------------------------


def _alt(placed: Placement, hw: HardwareSpec, **more) -> AltPlacement:
    return AltPlacement(
        hardware=hw.name, calibrated=hw.calibrated, intensity=placed.intensity,
        attainable_flops=placed.attainable_flops, bound=placed.bound, time_bound_s=placed.time_bound_s,
        mfu_bound=placed.mfu_bound, ridge=hw.ridge(placed.dtype), **more,
    )


def with_alt_placement(report: Report, hw: HardwareSpec) -> Report:
    """A new report: `report` with `placement_alt` (the same counts placed on `hw`) on its totals,
    modules and attention rows, and `hardware_alt`."""
    depth, group = report.capture.depth, report.capture.group_layers
    module_ops_bound: dict[str, float] = defaultdict(float)
    total_ops_bound = 0.0
    for row in report.ops:
        t = place_on(hw, row.dtype, row.flops, row.bytes).time_bound_s
        total_ops_bound += t
        module_ops_bound[rollup_name(row.module, depth, group)] += t

    def alt(placed: Placement, flops_model: float | None, flops: float, nbytes: float,
            measured_s: float | None, dtype: str, ops_bound: float, **more) -> AltPlacement:
        if not measured_s:
            return _alt(placed, hw, time_bound_ops_s=ops_bound, **more)
        return _alt(placed, hw, time_bound_ops_s=ops_bound,
                    mfu=_util(flops_model if flops_model is not None else flops, measured_s, hw.peak(dtype)),
                    hfu=_util(flops, measured_s, hw.peak(dtype)),
                    mbu=_util(nbytes, measured_s, hw.memory_bandwidth),
                    time_vs_bound=measured_s / ops_bound if ops_bound else None, **more)

    t = report.totals
    step = t.measured.step_time_s if t.measured else None
    totals = replace(t, placement_alt=alt(place_on(hw, t.dtype, t.flops, t.bytes), t.flops_model, t.flops,
                                          t.bytes, step, t.dtype, total_ops_bound,
                                          predicted_step_s=total_ops_bound))
    modules = [
        replace(mod, placement_alt=alt(place_on(hw, mod.dtype, mod.flops, mod.bytes), mod.flops_model,
                                       mod.flops, mod.bytes, mod.measured.time_s if mod.measured else None,
                                       mod.dtype, module_ops_bound.get(mod.name, 0.0)))
        for mod in report.modules
    ]
    attention = []
    for att in report.attention:
        pe, pm = att.placement_executed, att.placement_min
        minimum = _alt(place_on(hw, att.dtype, pm.flops, pm.bytes), hw) if pm else None
        attention.append(replace(att, placement_alt=_alt(place_on(hw, att.dtype, pe.flops, pe.bytes), hw,
                                                         min=minimum)))
    return replace(report, totals=totals, modules=modules, attention=attention,
                   hardware_alt=hardware_info(hw, t.dtype))


# ----------------------------------------------------------------------------------------------
# Trace
# ----------------------------------------------------------------------------------------------


#: What the written trace names a repeat's step: torch.profiler's own name for a step, which
#: Holistic Trace Analysis and other tools split iterations by.
TRACE_STEP = "ProfilerStep#"


def _rk(fields: dict) -> dict:
    """Counts under `rk_` names: HTA and the profiler use `bytes` and others for their own fields."""
    return {f"rk_{key}": value for key, value in fields.items()}


def annotate_trace(trace: dict, report: Report) -> dict:
    """Add each op's counts (FLOPs, bytes, intensity, bound, module...) to its range events, as
    `rk_*` arguments; steps are renamed `ProfilerStep#<r>` and carry the step's totals."""
    rows = {row.index: row for row in report.ops}
    events = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    for evt in events:
        if not isinstance(evt, dict):
            continue
        name = evt.get("name", "")
        match = _RANGE.match(name) if isinstance(name, str) else None
        if match:
            row = rows.get(int(match.group(1)))
            if row is None:
                continue
            args = evt.setdefault("args", {})
            args.update(_rk({
                "index": row.index,
                "op": row.name,
                "module": row.module,
                "flops": row.flops,
                "flops_model": row.flops_model if row.flops_model is not None else row.flops,
                "bytes": row.bytes,
                "bytes_read": row.bytes_read,
                "bytes_written": row.bytes_written,
                "intensity": row.intensity,
                "bound": row.bound,
                "time_bound_s": row.time_bound_s,
                "dtype": row.dtype,
                "shapes": row.shapes,
                "counted": row.counted,
            }))
            if row.measured is not None and row.measured.time_s is not None:
                args["rk_mean_time_s"] = row.measured.time_s
        elif isinstance(name, str) and name.startswith(STEP_PREFIX):
            t = report.totals
            evt["name"] = TRACE_STEP + name[len(STEP_PREFIX):]
            evt.setdefault("args", {}).update(_rk({
                "flops": t.flops, "flops_model": t.flops_model, "bytes": t.bytes,
                "predicted_step_s": t.predicted_step_s, "hardware": report.hardware.name,
            }))
    if isinstance(trace, dict):
        trace.setdefault("distributedInfo", {"rank": 0})  # one process: HTA reads the rank from here
        trace.setdefault("rooflinekit", {
            "workload": encode(report.workload),
            "hardware": report.hardware.name,
            "note": (f"ranges 'rk#<index> <op>' carry the counted record of op <index> in rk_* args; "
                     f"'{TRACE_STEP}<r>' is timed repeat r"),
        })
    return trace


def write_trace(path: str, trace: dict, report: Report) -> None:
    """Annotate and write a Chrome/Perfetto trace atomically."""

    write_atomic(path, json.dumps(annotate_trace(trace, report)))
