"""CSV of one table of a profile report (`-f csv --table modules|ops|attention`): plain numbers in
SI base units, one row per module (then the whole step), per op, or per attention layer; never
folded (a spreadsheet groups as it likes)."""

from __future__ import annotations

import csv
import io

from rooflinekit.core.codec import encode
from rooflinekit.core.report import Report
from rooflinekit.outputs.columns import ATTENTION_FIELDS, MEASURED_FIELDS, MODULE_FIELDS, OP_FIELDS

TABLES = ("modules", "ops", "attention")


def _writer(fields: list[str]) -> tuple[io.StringIO, csv.DictWriter]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    return buf, writer


def _modules(report: Report, measured: bool) -> str:
    buf, writer = _writer(MODULE_FIELDS + (MEASURED_FIELDS if measured else []))
    for m in report.modules:
        row = encode(m)
        row.update(row.pop("measured", None) or {})
        writer.writerow(row)
    step = dict(encode(report.totals), name="(step)", time_bound_ops_s=report.totals.predicted_step_s,
                time_share=1.0)
    step.pop("measured", None)
    if measured:
        step.update(encode(report.totals.measured), time_s=report.totals.measured.step_time_s)
    writer.writerow(step)
    return buf.getvalue()


def _ops(report: Report, measured: bool) -> str:
    buf, writer = _writer(OP_FIELDS + (MEASURED_FIELDS if measured else []))
    predicted = report.totals.predicted_step_s
    for op in report.ops:
        row = encode(op)
        row.update(row.pop("measured", None) or {})
        row["bytes"] = op.bytes
        row["time_share"] = op.time_bound_s / predicted if predicted else None
        writer.writerow(row)
    return buf.getvalue()


def _attention(report: Report, measured: bool) -> str:
    buf, writer = _writer(ATTENTION_FIELDS + (MEASURED_FIELDS if measured else []))
    for a in report.attention:
        row = encode(a)
        row.update(row.pop("measured", None) or {})
        pm, pe = a.placement_min, a.placement_executed
        row.update(bound_min=pm.bound if pm else None, time_bound_min_s=pm.time_bound_s if pm else None,
                   bound_executed=pe.bound, time_bound_executed_s=pe.time_bound_s)
        writer.writerow(row)
    return buf.getvalue()


def to_csv(report: Report, table: str = "modules") -> str:
    """One table of `report` as CSV: modules (rolled up, then a row for the whole step), ops, or
    attention layers."""
    measured = report.totals.measured is not None
    return {"modules": _modules, "ops": _ops, "attention": _attention}[table](report, measured)
