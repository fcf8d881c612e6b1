"""`rooflinekit sweep MODEL`: a grid of batch x context, and the critical batch per context."""

from __future__ import annotations

import sys

import click

from rooflinekit.analyses.sweep import MAX_BATCH, SweepOptions, render_sweep, run_sweep
from rooflinekit.cli.base import Command
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
from rooflinekit.cli.request_options import count_list, make_workload, workload_options
from rooflinekit.core import compat
from rooflinekit.core.errors import UserError
from rooflinekit.core.files import check_not_input, is_special, partial_path, write_atomic
from rooflinekit.core.signals import interrupt_status, interrupt_word
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.outputs.html import sweep_html
from rooflinekit.outputs.plot import check_target, write_plot
from rooflinekit.outputs.render import FORMATS
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.request_checks import MAX_BATCH as BATCH_LIMIT

SWEEP_HELP = """Profile MODEL at every BATCH x CONTEXT; find the critical batch per context.

\b
One row per point: the whole step's FLOPs, bytes, intensity, bound, predicted step time,
tokens/s, bound MFU, the byte split (weights / KV cache / other) and attention's intensity
(architecture minimum and as executed). The model is built once.

\b
On --device meta the counts are fitted: every op's FLOPs and bytes are exact polynomials in
batch and context, fitted on a few captures (repeated layers skipped) and checked against one
full capture at a point they did not use; every point is then evaluated from the fit, in about
the time of one profile. Where they do not fit (data-dependent MoE load, a check that misses by
more than 1e-9 relative) the points are captured one by one; the notes say which. --no-fit
captures every point.

\b
Critical batch: the smallest batch at which the whole step reaches the ridge point, from an
affine fit of per-step FLOPs and bytes in batch (checked on a third batch; the batch it solves
is profiled; a fit off by more than 1%, or a solved batch below the ridge, falls back to a
search with real profiles up to --max-batch), or "never" with the intensity it saturates at.
On --device cpu/cuda only the sweep's own batches are profiled: the critical batch is then
extrapolated from the fit, and says so.
Ctrl-C (or SIGTERM) keeps the points already done, with a note: written to FILE.partial.EXT beside
-o FILE (and --plot's chart), which is left as it was; exit status 130 (143 for SIGTERM).
"""

def decorate(f):
    f = workload_options(f)
    f.__click_params__ = [p for p in f.__click_params__ if p.name not in ("batch", "context")]
    f = click.option("--batch", "-b", "batches", default="1,4,16,48", show_default=True, callback=count_list,
                     help="Batches, comma-separated.")(f)
    f = click.option("--context", "-s", "contexts", default="4096,32768", show_default=True, callback=count_list,
                     help="Contexts, comma-separated (4k,32k = 4096,32768).")(f)
    return f

@click.command("sweep", cls=Command, help=SWEEP_HELP)
@click.argument("model", metavar="MODEL")
@decorate
@format_option(FORMATS + ("html",))
@click.option("--output", "-o", default=None, help="Write the sweep to this file (atomically).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png|.svg", help="Also draw the roofline chart.")
@wide_option
@click.option("--no-critical", is_flag=True, help="Skip the critical batch.")
@click.option("--no-fit", is_flag=True, help="Capture every point (do not evaluate points from fitted counts).")
@click.option("--max-batch", default=MAX_BATCH, show_default=True, type=click.IntRange(1),
              help="Largest batch the critical-batch check and search profile, and the largest reported.")
@debug_option
def sweep_cmd(model, phase, batches, contexts, dtype, device, options, fmt, output, plot_path,
          no_critical, max_batch, debug, no_fit=False, wide=False):
    fmt = output_format(fmt, output)
    base, deployment, opts = make_workload(phase, batches[0], contexts[0], dtype, device, options)
    for b in batches:
        for c in contexts:
            make_workload(phase, b, c, dtype, device, ())
    if max_batch > BATCH_LIMIT:
        raise UserError(f"--max-batch must be at most {BATCH_LIMIT:,}, got {max_batch}")
    inputs = model_inputs(model, deployment.hardware)
    compat.defer_dynamo_import()  # this process compiles nothing
    check_destination(output, inputs)
    if plot_path:
        check_not_input(plot_path, inputs + [("the --output file", output)], "--plot")
        check_target(plot_path)
    _check_partials(output, plot_path, inputs)
    total = len(batches) * len(contexts)
    tty = sys.stderr.isatty()
    bar = click.progressbar(length=total, label="sweep", file=sys.stderr) if tty else None
    try:
        if bar:
            bar.__enter__()
        with stdout_to_stderr():  # what the model and plugins print stays off the report
            options = SweepOptions(critical=not no_critical, max_batch=max_batch, fit=not no_fit)
            result = run_sweep(load_source(model, opts), base, deployment, batches, contexts, options=options,
                               progress=(lambda _row: bar.update(1)) if bar else None)
    finally:
        if bar:
            bar.__exit__(None, None, None)
    data = result.to_dict()
    if result.interrupted and not data["points"]:
        raise KeyboardInterrupt
    for w in data["warnings"]:
        click.echo(f"rooflinekit: warning: {w}", err=True)
    text = sweep_html(data) if fmt == "html" else render_sweep(data, fmt, wide=wide, colour=use_colour(fmt, output))
    if result.interrupted:
        _interrupted(data, text, output, plot_path, total)
    emit(text, output)
    if plot_path:
        n = write_plot(data, plot_path)
        click.echo(f"wrote {plot_path} ({n} points)", err=True)


def _partial(path: str | None) -> str | None:
    """Where an interrupted sweep writes what `path` would have held: FILE.partial.EXT beside a
    file (which stays as it was); a device or FIFO is written through; None for stdout."""
    return None if not path else path if is_special(path) else partial_path(path)


def _check_partials(output: str | None, plot_path: str | None, inputs) -> None:
    """Before any work: an interrupted sweep's partial files must not name an input either."""
    for option, path in (("--output", output), ("--plot", plot_path)):
        partial = _partial(path)
        if partial and partial != path:
            check_not_input(partial, inputs, f"{option}'s partial file")


def _interrupted(data: dict, text: str, output: str | None, plot_path: str | None, total: int) -> None:
    """A sweep stopped by Ctrl-C or SIGTERM: the points done go to FILE.partial.EXT (or stdout),
    the -o file and the chart are left as they were, one line says where, and the exit status
    says which signal (130, 143)."""
    written = []
    report = _partial(output)
    if report:
        write_atomic(report, text)
        written.append(report)
    else:
        emit(text, None)
    chart = _partial(plot_path)
    if chart:
        write_plot(data, chart)
        written.append(chart)
    where = f" to {' and '.join(written)}" if written else ""
    kept = [p for p in (output, plot_path) if p and p not in written]
    left = f" ({' and '.join(kept)} left as {'they were' if len(kept) > 1 else 'it was'})" if kept else ""
    click.echo(f"rooflinekit: error: {interrupt_word()} after {len(data['points'])} of {total} points: "
               f"the points done were written{where}{left}", err=True)
    sys.exit(interrupt_status())
