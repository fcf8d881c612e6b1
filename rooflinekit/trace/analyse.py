"""Trace in, report out: read, join, class and count, then sum each step's GPU time and place the
counted kernels and ops on the hardware's roofline."""

from __future__ import annotations

from collections import defaultdict

from rooflinekit.core.errors import UserError
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.trace.attribution import Attributed, attribute
from rooflinekit.trace.classes import NAMES, UNKNOWN
from rooflinekit.trace.comms import collectives
from rooflinekit.trace.counters import NOTE as COUNTER_NOTE
from rooflinekit.trace.counters import counter_rows
from rooflinekit.trace.counts import ShapeCounter
from rooflinekit.trace.cpu import cpu_launched
from rooflinekit.trace.device import describe, match_hardware, traced_device
from rooflinekit.trace.events import Trace
from rooflinekit.trace.join import join
from rooflinekit.trace.predicted import Prediction, matched
from rooflinekit.trace.reader import check_gpu, read_traces
from rooflinekit.trace.report import ClassTime, RankReport, StepSummary, TraceReport
from rooflinekit.trace.rollup import NO_HIERARCHY, ModuleIndex, module_rows, phase_rows
from rooflinekit.trace.rows import collective_rows, grouped, peak_time
from rooflinekit.trace.timeline import Window, busy_in, windows

US = 1e-6


def _check_step(traces: list[Trace], step: int | None) -> None:
    """A --step that no rank's trace has is one line naming the steps it has."""
    if step is None:
        return
    have = sorted({s.number for t in traces for s in t.steps})
    if step not in have:
        listed = ", ".join(map(str, have)) if have else "none (the trace has no ProfilerStep#N events)"
        raise UserError(f"--step {step}: the trace has no ProfilerStep#{step}; its steps: {listed}")


def _summary(window: Window, items: list[Attributed], hw: HardwareSpec, model_flops: tuple[float, str] | None = None,
             steps: int = 1) -> StepSummary:
    """Busy and idle time of one window, its class times, its HFU and MBU, and with the model's
    FLOPs per step and their dtype (`model_flops`, over `steps` steps) its MFU."""
    busy = busy_in(window, [(i.launched.event.ts, i.launched.event.end) for i in items])
    by_class: dict[str, list[float]] = defaultdict(list)
    work: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i in items:
        by_class[i.klass].append(i.dur)
        work[i.klass][0] += i.flops
        work[i.klass][1] += i.bytes
    total = sum(i.dur for i in items) or 1.0
    classes = [ClassTime(k, sum(v) * US, len(v), sum(v) / total, *work[k])
               for k, v in sorted(by_class.items(), key=lambda kv: -sum(kv[1]))]
    flops = sum(i.flops for i in items)
    nbytes = sum(i.bytes for i in items)
    busy_s = busy.busy_us * US
    ideal = peak_time(items, hw)
    mfu = (model_flops[0] * steps / (busy_s * hw.peak(model_flops[1]))
           if model_flops is not None and busy_s > 0 else None)
    return StepSummary(window.label, window.step, window.span * US, busy_s, busy.idle_us * US,
                       sum(i.dur for i in items) * US, len(items), flops, nbytes,
                       ideal / busy_s if busy_s > 0 and flops > 0 else None,
                       nbytes / (busy_s * hw.memory_bandwidth) if busy_s > 0 and nbytes > 0 else None, classes,
                       mfu)


def _in_window(items: list[Attributed], window: Window) -> list[Attributed]:
    return [i for i in items if window.holds(i.launched.event.ts)]


def _total_window(chosen: list[Window], items: list[Attributed]) -> Window:
    """The window over every chosen step (or the whole trace)."""
    if len(chosen) == 1:
        return chosen[0]
    return Window("all steps", min(w.start for w in chosen), max(w.end for w in chosen))


#: The note of a trace recorded without input shapes.
NO_SHAPES = ("the trace records no input shapes, so no op's FLOPs or bytes can be counted: record it with "
             "torch.profiler.profile(..., record_shapes=True); the kernel times by class stand")


