"""Planned parallelism: one GPU's share of a single-GPU model under tensor and expert parallelism.

`rooflinekit profile model.py --tp N [--ep M]` captures the single-GPU model as usual, then:

1. a TP plan maps module paths to styles (plugins' `rooflinekit_tp_plan`, the built-in one reading
   a transformers model's `tp_plan` and filling the rest with `structural_tp_plan`:
   rooflinekit.transforms.tp_plan);
2. `shard_capture` (a pure function: records in, per-GPU records out) scales every op by the share
   of its data one GPU holds, and inserts the collectives the split implies;
3. `shard_attention` restates each attention layer per GPU as its architecture's plugin says
   (`rooflinekit_attention_shard`: heads / N, KV heads split or replicated, the MLA latent
   replicated) and re-costs it with the attention plugins.

Styles: "colwise" (output features split: FLOPs, weights and output / N, input whole),
"rowwise" (input features split: FLOPs, weights and input / N, output whole, then an all-reduce),
"vocab" (an embedding split over the vocabulary: each GPU gathers the rows it holds, then an
all-reduce), "colwise_gather" (an output head split over the vocabulary: colwise, then an
all-gather of the logits), "replicate" (run whole on every GPU: the default), "experts" (left to
the module model: plugins/moe.py reads the deployment's `tp`/`ep` and emits one GPU's
records itself).

Every other op follows its data: a tensor's *share* is the fraction of it one GPU holds (1 for
replicated tensors, 1/N for a colwise output, max(1/N, 1/H_kv) for K/V heads when N > H_kv, 1 for
the MLA latent computed by a replicated down projection). An op reads each input at its share,
and its output's share (and its FLOPs) is the smallest share among its inputs: attention on
1/N of the heads against a replicated latent runs 1/N of the FLOPs and reads the whole latent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from rooflinekit.core.model_facts import cached, fact, module_tree
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.specs import AttentionSpec
from rooflinekit.stages import collectives
from rooflinekit.stages.attribute import AttentionSite, attention_workload, attribute_attention
from rooflinekit.stages.capture import CaptureResult, OpRecord
from rooflinekit.transforms.base import Counted, TransformContext
from rooflinekit.transforms.tp_plan import (
    ShardPlan,
    attention_shard,
    attention_shards,
    build_shard_plan,
    checked_tp_plan,
    resolve_tp_plan,
    structural_tp_plan,
)

ASSUMPTIONS = (
    "planned tensor parallelism: colwise linears split their output features (FLOPs, weights and "
    "output / N), rowwise linears their input features (FLOPs, weights and input / N) followed by "
    "one all-reduce of the output; other ops follow their data (the share of each tensor one GPU "
    "holds); norms, residuals and embeddings' positions run whole on every GPU",
    "attention: heads split N ways; K/V heads split while N <= H_kv and replicate beyond (each GPU "
    "holds max(1, H_kv/N) KV heads); the MLA latent cache (and its down projections) is replicated: "
    "every GPU holds and reads the whole latent",
    collectives.ASSUMPTION,
)

_GATHER_OPS = ("aten.embedding", "aten._embedding_bag", "aten.index_select")


# -- the transform ----------------------------------------------------------------------------


def _collective(kind: str, group: int, message: float, op: OpRecord, note: str) -> OpRecord:
    return OpRecord(
        index=0, name=f"comm.{kind}", module=op.module, flops=0.0, bytes_read=0.0, bytes_written=0.0,
        dtype=op.dtype, counted=True, kind="collective", shapes=op.shapes.split(",")[0] if op.shapes else "",
        attrs=collectives.attrs(kind, group, message, "planned", assumption=note),
    )


_NOTES = {
    "rowwise": "rowwise split: each GPU holds a partial sum of the full output; a ring all-reduce sums them",
    "vocab": "vocab-parallel embedding: each GPU gathers the rows it holds (zeros elsewhere); an all-reduce sums them",
    "colwise_gather": "vocab-parallel output head: each GPU computes its slice of the logits; an all-gather joins them",
}


def shard_capture(cap: CaptureResult, plan: ShardPlan) -> CaptureResult:
    """One GPU's records: every op scaled by the share of its data one GPU holds, collectives added.

    Modelled records (module models) and captured collectives pass unchanged: module models read
    the `_tp`/`_ep` options and emit one GPU's share themselves. Records are renumbered.
    """
    tp = plan.tp
    share: dict[int, float] = {}  # storage -> share of it one GPU holds
    params = cap.param_storages
    owners = cap.param_owners

    def param_share(sid: int) -> float:
        owner = owners.get(sid)
        style = plan.styles.get(owner) if owner is not None else None
        if style in ("colwise", "colwise_gather", "vocab"):
            return plan.fractions.get(owner, 1.0 / tp)
        if style == "rowwise":
            return 1.0 / tp
        return 1.0

    def of(sid: int) -> float:
        if sid in params:
            return param_share(sid)
        return share.get(sid, 1.0) if sid >= 0 else 1.0

    out: list[OpRecord] = []
    for op in cap.ops:
        if op.kind in ("modelled", "collective"):
            out.append(replace(op, attrs=dict(op.attrs)))
            continue
        style = plan.styles.get(op.module)
        product = op.param_bytes > 0 and op.flops > 0
        comm: tuple[str, float] | None = None
        write_scale: float
        if style in ("colwise", "colwise_gather") and product:
            f = plan.fractions.get(op.module, 1.0 / tp)
            read_scale = {sid: (f if sid in params else of(sid)) for sid, _ in op.reads}
            flop_scale = write_scale = out_share = f
            if style == "colwise_gather":
                comm = ("all_gather", op.bytes_written)
        elif style == "rowwise" and product:
            read_scale = {sid: of(sid) for sid, _ in op.reads}
            flop_scale, write_scale, out_share = 1.0 / tp, 1.0, 1.0
            comm = ("all_reduce", op.bytes_written)
        elif style == "vocab" and op.name in _GATHER_OPS:
            read_scale = {sid: (1.0 / tp if sid in params else of(sid)) for sid, _ in op.reads}
            flop_scale, write_scale, out_share = 1.0, 1.0, 1.0
            comm = ("all_reduce", op.bytes_written)
        else:
            read_scale = {sid: of(sid) for sid, _ in op.reads}
            f = min(read_scale.values()) if read_scale else 1.0
            flop_scale = write_scale = out_share = f
        reads = tuple((sid, b * read_scale[sid]) for sid, b in op.reads)
        writes = tuple((sid, b * write_scale) for sid, b in op.writes)
        attrs = dict(op.attrs)
        if product and style in ("colwise", "colwise_gather"):
            attrs["shard"] = {"n": flop_scale}  # the share of the product's columns (n) this GPU computes
        elif product and style == "rowwise":
            attrs["shard"] = {"k": flop_scale}  # the share of its inner dimension (k)
        if op.kind == "fused" and "kv_read_bytes" in attrs and op.sinks:
            attrs["kv_read_bytes"] = attrs["kv_read_bytes"] * sum(of(s) for s in op.sinks) / len(op.sinks)
        if "operand_sids" in attrs and "operand_bytes" in attrs:
            attrs["operand_bytes"] = [b * of(s) for s, b in zip(attrs["operand_sids"], attrs["operand_bytes"], strict=False)]
        new = replace(
            op, flops=op.flops * flop_scale, bytes_read=sum(b for _, b in reads),
            bytes_written=sum(b for _, b in writes), reads=reads, writes=writes, attrs=attrs,
            param_bytes=sum(b for sid, b in reads if sid in params),
        )
        for sid, _ in op.writes:
            if sid >= 0:
                share[sid] = out_share
        out.append(new)
        if comm is not None and tp > 1:
            out.append(_collective(comm[0], tp, comm[1], op, _NOTES[style]))
    for i, op in enumerate(out):
        op.index = i
    return replace(cap, ops=out, notes=list(cap.notes))


def serving_rows(cap: CaptureResult, rows: list[AttentionSite]) -> list[AttentionSite]:
    """The serving view's attention rows on one GPU's records: each layer's serving kernel record
    (priced per GPU by rooflinekit.transforms.serving) found again by module, its figures the row's."""
    records = {op.module: op for op in cap.ops if op.kind == "modelled" and op.name == "serving.attention"}
    index = {id(op): i for i, op in enumerate(cap.ops)}
    out = []
    for row in rows:
        op = records.get(row.module)
        if op is None:
            out.append(replace(row, op_indices=[], kv_op_indices=[]))
            continue
        kv = op.attrs.get("kv_read_bytes", row.kv_bytes_executed)
        out.append(replace(row, flops_executed=op.flops, bytes_executed=op.bytes, kv_bytes_executed=kv,
                           kv_read_bytes=kv, op_indices=[index[id(op)]], kv_op_indices=[]))
    return out


