"""`rooflinekit compare A.json B.json`: two saved reports side by side, with A/B ratios."""

from __future__ import annotations

import json

import click

from rooflinekit.analyses.compare import compare, render_compare
from rooflinekit.cli.base import Command
from rooflinekit.cli.options import (
    check_destination,
    debug_option,
    emit,
    format_option,
    output_format,
)
from rooflinekit.core.errors import OutputError, ReportFileError
from rooflinekit.outputs.html import compare_html
from rooflinekit.outputs.render import FORMATS
from rooflinekit.outputs.report_io import load_report
from rooflinekit.trace.compare import (
    compare_trace,
    load_trace_report,
    render_trace_compare,
    to_json,
)

COMPARE_TAKES = "compare takes two profile reports (written by `rooflinekit profile -f json`)"


@click.command("compare", cls=Command)
@click.argument("report_a", metavar="A.json")
@click.argument("report_b", metavar="B.json")
@format_option(FORMATS[:2] + ("markdown", "html"))
@click.option("--output", "-o", default=None, help="Write the comparison to this file (atomically).")
@debug_option
def compare_cmd(report_a, report_b, fmt, output, debug):
    """Two profile reports side by side, with A/B ratios: totals, attention (cache bytes per
    token, per layer), and modules whose names match. A profile report and a trace report
    (`rooflinekit trace -f json`) of the same model and step: the prediction beside the
    measurement, kernel class by kernel class."""
    fmt = output_format(fmt, output)
    check_destination(output, [("the first report", report_a), ("the second report", report_b)])
    if "trace" in (_kind(report_a), _kind(report_b)):
        emit(_trace_compare(report_a, report_b, fmt), output)
        return
    a = load_report(report_a, ("profile",), COMPARE_TAKES)
    b = load_report(report_b, ("profile",), COMPARE_TAKES)
    comparison = compare(a, b, report_a, report_b)
    emit(compare_html(comparison, a, b) if fmt == "html" else render_compare(comparison, fmt), output)


def _kind(path: str) -> str | None:
    """The `kind` a JSON report names, None when it names none or is not JSON (load_report says why)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def _trace_compare(report_a: str, report_b: str, fmt: str) -> str:
    """A profile report beside a trace report (either order), class by class."""

    if fmt not in ("table", "json"):
        raise OutputError(f"compare of a profile and a trace writes table or json, not {fmt}")
    if _kind(report_a) == "trace" and _kind(report_b) == "trace":
        raise ReportFileError("compare takes a profile report and a trace report, or two profile reports: "
                              "two trace reports side by side is `rooflinekit trace` of their folder")
    profile_path, trace_path = (report_b, report_a) if _kind(report_a) == "trace" else (report_a, report_b)
    profile = load_report(profile_path, ("profile",), COMPARE_TAKES)
    data = compare_trace(profile, load_trace_report(trace_path), profile_path, trace_path)
    return to_json(data) if fmt == "json" else render_trace_compare(data)
