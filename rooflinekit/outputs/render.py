"""Render: reports to a terminal table, Markdown, CSV or JSON.

The text report fits 100 columns by default (short column names; columns left out by priority and
named at the end, `wide=True` for everything), folds repeated layers into one row
(`group_layers=False` lists each), prints every number through rooflinekit.core.units (SI
prefixes, no scientific notation), and colours bounds, titles and warnings when asked (a terminal).
"""

from __future__ import annotations

import io

from rooflinekit.core.codec import dumps, encode
from rooflinekit.core.report import Report
from rooflinekit.core.units import plain, ratio, seconds, share, si
from rooflinekit.outputs.columns import num
from rooflinekit.outputs.csv_tables import TABLES, to_csv
from rooflinekit.outputs.memory_view import memory_lines
from rooflinekit.outputs.notebook import report_html
from rooflinekit.outputs.pipeline_parallel_view import pipeline_lines, pipeline_of, pipeline_table
from rooflinekit.outputs.sections import (
    attention_notes,
    attention_table,
    attention_title,
    comm_table,
    module_table,
    ops_table,
    ops_title,
    ranks_table,
    uncounted_table,
)
from rooflinekit.outputs.tables import WIDTH, Style, legend, table, wrap
from rooflinekit.outputs.words import (
    deployment_words,
    efficiency_name,
    options_words,
    request_words,
)

FORMATS = ("table", "json", "csv", "markdown")
__all__ = ["FORMATS", "TABLES", "header_lines", "measured_lines", "parallel_lines", "render",
           "seconds", "to_csv", "to_json", "to_text"]


def workload_formats(report) -> str:
    """", bf16" and the non-default deployment, multi-token decode and model options in words
    (", bf16, TP 2, int4 weights, fp8 KV, 4 new tokens/seq, options layers=2")."""
    w = report.workload
    return request_words(w.dtype, getattr(report, "deployment", None), w.q_len if w.phase == "decode" else None,
                         w.options)


def request_lines(report) -> list[str]:
    """The workload line, and the deployment and the model's options lines where there are any."""
    w = report.workload
    tokens = f", {w.q_len} new tokens/seq" if w.phase == "decode" and w.q_len > 1 else ""
    lines = [f"workload: {w.phase}, batch {w.batch}, context {w.context}, {w.dtype}{tokens}, device {w.device}"]
    mix, chunk = getattr(w, "mix", None), getattr(w, "chunk", None)
    if mix or chunk:  # a mixed step: its segments (batch: the sequences, context: the largest)
        parts = [f"{n} x decode at {c}" for c, n in mix or ()]
        parts += [f"chunk of {chunk} after {w.chunk_offset or 0} cached"] if chunk else []
        lines.append(f"mixed step: {' + '.join(parts)}, weights read once")
    words = deployment_words(getattr(report, "deployment", None), w.dtype)
    if words:
        lines.append(f"deployment: {words}")
    if w.options:
        lines.append(f"model options: {options_words(w.options)}")
    return lines


def header_lines(report: Report) -> list[str]:
    hw, t, model = report.hardware, report.totals, report.model
    fused = getattr(t, "fused", None)
    lines = [
        f"model: {model.name or '?'} ({model.kind or ''}: {model.path or ''}), "
        f"{num(model.parameters)} parameters, {num(model.param_bytes, 'B')} of weights",
        *request_lines(report),
        f"hardware: {hw.name}: {si(hw.peak_flops, 'FLOP/s')} dense {hw.dtype}, "
        f"{si(hw.bandwidth, 'B/s')}, ridge {plain(hw.ridge, 4)} FLOP/B",
        f"step: {si(t.flops, 'FLOP')} executed ({si(t.flops_model, 'FLOP')} model), "
        f"{si(t.bytes, 'B')} moved (weights {si(t.weight_bytes, 'B')}, "
        f"KV {si(t.kv_bytes_executed, 'B')}, other {si(t.other_bytes, 'B')})",
        f"intensity {ratio(t.intensity)} FLOP/B -> {t.bound}-bound, bound MFU {share(t.mfu_bound)} "
        f"(model-FLOP MFU bound {share(t.mfu_bound_model)})",
        f"predicted step {seconds(t.predicted_step_s)} (sum of op bounds{', eager' if fused else ''}; whole-step "
        f"bound {seconds(t.time_bound_s)})" + (f", {si(t.tokens_per_s)} tokens/s" if t.tokens_per_s else ""),
    ]
    if getattr(t, "expected_step_s", 0.0):
        lines.append(expected_line(t, efficiency_name(report)))
    if fused is not None:
        lines.append(f"fused (elementwise chains fused between matmul/attention anchors): {si(fused.bytes, 'B')} "
                     f"moved, intensity {ratio(fused.intensity)} FLOP/B, predicted step "
                     f"{seconds(fused.predicted_step_s)}")
    return (lines + views_lines(report) + memory_lines(report) + measured_lines(report) + parallel_lines(report)
            + pipeline_lines(report))