def shard_attention(rows: list[AttentionSite], tp: int, workload: Workload, host,
                    deployment: Deployment | None = None) -> tuple[list[AttentionSite], list[dict]]:
    """Per-GPU attention rows (one GPU's spec as the architecture's plugin says: heads / N; KV
    heads split or replicated; MLA latent replicated), re-costed by the attention plugins, and a
    summary per layer for the report."""
    out, summary = [], []
    for row in rows:
        if not row.recognised or tp == 1:
            out.append(row)
            continue
        spec = row.spec
        shard = attention_shard(spec, tp, host, row.module)
        new_spec, kv, note = shard.spec, shard.kv, shard.note
        heads, kv_heads = new_spec.num_heads, new_spec.num_kv_heads
        aw = attention_workload(workload, row.dtype, row.causal, deployment, row.shape)
        cost, _ = host.first(host.hook.rooflinekit_attention_cost, spec=new_spec, workload=aw)
        new = replace(row, spec=new_spec, cost=cost, notes=list(row.notes) + ([note] if note else []))
        out.append(new)
        summary.append({
            "module": row.module, "arch": spec.arch, "num_heads": heads, "num_heads_total": spec.num_heads,
            "num_kv_heads": kv_heads, "num_kv_heads_total": spec.num_kv_heads, "kv_heads": kv,
            "cache_bytes_per_token": cost.cache_bytes_per_token if cost else None,
            "intensity_min": new.intensity_min,
        })
    return out, summary


