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


#: File suffixes that make `-o FILE` write the HTML report when no --format is given.
HTML_SUFFIXES = (".html", ".htm")


def format_option(choices: tuple[str, ...]):
    """--format/-f: one of `choices`; when not given, html for `-o FILE.html`, else table."""
    return click.option("--format", "-f", "fmt", type=click.Choice(choices), default=None,
                        help="Output format [default: table, or html when -o names a .html file].")


def output_format(fmt: str | None, output: str | None) -> str:
    """The format a command writes: the one given, else what the output file's suffix names."""
    if fmt:
        return fmt
    return "html" if output and output.lower().endswith(HTML_SUFFIXES) else "table"


def wide_option(f):
    """--wide: every column, no width limit (the text report fits 100 columns otherwise)."""
    return click.option("--wide", is_flag=True, help="Text: every column, lines as long as they are "
                        "(default: fit 100 columns).")(f)


def use_colour(fmt: str, output: str | None) -> bool:
    """Colour the text report: on a terminal only, never into a file or a pipe, nor when NO_COLOR
    is set (https://no-color.org)."""
    return fmt == "table" and not output and not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def debug_option(f):
    return click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")(f)
