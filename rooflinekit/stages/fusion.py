"""Fusion: the step's bytes with elementwise chains fused between matmul/attention anchors.

The eager view counts every op reading its inputs from HBM and writing its outputs back. Compiled
deployments (torch.compile's code generation, hand-fused norms and activations) run chains of
elementwise, normalisation, rope, activation and softmax ops as one kernel. This stage groups a
capture's ops into such kernels and counts each kernel's HBM traffic once:

- **Fusible** ops are the ops torch tags `pointwise` or `reduction` (add, mul, silu, rsqrt, pow,
  mean, sum, amax, ...), softmax and the normalisations, casts and copies, `cat`/`stack`/padding,
  masks and factories (`arange`, `full`, ...), and writes into a cache (`index_copy_`,
  `index_put_`). Every other record is an **anchor** and keeps its eager figures: matrix products,
  attention calls, gathers (`embedding`, `index`, `index_select`, `gather`), sorts and top-k,
  modelled blocks, collectives, and any op not listed.
- **Kernels**: two fusible ops join when one reads what the other wrote and no anchor lies on any
  dependency path between them. Each op gets a level, the most anchors on a dependency path that
  reaches it; an op joins the producers of its inputs that are at its own level. So a chain that
  ends in a matmul's input and one that starts from its output stay two kernels, and pointwise ops
  consuming a matmul's output fuse into the chain after it (the matmul writes its output once, the
  chain reads it once: no epilogue is folded into an anchor).
- **Bytes of a kernel**: it reads from HBM each storage it did not produce itself, once (the reads
  of one storage add up to at most its size, the largest access the capture saw), parameters
  included; a value produced and read only inside the kernel costs nothing; a value it produces is
  written once (again at most its size) when something outside the kernel reads it later or
  nothing reads it again (a model output, a cache write, the last state of a buffer).

Each byte is charged to the op that moves it (a read to the kernel's first op reading that storage,
a write to the op writing it), so modules keep their own fused bytes. An op whose per-storage
traffic does not add up to its totals (counts changed by a transform without their storages) is an
anchor too, and is counted in `Fusion.unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rooflinekit.core.report import FusedTotals
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.roofline import op_figures, place_on

#: Fusible beyond torch's pointwise and reduction tags: softmax and normalisations, casts and
#: copies, concatenation and padding, masks, factories, and cache writes.
FUSIBLE_OPS = frozenset({
    "aten._softmax", "aten.softmax", "aten._log_softmax", "aten.log_softmax", "aten._safe_softmax",
    "aten.native_layer_norm", "aten.layer_norm", "aten.native_group_norm", "aten.group_norm",
    "aten.rms_norm", "aten._fused_rms_norm", "aten._native_batch_norm_legit_no_training",
    "aten._to_copy", "aten.copy_", "aten.copy", "aten.clone", "aten.contiguous", "aten.lift_fresh_copy",
    "aten.cat", "aten.stack", "aten.constant_pad_nd", "aten.roll", "aten.flip", "aten.repeat",
    "aten.triu", "aten.triu_", "aten.tril", "aten.tril_", "aten.masked_fill_", "aten.polar",
    "aten.slice_scatter", "aten.select_scatter", "aten.index_copy", "aten.index_copy_",
    "aten.index_put", "aten.index_put_",
    "aten.arange", "aten.full", "aten.full_like", "aten.zeros", "aten.zeros_like", "aten.ones",
    "aten.ones_like", "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.scalar_tensor",
    "aten.fill", "aten.fill_", "aten.zero_", "aten.linspace",
})
#: Tagged pointwise or reduction, but run by a kernel of their own (selection, not streaming).
UNFUSIBLE_OPS = frozenset({"aten.median", "aten.nanmedian", "aten.mode", "aten.kthvalue"})

#: The ops torch tags `reduction` (torch 2.13); torch releases before the tag (2.5) are given the
#: same set by name, so the fused view does not depend on the torch release.
REDUCTION_OPS = frozenset({
    "aten.all", "aten.amax", "aten.amin", "aten.aminmax", "aten.any", "aten.argmax", "aten.argmin",
    "aten.count_nonzero", "aten.linalg__powsum", "aten.linalg_vector_norm", "aten.logsumexp", "aten.max", "aten.mean", "aten.min",
    "aten.nansum", "aten.norm", "aten.prod", "aten.std", "aten.std_mean", "aten.sum", "aten.var", "aten.var_mean",
})
_TAGS = tuple(getattr(torch.Tag, tag) for tag in ("pointwise", "reduction") if hasattr(torch.Tag, tag))
_FUSIBLE: dict[str, bool] = {}


def fusible(name: str) -> bool:
    """Whether an op (by its 'ns.name' key) runs inside a fused kernel under the fusion rule."""
    known = _FUSIBLE.get(name)
    if known is None:
        known = _FUSIBLE[name] = name not in UNFUSIBLE_OPS and (
            name in FUSIBLE_OPS or name in REDUCTION_OPS or _tagged(name))
    return known


def _tagged(name: str) -> bool:
    """Whether any overload of a torch op carries the pointwise or reduction tag."""
    ns, _, op = name.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), op)
        overloads = packet.overloads()
    except (AttributeError, RuntimeError):
        return False
    for overload in overloads:
        tags = getattr(getattr(packet, overload, None), "tags", ())
        if any(t in tags for t in _TAGS):
            return True
    return False


@dataclass(frozen=True)
class Kernel:
    """One fused kernel: its ops (positions in the op list) and its counts."""

    ops: tuple[int, ...]
    flops: float
    bytes_read: float
    bytes_written: float
    dtype: str

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


@dataclass
class Fusion:
    """The fused view of an op list: its kernels, and each op's bytes in that view."""

    kernels: list[Kernel] = field(default_factory=list)
    #: Per op (same order as the op list): its bytes in the fused view (an anchor's eager bytes).
    op_bytes: list[float] = field(default_factory=list)
    #: Per op: the index of its kernel in `kernels`, or -1 for an anchor.
    kernel_of: list[int] = field(default_factory=list)
    #: Fusible ops kept as anchors because their per-storage traffic is not known.
    unknown: int = 0

    @property
    def bytes(self) -> float:
        return sum(self.op_bytes)


