"""`rooflinekit calibrate --trace`: the achievable fractions a user's own trace shows, as an
efficiency source the expected time reads (rooflinekit.stages.efficiency_table.load_table).

Each counted kernel of the chosen profiler steps takes the expected time's class (GEMM small or
large by its rows, attention, element-wise and copies); within a class, kernels whose FLOPs at the
dtype's peak outlast their bytes at HBM bandwidth measure the compute fraction of their dtype, the
others the bandwidth fraction. The statistic is the ratio of sums: the class's ideal time (each
kernel at the binding ceiling) over its measured kernel time, so that pricing the same kernels at
the fractions gives back their measured time. A class or dtype the trace has no sample of keeps the
committed table's value and says so.
"""

from __future__ import annotations

import hashlib
import shlex
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from tabulate import tabulate

from rooflinekit.core.errors import UserError
from rooflinekit.core.units import seconds
from rooflinekit.stages.efficiency_table import CLASSES, EfficiencyTable, load_table
from rooflinekit.stages.expected import MATMUL_OPS, gemm_rows
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.trace.attribution import Attributed, attribute
from rooflinekit.trace.counts import ShapeCounter, recorded_op
from rooflinekit.trace.device import match_hardware
from rooflinekit.trace.join import join
from rooflinekit.trace.reader import read_traces, trace_files
from rooflinekit.trace.rows import ran_as
from rooflinekit.trace.timeline import windows

US = 1e-6
#: Trace kernel classes whose kernels stream memory at the element-wise class's rates (copies are
#: not: host-device copies run at the PCIe link's rate).
STREAMING = frozenset({"elementwise", "reduction", "softmax", "embedding", "optimizer"})
STATISTIC = ("ratio of sums per class: the counted kernels' ideal time (FLOPs at the dtype's dense peak or "
             "bytes at HBM bandwidth, whichever binds each kernel) over their measured kernel time")


@dataclass
class Sample:
    """Summed ideal and measured seconds of one (class, ceiling) and how many kernels gave them."""

    ideal_s: float = 0.0
    measured_s: float = 0.0
    kernels: int = 0

    @property
    def fraction(self) -> float:
        return self.ideal_s / self.measured_s if self.measured_s > 0 else 0.0


@dataclass
class TraceCalibration:
    """The fractions measured in a trace: per (class, "bandwidth" or a dtype key) a Sample, and per
    kernel shape (class, op, shapes, ceiling) a Sample of its own."""

    hardware: HardwareSpec
    source: str
    digest: str
    steps: tuple[int, ...]
    samples: dict[tuple[str, str], Sample] = field(default_factory=dict)
    shapes: dict[tuple[str, str, str, str], Sample] = field(default_factory=dict)


def _shapes(item: Attributed) -> str:
    """The launching op's tensor shapes as OpRecord.shapes spells them ("4096x1024,1024x512")."""
    dims = item.op.args.get("Input Dims", []) if item.op is not None else []
    return ",".join("x".join(str(d) for d in arg) for arg in dims
                    if isinstance(arg, list) and arg and all(isinstance(d, int) for d in arg))


def efficiency_class(item: Attributed, small_rows: int) -> str | None:
    """The expected time's class of a counted kernel, or None (collectives, memsets, unknown)."""
    name = item.op.name.replace("::", ".") if item.op is not None else ""
    if item.klass == "gemm" or name in MATMUL_OPS:
        rows = gemm_rows(name, _shapes(item))
        return "gemm_small" if rows is not None and rows <= small_rows else "gemm_large"
    if item.klass == "attention":
        return "attention_prefill"
    return "elementwise" if item.klass in STREAMING else None


def sampled(item: Attributed) -> bool:
    """Whether a kernel measures a fraction: its op counted, or a streaming op's bytes known."""
    return item.status == "counted" or (item.status == "no_formula" and item.klass in STREAMING and item.bytes > 0)


def add_samples(cal: TraceCalibration, items: Iterable[Attributed], table: EfficiencyTable) -> None:
    """Each counted kernel's ideal and measured time into its (class, ceiling) sample."""
    hw = cal.hardware
    for item in items:
        klass = efficiency_class(item, table.small_gemm_max_rows) if sampled(item) else None
        if klass is None or item.dur <= 0:
            continue
        dtype = ran_as(item, hw)
        compute = item.flops / hw.peak(dtype) if item.flops > 0 else 0.0
        traffic = item.bytes / hw.memory_bandwidth if item.bytes > 0 else 0.0
        if compute <= 0 and traffic <= 0:
            continue
        key = (klass, dtype) if compute >= traffic else (klass, "bandwidth")
        for sample in (cal.samples.setdefault(key, Sample()),
                       cal.shapes.setdefault((klass, item.op.name, _shapes(item), key[1]), Sample())):
            sample.ideal_s += max(compute, traffic)
            sample.measured_s += item.dur * US
            sample.kernels += 1


