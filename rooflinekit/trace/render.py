"""The trace report as text (fits 100 columns), Markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
import json
import re

from rooflinekit.core.units import seconds, share, si
from rooflinekit.outputs.tables import Column, table, wrap
from rooflinekit.trace.cpu import CPU_TIMING
from rooflinekit.trace.render_ranks import FULL_RANKS, render_across
from rooflinekit.trace.report import RankReport, Row, StepSummary, TraceReport

_TYPES = {"float", "double", "int", "long", "unsigned", "char", "bool", "short", "Half", "BFloat16", "true",
          "false", "ul", "decltype", "nullptr", "const", "void", "signed"}
_NOISE = re.compile(r"^void |at::native::|\(anonymous namespace\)::|at::|c10::")


def short_kernel(name: str) -> str:
    """A kernel name without `void`, namespaces torch's kernels share, or its argument list."""
    if name.startswith(("Memcpy", "Memset")):
        return name
    text = _NOISE.sub("", name)
    text = re.sub(r"at::native::|\(anonymous namespace\)::", "", text)
    depth, cut = 0, len(text)
    for k, ch in enumerate(text):  # the argument list: the first '(' outside template brackets
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and k > 0:
            cut = k
            break
    head, _, inner = text[:cut].partition("<")
    if not inner:
        return head
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"\w+::", "", inner))
    words = [w for w in words if w not in _TYPES]
    return f"{head}<{max(words, key=len)}>" if words else head


def _pct(value: float | None) -> str:
    return share(value) if value is not None else "-"


def _heading(text: str, markdown: bool) -> str:
    return f"\n## {text}\n" if markdown else f"\n{text}"


def _put(out: list[str], title: str, columns, rows, width: int | None, markdown: bool) -> None:
    """A titled table (nothing when there are no rows)."""
    if rows:
        out.append(_heading(title, markdown))
        out.append(table(columns, rows, width=width, markdown=markdown)[0])


STEP_COLUMNS = [Column("window", "left"), Column("span"), Column("busy"), Column("idle"), Column("busy %"),
                Column("events"), Column("HFU"), Column("MBU")]


def _step_row(s: StepSummary) -> list[str]:
    return [s.label, seconds(s.span_s), seconds(s.busy_s), seconds(s.idle_s), _pct(s.busy_s / s.span_s if s.span_s else None),
            str(s.events), _pct(s.hfu), _pct(s.mbu)]


def _rate_cells(r: Row) -> list[str]:
    x = r.rates
    return [str(r.events), seconds(x.time_s), si(x.flops_per_s, "FLOP/s") if x.flops else "-",
            _pct(x.peak_fraction), si(x.bytes_per_s, "B/s") if x.bytes else "-", _pct(x.bandwidth_fraction),
            x.dtype if x.flops else "-", x.bound or "-"]


RATE_COLUMNS = [Column("n"), Column("time"), Column("FLOP/s", drop=3), Column("% peak"), Column("bytes/s", drop=2),
                Column("% BW"), Column("dtype", drop=1), Column("bound", "left")]


def counter_section(rank: RankReport, width: int | None, markdown: bool) -> list[str]:
    """The CUPTI counter ranges' FLOPs per kernel name, beside the counted FLOPs (docs/trace.md)."""
    out: list[str] = []
    _put(out, "CUPTI counters: FLOPs each kernel executed (add + mul + 2 x fma; tensor-core work not included)",
         [Column("kernel", "left"), Column("ranges"), Column("fp64"), Column("fp32"), Column("fp16"),
          Column("counted")],
         [[short_kernel(c.name), str(c.ranges), si(c.fp64), si(c.fp32), si(c.fp16),
           "-" if c.counted is None else si(c.counted)] for c in rank.counters], width, markdown)
    return out


def rank_sections(rank: RankReport, width: int | None, markdown: bool) -> list[str]:
    """One rank's tables: steps, classes, kernels, ops, collectives, and what was not counted."""
    if rank.timing == "counters":
        return counter_section(rank, width, markdown) + [""] + [wrap(f"note: {n}", width) for n in rank.notes]
    out: list[str] = [wrap(CPU_TIMING, width)] if rank.timing == "cpu" else []
    steps = rank.steps + [rank.total] if rank.steps else [rank.total]
    mfu = any(s.mfu is not None for s in steps)  # with --profile: the model's FLOPs over busy time
    _put(out, "GPU time per step (busy: some stream runs a kernel, memcpy or memset)",
         STEP_COLUMNS + ([Column("MFU")] if mfu else []),
         [_step_row(s) + ([_pct(s.mfu)] if mfu else []) for s in steps], width, markdown)
    _put(out, f"GPU time by kernel class ({rank.total.label})",
         [Column("class", "left"), Column("time"), Column("share"), Column("events")],
         [[c.klass, seconds(c.time_s), _pct(c.share), str(c.events)] for c in rank.total.by_class], width, markdown)
    _put(out, "Top kernels (counted work shared from the launching op by duration)",
         [Column("kernel", "left"), Column("class", "left", drop=4)] + RATE_COLUMNS,
         [[short_kernel(r.name), r.klass] + _rate_cells(r) for r in rank.kernels], width, markdown)
    _put(out, "Top counted ops", [Column("op", "left"), Column("class", "left", drop=4)] + RATE_COLUMNS,
         [[r.name, r.klass] + _rate_cells(r) for r in rank.ops], width, markdown)
    _put(out, "Time by phase (forward, backward, optimizer)", [Column("phase", "left")] + RATE_COLUMNS,
         [[r.name] + _rate_cells(r) for r in rank.phases], width, markdown)
    _put(out, "Time by module (ops rolled up to their module path, two levels below the top)",
         [Column("module", "left")] + RATE_COLUMNS, [[r.name] + _rate_cells(r) for r in rank.modules],
         width, markdown)
    _put(out, "Collectives (bus bandwidth by nccl-tests' convention)",
         [Column("collective", "left"), Column("group"), Column("calls"), Column("time"), Column("bytes"),
          Column("algbw"), Column("busbw"), Column("sizes from", "left", drop=1)],
         [[c.collective, str(c.group or "-"), str(c.calls), seconds(c.time_s), si(c.bytes, "B"), si(c.algbw, "B/s"),
           si(c.busbw, "B/s"), c.source] for c in rank.collectives], width, markdown)
    if rank.counters:
        out += counter_section(rank, width, markdown)
    _put(out, "Uncounted ops (kernel time without FLOPs/bytes)",
         [Column("op", "left"), Column("status", "left"), Column("n"), Column("time"), Column("why", "left", drop=1)],
         [[r.name, r.status, str(r.events), seconds(r.rates.time_s), r.reason[:60]] for r in rank.uncounted],
         width, markdown)
    _put(out, "Unplaced kernels (no launching aten op: classed by name, not counted)",
         [Column("kernel", "left"), Column("class", "left"), Column("n"), Column("time")],
         [[short_kernel(r.name), r.klass, str(r.events), seconds(r.rates.time_s)] for r in rank.unplaced],
         width, markdown)
    out.append("")
    out.append(wrap(f"coverage: class known for {share(rank.class_coverage)} of GPU time; work counted from "
                    f"recorded shapes for {share(rank.counted_coverage)}", width))
    out += [wrap(f"note: {n}", width) for n in rank.notes]
    return out


