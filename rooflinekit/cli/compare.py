"""`rooflinekit compare A.json B.json`: two saved reports side by side, with A/B ratios."""

from __future__ import annotations

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
from rooflinekit.outputs.html import compare_html
from rooflinekit.outputs.render import FORMATS
from rooflinekit.outputs.report_io import load_report

COMPARE_TAKES = "compare takes two profile reports (written by `rooflinekit profile -f json`)"


@click.command("compare", cls=Command)
@click.argument("report_a", metavar="A.json")
@click.argument("report_b", metavar="B.json")
@format_option(FORMATS[:2] + ("markdown", "html"))
@click.option("--output", "-o", default=None, help="Write the comparison to this file (atomically).")
@debug_option
def compare_cmd(report_a, report_b, fmt, output, debug):
    """Two profile reports side by side, with A/B ratios: totals, attention (cache bytes per
    token, per layer), and modules whose names match."""
    fmt = output_format(fmt, output)
    check_destination(output, [("the first report", report_a), ("the second report", report_b)])
    a = load_report(report_a, ("profile",), COMPARE_TAKES)
    b = load_report(report_b, ("profile",), COMPARE_TAKES)
    comparison = compare(a, b, report_a, report_b)
    emit(compare_html(comparison, a, b) if fmt == "html" else render_compare(comparison, fmt), output)