def _close(a: float, b: float) -> bool:
    """Equal up to rounding (an op's per-storage bytes against its total)."""
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _find(parent: list[int], i: int) -> int:
    root = i
    while parent[root] != root:
        root = parent[root]
    while parent[i] != root:  # path compression
        parent[i], i = root, parent[i]
    return root


def _charge(charged: dict[tuple[int, int], float], key: tuple[int, int], nbytes: float, size: float) -> float:
    """What a kernel's access of `nbytes` of a storage of `size` bytes adds to its traffic: each
    storage at most its size per kernel (`charged`: what the kernel has counted of it so far)."""
    done = charged.get(key, 0.0)
    take = min(nbytes, size - done)
    if take <= 0:
        return 0.0
    charged[key] = done + take
    return take


def fuse(ops: list[OpRecord]) -> Fusion:
    """Group `ops` into fused kernels between anchors and count each kernel's traffic (module doc)."""
    group, producers, size, unknown = _group(ops)
    outside = _read_outside(ops, group, producers)
    op_bytes, acc = _charge_ops(ops, group, producers, size, outside)
    kernels, kernel_of = _kernels(ops, acc)
    return Fusion(kernels=kernels, op_bytes=op_bytes, kernel_of=kernel_of, unknown=unknown)


def _group(ops: list[OpRecord], also: frozenset[int] = frozenset(),
           ) -> tuple[list[int], list[list[int]], dict[int, float], int]:
    """Pass 1: per op its kernel's root (-1: an anchor), the producer of each of its reads (-1:
    none), each storage's size, and how many fusible ops were kept eager (traffic not known).
    `also`: positions of ops fused although their kind is an anchor's (a router's top-k)."""
    n = len(ops)
    fus = [False] * n
    unknown = 0
    known = _FUSIBLE

    # Producers, levels, kernels (union-find), and each storage's size.
    parent = list(range(n))
    level = [0] * n
    last_writer: dict[int, int] = {}
    producers: list[list[int]] = [[] for _ in range(n)]  # per op, the producer of each read (-1: none)
    size: dict[int, float] = {}
    for i, op in enumerate(ops):
        prods = producers[i]
        lvl = 0
        read = 0.0
        for sid, nbytes in op.reads:
            read += nbytes
            p = -1
            if sid >= 0:
                if nbytes > size.get(sid, -1.0):
                    size[sid] = nbytes
                p = last_writer.get(sid, -1)
            prods.append(p)
            if p >= 0:
                lp = level[p] if fus[p] else level[p] + 1
                if lp > lvl:
                    lvl = lp
        level[i] = lvl
        written = 0.0
        for sid, nbytes in op.writes:
            written += nbytes
            if sid >= 0:
                if nbytes > size.get(sid, -1.0):
                    size[sid] = nbytes
                last_writer[sid] = i
        if op.kind != "op":
            continue
        name = op.name
        is_fusible = known.get(name)
        if is_fusible is None:
            is_fusible = fusible(name)
        if not is_fusible and i not in also:
            continue
        if not (_close(read, op.bytes_read) and _close(written, op.bytes_written)):
            unknown += 1  # its per-storage traffic does not add up to its totals: kept eager
            continue
        fus[i] = True
        for p in prods:
            if p >= 0 and fus[p] and level[p] == lvl:
                a, b = _find(parent, p), _find(parent, i)
                if a != b:
                    parent[b] = a

    group = [_find(parent, i) if fus[i] else -1 for i in range(n)]
    return group, producers, size, unknown


