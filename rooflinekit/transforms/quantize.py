"""Quantized weights and KV caches, fp8 activations: a transform of a capture, placed as any capture.

The model runs in its own dtype (bf16; on meta nothing runs at all). A quantized deployment runs the
same ops on fewer bytes, so the capture's records are rescaled storage by storage and placed by the
same code as any capture (module rows, totals, attention and sweeps follow):

- weights (`--weight-dtype`): every read of a linear or expert weight's storage is scaled to the
  format's size plus its scales. A linear or expert weight is a parameter of two or more
  dimensions that an op with FLOPs reads (a matrix product's weight); the token embedding (a
  parameter gathered by rows) and the output head stay as the model runs them unless
  `quantize_embeddings`. Group-wise formats (int8, int4) carry one fp16 scale per `group` elements
  along each row (the weight's last dimension, nn.Linear's input features), symmetric (no zero
  points); fp8 carries one fp32 scale per output channel (per row), or per group when a group size
  is given. Dequantisation costs no counted FLOPs. Products run at the activation dtype's peak
  (weight-only formats) or, with fp8 activations (`--dtype fp8`), at the fp8 peak.
- the KV cache (`--kv-dtype`): every read and write of a cache storage is scaled to the format's
  element size (per-tensor scales, not counted). The cache storages of an attention layer are
  those its cache updates write in place (copy_, index_copy_, index_put_, scatter_ into a tensor that existed
  before the forward), the K/V operands of its attention products that existed before the
  forward or are written so, and both sides of a `torch.cat` on its K/V path that extends a
  cache that existed before the forward (transformers' DynamicCache). Fresh K/V (a prefill that
  attends the K/V it just computed) keeps its size.

A weight already stored in 8 bits or fewer (a model file that runs float8 itself) is counted as it
runs: the transform does not touch it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import torch

from rooflinekit.core.errors import HardwareError
from rooflinekit.core.model_facts import cached, fact, module_tree
from rooflinekit.core.request import WEIGHT_BITS, Deployment, Workload
from rooflinekit.core.skips import stand_ins
from rooflinekit.stages.attention_ops import dtype_itemsize, kv_operands
from rooflinekit.stages.attribute import AttentionSite, attention_workload
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.transforms.base import Counted, TransformContext

#: Bytes of one scale: fp16 for the group-wise integer formats, fp32 for fp8.
SCALE_BYTES = {"int8": 2, "int4": 2, "fp8": 4}
SCALE_NAMES = {2: "fp16", 4: "fp32"}
#: In-place writes that update a cache (a slot written into a tensor that outlives the step).
CACHE_WRITES = {"aten.copy_", "aten.index_copy_", "aten.index_put_", "aten.scatter_", "aten.masked_scatter_"}
#: Ops that gather rows of a parameter (an embedding table) without arithmetic.
GATHERS = {"aten.embedding", "aten.index_select", "aten.index", "aten._embedding_bag", "aten.take"}


@dataclass
class Transformed:
    """A capture and its attention rows as the quantized workload would run them, and the notes
    that say what was assumed."""

    capture: CaptureResult
    attention: list[AttentionSite]
    notes: list[str] = field(default_factory=list)
    #: Parameter name -> its stored bytes, for the quantized parameters (per-GPU weights under TP/EP).
    stored: dict[str, float] = field(default_factory=dict)


def applies(workload: Workload, deployment: Deployment) -> bool:
    """Whether the request asks for anything the model does not run (a format or fp8 activations)."""
    return deployment.transforms_formats(workload.dtype_key)


def check_hardware(hw: HardwareSpec, workload: Workload) -> None:
    """fp8 activations are placed at the entry's fp8 peak: an entry without one is refused in one
    line (a peak borrowed from another dtype would be no fp8 figure)."""
    if workload.dtype_key == "fp8" and "fp8" not in hw.peak_flops:
        raise HardwareError(f"hardware '{hw.name}' lists no fp8 peak (it lists {', '.join(hw.peak_flops)}): "
                            "--dtype fp8 needs one; choose another --hardware or another --dtype")


def stored_bytes(param: torch.Tensor, fmt: str, group: int | None) -> float:
    """Bytes of `param` stored in `fmt`: its elements at the format's width plus its scales (one
    per `group` elements of each row, or one per row when `group` is None and fmt is fp8)."""
    numel = param.numel()
    total = numel * WEIGHT_BITS[fmt] / 8
    if fmt not in SCALE_BYTES or numel == 0:
        return total
    row = param.shape[-1]
    rows = numel // row
    per_row = 1 if group is None else math.ceil(row / group)
    return total + rows * per_row * SCALE_BYTES[fmt]


def _first_touch(ops: list[OpRecord]) -> dict[int, str]:
    """How each storage first appears in the forward: "read", "inplace" (written by an in-place op:
    it existed before) or "fresh" (the output of an op)."""
    seen: dict[int, str] = {}
    for op in ops:
        for sid, _ in op.reads:
            seen.setdefault(sid, "read")
        kind = "inplace" if op.name.endswith("_") else "fresh"
        for sid, _ in op.writes:
            seen.setdefault(sid, kind)
    return seen


@dataclass
class _Roles:
    """The parameter storages a weight format applies to, and those kept as the model runs them."""

    quantized: dict[int, torch.Tensor]
    kept: dict[str, list[str]]  # why -> parameter names
    already: list[str]  # weights stored in 8 bits or fewer by the model itself


def _owner_paths(model: torch.nn.Module, module: object) -> set[str]:
    return {path for path, m in module_tree(model) if m is module}


def weight_roles(cap: CaptureResult, model: torch.nn.Module, quantize_embeddings: bool) -> _Roles:
    """Which parameter storages are linear or expert weights (quantized), which are the token
    embedding or the output head (kept unless `quantize_embeddings`), and which the model already
    stores in 8 bits or fewer."""
    params = cached(model, fact("parameters_with_duplicates"),
                    lambda: dict(model.named_parameters(remove_duplicate=False)))
    product: set[int] = set()
    gathered: set[int] = set()
    for op in cap.ops:
        if not op.param_bytes:
            continue
        for sid, _ in op.reads:
            if sid not in cap.param_storages:
                continue
            if op.flops > 0:
                product.add(sid)
            elif op.name in GATHERS:
                gathered.add(sid)

    def tensor(sid: int) -> torch.Tensor | None:
        name = cap.param_names.get(sid)
        t = params.get(name) if name is not None else None
        return getattr(t, "_local_tensor", t) if t is not None else None

    # the output head: transformers' get_output_embeddings(), else the product weights with a
    # dimension of the vocabulary (the rows of a gathered embedding table)
    head: set[int] = set()
    out = getattr(model, "get_output_embeddings", None)
    module = out() if callable(out) else None
    if isinstance(module, torch.nn.Module):
        paths = _owner_paths(model, module)
        head = {sid for sid in product if cap.param_owners.get(sid) in paths}
    else:
        vocab = {t.shape[0] for sid in gathered if (t := tensor(sid)) is not None and t.dim() == 2}
        head = {sid for sid in product if (t := tensor(sid)) is not None and t.dim() == 2
                and (set(t.shape) & vocab)}
    # the weights of modules a module model stood in for (MoE experts): their records read them
    # as bytes, not storages; every matrix the module owns is a weight of its products
    modelled = {op.module for op in cap.ops if op.kind == "modelled" and op.flops > 0 and op.param_bytes}
    for sid, owner in cap.param_owners.items():
        if owner in modelled or any(owner.startswith(m + ".") for m in modelled):
            product.add(sid)
    quantized: dict[int, torch.Tensor] = {}
    kept: dict[str, list[str]] = {}
    already: list[str] = []
    for sid in sorted(product | gathered):
        t = tensor(sid)
        name = cap.param_names.get(sid, f"storage {sid}")
        if t is None or t.dim() < 2:
            continue
        role = "output head" if sid in head else "token embedding" if sid in gathered else None
        if role is not None and not quantize_embeddings:
            kept.setdefault(role, []).append(name)
            continue
        if t.element_size() <= 1:
            already.append(name)
            continue
        quantized[sid] = t
    return _Roles(quantized, kept, already)


def _cache_storages(cap: CaptureResult, by_index: dict[int, OpRecord], rows: list[AttentionSite],
                    context: int) -> tuple[dict[int, float], list[str]]:
    """Cache storage -> bytes per element the model ran it at, over the recognised attention
    layers; and the layers where no cache storage was seen."""
    ops, params = cap.ops, cap.param_storages
    first = _first_touch(ops)
    # what the forward allocated (rooflinekit.stages.capture.liveness: a scratch tensor made with
    # torch.empty and filled in place is one); without that record, first touches decide
    allocated = {sid for sid, _ in getattr(cap, "live", None) or ()}
    buffers = params - set(cap.param_names)
    cache: dict[int, float] = {}
    missing: list[str] = []
    by_module: dict[str, list[OpRecord]] = {}  # one pass over the ops; a row then looks at module names
    for op in ops:
        by_module.setdefault(op.module, []).append(op)

    def before(sid: int) -> bool:  # existed before the forward (state: a cache), not a weight
        if sid < 0 or sid in allocated or (sid in params and sid not in buffers):
            return False
        return first.get(sid, "fresh") != "fresh"

    for row in rows:
        if not row.recognised:
            continue
        itemsize = float(dtype_itemsize(row.dtype))
        found: set[int] = set()
        prefix = row.module + "."
        subtree = ops if row.module == "(root)" else [op for module, group in by_module.items()
                                                       if module == row.module or module.startswith(prefix)
                                                       for op in group]
        for op in subtree:
            if op.name in CACHE_WRITES:
                found.update(sid for sid, _ in op.writes if before(sid))
        core = [by_index[i] for i in row.op_indices if i in by_index]
        for operands in kv_operands(core, params, context).values():
            found.update(sid for sid, _ in operands if before(sid))
        for i in row.kv_op_indices:
            op = by_index.get(i)
            if op is not None and op.name == "aten.cat":
                old = [sid for sid, _ in op.reads if before(sid)]
                if old:
                    found.update(old)
                    found.update(sid for sid, _ in op.writes if sid >= 0)
        if not found:
            missing.append(row.module)
        for sid in found:
            cache.setdefault(sid, itemsize)
    return cache, missing


def _scaled(op: OpRecord, scale: dict[int, float], params: set[int], fp8: set[int]) -> OpRecord:
    """`op` with its reads and writes of the storages in `scale` multiplied by their factors, and
    placed at the fp8 peak when it is a product reading a storage in `fp8`."""
    touched = any(sid in scale for sid, _ in op.reads) or any(sid in scale for sid, _ in op.writes)
    to_fp8 = op.flops > 0 and any(sid in fp8 for sid, _ in op.reads)
    if not touched and not to_fp8:
        return op
    reads = tuple((sid, b * scale.get(sid, 1.0)) for sid, b in op.reads)
    writes = tuple((sid, b * scale.get(sid, 1.0)) for sid, b in op.writes)
    attrs = op.attrs
    if touched and attrs:
        attrs = dict(attrs)
        if op.kind == "fused" and "kv_read_bytes" in attrs and op.sinks:
            share = attrs["kv_read_bytes"] / len(op.sinks)
            attrs["kv_read_bytes"] = sum(share * scale.get(s, 1.0) for s in op.sinks)
        if "operand_sids" in attrs and "operand_bytes" in attrs:
            attrs["operand_bytes"] = [b * scale.get(s, 1.0) for s, b in
                                      zip(attrs["operand_sids"], attrs["operand_bytes"], strict=False)]
    return replace(op, bytes_read=sum(b for _, b in reads), bytes_written=sum(b for _, b in writes),
                   reads=reads, writes=writes, attrs=attrs,
                   param_bytes=sum(b for sid, b in reads if sid in params) if touched else op.param_bytes,
                   dtype="fp8" if to_fp8 else op.dtype)


def _modelled_scales(cap: CaptureResult, sizes: dict[int, float], scale: dict[int, float],
                     fp8: set[int]) -> dict[str, tuple[float, bool]]:
    """Module path -> (factor on its weight bytes, products at fp8) for the modules a module model
    stood in for: the stored size of the quantized weights it owns over their size as run
    (`sizes`: quantized storage -> its bytes as run)."""
    paths = {op.module for op in cap.ops if op.kind == "modelled" and op.param_bytes}
    owned: dict[str, list[int]] = {}
    for sid, owner in cap.param_owners.items():
        if sid in sizes:
            for path in paths:
                if owner == path or owner.startswith(path + "."):
                    owned.setdefault(path, []).append(sid)
    out: dict[str, tuple[float, bool]] = {}
    for path, sids in owned.items():
        before = sum(sizes[s] for s in sids)
        if before:
            after = sum(sizes[s] * scale.get(s, 1.0) for s in sids)
            out[path] = (after / before, any(s in fp8 for s in sids))
    return out


def _scaled_modelled(op: OpRecord, factor: float, to_fp8: bool) -> OpRecord:
    """A module model's record with its weight bytes at the stored format (its other bytes as they were)."""
    param = op.param_bytes * factor
    return replace(op, bytes_read=op.bytes_read - op.param_bytes + param, param_bytes=param,
                   dtype="fp8" if to_fp8 and op.flops > 0 else op.dtype)


