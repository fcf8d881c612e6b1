"""`rooflinekit plugins`: what is loaded, from which distribution, providing what."""

from __future__ import annotations

import json

import click
from tabulate import tabulate

from rooflinekit.cli.base import Command
from rooflinekit.cli.options import debug_option
from rooflinekit.core.plugins import get_host


@click.command("plugins", cls=Command)
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@debug_option
def plugins_cmd(fmt, debug):
    """List loaded plugins: name, distribution and version, what each provides, its hooks.

    The table fits a 100-column terminal; `-f json` adds each plugin's module. Set
    ROOFLINEKIT_TRACE_HOOKS=1 to trace hook calls, ROOFLINEKIT_DISABLE_PLUGINS=a,b to leave some out.
    """
    host = get_host()
    if fmt == "json":
        click.echo(json.dumps({"plugins": [vars(i) for i in host.infos], "warnings": host.warnings}, indent=2))
        return
    rows = [[i.name, f"{i.distribution} {i.version}", ", ".join(i.provides),
             ", ".join(h.replace("rooflinekit_", "") for h in i.hooks)]
            for i in host.infos]
    click.echo(tabulate(rows, headers=["plugin", "distribution", "provides", "hooks"],
                        maxcolwidths=[None, 22, 26, 32]))
    for w in host.warnings:
        click.echo(f"rooflinekit: warning: {w}", err=True)
