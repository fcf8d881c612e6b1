"""Measured kernel times by shape: an efficiency file's `[kernel_times]` table names a database of
measured kernels that a plugin serves (the rooflinekit_kernel_times hook). Where the database answers
a kernel's time at its shape, that time prices the kernel instead of its class's fractions; where it
does not, the fractions do. A measured time below the datasheet roofline is held at the roofline, so
no kernel is priced under its bound.

A kernel is asked as a `KernelQuery`: its kind, its format and its dimensions.

- ``gemm``: ``m``, ``n``, ``k``, an (m x k) @ (k x n) product outside attention, in the op's format;
- ``attention``: ``batch``, ``q_len`` (new tokens per sequence), ``kv_len`` (positions each attends,
  the new ones included), ``heads``, ``kv_heads``, ``head_dim`` of one GPU, the KV cache's format,
  `variant` the architecture (gqa, mha, mqa, mla, ...);
- ``experts``: one MoE layer as a fused-MoE call runs it (its grouped expert GEMMs, the activation
  between them, the weighted combine of each token's outputs), ``tokens`` (routed into the GPU's
  expert group), ``hidden``, ``inter`` (one expert's intermediate size), ``top_k``, ``experts``,
  ``tp`` and ``ep`` (how the experts are split), and ``share``: the part of the call this record is
  (a GEMM its matrix's FLOPs over the layer's; the activation and the combine 0, their work being
  inside the call's measured time). A kernel several records share is split among them by their
  rooflines once answered (hold_shares), so the shares say which records make the kernel;
- a collective by its name (``all_reduce``, ``all_gather``, ...): ``message_bytes`` over
  ``group_size`` GPUs; an expert-parallel ``all_to_all`` declares its shape instead: this GPU's
  ``tokens``, ``hidden``, ``top_k``, ``experts``, ``ep``, ``itemsize`` (bytes per element sent) and
  ``combine`` (0: the dispatch before the experts, 1: the combine after them);
- ``attention_layer``: a whole attention layer as an engine's module runs it (its projections, norms,
  rotary and attention kernel; the serving view declares it, `variant` the architecture), by the
  attention kernel's dimensions plus ``heads_total`` (the layer's heads on every GPU), ``kv_itemsize``
  (the cache's bytes per element) and ``weights`` (the layer's projection weights, elements, on every
  GPU: what names the model's layer), in its GEMMs' format; each record a ``share`` of the layer.
  A database without the layer is asked for each record's own kernel instead (the query's
  ``fallback``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from rooflinekit.core.errors import UserError
from rooflinekit.core.plugins import get_host

#: Two-operand matrix products (the ops gemm_dims reads).
GEMM_OPS = frozenset({"aten.mm", "aten.addmm", "aten._scaled_mm", "aten.matmul", "aten.linear"})
#: The dimension that counts a kernel's tokens, halved for one of two micro-batches.
TOKEN_DIMS = {"gemm": "m", "experts": "tokens", "all_to_all": "tokens"}
#: The ops whose shapes give a GEMM's (m, n, k): the position of the (m x k) operand and how the
#: other operand holds n (its last dim, or its first: linear's weight is n x k).
_GEMM_OPERANDS = {"aten.mm": (0, -1), "aten.addmm": (1, -1), "aten._scaled_mm": (0, -1), "aten.matmul": (0, -1),
                  "aten.linear": (0, 0)}


@dataclass(frozen=True)
class KernelQuery:
    """One kernel as a database of measured kernels is asked for it (see the module docstring)."""

    kind: str
    dtype: str
    dims: tuple[tuple[str, float], ...]
    variant: str = ""
    #: The record's own kernel, asked where the database does not answer this one (a layer's record).
    fallback: KernelQuery | None = None

    def __getitem__(self, name: str) -> float:
        return dict(self.dims)[name]

    def get(self, name: str, default: float | None = None) -> float | None:
        return dict(self.dims).get(name, default)

    def halved(self) -> KernelQuery:
        """The kernel of one of two micro-batches: half its tokens (rounded up), as two-batch overlap
        runs it; attention halves its sequences, or one sequence's new tokens where it has one."""
        dims = dict(self.dims)
        fallback = None if self.fallback is None else self.fallback.halved()
        if self.kind in ("attention", "attention_layer"):
            if dims["batch"] >= 2:
                dims["batch"] = math.ceil(dims["batch"] / 2)
            else:
                half = math.ceil(dims["q_len"] / 2)
                dims["kv_len"] -= dims["q_len"] - half
                dims["q_len"] = half
        elif self.kind in TOKEN_DIMS:
            name = TOKEN_DIMS[self.kind]
            dims[name] = math.ceil(dims[name] / 2)
        else:
            return replace(self, fallback=fallback)
        return replace(self, dims=tuple(dims.items()), fallback=fallback)


