"""Sweeps: one model profiled over a grid of (batch, context), and the critical batch per context.

The model is built once per sweep (it does not depend on batch or context). On the meta device
every point is evaluated from counts fitted exactly on a few captures and checked on one more
(rooflinekit.analyses.gridfit); elsewhere, and where the counts do not fit, each point makes its
own inputs and runs one capture. The critical batch comes from the model's own counts
(rooflinekit.analyses.critical_batch). A sweep's outcome is one immutable
rooflinekit.core.sweep_report.SweepReport.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, fields, is_dataclass, replace

from rooflinekit.analyses.critical_batch import MAX_BATCH, assumption, critical_batch, summarised
from rooflinekit.analyses.gridfit import RegionFit, fit_grid
from rooflinekit.analyses.profile import Profiled, ReportOptions, counted, run_profile
from rooflinekit.core.codec import decode, encode
from rooflinekit.core.model_facts import ModelFacts, using
from rooflinekit.core.plugins import get_host
from rooflinekit.core.report import HardwareInfo, ModelInfo, Report
from rooflinekit.core.request import Deployment
from rooflinekit.core.sweep_report import (
    AttentionFigures,
    CriticalBatchInfo,
    StepFigures,
    SweepHeader,
    SweepPoint,
    SweepReport,
    SweepWorkload,
)
from rooflinekit.core.units import si
from rooflinekit.outputs.columns import View
from rooflinekit.outputs.csv_tables import table_csv
from rooflinekit.outputs.render import to_json
from rooflinekit.outputs.report_io import attention_figures
from rooflinekit.outputs.sweep_columns import SWEEP_POINTS
from rooflinekit.outputs.sweep_text import sweep_to_text
from rooflinekit.stages.detect import auto_hardware
from rooflinekit.stages.efficiency_table import with_efficiency
from rooflinekit.stages.fitting import Probe
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, HardwareSpec, hardware_db
from rooflinekit.stages.memory import ACTIVATION_NOTE, at_point
from rooflinekit.stages.model_source import build
from rooflinekit.stages.repeated_layers import LayerRepeats, skipping
from rooflinekit.stages.roofline import intensity

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
        self.header: SweepHeader | None = None  # of the first report
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
                report = fit.fitted.report_at(workload, self.hw(), model_info=encode(self.header.model),
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

    def run(self, batch: int, context: int, repeats: LayerRepeats | None = None, *, detail: bool = False) -> Profiled:
        """Profile (batch, context), with the layers `repeats` skips skipped (a fit's design capture);
        its report has op rows and the fused view only with `detail` (a row reads neither)."""
        workload = replace(self.base, batch=batch, context=context)
        source = self._built or self.source
        # the built model's module tree, parameters and plugins' answers about its modules, once
        with using(self._facts) if self._facts is not None else nullcontext():
            options = ReportOptions(depth=self.depth, detail=detail, measure=False)
            if repeats is not None and repeats.skipped:  # a design capture: its counts are fitted, no report
                with skipping(repeats):
                    result = counted(source, workload, self.deployment, self.host)
            elif repeats is not None:
                with skipping(repeats):
                    result = run_profile(source, workload, self.deployment, options=options, host=self.host,
                                     db=self.db)
            else:
                result = run_profile(source, workload, self.deployment, options=options, host=self.host, db=self.db)
        self.profiles += 1
        if self._built is None:
            self._built = replace(self.source, build_model=_always(result.model))
            self._model = result.model
            self._facts = ModelFacts(result.model)
        r = result.report
        if r is None:
            return result
        if self.header is None:
            self.header = SweepHeader.of(r)
        self.notes.update(dict.fromkeys(r.notes))
        self.warnings.update(dict.fromkeys(r.warnings))
        if repeats is None or not repeats.skipped:
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


# -- the sweep --------------------------------------------------------------------------------


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
) -> SweepReport:
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
    batches, contexts = list(batches), list(contexts)
    resolved = deployment.resolved(base.dtype_key)
    points: list[SweepPoint] = []
    found: list[CriticalBatchInfo] = []
    found_ideal: list[CriticalBatchInfo] = []
    interrupted = False
    try:
        if fit and explore:
            prof.fit(batches, contexts, top_batch=max_batch if critical else None)
        for context in contexts:
            for batch in batches:
                point = prof.point(batch, context)
                points.append(point)
                if progress:
                    progress(point)
        if critical:
            _critical_batches(prof, batches, contexts, max_batch, explore, found, found_ideal)
    except KeyboardInterrupt:
        interrupted = True
    notes = list(prof.notes) + [n for n in prof.fit_notes if n not in prof.notes]
    notes += _sweep_notes(points, notes, explore, base.device, critical)
    if found:
        notes.append(assumption(max_batch, explore))
    if interrupted:
        notes.append(_interrupted_note(len(points), len(batches) * len(contexts), len(found), len(contexts)))
    header = prof.header
    return SweepReport(
        workload=decode(SweepWorkload, dict(base_info, batches=batches, contexts=contexts)),
        deployment=resolved,
        hardware=header.hardware if header is not None else _NO_HARDWARE,
        model=header.model if header is not None else ModelInfo(),
        points=_memory_notes_off(points),
        critical_batch=found,
        critical_batch_attention_minimum=found_ideal,
        interrupted=interrupted,
        profiles=prof.profiles,
        evaluated=prof.evaluated,
        wall_s=time.perf_counter() - start,
        warnings=list(prof.warnings),
        notes=notes,
    )


def _interrupted_note(done: int, total: int, found: int, contexts: int) -> str:
    """How far an interrupted sweep got: its points, and its critical batches once every point is done."""
    return (f"interrupted: {done} of {total} points done"
            + ("" if done == total else "; critical batch not computed")
            + (f"; critical batch for {found} of {contexts} contexts" if done == total else ""))


def _critical_batches(prof: Profiler, batches: list[int], contexts: list[int], max_batch: int, explore: bool,
                      found: list[CriticalBatchInfo], found_ideal: list[CriticalBatchInfo]) -> None:
    """The critical batch per context, on the step's counts (into `found`) and on the attention
    minimum's (into `found_ideal`), each appended as it is found (an interrupt keeps those done)."""
    ridge = prof.header.hardware.ridge
    for context in contexts:
        memory = prof.point(batches[0], context).memory
        fits = memory.max_batch if memory is not None else None
        found.append(summarised(critical_batch(prof.probe(context), context, ridge, batches,
                                               max_batch=max_batch, explore=explore),
                                max_batch_fits=fits))
        if prof.row(batches[0], context).attention.recognised:
            found_ideal.append(summarised(critical_batch(
                prof.probe(context, "ideal"), context, ridge, batches, basis="attention minimum",
                max_batch=max_batch, explore=explore), max_batch_fits=fits))


def _sweep_notes(points: list[SweepPoint], profile_notes: list[str], explore: bool, device: str,
                 critical: bool) -> list[str]:
    """The sweep's own notes: an extrapolated critical batch, each point's memory notes once (which
    `_memory_notes_off` then takes off the points), the points that do not fit, the largest share of
    uncounted bytes."""
    notes = []
    if critical and not explore:
        notes.append(
            f"device {device}: the critical batch is fitted on profiles no larger than the sweep's "
            "largest batch, and neither checked with a profile at the batch it solves nor searched (each "
            "batch is real memory there): it is extrapolated; rerun the sweep with --device meta for a "
            "profiled critical batch")
    memory_notes: dict[str, None] = {}
    for p in points:  # each point's memory notes once, in the sweep's notes
        if p.memory is not None:
            memory_notes.update(dict.fromkeys(p.memory.notes))
    notes.extend(n for n in memory_notes if n not in profile_notes)
    short = [p for p in points if p.fits is False]
    if short:
        first, top = short[0], short[0].memory
        notes.append(
            f"{len(short)} of {len(points)} points do not fit in memory (fits false): e.g. B={first.batch}, "
            f"S={first.context} needs {si(top.total_bytes, 'B')} per GPU of {si(top.usable_bytes, 'B')} "
            f"usable ({top.fraction:g} x {si(top.capacity_bytes, 'B')})")
    uncounted = [p for p in points if p.uncounted_bytes_share]
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


def render_sweep(data: dict, fmt: str, *, wide: bool = False, colour: bool = False) -> str:
    """The sweep dict as table, markdown, csv or json (text: rooflinekit.outputs.sweep_text)."""
    if fmt == "json":
        return to_json(data)
    if fmt == "csv":
        return table_csv(SWEEP_POINTS, View(data), data["points"])
    return sweep_to_text(data, fmt, wide=wide, colour=colour)
