"""The text report's pipeline-parallel block under --pp (the report's `parallel.pp`): a header
line per fact and a table of the stages, each at one micro-batch."""

from __future__ import annotations

from rooflinekit.core.report import Report
from rooflinekit.core.units import seconds, share
from rooflinekit.outputs.columns import num
from rooflinekit.outputs.tables import Column

Rows = list[list[str]]


def pipeline_of(report: Report) -> dict | None:
    return (report.parallel or {}).get("pp") or None


def pipeline_lines(report: Report) -> list[str]:
    """Header lines: stages and micro-batches, the slowest stage, the bubble, the sends, the step."""
    pp = pipeline_of(report)
    if pp is None:
        return []
    slow = pp["stages"][pp["slowest_stage"]]
    hidden = pp["hidden_size"]
    return [
        f"pipeline: {pp['degree']} stages x {pp['micro_batches']} micro-batches of {pp['micro_batch_sequences']} "
        f"sequence(s) ({pp['micro_batch_tokens']} tokens) over the {pp['layers']} layers of "
        f"{pp['stack'] or 'the model'}; slowest stage {slow['stage']} (layers {_layers(slow)}), "
        f"{seconds(slow['time_bound_s'])} bound per micro-batch; "
        + (f"one batch, bubble {share(pp['bubble_fraction'])}" if pp.get("schedule") == "one-batch" else
           f"steady schedule, slowest stage idle {share(pp['bubble_fraction'])} of each period"),
        f"pipeline sends: {num(pp['send_bytes_per_micro_batch'], 'B')} per micro-batch per boundary (hidden "
        f"{hidden if hidden is not None else '?'}), {seconds(pp['send_time_s'])} bound / "
        f"{seconds(pp['send_expected_s'])} expected on the {pp['link']} link; {num(pp['send_bytes'], 'B')} "
        f"over the step",
        f"pipelined step: bound {seconds(pp['step_time_bound_s'])}, expected {seconds(pp['step_expected_s'])} "
        f"(unpipelined on one GPU group: {seconds(pp['unpipelined_time_bound_s'])} / "
        f"{seconds(pp['unpipelined_expected_step_s'])}); memory: stage {pp['memory_stage']}, the fullest",
    ]


def _layers(row: dict) -> str:
    first, last = row["layers"]
    return f"{first}-{last}" if last != first else str(first)


def pipeline_table(report: Report) -> tuple[list[Column], Rows]:
    """One row per stage: its layers and other modules, a micro-batch's counts and times, what it holds."""
    pp = pipeline_of(report) or {"stages": []}
    cols = [Column("stage"), Column("layers"), Column("also", "left", drop=2), Column("FLOP/mb"),
            Column("bytes/mb"), Column("t bound/mb"), Column("t exp./mb"), Column("weights", drop=1),
            Column("KV cache", drop=1)]
    rows = [[str(r["stage"]), _layers(r), ", ".join(r["other_modules"]) or "-", num(r["micro_batch_flops"]),
             num(r["micro_batch_bytes"], "B"), seconds(r["time_bound_s"]), seconds(r["expected_s"]),
             num(r.get("weights_bytes"), "B"), num(r.get("kv_cache_bytes"), "B")] for r in pp["stages"]]
    return cols, rows
