"""The serving view as a transform: what a serving engine (vLLM, SGLang, TensorRT-LLM) runs for the
same step, restated from the capture of the code as written (`--kernels serving`).

- **Attention by the architecture's serving kernel.** For each recognised attention or state layer,
  the architecture's plugin prices its serving kernel (`rooflinekit_serving_attention`: FlashAttention
  / paged attention for MHA, GQA and MQA, FlashMLA-style absorbed MLA, the state mixers' scan and
  step kernels). The layer's attention ops are dropped: its attention products, every op of the layer
  that reads what they made (scores, masks, softmax; the last product's output, the attention output,
  is kept for the ops that follow), the K/V copies on its K/V path (repeat_kv, a whole-cache
  concatenation) and re-expanding projections (MLA's kv_b_proj over every cached position) with every
  op reading what they made. One modelled record stands for the kernel, at its plugin's price (Q read,
  the K/V cache at its format read once per step whatever the q_len, output written once); a
  re-expanding projection is kept for the new tokens only (query absorption and output un-absorption:
  the same weights over the step's new rows). Ops outside the attention layers that only fed the
  dropped ones (the materialised causal mask) go with them. A layer no plugin prices stays as written.
- **The engine's fused kernels.** Sibling projections of one module reading the same input (q/k/v,
  gate/up, MLA's q_a/kv_a) read it once (merged QKV and gate/up GEMMs); elementwise chains between
  anchors run as one kernel each by the fused view's rule (rooflinekit.stages.fusion: residual add +
  RMSNorm, activation-and-mul, rotary + cache write), each restated as one record named after the
  engine kernel it stands for (`serving.fused_add_rms_norm`, `serving.silu_and_mul`, ...); a
  router's selection (top-k, sort, gather, scatter) fuses with its scores' math into one routing
  kernel (`serving.moe_routing`), as engines' fused routing kernels run it.
- **Layers for a database of measured kernels.** Each record of a priced layer's module carries
  the layer whole (attrs["layer_kernel"]), so a database that times engines' attention modules
  (AIConfigurator's MLA module) can price the layer as one; where it does not, each record is its
  own kernel.
- **Memory**: the dropped ops' storages, and values a fused kernel keeps on chip, are no longer
  allocations of the step (rooflinekit.stages.memory reads the restated capture).

Under `--tp` the attention record is priced at one GPU's spec (the shard hook's), since the parallel
transform after this one passes modelled records unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rooflinekit.core.heads import split_heads
from rooflinekit.core.keys import positions_attended
from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.report import ViewGap, Views
from rooflinekit.core.request import Workload
from rooflinekit.core.revise import revised
from rooflinekit.core.specs import AttentionCost, AttentionSpec
from rooflinekit.stages.attention_ops import (
    copy_growth,
    downstream,
    dtype_itemsize,
    is_attention_product,
    is_projection,
    reexpanding,
)
from rooflinekit.stages.attribute import AttentionSite, attention_workload
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.stages.fusion import kernel_records
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.kernel_times import gemm_dims
from rooflinekit.stages.roofline import op_figures
from rooflinekit.transforms.base import Counted, TransformContext, rebuild_ops

ASSUMPTION = ("serving kernels (--kernels serving): attention by each layer's serving kernel as its "
              "architecture plugin prices it (no mask, repeated or re-expanded K/V materialised; the cache "
              "read once per step), merged QKV and gate/up GEMMs, elementwise chains fused (residual add + "
              "RMSNorm, activation-and-mul, rotary + cache write), a router's top-k with its scores' math in one "
              "routing kernel; docs/accounting.md, Serving view")
#: A router's selection ops, which engines run inside one fused routing kernel (vLLM's topk_softmax
#: and grouped_topk, SGLang's biased_grouped_topk, TensorRT-LLM's fused routing) with the scores'
#: element-wise math around them.
_SELECTION = frozenset({"aten.topk", "aten.sort", "aten.argsort", "aten.gather", "aten.scatter", "aten.scatter_",
                        "aten.scatter_add", "aten.scatter_add_"})
#: The records that start a MoE layer's experts (the moe plugin's module models, their dispatch).
_EXPERTS = ("moe.", "comm.all_to_all")
#: Engine kernel names for a fused chain, by the ops it holds (first match wins).
_CACHE_WRITES = frozenset({"aten.index_copy_", "aten.index_copy", "aten.index_put_", "aten.index_put",
                           "aten.slice_scatter", "aten.copy_"})


def kernel_name(kernel: list[OpRecord]) -> str:
    """The serving engine's name for a fused chain of ops (vLLM's custom ops), by what it holds."""
    names = {op.name for op in kernel}
    if names & _SELECTION:
        return "serving.moe_routing"
    rotary = "aten.neg" in names or "aten.cat" in names
    if rotary and names & _CACHE_WRITES:
        return "serving.rotary_embedding+reshape_and_cache"
    if names & {"aten.rsqrt", "aten.rms_norm", "aten._fused_rms_norm"}:
        return "serving.fused_add_rms_norm" if "aten.add" in names else "serving.rms_norm"
    if names & {"aten.native_layer_norm", "aten.layer_norm"}:
        return "serving.fused_add_layer_norm" if "aten.add" in names else "serving.layer_norm"
    if "aten.mul" in names and names & {"aten.silu", "aten.gelu", "aten.sigmoid"}:
        return "serving.gelu_and_mul" if "aten.gelu" in names else "serving.silu_and_mul"
    if rotary:
        return "serving.rotary_embedding"
    if names & _CACHE_WRITES:
        return "serving.reshape_and_cache"
    return "serving.fused_elementwise"


@dataclass(frozen=True)
class _Layer:
    """One layer's restatement: the ops dropped, the records standing for them (at the index each
    is placed before), the restated row and its attention record."""

    dropped: set[int]
    records: list[tuple[int, OpRecord]]
    row: AttentionSite
    attention: OpRecord


def serving_cost(row: AttentionSite, workload: Workload, ctx: TransformContext) -> tuple[AttentionCost | None, AttentionCost | None]:
    """(the layer's serving cost, one GPU's under --tp) from its architecture plugin, or Nones."""
    aw = attention_workload(workload, row.dtype, row.causal, ctx.deployment, row.shape)
    cost, _ = ctx.host.first(ctx.host.hook.rooflinekit_serving_attention, spec=row.spec, workload=aw)
    if cost is None or ctx.deployment.tp <= 1:
        return cost, cost
    per_gpu, _ = ctx.host.first(ctx.host.hook.rooflinekit_serving_attention, spec=gpu_spec(row, ctx), workload=aw)
    return cost, per_gpu


def gpu_spec(row: AttentionSite, ctx: TransformContext) -> AttentionSpec:
    """The layer's attention on one GPU: its heads split --tp ways (the plugin's shard where it gives one)."""
    if ctx.deployment.tp <= 1:
        return row.spec
    shard, _ = ctx.host.first(ctx.host.hook.rooflinekit_attention_shard, spec=row.spec, tp=ctx.deployment.tp)
    return shard.spec if shard is not None else split_heads(row.spec, ctx.deployment.tp).spec


#: Cached element sizes -> the format a database of measured kernels knows a KV cache by.
_CACHE_FORMATS = {1: "fp8", 2: "bf16", 4: "fp32"}
_ITEMSIZES = {name: size for size, name in _CACHE_FORMATS.items()}


def kernel_declared(row: AttentionSite, workload: Workload, ctx: TransformContext) -> dict | None:
    """The serving kernel's shape on one GPU as a database of measured kernels is asked for it
    (rooflinekit.stages.kernel_times, kind "attention"); None for a fixed-state mixer, and for
    sliding-window or chunked attention, which a query of full attention would misstate."""
    spec = gpu_spec(row, ctx)
    if spec.fixed_state or spec.window or spec.chunk:  # a database's attention kernels attend every position
        return None
    aw = attention_workload(workload, row.dtype, row.causal, ctx.deployment, row.shape)
    kv_len = positions_attended(aw.q_len, aw.context, spec.window, spec.chunk)
    return {"kind": "attention", "dtype": _CACHE_FORMATS.get(aw.cache_itemsize, f"{aw.cache_itemsize}B"),
            "variant": spec.arch, "batch": aw.batch, "q_len": aw.q_len, "kv_len": kv_len,
            "heads": spec.num_heads, "kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim}


def _dropped(row: AttentionSite, ops: list[OpRecord], params: set[int], tokens: int) -> tuple[set[int], list[int], int | None]:
    """The ops of a layer its serving kernel replaces, its re-expanding projections, and its last
    attention product (whose output the kernel writes)."""
    site = sorted(set(row.op_indices) | set(row.kv_op_indices))
    if getattr(row.spec, "fixed_state", False):  # the mixer's kernel: every op of the layer but its projections
        return {i for i in site if not is_projection(ops[i])}, [], None
    products = [i for i in site if is_attention_product(ops[i], params)]
    last = products[-1] if products else None
    reexpand = [i for i in row.kv_op_indices if reexpanding(ops[i], tokens)]
    copies = [i for i in row.kv_op_indices if (copy_growth(ops[i]) or 0) > 1.01 or _whole_cache(ops[i], row, tokens)]
    return downstream(ops, site, set(products) | set(reexpand) | set(copies), last), reexpand, last


def _whole_cache(op: OpRecord, row: AttentionSite, tokens: int) -> bool:
    """A K/V-path op writing more than the step's new K/V (a torch.cat of the whole cache): a paged
    cache writes the new positions only, into their slots."""
    spec = row.spec
    new_kv = tokens * spec.num_heads * max(spec.head_dim, spec.v_head_dim) * 4  # every head, fp32: generous
    return not is_projection(op) and op.bytes_written > new_kv and op.name not in ("aten.index_copy_", "aten.index_put_")


def _projection_record(op: OpRecord, tokens: int, params: set[int]) -> OpRecord:
    """A re-expanding projection over the step's new rows only (absorbed: the same weights applied to
    the new tokens, query absorption and output un-absorption)."""
    share = tokens / op.attrs["rows"]
    act_read = sum(b for sid, b in op.reads if sid not in params)
    return replace(op, name="serving.absorbed_projection", kind="modelled", flops=op.flops * share,
                   bytes_read=op.param_bytes + act_read * share, bytes_written=op.bytes_written * share,
                   reads=(), writes=(), sinks=(),
                   attrs={"assumption": "the re-expanding projection's weights applied to the new tokens only "
                                        "(query absorption and output un-absorption: the serving kernel attends "
                                        "over the cached latent)", "rows": tokens})


def _attention_record(row: AttentionSite, ops: list[OpRecord], dropped: set[int], last: int | None,
                      cost: AttentionCost, act: int, kernel: dict | None = None) -> OpRecord:
    """The serving kernel of a layer as one modelled record: its plugin's FLOPs and bytes, writing
    the attention output where the code's last product wrote it."""
    spec = row.spec
    writes: tuple[tuple[int, float], ...] = ()
    out_bytes = 0.0
    if last is not None and ops[last].writes:
        out_bytes = min(ops[last].bytes_written, cost.bytes_min)
        writes = tuple(ops[last].writes)
    sinks = tuple(dict.fromkeys(s for i in sorted(dropped) for s in ops[i].sinks))
    return OpRecord(
        index=0, name="serving.attention", module=row.module, flops=cost.flops_model,
        bytes_read=cost.bytes_min - out_bytes, bytes_written=out_bytes, dtype=row.dtype, counted=True,
        kind="modelled", writes=writes, sinks=sinks,
        attrs={"assumption": f"the {spec.arch} serving kernel as its plugin prices it: the K/V cache "
                             f"(or state) read once, q read and the output written once",
               "kv_read_bytes": cost.kv_bytes_min, "act_itemsize": act, **({"kernel": kernel} if kernel else {})})


