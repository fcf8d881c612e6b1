"""What every command shares: one-line errors (a RooflineError, a usage error, an unexpected
exception) with a non-zero exit, and the help layout."""

from __future__ import annotations

import io
import os
import sys

import click

from rooflinekit.core.errors import OutputError, RooflineError
from rooflinekit.core.signals import (
    Terminated,
    interrupt_status,
    interrupt_word,
    sigterm_as_interrupt,
)

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"rooflinekit: error: {message}", err=True)
    sys.exit(code)


STDOUT_CLOSED = "stdout is closed: nothing to write the output to (redirect it to a file, or use -o FILE)"


class ClosedStdout(io.TextIOBase):
    """sys.stdout when the process started with file descriptor 1 closed (`>&-`): output fails
    with one line instead of vanishing (click.echo drops output when sys.stdout is None)."""

    encoding = "utf-8"
    errors = "strict"

    def writable(self) -> bool:
        return True

    def write(self, s) -> int:
        if not isinstance(s, str):
            raise TypeError("ClosedStdout takes text")
        if s:
            raise OutputError(STDOUT_CLOSED)
        return 0


def _guard_stdout() -> None:
    """With stdout closed at start, hold file descriptor 1 on /dev/null (so that no file opened
    later takes it, and native prints go nowhere) and make Python-level output fail loudly."""
    if sys.stdout is not None:
        return
    try:
        os.fstat(1)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
        if fd != 1:
            os.dup2(fd, 1)
            os.close(fd)
    sys.stdout = ClosedStdout()


def broken_pipe() -> None:
    """The reader of stdout went away (`rooflinekit ... | head`): end quietly with 141 (128 +
    SIGPIPE, what a tool killed by SIGPIPE returns), with no traceback and no complaint from
    Python's own flush of stdout at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:  # pragma: no cover
        pass
    sys.exit(141)


def _finish_stdout(code) -> None:
    """Flush stdout before exiting: output lost there is an error, not an exit 0."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        broken_pipe()
    except (OSError, ValueError) as exc:
        if code in (0, None):
            _fail(f"cannot write to stdout: {getattr(exc, 'strerror', None) or exc}", 1)


class Command(click.Command):
    """Click command that reports UserError (and unexpected errors) as one line unless --debug."""

    def invoke(self, ctx):
        debug = ctx.params.get("debug", False) or ctx.obj and ctx.obj.get("debug")
        try:
            with sigterm_as_interrupt():  # SIGTERM stops the work as Ctrl-C does (exit 143)
                return super().invoke(ctx)
        except RooflineError as exc:
            if debug:
                raise
            _fail(str(exc))
        except KeyboardInterrupt as exc:  # a plugin's hook interrupted says which (rooflinekit.core.plugins)
            if isinstance(exc, Terminated) and os.environ.get("TORCHELASTIC_RUN_ID"):
                sys.exit(interrupt_status())  # torchrun stopping this rank after another failed: that rank says why
            _fail(str(exc) or interrupt_word(), interrupt_status())
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # stdout's reader went away
            broken_pipe()
        except Exception as exc:
            if debug:
                raise
            _fail(f"{type(exc).__name__}: {exc} (run again with --debug for the traceback)", 1)


class Group(click.Group):
    command_class = Command

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Usage errors (a bad option value, a missing argument) as one line, like every other error."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", ())
        _guard_stdout()
        try:
            try:
                code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            except no_args_help as exc:  # `rooflinekit` alone: the help, as asked for
                help_text = exc.ctx.get_help()
                try:
                    click.echo(help_text)
                except RooflineError as closed:  # stdout closed
                    _fail(str(closed))
                sys.exit(0)
            except click.UsageError as exc:
                hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
                _fail(f"{exc.format_message()}{hint}", exc.exit_code)
            except click.ClickException as exc:
                _fail(exc.format_message(), exc.exit_code)
            except click.exceptions.Abort:
                _fail("aborted", 1)
            except RooflineError as exc:  # outside a command: --help or --version with stdout closed
                _fail(str(exc))
            except BrokenPipeError:
                broken_pipe()
            code = code if isinstance(code, int) else 0
        except SystemExit as exc:
            code = exc.code
        _finish_stdout(code)
        sys.exit(code)
