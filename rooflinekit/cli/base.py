"""What every command shares: one-line errors (a RooflineError, a usage error, an unexpected
exception) with a non-zero exit, and the help layout."""

from __future__ import annotations

import sys

import click

from rooflinekit.core.errors import RooflineError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"rooflinekit: error: {message}", err=True)
    sys.exit(code)


class Command(click.Command):
    """Click command that reports UserError (and unexpected errors) as one line unless --debug."""

    def invoke(self, ctx):
        debug = ctx.params.get("debug", False) or ctx.obj and ctx.obj.get("debug")
        try:
            return super().invoke(ctx)
        except RooflineError as exc:
            if debug:
                raise
            _fail(str(exc))
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
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
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except no_args_help as exc:  # `rooflinekit` alone: the help, as asked for
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            _fail(f"{exc.format_message()}{hint}", exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.exceptions.Abort:
            _fail("aborted", 1)
        sys.exit(code if isinstance(code, int) else 0)