def _layer(row: AttentionSite, ops: list[OpRecord], params: set[int], workload: Workload,
           ctx: TransformContext) -> _Layer | None:
    """A recognised layer restated with its serving kernel; None where no plugin prices one."""
    cost, per_gpu = serving_cost(row, workload, ctx)
    if cost is None or per_gpu is None:
        return None
    dropped, reexpand, last = _dropped(row, ops, params, workload.tokens)
    if not dropped:
        return None
    attention = _attention_record(row, ops, dropped, last, per_gpu, dtype_itemsize(row.dtype),
                                  kernel_declared(row, workload, ctx))
    records = [(i, _projection_record(ops[i], workload.tokens, params)) for i in reexpand]
    records.append((last if last is not None else max(dropped), attention))
    restated = replace(row, cost=cost, flops_executed=cost.flops_model, bytes_executed=cost.bytes_min,
                       kv_bytes_executed=cost.kv_bytes_min, kv_read_bytes=cost.kv_bytes_min, kv_copy_bytes=0.0,
                       kv_reexpand_flops=0.0,
                       notes=list(row.notes) + [f"serving view: attention by the {row.spec.arch} serving kernel "
                                                f"[plugin '{row.plugin}']"])
    return _Layer(dropped, records, restated, attention)


def _inside(module: str, layer: str) -> bool:
    """Whether `module` is `layer` or one of its submodules."""
    return module == layer or module.startswith(layer + ".")


