"""`rooflinekit compare PROFILE.json TRACE.json`: a profile's prediction of a step beside what a
trace of that step measured, kernel class by kernel class.

The profile's ops take the trace's classes by their names (rooflinekit.trace.classes: aten::mm is a
gemm wherever it runs), collectives are communication, modelled records with FLOPs and weights
(MoE experts) are gemm; each class sums the ops' FLOPs, bytes, time bounds and expected times (each
op's `expected_s` as the profile priced it: its efficiency source, its GPU generation's table, expert
GEMMs by their width, its share of the step's launches). A report written before ops carried `expected_s` is
repriced with the committed Hopper table, launches aside, and the comparison says so.
The trace's side is its counted FLOPs and bytes and its GPU time per class, per profiler step (the
chosen steps' total over their number). Both must be of the same model and step: the comparison
cannot check that, and says so.
"""

from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from dataclasses import asdict, dataclass

from tabulate import tabulate

from rooflinekit.core.errors import ReportFileError
from rooflinekit.core.report import Report
from rooflinekit.core.units import ratio, seconds, si
from rooflinekit.stages.efficiency_table import load_table
from rooflinekit.stages.expected import classify, gemm_rows, kernel_time, size_of
from rooflinekit.trace.classes import UNKNOWN, class_of_op
from rooflinekit.trace.report import TRACE_SCHEMA_VERSION

#: The text's width.
WIDTH = 100


@dataclass(frozen=True)
class ClassPair:
    """One kernel class: the profile's prediction beside the trace's measurement, per step."""

    klass: str
    flops_predicted: float = 0.0
    bytes_predicted: float = 0.0
    bound_s: float = 0.0
    expected_s: float = 0.0
    flops_counted: float | None = None
    measured_s: float = 0.0

    @property
    def measured_over_expected(self) -> float | None:
        return self.measured_s / self.expected_s if self.expected_s > 0 and self.measured_s > 0 else None


def op_class(name: str, kind: str, flops: float, param_bytes: float) -> str:
    """The trace's class of one of the profile's op rows."""
    if kind == "collective" or name.startswith("comm."):
        return "communication"
    if kind == "modelled" and flops > 0 and param_bytes > 0:
        return "gemm"
    found = class_of_op(name.replace(".", "::", 1))
    if found == UNKNOWN and kind in ("fused", "modelled") and any(w in name.lower() for w in ("attn", "attention")):
        return "attention"
    return found


#: What the comparison says of a report whose ops carry no expected times.
REPRICED_WORDS = ("this profile's ops carry no expected times (written by an older rooflinekit): each is "
                  "repriced with the committed Hopper table, launches aside, whatever its efficiency source "
                  "and GPU; write the profile again for the figures its expected step used")


def priced_as_written(report: Report) -> bool:
    """Whether the report's ops carry the expected times its step was priced with."""
    return any(op.expected_s is not None for op in report.ops)


def _repriced(op, phase: str, hw, table, in_attention: bool) -> float:
    """An op of an older report at the committed table's fractions (no launch)."""
    cls = classify(op.name, op.kind, in_attention, op.flops > 0 and op.param_bytes > 0,
                   gemm_rows(op.name, op.shapes), phase, table)
    peak = hw.peaks.get(op.dtype) or hw.peak_flops
    return kernel_time(op.flops, op.bytes_read + op.bytes_written, peak, hw.bandwidth,
                       table.classes[cls].at(size_of(op.name, op.kind, op.shapes)), op.dtype)


def profile_classes(report: Report) -> dict[str, ClassPair]:
    """The profile's ops summed per trace class, with each op's expected time."""
    hw, phase = report.hardware, report.workload.phase
    table = None if priced_as_written(report) else load_table()
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for op in report.ops:
        klass = op_class(op.name, op.kind, op.flops, op.param_bytes)
        nbytes = op.bytes_read + op.bytes_written
        if klass == "communication":
            expected = 0.0
        elif table is None:
            expected = op.expected_s or 0.0
        else:
            expected = _repriced(op, phase, hw, table, klass == "attention")
        row = sums[klass]
        row[0] += op.flops
        row[1] += nbytes
        row[2] += op.time_bound_s
        row[3] += expected
    return {k: ClassPair(k, *v) for k, v in sums.items()}