def _rows(rows: list[AttentionSite], by_index: dict[int, OpRecord], params: set[int],
          context: int) -> list[AttentionSite]:
    """The attention rows' executed figures from the transformed records (costs are the plugins',
    asked at the workload's cache format already)."""
    out = []
    for row in rows:
        core = [by_index[i] for i in row.op_indices if i in by_index]
        kv_read = sum(b for operands in kv_operands(core, params, context).values() for _, b in operands)
        kv_copy = sum(by_index[i].bytes - by_index[i].param_bytes for i in row.kv_op_indices if i in by_index)
        out.append(replace(row, bytes_executed=sum(op.bytes for op in core), kv_read_bytes=kv_read,
                           kv_copy_bytes=kv_copy, kv_bytes_executed=kv_read + kv_copy))
    return out


def _standing_names(name: str) -> list[str]:
    """The names of the same parameter in the skipped layers a run layer stands for
    (rooflinekit.core.skips.stand_ins; empty outside design captures)."""
    skipped = stand_ins()
    if not skipped:
        return []
    by_rep = _by_representative(tuple(skipped.items()))
    out = []
    path = name
    while "." in path:  # each enclosing module path of the parameter, innermost first
        path = path.rpartition(".")[0]
        out.extend(child + name[len(path):] for child in by_rep.get(path, ()))
    return out


