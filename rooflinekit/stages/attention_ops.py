"""Which ops of a capture are attention, and which carry its K/V: attention products and the sites
that run them, the K/V operands and the ops that produced them, projections that re-expand cached
positions, and copies that repeat K/V (how they are read: rooflinekit.stages.attribute's module doc)."""

from __future__ import annotations

from bisect import bisect_left

from rooflinekit.stages.capture import CaptureResult, OpRecord


def is_attention_product(op: OpRecord, params: set[int]) -> bool:
    """An attention product: a fused attention call, or a matrix product of two activations (QK^T,
    PV; neither operand a parameter)."""
    if op.kind == "fused" and op.name.endswith("scaled_dot_product_attention"):
        return True
    if not op.sinks:  # most ops: no activation operands to a product
        return False
    sids = op.attrs.get("operand_sids")
    return sids is not None and len(sids) == 2 and not (set(sids) & params)


#: Ops that copy a tensor to another dtype: a parameter cast this way is still a weight.
_WEIGHT_CASTS = ("aten._to_copy", "aten.to", "aten.copy_")


def weight_storages(cap: CaptureResult) -> set[int]:
    """The parameters' storages and those of their casts (LongCat-Flash's router multiplies by
    `weight.type(torch.float32)`: a product with it is a projection, not attention)."""
    params = cap.param_storages
    casts = {sid for op in cap.ops if op.name in _WEIGHT_CASTS and op.reads and op.writes
             and all(r in params for r, _ in op.reads) for sid, _ in op.writes}
    return params | casts if casts else params


def find_sites(cap: CaptureResult) -> dict[str, list[OpRecord]]:
    """Module path -> its own ops, for every module that ran attention."""
    by_module: dict[str, list[OpRecord]] = {}
    sites: set[str] = set()
    params = weight_storages(cap)
    for op in cap.ops:
        ops = by_module.get(op.module)
        if ops is None:
            ops = by_module[op.module] = []
        ops.append(op)
        # only a fused call or a product of activations (sinks) can be one: most ops are not asked
        if (op.sinks or op.kind == "fused") and op.module not in sites and is_attention_product(op, params):
            sites.add(op.module)
    return {path: ops for path, ops in by_module.items() if path in sites}


def kv_operands(ops: list[OpRecord], params: set[int], context: int) -> dict[int, list[tuple[int, float]]]:
    """op index -> [(storage, bytes read)] of its K/V operands, for the site's attention products."""
    derived: set[int] = set()  # storages computed from an attention product (scores, probs)
    result: dict[int, list[tuple[int, float]]] = {}
    for op in ops:
        reads = {sid for sid, _ in op.reads}
        if is_attention_product(op, params):
            if op.kind == "fused":
                kv_bytes = op.attrs.get("kv_read_bytes", 0.0)
                sids = list(op.sinks)
                per = kv_bytes / max(1, len(sids))
                result[op.index] = [(s, per) for s in sids]
            else:
                sids = op.attrs["operand_sids"]
                nbytes = op.attrs["operand_bytes"]
                free = op.attrs["free_dims"]
                cands = [i for i in (0, 1) if sids[i] not in derived]
                if len(cands) == 2:
                    spanning = [i for i in cands if free[i] == context]
                    cands = spanning if len(spanning) == 1 else [1]
                result[op.index] = [(sids[i], nbytes[i]) for i in cands]
            derived.update(s for s, _ in op.writes)
        elif reads & derived:
            derived.update(s for s, _ in op.writes)
    return result


def _kv_path(ops: list[OpRecord], sinks: dict[int, list[tuple[int, float]]], params: set[int],
             tokens: int) -> list[int]:
    """Indices of the ops under the site that produced the K/V operands (storages walked backwards).

    `ops` are all ops of the site's module subtree. The walk stops at a projection of this step's
    `tokens` (k_proj, a fused qkv: they make the new K/V from hidden states, and their traffic is
    theirs). It passes through a projection over more rows than that (a transformers MLA layer
    re-expanding its whole latent cache with kv_b_proj every step is K/V traffic of the
    implementation), of which only the activation bytes count as K/V bytes.
    """
    position = {op.index: i for i, op in enumerate(ops)}
    products = set(sinks)
    writers: dict[int, list[int]] = {}  # storage -> positions of the ops writing it (not products), ascending
    for i, op in enumerate(ops):
        if op.index not in products:
            for s, _ in op.writes:
                at = writers.setdefault(s, [])
                if not at or at[-1] != i:
                    at.append(i)
    chosen: set[int] = set()
    for sink_index, operands in sinks.items():
        frontier = [(sid, position[sink_index]) for sid, _ in operands]
        while frontier:
            sid, before = frontier.pop()
            at = writers.get(sid, ())
            for i in reversed(at[:bisect_left(at, before)]):  # the writers of sid before, latest first
                op = ops[i]
                if is_projection(op) and not reexpanding(op, tokens):
                    break  # the new K/V, made from hidden states: the walk ends here
                if op.index not in chosen:
                    chosen.add(op.index)
                    frontier.extend((s, i) for s, _ in op.reads if s not in params)
    return sorted(chosen)


