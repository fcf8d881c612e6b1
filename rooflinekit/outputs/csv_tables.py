"""CSV of a report table: the columns of its one definition (rooflinekit.outputs.columns) that name a
CSV field, one row per row of the table, plain numbers in SI base units. A profile report's tables
(`-f csv --table modules|ops|attention`) have a row per module (then the whole step), per op, or per
attention layer, never folded (a spreadsheet groups as it likes)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from rooflinekit.core.codec import encode
from rooflinekit.core.report import Report
from rooflinekit.outputs.columns import (
    ATTENTION,
    MODULES_CSV,
    OPS_CSV,
    Col,
    View,
    csv_header,
    csv_rows,
)

TABLES = ("modules", "ops", "attention")


def table_csv(cols: Sequence[Col], view: View, rows: Sequence[Any]) -> str:
    """`rows` as CSV: a header of the fields of `cols` that the CSV shows in `view`, then a line per row."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(csv_header(cols, view))
    writer.writerows(csv_rows(cols, view, rows))
    return buf.getvalue()


def _fields(row: Any) -> dict:
    """A report row's own fields, its measured figures among them."""
    out = encode(row)
    out.update(out.pop("measured", None) or {})
    return out


def _step(report: Report) -> dict:
    """The whole step as a module row."""
    step = dict(encode(report.totals), name="(step)", time_bound_ops_s=report.totals.predicted_step_s,
                time_share=1.0)
    step.pop("measured", None)
    if report.totals.measured is not None:
        step.update(encode(report.totals.measured), time_s=report.totals.measured.step_time_s)
    return step


def to_csv(report: Report, table: str = "modules") -> str:
    """One table of `report` as CSV: modules (rolled up, then a row for the whole step), ops, or
    attention layers; the measured figures where the report was measured. Every layer has the state
    field, a fixed state or not."""
    view = View(report, measured=report.totals.measured is not None, states=True)
    if table == "modules":
        return table_csv(MODULES_CSV, view, [*map(_fields, report.modules), _step(report)])
    cols, rows = {"ops": (OPS_CSV, report.ops), "attention": (ATTENTION, report.attention)}[table]
    return table_csv(cols, view, [_fields(r) for r in rows])
