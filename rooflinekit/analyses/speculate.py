"""advise's multi-token levers priced whole: the draft's steps beside the target's verify step.

A `q_len N` lever is the target's verify step at q_len N; with a draft (`--draft MODEL`, or the
model's own MTP heads, `--mtp K`) it becomes a speculative cycle of k = N - 1 drafted tokens
(rooflinekit.stages.speculative): the cycle's seconds k x draft step + verify step, the tokens it
emits (1 - a^(k+1)) / (1 - a) at acceptance a. The draft's step is:

- `--draft MODEL`: that model's decode step (q_len 1) profiled at the same batch and context in
  the same deployment (hardware, TP, formats, kernels), through the same stages; its memory
  (weights, KV cache, activations per GPU) is added to the verify step's.
- `--mtp K`: one MTP head per drafted token; a head is one of the model's own decoder layers plus
  its output head (DeepSeek-V3's MTP module: a transformer block and the shared head). Its step is
  the baseline's expected step x the share of the baseline's bound time spent in the ops of the
  last decoder layer and of the output head (read from the baseline's op rows, one GPU's share
  under TP). The head's input projection (DeepSeek-V3's eh_proj over the embedding and hidden
  state) is not counted, nor are the heads' own weights and cache in memory.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace

from rooflinekit.core.advice_report import LeverResult, SpeculativeCycle
from rooflinekit.core.errors import UserError
from rooflinekit.core.report import Report
from rooflinekit.stages.speculative import speculative_cycle

#: Module names of an output head (the last component of its path).
HEADS = ("lm_head", "output", "embed_out", "head")
_LAYER = re.compile(r"^(.*?\.)(\d+)(\.|$)")


@dataclass(frozen=True)
class Draft:
    """The draft's step: what it is, its expected and bound seconds, its memory per GPU."""

    name: str
    expected_s: float
    bound_s: float
    memory_bytes: float = 0.0


def _layer_of(module: str) -> tuple[str, int] | None:
    m = _LAYER.match(module + ".")
    return (m.group(1), int(m.group(2))) if m else None


def mtp_share(report: Report) -> tuple[float, str]:
    """The share of the step's bound time in the last decoder layer plus the output head, and
    the modules it read; UserError where the report has no op rows, layers or head."""
    if not report.ops:
        raise UserError("--mtp prices a head from the baseline's op rows: this report has none")
    stacks: dict[str, set[int]] = defaultdict(set)
    for op in report.ops:
        at = _layer_of(op.module)
        if at is not None:
            stacks[at[0]].add(at[1])
    if not stacks:
        raise UserError("--mtp: no decoder layer stack (a module path with a numbered layer) in this model")
    prefix = max(stacks, key=lambda p: len(stacks[p]))
    last = f"{prefix}{max(stacks[prefix])}"
    head = [op for op in report.ops if op.module.split(".")[-1] in HEADS]
    if not head:
        raise UserError(f"--mtp: no output head (a module named {', '.join(HEADS)}) in this model")
    layer = sum(op.time_bound_s for op in report.ops if op.module == last or op.module.startswith(last + "."))
    total = sum(op.time_bound_s for op in report.ops)
    if total <= 0:
        raise UserError("--mtp: the baseline's step has no time to share")
    return (layer + sum(op.time_bound_s for op in head)) / total, f"{last} and {head[0].module}"


def mtp_draft(base: Report, heads: int) -> Draft:
    """One MTP head's step from the baseline (see the module docstring)."""
    share, where = mtp_share(base)
    t = base.totals
    kernels = t.expected_step_s - (t.engine_host_s or 0.0)  # the engine's host time: once a cycle, in the verify
    return Draft(f"MTP ({heads} head{'s' if heads > 1 else ''}: one decoder layer + output head each, priced as "
                 f"{share:.3g} of the baseline's step: {where})", kernels * share, t.predicted_step_s * share)


def model_draft(name: str, report: Report) -> Draft:
    """A draft model's decode step from its own profile."""
    m = report.memory
    return Draft(f"draft {name}", report.totals.expected_step_s, report.totals.predicted_step_s,
                 m.total_bytes if m is not None else 0.0)


def priced(row: LeverResult, draft: Draft, accept: float, usable: float | None) -> LeverResult:
    """The q_len lever `row` (its verify step at q_len k + 1) as a speculative cycle with `draft`."""
    k = row.tokens // row.batch - 1
    cycle = speculative_cycle(draft.expected_s, row.expected_step_s or 0.0, accept, k)
    bound = speculative_cycle(draft.bound_s, row.predicted_step_s, accept, k)
    verify_s = row.expected_step_s or 0.0
    # the verify row's figures at the same GPUs, every verified token counted, rescaled to the cycle
    per_gpu = (row.tokens_per_s_per_gpu * cycle.tokens_per_cycle / (k + 1) * verify_s / cycle.cycle_s
               if row.tokens_per_s_per_gpu else None)
    tps = row.batch * bound.tokens_per_s_per_user
    memory = row.memory_bytes + draft.memory_bytes if row.memory_bytes is not None else None
    fits = row.fits
    if memory is not None and usable is not None and draft.memory_bytes:
        fits = memory <= usable
    info = SpeculativeCycle(draft=draft.name, k=k, accept=accept, draft_step_s=draft.expected_s,
                            verify_step_s=verify_s, cycle_s=cycle.cycle_s,
                            tokens_per_cycle=cycle.tokens_per_cycle, time_per_token_s=cycle.time_per_token_s)
    return replace(row, expected_step_s=cycle.cycle_s, tokens_per_s_per_gpu=per_gpu,
                   tokens_per_s_per_user=cycle.tokens_per_s_per_user, tokens_per_s=tps,
                   speedup=(row.speedup * per_gpu / row.tokens_per_s_per_gpu
                            if row.speedup and per_gpu and row.tokens_per_s_per_gpu else None),
                   predicted_step_s=bound.cycle_s,
                   memory_bytes=memory, fits=fits, binding="capacity" if fits is False else row.binding,
                   speculative=info)