@dataclass
class StepItems:
    """A trace read once: its hardware, and its attributed GPU events by profiler step."""

    hardware: HardwareSpec
    source: str
    digest: str
    by_step: dict[int, list[Attributed]]

    def of(self, steps: Iterable[int]) -> list[Attributed]:
        return [i for s in steps for i in self.by_step.get(s, ())]


def with_bytes_only(items: list[Attributed], counter: ShapeCounter) -> list[Attributed]:
    """The items, those of streaming ops with bytes but no FLOP formula (add, mul, copies of
    activations: element-wise ops move bytes and do next to no arithmetic) given their op's bytes,
    shared over its kernels by duration: samples of the bandwidth an element-wise kernel reaches."""
    total: dict[int, float] = defaultdict(float)
    for i in items:
        if i.status == "no_formula" and i.klass in STREAMING:
            total[id(i.op)] += i.dur
    out = []
    for i in items:
        if id(i.op) in total and i.status == "no_formula" and total[id(i.op)] > 0:
            count = counter.count(recorded_op(i.op.event))
            i = replace(i, bytes=count.bytes * i.dur / total[id(i.op)], dtype=count.dtype)
        out.append(i)
    return out


def read_steps(path: str, hardware: str | None = None, counter: ShapeCounter | None = None) -> StepItems:
    """Every rank's GPU events of the trace at `path`, attributed and grouped by profiler step."""
    traces = read_traces(path)
    hw = match_hardware(traces, hardware)
    counter = counter or ShapeCounter()
    by_step: dict[int, list[Attributed]] = defaultdict(list)
    for trace in (t for t in traces if t.gpu):
        first, last = min(e.ts for e in trace.gpu), max(e.end for e in trace.gpu)
        steps = [w for w in windows(trace.steps, first, last) if w.step is not None]
        for item in with_bytes_only(attribute(join(trace), counter), counter):
            step = next((w.step for w in steps if w.holds(item.launched.event.ts)), None)
            if step is not None:
                by_step[step].append(item)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in trace_files(path))).hexdigest()
    return StepItems(hw, str(path), digest, dict(sorted(by_step.items())))


def _chosen(read: StepItems, steps: tuple[int, ...] | None, held_out: int) -> tuple[int, ...]:
    """The steps to calibrate from: `steps` (each checked to be in the trace), else every step
    but the last `held_out`."""
    have = tuple(read.by_step)
    if steps is None:
        return have[:-held_out] if held_out and len(have) > held_out else have
    missing = sorted(set(steps) - set(have))
    if missing:
        raise UserError(f"--steps {','.join(map(str, missing))}: the trace {read.source} has no such ProfilerStep "
                        f"with GPU work; its steps: {', '.join(map(str, have)) or 'none'}")
    return tuple(sorted(set(steps)))


def calibrate_steps(read: StepItems, steps: tuple[int, ...] | None = None, held_out: int = 0) -> TraceCalibration:
    """The fractions the counted kernels of `steps` (default: every step but the last `held_out`)
    reached (module doc)."""
    used = _chosen(read, steps, held_out)
    cal = TraceCalibration(read.hardware, read.source, read.digest, used)
    add_samples(cal, read.of(used), load_table())
    if not cal.samples:
        raise UserError(f"{read.source}: no counted kernel in steps {', '.join(map(str, used)) or '(none)'} (record "
                        "the trace with record_shapes=True): nothing to calibrate from")
    return cal


def calibrate_trace(path: str, hardware: str | None = None, steps: tuple[int, ...] | None = None,
                    counter: ShapeCounter | None = None, held_out: int = 0) -> TraceCalibration:
    """calibrate_steps of the trace at `path`."""
    return calibrate_steps(read_steps(path, hardware, counter), steps, held_out)


def _line(key: str, value: float, source: str) -> tuple[str, str]:
    return f"{key} = {value:.6g}", f'{key} = "{source}"'


