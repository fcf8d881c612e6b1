"""Collectives: ring byte counts, time bounds, and the c10d ops a captured forward runs.

Byte conventions (those of nccl-tests' "bus bandwidth"): a collective on a group of N GPUs with a
message of M bytes makes each GPU send, and at the same time receive, `wire_bytes`:

    all_reduce       2(N-1)/N * M   ring: a reduce-scatter then an all-gather; M = the buffer
    all_gather        (N-1)/N * M   M = the gathered output (N pieces)
    reduce_scatter    (N-1)/N * M   M = the input before scattering
    all_to_all        (N-1)/N * M   M = this GPU's send buffer, split evenly (its own piece stays)
    broadcast, reduce, send, recv   M

Each call costs alpha + bytes / beta, beta the link bandwidth per direction: half the hardware
entry's `interconnect_bandwidth` (the database quotes the vendor's per-GPU figure with both
directions summed: H800 400 GB/s -> 200 GB/s each way, H100 900 GB/s -> 450 GB/s). Two figures:

- the time bound: the lowest latency any algorithm has (one step at the link's hardware latency,
  the entry's `interconnect_latency`: a one-shot's) plus the fewest bytes any algorithm moves (the
  ring's `wire_bytes` above). No algorithm is faster on both counts, so it stays a bound.
- the expected time: the algorithm a library picks, the cheapest of those it has for the collective
  (ring; tree; one-shot for small all-reduces, as NCCL's LL protocol and the engines' custom
  all-reduce do; direct for all-to-all and point to point), each priced at the latency a library
  measures per call at small messages (`collective_latency`), plus the link latency of each step
  after the first, plus its own bytes (`ALGORITHMS`).

A group of at most the entry's `node_gpus` is on its scale-up links (one NVLink, Infinity Fabric or
PCIe domain). A larger group crosses the scale-out network (InfiniBand, RoCE: each GPU's NIC,
`scale_out_bandwidth` per direction, `scale_out_latency` per message): an all-to-all sends the
share of its message bound for other nodes, (N - node)/N x M, through the NIC while the rest goes
on the scale-up links, the slower of the two setting the time; a ring collective's steps cross
the NIC, so its bytes go at the NIC's rate; every call pays the larger of the two latencies. An
entry without those fields prices every group as one node's (a note says so). An expert-parallel
all-to-all that gives its routing (copies over expert slots) is bounded sending each token once per
destination node (`per_node_factor`); its expected time sends every copy.

Collective records carry no FLOPs and no HBM bytes: their traffic is on the links, reported in the
report's `comm` section and in `totals.time_comm_s`, never mixed into `flops`/`bytes`.

This module imports only torch: capture.py asks it about every dispatched op.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from rooflinekit.core.compat import fake_mode_active, resolve_process_group
from rooflinekit.stages.efficiency_table import table_for
from rooflinekit.stages.kernel_times import query, query_of

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

#: Algorithms per collective: (name, steps(N), bytes each GPU sends per message byte(N)).
#: ring all-reduce: a reduce-scatter then an all-gather, 2(N-1) steps; tree: NCCL's double binary
#: tree, up then down (2 ceil(log2 N) steps, about the whole message each way); one-shot: every GPU
#: reads every peer's buffer at once and reduces locally (1 step, (N-1) x message).
ALGORITHMS = {
    "all_reduce": (("ring", lambda n: 2 * (n - 1), RING_FACTORS["all_reduce"]),
                   ("tree", lambda n: 2 * math.ceil(math.log2(n)), lambda n: 2.0),
                   ("one-shot", lambda n: 1, lambda n: float(n - 1))),
    "all_gather": (("ring", lambda n: n - 1, RING_FACTORS["all_gather"]),),
    "reduce_scatter": (("ring", lambda n: n - 1, RING_FACTORS["reduce_scatter"]),),
    "all_to_all": (("direct", lambda n: 1, RING_FACTORS["all_to_all"]),),
    "broadcast": (("ring", lambda n: n - 1, RING_FACTORS["broadcast"]),
                  ("tree", lambda n: math.ceil(math.log2(n)), RING_FACTORS["broadcast"])),
    "reduce": (("ring", lambda n: n - 1, RING_FACTORS["reduce"]),
               ("tree", lambda n: math.ceil(math.log2(n)), RING_FACTORS["reduce"])),
    "send": (("direct", lambda n: 1, RING_FACTORS["send"]),),
    "recv": (("direct", lambda n: 1, RING_FACTORS["recv"]),),
}

ASSUMPTION = (
    "collectives: per call alpha + bytes / beta, beta = interconnect_bandwidth / 2 (the entry quotes "
    "both directions summed); bytes each GPU sends per call (ring, the fewest): all-reduce 2(N-1)/N x "
    "message, all-gather/reduce-scatter/all-to-all (N-1)/N x message (even splits). Time bound: alpha = "
    "the link's hardware latency (one step, the lowest any algorithm has) with the ring's bytes. "
    "Expected: the cheapest of ring, tree and one-shot (all-reduce), direct (all-to-all), alpha = the "
    "per-call latency NCCL/RCCL measure at small messages plus the link latency of each further step, "
    "no overlap with compute. Groups are priced on the entry's links as one node (inter-node "
    "InfiniBand/RoCE not modelled)"
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


def spans_nodes(group_size: int, hw) -> bool:
    """Whether a group of `group_size` GPUs crosses `hw`'s scale-out network."""
    node = getattr(hw, "node_gpus", None)
    return bool(node and group_size > node and getattr(hw, "scale_out_bandwidth", None))


