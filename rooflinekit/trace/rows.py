"""Table rows of the trace report: kernels and ops grouped by name, their counted work over their
measured time placed on the roofline, and collectives grouped by name and group."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable

from rooflinekit.stages.hardware import DTYPE_KEYS, HardwareSpec, dtype_key
from rooflinekit.stages.roofline import place
from rooflinekit.trace.attribution import Attributed
from rooflinekit.trace.comms import Collective
from rooflinekit.trace.report import CollectiveRow, Rates, Row

US = 1e-6
#: Statuses whose events carry work: counted from the launching op's shapes, or a profile's
#: predicted kernel (trace --profile).
WORKED = frozenset({"counted", "predicted"})
#: Kernels that run fp32 matmuls on TF32 tensor cores (cuBLAS/CUTLASS sm80+ names).
TF32_KERNEL = re.compile(r"s1688|s16816|tf32|xf32", re.IGNORECASE)


def ran_as(item: Attributed, hw: HardwareSpec) -> str:
    """The peak-table key an event's counted work ran at: its dtype's key, and tf32 for an fp32
    matmul whose kernel is a TF32 tensor-core kernel on hardware that has them."""
    key = item.dtype if item.dtype in DTYPE_KEYS else dtype_key(item.dtype or "float32")
    if key == "fp32" and "tf32" in hw.peak_flops and TF32_KERNEL.search(item.launched.event.name):
        return "tf32"
    return key


def peak_time(items: list[Attributed], hw: HardwareSpec) -> float:
    """Seconds the items' counted FLOPs take at their dtypes' peaks (the numerator of HFU)."""
    return sum(i.flops / hw.peak(ran_as(i, hw)) for i in items if i.flops > 0)


def rates_of(items: list[Attributed], hw: HardwareSpec) -> Rates:
    """The items' counted work over their summed GPU time, placed at their main dtype's roofline."""
    whole = sum(i.dur for i in items) * US
    time = sum(i.dur for i in items if i.status in WORKED) * US
    flops, nbytes = sum(i.flops for i in items), sum(i.bytes for i in items)
    if time <= 0 or (flops <= 0 and nbytes <= 0):
        return Rates(whole)
    by_dtype: dict[str, float] = defaultdict(float)
    for i in items:
        by_dtype[ran_as(i, hw)] += i.flops
    key = max(by_dtype, key=by_dtype.get)
    placed = place(flops, nbytes, hw.peak(key), hw.memory_bandwidth, key)
    return Rates(whole, time, flops, nbytes, key, flops / time, nbytes / time,
                 peak_time(items, hw) / time if flops > 0 else None,
                 nbytes / time / hw.memory_bandwidth, placed.intensity, placed.bound)


def _row(name: str, items: list[Attributed], hw: HardwareSpec) -> Row:
    first = items[0]
    ops = {i.op.name for i in items if i.op is not None}
    by_class: dict[str, float] = defaultdict(float)
    for i in items:
        by_class[i.klass] += i.dur
    return Row(name, max(by_class, key=by_class.get), len(items), rates_of(items, hw),
               op=", ".join(sorted(ops))[:200], status=first.status, reason=first.reason)


def grouped(items: list[Attributed], hw: HardwareSpec, key: Callable[[Attributed], str],
            top: int | None = None) -> list[Row]:
    """Rows of the items grouped by `key`, most GPU time first (the first `top`)."""
    groups: dict[str, list[Attributed]] = defaultdict(list)
    for i in items:
        groups[key(i)].append(i)
    order = sorted(groups, key=lambda k: -sum(i.dur for i in groups[k]))
    return [_row(k, groups[k], hw) for k in order[:top]]


def collective_rows(found: list[Collective]) -> list[CollectiveRow]:
    """Collectives grouped by name and group: calls, time, bytes, and bandwidths over the total."""
    groups: dict[tuple, list[Collective]] = defaultdict(list)
    for c in found:
        groups[(c.collective, c.group)].append(c)
    rows = []
    for (name, group), calls in sorted(groups.items(), key=lambda kv: -sum(c.dur_us for c in kv[1])):
        time = sum(c.dur_us for c in calls) * US
        sized = [c for c in calls if c.bytes]
        nbytes = sum(c.bytes for c in sized) if sized else None
        sized_time = sum(c.dur_us for c in sized) * US
        algbw = nbytes / sized_time if nbytes and sized_time > 0 else None
        factor = sized[0].busbw / sized[0].algbw if sized and sized[0].busbw is not None else None
        rows.append(CollectiveRow(name, len(calls), time, nbytes, group, algbw,
                                  algbw * factor if algbw is not None and factor is not None else None,
                                  ", ".join(sorted({c.source for c in calls if c.source})) or "no sizes recorded"))
    return rows