def _notes(trace: Trace, items: list[Attributed], kept: list[Attributed]) -> list[str]:
    """What the summaries leave out, said: events outside the chosen steps, events never joined."""
    notes = []
    inside = {id(i) for i in kept}
    outside = [i for i in items if id(i) not in inside]
    if outside:
        notes.append(f"{len(outside)} GPU events ({sum(i.dur for i in outside) * US * 1e3:.3g} ms) start "
                     "outside the chosen ProfilerStep windows and are left out of the sums")
    unlaunched = [i for i in kept if i.launched.launch is None and i.launched.via != "cpu"]
    if unlaunched:
        notes.append(f"{len(unlaunched)} GPU events have no launch in the trace (launched before its CPU "
                     "side began, or on an untraced thread): classed by kernel name only")
    if trace.ops and not any("Input Dims" in (op.args or {}) for op in trace.ops):
        notes.insert(0, NO_SHAPES)
    return notes


def is_cpu_trace(trace: Trace) -> bool:
    """A trace recorded without a GPU and with shapes: CPU ops with Input Dims, and no GPU event,
    runtime call or GPU named (one without shapes has nothing to count: refused as before)."""
    if trace.gpu or trace.runtime or trace.devices:
        return False
    return any("Input Dims" in (op.event.get("args") or {}) for op in trace.ops)


def _rollups(trace: Trace, kept: list[Attributed], hw: HardwareSpec, model, top: int) -> dict:
    """The phase and module rows of a rank, and the line saying when there is no hierarchy."""
    index = ModuleIndex.of(trace, model)
    return {"phases": phase_rows(kept, hw),
            "modules": module_rows(kept, hw, index, top=top) if index.paths else [],
            "notes": [] if index.paths else [NO_HIERARCHY]}


def _predicted(items: list[Attributed], chosen: list[Window], prediction: Prediction | None
               ) -> tuple[list[Attributed], list[str]]:
    """Each step's kernels without a launching op matched to the profile's predicted kernels."""
    if prediction is None:
        return items, []
    out, inside = [], set()
    notes = [f"--profile {prediction.source}: MFU = its model FLOPs per step ({prediction.model_flops:.4g}) over "
             f"(busy time x the {prediction.dtype} peak); kernels no aten op launched take its predicted kernels' "
             "work, in order within each class; the profile must be of the same model, step and deployment (not "
             "checked)"]
    for w in chosen:
        part = _in_window(items, w)
        found, said = matched(part, prediction, w.label)
        out += found
        notes += said
        inside |= {id(i) for i in part}
    return out + [i for i in items if id(i) not in inside], notes


