"""The `rooflinekit` command group. Each command lives in its own module, imported only when that
command runs, so `rooflinekit --help` answers without importing torch."""

from __future__ import annotations

import atexit
import gc
import importlib

import click

from rooflinekit.cli.base import CONTEXT_SETTINGS, Group
from rooflinekit.core.version import version_text

#: command name -> (module, attribute, one-line help shown by `rooflinekit --help`)
COMMANDS = {
    "profile": ("rooflinekit.cli.profile", "profile_cmd",
                "Profile MODEL: count FLOPs and bytes per op and module, attribute attention, place..."),
    "sweep": ("rooflinekit.cli.sweep", "sweep_cmd",
              "Profile MODEL at every BATCH x CONTEXT; find the critical batch per context."),
    "advise": ("rooflinekit.cli.advise", "advise_cmd",
               "Price every lever that would change MODEL's step time, ranked by tokens/s."),
    "plan": ("rooflinekit.cli.plan", "plan_cmd",
             "Search MODEL's deployments on a GPU budget for the best that meets latency targets."),
    "compare": ("rooflinekit.cli.compare", "compare_cmd",
                "Two profile reports side by side, with A/B ratios."),
    "trace": ("rooflinekit.cli.trace", "trace_cmd",
              "The roofline of what a torch.profiler trace ran: busy/idle, classes, achieved rates."),
    "plot": ("rooflinekit.cli.plot", "plot", "Draw a roofline chart from a profile or sweep JSON report."),
    "hardware": ("rooflinekit.cli.hardware", "hardware", "The hardware database: list, show, detect."),
    "calibrate": ("rooflinekit.cli.calibrate", "calibrate_cmd",
                  "Measure achievable memory bandwidth and matmul throughput; save a hardware entry."),
    "plugins": ("rooflinekit.cli.plugins", "plugins_cmd",
                "List loaded plugins: name, distribution, what each provides, hooks."),
}


class LazyGroup(Group):
    """A group whose commands are imported by name when they run (help lines come from COMMANDS)."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, short) for name, (_, _, short) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit()


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, the torch and transformers releases it is tested with, and exit.")
def cli():
    """Roofline profiling for PyTorch LLMs: where decode time goes, and why.

    \b
    rooflinekit profile examples/llama_gqa.py --phase decode --batch 4 --context 32768
    rooflinekit hardware list
    rooflinekit plugins
    """


def main() -> None:
    # Registered first, so it runs last: the interpreter's final collections would walk every
    # object torch made (about 0.8 s); everything rooflinekit writes is closed before this point.
    atexit.register(gc.freeze)
    cli(prog_name="rooflinekit")


if __name__ == "__main__":
    main()
