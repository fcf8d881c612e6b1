"""`rooflinekit profile MODEL`: one model, one workload, placed on one accelerator."""

from __future__ import annotations

import click

from rooflinekit.analyses.distributed import (
    check_options,
    leave,
    multi_process,
    requested,
    run_ranks,
)
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.cli.base import CONTEXT_SETTINGS, Command
from rooflinekit.cli.mix import apply_mix, mix_options
from rooflinekit.cli.options import (
    check_destination,
    debug_option,
    emit,
    format_option,
    model_inputs,
    output_format,
    use_colour,
    wide_option,
)
from rooflinekit.cli.request_options import make_workload, workload_options
from rooflinekit.core import compat
from rooflinekit.core.errors import UserError
from rooflinekit.core.files import check_not_input
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.outputs.html import profile_html
from rooflinekit.outputs.plot import check_target, write_plot
from rooflinekit.outputs.render import FORMATS, TABLES, render
from rooflinekit.stages.model_source import load_source

#: The most --warmup or --repeats forwards a measured run takes.
MAX_REPEATS = 10_000

PROFILE_HELP = """Profile MODEL: count FLOPs and bytes per op and module, attribute attention, place on a roofline.

\b
MODEL is a Python file that defines:
  build_model(**options) -> torch.nn.Module
  make_inputs(batch, context, phase, **options) -> tuple or list (positional args) or dict (kwargs)
Both are called with the target device (meta by default) and the default dtype already in
effect, so they must not pass device=/dtype= for floating tensors; on meta nothing is allocated.
Options given with -O KEY=VALUE reach whichever of the two accepts KEY.

\b
CONTEXT is the number of key/value positions each new token attends to:
  prefill: CONTEXT new tokens per sequence, causal among themselves;
  decode:  one new token per sequence; its KV cache has CONTEXT slots, CONTEXT-1 earlier
           tokens plus the new token's own K/V written into the last slot.

MODEL may also be a transformers config.json (needs the hf extra) or anything a plugin loads.
"""