def bytes_time(collective: str, message: float, group_size: int, wire: float, hw, off_node_factor: float = 1.0) -> float:
    """Seconds the bytes of one call take on `hw`'s links: `wire` bytes at the scale-up rate, or,
    for a group spanning nodes, the scale-out share at the NIC's rate (module docstring); an
    all-to-all's scale-out bytes scaled by `off_node_factor` (per_node_factor)."""
    bw = link_bandwidth(hw.interconnect_bandwidth)
    if not spans_nodes(group_size, hw):
        return wire / bw if bw else 0.0
    nic = hw.scale_out_bandwidth
    if collective == "all_to_all":
        off_node = message * (group_size - hw.node_gpus) / group_size
        on_node = max(wire - off_node, 0.0)
        return max(off_node * off_node_factor / nic, on_node / bw if bw else 0.0)
    return wire / min(nic, bw) if bw else wire / nic


def remote_nodes_hit(copies: int, experts: int, nodes: int) -> float:
    """The expected number of other nodes one token's `copies` picks (distinct, uniform over
    `experts` slots spread evenly over `nodes` nodes) land on: each other node holds experts/nodes
    slots and is missed with probability C(experts - experts/nodes, copies) / C(experts, copies)."""
    if nodes <= 1 or copies <= 0:
        return 0.0
    per = experts / nodes
    miss = 1.0
    for i in range(min(copies, experts)):
        miss *= max(experts - per - i, 0.0) / (experts - i)
    return (nodes - 1) * (1.0 - miss)


def per_node_factor(attrs: dict, hw) -> float:
    """The share of an expert-parallel all-to-all's scale-out bytes left when each token crosses
    the network once per destination node and is forwarded to its experts over the scale-up links
    there (DeepEP's normal kernels): the remote nodes a token hits over the copies the even split
    sends off node, k x (G - 1) / G. 1 where the call gives no routing (copies, experts) or stays
    within a node. The time bound takes it (no engine moves less); the expected time sends every
    copy, as the low-latency kernels of decode do."""
    n, node = int(attrs.get("group_size", 1)), getattr(hw, "node_gpus", None)
    copies, experts = int(attrs.get("copies", 0) or 0), int(attrs.get("experts", 0) or 0)
    if attrs.get("collective") != "all_to_all" or not copies or not experts or not spans_nodes(n, hw):
        return 1.0
    nodes = n / node
    sent = copies * (nodes - 1) / nodes
    return min(1.0, remote_nodes_hit(copies, experts, max(1, round(nodes))) / sent) if sent else 1.0


