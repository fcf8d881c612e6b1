"""Sweeps: one model profiled over a grid of (batch, context), and the critical batch per context.

The model is built once per sweep (it does not depend on batch or context). On the meta device
every point is evaluated from counts fitted exactly on a few captures and checked on one more
(rooflinekit.analyses.gridfit); elsewhere, and where the counts do not fit, each point makes its
own inputs and runs one capture. The critical batch comes from the model's own counts: per-step
FLOPs and bytes are fitted as affine functions of batch from two profiled batches, the fit is
checked on a third, and the batch it solves is profiled. Where the fit fails (MoE: the experts
touched grow with batch) or its batch does not reach the ridge when profiled, the batch is found by
a search with real profiles, never above `max_batch`.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field, fields, is_dataclass, replace

from rooflinekit.analyses.gridfit import RegionFit, fit_grid
from rooflinekit.analyses.profile import Profiled, ReportOptions, counted, profile
from rooflinekit.core.codec import decode, encode
from rooflinekit.core.model_facts import ModelFacts, using
from rooflinekit.core.plugins import get_host
from rooflinekit.core.report import HardwareInfo, ModelInfo, Report
from rooflinekit.core.request import Deployment
from rooflinekit.core.sweep_report import (
    AttentionFigures,
    CriticalBatchInfo,
    StepFigures,
    SweepPoint,
    SweepReport,
    SweepWorkload,
)
from rooflinekit.core.units import plain, ratio, si
from rooflinekit.outputs.render import to_json
from rooflinekit.outputs.report_io import attention_figures
from rooflinekit.outputs.sweep_text import sweep_to_text
from rooflinekit.stages.detect import auto_hardware
from rooflinekit.stages.expected import with_efficiency
from rooflinekit.stages.fit import LayerPlan, skipping
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, HardwareSpec, hardware_db
from rooflinekit.stages.memory import ACTIVATION_NOTE, at_point
from rooflinekit.stages.roofline import intensity
from rooflinekit.stages.workload import build

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


Probe = Callable[[int], tuple[float, float]]

#: How a point evaluated from a fit has its activation peak.
FITTED_ACTIVATIONS = (ACTIVATION_NOTE + "; at a point evaluated from fitted counts, the liveness is the fit's "
                      "full capture's, each allocation scaled as its op's fitted bytes written")


# -- one point -------------------------------------------------------------------------------


def _floats(obj):
    """A report dataclass with the ints its float fields hold (counts summed from integers) made
    floats, nested dataclasses too: a sweep point's numbers are floats, as its JSON has them."""
    changes = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if type(value) is int and str(f.type).split(" | ")[0] == "float":
            changes[f.name] = float(value)
        elif is_dataclass(value):
            typed = _floats(value)
            if typed is not value:
                changes[f.name] = typed
    return replace(obj, **changes) if changes else obj


def point_row(report: Report) -> SweepPoint:
    """The sweep point of one profile report: the whole step, its byte split, attention totals."""
    w, t = report.workload, report.totals
    att = attention_figures(report)
    nbytes = t.bytes if t.bytes is not None and math.isfinite(t.bytes) else 0.0
    uncounted = t.uncounted_bytes
    # the step with each recognised attention layer at its architecture minimum (a fused kernel)
    ideal_bytes = nbytes - att["bytes_executed"] + att["bytes_min"]

    def share(value):
        return value / nbytes if nbytes and value is not None else None

    return _floats(SweepPoint(
        batch=w.batch,
        context=w.context,
        phase=w.phase,
        tokens=w.tokens,
        flops=t.flops,
        flops_model=t.flops_model,
        bytes=nbytes,
        intensity=t.intensity,
        attainable_flops=t.attainable_flops,
        bound=t.bound,
        time_bound_s=t.time_bound_s,
        predicted_step_s=t.predicted_step_s,
        tokens_per_s=t.tokens_per_s,
        mfu_bound=t.mfu_bound,
        mfu_bound_model=t.mfu_bound_model,
        weight_bytes=t.weight_bytes,
        kv_bytes_executed=t.kv_bytes_executed,
        kv_bytes_min=t.kv_bytes_min,
        other_bytes=t.other_bytes,
        uncounted_bytes=uncounted,
        weight_share=share(t.weight_bytes),
        kv_share=share(t.kv_bytes_executed),
        other_share=share(t.other_bytes),
        uncounted_bytes_share=share(uncounted),
        attention=AttentionFigures(**att),
        step_at_attention_minimum=StepFigures(t.flops_model, ideal_bytes, intensity(t.flops_model, ideal_bytes)),
        memory=report.memory,
        fits=report.memory.fits if report.memory is not None else None,
        expected_step_s=t.expected_step_s or None,
        tokens_per_s_per_gpu=t.tokens_per_s_per_gpu,
        tokens_per_s_per_user=t.tokens_per_s_per_user,
    ))


