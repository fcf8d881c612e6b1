"""Options and helpers shared by several commands (inputs, output, --debug).

Torch-free, so that the commands that run no model start fast; the workload options of those
that do are in rooflinekit.cli.workload.
"""

from __future__ import annotations

import os
import sys

import click

from rooflinekit.cli.base import STDOUT_CLOSED, ClosedStdout
from rooflinekit.core.errors import OutputError
from rooflinekit.core.files import check_not_input, check_writable, write_atomic

Inputs = list[tuple[str, "str | None"]]


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
