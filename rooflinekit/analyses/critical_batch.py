"""The critical batch at one context: the smallest batch whose whole step reaches the ridge.

Per-step FLOPs and bytes are fitted as affine functions of batch from two profiled batches
(rooflinekit.stages.fitting.AffineFit), the fit is checked on a third, and the batch it solves is
profiled. Where the fit fails (MoE: the experts touched grow with batch) or its batch does not reach
the ridge when profiled, the batch is found by a search with real profiles, never above `max_batch`.
Each answer carries a one-line `summary` of how it was found (rooflinekit.core.sweep_report).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from rooflinekit.core.sweep_report import CriticalBatchInfo
from rooflinekit.core.units import plain, ratio
from rooflinekit.stages.fitting import Probe, fit_affine
from rooflinekit.stages.roofline import intensity, reaches_ridge

#: A fit whose prediction misses a checked batch by more than this is not trusted.
FIT_TOLERANCE = 0.01
#: The search for a critical batch stops here (meta-device profiles cost the same at any batch).
MAX_BATCH = 4096
#: Steps of one batch that the check of a solved batch may take (rounding at the boundary) before
#: the fit is declared wrong and the batch is searched instead.
ROUNDING_STEPS = 2


def assumption(max_batch: int = MAX_BATCH, explore: bool = True) -> str:
    """The note every sweep with a critical batch carries (`explore`: other batches may be profiled)."""
    head = (
        "critical batch: the smallest batch whose whole step (executed FLOPs / executed bytes) reaches "
        "the ridge point. Per-step FLOPs and bytes are assumed affine in batch, F(B) = F0 + B*f and "
        "bytes(B) = W + B*k (weights read once per step, per-sequence work fixed), fitted on two "
        "profiled batches and checked on the others; the intensity then saturates at f/k."
    )
    if not explore:
        return head + " Here the batch the fit solves is not profiled, and a fit that misses is not searched."
    return head + (
        " The batch the fit solves is profiled, with the one below it. A fit off by more than "
        f"{FIT_TOLERANCE:.0%} (MoE: experts touched grow with batch), or a solved batch that does not "
        "reach the ridge when profiled, is replaced by a search with real profiles (doubling, then "
        f"bisection, up to max_batch {max_batch}), which assumes the intensity does not fall as batch grows."
    )


def fits_text(cb: CriticalBatchInfo) -> str:
    """'; exceeds the largest batch that fits in memory (13)' where it does, else ''."""
    if cb.max_batch_fits is None or cb.method == "none":
        return ""
    if cb.critical_batch is not None and cb.critical_batch > cb.max_batch_fits:
        return f"; exceeds the largest batch that fits in memory ({cb.max_batch_fits:,})"
    if cb.critical_batch is None:
        return f"; the largest batch that fits in memory is {cb.max_batch_fits:,}"
    return f"; fits in memory (up to B={cb.max_batch_fits:,})"


def summary(cb: CriticalBatchInfo) -> str:
    """'never: saturates at 7.9 FLOP/B, ridge 295 [...]' or 'B* = 37 (saturates at 412 FLOP/B, ridge 295) [...]'."""
    if cb.method == "none":
        return f"not computed: {cb.note}"
    sat = _fmt(cb.saturation_intensity)
    ridge = f"ridge {cb.ridge:.0f}"
    fitted = f"B={cb.fit['batches'][0]},{cb.fit['batches'][1]}" if cb.fit else "-"
    residual = "unchecked" if cb.residual is None else f"{plain(100 * cb.residual, 2)}%"

    def at(batch: int | None) -> str:  # the intensity profiled at `batch`
        return _fmt(cb.checked.get(str(batch)))

    if cb.method == "search":
        if cb.critical_batch is None:
            text = f"never up to max_batch {cb.max_batch}: intensity {at(cb.max_batch)} there, marginal {sat} FLOP/B, {ridge}"
        else:
            text = f"B* = {cb.critical_batch} (intensity {at(cb.critical_batch)} there, marginal {sat} FLOP/B, {ridge})"
        return f"{text}{fits_text(cb)} [search, {len(cb.checked)} profiles: {cb.fallback}]"
    fit_crit = (cb.fit or {}).get("critical")
    beyond = (cb.critical_batch is None and fit_crit is not None and cb.max_batch is not None
              and fit_crit > cb.max_batch)
    if beyond and cb.profiled:
        text = (f"never up to max_batch {cb.max_batch}: intensity {at(cb.max_batch)} there; the fit reaches the "
                f"ridge at B={fit_crit} (saturates at {sat} FLOP/B, {ridge})")
    elif beyond:
        text = (f"never up to max_batch {cb.max_batch}: the fit reaches the ridge at B={fit_crit} "
                f"(saturates at {sat} FLOP/B, {ridge})")
    elif cb.critical_batch is None:
        text = f"never: saturates at {sat} FLOP/B, {ridge}"
    else:
        text = f"B* = {cb.critical_batch} (saturates at {sat} FLOP/B, {ridge})"
    tail = ""
    if cb.critical_batch is not None or beyond:
        tail = (f"; profiled at B={','.join(sorted(cb.checked, key=int))}" if cb.profiled
                else "; extrapolated, not profiled")
    return f"{text}{fits_text(cb)} [affine fit on {fitted}, residual {residual}{tail}]"


def summarised(cb: CriticalBatchInfo, **changes) -> CriticalBatchInfo:
    """`cb` with `changes` (fields of CriticalBatchInfo), its summary written afresh from them."""
    cb = replace(cb, **changes)
    return replace(cb, summary=summary(cb))


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return ratio(value) if value < 100 else f"{value:.0f}"


def probe_batches(batches: Iterable[int], limit: int | None = None) -> list[int]:
    """At least three distinct batches: the sweep's own, topped up from 1, 2, 8, 32, 128 (none above `limit`)."""
    chosen = sorted(set(batches))
    for extra in (1, 2, 8, 32, 128):
        if len(chosen) >= 3:
            break
        if extra not in chosen and (limit is None or extra <= limit):
            chosen = sorted({*chosen, extra})
    return chosen


