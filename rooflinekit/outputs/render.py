"""Render: reports to a terminal table, Markdown, CSV or JSON, and atomic file output."""

from __future__ import annotations

import csv
import html
import io
import json
import math

from tabulate import tabulate

from rooflinekit.core.codec import encode
from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.report import AttentionRow, Report, register_view
from rooflinekit.core.units import seconds, si

FORMATS = ("table", "json", "csv", "markdown")


def _num(value, unit="", digits=3):
    return si(value, unit, digits) if isinstance(value, (int, float)) and value is not None else "-"


def _ratio(value, digits=3):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}"


def _pct(value):
    return "-" if value is None else f"{100 * value:.2f}%"


def header_lines(report: Report) -> list[str]:
    w, hw, t, model = report.workload, report.hardware, report.totals, report.model
    lines = [
        f"model: {model.name or '?'} ({model.kind or ''}: {model.path or ''}), "
        f"{_num(model.parameters)} parameters, {_num(model.param_bytes, 'B')} of weights",
        f"workload: {w.phase}, batch {w.batch}, context {w.context}, {w.dtype}, device {w.device}",
        f"hardware: {hw.name}: {_num(hw.peak_flops, 'FLOP/s')} dense {hw.dtype}, "
        f"{_num(hw.bandwidth, 'B/s')}, ridge {hw.ridge:.1f} FLOP/B",
        f"step: {_num(t.flops, 'FLOP')} executed ({_num(t.flops_model, 'FLOP')} model), "
        f"{_num(t.bytes, 'B')} moved (weights {_num(t.weight_bytes, 'B')}, "
        f"KV {_num(t.kv_bytes_executed, 'B')}, other {_num(t.other_bytes, 'B')})",
        f"intensity {_ratio(t.intensity)} FLOP/B -> {t.bound}-bound, bound MFU {_pct(t.mfu_bound)} "
        f"(model-FLOP MFU bound {_pct(t.mfu_bound_model)})",
        f"predicted step {seconds(t.predicted_step_s)} (sum of op bounds; whole-step bound "
        f"{seconds(t.time_bound_s)})"
        + (f", {t.tokens_per_s:.4g} tokens/s" if t.tokens_per_s else ""),
    ]
    return lines + measured_lines(report) + parallel_lines(report)


def parallel_lines(report: Report) -> list[str]:
    """Header lines for planned parallelism (--tp/--ep), distributed runs and collectives."""
    t, lines = report.totals, []
    par, dist, comm = report.parallel, report.distributed, report.comm
    if par:
        kv = par.get("kv_heads_replicated") or []
        lines.append(
            f"per GPU: tensor parallel {par['tp']}, expert parallel {par['ep']}"
            + (f" ({par['batch_meaning']})" if par["ep"] > 1 else "")
            + f"; weights held {_num(par['weights_per_gpu'], 'B')}"
            + (f"; KV heads replicated (1 per GPU) in {', '.join(kv[:3])}{' ...' if len(kv) > 3 else ''}"
               if kv else ""))
    if dist:
        lines.append(f"distributed: {dist['world_size']} ranks ({dist['backend']}, {dist['device']}); figures "
                     f"are rank {dist['slowest_rank']}'s, the slowest; every rank in the Ranks table")
    if par or dist or comm.calls:
        lines.append(
            f"time bounds per GPU: compute {seconds(t.time_compute_s)}, memory {seconds(t.time_memory_s)}, "
            f"communication {seconds(t.time_comm_s)} -> {t.binding} binds"
            + (f" ({comm.calls} collectives, {_num(comm.wire_bytes, 'B')} on the links at "
               f"{_num(comm.link_bandwidth_per_direction, 'B/s')} per direction)" if comm.calls and
               comm.link_bandwidth_per_direction else ""))
    return lines


def comm_table(report: Report) -> tuple[list[str], list[list]]:
    headers = ["collective", "group", "calls", "message", "wire bytes/GPU", "time bound"]
    rows = [[c.collective, c.group_size, c.calls, _num(c.message_bytes, "B"), _num(c.wire_bytes, "B"),
             seconds(c.time_bound_s)] for c in report.comm.collectives]
    return headers, rows


def ranks_table(report: Report) -> tuple[list[str], list[list]]:
    headers = ["rank", "FLOPs", "bytes", "weights", "compute", "memory", "comm", "binds", "collectives",
               "wire bytes", "predicted step"]
    rows = [[r["rank"], _num(r["flops"]), _num(r["bytes"], "B"), _num(r["weight_bytes"], "B"),
             seconds(r["time_compute_s"]), seconds(r["time_memory_s"]), seconds(r["time_comm_s"]), r["binding"],
             r["comm_calls"], _num(r["comm_wire_bytes"], "B"), seconds(r["predicted_step_s"])]
            for r in report.distributed["ranks"]]
    return headers, rows