def weights_per_gpu(model: torch.nn.Module, plan: ShardPlan | None, par: Deployment,
                    stored: dict[str, float] | None = None, only: Callable[[str], bool] | None = None) -> float:
    """Parameter bytes one GPU holds: split modules' share, experts / EP (or / TP), the rest whole.
    `stored`: parameter name -> its bytes in a quantized format (rooflinekit.transforms.quantize).
    `only`: count the parameters whose name it accepts (a pipeline stage's; a tied parameter is
    counted under each of its names it accepts once, so each stage that uses it holds it)."""
    stored = stored or {}
    total, seen = 0.0, set()
    for name, key, owner, dim, experts, size in cached(model, fact("parameter_sizes"), lambda: _parameter_sizes(model)):
        if key in seen or (only is not None and not only(name)):
            continue
        seen.add(key)
        frac = 1.0
        if dim == 3 and (par.ep > 1 or par.tp > 1):  # per-expert weights [E, out, in]: E + R slots over EP
            frac = (experts + par.redundant_experts) / (experts * par.ep) if par.ep > 1 else 1.0 / par.tp
        elif plan is not None:
            style = plan.styles.get(owner)
            if style in ("colwise", "colwise_gather", "vocab"):
                frac = plan.fractions.get(owner, 1.0 / plan.tp)
            elif style == "rowwise":
                frac = 1.0 / plan.tp
        total += stored.get(name, size) * frac
    return total


def _parameter_sizes(model: torch.nn.Module) -> list[tuple[str, tuple, str, int, int, int]]:
    """(name, storage key, owner path, dims, first dimension, bytes) of every parameter name,
    duplicates included."""
    out = []
    for name, p in model.named_parameters(remove_duplicate=False):
        key = (p.data_ptr() if p.device.type != "meta" else id(p), tuple(p.shape))
        out.append((name, key, name.rpartition(".")[0], p.dim(), int(p.shape[0]) if p.dim() else 1,
                    p.numel() * p.element_size()))
    return out


@dataclass
class Planned:
    """The per-GPU capture and attention rows, and what the report says about the split."""

    capture: CaptureResult
    attention: list[AttentionSite]
    section: dict

    @property
    def headline(self) -> str:
        s = self.section
        return (f"planned parallelism: every figure is one GPU's share under tensor parallel {s['tp']}, "
                f"expert parallel {s['ep']} (see `parallel` and docs/parallel.md)")


def _tp_plan(model: torch.nn.Module, modules: dict, attention: dict[str, AttentionSpec], workload: Workload, host,
             par: Deployment) -> tuple[ShardPlan, list[str]]:
    """The TP plan: plugins' answers first, rooflinekit's structural rules for the rest."""
    styles: dict[str, str] = {}
    notes: list[str] = []
    sources: list[str] = []
    shards = attention_shards(attention, par.tp, host)  # how each architecture splits
    answers = host.each(host.hook.rooflinekit_tp_plan, model=model, workload=workload, deployment=par,
                            attention=attention, shards=shards)
    for answer, plugin in answers:
        resolved, more = resolve_tp_plan(checked_tp_plan(answer, plugin, host), modules)
        notes.extend(more)
        for path, style in resolved.items():
            styles.setdefault(path, style)
        sources.append(plugin)
    # rooflinekit's structural rules fill in whatever no plugin named (the built-in `parallel`
    # plugin answers with them already; they also stand in when it is not installed)
    rules, _ = resolve_tp_plan(structural_tp_plan(model, attention, host, shards), modules)
    added = {p: st for p, st in rules.items() if p not in styles}
    if added:
        styles.update(added)
        sources.append("structural rules")
    plan = build_shard_plan(styles, modules, attention, par.tp, host, shards)
    plan.sources, plan.notes = sources, list(notes)
    return plan, notes


