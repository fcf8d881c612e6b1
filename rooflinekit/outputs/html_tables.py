"""The profile page's tables (modules, attention / mixers, ops, ops without a FLOP formula,
collectives), each under the columns rooflinekit.outputs.columns defines for every view."""

from __future__ import annotations

from rooflinekit.core.report import Report
from rooflinekit.outputs.columns import (
    ATTENTION,
    COMM,
    MODULES,
    OPS,
    UNCOUNTED,
    Col,
    View,
    page_index,
    page_rows,
    shown,
)
from rooflinekit.outputs.html_data import TableView, col, table
from rooflinekit.outputs.sections import has_states, module_lines

#: Ops shown before "show all" (all of them are in the page, up to MAX_OPS).
TOP_OPS = 50
#: The most ops a page carries (the most expensive by time bound); the caption says when cut.
MAX_OPS = 20_000


def mixer_kind(report: Report) -> str:
    """'attention layers', or 'attention / mixer layers' where some layer keeps a fixed state."""
    return "attention / mixer layers" if has_states(report) else "attention layers"


def page_columns(cols: tuple[Col, ...], view: View) -> list[dict]:
    """The page's columns of a table: header, format and hover hint of each it shows."""
    return [col(c.html, c.kind, c.unit, c.hint) for c in shown(cols, view, "html")]


def module_table(report: Report, group: bool = True) -> dict:
    """The modules, identical layers folded into one row unless `group` is off, in report order."""
    view = View(report, group=group, measured=any(m.measured is not None for m in report.modules))
    lines = module_lines(report, group, by_time=False)
    rows = page_rows(MODULES, view, lines)
    folded = len(lines) < len(report.modules)
    return table("modules", "Modules", page_columns(MODULES, view), rows, TableView(
        sort=(page_index(MODULES, view, "time_bound"), "desc"), series="modules",
        caption=f"{len(rows)} modules, rolled up to depth {report.capture.depth}"
                + (", repeated layers merged" if report.capture.group_layers else "")
                + ("; (xN): N identical layers in one row, FLOPs, bytes, times and shares summed" if folded else "")))


def attention_table(report: Report) -> dict:
    """Every attention / mixer layer in model order."""
    view = View(report, states=has_states(report))
    rows = page_rows(ATTENTION, view, report.attention)
    return table("attention", mixer_kind(report).capitalize(), page_columns(ATTENTION, view), rows, TableView(
        series="attention", caption=f"{len(rows)} layers in model order; KV min and I min are the architecture's "
                                    "minimum (the cache read once), the others what the code executed"))


def ops_table(report: Report) -> dict:
    """The ops, most expensive by time bound first, up to MAX_OPS."""
    view = View(report)
    ops = sorted(report.ops, key=lambda o: -o.time_bound_s)[:MAX_OPS]
    rows = page_rows(OPS, view, ops)
    cut = len(report.ops) - len(ops)
    caption = (f"the {TOP_OPS} most expensive of {len(report.ops):,} ops by time bound; show all for every one"
               + (f" (the page holds the top {MAX_OPS:,}; {cut:,} cheaper ones are in the JSON report)" if cut else ""))
    return table("ops", "Ops", page_columns(OPS, view), rows, TableView(
        sort=(page_index(OPS, view, "time_bound"), "desc"), limit=TOP_OPS, caption=caption, total=len(report.ops)))


def uncounted_table(report: Report) -> dict:
    """The ops without a FLOP formula."""
    view = View(report)
    rows = page_rows(UNCOUNTED, view, report.uncounted_ops)
    return table("uncounted", "Ops without a FLOP formula", page_columns(UNCOUNTED, view), rows,
                 TableView(sort=(page_index(UNCOUNTED, view, "bytes"), "desc"),
                           caption="bytes counted, FLOPs not: listed so that none is a silent zero"))


def comm_table(report: Report) -> dict:
    """The collectives per GPU."""
    view = View(report)
    rows = page_rows(COMM, view, report.comm.collectives)
    return table("comm", "Collectives per GPU", page_columns(COMM, view), rows,
                 TableView(sort=(page_index(COMM, view, "time_bound"), "desc"), caption=report.comm.assumption))