def measured_lines(report: Report) -> list[str]:
    """Header lines for measured mode and for a second hardware entry (--compare-hardware)."""
    t, lines = report.totals, []
    m = t.measured
    if m:
        share = m.unattributed_s / m.step_time_s if m.step_time_s else None
        spread = (f" (min {seconds(m.step_time_min_s)}, median {seconds(m.step_time_median_s)}, max "
                  f"{seconds(m.step_time_max_s)})" if m.step_time_min_s is not None else "")
        lines.append(
            f"measured ({m.device}, mean of {m.repeats} after {m.warmup} warm-up): step "
            f"{seconds(m.step_time_s)}{spread} = ops {seconds(m.op_time_s)} + unattributed "
            f"{seconds(m.unattributed_s)} ({_pct(share)}); uninstrumented {seconds(m.step_time_plain_s)}"
        )
        lines.append(
            f"achieved {_num(m.achieved_flops, 'FLOP/s')}, {_num(m.achieved_bandwidth, 'B/s')}: "
            f"MFU {_pct(m.mfu)} (model FLOPs), HFU {_pct(m.hfu)} (executed), MBU {_pct(m.mbu)}; "
            f"{_ratio(m.time_vs_bound)}x the predicted step"
        )
    alt = report.hardware_alt
    if alt and t.placement_alt:
        pa = t.placement_alt
        lines.append(
            f"compared with {alt.name}{' (calibrated)' if alt.calibrated else ''}: "
            f"{_num(alt.peak_flops, 'FLOP/s')} {alt.dtype}, {_num(alt.bandwidth, 'B/s')}, ridge "
            f"{alt.ridge:.1f} FLOP/B -> {pa.bound}-bound, predicted step {seconds(pa.predicted_step_s)}"
            + (f", measured MFU {_pct(pa.mfu)}, MBU {_pct(pa.mbu)}" if pa.mbu is not None else "")
            + " (modules: placement_alt in JSON)"
        )
    return lines


def module_table(report: Report, top: int | None) -> tuple[list[str], list[list]]:
    headers = ["module", "FLOPs", "bytes", "FLOP/B", "bound", "time bound", "share", "MFU bound"]
    rows = []
    shown = report.modules[: top or None]
    for m in shown:
        rows.append([
            m.name, _num(m.flops), _num(m.bytes, "B"), _ratio(m.intensity), m.bound,
            seconds(m.time_bound_ops_s), _pct(m.time_share), _pct(m.mfu_bound),
        ])
    if any(m.measured is not None for m in report.modules):  # measured mode
        headers += ["measured", "x bound", "MFU", "MBU"]
        for row, m in zip(rows, shown, strict=False):
            me = m.measured
            row += [seconds(me.time_s) if me and me.time_s is not None else "-",
                    _ratio(me.time_vs_bound if me else None), _pct(me.mfu if me else None),
                    _pct(me.mbu if me else None)]
    return headers, rows


_SAME_LAYER_KEYS = ("arch", "mode", "window", "chunk", "num_heads", "num_kv_heads", "head_dim", "cache_bytes_per_token",
                    "kv_bytes_min", "kv_bytes_executed", "flops_model", "flops_executed")


def _collapse_layers(rows: list[AttentionRow]) -> list[tuple[AttentionRow, str, int]]:
    """Runs of attention rows that differ only in their layer index -> (row, name, count)."""
    out: list[tuple[AttentionRow, str, int]] = []
    keys: list[tuple] = []
    for a in rows:
        pattern = layer_pattern(a.module)
        key = (pattern,) + tuple(getattr(a, k) for k in _SAME_LAYER_KEYS)
        if out and keys[-1] == key:
            first, _, count = out[-1]
            out[-1] = (first, f"{pattern} (x{count + 1})", count + 1)
        else:
            out.append((a, a.module, 1))
            keys.append(key)
    return out


def _arch_label(a: AttentionRow) -> str:
    """'gqa', 'mla/absorbed', 'gqa win 4096', 'gqa chunk 8192'."""
    label = a.arch + (f"/{a.mode}" if a.mode else "")
    if a.window:
        label += f" win {a.window}"
    if a.chunk:
        label += f" chunk {a.chunk}"
    return label


def attention_table(report: Report) -> tuple[list[str], list[list]]:
    headers = ["attention (per layer)", "arch", "H", "H_kv", "d", "cache B/tok", "KV min", "KV executed",
               "amplif.", "FLOPs model", "FLOPs exec", "I min", "bound"]
    rows = []
    for a, name, _ in _collapse_layers(report.attention):
        rows.append([
            name, _arch_label(a), a.num_heads or "-",
            a.num_kv_heads or "-", a.head_dim or "-", _num(a.cache_bytes_per_token, "B"),
            _num(a.kv_bytes_min, "B"), _num(a.kv_bytes_executed, "B"), _ratio(a.amplification),
            _num(a.flops_model), _num(a.flops_executed), _ratio(a.intensity_min),
            a.placement_min.bound if a.placement_min else "-",
        ])
    return headers, rows