@click.command("profile", cls=Command, help=PROFILE_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("model", metavar="MODEL")
@workload_options
@click.option("--depth", default=None, type=int,
              help="Roll modules up to this many path components (default: the layer stack's children and "
                   "one level below them, model.layers.*.self_attn / .mlp; 3 without a layer stack).")
@click.option("--group-layers/--no-group-layers", default=None,
              help="Fold identical repeated layers into one row of the text tables (default); "
                   "--no-group-layers lists each layer. --group-layers also merges the JSON's module rows "
                   "by name pattern (layers.*.mlp), as it always did.")
@click.option("--top", default=25, show_default=True, type=click.IntRange(0),
              help="Modules shown in the table (0: all).")
@click.option("--ops", "ops_shown", default=0, type=click.IntRange(0), metavar="N",
              help="Also show the N most expensive ops.")
@wide_option
@click.option("--table", "csv_table", type=click.Choice(TABLES), default=None,
              help="With -f csv: which table, one row per module (default), op or attention layer.")
@format_option(FORMATS + ("html",))
@click.option("--output", "-o", default=None, help="Write the report to this file (atomically).")
@click.option("--measure/--no-measure", default=None,
              help="Time the real forward (random weights) and join times to the counts; default: on "
                   "with --device cuda, off otherwise (needs --device cpu or cuda).")
@click.option("--warmup", default=2, show_default=True, type=int, help="Measured mode: untimed forwards first.")
@click.option("--repeats", default=5, show_default=True, type=int, help="Measured mode: timed forwards (mean).")
@click.option("--trace", default=None, metavar="FILE.json",
              help="Measured mode: write a Chrome/Perfetto trace, op events annotated with their counts.")
@click.option("--compare-hardware", default=None, metavar="NAME",
              help="Also place every point on a second entry (e.g. a calibrated one): placement_alt.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png|.svg", help="Also draw the roofline chart.")
@click.option("--plot-depth", type=click.IntRange(1), default=None,
              help="Chart every module at this depth (default: the weights-dominated modules).")
@click.option("--plot-ops", is_flag=True, help="Chart every op (with FLOPs) instead of the modules.")
@mix_options
@click.option("--distributed/--no-distributed", default=None,
              help="Profile every rank of a torchrun job (default: on when WORLD_SIZE > 1); rank 0 "
                   "writes one merged report. See docs/parallel.md.")
@debug_option
def profile_cmd(model, phase, batch, context, dtype, device, options, depth, group_layers, top, fmt, output, debug,
            measure=None, warmup=2, repeats=5, trace=None, compare_hardware=None, plot_path=None, plot_depth=None,
            distributed=None, ops_shown=0, wide=False, csv_table=None, plot_ops=False, mix=None,
            chunk=None, chunk_offset=None):
    fmt = output_format(fmt, output)
    if csv_table is not None and fmt != "csv":
        raise UserError(f"--table applies to -f csv, not -f {fmt}")
    workload, deployment, opts = make_workload(phase, batch, context, dtype, device, options)
    workload = apply_mix(workload, deployment, mix, chunk, chunk_offset)
    inputs = model_inputs(model, deployment.hardware, compare_hardware)
    compat.defer_dynamo_import()  # this process compiles nothing
    check_destination(output, inputs)
    if trace:
        check_destination(trace, inputs + [("the --output file", output)], "--trace")
    if depth is not None and depth < 1:
        raise UserError(f"--depth must be at least 1, got {depth}")
    if plot_depth is not None and not plot_path:
        raise UserError("--plot-depth needs --plot FILE.png|.svg")
    if plot_ops and not plot_path:
        raise UserError("--plot-ops needs --plot FILE.png|.svg")
    if plot_ops and plot_depth is not None:
        raise UserError("--plot-depth and --plot-ops are two kinds of chart: give one")
    if plot_path:
        check_not_input(plot_path, inputs + [("the --output file", output), ("the --trace file", trace)], "--plot")
        check_target(plot_path)
    if not (0 <= warmup <= MAX_REPEATS and 1 <= repeats <= MAX_REPEATS):
        raise UserError(f"--warmup must be 0 to {MAX_REPEATS} and --repeats 1 to {MAX_REPEATS}, "
                        f"got {warmup} and {repeats}")

    def run(on_stage=None):
        report_options = ReportOptions(depth=depth, group_layers=group_layers is True, measure=measure,
                                       warmup=warmup, repeats=repeats, trace=trace,
                                       compare_hardware=compare_hardware)
        return run_profile(load_source(model, opts), workload, deployment, options=report_options,
                           on_stage=on_stage).report

    if requested(distributed):  # every rank profiles its share; rank 0 merges (rooflinekit.analyses.distributed)
        check_options(deployment.tp, deployment.ep, trace)
        if deployment.pp > 1:
            raise UserError("--pp plans a pipeline of a single-GPU model; a torch.distributed run profiles the "
                            "model as its ranks split it: use one or the other (--no-distributed for --pp)")
        try:
            with stdout_to_stderr():  # what the model and plugins print stays off the report
                report = run_ranks(run, device)
        except SystemExit as exc:
            if multi_process():
                leave(exc.code if isinstance(exc.code, int) else 1)
            raise
        if report is None:
            if multi_process():
                leave(0)
            return
    else:
        with stdout_to_stderr():  # what the model and plugins print stays off the report
            report = run()
    for w in report.warnings:
        click.echo(f"rooflinekit: warning: {w}", err=True)
    emit(profile_html(report, group_layers is not False) if fmt == "html" else
         render(report, fmt, top or None, wide=wide, group_layers=group_layers is not False, ops=ops_shown,
                table=csv_table or "modules", colour=use_colour(fmt, output)), output)
    if trace:
        click.echo(f"wrote {trace} (Chrome/Perfetto trace of the measured run)", err=True)
    if plot_path:
        click.echo(f"wrote {plot_path} ({write_plot(report, plot_path, plot_depth, plot_ops)} points)", err=True)
    if requested(distributed):
        if multi_process():
            leave(0)
