"""`rooflinekit plan`: the best deployment of the user's model for a GPU budget and latency targets.

The search prices every combination of tensor / expert / pipeline parallel degrees, replicas,
weight and KV formats, concurrency (batch per instance), chunked-prefill budget, speculative
decoding and aggregated against disaggregated serving from step models (rooflinekit.stages.stepmodel):
per deployment, a few design captures fit every kernel's counts exactly, and a candidate costs one
pass over tens of kernel groups. What each candidate's figures mean (docs/plan.md):

- decode: the serving view's expected step (or the kernels view asked for) at batch B, averaged
  exactly over the contexts ISL .. ISL+OSL-1 the generation passes through;
- aggregated serving runs mixed steps: each step carries the B decode tokens and the prompt tokens
  that arrive meanwhile, p = B x ISL_new / OSL (chunked prefill), priced as one step whose kernels
  read the weights once (`mixed_mean`); time to first token = ceil(ISL_new / chunk) steps carrying
  a full chunk; time per output token = the mean mixed step;
- disaggregated serving: a prefill pool and a decode pool, each with its own degrees, GPUs split
  between them in the ratio that balances prompts prefilled and sequences finished per second;
  time to first token = one prefill of ISL_new tokens plus the KV cache sent to the decode pool;
- pipeline stages: M = PP micro-batches of B/PP sequences each in flight; the slowest stage holds
  ceil(L/PP) of the L layers and, taken conservatively, the embedding and head; one output token
  per sequence every PP stage times plus PP activation sends;
- speculative decoding (MTP heads or a draft model): per verify cycle, k draft steps and one
  verify step of k+1 tokens; E = (1 - a^(k+1)) / (1 - a) tokens accepted per cycle;
- memory per GPU: the weights it holds, the KV cache of B sequences at ISL+OSL (paged in blocks in
  the serving view), the activation peak of the step; at most the usable share of capacity.

This module runs the search and ranks its candidates; the search space is in plan_options, a
deployment's priced parts in plan_variant, the deployments and their step models in plan_models,
and the pricing of one candidate (Planner) in plan_pricing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.plan_pricing import Planner, target_figures
from rooflinekit.analyses.plan_variant import Variant
from rooflinekit.core.errors import UserError, WorkloadError
from rooflinekit.core.plan import (
    FORMAT_ORDER,
    TARGETS_AT,
    PlanConfig,
    PlanResult,
    Targets,
    pareto_front,
)
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import ModelSource
from rooflinekit.core.settings import searched_of
from rooflinekit.outputs.engine_flags import engine_commands
from rooflinekit.stages.efficiency_table import table_for
from rooflinekit.stages.engine import engine_cost
from rooflinekit.stages.fitting import FitError
from rooflinekit.stages.hardware import HardwareDB
from rooflinekit.stages.kernel_times import KernelTimes
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.queueing import MAX_UTILISATION
from rooflinekit.stages.spread import load_spreads

# -- the search ------------------------------------------------------------------------------------


def _pps(options: PlanOptions, gpus_per_instance: int, layers: int) -> list[int]:
    return [pp for pp in options.pps if pp == 1 or (gpus_per_instance * pp <= options.gpus and pp <= layers)]


def _with_and_without_speculation(variants: list[Variant]) -> list[Variant]:
    """Each variant as is, and where it drafts (MTP or a draft model) also without: speculative
    decoding is searched on and off."""
    out = []
    for v in variants:
        out.append(v)
        if v.verify is not None:
            out.append(replace(v, verify=None, draft=None))
    return out


def _candidates(planner: Planner, variants: list[Variant]) -> Iterator[PlanConfig]:
    """Every priced configuration (module doc); divisibility rejects are not yielded."""
    o, layers = planner.options, planner.fitter.layers()
    modes = (o.modes,) if isinstance(o.modes, str) else tuple(o.modes)  # "disaggregated" holds "aggregated"
    variants = _with_and_without_speculation(variants)
    batches = planner.batches()
    def allowed(v: Variant, layouts: tuple[tuple[int, int], ...] | None) -> bool:
        return layouts is None or (v.deployment.tp, v.deployment.ep) in layouts

    if "aggregated" in modes:
        new = planner.targets.new_prompt_tokens
        for v in variants:
            if not allowed(v, o.decode_layouts):
                continue
            g = max(v.deployment.tp, v.deployment.ep)
            for pp in _pps(o, g, layers):
                for chunk in o.chunks:
                    full = min(chunk, new)
                    tokens = planner.targets.isl - new + full
                    limit = planner.batch_limit(v, pp, (tokens, planner._chunk_peak(v, full)))
                    most = min(limit or o.max_batch, o.max_batch, chunk * planner.targets.osl // new)
                    for batch in _with_limit(batches, limit, v, planner.target_batch(v, pp, most, True)):
                        if batch % pp == 0:
                            yield planner.aggregated(v, pp, batch, chunk)
    if "disaggregated" in modes:
        for dv in variants:
            if not allowed(dv, o.decode_layouts):
                continue
            g = max(dv.deployment.tp, dv.deployment.ep)
            formats = (dv.format, searched_of(dv.deployment))
            for pv in variants:
                if pv.verify is not None or (pv.format, searched_of(pv.deployment)) != formats \
                        or not allowed(pv, o.prefill_layouts):
                    continue
                for pp in _pps(o, g, layers):
                    limit = planner.batch_limit(dv, pp)
                    most = min(limit or o.max_batch, o.max_batch)
                    for batch in _with_limit(batches, limit, dv, planner.target_batch(dv, pp, most, False)):
                        if batch % pp:
                            continue
                        config = planner.disaggregated(pv, dv, pp, batch)
                        if config is not None:
                            yield config


def _with_limit(batches: tuple[int, ...], limit: int | None, v: Variant, target: int | None = None
                ) -> tuple[int, ...]:
    """The searched batches, the largest that fits in memory and the largest whose TPOT meets the
    target (where batch is fitted, so any batch can be priced; a step model built per batch
    prices only the batches it holds)."""
    if v.decode.batches is not None:
        return batches
    extra = {b for b in (limit, target) if b is not None and b <= batches[-1]}
    return tuple(sorted(set(batches) | extra))


def _preference(c: PlanConfig) -> tuple:
    """The best's order: tokens/s per GPU (to 6 significant digits: a closer tie is no difference),
    then the cheaper weight format (fewer bits held and read; W8A8 over weight-only at equal bits)."""
    rank = FORMAT_ORDER.index(c.weight_dtype) if c.weight_dtype in FORMAT_ORDER else len(FORMAT_ORDER)
    return float(f"{c.tokens_per_s_per_gpu:.6g}"), -rank


def _closest(configs: list[PlanConfig], targets: Targets) -> tuple[int | None, str | None]:
    """The fitting configuration nearest to meeting the targets, and the figure it misses by."""
    best, worst_ratio, words = None, math.inf, None
    for i, c in enumerate(configs):
        if not c.fits or c.ttft_s is None:
            continue
        misses, (ttft, tpot) = [], target_figures(c, targets)
        at = " (p90)" if targets.at == "p90" else ""
        if targets.ttft_s is not None:
            misses.append((ttft / targets.ttft_s, f"TTFT{at} {ttft * 1e3:.0f} ms against {targets.ttft_s * 1e3:.0f} ms"))
        if targets.tpot_s is not None:
            misses.append((tpot / targets.tpot_s, f"TPOT{at} {tpot * 1e3:.1f} ms against {targets.tpot_s * 1e3:.1f} ms"))
        if not misses:
            continue
        ratio, text = max(misses)
        if ratio < worst_ratio:
            best, worst_ratio, words = i, ratio, f"{text} ({(ratio - 1) * 100:.0f}% over)"
    return best, words


def run_plan(source: ModelSource, targets: Targets, options: PlanOptions | None = None, *, dtype: str = "bf16",
             model_options: tuple = (), host: PluginHost | None = None, db: HardwareDB | None = None,
             progress: Callable[[str], None] | None = None) -> PlanResult:
    """Search the deployments of `source` for `targets` within `options` (module doc)."""
    options = options or PlanOptions()
    start = time.perf_counter()
    planner = Planner(source, targets, options, dtype=dtype, model_options=model_options, host=host, db=db,
                      progress=progress)
    say = planner.progress
    variants, skipped, warnings = [], [], []
    deployments = list(planner.deployments())
    for i, (deployment, act, name) in enumerate(deployments, 1):
        words = f"{deployment.words(act)}{' (W8A8)' if act == 'fp8' else ''}"
        say(f"step models {i}/{len(deployments)}: {words or 'as run'}")
        v = planner.variant(deployment, act)
        if isinstance(v, str):
            skipped.append(f"{words}: {v}")
        else:
            variants.append(replace(v, format=name))
    if not variants:
        raise UserError("plan: no deployment could be priced: " + "; ".join(skipped[:3]))
    configs = list(_candidates(planner, variants))
    say(f"priced {len(configs)} configurations")
    fitting = [i for i, c in enumerate(configs) if c.fits and c.tokens_per_s_per_gpu]
    front = pareto_front([(configs[i].tokens_per_s_per_gpu, configs[i].tokens_per_s_per_user) for i in fitting])
    pareto = [fitting[i] for i in front]
    meeting = [i for i, c in enumerate(configs) if c.meets_slo]
    best = max(meeting, key=lambda i: _preference(configs[i])) if meeting else None
    closest, miss = (None, None) if best is not None else _closest(configs, targets)
    if options.check and best is not None:
        try:
            words, off = planner.check(configs[best])
            (warnings if off else planner.notes).append(words)
        except FitError as exc:  # the ops do not align: the figures stand, the check could not be made
            planner.notes.append(f"the best configuration's step model could not be checked against a full profile "
                                 f"({exc})")
    if not any(c.fits for c in configs):
        warnings.append(planner.what_would_fit(variants))
    assumed = _assumptions(options, targets, planner.routed_experts() is not None, planner.own_table,
                           table_for(planner.hw).times())
    notes = planner.notes + [f"not priced: {s}" for s in skipped] + assumed
    info = {"name": source.name, "path": source.path, "kind": source.kind, "options": dict(model_options)}
    if planner.routed_experts():
        info["routed_experts"] = planner.routed_experts()
    commands = engine_commands(configs[best], "MODEL", planner.routed_experts()) if best is not None else {}
    return PlanResult(model=info, hardware=planner.hw.name, gpus=options.gpus, targets=targets,
                      candidates=len(configs), configs=configs, pareto=pareto, best=best, closest=closest,
                      closest_miss=miss, notes=notes, warnings=warnings, commands=commands, wall_s=time.perf_counter() - start,
                      captures=planner.captures, recounts=sum(f.recounts for f in planner.fitters.values()))


def spread_note(targets: Targets) -> str:
    """How the p10-p90 ranges are made and which end the targets are met at."""
    table = load_spreads()
    where = ("the targets are met at the p90 ends (--targets-at p90)" if targets.at == "p90" else
             "the targets are met by the expected figures (--targets-at p90 meets them at the p90 ends)")
    return (f"p10-p90 of TTFT and TPOT: the expected figure times the p10 and p90 of measured/expected over "
            f"the validation's published rows of its step class (aggregated: {table['mixed'].words()}; "
            f"disaggregated prefill: {table['prefill'].words()}; decode: {table['decode'].words()}); {where}")


def _source(options: PlanOptions, own_table: bool) -> str:
    """The efficiency source the plan prices with, as `--efficiency` names it."""
    return options.efficiency or ("the hardware entry's own" if own_table else "published")


def _assumptions(options: PlanOptions, targets: Targets, moe: bool = False, own_table: bool = False,
                 measured: KernelTimes | None = None) -> list[str]:
    notes = [
        "figures are the serving view's expected times (bounds beside them): each kernel at the achievable "
        f"fraction of its class, efficiency {_source(options, own_table)} (docs/accounting.md, Expected time)"
        if options.kernels == "serving" else
        f"figures are the model's code as written at the expected rates, efficiency {_source(options, own_table)} "
        "(docs/accounting.md, Expected time)",
        f"TPOT: the mean step over contexts {targets.isl}..{targets.isl + targets.osl - 1}, exact from fitted counts; "
        "aggregated steps carry the prompt tokens arriving meanwhile (chunked prefill, weights read once per step)",
        "TTFT at p90 under Poisson arrivals (rooflinekit.stages.queueing: M/D/c, Erlang C with the "
        "Allen-Cunneen factor 1/2): aggregated, the wait for the chunk budget (one server per attention "
        "replica, a prompt taking new/chunk of a step) plus ceil(prompt / chunk) steps carrying a full chunk, at "
        "the arrival rate the batch sustains (batch / (OSL x TPOT)); disaggregated, the wait for one of the "
        "prefill servers plus one prefill plus the KV cache sent to the decode pool, at the highest rate whose "
        f"TTFT meets the target (without one: {MAX_UTILISATION:.0%} of the prefill pool's capacity), never past "
        "the decode pool's",
        "memory per GPU: weights held, the KV cache of the batch at ISL+OSL, the activation peak",
        spread_note(targets) if not own_table else
        "no p10-p90 ranges: they are the committed efficiency table's residuals, and this plan prices with "
        "another source (a calibrated entry, its own efficiency source or --efficiency)",
    ]
    if options.engine and options.engine != "none":
        notes.append(f"{engine_cost(options.engine).convention()}; in TPOT, the step and every TTFT step (a "
                     "disaggregated prefill pays one sequence's)")
    if options.overlap == "two-batch":
        notes.append("two-batch overlap: every step of an expert-parallel pool runs as two micro-batches, one's "
                     "collectives under the other's kernels (each kernel at half the tokens reading its weights "
                     "once more, each call at half its message; the longer stream), as `profile --overlap "
                     "two-batch` prices a step; layouts without EP, and decode steps of one sequence, run as one batch")
    if options.efficiency:
        notes.append(f"efficiency source: {options.efficiency} (--efficiency; its fractions and their sources are in "
                     "a profile's expected_conventions)")
    if measured is not None:
        notes.append(f"kernel times: each kernel the {measured.label} measures at its own shape, held at its "
                     "roofline; the rest at the fractions (docs/accounting.md, Measured kernel times)")
    if options.mtp or options.draft:
        notes.append(f"speculative decoding: acceptance rate {options.accept:g} per drafted token, "
                     "E = (1 - a^(k+1)) / (1 - a) tokens per verify step")
    if targets.prefix_hit:
        notes.append(f"prefix cache: {targets.prefix_hit:.0%} of each prompt found cached; the rest prefilled as "
                     "one multi-token step after it")
    if moe:
        notes.append("expert parallelism: routing uniform over the experts, the busiest rank "
                     + (f"{options.ep_imbalance:g}x the mean tokens (--ep-imbalance)" if options.ep_imbalance != 1.0
                        else "at the mean (--ep-imbalance 1)")
                     + "; an EP degree that does not divide the experts holds redundant copies up to whole slots "
                       "per GPU, each expert's tokens split evenly between its copies")
    return notes


# -- the Python API ------------------------------------------------------------------------------


def _positive(name: str, value, kind: type, *, allow_none: bool = False):
    """`value` as a positive `kind` (int: whole numbers only), or WorkloadError naming `name`."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise WorkloadError(f"{name}={value!r}: give a {'whole number' if kind is int else 'number'} above zero")
    if not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"{name}={value!r}: give a value above zero")
    return kind(value)