@lru_cache(maxsize=8)
def _by_representative(pairs: tuple[tuple[str, str], ...]) -> dict[str, tuple[str, ...]]:
    """representative path -> the skipped layers' paths it stands for."""
    out: dict[str, list[str]] = {}
    for child, rep in pairs:
        out.setdefault(rep, []).append(child)
    return {rep: tuple(children) for rep, children in out.items()}


def _count(n: float) -> str:
    return f"{n / 1e9:.3g}e9" if n >= 1e8 else f"{n:,.0f}"


def transform(cap: CaptureResult, rows: list[AttentionSite], model: torch.nn.Module,
              workload: Workload, deployment: Deployment) -> Transformed:
    """The capture and attention rows of the deployment's weight and KV cache formats and the
    workload's activation dtype, with notes saying what was assumed (unchanged when nothing applies)."""
    if not applies(workload, deployment):
        return Transformed(cap, rows)
    params = cap.param_storages
    notes: list[str] = []
    scale: dict[int, float] = {}
    fp8: set[int] = set()
    stored: dict[str, float] = {}
    sizes: dict[int, float] = {}  # quantized storage -> its bytes as run
    total = cap.param_bytes_total

    fmt = deployment.weight_format(workload.dtype_key)
    group = deployment.group_size(workload.dtype_key)
    if deployment.weight_dtype is not None or workload.dtype_key == "fp8":
        roles = weight_roles(cap, model, deployment.quantize_embeddings)
        before = after = elements = 0.0
        for sid, t in roles.quantized.items():
            old = sizes[sid] = float(t.numel() * t.element_size())
            new = stored_bytes(t, fmt, group)
            if old and new != old:
                scale[sid] = new / old
                stored[cap.param_names[sid]] = new
            copies = 1 + len(_standing_names(cap.param_names[sid]))
            before, after, elements = before + copies * old, after + copies * new, elements + copies * t.numel()
            for name in _standing_names(cap.param_names[sid]) if old and new != old else ():
                stored[name] = new
        total += after - before
        if workload.dtype_key == "fp8":
            fp8 = set(roles.quantized)
        notes.append(weight_note(workload, deployment, (len(roles.quantized), elements, before, after), roles))
    kv = deployment.kv_itemsize(workload.dtype_key)
    if kv is not None:
        by_index = {op.index: op for op in cap.ops}
        cache, missing = _cache_storages(cap, by_index, rows, workload.context)
        changed = 0
        for sid, itemsize in cache.items():
            if kv != itemsize:
                scale[sid] = kv / itemsize
                changed += 1
        recognised = sum(r.recognised for r in rows)
        note = (f"KV cache in {deployment.kv_format(workload.dtype_key)} ({kv} B per element; per-tensor scales, not counted): "
                f"{len(cache)} cache storages of {recognised - len(missing)} attention layers read and written at "
                f"that size, and the architecture minimum (kv_bytes_min) costed at it")
        if missing:
            note += (f"; no cache storage seen in {len(missing)} layers ({', '.join(missing[:3])}"
                     f"{', ...' if len(missing) > 3 else ''}): their executed K/V bytes are as the model ran them")
        notes.append(note)
    if workload.dtype_key == "fp8":
        notes.append("--dtype fp8: the model ran in bf16; the products that read the fp8/int4 weights are placed at "
                     "the fp8 peak, every other op (attention, norms, activations, the kept bf16 layers) at its own "
                     "dtype's; activation bytes are counted at bf16 (their quantization to fp8 is assumed fused "
                     "into the op that produces them)")
    if not scale and not fp8:
        return Transformed(replace(cap, param_bytes_total=total), rows, notes, stored)
    modelled = _modelled_scales(cap, sizes, scale, fp8)
    ops = [_scaled_modelled(op, *modelled[op.module]) if op.kind == "modelled" and op.module in modelled
           else _scaled(op, scale, params, fp8) for op in cap.ops]
    by_index = {op.index: op for op in ops}
    new_rows = _rows(rows, by_index, params, workload.context)
    return Transformed(replace(cap, ops=ops, param_bytes_total=total, notes=list(cap.notes)), new_rows, notes,
                       stored)


