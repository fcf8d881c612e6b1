"""`rooflinekit advise MODEL`: what would change the step's time, every lever priced and ranked."""

from __future__ import annotations

import click

from rooflinekit.analyses.advise import TP_SIZES, advise
from rooflinekit.cli.base import CONTEXT_SETTINGS, Command
from rooflinekit.cli.options import (
    check_destination,
    debug_option,
    emit,
    format_option,
    model_inputs,
    output_format,
)
from rooflinekit.cli.workload import make_workload, parallel_options, workload_options
from rooflinekit.core import compat
from rooflinekit.core.files import check_not_input
from rooflinekit.core.request import Deployment
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.outputs.advice_plot import write_advice_plot
from rooflinekit.outputs.advise_view import ADVISE_FORMATS, render_advice
from rooflinekit.outputs.html import advise_html
from rooflinekit.outputs.plot import check_target
from rooflinekit.stages.workload import load_source

ADVISE_HELP = f"""Price every lever that would change MODEL's step time, ranked by tokens/s.

\b
Takes the options of `rooflinekit profile` (the workload to advise on), profiles it, then each
lever that applies, alone:
  batch up to what fits in memory (memory.max_batch), fp8 and int4 weights, fp8 KV cache,
  fused kernels (the fused view), TP {'/'.join(map(str, TP_SIZES))} with their collectives, absorbed MLA for MLA
  layers that run naive, q_len 2 and 4 (decode), and any lever a plugin proposes
  (rooflinekit_advise_levers).
Each is a changed workload re-profiled with the model built once, or the capture restated and
placed by the same code: no lever has a formula of its own. advise prices the serving view
(--kernels serving) unless --kernels as-written is given. A lever that does not apply is listed
with the reason. Columns: predicted step (sum of op bounds), tokens/s, speed-up (tokens/s over the
baseline's), what binds afterwards (compute, memory, communication, or capacity when it does not
fit), whether it fits, memory per GPU, the assumption. Counts on the meta device.
"""


@click.command("advise", cls=Command, help=ADVISE_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("model", metavar="MODEL")
@workload_options
@format_option(ADVISE_FORMATS + ("html",))
@click.option("--output", "-o", default=None, help="Write the advice to this file (atomically).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png|.svg",
              help="Also draw each lever as a move from the current step (step time vs tokens/s).")
@parallel_options
@debug_option
def advise_cmd(model, phase, batch, context, dtype, device, hardware, options, fmt, output, plot_path, debug,
               tp=1, ep=1):
    fmt = output_format(fmt, output)
    asked = Deployment(hardware or "auto", tp=tp, ep=ep, kernels="serving")  # advise's default view
    workload, deployment, opts = make_workload(phase, batch, context, dtype, device, options, asked)
    inputs = model_inputs(model, hardware)
    compat.defer_dynamo_import()  # this process compiles nothing
    check_destination(output, inputs)
    if plot_path:
        check_not_input(plot_path, inputs + [("the --output file", output)], "--plot")
        check_target(plot_path)
    with stdout_to_stderr():  # what the model and plugins print stays off the advice
        report = advise(load_source(model, opts), workload, deployment)
    for w in report.warnings:
        click.echo(f"rooflinekit: warning: {w}", err=True)
    emit(advise_html(report) if fmt == "html" else render_advice(report, fmt), output)
    if plot_path:
        click.echo(f"wrote {plot_path} ({write_advice_plot(report, plot_path)} levers)", err=True)
