"""`rooflinekit trace TRACE`: the roofline of what a torch.profiler trace actually ran."""

from __future__ import annotations

import click

from rooflinekit.cli.base import Command
from rooflinekit.cli.options import (
    check_destination,
    check_not_input,
    debug_option,
    emit,
    format_option,
    output_format,
    wide_option,
)
from rooflinekit.outputs.plot import check_target, write_chart
from rooflinekit.outputs.report_io import load_report
from rooflinekit.trace.analyse import analyse
from rooflinekit.trace.predicted import prediction_of
from rooflinekit.trace.ranks import analyse_ranks
from rooflinekit.trace.reader import trace_files
from rooflinekit.trace.render import render
from rooflinekit.trace.views import top_rows, trace_chart, trace_html

PROFILE_TAKES = "--profile takes a profile report (written by `rooflinekit profile -f json`)"
FORMATS = ("table", "json", "csv", "markdown", "html")
#: Rows of each kernel and op table in the text, Markdown, CSV and JSON reports.
TOP = 15


@click.command("trace", cls=Command)
@click.argument("trace_path", metavar="TRACE")
@click.option("--hardware", "-H", default=None,
              help="Hardware entry (name, alias or .toml) [default: the GPU the trace's deviceProperties name].")
@click.option("--step", type=int, default=None, help="Only ProfilerStep#N [default: every step and their total].")
@format_option(FORMATS)
@click.option("--output", "-o", default=None, help="Write the report to this file (atomically).")
@click.option("--profile", "profile_path", default=None, metavar="REPORT.json",
              help="A profile report of the same model and step (`rooflinekit profile -f json`): MFU beside HFU, "
                   "and the kernels no aten op launched (CUDA-graph replays, library kernels) matched in order "
                   "to its predicted kernels.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png|.svg",
              help="Also draw the roofline chart: each kernel at its achieved FLOP/s, sized by its GPU time.")
@wide_option
@debug_option
def trace_cmd(trace_path, hardware, step, fmt, output, profile_path, plot_path, wide, debug):
    """The roofline of what a torch.profiler trace ran: busy and idle GPU time per step, time by
    kernel class, each kernel's and op's achieved FLOP/s and bandwidth from recorded shapes, HFU and
    MBU, collectives' bus bandwidth. TRACE is a .json or .json.gz trace, or a folder of rank traces."""
    fmt = output_format(fmt, output)
    inputs = [("the trace", trace_path)]
    if hardware and hardware.endswith(".toml"):
        inputs.append(("the hardware file", hardware))
    if profile_path:
        inputs.append(("the --profile report", profile_path))
    check_destination(output, inputs)
    prediction = (prediction_of(load_report(profile_path, ("profile",), PROFILE_TAKES), profile_path)
                  if profile_path else None)
    if plot_path:
        check_not_input(plot_path, inputs + [("the --output file", output)], "--plot")
        check_target(plot_path)
    # the page and the chart draw every kernel; the other formats list the first rows
    top = None if fmt == "html" or plot_path else TOP
    if len(trace_files(trace_path)) > 1:  # a folder of rank files: read by worker processes, compared
        report = analyse_ranks(trace_path, hardware, step, top, prediction)
    else:
        report = analyse(trace_path, hardware, step, top=top, prediction=prediction)
    text = trace_html(report) if fmt == "html" else render(top_rows(report, TOP), fmt, None if wide else 100)
    emit(text, output)
    if plot_path:
        write_chart(trace_chart(report), plot_path)
        click.echo(f"wrote {plot_path}", err=True)