def views_lines(report: Report) -> list[str]:
    """The other kernels view's step beside this one's, with the largest gap in words."""
    v = getattr(report, "views", None)
    if v is None:
        return []
    line = (f"kernels: {report.deployment.kernels} view; predicted step as written "
            f"{seconds(v.as_written_step_s)}, serving {seconds(v.serving_step_s)}")
    g = v.largest_gap
    if g is not None:
        line += (f"; largest gap {g.module}: {g.why}: as written {seconds(g.as_written_s)}, "
                 f"serving {seconds(g.serving_s)}")
    return [line]


def expected_line(t, source: str = "published") -> str:
    """The expected step beside the bound, the efficiency source it is priced with, and tokens/s per
    GPU and per user at it."""
    rates = [f"{si(t.tokens_per_s_per_gpu)} tokens/s per GPU"] if t.tokens_per_s_per_gpu else []
    if t.tokens_per_s_per_user:
        rates.append(f"{si(t.tokens_per_s_per_user)} per user")
    host = getattr(t, "engine_host_s", None)
    engine = f", engine host {seconds(host)}" if host is not None else ""
    hidden = getattr(t, "overlap_hidden_s", None)
    engine += f", two-batch overlap hides {seconds(hidden)}" if hidden is not None else ""
    if any(c.startswith("host-bound:") for c in getattr(t, "expected_conventions", None) or ()):
        engine += ", waits for the host's launches"
    return (f"expected step {seconds(t.expected_step_s)}{range_words(t)} (efficiency {source}{engine}, "
            f"docs/accounting.md) / bound {seconds(t.time_bound_s)}" + (f"; {', '.join(rates)}" if rates else ""))


def range_words(t) -> str:
    """', p10-p90 9.8 ms to 20.5 ms' from the totals' spread (docs/accounting.md), '' without one."""
    low, high = getattr(t, "expected_low_s", None), getattr(t, "expected_high_s", None)
    return "" if low is None or high is None else f", p10-p90 {seconds(low)} to {seconds(high)}"


def parallel_lines(report: Report) -> list[str]:
    """Header lines for planned parallelism (--tp/--ep), distributed runs and collectives."""
    t, lines = report.totals, []
    par, dist, comm = report.parallel, report.distributed, report.comm
    if par:
        kv = par.get("kv_heads_replicated") or []
        lines.append(
            f"per GPU: tensor parallel {par['tp']}, expert parallel {par['ep']}"
            + (f" ({par['batch_meaning']})" if par["ep"] > 1 else "")
            + f"; weights held {num(par['weights_per_gpu'], 'B')}"
            + (f"; KV heads replicated (1 per GPU) in {', '.join(kv[:3])}{' ...' if len(kv) > 3 else ''}"
               if kv else ""))
    if dist:
        lines.append(f"distributed: {dist['world_size']} ranks ({dist['backend']}, {dist['device']}); figures "
                     f"are rank {dist['slowest_rank']}'s, the slowest; every rank in the Ranks table")
    if par or dist or comm.calls:
        lines.append(
            f"time bounds per GPU: compute {seconds(t.time_compute_s)}, memory {seconds(t.time_memory_s)}, "
            f"communication {seconds(t.time_comm_s)} -> {t.binding} binds"
            + (f" ({comm.calls} collectives, {num(comm.wire_bytes, 'B')} on the links at "
               f"{num(comm.link_bandwidth_per_direction, 'B/s')} per direction)" if comm.calls and
               comm.link_bandwidth_per_direction else ""))
    return lines


def measured_lines(report: Report) -> list[str]:
    """Header lines for measured mode and for a second hardware entry (--compare-hardware)."""
    t, lines = report.totals, []
    m = t.measured
    if m:
        part = m.unattributed_s / m.step_time_s if m.step_time_s else None
        spread = (f" (min {seconds(m.step_time_min_s)}, median {seconds(m.step_time_median_s)}, max "
                  f"{seconds(m.step_time_max_s)})" if m.step_time_min_s is not None else "")
        lines.append(
            f"measured ({m.device}, mean of {m.repeats} after {m.warmup} warm-up): step "
            f"{seconds(m.step_time_s)}{spread} = ops {seconds(m.op_time_s)} + unattributed "
            f"{seconds(m.unattributed_s)} ({share(part)}); uninstrumented {seconds(m.step_time_plain_s)}"
        )
        lines.append(
            f"achieved {num(m.achieved_flops, 'FLOP/s')}, {num(m.achieved_bandwidth, 'B/s')}: "
            f"MFU {share(m.mfu)} (model FLOPs), HFU {share(m.hfu)} (executed), MBU {share(m.mbu)}; "
            f"{ratio(m.time_vs_bound)} times the predicted step"
        )
    alt = report.hardware_alt
    if alt and t.placement_alt:
        pa = t.placement_alt
        lines.append(
            f"compared with {alt.name}{' (calibrated)' if alt.calibrated else ''}: "
            f"{num(alt.peak_flops, 'FLOP/s')} {alt.dtype}, {num(alt.bandwidth, 'B/s')}, ridge "
            f"{plain(alt.ridge, 4)} FLOP/B -> {pa.bound}-bound, predicted step {seconds(pa.predicted_step_s)}"
            + (f", measured MFU {share(pa.mfu)}, MBU {share(pa.mbu)}" if pa.mbu is not None else "")
            + " (modules: placement_alt in JSON)"
        )
    return lines