def weight_note(workload: Workload, deployment: Deployment, sizes: tuple[int, float, float, float],
                roles: _Roles) -> str:
    """What the weight format did, in one note: the format, its scales, what it applied to (`sizes`:
    tensors, elements, bytes before and after), what was kept."""
    tensors, elements, before, after = sizes
    fmt, group = deployment.weight_format(workload.dtype_key), deployment.group_size(workload.dtype_key)
    if fmt in SCALE_BYTES:
        scale = SCALE_NAMES[SCALE_BYTES[fmt]]
        per = (f"one {scale} scale per {group} elements along each row (the weight's last dimension)"
               if group else f"one {scale} scale per output channel (row)")
        what = f"weights in {fmt}, {per}, symmetric (no zero points)"
    else:
        what = f"weights in {fmt}"
    text = (f"{what}: {tensors} linear/expert weight tensors ({_count(elements)} parameters) read at "
            f"{after / before if before else 1:.4g}x their bytes as run ({before / 1e9:.4g} GB -> "
            f"{after / 1e9:.4g} GB stored)")
    kept = [f"{why} ({', '.join(names[:2])}{', ...' if len(names) > 2 else ''})" for why, names in roles.kept.items()]
    text += "; kept as run: " + ", ".join(kept + ["norms, biases and other 1-D parameters"])
    if not deployment.quantize_embeddings:
        text += " (--quantize-embeddings quantizes the embedding and head too)"
    if roles.already:
        text += (f"; {len(roles.already)} weights the model itself stores in 8 bits or fewer are counted as "
                 f"they run ({', '.join(roles.already[:2])})")
    mode = "the fp8 peak" if workload.dtype_key == "fp8" else f"the {workload.dtype_key} peak (a weight-only format)"
    return text + f"; dequantization FLOPs not counted; products at {mode}"