def _mark_layers(ops: list[OpRecord], layers: list[tuple[AttentionSite, OpRecord]],
                 written: list[OpRecord]) -> list[OpRecord]:
    """Each record of an attention layer's module (the site's) whose serving kernel declares its
    shape, marked as part of the whole layer (attrs["layer_kernel"]: kind "attention_layer", the
    kernel's dimensions, the layer's heads on every GPU, the cache's bytes per element and the
    projection weights the code holds there, in elements, from `written`: the capture before the
    view), which a database of measured kernels that times engines' attention modules is asked for
    (rooflinekit.stages.kernel_times, queries_of). Collectives are not part of it."""
    kernels = {row.module: (row, attention.attrs["kernel"]) for row, attention in layers
               if attention.attrs.get("kernel")}
    if not kernels:
        return ops
    found: dict[str, str | None] = {}

    def layer_of(module: str) -> str | None:  # the layer holding `module`, looked up once per name
        if module not in found:
            found[module] = next((m for m in kernels if _inside(module, m)), None) if module else None
        return found[module]

    weights = dict.fromkeys(kernels, 0)
    for op in written:
        dims = gemm_dims(op.name, op.shapes) if op.param_bytes > 0 and layer_of(op.module) else None
        if dims is not None:
            weights[layer_of(op.module)] += dims[1] * dims[2]
    declared = {m: {**kernel, "kind": "attention_layer", "layer": m, "heads_total": row.spec.num_heads,
                    "weights": weights[m], "kv_itemsize": _ITEMSIZES.get(kernel["dtype"], 0)}
                for m, (row, kernel) in kernels.items()}
    out = []
    for op in ops:
        layer = layer_of(op.module)
        if layer is not None and op.kind != "collective" and not op.attrs.get("collective"):
            op = replace(op, attrs={**op.attrs, "layer_kernel": declared[layer]})
        out.append(op)
    return out