def to_text(report: Report, fmt: str = "table", top: int | None = 25, *, wide: bool = False,
            group_layers: bool = True, ops: int = 0, colour: bool = False) -> str:
    """The human report: header, modules, attention, the most expensive ops (`ops` > 0), ops
    without a FLOP formula, collectives, ranks, notes and warnings."""
    md = fmt == "markdown"
    width = None if (wide or md) else WIDTH
    style = Style(colour and not md)
    out = io.StringIO()
    if md:
        out.write("# rooflinekit report\n\n")
        out.write("\n".join(f"- {line}" for line in header_lines(report)) + "\n\n")
    else:
        out.write("\n".join(wrap(line, width) for line in header_lines(report)) + "\n\n")
    cols, rows, more = module_table(report, top, group_layers, style)
    folded = group_layers and any(" (x" in r[0] for r in rows)
    sections = [("Modules (by measured time)" if report.totals.measured else "Modules (by time bound)", cols, rows)]
    if report.attention:
        sections.append((attention_title(report), *attention_table(report, group_layers, style)))
    if pipeline_of(report):
        sections.append(("Pipeline stages (per micro-batch: mb)", *pipeline_table(report)))
    if ops:
        sections.append((ops_title(report, ops, group_layers), *ops_table(report, ops, group_layers, style)))
    if report.uncounted_ops:
        sections.append(("Ops without a FLOP formula (bytes counted, FLOPs not)", *uncounted_table(report)))
    if report.comm.calls:
        sections.append(("Collectives per GPU (no FLOPs, no HBM bytes; latency per call: bound / expected)", *comm_table(report)))
    if report.distributed:
        sections.append(("Ranks", *ranks_table(report, style)))
    left_out: list[str] = []
    for title, columns, body in sections:
        text, dropped = table(columns, body, width=width, markdown=md, style=style)
        left_out += [d for d in dropped if d not in left_out]
        out.write(f"## {title}\n\n" if md else style.title(wrap(title, width)) + "\n")
        key = legend([c.header for c in columns], dropped)
        out.write(text + "\n\n" + (f"{key}\n\n" if md else wrap(key, width) + "\n\n" if key else ""))
    footer = []
    if more:
        footer.append(f"({more} more modules: use --top 0 for all, or --format json)")
    if folded:
        footer.append("(xN): N identical layers folded into one row, FLOPs, bytes, times and shares summed; "
                      "--no-group-layers lists each")
    if left_out:
        footer.append(f"columns left out to fit {WIDTH} columns: {', '.join(left_out)}; --wide shows them")
    lines = [f"note: {line}" for line in report.notes]
    lines += [f"note (parallel): {line}" for line in (report.parallel or {}).get("notes", [])]
    if report.comm.calls:
        lines.append(f"note (collectives): {report.comm.assumption}")
    lines += [f"note (attention): {line}" for line in attention_notes(report)]
    for line in footer + lines:
        out.write(wrap(line, width) + "\n")
    for line in report.warnings:
        out.write(style.warning(wrap(f"warning: {line}", width)) + "\n")
    return out.getvalue()


def to_json(data: dict | Report) -> str:
    """A report (or a sweep or comparison dict) as JSON text (codec.dumps); non-finite numbers as null."""
    return dumps(data.to_dict() if isinstance(data, Report) else encode(data))  # to_dict is encoded


def to_html(report: Report) -> str:
    """The notebook's HTML view (Jupyter): tables and an inline SVG roofline (outputs/notebook.py)."""
    return report_html(report)


def render(report: Report, fmt: str, top: int | None = 25, *, wide: bool = False, group_layers: bool = True,
           ops: int = 0, table: str = "modules", colour: bool = False) -> str:
    """`report` in `fmt`: table (text), markdown, csv (one `table`) or json."""
    if fmt == "json":
        return to_json(report)
    if fmt == "csv":
        return to_csv(report, table)
    return to_text(report, fmt, top, wide=wide, group_layers=group_layers, ops=ops, colour=colour)