def trace_classes(trace: dict, rank: int = 0) -> tuple[dict[str, tuple[float, float | None]], int]:
    """class -> (GPU seconds, counted FLOPs) per profiler step of one rank of a trace report, and
    the number of steps they are the mean of."""
    r = trace["ranks"][rank]
    steps = max(1, len(r.get("steps") or []))
    return ({c["klass"]: (c["time_s"] / steps, c["flops"] / steps if c.get("flops") is not None else None)
             for c in r["total"]["by_class"]}, steps)


def compare_trace(profile: Report, trace: dict, profile_path: str = "profile", trace_path: str = "trace") -> dict:
    """The comparison's data: per class the prediction and the measurement, and the step's."""
    predicted = profile_classes(profile)
    measured, steps = trace_classes(trace)
    pairs = []
    for klass in sorted(set(predicted) | set(measured), key=lambda k: -(measured.get(k, (0.0,))[0])):
        p = predicted.get(klass, ClassPair(klass))
        seconds_, flops = measured.get(klass, (0.0, None))
        pairs.append(ClassPair(klass, p.flops_predicted, p.bytes_predicted, p.bound_s, p.expected_s, flops, seconds_))
    busy = trace["ranks"][0]["total"]["busy_s"] / steps
    return {"profile": profile_path, "trace": trace_path, "steps": steps, "hardware": (profile.hardware.name,
                                                                                      trace["hardware"]),
            "classes": pairs, "expected_step_s": profile.totals.expected_step_s, "bound_s": profile.totals.time_bound_s,
            "busy_s": busy,
            "notes": ["the profile and the trace must be of the same model, step and deployment: not checked",
                      "per class: the profile's ops by the trace's class names, each op at the expected time its "
                      "profile priced it with (its efficiency source, its share of the step's launches); the "
                      "trace's GPU time and counted FLOPs per profiler step",
                      *([] if priced_as_written(profile) else [REPRICED_WORDS])]}


def render_trace_compare(data: dict) -> str:
    """The comparison as text within 100 columns."""
    rows = [[p.klass, si(p.flops_predicted), si(p.flops_counted) if p.flops_counted is not None else "-",
             seconds(p.bound_s), seconds(p.expected_s), seconds(p.measured_s), ratio(p.measured_over_expected)]
            for p in data["classes"]]
    hw_a, hw_b = data["hardware"]
    lines = [f"predicted: {data['profile']} (on {hw_a}); measured: {data['trace']} (on {hw_b}, mean of "
             f"{data['steps']} step{'s' if data['steps'] > 1 else ''})", "",
             tabulate(rows, headers=["class", "FLOP pred", "FLOP trace", "bound", "expected", "measured",
                                     "meas/exp"], disable_numparse=True), "",
             f"step: bound {seconds(data['bound_s'])}, expected {seconds(data['expected_step_s'])}, measured busy "
             f"GPU time {seconds(data['busy_s'])} ({ratio(data['busy_s'] / data['expected_step_s'])} x expected)"
             if data["expected_step_s"] else f"step: measured busy GPU time {seconds(data['busy_s'])}"]
    lines += [f"note: {n}" for n in data["notes"]]
    wrapped = [w for line in lines for w in (textwrap.wrap(line, WIDTH, subsequent_indent="  ")
                                             if len(line) > WIDTH and "  " not in line.strip() else [line])]
    return "\n".join(wrapped) + "\n"


def load_trace_report(path: str) -> dict:
    """A trace report written by `rooflinekit trace -f json`, checked for what the comparison reads."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ReportFileError(f"cannot read the trace report {path}: {exc}") from None
    ranks = data.get("ranks") if isinstance(data, dict) else None
    if data.get("kind") != "trace" or not ranks or "total" not in ranks[0] or "by_class" not in ranks[0]["total"]:
        raise ReportFileError(f"{path} is not a usable trace report (write one with `rooflinekit trace -f json`)")
    if str(data.get("schema_version", "")).split(".")[0] != TRACE_SCHEMA_VERSION.split(".")[0]:
        raise ReportFileError(f"{path}: trace report schema {data.get('schema_version')!r}; this rooflinekit "
                              f"reads {TRACE_SCHEMA_VERSION.split('.')[0]}.x")
    return data


def to_json(data: dict) -> str:
    """The comparison as JSON: its fields, each class's figures and the measured/expected ratio."""
    out = dict(data, classes=[{**asdict(p), "measured_over_expected": p.measured_over_expected}
                              for p in data["classes"]], kind="trace-compare")
    return json.dumps(out, indent=2) + "\n"