def _dead_feeders(ops: list[OpRecord], dropped: set[int], sites: list[str], params: set[int]) -> set[int]:
    """Ops outside the attention layers whose every output is read only by dropped ops (the causal
    mask the model builds for its attention): the engine does not materialise them."""
    readers: dict[int, set[int]] = {}
    for op in ops:
        for sid, _ in op.reads:
            readers.setdefault(sid, set()).add(op.index)
    dead = set(dropped)
    in_site: dict[str, bool] = {}  # per module name: ops outnumber modules a hundredfold
    for op in reversed(ops):
        if op.index in dead or op.kind != "op" or not op.writes or any(sid in params for sid, _ in op.writes):
            continue
        inside = in_site.get(op.module)
        if inside is None:
            inside = in_site[op.module] = any(op.module == s or op.module.startswith(s + ".") for s in sites)
        if inside:
            continue
        if all(readers.get(sid) and readers[sid] <= dead for sid, _ in op.writes):
            dead.add(op.index)
    return dead - dropped


def _merge_siblings(ops: list[OpRecord], params: set[int]) -> list[OpRecord]:
    """Sibling projections (one parent module) reading the same input storage read it once: the
    engine's merged QKV and gate/up GEMMs (the later siblings' reads of the input dropped). Each
    sibling names its merged GEMM (attrs["siblings"]: the parent and input), which a database of
    measured kernels is asked for (rooflinekit.stages.kernel_times.queries_of)."""
    inputs = [[(op.module.rpartition(".")[0], sid) for sid, _ in op.reads if sid >= 0 and sid not in params]
              if op.kind == "op" and is_projection(op) else [] for op in ops]
    readers: dict[tuple[str, int], int] = {}
    for keys in inputs:
        for key in keys:
            readers[key] = readers.get(key, 0) + 1
    seen: set[tuple[str, int]] = set()
    out = []
    for op, keys in zip(ops, inputs, strict=True):
        if keys:
            keep = [(sid, nbytes) for sid, nbytes in op.reads
                    if not (sid >= 0 and sid not in params and (op.module.rpartition(".")[0], sid) in seen)]
            seen.update(keys)
            group = next((key for key in keys if readers[key] > 1), None)
            attrs = op.attrs if group is None else {**op.attrs, "siblings": f"{group[0]}#{group[1]}"}
            if len(keep) != len(op.reads) or group is not None:
                op = replace(op, reads=tuple(keep), bytes_read=sum(b for _, b in keep), attrs=attrs)
        out.append(op)
    return out


