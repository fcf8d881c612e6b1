"""`rooflinekit trace TRACE`: the roofline of what a torch.profiler trace actually ran."""

from __future__ import annotations

import click

from rooflinekit.cli.base import Command
from rooflinekit.cli.options import (
    check_destination,
    debug_option,
    emit,
    format_option,
    output_format,
    wide_option,
)
from rooflinekit.trace.analyse import analyse
from rooflinekit.trace.render import render

FORMATS = ("table", "json", "csv", "markdown")


@click.command("trace", cls=Command)
@click.argument("trace_path", metavar="TRACE")
@click.option("--hardware", "-H", default=None,
              help="Hardware entry (name, alias or .toml) [default: the GPU the trace's deviceProperties name].")
@click.option("--step", type=int, default=None, help="Only ProfilerStep#N [default: every step and their total].")
@format_option(FORMATS)
@click.option("--output", "-o", default=None, help="Write the report to this file (atomically).")
@wide_option
@debug_option
def trace_cmd(trace_path, hardware, step, fmt, output, wide, debug):
    """The roofline of what a torch.profiler trace ran: busy and idle GPU time per step, time by
    kernel class, each kernel's and op's achieved FLOP/s and bandwidth from recorded shapes, HFU and
    MBU, collectives' bus bandwidth. TRACE is a .json or .json.gz trace, or a folder of rank traces."""
    fmt = output_format(fmt, output)
    inputs = [("the trace", trace_path)]
    if hardware and hardware.endswith(".toml"):
        inputs.append(("the hardware file", hardware))
    check_destination(output, inputs)
    report = analyse(trace_path, hardware, step)
    emit(render(report, fmt, None if wide else 100), output)
