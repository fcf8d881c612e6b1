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
    """List loaded plugins: name, distribution, version, what each provides, hooks. ROOFLINEKIT_TRACE_HOOKS=1 traces calls."""

    host = get_host()
    if fmt == "json":
        click.echo(json.dumps({"plugins": [vars(i) for i in host.infos], "warnings": host.warnings}, indent=2))
        return
    rows = [[i.name, i.distribution, i.version, i.module, ", ".join(i.provides),
             ", ".join(h.replace("rooflinekit_", "") for h in i.hooks)]
            for i in host.infos]
    click.echo(tabulate(rows, headers=["plugin", "distribution", "version", "module", "provides", "hooks"]))
    for w in host.warnings:
        click.echo(f"rooflinekit: warning: {w}", err=True)