def routing_ops(ops: list[OpRecord]) -> frozenset[int]:
    """Positions of a MoE router's selection ops, which the serving view fuses with the scores'
    element-wise math into one routing kernel: in a module that takes a top-k after a projection of
    its own (or of a submodule), its top-k, sorts, gathers and scatters up to the next kernel that is
    not element-wise, where that kernel is the experts' (a module model's `moe.` record, or its
    dispatch). A top-k that does not feed experts (a sparse-attention indexer's) stays as it is."""
    out: set[int] = set()
    for module in dict.fromkeys(op.module for op in ops if op.name == "aten.topk" and op.kind == "op"):
        first = next((i for i, op in enumerate(ops) if is_projection(op) and _inside(op.module, module)), None)
        if first is None:
            continue
        picked, end = [], None
        for i in range(first + 1, len(ops)):
            op = ops[i]
            if op.kind != "op" or is_projection(op):
                end = op
                break
            if op.module == module and op.name in _SELECTION:
                picked.append(i)
        if end is not None and end.name.startswith(_EXPERTS):
            out.update(picked)
    return frozenset(out)


def _fused(ops: list[OpRecord], params: set[int]) -> tuple[list[OpRecord], dict[int, int]]:
    """The elementwise chains fused (one record per kernel), a router's with its selection ops,
    renumbered; old index -> new."""
    merged = kernel_records(ops, params, kernel_name, routing_ops(ops))
    index: dict[int, int] = {}
    out = []
    for op in merged:
        members = op.attrs.get("fused_from") if op.name.startswith("serving.") and op.kind == "op" else None
        for old in members or (op.index,):
            index[old] = len(out)
        out.append(revised(op, index=len(out)))
    return out, index


def _remap(row: AttentionSite, index: dict[int, int]) -> AttentionSite:
    return replace(row, op_indices=list(dict.fromkeys(index[i] for i in row.op_indices if i in index)),
                   kv_op_indices=list(dict.fromkeys(index[i] for i in row.kv_op_indices if i in index)))