def _always(model):
    """A build_model that hands back an already built model: the sweep builds once."""

    def build_model(**_options):
        return model

    return build_model


class Profiler:
    """Profile one model at any (batch, context), building it once and caching each sweep point.

    Counts only: no point is timed, whatever the device (measured mode is `profile --measure`).
    The notes and warnings of every profile are kept, each once, in order of first appearance.
    After `fit(batches, contexts)`, points at the contexts it fitted are evaluated from counts
    fitted on a few captures (rooflinekit.analyses.gridfit) instead of captured.
    """

    def __init__(self, source, base, deployment: Deployment, *, depth: int = 3, host=None, db=None):

        self.source = source
        self.base = base
        self.deployment = deployment
        self.depth = depth
        self.host = host or get_host()
        self.db = db or hardware_db(self.host)
        self.rows: dict[tuple[int, int], SweepPoint] = {}
        self.header: dict | None = None  # schema_version, tool, model, hardware of the first report
        self.notes: dict[str, None] = {}  # ordered sets
        self.warnings: dict[str, None] = {}
        self.profiles = 0
        self.evaluated = 0  # points evaluated from a fit rather than captured
        self.fits: dict[int, list[RegionFit]] = {}  # context -> the fits that serve it
        self.fit_notes: list[str] = []
        self._built = None
        self._model = None
        self._facts: ModelFacts | None = None  # of the built model (rooflinekit.core.model_facts)
        self._hw: HardwareSpec | None = None
        self._fitted: dict[tuple[int, int], Report] = {}  # fitted points' reports, until their memory is known

    def row(self, batch: int, context: int) -> SweepPoint:
        """The sweep point at (batch, context), from the fit at its context or profiled, on first use."""
        key = (batch, context)
        if key not in self.rows:
            fit = self.fit_for(batch, context)
            if fit is not None:
                workload = replace(self.base, batch=batch, context=context)
                report = fit.fitted.report_at(workload, self.hw(), model_info=self.header["model"],
                                              deployment=self.deployment, depth=self.depth, compact=True)
                self.rows[key] = point_row(report)
                self._fitted[key] = report
                self.evaluated += 1
            else:
                self.run(batch, context)  # keeps its row
        return self.rows[key]

    def point(self, batch: int, context: int) -> SweepPoint:
        """The sweep point at (batch, context) with its memory: a profile's own; for a point from a
        fit, the fitted report's KV cache, the profiled weights, and the activation peak of the fit's
        full capture with every allocation scaled as its op's bytes written (rooflinekit.stages.memory)."""
        row = self.row(batch, context)
        report = self._fitted.pop((batch, context), None)
        fit = self.fit_for(batch, context)
        if row.memory is None and report is not None and fit is not None and fit.template.memory is not None:
            memory = at_point(fit.template.memory, report, self.hw(), fit.fitted.activation_peak_at(batch, context),
                              FITTED_ACTIVATIONS)
            row = self.rows[(batch, context)] = replace(row, memory=_floats(memory), fits=memory.fits)
        return row

    def report(self, batch: int, context: int) -> Report:
        """A full profile report at (batch, context) with the model built once (counts, not timed)."""
        return self.run(batch, context, detail=True).report

    def report_at(self, batch: int, context: int) -> Report:
        """The full report at (batch, context): from the fit at its context (every op, module and
        attention row, placed as a capture's), else profiled."""
        fit = self.fit_for(batch, context)
        if fit is None:
            return self.report(batch, context)
        t = fit.template
        return fit.fitted.report_at(replace(self.base, batch=batch, context=context), self.hw(),
                                    model_info=encode(t.model), deployment=self.deployment, depth=self.depth,
                                    notes=t.notes, warnings=t.warnings)

    def fit_for(self, batch: int, context: int) -> RegionFit | None:
        """The fit that serves (batch, context), if any."""
        return next((f for f in self.fits.get(context, ()) if f.serves(batch)), None)

    def run(self, batch: int, context: int, plan: LayerPlan | None = None, *, detail: bool = False) -> Profiled:
        """Profile (batch, context), with the layers `plan` skips skipped (a fit's design capture);
        its report has op rows and the fused view only with `detail` (a row reads neither)."""
        workload = replace(self.base, batch=batch, context=context)
        source = self._built or self.source
        # the built model's module tree, parameters and plugins' answers about its modules, once
        with using(self._facts) if self._facts is not None else nullcontext():
            options = ReportOptions(depth=self.depth, detail=detail, measure=False)
            if plan is not None and plan.skipped:  # a design capture: its counts are fitted, no report
                with skipping(plan):
                    result = counted(source, workload, self.deployment, self.host)
            elif plan is not None:
                with skipping(plan):
                    result = profile(source, workload, self.deployment, options=options, host=self.host,
                                     db=self.db)
            else:
                result = profile(source, workload, self.deployment, options=options, host=self.host, db=self.db)
        self.profiles += 1
        if self._built is None:
            self._built = replace(self.source, build_model=_always(result.model))
            self._model = result.model
            self._facts = ModelFacts(result.model)
        r = result.report
        if r is None:
            return result
        if self.header is None:
            self.header = {k: encode(getattr(r, k)) for k in ("schema_version", "tool", "model", "hardware")}
        self.notes.update(dict.fromkeys(r.notes))
        self.warnings.update(dict.fromkeys(r.warnings))
        if plan is None or not plan.skipped:
            self.rows.setdefault((batch, context), point_row(r))
        return result

    def model(self):
        """The model, built once (on the base workload's device and dtype)."""
        if self._model is None:
            self._model = build(self.source, self.base).model
            self._built = replace(self.source, build_model=_always(self._model))
            self._facts = ModelFacts(self._model)
        return self._model

    def hw(self) -> HardwareSpec:
        """The hardware entry the profiles are placed on."""
        if self._hw is None:
            if (self.deployment.hardware or "auto") == "auto":
                hw = auto_hardware(self.db, DEFAULT_HARDWARE)[0]
            else:
                hw = self.db.get(self.deployment.hardware)
            self._hw = with_efficiency(hw, self.deployment.efficiency, self.host)
        return self._hw

    def fit(self, batches: list[int], contexts: list[int], *, top_batch: int | None = None) -> None:
        """Fit the counts over batches x contexts where they fit (meta device, no data-dependent
        module models), so that `row` evaluates points there; `top_batch` is the largest batch that
        will be asked for besides `batches` (the critical batch's bound), where the fit is checked."""
        fits, notes = fit_grid(self.run, self.model(), self.base, self.host, list(batches), list(contexts),
                               top_batch=top_batch, parallel=self.deployment.parallel)
        self.fits.update(fits)
        self.fit_notes.extend(notes)

    def probe(self, context: int, basis: str = "executed") -> Probe:
        """(flops, bytes) of the whole step as a function of batch, at one context."""

        def run(batch: int) -> tuple[float, float]:
            r = self.row(batch, context)
            if basis == "executed":
                return r.flops, r.bytes
            ideal = r.step_at_attention_minimum
            return ideal.flops, ideal.bytes

        return run