@dataclass(frozen=True)
class Quantize:
    """The format transform: weights and KV cache at the deployment's formats, fp8 products at the
    fp8 peak (a `rooflinekit.transforms.base.Transform`)."""

    name: str = "quantize"

    def applies(self, ctx: TransformContext) -> bool:
        return applies(ctx.workload, ctx.deployment)

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        done = transform(counted.capture, counted.attention, ctx.model, ctx.workload, ctx.deployment)
        rows = done.attention
        if ctx.deployment.kv_itemsize(ctx.workload.dtype_key) is not None:
            rows = [_costed_at_format(row, ctx) for row in rows]
        return replace(counted, capture=done.capture, attention=rows,
                       stored={**counted.stored, **done.stored}).with_notes(*done.notes)


def _costed_at_format(row: AttentionSite, ctx: TransformContext) -> AttentionSite:
    """`row` with its architecture cost asked again at the deployment's cache format (the same
    question attribution asks; a capture counted without the format, as a planner's design
    captures are, shared between cache formats, gets the format's minimum here)."""
    if row.spec is None or row.cost is None:
        return row
    aw = attention_workload(ctx.workload, row.dtype, row.causal, ctx.deployment, row.shape)
    cost, _ = ctx.host.first(ctx.host.hook.rooflinekit_attention_cost, spec=row.spec, workload=aw)
    return row if cost is None else replace(row, cost=cost)


__all__ = ["Quantize", "Transformed", "applies", "check_hardware", "stored_bytes", "transform", "weight_roles"]
