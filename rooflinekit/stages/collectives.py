"""Collectives: ring byte counts, time bounds, and the c10d ops a captured forward runs.

Byte conventions (those of nccl-tests' "bus bandwidth"): a collective on a group of N GPUs with a
message of M bytes makes each GPU send, and at the same time receive, `wire_bytes`:

    all_reduce       2(N-1)/N * M   ring: a reduce-scatter then an all-gather; M = the buffer
    all_gather        (N-1)/N * M   M = the gathered output (N pieces)
    reduce_scatter    (N-1)/N * M   M = the input before scattering
    all_to_all        (N-1)/N * M   M = this GPU's send buffer, split evenly (its own piece stays)
    broadcast, reduce, send, recv   M

The time bound of a collective is wire_bytes / link bandwidth per direction, where the link
bandwidth per direction is half the hardware entry's `interconnect_bandwidth` (the database quotes
the vendor's per-GPU figure with both directions summed: H800 400 GB/s -> 200 GB/s each way, H100
900 GB/s -> 450 GB/s). Latency (per-message start-up, ~us) is not counted: it is a lower bound.

Collective records carry no FLOPs and no HBM bytes: their traffic is on the links, reported in the
report's `comm` section and in `totals.time_comm_s`, never mixed into `flops`/`bytes`.

This module imports only torch: capture.py asks it about every dispatched op.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _resolve_process_group

#: Ring factors: wire bytes per GPU = factor(N) * message bytes.
RING_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0 if n > 1 else 0.0,
    "reduce": lambda n: 1.0 if n > 1 else 0.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}

ASSUMPTION = (
    "collectives: ring algorithms; bytes each GPU sends (and receives at the same time) per call: "
    "all-reduce 2(N-1)/N x message, all-gather/reduce-scatter/all-to-all (N-1)/N x message (even "
    "splits); time bound = those bytes / (interconnect_bandwidth / 2), the hardware entry quoting "
    "both directions summed; start-up latency not counted"
)

#: c10d ops (op name -> (collective, argument holding the message tensors, how M is measured)).
#: "out": M is the output (all-gather); "in": M is the input.
_OPS = {
    "c10d.allreduce_": ("all_reduce", "tensors"),
    "c10d.allreduce_coalesced_": ("all_reduce", "tensors"),
    "c10d.allgather_": ("all_gather", "output_tensors"),
    "c10d._allgather_base_": ("all_gather", "output_tensor"),
    "c10d.allgather_coalesced_": ("all_gather", "output_lists"),
    "c10d.allgather_into_tensor_coalesced_": ("all_gather", "outputs"),
    "c10d.reduce_scatter_": ("reduce_scatter", "input_tensors"),
    "c10d._reduce_scatter_base_": ("reduce_scatter", "input_tensor"),
    "c10d.reduce_scatter_tensor_coalesced_": ("reduce_scatter", "inputs"),
    "c10d.alltoall_": ("all_to_all", "input_tensors"),
    "c10d.alltoall_base_": ("all_to_all", "input"),
    "c10d.broadcast_": ("broadcast", "tensors"),
    "c10d.reduce_": ("reduce", "tensors"),
    "c10d.send": ("send", "tensors"),
    "c10d.recv_": ("recv", "tensors"),
    "_c10d_functional.all_reduce": ("all_reduce", "input"),
    "_c10d_functional.all_reduce_": ("all_reduce", "input"),
    "_c10d_functional.all_reduce_coalesced": ("all_reduce", "inputs"),
    "_c10d_functional.all_reduce_coalesced_": ("all_reduce", "inputs"),
    "_c10d_functional.all_gather_into_tensor": ("all_gather", "input*group_size"),
    "_c10d_functional.all_gather_into_tensor_out": ("all_gather", "out"),
    "_c10d_functional.all_gather_into_tensor_coalesced": ("all_gather", "inputs*group_size"),
    "_c10d_functional.reduce_scatter_tensor": ("reduce_scatter", "input"),
    "_c10d_functional.reduce_scatter_tensor_coalesced": ("reduce_scatter", "inputs"),
    "_c10d_functional.all_to_all_single": ("all_to_all", "input"),
    "_c10d_functional.broadcast": ("broadcast", "input"),
    "_c10d_functional.broadcast_": ("broadcast", "input"),
}
#: Namespaces whose ops are communication (or its bookkeeping: waits, autograd wrappers).
NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd", "c10d_functional")

_KINDS: dict[object, tuple[str, str] | None | bool] = {}


def wire_bytes(collective: str, message_bytes: float, group_size: int) -> float:
    """Bytes each GPU sends for one call (ring algorithms; see the module docstring)."""
    if group_size <= 1:
        return 0.0
    factor = RING_FACTORS.get(collective)
    return float(message_bytes) * (factor(group_size) if factor else 1.0)


def link_bandwidth(interconnect_bandwidth: float | None) -> float | None:
    """Per-direction link bandwidth from the database's both-directions figure."""
    return interconnect_bandwidth / 2.0 if interconnect_bandwidth else None