def hop_latency(group_size: int, hw) -> float:
    """The lowest per-step latency of a call over `group_size` GPUs: the scale-up link's, or the
    larger of it and the scale-out network's when the group spans nodes."""
    hop = hw.interconnect_latency or 0.0
    if spans_nodes(group_size, hw):
        hop = max(hop, getattr(hw, "scale_out_latency", None) or 0.0)
    return hop


def comm_time(wire: float, interconnect_bandwidth: float | None, latency: float | None = None) -> float:
    """Time bound of one call moving `wire` bytes: the latency floor given (0 when None) plus the
    bytes on the links (not timed when the entry has no interconnect_bandwidth)."""
    bw = link_bandwidth(interconnect_bandwidth)
    return (latency or 0.0) + (wire / bw if bw else 0.0)


def call_bound(attrs: dict, hw) -> float:
    """Time bound of one collective call (its OpRecord attrs) on hardware entry `hw`."""
    n = int(attrs.get("group_size", 1))
    if n <= 1:
        return 0.0
    wire = attrs.get("wire_bytes", 0.0)
    return hop_latency(n, hw) + bytes_time(attrs.get("collective", ""), float(attrs.get("message_bytes", 0.0)), n,
                                           wire, hw, per_node_factor(attrs, hw))


def call_expected(attrs: dict, hw) -> tuple[float, str]:
    """(expected time, algorithm) of one collective call on `hw`: the cheapest algorithm the
    collective has, each at the library's measured per-call latency (the entry's
    collective_latency, else its interconnect_latency) plus the link latency of each further step."""
    n = int(attrs.get("group_size", 1))
    if n <= 1:
        return 0.0, "none"
    measured = measured_call(attrs, hw)
    if measured is not None:
        return measured, "measured"
    hop = hop_latency(n, hw)
    base = hw.collective_latency if hw.collective_latency is not None else (hw.interconnect_latency or 0.0)
    if spans_nodes(n, hw):
        base += hop  # a message that leaves the node pays the network's latency too
    collective = attrs.get("collective", "")
    message = float(attrs.get("message_bytes", 0.0))
    choices = ALGORITHMS.get(collective, (("ring", lambda k: 1, lambda k: 1.0),))
    best = min(((base + (steps(n) - 1) * hop + bytes_time(collective, message, n, factor(n) * message, hw), name)
                for name, steps, factor in choices), key=lambda c: c[0])
    return best


def measured_call(attrs: dict, hw) -> float | None:
    """One call's measured time where `hw`'s efficiency source names a database of measured kernels
    that answers it (rooflinekit.stages.kernel_times: the collective by message size and group), held
    at the call's bound; None otherwise."""
    if not hasattr(hw, "efficiency"):
        return None
    times = table_for(hw).times()
    if times is None:
        return None
    declared = query_of("", "collective", "", "", attrs, False)  # a call that declares its shape
    t = times.seconds(declared or query(attrs.get("collective", ""), "", group_size=int(attrs.get("group_size", 1)),
                                        message_bytes=float(attrs.get("message_bytes", 0.0))))
    if t is None or not t > 0 or not math.isfinite(t):
        return None
    return max(t, call_bound(attrs, hw))


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

            return int(resolve_process_group(name).size())
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
    return fake_mode_active()


def _row(a: dict, hw) -> dict:
    n = int(a["group_size"])
    return {"collective": a["collective"], "group_size": a["group_size"], "calls": 0, "message_bytes": 0.0,
            "wire_bytes": 0.0, "time_bound_s": 0.0, "expected_time_s": 0.0,
            "latency_s": hop_latency(n, hw) if n > 1 else 0.0,
            "expected_latency_s": call_expected({"group_size": n, "collective": a["collective"]}, hw)[0],
            "algorithms": {}}