@runtime_checkable
class KernelTimes(Protocol):
    """A database of measured kernels: `seconds(query)` is one kernel's measured time at its shape,
    None where it has no measurement of that kind, format or shape; `label` names the database. A
    database measured in CUDA-graph replays may say what each time carries of its launch
    (`launch_included_s`, a graph node's cost): it is taken off before the step adds its own launch."""

    label: str

    def seconds(self, query: KernelQuery) -> float | None: ...


def query(kind: str, dtype: str, variant: str = "", **dims: float) -> KernelQuery:
    """A KernelQuery with its dimensions in the order given."""
    return KernelQuery(kind, dtype, tuple((k, float(v)) for k, v in dims.items()), variant)


def gemm_dims(name: str, shapes: str) -> tuple[int, int, int] | None:
    """(m, n, k) of a two-operand matrix product from its recorded shapes; None for batched products,
    weight-only integer formats and einsum, which a GEMM database does not key by (m, n, k)."""
    where = _GEMM_OPERANDS.get(name)
    operands = shapes.split(",") if shapes else []
    if where is None or len(operands) < where[0] + 2:
        return None
    try:
        a = [int(d) for d in operands[where[0]].split("x")]
        b = [int(d) for d in operands[where[0] + 1].split("x")]
    except ValueError:
        return None
    if len(a) < 1 or len(b) != 2:
        return None
    k = a[-1]
    n = b[0] if where[1] == 0 else b[-1]
    if (b[1] if where[1] == 0 else b[0]) != k:
        return None
    return math.prod(a[:-1]) if len(a) > 1 else 1, n, k


def query_of(name: str, kind: str, dtype: str, shapes: str, attrs: dict | None, gemm: bool) -> KernelQuery | None:
    """The query of one op record: a GEMM's from its shapes (`gemm`: its class is a GEMM's, not an
    attention product), on one GPU where a tensor-parallel split scaled it (attrs["shard"]: the share
    of n or k the GPU holds); a modelled record's from the `kernel` its transform or module model
    declared (attrs["kernel"]: {"kind", "dtype", "variant", dims...}); None for every other op."""
    declared = (attrs or {}).get("kernel")
    if declared:
        dims = {k: v for k, v in declared.items() if k not in ("kind", "dtype", "variant")}
        return query(declared["kind"], declared.get("dtype", dtype), declared.get("variant", ""), **dims)
    if gemm and kind != "modelled":
        found = gemm_dims(name, shapes)
        if found is not None:
            m, n, k = found
            shard = (attrs or {}).get("shard") or {}
            return query("gemm", dtype, m=m, n=max(1, round(n * shard.get("n", 1.0))),
                         k=max(1, round(k * shard.get("k", 1.0))))
    return None


