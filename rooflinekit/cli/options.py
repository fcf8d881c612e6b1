"""Options and helpers shared by several commands (inputs, output, --debug).

Torch-free, so that the commands that run no model start fast; the workload options of those
that do are in rooflinekit.cli.request_options.
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


#: The format each extension of `-o FILE` names when no --format is given (any other: table).
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown",
                  ".html": "html", ".htm": "html", ".txt": "table", ".text": "table"}
#: Chart files: no -o report is one (charts are --plot's, or `rooflinekit plot -o`).
CHART_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")
#: The extension named beside each format in messages.
FORMAT_SUFFIX = {"table": ".txt", "json": ".json", "csv": ".csv", "markdown": ".md", "html": ".html"}


def format_option(choices: tuple[str, ...]):
    """--format/-f: one of `choices`; when not given, what -o's extension names (output_format)."""
    return click.option("--format", "-f", "fmt", type=click.Choice(choices), default=None,
                        help="Output format [default: what -o's extension names (.json .csv .md .html .txt), "
                             "else table].")


def _command_formats() -> tuple[tuple[str, ...], str, bool]:
    """The --format choices of the command running, its name, and whether it has --plot."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return tuple(FORMAT_SUFFIX), "rooflinekit", False
    params = {p.name: p for p in ctx.command.params}
    fmt = params.get("fmt")
    choices = tuple(fmt.type.choices) if fmt is not None and isinstance(fmt.type, click.Choice) else ()
    return choices or tuple(FORMAT_SUFFIX), ctx.info_name or "rooflinekit", "plot_path" in params


def output_format(fmt: str | None, output: str | None, formats: tuple[str, ...] | None = None) -> str:
    """The format a command writes: the one given (-f), else what the extension of the output
    file names (.json, .csv, .md, .html/.htm, .txt), else table. An extension that names a format
    the command cannot write (`formats`, by default its --format choices) is one line naming the
    formats it can."""
    if fmt:
        return fmt
    if not output:
        return "table"
    choices, command, has_plot = _command_formats()
    formats = tuple(formats or choices)
    suffix = os.path.splitext(output)[1].lower()
    named = SUFFIX_FORMATS.get(suffix)
    if named is None and suffix not in CHART_SUFFIXES:
        return "table"
    if named in formats:
        return named
    can = ", ".join(f"{f} ({FORMAT_SUFFIX.get(f, '-f ' + f)})" for f in formats)
    what = named or "a chart"
    hint = " (a chart is --plot FILE.png)" if named is None and has_plot else ""
    raise OutputError(f"{command} cannot write {what} (-o {output}){hint}; it writes {can}: "
                      "change the extension, or give -f FORMAT")


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