def _notes(hw, any_calls: bool) -> str | None:
    missing = [f for f in ("interconnect_bandwidth", "interconnect_latency", "collective_latency")
               if getattr(hw, f) is None]
    if not any_calls or not missing:
        return None
    return (f"the hardware entry gives no {', '.join(missing)}: " + "; ".join(
        {"interconnect_bandwidth": "bytes on the links not timed",
         "interconnect_latency": "no latency floor in the bound",
         "collective_latency": "the expected time uses the latency floor per call"}[f] for f in missing))


def summary(ops, hw) -> dict:
    """The report's `comm` section: per collective type calls, bytes, time bound and expected time
    (`latency_s`: the bound's per-call latency; `expected_latency_s`: the expected one)."""
    rows: dict[tuple[str, int], dict] = {}
    for op in ops:
        a = op.attrs if hasattr(op, "attrs") else {}
        if not a.get("collective"):
            continue
        r = rows.get((a["collective"], a["group_size"]))
        if r is None:
            r = rows[(a["collective"], a["group_size"])] = _row(a, hw)
        expected, algorithm = call_expected(a, hw)
        r["calls"] += 1
        r["message_bytes"] += a["message_bytes"]
        r["wire_bytes"] += a["wire_bytes"]
        r["time_bound_s"] += call_bound(a, hw)
        r["expected_time_s"] += expected
        r["algorithms"][algorithm] = r["algorithms"].get(algorithm, 0) + 1
    table = sorted(rows.values(), key=lambda r: -r["wire_bytes"])
    for r in table:
        used = sorted(r.pop("algorithms").items(), key=lambda kv: -kv[1])
        r["algorithm"] = ", ".join(f"{k} x {v}" if len(used) > 1 else k for k, v in used)
    return {
        "collectives": table,
        "calls": sum(r["calls"] for r in table),
        "message_bytes": sum(r["message_bytes"] for r in table),
        "wire_bytes": sum(r["wire_bytes"] for r in table),
        "time_s": sum(r["time_bound_s"] for r in table),
        "expected_time_s": sum(r["expected_time_s"] for r in table),
        "interconnect_bandwidth": hw.interconnect_bandwidth,
        "link_bandwidth_per_direction": link_bandwidth(hw.interconnect_bandwidth),
        "latency_s": hw.interconnect_latency,
        "expected_latency_s": hw.collective_latency,
        "assumption": ASSUMPTION,
        "note": "; ".join(n for n in (_notes(hw, bool(table)), _scale_out_note(table, hw)) if n) or None,
    }


def _scale_out_note(table: list[dict], hw) -> str | None:
    """What the report says of groups that span nodes: on the scale-out network, or priced as one node."""
    wide = sorted({r["group_size"] for r in table if r["group_size"] > (getattr(hw, "node_gpus", None) or 1 << 30)})
    node = getattr(hw, "node_gpus", None)
    if wide and spans_nodes(wide[0], hw):
        return (f"groups of {', '.join(map(str, wide))} GPUs span nodes of {node}: the bytes that leave a node "
                f"go through each GPU's NIC at {hw.scale_out_bandwidth / 1e9:g} GB/s per direction, "
                f"{hw.scale_out_latency * 1e6 if hw.scale_out_latency else 0:g} us per message")
    if not node and any(r["group_size"] > 8 for r in table):
        return "the entry gives no node size: groups of more than 8 GPUs are priced as one node's links"
    return None


def binding(time_compute: float, time_memory: float, time_comm: float) -> str:
    """Which of the three per-GPU time bounds is largest ("none" when all are 0)."""
    times = {"compute": time_compute, "memory": time_memory, "communication": time_comm}
    best = max(times, key=times.get)
    return best if times[best] > 0 and not math.isnan(times[best]) else "none"
