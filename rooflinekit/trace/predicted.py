"""`rooflinekit trace --profile REPORT`: a profile report of the same model and step gives a trace
what it cannot know alone.

- The model's FLOPs per step (`totals.flops_model`), so each step has an MFU beside its HFU.
- The work of kernels no aten op launched (CUDA-graph replays in serving engines' decode, library
  and compiled kernels): within each kernel class, a step's such kernels are matched in order to the
  profile's predicted kernels of that class, one to one, and take their FLOPs and bytes. Where the
  counts differ (the engine fused or split kernels the profile's view does not), nothing is matched
  and a note says how many of each there were.

The profile must be of the same model, step and deployment as the trace: that cannot be checked.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from rooflinekit.core.report import Report
from rooflinekit.trace.attribution import Attributed
from rooflinekit.trace.compare import op_class

#: The status of a kernel whose work comes from the profile's predicted kernel.
PREDICTED = "predicted"


@dataclass(frozen=True)
class Prediction:
    """What a profile report predicts of one step: the model's FLOPs, its peak's dtype, and per
    trace kernel class the predicted kernels' (FLOPs, bytes, name) in the order they run."""

    source: str
    model_flops: float
    dtype: str
    by_class: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)


def prediction_of(report: Report, source: str) -> Prediction:
    """The prediction a profile report makes (its op rows in order; collectives are not kernels)."""
    by_class: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for op in report.ops:
        klass = op_class(op.name, op.kind, op.flops, op.param_bytes)
        if klass != "communication" and (op.flops > 0 or op.bytes_read + op.bytes_written > 0):
            by_class[klass].append((op.flops, op.bytes_read + op.bytes_written, op.name))
    return Prediction(source, report.totals.flops_model or report.totals.flops, report.hardware.dtype,
                      dict(by_class))


def matched(items: list[Attributed], prediction: Prediction, label: str) -> tuple[list[Attributed], list[str]]:
    """One step's events with its unplaced kernels matched in order, class by class, to the
    predicted kernels (status PREDICTED); the notes of the classes whose counts differ."""
    unplaced: dict[str, list[int]] = defaultdict(list)
    for k, item in enumerate(items):
        if item.op is None and item.klass != "communication":
            unplaced[item.klass].append(k)
    out, notes = list(items), []
    for klass, where in sorted(unplaced.items()):
        predicted = prediction.by_class.get(klass, [])
        if len(predicted) != len(where):
            notes.append(f"{label}: {len(where)} {klass} kernels without a launching op against {len(predicted)} "
                         f"predicted by the profile: not matched")
            continue
        order = sorted(where, key=lambda k: items[k].launched.event.ts)
        for k, (flops, nbytes, name) in zip(order, predicted, strict=True):
            out[k] = replace(items[k], status=PREDICTED, flops=flops, bytes=nbytes, dtype=prediction.dtype,
                             formula=f"profile: {name}")
    return out, notes
