"""CUPTI counter ranges: the FLOPs a kernel executed, measured by the GPU's counters, beside the
FLOPs rooflinekit counts from the op's recorded shapes.

torch.profiler's experimental CUPTI profiler (`experimental_config=_ExperimentalConfig(
profiler_metrics=[...])`) replays each kernel under hardware counters and writes a
`cuda_profiler_range` event per kernel with the counters' values. With the SASS thread-instruction
counters (`smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum`), a kernel's
FLOPs per precision are add + mul + 2 x fma, as Nsight Compute's roofline counts them. Tensor-core
instructions (HMMA, IMMA, DMMA) are not among those counters: a GEMM on tensor cores shows none of
its FLOPs here, and the table says so. A range's duration is the replay's, not the kernel's time
in the run, so no rate is derived from it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the report imports this module and must not import torch
    from rooflinekit.trace.attribution import Attributed
    from rooflinekit.trace.events import CounterRange

#: Precision -> the counter-name letter of its SASS instructions.
PRECISIONS = {"fp64": "d", "fp32": "f", "fp16": "h"}
_METRIC = "smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
NOTE = ("CUPTI counters: FLOPs per precision = add + mul + 2 x fma SASS thread instructions, as Nsight "
        "Compute's roofline counts them; tensor-core instructions are not among these counters, and a "
        "range's duration is the counter replay's, not the kernel's time in the run")


@dataclass(frozen=True)
class CounterRow:
    """One kernel name's CUPTI ranges: measured FLOPs per precision, and the FLOPs counted from the
    recorded shapes of its launching ops (None where the trace has no kernel activity to join)."""

    name: str
    ranges: int
    fp64: float | None
    fp32: float | None
    fp16: float | None
    counted: float | None = None

    @property
    def measured(self) -> float | None:
        values = [v for v in (self.fp64, self.fp32, self.fp16) if v is not None]
        return sum(values) if values else None


def range_flops(counters: dict) -> dict[str, float | None]:
    """precision -> FLOPs of one range (None where the range records none of its counters)."""
    out: dict[str, float | None] = {}
    for precision, p in PRECISIONS.items():
        names = [_METRIC.format(p=p, op=op) for op in ("add", "mul", "fma")]
        if not any(n in counters for n in names):
            out[precision] = None
            continue
        add, mul, fma = (float(counters.get(n, 0)) for n in names)
        out[precision] = add + mul + 2 * fma
    return out


def counter_rows(ranges: list[CounterRange], items: list[Attributed], top: int | None = None) -> list[CounterRow]:
    """The ranges grouped by kernel name, most measured FLOPs first, with the counted FLOPs of the
    trace's kernels of the same name beside them."""
    measured: dict[str, dict[str, float | None]] = {}
    count: dict[str, int] = defaultdict(int)
    for r in ranges:
        flops = range_flops(r.counters)
        sums = measured.setdefault(r.name, dict.fromkeys(PRECISIONS))
        for precision, v in flops.items():
            if v is not None:
                sums[precision] = (sums[precision] or 0.0) + v
        count[r.name] += 1
    counted: dict[str, float] = defaultdict(float)
    for i in items:
        if i.launched.event.name in measured and i.status == "counted":
            counted[i.launched.event.name] += i.flops
    rows = [CounterRow(name, count[name], *(m[p] for p in PRECISIONS), counted.get(name) if items else None)
            for name, m in measured.items()]
    rows.sort(key=lambda r: -(r.measured or 0.0))
    return rows[:top] if top is not None else rows