# -- critical batch ----------------------------------------------------------------------------


def _reaches(value: float | None, ridge: float) -> bool:
    """An intensity at or above the ridge; None (no bytes moved) is compute-bound, as in roofline.place."""
    return value is None or value >= ridge


@dataclass(frozen=True)
class AffineFit:
    """F(B) = flops0 + B*flops_per_seq and bytes(B) = bytes0 + B*bytes_per_seq, from two batches."""

    flops0: float
    flops_per_seq: float
    bytes0: float
    bytes_per_seq: float
    batches: tuple[int, int]
    residual: float | None = None  # largest relative miss on the checked batches
    checked: tuple[int, ...] = ()

    @classmethod
    def through(cls, b1: int, p1: tuple[float, float], b2: int, p2: tuple[float, float]) -> AffineFit:
        f = (p2[0] - p1[0]) / (b2 - b1)
        k = (p2[1] - p1[1]) / (b2 - b1)
        return cls(p1[0] - b1 * f, f, p1[1] - b1 * k, k, (b1, b2))

    def flops(self, batch: float) -> float:
        return self.flops0 + batch * self.flops_per_seq

    def bytes(self, batch: float) -> float:
        return self.bytes0 + batch * self.bytes_per_seq

    def intensity(self, batch: float) -> float | None:
        return intensity(self.flops(batch), self.bytes(batch))

    @property
    def saturation(self) -> float:
        """The limit of F(B)/bytes(B) as B grows: f/k."""
        return math.inf if self.bytes_per_seq <= 0 else self.flops_per_seq / self.bytes_per_seq

    def miss(self, batch: int, point: tuple[float, float]) -> float:
        """Relative miss of the fit on a profiled point (the worse of FLOPs and bytes)."""
        flops, nbytes = point
        return max(abs(self.flops(batch) - flops) / flops if flops else 0.0,
                   abs(self.bytes(batch) - nbytes) / nbytes if nbytes else 0.0)

    def critical(self, ridge: float) -> int | None:
        """The smallest integer B >= 1 with F(B)/bytes(B) >= ridge, or None where none does."""
        if _reaches(self.intensity(1), ridge):
            return 1
        slope = self.flops_per_seq - ridge * self.bytes_per_seq
        if slope <= 0:
            return None
        b = max(1, math.ceil((ridge * self.bytes0 - self.flops0) / slope - 1e-9))
        while not _reaches(self.intensity(b), ridge):  # guard against rounding at the boundary
            b += 1
        while b > 1 and _reaches(self.intensity(b - 1), ridge):
            b -= 1
        return b


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


