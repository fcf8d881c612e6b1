"""A folder of rank traces (one file per rank, hundreds possible): each file read and analysed by a
worker process that returns its rank's report and collective calls (never its events), then the
ranks compared: each one's busy and idle time per step, the straggler of each step (the slowest
rank and how much slower than the median) and the slowest collective calls (by rank and call)."""

from __future__ import annotations

import multiprocessing
import os
import statistics
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rooflinekit.core.errors import UserError
from rooflinekit.trace.analyse import is_cpu_trace, rank_report
from rooflinekit.trace.attribution import Attributed
from rooflinekit.trace.classes import NAMES, classify
from rooflinekit.trace.comms import collective_of
from rooflinekit.trace.counts import ShapeCounter
from rooflinekit.trace.device import match_hardware
from rooflinekit.trace.events import Trace
from rooflinekit.trace.join import join
from rooflinekit.trace.predicted import Prediction
from rooflinekit.trace.reader import TraceError, read_trace, trace_files
from rooflinekit.trace.report import (
    AcrossRanks,
    RankReport,
    RankStep,
    SlowCall,
    Straggler,
    TraceReport,
)

US = 1e-6
#: Slowest collective calls listed.
TOP_CALLS = 5


@dataclass(frozen=True)
class RankResult:
    """What a worker sends back for one rank file: its report and its collective calls in order
    (collective, call number among that collective's calls, seconds), or why it was left out."""

    path: str
    rank: int | None
    hardware: str = ""
    peaks: dict = field(default_factory=dict)
    bandwidth: float = 0.0
    report: RankReport | None = None
    calls: list[tuple[str, int, float]] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    skipped: str = ""


def _calls(trace: Trace) -> list[tuple[str, int, float]]:
    """The rank's communication kernels in time order, numbered per collective name."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for launched in join(trace):
        klass = classify(launched.event.name, launched.op_names)
        if klass != "communication":
            continue
        c = collective_of(Attributed(launched, klass), trace.world_size)
        out.append((c.collective, seen[c.collective], c.dur_us * US))
        seen[c.collective] += 1
    return out


def rank_result(path: str, hardware: str | None, step: int | None, top: int | None,
                prediction: Prediction | None = None) -> RankResult:
    """One rank file read and analysed (what a worker runs)."""
    trace = read_trace(Path(path))
    have = sorted({s.number for s in trace.steps})
    if not trace.gpu and not is_cpu_trace(trace):
        return RankResult(path, trace.rank, steps=have, skipped="no GPU events")
    if step is not None and step not in have:
        return RankResult(path, trace.rank, steps=have, skipped=f"no ProfilerStep#{step}")
    hw = match_hardware([trace], hardware)
    report = rank_report(trace, hw, step, ShapeCounter(), top, prediction=prediction)
    return RankResult(path, trace.rank, hw.name, dict(hw.peak_flops), hw.memory_bandwidth, report,
                      _calls(trace), have)


def _label(result: RankResult, k: int) -> str:
    return f"rank {result.rank if result.rank is not None else k}"


def stragglers(steps: list[RankStep]) -> list[Straggler]:
    """Each step's slowest rank by span, and its excess over the median rank's span."""
    by_step: dict[int, list[RankStep]] = defaultdict(list)
    for s in steps:
        by_step[s.step].append(s)
    out = []
    for number, rows in sorted(by_step.items()):
        median = statistics.median(r.span_s for r in rows)
        slow = max(rows, key=lambda r: r.span_s)
        out.append(Straggler(number, len(rows), median, slow.rank, slow.span_s,
                             (slow.span_s - median) / median if median > 0 else 0.0, min(r.span_s for r in rows)))
    return out


def slowest_calls(calls: dict[str, list[tuple[str, int, float]]], top: int = TOP_CALLS) -> list[SlowCall]:
    """The collective calls (name, number) whose slowest rank took longest, with the median rank."""
    times: dict[tuple[str, int], list[tuple[float, str]]] = defaultdict(list)
    for rank, rank_calls in calls.items():
        for name, number, seconds in rank_calls:
            times[(name, number)].append((seconds, rank))
    rows = []
    for (name, number), ts in times.items():
        slow = max(ts)
        rows.append(SlowCall(name, number, slow[1], slow[0], statistics.median(t for t, _ in ts), len(ts)))
    return sorted(rows, key=lambda r: -r.time_s)[:top]


def across(results: list[RankResult], workers: int) -> AcrossRanks:
    """The cross-rank summary of the analysed ranks."""
    kept = [(k, r) for k, r in enumerate(results) if r.report is not None]
    steps = [RankStep(_label(r, k), s.step, s.span_s, s.busy_s, s.idle_s)
             for k, r in kept for s in (r.report.steps or [r.report.total]) if s.step is not None]
    calls = {_label(r, k): r.calls for k, r in kept}
    return AcrossRanks(len(kept), workers, steps, stragglers(steps), slowest_calls(calls),
                       [f"{r.path}: {r.skipped}" for r in results if r.report is None])


def worker_count(files: int) -> int:
    """Processes to read with: one per core, no more than the files."""
    return max(1, min(os.cpu_count() or 1, files))


def _run(files: list[Path], hardware: str | None, step: int | None, top: int | None,
         workers: int, prediction: Prediction | None = None) -> list[RankResult]:
    """Every file's RankResult, in file order: in this process for one worker, else in a pool."""
    args = [(str(f), hardware, step, top, prediction) for f in files]
    if workers <= 1:
        return [rank_result(*a) for a in args]
    context = multiprocessing.get_context("spawn")  # no fork of a process holding torch's threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(rank_result, *a) for a in args]
        return [f.result() for f in futures]


def _check(results: list[RankResult], path: str, step: int | None) -> list[RankResult]:
    """The analysed ranks; one line when none is."""
    done = [r for r in results if r.report is not None]
    if done:
        return done
    if step is not None:
        have = sorted({n for r in results for n in r.steps})
        listed = ", ".join(map(str, have)) if have else "none (the trace has no ProfilerStep#N events)"
        raise UserError(f"--step {step}: the trace has no ProfilerStep#{step}; its steps: {listed}")
    raise TraceError(f"{path}: none of its {len(results)} trace files holds a GPU kernel, memcpy or memset")


def analyse_ranks(path: str, hardware: str | None = None, step: int | None = None, top: int | None = 15,
                  prediction: Prediction | None = None, workers: int | None = None) -> TraceReport:
    """The report of a folder of rank traces, each read by a worker process, with the ranks
    compared (`TraceReport.across`); `workers` defaults to one per core, at most one per file;
    `prediction` as rooflinekit.trace.analyse.analyse takes it."""
    files = trace_files(os.fspath(path))
    workers = workers or worker_count(len(files))
    results = _run(files, hardware, step, top, workers, prediction)
    done = _check(results, str(path), step)
    first = done[0]
    notes = [f"class names: {', '.join(NAMES)}"]
    other = sorted({r.hardware for r in done} - {first.hardware})
    if other:
        notes.append(f"ranks' deviceProperties name other GPUs too ({', '.join(other)}): figures use {first.hardware}")
    return TraceReport(source=str(path), hardware=first.hardware, peaks=first.peaks, bandwidth=first.bandwidth,
                       ranks=[r.report for r in done], step=step, notes=notes, across=across(results, workers),
                       profile=prediction.source if prediction is not None else None)