def _read_outside(ops: list[OpRecord], group: list[int],
                  producers: list[list[int]]) -> dict[tuple[int, int], bool]:
    """Which values fused ops write (a value: the op that wrote it, the storage) are read outside
    their kernel; a value nothing reads is absent (it leaves: an output, a cache, a last state)."""
    outside: dict[tuple[int, int], bool] = {}
    for i, op in enumerate(ops):
        g = group[i]
        for (sid, _), p in zip(op.reads, producers[i], strict=True):
            if p >= 0 and group[p] >= 0:
                key = (p, sid)
                outside[key] = outside.get(key, False) or group[p] != g
    return outside


def _charge_ops(ops: list[OpRecord], group: list[int], producers: list[list[int]], size: dict[int, float],
                outside: dict[tuple[int, int], bool]) -> tuple[list[float], dict[int, list]]:
    """Pass 2: charge each kernel's reads and writes to its ops; per op its bytes in the fused view,
    and per kernel (by its root, in the order of its first op) its ops, FLOPs, bytes read and written."""
    op_bytes = [0.0] * len(ops)
    charged_r: dict[tuple[int, int], float] = {}
    charged_w: dict[tuple[int, int], float] = {}
    acc: dict[int, list] = {}  # kernel -> [its ops, FLOPs, bytes read, bytes written]
    for i, op in enumerate(ops):
        g = group[i]
        if g < 0:
            op_bytes[i] = op.bytes_read + op.bytes_written
            continue
        r = w = 0.0
        for (sid, nbytes), p in zip(op.reads, producers[i], strict=True):
            if p >= 0 and group[p] == g:
                continue  # produced inside the kernel
            if sid < 0:
                r += nbytes
                continue
            r += _charge(charged_r, (g, sid), nbytes, size[sid])
        for sid, nbytes in op.writes:
            if sid < 0:
                w += nbytes
                continue
            if not outside.get((i, sid), True):
                continue  # read only inside the kernel
            w += _charge(charged_w, (g, sid), nbytes, size[sid])
        op_bytes[i] = r + w
        entry = acc.get(g)
        if entry is None:
            entry = acc[g] = [[], 0.0, 0.0, 0.0]
        entry[0].append(i)
        entry[1] += op.flops
        entry[2] += r
        entry[3] += w
    return op_bytes, acc


def _kernels(ops: list[OpRecord], acc: dict[int, list]) -> tuple[list[Kernel], list[int]]:
    """The kernels from pass 2's sums, in the order of their first op, and per op its kernel's
    index (-1: an anchor)."""
    kernels: list[Kernel] = []
    kernel_of = [-1] * len(ops)
    for idx, flops, r, w in acc.values():  # in the order of their first op
        for i in idx:
            kernel_of[i] = len(kernels)
        members = [ops[i] for i in idx]
        dtype = members[0].dtype
        if any(op.dtype != dtype for op in members):
            dtype = _dominant_dtype(members)
        kernels.append(Kernel(ops=tuple(idx), flops=flops, bytes_read=r, bytes_written=w, dtype=dtype))
    return kernels, kernel_of


def _dominant_dtype(ops: list[OpRecord]) -> str:
    """The dtype with the most FLOPs among `ops`, else the most bytes (as a module row's)."""
    flops: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    for op in ops:
        flops[op.dtype] = flops.get(op.dtype, 0.0) + op.flops
        nbytes[op.dtype] = nbytes.get(op.dtype, 0.0) + op.bytes
    weights = flops if any(flops.values()) else nbytes
    return max(weights, key=weights.get)


