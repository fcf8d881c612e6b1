"""Planned pipeline parallelism: the layer stack cut into `--pp N` stages, the step pipelined over
micro-batches (docs/parallel.md, Pipeline parallelism).

An annotate step of the profile (`with_pipeline_parallel`), after the placement and the memory section:
the capture (already one GPU's share under --tp/--ep) is grouped by stage, and

- stages: each stage's share of the capture is `rooflinekit.transforms.pipeline.PipelineStage`'s
  (contiguous ranges of the model's largest layer stack, split as evenly as possible; an op outside
  the stack with the last layer that ran before it), the grouping defined there once;
- a stage's step counts are its share of the capture (the whole batch once); its micro-batch counts
  are its share of a second capture at the largest micro-batch's sequences s (the same capture when
  s = B): every micro-batch reads the stage's weights again;
- a micro-batch's time on a stage: bound = max(FLOPs / peak, bytes / bandwidth, its collectives'
  bound); expected = the expected step (rooflinekit.stages.expected) of its scaled ops;
- the activation send between two stages: a micro-batch's tokens x hidden x activation itemsize,
  the hidden size read from the tensors the stage's last layer writes (its last op's first input),
  else the model's config or embedding; priced as a point-to-point `send` over a group of
  max(tp, ep) x pp GPUs (scale-out beyond the entry's node_gpus);
- the step, for the bound and for the expected time: by default the steady serving pipeline
  (`Deployment.pp_schedule` "steady": M micro-batches in flight, each sequence one token per period,
  rooflinekit.stages.pipeline_parallel.steady_step, the sampled tokens sent back to the first
  stage), or one batch filling and draining it ("one-batch", `pipelined_step`, with its bubble);
  totals.time_bound_s and totals.expected_step_s become that step, tokens/s per GPU divides by
  max(tp, ep) x pp; the memory section is the stage that holds the most (its weights, its layers'
  KV cache of the whole batch, the micro-batch capture's activation peak).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.report import Report
from rooflinekit.core.request import Deployment, Workload, mixed_workload
from rooflinekit.stages import collectives
from rooflinekit.stages.capture import OpRecord
from rooflinekit.stages.expected import expected_step, throughput
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.memory import activation_peak, memory_of
from rooflinekit.stages.pipeline_parallel import (
    STEADY_WORDS,
    STEP_WORDS,
    default_micro_batches,
    micro_batch_sequences,
    pipelined_step,
    steady_step,
)
from rooflinekit.stages.request_checks import torch_dtype
from rooflinekit.stages.roofline import place_on
from rooflinekit.stages.spread import load_spreads
from rooflinekit.transforms.base import Counted, TransformContext
from rooflinekit.transforms.parallel import weights_per_gpu
from rooflinekit.transforms.pipeline import (
    Layout,
    PipelineStage,
    layout_of,
    module_stages,
    op_stages,
    stage_of_path,
)
from rooflinekit.transforms.tp_plan import ShardPlan

ASSUMPTIONS = (
    "planned pipeline parallelism: the largest layer stack cut into N contiguous stages as evenly as "
    "possible, one per GPU group (x TP); the embedding on the first stage, the final norm and head on "
    "the last; ops outside the stack go with the last layer that ran before them",
    "a micro-batch's ops: a capture at the largest micro-batch's sequences, the stage's weights read "
    "whole by every micro-batch",
    "activation sends: point to point, each GPU of a stage sends the whole micro-batch's hidden "
    "states to its peer of the next stage (no scatter over the TP group); alpha + bytes / beta",
    "not modelled: interleaved (virtual) stages, chunked prefill splitting a sequence, unequal "
    "micro-batches beyond the largest one setting the pace",
)


def stage_times(ops: list[OpRecord], hw: HardwareSpec, dtype: str, phase: str,
                attention_ops: set[int]) -> dict[str, float]:
    """One stage's ops on `hw`: FLOPs, bytes, the bound (max of compute, memory and its collectives'
    bound) and the expected time (kernels, launches, collectives)."""
    flops = sum(op.flops for op in ops if op.kind != "collective")
    nbytes = sum(op.bytes for op in ops if op.kind != "collective")
    calls = [op.attrs for op in ops if op.kind == "collective"]
    comm_bound = sum(collectives.call_bound(a, hw) for a in calls)
    comm_expected = sum(collectives.call_expected(a, hw)[0] for a in calls)
    bound = max(place_on(hw, dtype, flops, nbytes).time_bound_s, comm_bound)
    expected = expected_step(ops, attention_ops, hw, phase, comm_expected, "the stage's collectives")
    return {"flops": flops, "bytes": nbytes, "time_bound_s": bound, "expected_s": expected.step_s,
            "comm_time_s": comm_bound}


def boundary_hidden(ops: list[OpRecord], layout: Layout, tokens: int,
                    model: torch.nn.Module) -> tuple[int | None, str]:
    """The hidden size crossing the stage boundaries: the last dimension of the first input of the
    last op of the first stage's last layer (a residual add: [tokens..., hidden]) when its other
    dimensions hold the step's tokens; else the model's config.hidden_size, else the largest
    embedding's width."""
    last = layout.ranges[0][-1]
    op = next((o for o in reversed(ops) if o.kind != "collective" and layout.layer_index(o.module) == last), None)
    if op is not None and op.shapes:
        first = op.shapes.split(",")[0]
        dims = [int(d) for d in first.split("x") if d.isdigit()]
        if len(dims) >= 2 and math.prod(dims[:-1]) == tokens:
            return dims[-1], f"the output of {layout.layers[last]} ({op.name} on {first})"
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    if isinstance(hidden, int):
        return hidden, "the model's config.hidden_size"
    widths = [m.embedding_dim for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    if widths:
        return max(widths), "the width of the model's embedding"
    return None, "unknown: no layer output, config.hidden_size or embedding found"


def token_send(hw: HardwareSpec, deployment: Deployment, tokens: int) -> tuple[float, float]:
    """(bound, expected) seconds of the sampled token ids (int64) sent from the last stage back
    to the first, one micro-batch's."""
    group = max(deployment.tp, deployment.ep) * deployment.pp
    call = collectives.attrs("send", group, float(tokens * 8), "pipeline")
    return collectives.call_bound(call, hw), collectives.call_expected(call, hw)[0]


@dataclass
class Sends:
    """The activation send between two consecutive stages, for one micro-batch."""

    bytes: float
    time_bound_s: float
    expected_s: float
    link: str
    hidden: int | None
    hidden_source: str


def sends(counting, layout: Layout, hw: HardwareSpec, workload: Workload,
          deployment: Deployment, tokens: int) -> Sends:
    """One boundary's send of a micro-batch of `tokens` tokens: bytes, bound, expected, which link."""
    hidden, source = boundary_hidden(counting.counted.capture.ops, layout, workload.tokens, counting.model)
    nbytes = float(tokens * (hidden or 0) * torch_dtype(workload).itemsize)
    group = max(deployment.tp, deployment.ep) * deployment.pp
    call = collectives.attrs("send", group, nbytes, "pipeline")
    link = "scale-out" if collectives.spans_nodes(group, hw) else "scale-up"
    return Sends(nbytes, collectives.call_bound(call, hw), collectives.call_expected(call, hw)[0], link, hidden,
                 source)


def stage_weights(counting, layout: Layout, modules: dict[str, int], deployment: Deployment) -> list[float]:
    """Weight bytes each stage's GPU holds (its parameters, at their share under TP/EP)."""
    from_section = _plan_of((counting.counted.parallel or {}), deployment)
    out = []
    for stage in range(len(layout.ranges)):
        def held(name: str, stage: int = stage) -> bool:
            return stage_of_path(name.rpartition(".")[0], layout, modules) == stage
        out.append(weights_per_gpu(counting.model, from_section, deployment, counting.counted.stored, only=held))
    return out


def _plan_of(section: dict, deployment: Deployment) -> ShardPlan | None:
    """The TP plan a parallel section lists (its styles and colwise shares), None without TP."""
    if deployment.tp <= 1 or not section.get("plan"):
        return None
    rows = section["plan"]
    return ShardPlan(tp=deployment.tp, styles={r["module"]: r["style"] for r in rows},
                fractions={r["module"]: r["fraction"] for r in rows
                           if r["style"] in ("colwise", "colwise_gather", "vocab")})


def micro_workload(workload: Workload, micro_batches: int) -> Workload:
    """The largest micro-batch's step: ceil(batch / M) sequences; a mixed step's decode groups each
    split M ways, the prompt chunk riding in that micro-batch whole."""
    if workload.mixed:
        mix = tuple((c, math.ceil(n / micro_batches)) for c, n in workload.mix)
        return mixed_workload(workload, mix, workload.chunk, workload.chunk_offset)
    return replace(workload, batch=micro_batch_sequences(workload.batch, micro_batches))


def micro_batches_of(deployment: Deployment, workload: Workload) -> int:
    """The deployment's micro-batches, else the default (rooflinekit.stages.pipeline_parallel)."""
    return deployment.micro_batches or default_micro_batches(deployment.pp, workload.batch, workload.phase)


def stage_shares(counting, layout: Layout, ctx: TransformContext) -> list[Counted]:
    """Each stage's share of `counting`'s counts (`PipelineStage`), in stage order."""
    return [PipelineStage(layout, k).apply(counting.counted, ctx) for k in range(len(layout.ranges))]


def _attention_ops(counted: Counted) -> set[int]:
    return {i for r in counted.attention for i in r.op_indices}


def stage_rows(layout: Layout, shares: list[Counted], micro_shares: list[Counted], hw: HardwareSpec,
               phase: str, dtype: str) -> list[dict]:
    """Per stage: its layers and other modules, its step counts (`shares`: the whole batch once)
    and one micro-batch's counts and times (`micro_shares`: the stages' shares of the capture at
    the micro-batch's sequences)."""
    rows = []
    for k, span in enumerate(layout.ranges):
        mine = shares[k].capture.ops
        whole = stage_times(mine, hw, dtype, phase, _attention_ops(shares[k]))
        micro = stage_times(micro_shares[k].capture.ops, hw, dtype, phase, _attention_ops(micro_shares[k]))
        others = list(dict.fromkeys(op.module for op in mine if layout.layer_index(op.module) is None))
        rows.append({
            "stage": k, "layers": [span.start, span.stop - 1], "layer_count": len(span),
            "first_layer": layout.layers[span.start], "last_layer": layout.layers[span.stop - 1],
            "other_modules": [m or "(root)" for m in others], "ops": len(mine),
            "flops": whole["flops"], "bytes": whole["bytes"], "step_time_bound_s": whole["time_bound_s"],
            "micro_batch_flops": micro["flops"], "micro_batch_bytes": micro["bytes"],
            "time_bound_s": micro["time_bound_s"], "expected_s": micro["expected_s"],
            "comm_time_s": micro["comm_time_s"],
        })
    return rows


def _base_section(report: Report, deployment: Deployment) -> dict:
    """The report's parallel section to extend (TP/EP's, or an empty one for PP alone)."""
    if report.parallel:
        return dict(report.parallel)
    return {"tp": 1, "ep": 1, "gpus": 1, "plan_sources": [], "plan_counts": {}, "plan": [], "attention": [],
            "kv_heads_replicated": [], "weights_per_gpu": None,
            "batch_meaning": "the batch is shared by the pipeline: every micro-batch passes every stage",
            "assumptions": [], "notes": []}


def stage_memory(report: Report, counting, layout: Layout, modules: dict[str, int], hw: HardwareSpec,
                 deployment: Deployment, weights: list[float]) -> list:
    """Each stage's Memory: its weights, its attention layers' KV cache, the capture's activation peak."""
    peak = activation_peak(counting.counted.capture)
    out = []
    for k in range(len(layout.ranges)):
        rows = [a for a in report.attention if stage_of_path(a.module, layout, modules) == k]
        out.append(memory_of(replace(report, attention=rows), hw, deployment.memory_fraction, peak,
                             weights=weights[k]))
    return out


def with_pipeline_parallel(report: Report, counting, hw: HardwareSpec, workload: Workload,
                           deployment: Deployment, host: PluginHost,
                           recount: Callable[[Workload], object] | None = None) -> Report:
    """Annotate: the report under `deployment.pp` stages (module docstring); unchanged at pp 1.
    `recount(workload)` counts the step at the micro-batch's sequences (the same capture when a
    micro-batch is the whole batch)."""
    if deployment.pp <= 1:
        return report
    layout = layout_of(counting.model, deployment.pp)
    ops = counting.counted.capture.ops
    modules = module_stages(ops, op_stages(ops, layout))
    m = micro_batches_of(deployment, workload)
    seqs = micro_batch_sequences(workload.batch, m)
    small = micro_workload(workload, m)
    micro = counting if small == workload or recount is None else recount(small)
    shares = stage_shares(counting, layout, TransformContext(workload, deployment, counting.model, host))
    micro_shares = stage_shares(micro, layout, TransformContext(small, deployment, micro.model, host))
    rows = stage_rows(layout, shares, micro_shares, hw, workload.phase, report.hardware.dtype)
    send = sends(counting, layout, hw, workload, deployment, seqs * workload.q_len)
    back = token_send(hw, deployment, seqs * workload.q_len)
    weights = stage_weights(counting, layout, modules, deployment)
    section = _base_section(report, deployment)
    section["gpus"] = max(deployment.tp, deployment.ep) * deployment.pp
    report = replace(report, parallel=section)
    memories = stage_memory(report, micro, layout, modules, hw, deployment, weights)
    for row, mem in zip(rows, memories, strict=True):
        row.update(weights_bytes=mem.weights_bytes, kv_cache_bytes=mem.kv_cache_bytes, memory_bytes=mem.total_bytes)
    fullest = max(range(len(rows)), key=lambda k: memories[k].total_bytes)
    bounds, expected = [r["time_bound_s"] for r in rows], [r["expected_s"] for r in rows]
    bubble = pipelined_step(bounds, m, send.time_bound_s)[1]
    if deployment.pp_schedule == "one-batch":
        step_bound = pipelined_step(bounds, m, send.time_bound_s)[0]
        step_expected = pipelined_step(expected, m, send.expected_s)[0]
    else:
        step_bound = steady_step(bounds, m, send.time_bound_s, back[0])
        step_expected = steady_step(expected, m, send.expected_s, back[1])
        bubble = max(0.0, 1.0 - m * max(bounds) / step_bound) if step_bound else 0.0  # the slowest stage idles
    section["weights_per_gpu"] = weights[fullest]
    section["pp"] = {
        "degree": deployment.pp, "micro_batches": m, "micro_batches_given": deployment.micro_batches is not None,
        "micro_batch_sequences": seqs, "micro_batch_tokens": seqs * workload.q_len,
        "stack": layout.stack, "layers": len(layout.layers), "stages": rows,
        "slowest_stage": max(range(len(rows)), key=lambda k: rows[k]["time_bound_s"]),
        "slowest_stage_expected": max(range(len(rows)), key=lambda k: rows[k]["expected_s"]),
        "bubble_fraction": bubble, "hidden_size": send.hidden, "hidden_source": send.hidden_source,
        "send_bytes_per_micro_batch": send.bytes,
        "send_bytes": float(workload.tokens * (send.hidden or 0) * torch_dtype(workload).itemsize
                            * (deployment.pp - 1)),
        "send_time_s": send.time_bound_s, "send_expected_s": send.expected_s, "link": send.link,
        "schedule": deployment.pp_schedule, "token_send_time_s": back[0], "token_send_expected_s": back[1],
        "step_time_bound_s": step_bound, "step_expected_s": step_expected,
        "unpipelined_time_bound_s": report.totals.time_bound_s,
        "unpipelined_expected_step_s": report.totals.expected_step_s,
        "memory_stage": fullest, "step": STEP_WORDS if deployment.pp_schedule == "one-batch" else STEADY_WORDS,
        "assumptions": list(ASSUMPTIONS),
    }
    return replace(report, totals=pipelined_totals(report, workload, section, step_bound, step_expected),
                   memory=memories[fullest], notes=list(report.notes) + [headline(section)])


def pipelined_totals(report: Report, workload: Workload, section: dict, step_bound: float, step_expected: float):
    """The totals with the pipelined step as time_bound_s and expected_step_s, tokens/s per GPU over
    the pipeline's GPUs."""
    t = report.totals
    gpus = max(1, int(section.get("tp") or 1)) * section["pp"]["degree"]
    per_gpu, per_user = throughput(workload.tokens, workload.q_len, workload.phase, step_expected, gpus)
    times = dict(t.time_conventions or {})
    if section["pp"]["schedule"] == "one-batch":
        rule = ("(M + N - 1) x max(slowest stage's micro-batch bound, one send's bound) + (N - 1) x one send's "
                "bound")
    else:
        rule = ("the steady pipeline's period, max(M x max(slowest stage's micro-batch bound, one send's bound), "
                "the stages' micro-batch bounds + (N - 1) sends + the token send back)")
    times["time_bound_s"] = (f"pipelined (--pp, {section['pp']['schedule']}): {rule}; a stage's micro-batch bound = "
                             "max(FLOPs / peak, bytes / bandwidth, its collectives' bound) (parallel.pp)")
    words = [f"under --pp: expected_step_s is the pipelined step over the stages' expected micro-batch times "
             f"(parallel.pp.step); tokens_per_s_per_gpu divides by {gpus} GPUs (TP group x {section['pp']['degree']} "
             "stages)"]
    low, high = (None, None) if t.expected_class is None else load_spreads()[t.expected_class].range(step_expected)
    return replace(t, time_bound_s=step_bound, expected_step_s=step_expected, tokens_per_s_per_gpu=per_gpu,
                   tokens_per_s_per_user=per_user, time_conventions=times, expected_low_s=low, expected_high_s=high,
                   expected_conventions=list(t.expected_conventions or []) + words)


def headline(section: dict) -> str:
    pp = section["pp"]
    return (f"planned pipeline parallelism: {pp['degree']} stages x {pp['micro_batches']} micro-batches; "
            "totals.time_bound_s and expected_step_s are the pipelined step, flops, bytes, modules and ops "
            "all stages' together (one GPU of each stage), memory the fullest stage's (see parallel.pp and "
            "docs/parallel.md)")
