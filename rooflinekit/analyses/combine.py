"""`rooflinekit advise --combine`: the built-in levers that compose, priced together as one deployment.

The axes are the levers advise priced alone that change how the step runs, not what it is: the
tensor-parallel degree, the weight format, the KV cache format, and every plugin lever that
restates the capture or changes a model option (absorbed MLA). A combination takes one value per
axis, at least two away from the baseline (one is the single lever, already priced), and is ONE
request (`Deployment` with every change, the plugins' transform last) re-profiled through
`rooflinekit.analyses.profile.run_profile` like any lever. A combination that fits with room for more
sequences is priced again at the largest batch that fits ("batch up to what fits").

Bounded: an axis value whose single lever neither raised tokens/s per GPU nor lowered memory per
GPU is pruned (a value dominated by the baseline); the rest are ordered by a promise (estimated to
fit first, from the single levers' memory ratios; then by the product of their tokens/s-per-GPU
gains) and at most `limit` are priced. A priced combination no better in tokens/s per GPU nor per
user, and no likelier to fit, than another priced row is dominated and left out of the ranking
(counted in `AdviceReport.combine`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from rooflinekit.core.advice_report import CombineSearch, LeverResult
from rooflinekit.core.errors import RooflineError
from rooflinekit.core.report import Report
from rooflinekit.core.request import Deployment, Workload, deployment_settings
from rooflinekit.stages.request_checks import MAX_BATCH

#: At most this many combinations are priced unless --max-combinations says otherwise.
COMBINE_LIMIT = 24


@dataclass(frozen=True)
class Move:
    """One value of one axis: its single lever's request and figures."""

    axis: str
    name: str
    deployment: dict  # the Deployment fields it sets
    workload: Workload | None = None  # a plugin lever's changed workload (None: the baseline's)
    transform: object = None
    rebuild: bool = False
    result: LeverResult | None = None


@dataclass(frozen=True)
class Context:
    """What every combination is priced against: the baseline's request and report, and how to profile."""

    workload: Workload
    deployment: Deployment
    base: Report
    profile: Callable[..., Report]  # (workload, deployment, transform, rebuild) -> Report
    price: Callable[..., LeverResult]  # (name, report, assumption, changes) -> LeverResult
    progress: Callable[[str], None] | None = None


AXES = ("tp", "weights", "kv", "plugin")


def move_of(name: str, changes: dict, cand, result: LeverResult) -> Move | None:
    """The axis move a priced single lever stands for, or None for one that does not compose (a
    batch, a q_len, the fused view)."""
    if cand.view == "fused" or name.startswith(("batch", "q_len")):
        return None
    if cand.source != "rooflinekit":
        dep = {k: v for k, v in changes.items() if k in DEPLOYMENT_FIELDS}
        return Move("plugin", name, dep, cand.workload, cand.transform, cand.rebuild, result)
    for axis in ("tp", "weights", "kv"):  # the settings of each axis, as their declarations name it (Setting.axis)
        names = [s.name for s in deployment_settings() if s.axis == axis]
        if any(n in changes for n in names):
            return Move(axis, name, {n: getattr(cand.deployment, n) for n in names}, result=result)
    return None


DEPLOYMENT_FIELDS = frozenset(Deployment.__dataclass_fields__)


def useful(move: Move, base: LeverResult) -> bool:
    """Whether the single lever beat the baseline in tokens/s per GPU or in memory per GPU."""
    r = move.result
    faster = (r.tokens_per_s_per_gpu or 0.0) > (base.tokens_per_s_per_gpu or 0.0)
    smaller = r.memory_bytes is not None and base.memory_bytes is not None and r.memory_bytes < base.memory_bytes
    return faster or smaller


def _promise(combo: tuple[Move, ...], base: LeverResult, usable: float | None) -> tuple:
    """(estimated to fit, estimated gain): the single levers' memory ratios and tokens/s-per-GPU
    gains multiplied (a guess used for the order, never reported)."""
    gain, memory = 1.0, base.memory_bytes
    for m in combo:
        r = m.result
        if base.tokens_per_s_per_gpu and r.tokens_per_s_per_gpu:
            gain *= r.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu
        if memory is not None and r.memory_bytes is not None and base.memory_bytes:
            memory *= r.memory_bytes / base.memory_bytes
    fits = memory is not None and usable is not None and memory <= usable
    return (not fits, -gain, len(combo))


def combinations(moves: list[Move]) -> list[tuple[Move, ...]]:
    """Every choice of at most one move per axis with at least two moves."""
    by_axis: dict[str, list] = {}
    for m in moves:
        # plugin levers are each an axis of their own (on or off)
        by_axis.setdefault(m.axis if m.axis != "plugin" else f"plugin:{m.name}", []).append(m)
    choices = [[None] + ms for ms in by_axis.values()]
    out = []
    for pick in itertools.product(*choices):
        combo = tuple(m for m in pick if m is not None)
        if len(combo) >= 2:
            out.append(combo)
    return out


