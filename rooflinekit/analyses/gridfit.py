"""Sweep points from counts fitted on a few captures (rooflinekit.stages.fitted_capture), checked on one more.

A grid's contexts are split into regions no sliding window separates (a window changes the form of
the counts at its size; contexts within MARGIN of one, and the smallest, are regions of their own).
Per region: captures at two batches x up to three of its contexts, with repeated layers skipped,
fit every op's counts exactly; one full capture at a point the design did not use (the largest
batch the sweep may ask for, the region's largest context) must agree with the fit within
rooflinekit.stages.fitting.TOLERANCE, or the region's points are captured one by one, with a note.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rooflinekit.analyses.profile import Profiled
from rooflinekit.core.errors import UserError
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.report import Report
from rooflinekit.core.request import Workload
from rooflinekit.core.units import plain
from rooflinekit.stages.fitted_capture import FittedCapture, windows
from rooflinekit.stages.fitting import TOLERANCE, Design, FitError
from rooflinekit.stages.repeated_layers import LayerRepeats, layer_repeats
from rooflinekit.stages.request_checks import MAX_BATCH

#: Contexts within this many positions of a window or chunk size are fitted (in batch) alone.
MARGIN = 2
#: Contexts up to this are fitted (in batch) alone: one position, no past, take other code paths.
SMALL_CONTEXT = 2
#: Contexts per region the design captures, by phase (the polynomial's degree in context is one
#: less): decode is linear in context (each position is read a fixed number of times), prefill
#: quadratic (every query against every earlier key).
DESIGN_CONTEXTS = {"decode": 2, "prefill": 3}

#: run(batch, context, repeats) -> a profile at that point, with the layers `repeats` skips skipped.
Run = Callable[[int, int, "LayerRepeats | None"], Profiled]


@dataclass
class RegionFit:
    """The fit that serves some contexts and batches, and the full capture it was checked on."""

    fitted: FittedCapture
    template: Report
    contexts: list[int]
    min_batch: int = 1
    max_batch: int | None = None  # None: no bound

    def serves(self, batch: int) -> bool:
        return self.min_batch <= batch and (self.max_batch is None or batch <= self.max_batch)


@dataclass(frozen=True)
class Grid:
    """What a meta-device grid's fits are made from: the runner of captures and the layers it skips
    in a design, the base workload, the sweep's batches and the largest other batch it may ask for
    (`top_batch`, the critical batch's bound), where each fit is checked."""

    run: Run
    repeats: LayerRepeats
    base: Workload
    host: PluginHost
    batches: tuple[int, ...]
    top_batch: int | None = None


def regions(contexts: list[int], sizes: set[int]) -> list[list[int]]:
    """Contexts (ascending) in runs that no window or chunk size separates; those within MARGIN of
    one, and those up to SMALL_CONTEXT, alone."""
    out: list[list[int]] = []
    run: list[int] = []
    side = None
    for c in sorted(set(contexts)):
        if c <= SMALL_CONTEXT or any(abs(c - w) <= MARGIN for w in sizes):
            if run:
                out.append(run)
                run = []
            out.append([c])
            continue
        here = sum(c > w for w in sizes)
        if run and here != side:
            out.append(run)
            run = []
        run.append(c)
        side = here
    if run:
        out.append(run)
    return out


def design_batches(batches: list[int]) -> tuple[int, int]:
    """The two smallest batches of the sweep (one more than its only batch when it has one)."""
    bs = sorted(set(batches))
    if len(bs) >= 2:
        return bs[0], bs[1]
    return (bs[0], bs[0] + 1) if bs[0] < MAX_BATCH else (bs[0] - 1, bs[0])


def check_batches(batches: list[int], design: tuple[int, ...], top: int | None) -> list[int]:
    """Batches to check the fit at, best first: the largest the sweep may ask for (its own, or
    `top`, the critical batch's bound), then its others, never a design batch."""
    candidates = sorted({*batches, *([top] if top else [])}, reverse=True)
    out = [b for b in candidates if b not in design]
    if not out:
        out = [max(design) + 1] if max(design) < MAX_BATCH else [min(design) - 1]
    return out[:2]


def _not_polynomial(models: list) -> str | None:
    bad = [m for m in models if getattr(m, "scaling", None) != "polynomial"]
    if not bad:
        return None
    names = ", ".join(dict.fromkeys(type(m).__name__ for m in bad))
    return (f"counts not fitted: {names} (a module model) declares no polynomial scaling, its counts are "
            "data-dependent (the MoE expected load: the distinct experts E*(1-(1-k/E)^T) that T tokens touch "
            "are not polynomial in batch); every point is captured")


def _span(contexts: list[int]) -> str:
    return f"S={contexts[0]}" if len(contexts) == 1 else f"S={contexts[0]}..{contexts[-1]} ({len(contexts)} contexts)"


def fit_grid(run: Run, model, base: Workload, host: PluginHost, batches: list[int], contexts: list[int], *,
             top_batch: int | None = None, parallel: bool = False) -> tuple[dict[int, list[RegionFit]], list[str]]:
    """Fits serving the contexts of a meta-device grid (context -> its fits, by batch), and notes
    on what was fitted and what was not (those points are to be captured). `parallel`: the
    deployment splits the model (TP/EP), whose collectives are not fitted."""
    if base.device != "meta":
        return {}, []
    if parallel:
        return {}, ["counts not fitted under --tp/--ep (collectives' link traffic is not fitted): every point "
                    "is captured"]
    repeats = layer_repeats(model)
    b_design = design_batches(batches)
    first_context = min(contexts)
    try:
        first = run(b_design[0], first_context, repeats)
    except UserError:
        if not repeats.skipped:
            raise
        repeats = LayerRepeats()  # skipping repeated layers breaks this model's forward: capture them
        first = run(b_design[0], first_context, repeats)
    why = _not_polynomial(first.models)
    if why:
        return {}, [why]
    sizes, chunks = windows(first.attention)
    if chunks:
        return {}, [f"counts not fitted: chunked attention (chunks of {', '.join(map(str, sorted(chunks)))} "
                    "positions) is not polynomial in context; every point is captured"]
    grid = Grid(run, repeats, base, host, tuple(batches), top_batch)
    fits: dict[int, list[RegionFit]] = {}
    notes: list[str] = []
    for region in regions(contexts, sizes):
        seed = {(b_design[0], first_context): first} if first_context in region else {}
        try:
            done = _fit_region(grid, b_design, region, seed)
        except FitError as exc:
            notes.append(f"counts not fitted for {_span(region)}: {exc}; every point there is captured")
            continue
        for fit, note in done:
            notes.append(note)
            for c in region:
                fits.setdefault(c, []).append(fit)
    return fits, notes


def _structure(p: Profiled) -> list[tuple[str, str]]:
    return [(op.name, op.module) for op in p.capture.ops]


def _fit_region(grid: Grid, b_design: tuple[int, int], region: list[int],
                seed: dict) -> list[tuple[RegionFit, str]]:
    """The fits for one region's contexts: one over every batch, or, where batch 1 runs other ops
    than larger batches (a copy a view makes at B > 1), one at B=1 and one from B=2 on."""
    run, repeats, batches, top_batch = grid.run, grid.repeats, grid.batches, grid.top_batch
    contexts = tuple(region[:DESIGN_CONTEXTS.get(grid.base.phase, 3)])
    captures = dict(seed)
    b1, b2 = b_design
    try:
        first = captures.get((b1, contexts[0])) or run(b1, contexts[0], repeats)
        second = run(b2, contexts[0], repeats)
    except UserError as exc:
        raise FitError(f"a design capture failed ({exc})") from None
    captures[(b1, contexts[0])], captures[(b2, contexts[0])] = first, second
    if _structure(first) == _structure(second):
        checks = check_batches(list(batches), b_design, top_batch)
        return [_fit(grid, Design(b_design, contexts), checks, region, captures, 1, None)]
    if b1 != 1:
        raise FitError(f"B={b1} and B={b2} run different ops")
    b3 = next((b for b in sorted(set(batches)) if b > b2), b2 + 1)
    ones = _fit(grid, Design((1,), contexts), [1], region, captures, 1, 1)
    rest = _fit(grid, Design((b2, b3), contexts), check_batches(list(batches), (b2, b3), top_batch), region,
                captures, 2, None)
    return [ones, rest]


def _fit(grid: Grid, design: Design, checks: list[int], region: list[int], captures: dict, min_batch: int,
         max_batch: int | None) -> tuple[RegionFit, str]:
    run, repeats = grid.run, grid.repeats
    template, failure = None, None
    for b in checks:
        try:
            template = run(b, region[-1], None)
            break
        except UserError as exc:
            failure = exc
    if template is None:
        raise FitError(f"the check capture failed ({failure})")
    check = replace(grid.base, batch=template.report.workload.batch, context=region[-1])
    skipped = len(repeats.skipped)
    try:
        designs = [captures.get(p) or run(*p, repeats) for p in design.points]
        fitted = FittedCapture(design, [(d.capture, d.attention) for d in designs], template.capture,
                               template.attention, check, repeats, grid.host)
    except (FitError, UserError):
        if not skipped:
            raise
        # skipping repeated layers did not hold for this model: the design captured whole
        skipped = 0
        designs = [run(*p, None) for p in design.points]
        fitted = FittedCapture(design, [(d.capture, d.attention) for d in designs], template.capture,
                               template.attention, check, LayerRepeats(), grid.host)
    how = f"; {skipped} of {len(repeats.rep)} repeated layers skipped in those" if skipped else ""
    where = ("B=1" if max_batch == 1 else f"B>={min_batch}" if min_batch > 1 else "every batch")
    degree_b = len(design.batches) - 1
    note = (f"counts fitted for {_span(region)}, {where}: every op's FLOPs and bytes as an exact polynomial of "
            f"degree {degree_b} in batch and {len(design.contexts) - 1} in context, from {len(design.points)} "
            f"captures at B={','.join(map(str, design.batches))} x S={','.join(map(str, design.contexts))}{how}; "
            f"checked against a full capture at B={check.batch}, S={check.context}: largest relative difference "
            f"{plain(fitted.max_difference, 2)} (tolerance {plain(TOLERANCE)}). Points there are evaluated from the fit "
            "and placed as a capture is")
    return RegionFit(fitted, template.report, region, min_batch, max_batch), note
