"""Options and helpers shared by several commands (workload, parallelism, output, --debug)."""

from __future__ import annotations

import os
import sys

import click
import torch

from rooflinekit.analyses.parallel import with_parallel
from rooflinekit.cli.base import STDOUT_CLOSED, ClosedStdout
from rooflinekit.core.errors import OutputError, WorkloadError
from rooflinekit.core.files import check_not_input, check_writable, write_atomic
from rooflinekit.stages.workload import Workload, parse_options, validate

Inputs = list[tuple[str, "str | None"]]
#: The most GPUs --tp or --ep splits a model over.
MAX_PARALLEL = 1 << 16


def model_inputs(model: str, *hardware: str | None) -> Inputs:
    """What a profile or sweep reads that an output must not replace: the model file (a config
    folder's config.json), and hardware .toml files given by path."""
    inputs: Inputs = [("the model file", model)]
    if os.path.isdir(model):
        inputs.append(("the model config", os.path.join(model, "config.json")))
    inputs += [("the hardware file", h) for h in hardware if h and h.endswith(".toml")]
    return inputs


def check_destination(output: str | None, inputs: Inputs = (), option: str = "--output") -> None:
    """Before any work, the report's destination: a file must be writable and none of the
    command's inputs ((what, path) pairs); with no file, stdout must be open."""
    if output:
        check_not_input(output, inputs, option)
        check_writable(output)
    else:
        check_stdout()


def check_stdout() -> None:
    """Before any work, for a command that writes to stdout: fail if stdout was closed (`>&-`)."""
    if isinstance(sys.stdout, ClosedStdout):
        raise OutputError(STDOUT_CLOSED)


def emit(report_text: str, output: str | None) -> None:
    if output:
        write_atomic(output, report_text)
        click.echo(f"wrote {output}", err=True)
        return
    try:
        click.echo(report_text, nl=False)  # flushed: a failure shows here, not at exit
    except BrokenPipeError:
        raise  # the reader went away (`| head`): a quiet exit (rooflinekit.cli.base)
    except (OSError, ValueError) as exc:
        raise OutputError(f"cannot write the report to stdout: {getattr(exc, 'strerror', None) or exc}") from None


def debug_option(f):
    return click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")(f)


def workload_options(f):
    opts = [
        click.option("--phase", default="decode", show_default=True, help="prefill or decode."),
        click.option("--batch", "-b", default=1, show_default=True, type=int, help="Sequences per step."),
        click.option("--context", "-s", default=4096, show_default=True, type=int,
                     help="Positions each new token attends to (decode: cache of context-1 plus itself)."),
        click.option("--dtype", default="bf16", show_default=True, help="bf16, fp16 or fp32 (default dtype in effect)."),
        click.option("--device", default="meta", show_default=True,
                     help="meta (no memory, default), cpu or cuda."),
        click.option("--hardware", "-H", default=None,
                     help="Hardware entry (name, alias or .toml path), or auto: the local GPU's entry "
                          "(NVML); default auto, else H800 SXM5."),
        click.option("--option", "-O", "options", multiple=True, metavar="KEY=VALUE",
                     help="Passed to build_model()/make_inputs() when they accept KEY (repeatable)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def parallel_options(f):
    """--tp/--ep: planned parallelism, one GPU's share of a single-GPU model (rooflinekit.analyses.parallel)."""
    f = click.option("--ep", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
                     help="Planned expert parallelism: routed experts split over N GPUs (all-to-all "
                          "dispatch/combine; alone, the batch is per GPU).")(f)
    return click.option("--tp", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
                        help="Planned tensor parallelism: report one of N GPUs (heads and MLP columns "
                             "split, all-reduces added). See docs/parallel.md.")(f)


def make_workload(phase, batch, context, dtype, device, options, tp=1, ep=1) -> tuple[Workload, dict]:
    """The Workload the options describe (checked), and the parsed -O options."""
    validate(phase, batch, context, dtype, device)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise WorkloadError("--device cuda: no CUDA device is available here (use --device meta or cpu)")
    opts = parse_options(options)
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(opts.items())))
    if tp > 1 or ep > 1:
        workload = with_parallel(workload, tp, ep)
    return workload, opts
