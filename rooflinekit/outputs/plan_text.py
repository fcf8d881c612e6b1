"""`rooflinekit plan`'s text: the best configuration, the Pareto front, why the rest were rejected
(within 100 columns)."""

from __future__ import annotations

import shlex
import textwrap
from collections import Counter

from tabulate import tabulate

from rooflinekit.core.plan import PlanConfig, PlanResult
from rooflinekit.outputs.columns import View, shown, text_rows
from rooflinekit.outputs.plan_columns import PLAN, front_rows, gb_cell, ms_cell, short_layout
from rooflinekit.outputs.plan_view import targets_words

WIDTH = 100


def _captures(result) -> str:
    """'9 captures', '25 captures, 56 recounted'."""
    recounted = getattr(result, "recounts", 0)
    return f"{result.captures} captures" + (f", {recounted} recounted" if recounted else "")


def config_line(c: PlanConfig) -> str:
    """One configuration's figures on one line."""
    load = (f" at {c.rate_per_s:.3g} requests/s (p90, {ms_cell(c.ttft_wait_s)} queued)"
            if c.rate_per_s is not None and c.ttft_wait_s is not None else "")
    tpot = [f"p10-p90 {ms_cell(c.tpot_p10_s)} to {ms_cell(c.tpot_p90_s)}"] if c.tpot_p10_s is not None else []
    tpot.append(f"bound {ms_cell(c.tpot_bound_s)}")
    if getattr(c, "engine_host_s", None) is not None:
        tpot.append(f"engine host {ms_cell(c.engine_host_s)} a step")
    return (f"TTFT {ms_cell(c.ttft_s)}{_range(c.ttft_p10_s, c.ttft_p90_s)}{load}, TPOT {ms_cell(c.tpot_s)} "
            f"({'; '.join(tpot)}), e2e {ms_cell(c.e2e_s)}, "
            f"{c.tokens_per_s_per_gpu:,.0f} tok/s/GPU, {c.tokens_per_s_per_user:,.1f} tok/s/user, "
            f"{gb_cell(c.memory_per_gpu_bytes)}/GPU, binds: {c.binding}")


def _range(low: float | None, high: float | None) -> str:
    """' (p10-p90 1.2 s to 1.9 s)', '' without a range."""
    return "" if low is None or high is None else f" (p10-p90 {ms_cell(low)} to {ms_cell(high)})"


def _wrapped(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=" " * (len(indent) + 2))


def commands_lines(commands: dict[str, list[str]], indent: str = "  ") -> list[str]:
    """Engines' command lines, each wrapped at 100 columns with shell continuations."""
    if not commands:
        return []
    out = ["", "serve it (MODEL: the checkpoint's directory or hub id; one command per instance):"]
    names = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
    for engine, lines in commands.items():
        out.append(f"{indent}{names.get(engine, engine)}:")
        for line in lines:
            out += _shell_wrapped(line, indent * 2)
    return out


def _shell_wrapped(line: str, indent: str) -> list[str]:
    r"""One shell command over lines of at most WIDTH columns, broken before an option and its
    value (` \` continuations; a unit longer than a line stays whole)."""
    if line.startswith("#"):
        return textwrap.wrap(line, WIDTH, initial_indent=indent, subsequent_indent=indent + "# ")
    units: list[str] = []
    for token in (shlex.quote(t) for t in shlex.split(line)):
        if units and not token.startswith("--") and units[-1].startswith("--") and " " not in units[-1]:
            units[-1] += " " + token
        else:
            units.append(token)
    out, current = [], indent + units[0]
    for unit in units[1:]:
        if len(current) + 1 + len(unit) + 2 > WIDTH:
            out.append(current + " \\")
            current = indent + "    " + unit
        else:
            current += " " + unit
    out.append(current)
    return out


def plan_to_text(result: PlanResult) -> str:
    """The plan as text (module doc)."""
    name = result.model.get("name") or result.model.get("path")
    fits = sum(c.fits for c in result.configs)
    meets = sum(c.meets_slo for c in result.configs)
    lines = [f"plan: {name} on {result.gpus} x {result.hardware}", f"request: {targets_words(result)}",
             f"priced {result.candidates:,} configurations in {result.wall_s:.1f} s ({_captures(result)}); "
             f"{fits:,} fit in memory, {meets:,} meet the targets", ""]
    best = result.best_config
    if best is not None:
        lines.append(f"best: {best.label()}")
        lines += _wrapped(config_line(best))
        if best.mode == "disaggregated" and best.prefill is not None:
            p, d = best.prefill, best.decode
            each = (f"{d.batch} sequences per GPU ({d.batch * d.ep} per instance)" if d.tp == 1 and d.ep > 1
                    else f"{d.batch} sequences each")
            lines += _wrapped(f"prefill pool: {p.instances} x {short_layout(p.tp, p.ep)}, one prompt per "
                              f"{'GPU and ' if p.tp == 1 and p.ep > 1 else ''}step of {ms_cell(p.step_s)}; decode pool: "
                              f"{d.instances} x {short_layout(d.tp, d.ep)}{f' PP{d.pp}' if d.pp > 1 else ''}, {each}; "
                              f"GPUs {best.pool_ratio} (prefill:decode)"
                              + (f", {best.gpus_idle} of the {result.gpus} idle" if best.gpus_idle else ""))
        lines += commands_lines(result.commands)
    elif result.closest is not None:
        c = result.configs[result.closest]
        lines.append(f"best: none meets the targets; closest: {c.label()}")
        lines += _wrapped(f"misses by {result.closest_miss}; {config_line(c)}")
    else:
        lines.append("best: none: no configuration fits in memory")
    lines += ["", "Pareto front: tokens/s per GPU against tokens/s per user (* meets the targets)"]
    view = View(result)
    lines.append(tabulate(text_rows(PLAN, view, front_rows(result)),
                          headers=[c.header(view) for c in shown(PLAN, view, "text")], tablefmt="simple",
                          disable_numparse=True))
    reasons = Counter((c.reject_reason or "").split(":")[0] + (
        (": " + c.reject_reason.split(":")[1].split()[0]) if c.reject_reason and c.reject_reason.startswith("target")
        else "") for c in result.configs if c.reject_reason)
    if reasons:
        lines += ["", "rejected: " + ", ".join(f"{n:,} {why}" for why, n in reasons.most_common())]
    lines += ["", "configuration: agg(regated) TP x replicas, or dis(aggregated) with GPUs prefill:decode;",
              "DEPn = data-parallel attention on n GPUs, experts over EP n; weights/KV formats (fp8 weights:",
              "W8A8); B batch per instance (per GPU under DEP); c chunked-prefill tokens per step",
              "columns: tok/s/GPU = output tokens per second per GPU in the budget's use; tok/s/user = 1 / TPOT;",
              "TTFT = time to first token; TPOT = mean time per output token; mem/GPU = bytes one GPU holds", "",
              "notes:"]
    for note in result.notes:
        lines += _wrapped(note, "- ")
    return "\n".join(lines) + "\n"