def serve(counted: Counted, ctx: TransformContext) -> Counted:
    """`counted` in the serving view (module docstring)."""
    cap: CaptureResult = counted.capture
    ops, params, workload = cap.ops, cap.param_storages, ctx.workload
    drop: set[int] = set()
    inserts: dict[int, list[OpRecord]] = {}
    layers: dict[int, _Layer] = {}
    unpriced = []
    for row in counted.attention:
        done = _layer(row, ops, params, workload, ctx) if row.recognised else None
        if done is None:
            unpriced.append(row)
            continue
        layers[id(row)] = done
        drop |= done.dropped
        for before, record in done.records:
            inserts.setdefault(before, []).append(record)
    drop |= _dead_feeders(ops, drop, [r.module for r in counted.attention], params)
    out, index, at = rebuild_ops(ops, drop, inserts)
    rows = []
    for row in counted.attention:
        layer = layers.get(id(row))
        rows.append(_remap(row, index) if layer is None
                    else replace(layer.row, op_indices=[at[id(layer.attention)]], kv_op_indices=[]))
    fused, index2 = _fused(_merge_siblings(out, params), params)
    rows = [_remap(r, index2) for r in rows]
    fused = _mark_layers(fused, [(row, layers[id(row)].attention) for row in counted.attention if id(row) in layers],
                         ops)
    notes = [ASSUMPTION]
    if unpriced:
        notes.append(f"serving view: {len(unpriced)} attention layer(s) no plugin prices a serving kernel for "
                     f"(e.g. {unpriced[0].module}): left as written")
    return replace(counted, capture=replace(cap, ops=fused, notes=list(cap.notes)), attention=rows).with_notes(*notes)


@dataclass(frozen=True)
class Serving:
    """The serving view as a `Transform`: applies where the deployment's kernels are "serving"."""

    name: str = "serving kernels"

    def applies(self, ctx: TransformContext) -> bool:
        return ctx.deployment.kernels == "serving"

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        return serve(counted, ctx)


#: Module rows of the gap: cut to this depth ("model.layers.*.self_attn"), layers merged.
GAP_DEPTH = 4


def _module_times(counted: Counted, hw: HardwareSpec) -> dict[str, float]:
    """Each module's (layers merged) sum of op time bounds."""
    out: dict[str, float] = {}
    for op in counted.capture.ops:
        name = layer_pattern(".".join(op.module.split(".")[:GAP_DEPTH])) if op.module else "(root)"
        t = op_figures(op.flops, op.bytes, hw.peak(op.dtype), hw.memory_bandwidth)[2]
        out[name] = out.get(name, 0.0) + t
    return out


def _why(module: str, as_written: Counted) -> str:
    """Why the code as written spends more (or less) time in `module` than a serving engine, in words."""
    pattern = re.compile("^" + re.escape(module).replace(r"\*", r"\d+") + r"(\.|$)")
    rows = [r for r in as_written.attention if r.recognised and pattern.match(r.module)]
    if any(r.kv_reexpand_flops for r in rows):
        what = f"{next(r.spec.arch for r in rows if r.kv_reexpand_flops).upper()} cache"
        return (f"the code re-expands the {what} every step (a projection over every cached position) where "
                "the serving kernel reads the cache once")
    amp = max((r.amplification or 0.0 for r in rows), default=0.0)
    if amp > 1.5:
        return (f"the code moves {amp:.3g}x the K/V cache (repeated or copied K/V heads, materialised "
                "scores and mask) where the serving kernel reads it once")
    if rows:
        return "the code materialises scores, mask and softmax where the serving kernel keeps them on chip"
    return "the engine fuses this module's elementwise ops and merges its projections into fewer kernels"


def views_of(mine: tuple[Counted, float], theirs: tuple[Counted, float], kernels: str, hw: HardwareSpec) -> Views:
    """The report's `views`: (counted, predicted step) of this report's view and of the other one."""
    serving, written = (mine, theirs) if kernels == "serving" else (theirs, mine)
    t_serving, t_written = _module_times(serving[0], hw), _module_times(written[0], hw)
    gap = None
    names = set(t_serving) | set(t_written)
    if names:
        module = max(sorted(names), key=lambda n: abs(t_written.get(n, 0.0) - t_serving.get(n, 0.0)))
        gap = ViewGap(module=module, as_written_s=t_written.get(module, 0.0), serving_s=t_serving.get(module, 0.0),
                      why=_why(module, written[0]))
    return Views(as_written_step_s=written[1], serving_step_s=serving[1], largest_gap=gap)