def queries_of(ops, attention_ops) -> list[KernelQuery | None]:
    """Each op record's query (query_of). Sibling projections the serving view runs as one merged
    GEMM (attrs["siblings"] names their group: a merged QKV, gate and up) are asked as that GEMM, of
    their summed n, each with its `share` of it (its n over the sum)."""
    attention = frozenset(attention_ops)
    out = [query_of(op.name, op.kind, op.dtype, op.shapes, op.attrs, op.name in GEMM_OPS and op.index not in attention)
           for op in ops]
    groups: dict[object, list[int]] = {}
    for i, (op, q) in enumerate(zip(ops, out, strict=True)):
        group = op.attrs.get("siblings") if q is not None and q.kind == "gemm" else None
        if group is not None:
            groups.setdefault((group, q.dtype, q["m"], q["k"]), []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        total = sum(out[i]["n"] for i in members)
        for i in members:
            q = out[i]
            out[i] = query("gemm", q.dtype, m=q["m"], n=total, k=q["k"], share=q["n"] / total)
    return _in_layers(ops, _inside_in_format(out))


def _in_layers(ops, out: list[KernelQuery | None]) -> list[KernelQuery | None]:
    """Each record of a layer its view declares whole (attrs["layer_kernel"]: its kind, variant, layer
    and dimensions) asked as a share of the layer (its FLOPs'), in the format of the layer's GEMMs
    (else the declared one), its own query the fallback."""
    layers: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        declared = op.attrs.get("layer_kernel")
        if declared:
            layers.setdefault(declared["layer"], []).append(i)
    for members in layers.values():
        declared = ops[members[0]].attrs["layer_kernel"]
        flops = sum(ops[i].flops for i in members)
        fmt = next((out[i].dtype for i in members if out[i] is not None and out[i].kind == "gemm"), declared["dtype"])
        dims = {k: v for k, v in declared.items() if k not in ("kind", "dtype", "variant", "layer")}
        for i in members:
            layer = query(declared["kind"], fmt, declared.get("variant", ""), **dims,
                          share=ops[i].flops / flops if flops > 0 else 0.0)
            out[i] = replace(layer, fallback=out[i])
    return out


def _inside_in_format(out: list[KernelQuery | None]) -> list[KernelQuery | None]:
    """A record inside another's kernel (share 0: an MoE call's activation in the activations'
    format) asked in the format of the records that share the kernel (its GEMMs', fp8 weights),
    as the one kernel it is part of."""
    formats: dict[tuple, str] = {}
    for q in out:
        if q is not None and q.get("share"):
            formats.setdefault((q.kind, q.variant, whole(q).dims), q.dtype)
    for i, q in enumerate(out):
        if q is not None and q.get("share") == 0:
            fmt = formats.get((q.kind, q.variant, whole(q).dims))
            if fmt is not None and fmt != q.dtype:
                out[i] = replace(q, dtype=fmt)
    return out


def measured_time(times: KernelTimes, q: KernelQuery, flops: float, nbytes: float, peak: float,
                  bandwidth: float, count: int = 1) -> float | None:
    """`count` equal kernels' time from the database (a record that is a `share` of a kernel: that
    share of the kernel's; a sweep's compact record stands for `count` kernels, its counts theirs),
    less the launch the database's times include, held at the roofline of their FLOPs and bytes; a
    record that is a share of a kernel: its share less one launch, unheld (below 0 for share 0), the
    kernel then split among its records and held whole by hold_shares; None where the database has
    no answer."""
    q = answered(times, q)
    if q is None:
        return None
    share = q.get("share")
    t = times.seconds(whole(q))
    launch = min(t, float(getattr(times, "launch_included_s", 0.0) or 0.0))
    if share is not None:  # one of the records a kernel is made of: the launches its measured time
        # carries are theirs, one each (a merged GEMM is one kernel, a module's each its own), so
        # together they cost it whole; split among them by their rooflines (hold_shares)
        return (t * share - launch) * count
    return max((t - launch) * count, flops / peak if peak else 0.0, nbytes / bandwidth if bandwidth else 0.0)


@functools.lru_cache(maxsize=1 << 16)
def whole(q: KernelQuery) -> KernelQuery:
    """The kernel a record's query is a share of: the query without its `share` (and its fallback)."""
    return replace(q, dims=tuple((k, v) for k, v in q.dims if k != "share"), fallback=None)


def answered(times: KernelTimes, q: KernelQuery | None) -> KernelQuery | None:
    """The query the database answers for a record: `q`, else its fallback's answer; None where
    neither is answered (a positive, finite time)."""
    while q is not None:
        t = times.seconds(whole(q))
        if t is not None and t > 0 and math.isfinite(t):
            return q
        q = q.fallback
    return None


def hold_shares(times: list[float], shares: list[tuple[int, KernelQuery, float]]) -> None:
    """Split each measured kernel that several records share among them by their rooflines, in place.
    `shares` holds (index into `times`, the kernel's query, the record's roofline time); `times` holds
    each record's share of the measured time. A kernel's records together cost its measured time, or
    the sum of their rooflines where that is more (no measured kernel is priced under the bound of the
    work its records count), each the part its own roofline is of theirs: every record at or above
    its own bound, whatever the shares a declaration gave (a layer's projections and attention kernel
    by FLOPs, an MoE call's activation at 0)."""
    groups: dict[tuple, list[tuple[int, float]]] = {}
    for i, q, roof in shares:  # one kernel's records, its dimensions to 9 figures (a step model's
        # come from polynomials, a few ulps apart from record to record)
        key = (q.kind, q.dtype, q.variant, tuple((k, float(f"{v:.9g}")) for k, v in q.dims))
        groups.setdefault(key, []).append((i, roof))
    for members in groups.values():
        roofs = sum(r for _, r in members)
        if not roofs > 0:
            continue
        total = max(roofs, sum(times[i] for i, _ in members))
        for i, r in members:
            times[i] = total * r / roofs


#: (source, settings) -> the database a plugin serves, resolved once per process.
_RESOLVED: dict[tuple, KernelTimes] = {}


def resolve(spec: dict, where: str, host=None) -> KernelTimes:
    """The database an efficiency file's `[kernel_times]` names ({"source": NAME, ...settings}), from
    the rooflinekit_kernel_times answers of `host`'s plugins (default: the process's), kept for the
    process once found; a UserError naming the file where none serves it."""
    source = spec.get("source")
    if not isinstance(source, str) or not source:
        raise UserError(f"efficiency source {where}: [kernel_times] needs source = NAME (a plugin's database)")
    settings = {k: v for k, v in spec.items() if k != "source"}
    key = (source, tuple(sorted((k, str(v)) for k, v in settings.items())))
    found = _RESOLVED.get(key)
    if found is None:
        host = host or get_host()
        found, _ = host.first(host.hook.rooflinekit_kernel_times, source=source, settings=settings)
        if found is None:
            raise UserError(f"efficiency source {where}: [kernel_times] names '{source}', which no installed "
                            "plugin serves (`rooflinekit plugins` lists them; the aic source needs "
                            "pip install 'rooflinekit[aic]')")
        _RESOLVED[key] = found
    return found