def plan(model: str, *, isl: int = 4096, osl: int = 1024, ttft: float | None = None, tpot: float | None = None,
         prefix_hit: float = 0.0, options: dict | None = None, search: PlanOptions | None = None) -> PlanResult:
    """What `rooflinekit plan MODEL` does, as a typed `PlanResult`: `model` is a model file, a
    transformers config or `hf:TYPE` (`options` its -O options); `ttft`/`tpot` are targets in
    seconds; `search` is the search (PlanOptions: GPUs, hardware, formats, degrees, modes,
    batches, --mtp, --accept, a draft model's path or source, the activation dtype, `targets_at`:
    "p90" meets the targets at the upper end of each figure's p10-p90 range)."""
    search = search or PlanOptions()
    if search.targets_at not in TARGETS_AT:
        raise WorkloadError(f"targets_at={search.targets_at!r}: choose {' or '.join(map(repr, TARGETS_AT))}")
    if not isinstance(model, str) or not model:
        raise WorkloadError(f"model={model!r}: give the path of a model file or config (or hf:TYPE)")
    if not isinstance(prefix_hit, (int, float)) or isinstance(prefix_hit, bool) or not 0 <= prefix_hit < 1:
        raise WorkloadError(f"prefix_hit={prefix_hit!r}: give the cached share of a prompt, 0 <= share < 1")
    targets = Targets(_positive("isl", isl, int), _positive("osl", osl, int),
                      _positive("ttft", ttft, float, allow_none=True), _positive("tpot", tpot, float, allow_none=True),
                      float(prefix_hit), search.targets_at)
    host = get_host()
    opts = dict(options or {})
    draft = load_source(search.draft, {}, host) if isinstance(search.draft, str) else search.draft
    search = replace(search, gpus=_positive("gpus", search.gpus, int), draft=draft)
    return run_plan(load_source(model, opts, host), targets, search, dtype=search.dtype,
                    model_options=tuple(sorted(opts.items())), host=host)