def search_critical(probe: Probe, ridge: float, max_batch: int = MAX_BATCH,
                    seen: dict[int, float | None] | None = None) -> tuple[int | None, float | None, dict[int, float | None]]:
    """Doubling then bisection with real profiles; returns (batch or None, marginal intensity, probes).

    Never profiles above `max_batch`; the batch returned was profiled and reaches the ridge, the one
    below it was profiled and does not. Assumes the step's intensity does not fall as batch grows.
    The saturation estimate is the marginal intensity between the two largest batches probed:
    (F2-F1)/(bytes2-bytes1). `seen` holds intensities already profiled (batch -> FLOP/B).
    """
    seen = dict(seen or {})

    def at(b: int) -> float | None:
        if b not in seen:
            seen[b] = intensity(*probe(b))
        return seen[b]

    lo, hi, b = 0, None, 1
    while True:
        if reaches_ridge(at(b), ridge):
            hi = b
            break
        lo = b
        if b >= max_batch:
            break
        b = min(2 * b, max_batch)
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if reaches_ridge(at(mid), ridge):
                hi = mid
            else:
                lo = mid
    top = sorted(b for b in seen if b <= max_batch)[-2:]
    marginal = None
    if len(top) == 2:
        (f1, y1), (f2, y2) = probe(top[0]), probe(top[1])
        marginal = math.inf if y2 == y1 else (f2 - f1) / (y2 - y1)
    return hi, marginal, seen


