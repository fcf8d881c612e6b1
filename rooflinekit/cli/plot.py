"""`rooflinekit plot REPORT.json`: a roofline chart from a saved profile or sweep report."""

from __future__ import annotations

from pathlib import Path

import click

from rooflinekit.cli.base import Command
from rooflinekit.cli.options import debug_option
from rooflinekit.core.files import check_not_input
from rooflinekit.outputs.plot import check_target, write_plot
from rooflinekit.outputs.report_io import load_report


@click.command("plot", cls=Command)
@click.argument("report", metavar="REPORT.json")
@click.option("--output", "-o", default=None, metavar="FILE.png|.svg",
              help="Chart file (default: REPORT with .png).")
@click.option("--plot-depth", type=click.IntRange(1), default=None,
              help="Plot every module at this depth instead of the weights-dominated ones.")
@click.option("--plot-ops", is_flag=True, help="Plot every op (with FLOPs) instead of the modules.")
@debug_option
def plot(report, output, plot_depth, debug, plot_ops=False):
    """Draw a roofline chart from a profile or sweep JSON report."""
    option = "--output" if output else "the default chart file"
    output = output or str(Path(report).with_suffix(".png"))
    check_not_input(output, [("the report", report)], option)
    data = load_report(report)
    check_target(output)
    n = write_plot(data, output, plot_depth, plot_ops)
    click.echo(f"wrote {output} ({n} points)", err=True)