def fit_affine(probe: Probe, batches: list[int]) -> AffineFit:
    """Fit through the smallest and largest batch; the residual is the worst miss on the others."""
    b1, b2 = batches[0], batches[-1]
    fit = AffineFit.through(b1, probe(b1), b2, probe(b2))
    inner = tuple(batches[1:-1])
    residual = max((fit.miss(b, probe(b)) for b in inner), default=None)
    return replace(fit, residual=residual, checked=inner)


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
        if _reaches(at(b), ridge):
            hi = b
            break
        lo = b
        if b >= max_batch:
            break
        b = min(2 * b, max_batch)
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _reaches(at(mid), ridge):
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
        if not _reaches(at(max_batch), ridge):
            return result(None, fit.saturation, "affine fit", seen, profiled=True)
        why = f"the affine fit puts B* at {crit_fit}, but B={max_batch} already reaches the ridge"
        return _searched(probe, ridge, max_batch, seen, why, result)
    b = crit_fit
    for _ in range(ROUNDING_STEPS + 1):  # step by one where rounding put the solved batch off the boundary
        if b > max_batch:
            break
        if _reaches(at(b), ridge):
            if b == 1 or not _reaches(at(b - 1), ridge):
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


# -- the sweep --------------------------------------------------------------------------------


@dataclass
class SweepResult:
    """The points, the critical batch per context, and whether the user stopped it early."""

    header: dict
    base: dict
    batches: list[int]
    contexts: list[int]
    points: list[SweepPoint] = field(default_factory=list)
    critical: list[CriticalBatchInfo] = field(default_factory=list)
    critical_ideal: list[CriticalBatchInfo] = field(default_factory=list)
    interrupted: bool = False
    profiles: int = 0
    evaluated: int = 0
    wall_s: float = 0.0
    max_batch: int = MAX_BATCH
    explore: bool = True  # whether the critical batch may profile batches the sweep did not ask for
    deployment: Deployment = field(default_factory=Deployment)
    notes: list[str] = field(default_factory=list)  # every profile's notes, each once, then the sweep's own
    warnings: list[str] = field(default_factory=list)

    def report(self) -> SweepReport:
        """The sweep report (its JSON: `to_dict`)."""
        notes = list(self.notes)
        if self.critical:
            notes.append(assumption(self.max_batch, self.explore))
        if self.interrupted:
            total = len(self.batches) * len(self.contexts)
            notes.append(f"interrupted: {len(self.points)} of {total} points done"
                         + ("" if len(self.points) == total else "; critical batch not computed")
                         + (f"; critical batch for {len(self.critical)} of {len(self.contexts)} contexts"
                            if len(self.points) == total else ""))
        header = self.header
        return SweepReport(
            workload=decode(SweepWorkload, dict(self.base, batches=self.batches, contexts=self.contexts)),
            deployment=self.deployment,
            hardware=decode(HardwareInfo, header["hardware"]) if header.get("hardware") else _NO_HARDWARE,
            model=decode(ModelInfo, header.get("model") or {}),
            points=list(self.points),
            critical_batch=list(self.critical),
            critical_batch_attention_minimum=list(self.critical_ideal),
            interrupted=self.interrupted,
            profiles=self.profiles,
            evaluated=self.evaluated,
            wall_s=self.wall_s,
            warnings=list(self.warnings),
            notes=notes,
        )

    def to_dict(self) -> dict:
        """The JSON document of `sweep -f json`."""
        return self.report().to_dict()