def _class_lines(name: str, cal: TraceCalibration, base: EfficiencyTable) -> list[str]:
    """One class's table and sources: measured ceilings replaced, the rest the committed values."""
    fixed = base.classes[name]
    values, sources = [], []
    measured = {ceiling: s for (klass, ceiling), s in cal.samples.items() if klass == name and s.fraction > 0}
    where = f"trace {Path(cal.source).name} (sha256 {cal.digest[:16]}), steps {','.join(map(str, cal.steps))}"
    for ceiling, sample in sorted(measured.items()):
        key = "bandwidth" if ceiling == "bandwidth" else f"compute_{ceiling}"
        value = min(1.0, sample.fraction)
        values_sources = _line(key, value, f"{where}: {sample.kernels} kernels, {sample.ideal_s * 1e3:.4g} ms ideal "
                                           f"over {sample.measured_s * 1e3:.4g} ms measured"
                                           + (" (above 1: capped; a count to check)" if sample.fraction > 1 else ""))
        values.append(values_sources[0])
        sources.append(values_sources[1])
    if "bandwidth" not in measured:
        values.append(f"bandwidth = {fixed.bandwidth:.4f}")
        sources.append('bandwidth = "not measured in the trace: the committed table\'s value"')
    values.insert(0, f"compute = {fixed.compute:.4f}")
    sources.insert(0, 'compute = "the committed table\'s value (dtypes the trace measured: compute_<dtype>)"')
    values += [f"compute_{d} = {v:.4f}" for d, v in fixed.compute_by_dtype.items() if d not in measured]
    return [f"[classes.{name}]", *values, "", f"[classes.{name}.sources]", *sources, ""]


def efficiency_toml(cal: TraceCalibration) -> str:
    """The efficiency source: the committed table's layout, the trace's fractions in it, and a
    [calibration] record of where they come from."""
    base = load_table()
    counts = defaultdict(int)
    for (klass, _), s in cal.samples.items():
        counts[klass] += s.kernels
    head = ["# Achievable fractions measured in a torch.profiler trace by `rooflinekit calibrate --trace`:",
            "# an efficiency source for the expected time (rooflinekit.stages.efficiency_table.load_table).", "",
            "version = 1", f"small_gemm_max_rows = {base.small_gemm_max_rows}", "",
            "[calibration]", f'gpu = "{cal.hardware.name}"', f'trace = "{cal.source}"', f'sha256 = "{cal.digest}"',
            f"steps = [{', '.join(map(str, cal.steps))}]", f'statistic = "{STATISTIC}"',
            "samples = {" + ", ".join(f"{k} = {n}" for k, n in sorted(counts.items())) + "}", ""]
    body = [line for name in CLASSES for line in _class_lines(name, cal, base)]
    same = '"not measured in the trace: the committed table\'s value"'
    launch = ["[launch]", f"decode_s = {base.launch_decode_s!r}", f"prefill_s = {base.launch_prefill_s!r}",
              f"host_prefill_s = {base.launch_host_prefill_s!r}", "", "[launch.sources]", f"decode_s = {same}",
              f"prefill_s = {same}", f"host_prefill_s = {same}", ""]
    return "\n".join(head + body + launch + _shape_lines(cal))


def _shape_lines(cal: TraceCalibration) -> list[str]:
    """One [[shapes]] table per kernel shape: its own fraction, which `priced` takes before its
    class's (a GEMM's fraction depends on its M, N and K far more than on its class)."""
    out = ["# Per kernel shape: the fraction of the shape's kernels, at the ceiling that binds them.", ""]
    for (klass, op, shapes, ceiling), sample in sorted(cal.shapes.items()):
        if sample.fraction <= 0:
            continue
        out += ["[[shapes]]", f'class = "{klass}"', f'op = "{op}"', f'shapes = "{shapes}"', f'ceiling = "{ceiling}"',
                f"fraction = {min(1.0, sample.fraction):.6g}", f"kernels = {sample.kernels}",
                f"measured_s = {sample.measured_s:.6g}", ""]
    return out


def load_shapes(path: str | Path) -> dict[tuple[str, str, str, str], float]:
    """(class, op, shapes, ceiling) -> fraction from an efficiency source's [[shapes]] tables."""
    data = tomllib.loads(Path(path).read_text())
    return {(e["class"], e["op"], e["shapes"], e["ceiling"]): float(e["fraction"]) for e in data.get("shapes", [])}


@dataclass(frozen=True)
class ClassCheck:
    """One class's counted kernels priced at a table against their measured time."""

    klass: str
    kernels: int
    expected_s: float
    measured_s: float

    @property
    def ratio(self) -> float | None:
        return self.expected_s / self.measured_s if self.measured_s > 0 else None