def rank_report(trace: Trace, hw: HardwareSpec, step: int | None, counter: ShapeCounter,
                top: int = 15, model=None, prediction: Prediction | None = None) -> RankReport:
    """One rank's report: steps, total, tables and notes (a CPU trace's ops timed as its kernels;
    a trace of CUPTI counter ranges alone, its counters; with a profile's `prediction`, MFU and the
    unplaced kernels' predicted work)."""
    if not trace.gpu and trace.ranges:
        return counters_only(trace, top)
    cpu = not trace.gpu
    items = attribute(cpu_launched(trace, counter) if cpu else join(trace), counter)
    first = min(i.launched.event.ts for i in items)
    last = max(i.launched.event.end for i in items)
    chosen = windows(trace.steps, first, last, step)
    items, predicted_notes = _predicted(items, chosen, prediction)
    whole = _total_window(chosen, items)
    kept = [i for i in items if any(w.holds(i.launched.event.ts) for w in chosen)]
    flops = (prediction.model_flops, prediction.dtype) if prediction is not None else None
    steps = [_summary(w, _in_window(items, w), hw, flops) for w in chosen]
    total = steps[0] if len(steps) == 1 else _summary(whole, kept, hw, flops, len(chosen))
    time = sum(i.dur for i in kept) or 1.0
    device = traced_device([trace])
    rollups = _rollups(trace, kept, hw, model, top)
    return RankReport(
        path=trace.path, rank=trace.rank, device=describe(device) if device else "not recorded",
        steps=steps if len(steps) > 1 else [], total=total,
        kernels=grouped(kept, hw, lambda i: i.launched.event.name, top),
        ops=grouped([i for i in kept if i.status == "counted"], hw, lambda i: i.op.name, top),
        uncounted=grouped([i for i in kept if i.op is not None and i.status != "counted"
                           and i.klass != "communication"], hw,
                          lambda i: i.op.name, top),
        unplaced=grouped([i for i in kept if i.op is None], hw, lambda i: i.launched.event.name, top),
        collectives=collective_rows(collectives(kept, trace.world_size)),
        class_coverage=sum(i.dur for i in kept if i.klass != UNKNOWN) / time,
        counted_coverage=sum(i.dur for i in kept if i.status == "counted") / time,
        notes=_notes(trace, items, kept) + rollups["notes"] + ([COUNTER_NOTE] if trace.ranges else [])
        + predicted_notes,
        timing="cpu" if cpu else "gpu", phases=rollups["phases"], modules=rollups["modules"],
        counters=counter_rows(trace.ranges, kept, top))


def counters_only(trace: Trace, top: int | None) -> RankReport:
    """A trace recorded with the CUPTI profiler and no kernel activity: no GPU time to report, the
    counters' FLOPs per kernel (a range's duration is the replay's, not a time of the run)."""
    empty = StepSummary("trace", None, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, None, None)
    device = traced_device([trace])
    return RankReport(
        path=trace.path, rank=trace.rank, device=describe(device) if device else "not recorded", steps=[],
        total=empty, kernels=[], ops=[], uncounted=[], unplaced=[], collectives=[], class_coverage=0.0,
        counted_coverage=0.0, timing="counters", counters=counter_rows(trace.ranges, [], top),
        notes=[f"the trace holds {len(trace.ranges)} CUPTI profiler ranges and no kernel activity: no GPU time, "
               "busy or idle time to report (record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] "
               "for them); the counters' FLOPs per kernel are below", COUNTER_NOTE])


def read_analysable(path: str) -> list[Trace]:
    """The rank traces at `path`: those with GPU events, or a CPU-only trace (its ops as kernels)."""
    traces = read_traces(path, cpu=True)
    if not any(t.gpu or t.ranges for t in traces) and not all(is_cpu_trace(t) for t in traces):
        check_gpu(traces, path)
    return traces


def analyse(path: str, hardware: str | None = None, step: int | None = None,
            counter: ShapeCounter | None = None, model=None, top: int | None = 15,
            prediction: Prediction | None = None) -> TraceReport:
    """The report of the trace (or folder of rank traces) at `path` on `hardware` (default: the
    GPU its deviceProperties name), for step `step` (default: every step and their total);
    `model` (the nn.Module the trace ran) names the module rows by its attribute paths; `top`
    rows of each kernel and op table (None: every row, as the HTML page and the chart draw them);
    `prediction` (a profile report of the same model and step: rooflinekit.trace.predicted) gives
    each step its MFU and the kernels no aten op launched their predicted work."""
    traces = read_analysable(path)
    _check_step(traces, step)
    hw = match_hardware(traces, hardware)
    counter = counter or ShapeCounter()
    ranks = [rank_report(t, hw, step, counter, top, model=model, prediction=prediction) for t in traces
             if t.gpu or t.ranges or is_cpu_trace(t)]
    notes = [f"class names: {', '.join(n for n in NAMES)}"]
    return TraceReport(source=str(path), hardware=hw.name, peaks=dict(hw.peak_flops),
                       bandwidth=hw.memory_bandwidth, ranks=ranks, step=step, notes=notes,
                       profile=prediction.source if prediction is not None else None)