@dataclass(frozen=True)
class SweepOptions:
    """What a sweep computes besides its points: the critical batch per context (probing batches up
    to `max_batch`), and whether points are evaluated from fitted counts (`fit`, meta device only)."""

    critical: bool = True
    max_batch: int = MAX_BATCH
    fit: bool = True


#: A sweep interrupted before its first profile has no hardware header yet.
_NO_HARDWARE = HardwareInfo(name="?", dtype="?", peak_flops=0.0, bandwidth=0.0, ridge=0.0)


def run_sweep(
    source,
    base,
    deployment: Deployment,
    batches: list[int],
    contexts: list[int],
    *,
    options: SweepOptions | None = None,
    progress: Callable[[SweepPoint], None] | None = None,
    profiler: Profiler | None = None,
) -> SweepResult:
    """Profile every (batch, context), then the critical batch per context. Ctrl-C keeps what is done.

    On the meta device the critical batch is checked with profiles at any batch up to `max_batch`
    (they cost the same at any batch). On a real device (cpu, cuda) each batch is real memory, so
    only the sweep's own batches are profiled: the critical batch is then the fit's extrapolation,
    and a note says so.

    With `options.fit` (on the meta device), every point and critical-batch probe is evaluated from counts
    fitted exactly on a few captures and checked on one more (rooflinekit.analyses.gridfit), where
    the counts fit; elsewhere it is captured, and the notes say which.
    """

    start = time.perf_counter()
    options = options or SweepOptions()
    critical, max_batch, fit = options.critical, options.max_batch, options.fit
    fit = fit and deployment.pp <= 1  # fitted counts are not pipelined: under --pp every point is profiled
    prof = profiler or Profiler(source, base, deployment)
    base_info = {k: v for k, v in base.to_dict().items() if k not in ("batch", "context", "q_len", "tokens")}
    base_info["q_len"] = base.q_len if base.phase == "decode" else None  # prefill's is each context
    explore = base.device == "meta"
    result = SweepResult(header={}, base=base_info, batches=list(batches), contexts=list(contexts),
                         max_batch=max_batch, explore=explore, deployment=deployment.resolved(base.dtype_key))
    try:
        if fit and explore:
            prof.fit(batches, contexts, top_batch=max_batch if critical else None)
        for context in contexts:
            for batch in batches:
                point = prof.point(batch, context)
                result.points.append(point)
                if progress:
                    progress(point)
        if critical:
            _critical_batches(prof, result)
    except KeyboardInterrupt:
        result.interrupted = True
    result.header = prof.header or {}
    result.profiles = prof.profiles
    result.evaluated = prof.evaluated
    result.notes = list(prof.notes) + [n for n in prof.fit_notes if n not in prof.notes]
    result.warnings = list(prof.warnings)
    result.notes += _sweep_notes(result, base.device, critical)
    result.points = _memory_notes_off(result.points)
    result.wall_s = time.perf_counter() - start
    return result


