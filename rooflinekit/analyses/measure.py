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

Then `rooflinekit.analyses.measured.with_measurement` adds measured fields to a report (pure
arithmetic over its rows): achieved FLOP/s and B/s, MFU (model FLOPs), HFU (executed FLOPs), MBU,
and measured time over the roofline time bound, per op, module, attention layer and for the whole
step. `write_trace` writes the profiler's trace with each range named for its record.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from rooflinekit.core.codec import encode
from rooflinekit.core.compat import RecordFunctionFast
from rooflinekit.core.files import write_atomic
from rooflinekit.core.report import (
    Report,
)
from rooflinekit.core.stdio import native_stderr_without
from rooflinekit.stages import collectives
from rooflinekit.stages.capture.forward import active, call_forward, hooked
from rooflinekit.stages.capture.modes import DispatchRecorder, FunctionRecorder
from rooflinekit.stages.capture.recorder import Recorder
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.capture.sdpa import SDPA_NAME, patched_sdpa
from rooflinekit.stages.formulas import FormulaBook, op_key

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - Python 3.10
    pass

STEP_PREFIX = "rk:step#"
_RANGE = re.compile(r"^rk#(\d+)(?: |$)")


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
        with RecordFunctionFast(f"rk#{len(self.ops)} {name}"):
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
        with RecordFunctionFast(f"rk#{len(self.ops)} {SDPA_NAME}"):
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
    op_time = {i: per_op.get(i, 0.0) / n for i in range(len(captured)) if timed_op(captured[i])}
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
                with timed_recording(model, formulas) as rec, RecordFunctionFast(f"{STEP_PREFIX}{r}"):
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


def timed_op(op: OpRecord) -> bool:
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