def _subtrees(ops: list[OpRecord], sites: set[str]) -> dict[str, list[OpRecord]]:
    """Site path -> the ops of its module and all its descendants, in execution order."""
    out: dict[str, list[OpRecord]] = {s: [] for s in sites}
    owners: dict[str, list[list[OpRecord]]] = {}  # module path -> the lists of the sites above it
    for op in ops:
        lists = owners.get(op.module)
        if lists is None:
            lists = owners[op.module] = []
            path = op.module
            while path:
                if path in out:
                    lists.append(out[path])
                path = path.rpartition(".")[0]
        for site_ops in lists:
            site_ops.append(op)
    return out


def reexpanded_flops(op: OpRecord, tokens: int) -> float:
    """FLOPs of a projection re-applied to cached positions: its rows less this step's new tokens,
    whose projection the architecture needs (MLA's kv_b_proj of the new latent is model FLOPs)."""
    rows = op.attrs.get("rows", 0)
    return op.flops * (rows - tokens) / rows if rows > tokens else 0.0


def is_projection(op: OpRecord) -> bool:
    """A product with a parameter operand (q/k/v/o projections, MLA's W_UK run inside a module)."""
    return op.param_bytes > 0 and op.flops > 0


def reexpanding(op: OpRecord, tokens: int) -> bool:
    """A projection re-applied to cached positions: over more rows than this step's `tokens` (a
    transformers MLA layer's kv_b_proj expanding its whole latent cache every step), where the
    architecture needs it for the new tokens only."""
    return is_projection(op) and op.attrs.get("rows", 0) > tokens


def downstream(ops: list[OpRecord], site: list[int], dropped: set[int], keep: int | None = None) -> set[int]:
    """`dropped` and every op of `site` that reads or writes what a dropped op wrote, transitively
    (the copies and scores built from re-expanded or replaced K/V); `keep`'s writes stay untainted
    (the attention output, which the ops after the layer read)."""
    dropped = set(dropped)
    tainted = {sid for i in dropped if i != keep for sid, _ in ops[i].writes}
    for i in site:
        if i in dropped:
            continue
        op = ops[i]
        if any(sid in tainted for sid, _ in op.reads) or any(sid in tainted for sid, _ in op.writes):
            dropped.add(i)
            if i != keep:
                tainted.update(sid for sid, _ in op.writes)
    return dropped


#: Copies that may repeat K/V (repeat_kv's expand + reshape is a clone of a stride-0 view).
_REPEATS = ("aten.clone", "aten.repeat", "aten.repeat_interleave", "aten.index_select", "aten.expand_copy",
            "aten.index")
#: Copies that may also change the dtype (a cast widens the bytes, not the elements).
_CASTS = ("aten._to_copy", "aten.copy_")


def _numels(shapes: str) -> list[int]:
    """Element counts of an op's inputs from its shapes string ("1x16x1x128,1x1x1x128"; "scalar": 1)."""
    out = []
    for shape in shapes.split(",") if shapes else ():
        n = 1
        for dim in shape.split("x"):
            n *= int(dim) if dim.isdigit() else 1
        out.append(n)
    return out


def copy_growth(op: OpRecord) -> float | None:
    """Elements an op's copy wrote per distinct element it read (>1: a repeat), or None when it is not
    a copy. A dtype cast is not a repeat: for a cast the input's own elements are compared with the
    storage read (an expanded input reads fewer), at the input's element size (`op.dtype`)."""
    if not op.bytes_read:
        return None
    if op.name in _REPEATS:
        return op.bytes_written / op.bytes_read
    if op.name in _CASTS:
        numels = _numels(op.shapes)
        if not numels:
            return None
        if op.name == "aten.copy_":  # copy_(dst, src): a src broadcast over dst repeats it
            return numels[0] / numels[1] if len(numels) > 1 and numels[1] else None
        return numels[0] * dtype_itemsize(op.dtype) / op.bytes_read
    return None


def _repeat_factor(ops: list[OpRecord], kv_path: list[int], by_index: dict[int, OpRecord]) -> float | None:
    """Largest growth among K/V-path copies (`copy_growth`): >1 means K/V were repeated before use."""
    best = None
    for i in kv_path:
        ratio = copy_growth(by_index[i])
        if ratio is not None and ratio > 1.01:
            best = max(best or 0, ratio)
    return best


def dtype_itemsize(dtype_key: str) -> int:
    """Bytes per element of a dtype key (2 for a key not listed)."""
    return {"fp32": 4, "tf32": 4, "fp64": 8, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}.get(dtype_key, 2)