def _critical_batches(prof: Profiler, result: SweepResult) -> None:
    """The critical batch per context, on the step's counts and on the attention minimum's."""
    ridge = prof.header["hardware"]["ridge"]
    batches, explore, max_batch = result.batches, result.explore, result.max_batch
    for context in result.contexts:
        memory = prof.point(batches[0], context).memory
        fits = memory.max_batch if memory is not None else None
        result.critical.append(summarised(critical_batch(prof.probe(context), context, ridge, batches,
                                                         max_batch=max_batch, explore=explore),
                                          max_batch_fits=fits))
        if prof.row(batches[0], context).attention.recognised:
            result.critical_ideal.append(summarised(critical_batch(
                prof.probe(context, "ideal"), context, ridge, batches, basis="attention minimum",
                max_batch=max_batch, explore=explore), max_batch_fits=fits))


def _sweep_notes(result: SweepResult, device: str, critical: bool) -> list[str]:
    """The sweep's own notes: an extrapolated critical batch, each point's memory notes once (which
    `_memory_notes_off` then takes off the points), the points that do not fit, the largest share of
    uncounted bytes."""
    notes = []
    if critical and not result.explore:
        notes.append(
            f"device {device}: the critical batch is fitted on profiles no larger than the sweep's "
            "largest batch, and neither checked with a profile at the batch it solves nor searched (each "
            "batch is real memory there): it is extrapolated; rerun the sweep with --device meta for a "
            "profiled critical batch")
    memory_notes: dict[str, None] = {}
    for p in result.points:  # each point's memory notes once, in the sweep's notes
        if p.memory is not None:
            memory_notes.update(dict.fromkeys(p.memory.notes))
    notes.extend(n for n in memory_notes if n not in result.notes)
    short = [p for p in result.points if p.fits is False]
    if short:
        first, top = short[0], short[0].memory
        notes.append(
            f"{len(short)} of {len(result.points)} points do not fit in memory (fits false): e.g. B={first.batch}, "
            f"S={first.context} needs {si(top.total_bytes, 'B')} per GPU of {si(top.usable_bytes, 'B')} "
            f"usable ({top.fraction:g} x {si(top.capacity_bytes, 'B')})")
    uncounted = [p for p in result.points if p.uncounted_bytes_share]
    if uncounted:
        top = max(uncounted, key=lambda p: p.uncounted_bytes_share)
        notes.append(
            f"ops without a FLOP formula move up to {100 * top.uncounted_bytes_share:.1f}% of a step's bytes "
            f"(B={top.batch}, S={top.context}; uncounted_bytes_share per point): their FLOPs count as 0")
    return notes


def _memory_notes_off(points: list[SweepPoint]) -> list[SweepPoint]:
    """The points without their memory notes (the sweep's notes hold each once)."""
    return [replace(p, memory=replace(p.memory, notes=[])) if p.memory is not None and p.memory.notes else p
            for p in points]


# -- rendering ---------------------------------------------------------------------------------

ROW_FIELDS = ["batch", "context", "flops", "bytes", "intensity", "bound", "predicted_step_s", "tokens_per_s",
              "mfu_bound", "weight_bytes", "kv_bytes_executed", "other_bytes", "weight_share", "kv_share",
              "other_share", "attention_intensity_min", "attention_intensity_executed", "time_bound_s",
              "flops_model", "mfu_bound_model", "kv_bytes_min", "uncounted_bytes", "uncounted_bytes_share",
              "memory_bytes", "fits", "max_batch_fits"]


def flat_row(row: dict) -> dict:
    """A point row with the attention figures lifted to the top level (CSV, tables)."""
    out = {k: row.get(k) for k in ROW_FIELDS}
    out["attention_intensity_min"] = row["attention"]["intensity_min"]
    out["attention_intensity_executed"] = row["attention"]["intensity_executed"]
    memory = row.get("memory") or {}
    out["memory_bytes"], out["max_batch_fits"] = memory.get("total_bytes"), memory.get("max_batch")
    return out


def render_sweep(data: dict, fmt: str, *, wide: bool = False, colour: bool = False) -> str:
    """The sweep dict as table, markdown, csv or json (text: rooflinekit.outputs.sweep_text)."""
    if fmt == "json":
        return to_json(data)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=ROW_FIELDS, lineterminator="\n")
        writer.writeheader()
        for row in data["points"]:
            writer.writerow(flat_row(row))
        return buf.getvalue()

    return sweep_to_text(data, fmt, wide=wide, colour=colour)