def fused_totals(fusion: Fusion, op_times: list[float], hw: HardwareSpec, dtype: str, flops: float,
                 tokens: int) -> FusedTotals:
    """The step in the fused view, placed as the eager one is: each kernel at its own time bound
    (max(flops/peak, bytes/bandwidth) at its dtype's peak), each anchor at its eager op time
    (`op_times`, the eager ops' time bounds), summed; the whole step's bound at `dtype`."""
    predicted = sum(t for t, k in zip(op_times, fusion.kernel_of, strict=True) if k < 0)
    bandwidth = hw.memory_bandwidth
    for kernel in fusion.kernels:
        predicted += op_figures(kernel.flops, kernel.bytes, hw.peak(kernel.dtype), bandwidth)[2]
    nbytes = fusion.bytes
    whole = place_on(hw, dtype, flops, nbytes)
    return FusedTotals(
        bytes=nbytes, intensity=whole.intensity, time_bound_s=whole.time_bound_s, predicted_step_s=predicted,
        bound=whole.bound, tokens_per_s=tokens / predicted if predicted else None, kernels=len(fusion.kernels),
        ops_fused=sum(len(k.ops) for k in fusion.kernels), ops_unknown=fusion.unknown,
    )


def fusion_notes(fusion: Fusion) -> list[str]:
    """The report's note when the fused view could not fuse every fusible op."""
    if not fusion.unknown:
        return []
    return [f"fused view: {fusion.unknown} fusible ops keep their eager bytes (their traffic per storage is "
            "not known: counts evaluated from a fit or changed by a transform), so totals.fused is an upper bound"]


def kernel_records(ops: list[OpRecord], params: set[int], name_of, also: frozenset[int] = frozenset(),
                   ) -> list[OpRecord]:
    """`ops` with each fused kernel of two or more ops restated as one record (the serving view,
    rooflinekit.transforms.serving): its FLOPs, and the storages it reads from and writes to HBM at
    the bytes the fused view charges them (a value made and used inside the kernel moves nothing).
    The record stands where the kernel's last op stood, named `name_of(member ops)`; anchors and
    single-op kernels are kept as they were; the ops at positions in `also` fuse as the fusible
    ones do (an engine's fused routing kernel holds a router's top-k). Records are not renumbered."""
    group, producers, size, _ = _group(ops, also)
    members: dict[int, list[int]] = {}
    for i, g in enumerate(group):
        if g >= 0:
            members.setdefault(g, []).append(i)
    merged = {g: idx for g, idx in members.items() if len(idx) > 1}
    if not merged:
        return list(ops)
    outside = _read_outside(ops, group, producers)
    traffic: dict[int, tuple[dict[int, float], dict[int, float], list[float]]] = {}
    charged_r: dict[tuple[int, int], float] = {}
    charged_w: dict[tuple[int, int], float] = {}
    for g, idx in merged.items():
        reads: dict[int, float] = {}
        writes: dict[int, float] = {}
        flops = 0.0
        for i in idx:
            op = ops[i]
            flops += op.flops
            for (sid, nbytes), p in zip(op.reads, producers[i], strict=True):
                if p >= 0 and group[p] == g:
                    continue
                take = nbytes if sid < 0 else _charge(charged_r, (g, sid), nbytes, size[sid])
                if take:
                    reads[sid] = reads.get(sid, 0.0) + take
            for sid, nbytes in op.writes:
                if sid >= 0 and not outside.get((i, sid), True):
                    continue
                take = nbytes if sid < 0 else _charge(charged_w, (g, sid), nbytes, size[sid])
                if take:
                    writes[sid] = writes.get(sid, 0.0) + take
        traffic[g] = (reads, writes, [flops])
    last = {idx[-1]: g for g, idx in merged.items()}
    out: list[OpRecord] = []
    for i, op in enumerate(ops):
        g = group[i]
        if g in merged and i not in last:
            continue
        if i not in last:
            out.append(op)
            continue
        kernel = [ops[j] for j in merged[g]]
        reads, writes, (flops,) = traffic[g]
        out.append(OpRecord(
            index=op.index, name=name_of(kernel), module=kernel[0].module, flops=flops,
            bytes_read=sum(reads.values()), bytes_written=sum(writes.values()),
            dtype=_dominant_dtype(kernel) if any(k.dtype != kernel[0].dtype for k in kernel) else kernel[0].dtype,
            counted=all(k.counted for k in kernel), kind="op", reads=tuple(reads.items()),
            param_bytes=sum(b for sid, b in reads.items() if sid in params),
            writes=tuple(writes.items()), shapes=kernel[0].shapes,
            attrs={"fused_ops": [k.name for k in kernel], "fused_from": [k.index for k in kernel]}))
    return out
