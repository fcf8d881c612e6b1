"""`rooflinekit advise MODEL`: what would change the step's time, every lever priced and ranked."""

from __future__ import annotations

from dataclasses import replace

import click

from rooflinekit.analyses.advise import TP_SIZES, AdviseOptions, advise
from rooflinekit.analyses.combine import COMBINE_LIMIT
from rooflinekit.cli.base import CONTEXT_SETTINGS, Command
from rooflinekit.cli.options import (
    check_destination,
    debug_option,
    emit,
    format_option,
    model_inputs,
    output_format,
)
from rooflinekit.cli.request_options import make_workload, workload_options
from rooflinekit.core import compat
from rooflinekit.core.files import check_not_input
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.outputs.advice_plot import write_advice_plot
from rooflinekit.outputs.advise_view import ADVISE_FORMATS, render_advice
from rooflinekit.outputs.html import advise_html
from rooflinekit.outputs.plot import check_target
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.request_checks import parse_options
from rooflinekit.stages.speculative import DEFAULT_ACCEPT

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

\b
--combine also prices the levers that compose (TP degree x weight format x KV cache format x
a plugin's restatement such as absorbed MLA, then batch up to what fits), each combination one
deployment re-profiled the same way, named in words; at most --max-combinations are priced (axis
values that did not help alone are pruned, the most promising first; dominated rows left out).
--draft MODEL or --mtp N prices the q_len levers as speculative decoding: k drafted tokens (each a
draft decode step in the same deployment) plus one verify step, at --accept per-token acceptance.
"""


@click.command("advise", cls=Command, help=ADVISE_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("model", metavar="MODEL")
@workload_options
@format_option(ADVISE_FORMATS + ("html",))
@click.option("--output", "-o", default=None, help="Write the advice to this file (atomically).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png|.svg",
              help="Also draw each lever as a move from the current step (step time vs tokens/s).")
@click.option("--combine", is_flag=True,
              help="Also price the levers that compose, together (TP x weight format x KV format x absorbed MLA x "
                   "batch up to what fits), each as one deployment.")
@click.option("--max-combinations", type=int, default=COMBINE_LIMIT, show_default=True,
              help="With --combine: price at most this many combinations (the most promising first).")
@click.option("--draft", "draft_path", default=None, metavar="MODEL",
              help="A draft model (model file or config) for speculative decoding: its decode step is profiled at "
                   "the same batch and context in the same deployment and priced into the q_len levers.")
@click.option("--draft-option", "draft_options", multiple=True, metavar="KEY=VALUE",
              help="An option of the --draft model (as -O is the model's); repeatable.")
@click.option("--mtp", type=click.IntRange(1, 16), default=None, metavar="N",
              help="N multi-token-prediction heads draft for the q_len N+1 lever: each head priced as one of the "
                   "model's decoder layers plus its output head.")
@click.option("--accept", type=float, default=DEFAULT_ACCEPT, show_default=True, metavar="RATE",
              help="Per-token acceptance rate of the drafted tokens, in (0, 1] (with --draft or --mtp).")
@debug_option
def advise_cmd(model, phase, batch, context, dtype, device, options, fmt, output, plot_path, debug,
               combine=False, max_combinations=COMBINE_LIMIT, draft_path=None, mtp=None,
               accept=DEFAULT_ACCEPT, draft_options=()):
    fmt = output_format(fmt, output)
    extras = AdviseOptions(combine=combine, max_combinations=max_combinations, mtp=mtp, accept=accept)
    extras.check()  # one line before anything is built
    workload, deployment, opts = make_workload(phase, batch, context, dtype, device, options,
                                               {"kernels": "serving"})  # advise's default view
    inputs = model_inputs(model, deployment.hardware) + ([("the --draft model", draft_path)] if draft_path else [])
    compat.defer_dynamo_import()  # this process compiles nothing
    check_destination(output, inputs)
    if plot_path:
        check_not_input(plot_path, inputs + [("the --output file", output)], "--plot")
        check_target(plot_path)
    def progress(what: str) -> None:
        if combine or draft_path:  # long runs say what they price, on stderr
            click.echo(f"rooflinekit: advise: {what}", err=True)

    with stdout_to_stderr():  # what the model and plugins print stays off the advice
        if draft_path:
            given = parse_options(draft_options)
            extras = replace(extras, draft=load_source(draft_path, given),
                             draft_options=tuple(sorted(given.items())))
        report = advise(load_source(model, opts), workload, deployment, extras=extras,
                        progress=progress)
    for w in report.warnings:
        click.echo(f"rooflinekit: warning: {w}", err=True)
    emit(advise_html(report) if fmt == "html" else render_advice(report, fmt), output)
    if plot_path:
        click.echo(f"wrote {plot_path} ({write_advice_plot(report, plot_path)} levers)", err=True)
