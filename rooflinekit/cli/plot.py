"""`rooflinekit plot REPORT.json`: the chart of a saved profile, sweep, advise or plan report."""

from __future__ import annotations

from pathlib import Path

import click

from rooflinekit.cli.base import Command
from rooflinekit.cli.options import debug_option
from rooflinekit.core.errors import UserError
from rooflinekit.core.files import check_not_input
from rooflinekit.outputs.advice_plot import write_advice_plot
from rooflinekit.outputs.plan_plot import plot_plan
from rooflinekit.outputs.plot import check_target, write_plot
from rooflinekit.outputs.report_io import load_report

#: The reports `plot` draws: a roofline (profile, sweep), each lever's move (advise), the Pareto front (plan).
PLOT_KINDS = ("profile", "sweep", "advise", "plan")
PLOT_TAKES = "plot draws profile, sweep, advise and plan reports (their -f json)"


@click.command("plot", cls=Command)
@click.argument("report", metavar="REPORT.json")
@click.option("--output", "-o", default=None, metavar="FILE.png|.svg",
              help="Chart file (default: REPORT with .png).")
@click.option("--plot-depth", type=click.IntRange(1), default=None,
              help="Plot every module at this depth instead of the weights-dominated ones.")
@click.option("--plot-ops", is_flag=True, help="Plot every op (with FLOPs) instead of the modules.")
@debug_option
def plot(report, output, plot_depth, debug, plot_ops=False):
    """Draw the chart of a JSON report: a roofline from a profile or sweep report, each lever's
    move from an advise report, the Pareto front from a plan."""
    option = "--output" if output else "the default chart file"
    output = output or str(Path(report).with_suffix(".png"))
    check_not_input(output, [("the report", report)], option)
    data = load_report(report, PLOT_KINDS, PLOT_TAKES)
    kind = data.get("kind") if isinstance(data, dict) else "profile"
    if kind in ("advise", "plan") and (plot_depth is not None or plot_ops):
        raise UserError(f"{'--plot-depth' if plot_depth is not None else '--plot-ops'} applies to a profile "
                        f"report, not {'an advise' if kind == 'advise' else 'a plan'} report")
    check_target(output)
    if kind == "advise":
        click.echo(f"wrote {output} ({write_advice_plot(data, output)} levers)", err=True)
    elif kind == "plan":
        click.echo(f"wrote {output} ({plot_plan(data, output)} configurations)", err=True)
    else:
        n = write_plot(data, output, plot_depth, plot_ops)
        click.echo(f"wrote {output} ({n} points)", err=True)