def plan_parallel(cap: CaptureResult, rows: list[AttentionSite], model: torch.nn.Module,
                  workload: Workload, host, par: Deployment, stored: dict[str, float] | None = None) -> Planned:
    """Apply planned TP/EP to a single-GPU capture (see the module docstring); `stored` gives the
    quantized bytes of parameters by name (weights_per_gpu)."""
    modules = cached(model, fact("modules"), lambda: dict(module_tree(model)))
    attention = {("" if r.module == "(root)" else r.module): r.spec for r in rows if r.spec is not None}
    notes: list[str] = []
    plan = None
    if par.tp > 1:
        # the plan depends on the model, the layers' architectures and the layout (tp, ep: the hook
        # documents it so), not on the step's batch or context nor the formats: computed once per
        # model and layout while its facts are cached (a sweep, a plan)
        key = (*fact("tp_plan"), id(host), par.tp, par.ep, replace(workload, batch=0, context=0, decode_q_len=1),
               repr(sorted(attention.items())))
        plan, planned_notes = cached(model, key, lambda: _tp_plan(model, modules, attention, workload, host, par))
        notes = list(planned_notes)
        cap = shard_capture(cap, plan)
        styles = plan.styles
        for path, style in styles.items():
            if style == "experts" and any(op.module == path and op.kind not in ("modelled", "collective")
                                          for op in cap.ops):
                notes.append(f"{path}: experts not modelled by a plugin: their ops ran whole (not split)")
    if par.ep > 1 and not any(op.kind == "modelled" and op.name.startswith("moe.") for op in cap.ops):
        notes.append(f"--ep {par.ep}: no modelled expert layers in this model: nothing split across experts")

    if par.kernels == "serving":  # the serving view's kernels are records: its rows carried over
        per_gpu_rows = serving_rows(cap, rows)
    else:
        per_gpu_rows = attribute_attention(cap, model, workload, host, par)
    per_gpu_rows, att = shard_attention(per_gpu_rows, par.tp, workload, host, par)
    counts: dict[str, int] = {}
    if plan is not None:
        for style in plan.styles.values():
            counts[style] = counts.get(style, 0) + 1
    section = {
        "tp": par.tp,
        "ep": par.ep,
        "gpus": max(par.tp, par.ep),
        "plan_sources": list(plan.sources) if plan else [],
        "plan_counts": counts,
        "plan": [{"module": p, "style": s, "fraction": plan.fractions.get(p, 1.0 / par.tp if s == "rowwise" else 1.0)}
                 for p, s in plan.styles.items()] if plan else [],
        "attention": att,
        "kv_heads_replicated": sorted({a["module"] for a in att if a["kv_heads"] == "replicated"}),
        "weights_per_gpu": cached(model, (*fact("weights_per_gpu"), id(plan), par, tuple(sorted((stored or {}).items()))),
                                  lambda: weights_per_gpu(model, plan, par, stored)),
        "batch_meaning": ("the batch is per GPU (data-parallel attention): each GPU's attention runs "
                          "its own batch, the experts are shared" if par.ep > 1 and par.tp == 1 else
                          "the batch is shared by the group: every GPU sees every sequence, each "
                          "computing its share of the heads and columns"),
        "assumptions": list(ASSUMPTIONS),
        "notes": notes,
    }
    return Planned(capture=cap, attention=per_gpu_rows, section=section)


@dataclass(frozen=True)
class ParallelShard:
    """The parallel transform: one GPU's share of the model under the deployment's TP/EP (a
    `rooflinekit.transforms.base.Transform`)."""

    name: str = "parallel"

    def applies(self, ctx: TransformContext) -> bool:
        return ctx.deployment.parallel

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        planned = plan_parallel(counted.capture, counted.attention, ctx.model, ctx.workload, ctx.host,
                                ctx.deployment, counted.stored)
        return replace(counted, capture=planned.capture, attention=planned.attention,
                       parallel=planned.section).with_notes(planned.headline)