def _header(report: TraceReport, width: int | None) -> list[str]:
    peaks = ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in report.peaks.items())
    lines = [f"trace: {report.source}", f"hardware: {report.hardware}: {peaks}; {si(report.bandwidth, 'B/s')} HBM"]
    lines += [f"GPU: {r.device}" + (f" (rank {r.rank})" if r.rank is not None else "") for r in report.ranks[:1]]
    lines.append("HFU = counted FLOPs / (busy time x the dtype's dense peak) (hardware FLOPs: no model FLOPs "
                 "are known for a trace); MBU = counted bytes / (busy time x HBM bandwidth)")
    return [wrap(line, width) for line in lines]


def _side_by_side(report: TraceReport, width: int | None, markdown: bool) -> list[str]:
    """The ranks' totals in one table, and their class times in columns."""
    out: list[str] = []
    rows = [[f"rank {r.rank if r.rank is not None else k}"] + _step_row(r.total)[1:]
            for k, r in enumerate(report.ranks)]
    _put(out, "Ranks side by side", [Column("rank", "left")] + STEP_COLUMNS[1:], rows, width, markdown)
    classes = list(dict.fromkeys(c.klass for r in report.ranks for c in r.total.by_class))
    cells = [[k] + [seconds(next((c.time_s for c in r.total.by_class if c.klass == k), 0.0)) for r in report.ranks]
             for k in classes]
    heads = [Column("class", "left")] + [Column(f"rank {r.rank if r.rank is not None else i}")
                                         for i, r in enumerate(report.ranks)]
    _put(out, "GPU time by kernel class, per rank", heads, cells, width, markdown)
    return out


def render_text(report: TraceReport, width: int | None = 100, markdown: bool = False) -> str:
    """The text (or Markdown) report."""
    out = _header(report, width)
    if markdown:
        out = ["# Trace roofline", ""] + [f"- {line}" for line in out]
    if report.across is not None:
        out += render_across(report.across, width, markdown)
    if len(report.ranks) > 1:
        out += _side_by_side(report, width, markdown)
    if report.across is not None and len(report.ranks) > FULL_RANKS:
        out.append(wrap(f"\n(each rank's own tables: in the JSON report, -f json; {len(report.ranks)} ranks)", width))
        return "\n".join(out).rstrip() + "\n"
    for rank in report.ranks:
        if len(report.ranks) > 1:
            out.append(_heading(f"rank {rank.rank}: {rank.path}", markdown))
        out += rank_sections(rank, width, markdown)
    return "\n".join(out).rstrip() + "\n"


CSV_FIELDS = ["rank", "table", "name", "class", "events", "time_s", "flops", "bytes", "dtype", "flops_per_s",
              "peak_fraction", "bytes_per_s", "bandwidth_fraction", "intensity", "bound", "op", "status"]


def render_csv(report: TraceReport) -> str:
    """Every kernel and op row of every rank, one CSV table with a `table` column."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for rank in report.ranks:
        for name, rows in (("kernels", rank.kernels), ("ops", rank.ops), ("uncounted", rank.uncounted),
                           ("unplaced", rank.unplaced)):
            for r in rows:
                x = r.rates
                writer.writerow([rank.rank, name, r.name, r.klass, r.events, x.time_s, x.flops, x.bytes, x.dtype,
                                 x.flops_per_s, x.peak_fraction, x.bytes_per_s, x.bandwidth_fraction, x.intensity,
                                 x.bound, r.op, r.status])
    return buf.getvalue()


def render(report: TraceReport, fmt: str, width: int | None = 100) -> str:
    """The report in `fmt`: table, markdown, csv or json."""
    if fmt == "json":
        return json.dumps(report.to_dict(), indent=1, allow_nan=False) + "\n"
    if fmt == "csv":
        return render_csv(report)
    return render_text(report, width, markdown=fmt == "markdown")
