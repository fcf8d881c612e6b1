"""Collectives in a trace: each communication kernel with its message size (from the
record_param_comms op or the nccl:* annotation around its launch) and its achieved bus bandwidth
by nccl-tests' conventions."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rooflinekit.trace.attribution import Attributed
from rooflinekit.trace.events import CpuOp

#: Bytes per element of the dtypes traces name (record_param_comms' "dtype", "Input type").
ELEMENT_BYTES = {"float": 4, "float32": 4, "half": 2, "c10::half": 2, "float16": 2, "bfloat16": 2,
                 "c10::bfloat16": 2, "double": 8, "float64": 8, "long": 8, "int64": 8, "int": 4, "int32": 4,
                 "short": 2, "byte": 1, "char": 1, "bool": 1, "uint8": 1, "int8": 1}


def bus_factor(collective: str, group: int) -> float:
    """nccl-tests' busbw / algbw for a collective over `group` ranks (its PERFORMANCE.md)."""
    if group <= 1:
        return 0.0 if "reduce" in collective or "gather" in collective or "all_to_all" in collective else 1.0
    n = group
    if "all_reduce" in collective or collective == "allreduce":
        return 2 * (n - 1) / n
    if any(k in collective for k in ("all_gather", "allgather", "reduce_scatter", "all_to_all", "alltoall")):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Collective:
    """One communication kernel: which collective, its bytes, group and achieved bandwidths."""

    collective: str
    kernel: str
    dur_us: float
    bytes: float | None
    group: int | None
    source: str

    @property
    def algbw(self) -> float | None:
        """Bytes per second of the message (bytes / kernel time)."""
        return self.bytes / (self.dur_us * 1e-6) if self.bytes and self.dur_us > 0 else None

    @property
    def busbw(self) -> float | None:
        """The bandwidth each link carried (nccl-tests' bus bandwidth)."""
        if self.algbw is None or self.group is None:
            return None
        return self.algbw * bus_factor(self.collective, self.group)


def _param_comms(op: CpuOp) -> tuple[str, float, int | None] | None:
    """(collective, bytes, group) from a record_param_comms op that records message sizes."""
    args = op.event.get("args") or {}
    n, dtype = args.get("In msg nelems"), str(args.get("dtype", "")).lower()
    if op.name != "record_param_comms" or not isinstance(n, (int, float)) or dtype not in ELEMENT_BYTES:
        return None
    out = args.get("Out msg nelems")
    elements = max(n, out) if isinstance(out, (int, float)) else n
    group = args.get("Group size")
    return str(args.get("Collective name", "")), elements * ELEMENT_BYTES[dtype], \
        group if isinstance(group, int) else None


def _annotation(op: CpuOp) -> tuple[str, float] | None:
    """(collective, bytes) from an nccl:NAME annotation's recorded input dims and types."""
    if not op.name.startswith("nccl:"):
        return None
    args = op.event.get("args") or {}
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    total = 0.0
    for shape, kind in zip(dims, types, strict=False):
        size = ELEMENT_BYTES.get(str(kind).lower())
        if size and isinstance(shape, list) and all(isinstance(d, int) for d in shape):
            count = 1
            for d in shape:
                count *= d
            total += count * size
    return op.name[len("nccl:"):], total


def _name(kernel: str) -> str:
    """A collective's name from an NCCL kernel name (ncclKernel_AllReduce_RING_LL... -> all_reduce)."""
    match = re.search(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", kernel)
    word = match.group(1) if match else kernel
    return re.sub(r"(?<!^)([A-Z])", r"_\1", word).lower()


def collective_of(item: Attributed, world: int | None) -> Collective:
    """The collective a communication kernel ran, with what its launch's ops record of it."""
    name, size, group, source = _name(item.launched.event.name), None, None, ""
    for op in item.launched.ops:
        found = _param_comms(op)
        if found:
            name, size, group, source = found[0] or name, found[1], found[2], "record_param_comms"
            break
        note = _annotation(op)
        if note and note[1] > 0:
            name, size, source = note[0], note[1], "nccl annotation"
            break
    return Collective(name, item.launched.event.name, item.dur, size, group or world, source)


def collectives(items: list[Attributed], world: int | None) -> list[Collective]:
    """Every communication kernel of `items`, as a Collective."""
    return [collective_of(i, world) for i in items if i.klass == "communication"]