def uncounted_table(report: Report) -> tuple[list[str], list[list]]:
    headers = ["op without FLOP formula", "count", "bytes", "bytes share", "time-bound share"]
    rows = [[u.name + (" (formula failed)" if u.formula_error else ""), u.count,
             _num(u.bytes, "B"), _pct(u.bytes_share), _pct(u.time_share)]
            for u in report.uncounted_ops]
    return headers, rows


def to_text(report: Report, fmt: str = "table", top: int | None = 25) -> str:
    """The human report: header, modules, attention, uncounted ops, warnings."""
    tablefmt = "github" if fmt == "markdown" else "simple"
    out = io.StringIO()
    if fmt == "markdown":
        out.write("# rooflinekit report\n\n")
        out.write("\n".join(f"- {line}" for line in header_lines(report)) + "\n\n")
    else:
        out.write("\n".join(header_lines(report)) + "\n\n")
    sections = [("Modules (by time bound)", module_table(report, top))]
    if report.attention:
        a = report.attention_totals
        if a.recognised == a.layers:
            kv = (f"KV executed {_num(a.kv_bytes_executed, 'B')} vs minimum "
                  f"{_num(a.kv_bytes_min, 'B')}, amplification {_ratio(a.amplification)}")
        elif a.recognised:
            kv = (f"recognised layers: KV executed "
                  f"{_num(a.kv_bytes_executed - a.kv_bytes_executed_unrecognised, 'B')} vs "
                  f"minimum {_num(a.kv_bytes_min, 'B')}, amplification {_ratio(a.amplification)}; "
                  f"others: {_num(a.kv_bytes_executed_unrecognised, 'B')} executed, minimum unknown")
        else:
            kv = f"KV executed {_num(a.kv_bytes_executed, 'B')}, minimum unknown"
        title = f"Attention ({a.recognised}/{a.layers} layers recognised; {kv})"
        sections.append((title, attention_table(report)))
    if report.uncounted_ops:
        sections.append(("Ops without a FLOP formula (bytes counted, FLOPs not)", uncounted_table(report)))
    if report.comm.calls:
        sections.append(("Collectives per GPU (ring algorithms; no FLOPs, no HBM bytes)", comm_table(report)))
    if report.distributed:
        sections.append(("Ranks", ranks_table(report)))
    for title, (headers, rows) in sections:
        out.write(f"## {title}\n\n" if fmt == "markdown" else f"{title}\n")
        out.write(tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True) + "\n\n")
    if top and len(report.modules) > top:
        out.write(f"({len(report.modules) - top} more modules: use --top 0 for all, or --format json)\n")
    for line in report.notes:
        out.write(f"note: {line}\n")
    for line in (report.parallel or {}).get("notes", []):
        out.write(f"note (parallel): {line}\n")
    if report.comm.calls:
        out.write(f"note (collectives): {report.comm.assumption}\n")
    attention_notes = {layer_pattern(n) for a in report.attention for n in a.notes}
    for line in sorted(attention_notes):
        out.write(f"note (attention): {line}\n")
    for line in report.warnings:
        out.write(f"warning: {line}\n")
    return out.getvalue()


CSV_FIELDS = ["name", "flops", "bytes", "intensity", "attainable_flops", "bound", "time_bound_s",
              "time_bound_ops_s", "time_share", "mfu_bound", "weight_bytes", "ops", "dtype"]
CSV_MEASURED = ["time_s", "achieved_flops", "achieved_bandwidth", "mfu", "hfu", "mbu", "time_vs_bound"]


def to_csv(report: Report) -> str:
    """One row per module (rolled up), then one row for the whole step."""
    buf = io.StringIO()
    measured = report.totals.measured
    fields = CSV_FIELDS + (CSV_MEASURED if measured else [])
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for m in report.modules:
        row = encode(m)
        row.update(row.pop("measured", None) or {})
        writer.writerow(row)
    step = dict(encode(report.totals), name="(step)", time_bound_ops_s=report.totals.predicted_step_s,
                time_share=1.0)
    step.pop("measured", None)
    if measured:
        step.update(encode(measured), time_s=measured.step_time_s)
    writer.writerow(step)
    return buf.getvalue()


def to_json(data: dict | Report) -> str:
    """A report (or a sweep or comparison dict) as indented JSON; non-finite numbers as null."""
    return json.dumps(encode(data.to_dict() if isinstance(data, Report) else data), indent=2) + "\n"


def to_html(report: Report) -> str:
    """A minimal HTML view (Jupyter): the text report in a <pre>."""
    return f"<pre>{html.escape(to_text(report, 'table'))}</pre>"


def render(report: Report, fmt: str, top: int | None = 25) -> str:
    if fmt == "json":
        return to_json(report)
    if fmt == "csv":
        return to_csv(report)
    return to_text(report, fmt, top)


register_view("table", to_text)
register_view("html", to_html)
