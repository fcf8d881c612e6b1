"""Absorbed MLA as a transform of a capture: naive MLA layers restated in the absorbed form.

A naive MLA layer (transformers' DeepSeek code) up-projects the whole cached latent into per-head
K and V every step (`kv_b_proj` over every cached position) and attends over them. The absorbed
form (DeepSeek's `attn_impl="absorb"`, FlashMLA) folds `kv_b_proj`'s K half into the query and its
V half into the output, and attends over the latent itself. For each naive layer this transform:

- removes the re-expansion (the layer's K/V-path projections over more rows than the step's new
  tokens), every op of the layer that reads or writes what it produced (the expanded K/V copies),
  and the attention products over them (scores, softmax; the last product's output, the attention
  output, is kept for the ops that follow);
- inserts two modelled records in their place: `mla.absorb_projections`, the same weights applied
  to the step's new tokens only (the captured projection's FLOPs x new tokens / rows; its weights
  read once; the absorbed query in and the latent output out: T x heads x (nope + rank) elements
  read, T x heads x (rank + v) written), and `mla.absorbed_attention`, the attention plugin's cost
  of the absorbed spec (model FLOPs; the latent cache read once, q read and the latent output
  written);
- restates the layer's attention row with the absorbed spec and cost.

The absorbed cost is asked at the deployment's KV cache format (the latent cached in fp8 under
`--kv-dtype fp8`). `AbsorbMLA` is the transform the MLA plugin's lever proposes; `absorb` is the
same restatement as a function. The result is placed by the same code as any capture.

Imports torch (the capture records): the MLA plugin imports this module when it proposes the lever.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rooflinekit.plugin import (
    AttentionSite,
    CaptureResult,
    Counted,
    Deployment,
    OpRecord,
    PluginHost,
    TransformContext,
    UserError,
    Workload,
    attention_workload,
    downstream,
    dtype_itemsize,
    is_attention_product,
    rebuild_ops,
    reexpanding,
)

ASSUMPTION = ("absorbed MLA: each naive MLA layer's per-step re-expansion of the cached latent (kv_b_proj "
              "over every cached position, the per-head K/V copies) and its attention over them replaced by "
              "kv_b_proj's weights applied to the new tokens only (query absorption, output un-absorption) "
              "and attention over the latent at the MLA plugin's absorbed cost")


def naive_mla(rows: list[AttentionSite]) -> list[AttentionSite]:
    """The recognised MLA layers that run naive."""
    return [r for r in rows if r.recognised and r.spec.arch == "mla" and r.spec.mode == "naive"]


def _layer(row: AttentionSite, ops: list[OpRecord], params: set[int], tokens: int, workload: Workload,
           host: PluginHost, deployment: Deployment | None) -> tuple[set[int], list[OpRecord], AttentionSite] | None:
    """The ops to drop, the records that replace them and the restated row; None where the layer
    re-expands nothing (no projection over more rows than the new tokens)."""
    site = sorted(set(row.op_indices) | set(row.kv_op_indices))
    reexpand = [i for i in row.kv_op_indices if reexpanding(ops[i], tokens)]
    if not reexpand:
        return None
    products = [i for i in site if is_attention_product(ops[i], params)]
    last = products[-1] if products else None
    dropped = downstream(ops, site, set(reexpand), last)  # the attention output feeds the ops after it
    spec = replace(row.spec, mode="absorbed")
    cost, _ = host.first(host.hook.rooflinekit_attention_cost, spec=spec,
                              workload=attention_workload(workload, row.dtype, row.causal, deployment,
                                                          row.shape))
    if cost is None:
        return None
    x = spec.extra
    rank, nope, v_dim, heads = x["kv_lora_rank"], x["qk_nope_head_dim"], x["v_head_dim"], spec.num_heads
    act = dtype_itemsize(row.dtype)
    first = ops[reexpand[0]]
    weights = sum(ops[i].param_bytes for i in reexpand)
    flops = sum(ops[i].flops * tokens / ops[i].attrs["rows"] for i in reexpand)
    out_bytes = tokens * heads * rank * act  # the latent output the absorbed attention writes
    projections = OpRecord(
        index=0, name="mla.absorb_projections", module=first.module, flops=flops,
        bytes_read=weights + tokens * heads * (nope + rank) * act, bytes_written=tokens * heads * (rank + v_dim) * act,
        dtype=first.dtype, counted=True, kind="modelled", param_bytes=weights,
        attrs={"assumption": "kv_b_proj's weights applied to the new tokens: query absorption and output "
                             "un-absorption (absorbed MLA)"})
    attention = OpRecord(
        index=0, name="mla.absorbed_attention", module=row.module, flops=cost.flops_model,
        bytes_read=cost.bytes_min - out_bytes, bytes_written=out_bytes, dtype=row.dtype, counted=True,
        kind="modelled", attrs={"assumption": "attention over the latent at the MLA plugin's absorbed cost"})
    restated = replace(row, spec=spec, cost=cost, flops_executed=attention.flops, bytes_executed=attention.bytes,
                       kv_bytes_executed=cost.kv_bytes_min, kv_read_bytes=cost.kv_bytes_min, kv_copy_bytes=0.0,
                       kv_reexpand_flops=0.0, notes=list(row.notes) + [ASSUMPTION])
    return dropped, [projections, attention], restated


def absorb(cap: CaptureResult, rows: list[AttentionSite], workload: Workload, host: PluginHost,
           deployment: Deployment | None = None) -> tuple[CaptureResult, list[AttentionSite], list[str]]:
    """The capture and rows with every naive MLA layer in the absorbed form, and the notes; the
    absorbed attention costed at `deployment`'s KV cache format (None: the activation dtype's)."""
    ops, params, tokens = cap.ops, cap.param_storages, workload.tokens
    dropped: set[int] = set()
    inserts: dict[int, list[OpRecord]] = {}  # old index -> records placed before it
    restated: dict[int, tuple[AttentionSite, OpRecord]] = {}  # id(row) -> (row, its attention record)
    skipped = []
    for row in naive_mla(rows):
        done = _layer(row, ops, params, tokens, workload, host, deployment)
        if done is None:
            skipped.append(row.module)
            continue
        drop, records, new_row = done
        dropped |= drop
        inserts[min(drop)] = records
        restated[id(row)] = (new_row, records[1])
    out, index, at = rebuild_ops(ops, dropped, inserts)
    new_rows = []
    for row in rows:
        if id(row) in restated:
            new_row, record = restated[id(row)]
            new_rows.append(replace(new_row, op_indices=[at[id(record)]], kv_op_indices=[]))
        else:
            new_rows.append(replace(row, op_indices=[index[i] for i in row.op_indices if i in index],
                                    kv_op_indices=[index[i] for i in row.kv_op_indices if i in index]))
    notes = [ASSUMPTION] if restated else []
    if skipped:
        notes.append(f"absorbed MLA: {len(skipped)} naive MLA layer(s) re-expand nothing per step (e.g. "
                     f"{skipped[0]}): left as they run")
    return replace(cap, ops=out, notes=list(cap.notes)), new_rows, notes


@dataclass(frozen=True)
class AbsorbMLA:
    """The absorbed-MLA lever as a `Transform`: every naive MLA layer of the counted capture restated
    in the absorbed form (`absorb`), its attention costed at the deployment's KV cache format."""

    name: str = "absorbed MLA"

    def applies(self, ctx: TransformContext) -> bool:
        return True  # a capture without naive MLA layers passes through unchanged

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        cap, rows, notes = absorb(counted.capture, counted.attention, ctx.workload, ctx.host, ctx.deployment)
        return replace(counted, capture=cap, attention=rows).with_notes(*notes)


@dataclass(frozen=True)
class AbsorbedOption(AbsorbMLA):
    """`-O mode=absorbed` (rooflinekit_option_transform): `AbsorbMLA` on every request, refusing a
    model with no MLA layer in one line (the option would say nothing there)."""

    name: str = "-O mode=absorbed"

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        if not any(r.recognised and r.spec.arch == "mla" for r in counted.attention):
            raise UserError("-O mode=absorbed restates MLA attention layers: this model has none (no module "
                            "declares kv_lora_rank and qk_rope_head_dim)")
        return super().apply(counted, ctx)