def critical_batch(
    probe: Probe,
    context: int,
    ridge: float,
    batches: Iterable[int],
    *,
    basis: str = "executed",
    tolerance: float = FIT_TOLERANCE,
    max_batch: int = MAX_BATCH,
    explore: bool = True,
) -> CriticalBatchInfo:
    """The critical batch at `context` from profiles: an affine fit whose batch is profiled, else a search.

    `explore=False` (a sweep on a real device, where a batch is real memory) profiles nothing but
    `batches` and the top-ups no larger than them: the answer is then the fit's extrapolation,
    marked "not profiled", and a fit that misses is not replaced by a search.
    """
    given = sorted(set(batches))
    chosen = probe_batches(given) if explore else probe_batches(given, limit=max(given))
    if len(chosen) < 2:
        return summarised(CriticalBatchInfo(
            context, None, None, ridge, "none", basis, summary="", max_batch=max_batch,
            note=f"one batch ({chosen[0]}) cannot be fitted and other batches are not profiled on a real device: "
            "sweep two or more batches, or use --device meta"))
    fit = fit_affine(probe, chosen)
    crit_fit = fit.critical(ridge)
    fit_dict = {
        "flops0": fit.flops0, "flops_per_seq": fit.flops_per_seq, "bytes0": fit.bytes0,
        "bytes_per_seq": fit.bytes_per_seq, "batches": list(fit.batches), "checked": list(fit.checked),
        "critical": crit_fit,
    }

    def result(crit, saturation, method, checked=None, note="", profiled=False, fallback=""):
        checked = {str(b): i for b, i in sorted((checked or {}).items())}
        return summarised(CriticalBatchInfo(
            context, crit, saturation, ridge, method, basis, summary="", residual=fit.residual, fit=fit_dict,
            checked=checked, note=note, max_batch=max_batch, profiled=profiled, fallback=fallback))

    fitted = f"B={fit.batches[0]},{fit.batches[1]}"
    if fit.residual is not None and fit.residual > tolerance:
        why = f"affine fit on {fitted} missed by {plain(100 * fit.residual, 2)}% (bytes not affine in batch, e.g. MoE)"
        if not explore:
            return result(None, None, "none", note=f"{why}; no search on a real device (each batch is real "
                          "memory): rerun the sweep with --device meta for a searched critical batch")
        return _searched(probe, ridge, max_batch, {}, why, result)
    if crit_fit is None:
        return result(None, fit.saturation, "affine fit")
    if not explore:
        return result(crit_fit if crit_fit <= max_batch else None, fit.saturation, "affine fit")
    seen: dict[int, float | None] = {}

    def at(b: int) -> float | None:
        if b not in seen:
            seen[b] = intensity(*probe(b))
        return seen[b]

    if crit_fit > max_batch:
        if not reaches_ridge(at(max_batch), ridge):
            return result(None, fit.saturation, "affine fit", seen, profiled=True)
        why = f"the affine fit puts B* at {crit_fit}, but B={max_batch} already reaches the ridge"
        return _searched(probe, ridge, max_batch, seen, why, result)
    b = crit_fit
    for _ in range(ROUNDING_STEPS + 1):  # step by one where rounding put the solved batch off the boundary
        if b > max_batch:
            break
        if reaches_ridge(at(b), ridge):
            if b == 1 or not reaches_ridge(at(b - 1), ridge):
                return result(b, fit.saturation, "affine fit", seen, profiled=True)
            b -= 1
        else:
            b += 1
    why = (f"the affine fit's B*={crit_fit} (fitted on {fitted}, residual "
           f"{'unchecked' if fit.residual is None else f'{plain(100 * fit.residual, 2)}%'}) profiled at "
           f"{_fmt(seen[crit_fit])} FLOP/B, below the ridge")
    return _searched(probe, ridge, max_batch, seen, why, result)


def _searched(probe: Probe, ridge: float, max_batch: int, seen: dict, why: str, result) -> CriticalBatchInfo:
    crit, marginal, seen = search_critical(probe, ridge, max_batch, seen)
    note = (f"searched with real profiles at {len(seen)} batches up to {max(seen)}; the saturation shown is the "
            "marginal intensity between the two largest batches profiled")
    return result(crit, marginal, "search", seen, note, profiled=True, fallback=why)