def _request(ctx: Context, combo: tuple[Move, ...]) -> tuple[Workload, Deployment, object, bool]:
    workload, deployment, transforms, rebuild = ctx.workload, ctx.deployment, [], False
    for m in combo:
        deployment = replace(deployment, **m.deployment)
        if m.workload is not None and m.workload != ctx.workload:
            workload = replace(workload, options=tuple(sorted({**dict(workload.options), **dict(m.workload.options)}
                                                              .items())))
        if m.transform is not None:
            transforms.append(m.transform)
        rebuild = rebuild or m.rebuild
    if len(transforms) > 1:
        raise RooflineError("more than one restating lever in one combination")
    return workload, deployment, transforms[0] if transforms else None, rebuild


def words(ctx: Context, deployment: Deployment, combo: tuple[Move, ...], batch: int | None = None) -> str:
    """The combination in words: the deployment's changes (Deployment.words, less the baseline's),
    the plugin levers by name, and a raised batch."""
    key = ctx.workload.dtype_key
    before = set(ctx.deployment.words(key).split(", "))
    parts = [p for p in deployment.words(key).split(", ") if p and p not in before]
    parts += [m.name for m in combo if m.axis == "plugin"]
    if batch is not None:
        parts.append(f"batch {batch:,}")
    return ", ".join(parts)


def _at_batch(ctx: Context, request: tuple, report: Report) -> tuple[Report, int] | None:
    """The combination at the largest batch that fits (one step down where the profile there does
    not fit, as the batch lever settles), or None where it has no room for another sequence."""
    workload, deployment, transform, rebuild = request
    m = report.memory
    if m is None or not m.fits or not m.max_batch or m.max_batch <= workload.batch:
        return None
    target = min(m.max_batch, MAX_BATCH)
    bigger = ctx.profile(replace(workload, batch=target), deployment, transform, rebuild)
    if bigger.memory is not None and bigger.memory.fits is False and bigger.memory.max_batch \
            and workload.batch < bigger.memory.max_batch < target:
        target = bigger.memory.max_batch
        bigger = ctx.profile(replace(workload, batch=target), deployment, transform, rebuild)
    return bigger, target


def _price_one(ctx: Context, combo: tuple[Move, ...]) -> tuple[list[LeverResult], int]:
    """The combination's rows (at the baseline's batch, and at the largest batch that fits) and
    the profiles it took."""
    request = _request(ctx, combo)
    workload, deployment, _, _ = request
    name = words(ctx, deployment, combo)
    assumption = ("combined in one deployment, each as its lever alone assumes: "
                  + ", ".join(m.name for m in combo))
    report = ctx.profile(*request)
    rows = [ctx.price(name, report, assumption, workload, deployment)]
    profiles = 1
    raised = _at_batch(ctx, request, report)
    if raised is not None:
        bigger, target = raised
        profiles += 1
        rows.append(ctx.price(words(ctx, deployment, combo, target), bigger,
                              assumption + f"; batch raised from {workload.batch} to the largest that fits",
                              replace(workload, batch=target), deployment))
    return rows, profiles


def dominated(row: LeverResult, others: list[LeverResult]) -> bool:
    """Another row fits at least as surely and is at least as fast per GPU and per user, and
    strictly better in one of them or a simpler request (fewer changes)."""
    def key(r):
        return (1 if r.fits else 0, r.tokens_per_s_per_gpu or 0.0, r.tokens_per_s_per_user or 0.0)

    mine = key(row)
    for other in others:
        if other is row:
            continue
        theirs = key(other)
        if all(t >= m for t, m in zip(theirs, mine, strict=True)) and (theirs != mine or len(other.changes) < len(row.changes)):
            return True
    return False


def search(ctx: Context, moves: list[Move], singles: list[LeverResult], baseline: LeverResult,
           limit: int = COMBINE_LIMIT) -> tuple[list[LeverResult], CombineSearch, int]:
    """Price the combinations (see the module docstring): the non-dominated rows, what the search
    did, and the profiles it ran. A combination the request checks refuse is left out, its reason noted."""
    kept = [m for m in moves if useful(m, baseline)]
    pruned = [f"{m.name}: alone it neither raised tokens/s per GPU nor lowered memory per GPU"
              for m in moves if m not in kept]
    usable = ctx.base.memory.usable_bytes if ctx.base.memory is not None else None
    combos = sorted(combinations(kept), key=lambda c: _promise(c, baseline, usable))
    rows: list[LeverResult] = []
    profiles = 0
    for i, combo in enumerate(combos[:limit], 1):
        if ctx.progress:
            ctx.progress(f"combination {i}/{min(limit, len(combos))}: {' + '.join(m.name for m in combo)}")
        try:
            priced, n = _price_one(ctx, combo)
        except RooflineError as exc:
            pruned.append(f"{' + '.join(m.name for m in combo)}: {exc}")
            continue
        rows += priced
        profiles += n
    shown = [r for r in rows if not dominated(r, rows + singles)]
    axes: dict[str, list[str]] = {}
    for m in kept:
        axes.setdefault(m.axis, []).append(m.name)
    info = CombineSearch(axes=axes, enumerated=len(combos), priced=min(limit, len(combos)), limit=limit,
                         dominated=len(rows) - len(shown), pruned=pruned)
    return shown, info, profiles