def comm_time(wire: float, interconnect_bandwidth: float | None) -> float:
    """Time bound of `wire` bytes on the links; 0 when the entry has no interconnect figure."""
    bw = link_bandwidth(interconnect_bandwidth)
    return wire / bw if bw else 0.0


def attrs(collective: str, group_size: int, message_bytes: float, source: str, **extra) -> dict:
    """The attrs of a collective OpRecord."""
    return {
        "collective": collective,
        "group_size": int(group_size),
        "message_bytes": float(message_bytes),
        "wire_bytes": wire_bytes(collective, message_bytes, group_size),
        "algorithm": "ring",
        "source": source,
        **extra,
    }


def classify(func) -> tuple[str, str] | None | bool:
    """(collective, message argument) for a communication op; True for its bookkeeping ops (waits,
    wrappers: not recorded); None for every other op. Cached per op."""
    try:
        return _KINDS[func]
    except KeyError:
        pass
    result: tuple[str, str] | None | bool = None
    name = getattr(func, "name", None)
    full = name() if callable(name) else str(func)
    namespace, _, rest = full.partition("::")
    if namespace in NAMESPACES:
        key = f"{namespace}.{rest.split('.')[0]}"
        result = _OPS.get(key, True)
    _KINDS[func] = result
    return result


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _group_size(bound: dict) -> int:
    size = bound.get("group_size")
    if isinstance(size, int) and size > 0:
        return size
    for value in bound.values():
        if isinstance(value, torch.ScriptObject):
            try:

                return int(dist.ProcessGroup.unbox(value).size())
            except Exception:
                continue
    name = bound.get("group_name", bound.get("group"))
    if isinstance(name, str):
        try:

            return int(_resolve_process_group(name).size())
        except Exception:
            pass
    try:

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:
        pass
    return 1


def describe(func, args, kwargs, kind: tuple[str, str]) -> dict:
    """Collective, group size, message bytes and dtype of one c10d op call."""
    collective, where = kind
    bound = dict(kwargs)
    for arg, value in zip(func._schema.arguments, args, strict=False):
        bound[arg.name] = value
    group = _group_size(bound)
    arg, _, times = where.partition("*")
    tensors = list(_tensors(bound.get(arg)))
    message = float(sum(t.numel() * t.element_size() for t in tensors))
    if times:
        message *= group
    dtype = next((t.dtype for t in tensors), torch.float32)
    shapes = ",".join("x".join(str(s) for s in t.shape) or "scalar" for t in tensors[:3])
    return {"collective": collective, "group_size": group, "message_bytes": message, "dtype": dtype,
            "shapes": shapes}


def defer_to_subclass(types) -> bool:
    """A DTensor argument: let DTensor run its local ops (and collectives), which are recorded."""
    return any(t.__name__ == "DTensor" for t in types)


def faking() -> bool:
    """True inside a FakeTensorMode (DTensor's sharding propagation runs ops on fake tensors)."""
    getter = getattr(torch._C, "_get_dispatch_mode", None)
    key = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "FAKE", None)
    if getter is None or key is None:
        return False
    return getter(key) is not None


def summary(ops, interconnect_bandwidth: float | None) -> dict:
    """The report's `comm` section: per collective type calls, bytes and time bound."""
    rows: dict[tuple[str, int], dict] = {}
    for op in ops:
        a = op.attrs if hasattr(op, "attrs") else {}
        if not a.get("collective"):
            continue
        key = (a["collective"], a["group_size"])
        r = rows.setdefault(key, {"collective": a["collective"], "group_size": a["group_size"], "calls": 0,
                                  "message_bytes": 0.0, "wire_bytes": 0.0, "time_bound_s": 0.0})
        r["calls"] += 1
        r["message_bytes"] += a["message_bytes"]
        r["wire_bytes"] += a["wire_bytes"]
        r["time_bound_s"] += comm_time(a["wire_bytes"], interconnect_bandwidth)
    table = sorted(rows.values(), key=lambda r: -r["wire_bytes"])
    return {
        "collectives": table,
        "calls": sum(r["calls"] for r in table),
        "message_bytes": sum(r["message_bytes"] for r in table),
        "wire_bytes": sum(r["wire_bytes"] for r in table),
        "time_s": sum(r["time_bound_s"] for r in table),
        "interconnect_bandwidth": interconnect_bandwidth,
        "link_bandwidth_per_direction": link_bandwidth(interconnect_bandwidth),
        "assumption": ASSUMPTION,
        "note": None if interconnect_bandwidth or not table else
        "the hardware entry has no interconnect_bandwidth: communication time not bounded (0)",
    }


def binding(time_compute: float, time_memory: float, time_comm: float) -> str:
    """Which of the three per-GPU time bounds is largest ("none" when all are 0)."""
    times = {"compute": time_compute, "memory": time_memory, "communication": time_comm}
    best = max(times, key=times.get)
    return best if times[best] > 0 and not math.isnan(times[best]) else "none"