def expected_s(item: Attributed, klass: str, hw: HardwareSpec, table: EfficiencyTable,
               shapes: dict[tuple[str, str, str, str], float]) -> float:
    """A counted kernel's expected time: its shape's fraction where the source has it, else its
    class's fractions (the larger of FLOPs and bytes at them)."""
    dtype = ran_as(item, hw)
    compute, traffic = item.flops / hw.peak(dtype), item.bytes / hw.memory_bandwidth
    ceiling = dtype if compute >= traffic else "bandwidth"
    own = shapes.get((klass, item.op.name, _shapes(item), ceiling))
    if own is not None:
        return max(compute, traffic) / own
    frac = table.classes[klass]
    return max(compute / frac.compute_for(dtype), traffic / frac.bandwidth_for(dtype))


def priced(items: Iterable[Attributed], hw: HardwareSpec, table: EfficiencyTable,
           shapes: dict[tuple[str, str, str, str], float] | None = None) -> list[ClassCheck]:
    """Each class's counted kernels at the source's fractions (no launch cost: the trace's kernel
    durations hold none) beside their measured kernel time."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for item in items:
        klass = efficiency_class(item, table.small_gemm_max_rows) if sampled(item) else None
        if klass is None or (item.flops <= 0 and item.bytes <= 0):
            continue
        expected = expected_s(item, klass, hw, table, shapes or {})
        entry = sums[klass]
        entry[0] += 1
        entry[1] += expected
        entry[2] += item.dur * US
    return [ClassCheck(k, int(v[0]), v[1], v[2]) for k, v in sorted(sums.items())]


def held_out_check(cal: TraceCalibration, source: str | Path, read: StepItems
                   ) -> tuple[list[ClassCheck], tuple[int, ...]]:
    """The trace's other steps priced at the efficiency source written from `cal` against their
    measured kernel time (nothing to check when the calibration used every step)."""
    others = tuple(s for s in read.by_step if s not in cal.steps)
    if not others:
        return [], ()
    return priced(read.of(others), read.hardware, load_table(str(source)), load_shapes(source)), others


def trace_summary(cal: TraceCalibration, output: str, checks: list[ClassCheck], others: tuple[int, ...]) -> dict:
    """`calibrate --trace --format json`: the source written, the fractions and the check."""
    return {
        "output": str(output), "gpu": cal.hardware.name, "trace": cal.source, "sha256": cal.digest,
        "steps": list(cal.steps), "statistic": STATISTIC,
        "fractions": [{"class": k, "ceiling": c, "fraction": s.fraction, "kernels": s.kernels,
                       "measured_s": s.measured_s} for (k, c), s in sorted(cal.samples.items())],
        "shapes": len(cal.shapes),
        "check": {"steps": list(others), "classes": [
            {"class": c.klass, "kernels": c.kernels, "expected_s": c.expected_s, "measured_s": c.measured_s,
             "expected_over_measured": c.ratio} for c in checks]},
    }


def trace_lines(cal: TraceCalibration, output: str, checks: list[ClassCheck], others: tuple[int, ...]) -> list[str]:
    """`calibrate --trace`'s text: the fractions, the check on the other steps, where it went."""
    rows = [[k, c, s.kernels, seconds(s.measured_s), f"{s.fraction:.3f}"] for (k, c), s in sorted(cal.samples.items())]
    lines = [f"calibrated from {Path(cal.source).name}, steps {', '.join(map(str, cal.steps))}, on {cal.hardware.name}",
             "", tabulate(rows, headers=["class", "ceiling", "kernels", "measured", "fraction"], disable_numparse=True),
             "", f"{len(cal.shapes)} kernel shapes with fractions of their own (priced before their class's)"]
    if checks:
        rows = [[c.klass, c.kernels, seconds(c.expected_s), seconds(c.measured_s),
                 f"{c.ratio:.3f}" if c.ratio else "-"] for c in checks]
        lines += ["", f"check on the other steps ({', '.join(map(str, others))}): expected at these fractions "
                  "against measured", tabulate(rows, headers=["class", "kernels", "expected", "measured", "exp/meas"],
                                               disable_numparse=True)]
    else:
        lines += ["", "check: not made (every step of the trace was used; leave some out with --steps)"]
    lines += ["", f"wrote {output}",
              f"use it: --efficiency {shlex.quote(Path(output).name)} on profile, sweep, advise or plan "
              "(docs/trace.md)"]
    return lines
