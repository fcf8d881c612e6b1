"""`rooflinekit hardware list|show|detect`: the hardware database and the local GPUs."""

from __future__ import annotations

import json

import click
from tabulate import tabulate

from rooflinekit.cli.base import CONTEXT_SETTINGS, Group
from rooflinekit.cli.options import debug_option
from rooflinekit.core.units import si
from rooflinekit.stages.detect import detect
from rooflinekit.stages.hardware import hardware_db


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS)
def hardware():
    """The hardware database: list, show, detect."""


@hardware.command("list")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@debug_option
def hardware_list(fmt, debug):
    """List known accelerators with their dense bf16 peak, bandwidth and ridge point."""
    db = hardware_db()
    for problem in db.problems:
        click.echo(f"rooflinekit: warning: {problem}", err=True)
    entries = sorted(db.entries, key=lambda e: (e.vendor, e.name))
    if fmt == "json":
        click.echo(json.dumps([e.to_dict() for e in entries], indent=2))
        return
    rows = []
    for e in entries:
        bf16 = e.peak_flops.get("bf16")
        rows.append([e.name, e.vendor, si(bf16, "FLOP/s"), si(e.peak_flops.get("fp8"), "FLOP/s"),
                     si(e.memory_bandwidth, "B/s"), f"{e.ridge('bf16'):.1f}" if bf16 else "-",
                     si(e.memory_bytes, "B"), "yes" if e.verified else "no"])
    click.echo(tabulate(rows, headers=["name", "vendor", "bf16 dense", "fp8 dense", "bandwidth",
                                       "ridge bf16", "memory", "verified"], disable_numparse=True))
    click.echo("verified: no means the numbers come from press or partner material, not a vendor datasheet "
               "(`hardware show NAME` cites each number)")


@hardware.command("show")
@click.argument("name")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@debug_option
def hardware_show(name, fmt, debug):
    """Show one entry: every number, its source, and the ridge point per dtype."""

    spec = hardware_db().get(name)
    if fmt == "json":
        click.echo(json.dumps(spec.to_dict(), indent=2))
        return
    click.echo(f"{spec.name} ({spec.vendor}){'' if spec.verified else '  [unverified]'}")
    click.echo(f"  file: {spec.path}")
    if spec.aliases:
        click.echo(f"  aliases: {', '.join(spec.aliases)}")
    click.echo(f"  memory bandwidth: {si(spec.memory_bandwidth, 'B/s')}   [{spec.sources.get('memory_bandwidth', '-')}]")
    if spec.memory_bytes:
        click.echo(f"  memory: {si(spec.memory_bytes, 'B')}   [{spec.sources.get('memory_bytes', '-')}]")
    if spec.interconnect_bandwidth:
        click.echo(f"  interconnect: {si(spec.interconnect_bandwidth, 'B/s')} {spec.interconnect}   "
                   f"[{spec.sources.get('interconnect_bandwidth', '-')}]")
    click.echo("  dense peaks:")
    for key, value in spec.peak_flops.items():
        src = spec.sources.get(f"peak_flops.{key}", spec.sources.get("peak_flops", "-"))
        click.echo(f"    {key:5s} {si(value, 'FLOP/s'):>14s}   ridge {spec.ridge(key):7.1f} FLOP/B   [{src}]")
    if spec.notes:
        click.echo(f"  notes: {spec.notes}")


@hardware.command("detect")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@debug_option
def hardware_detect(fmt, debug):
    """Detect local NVIDIA GPUs (NVML): name, memory, max clocks, bus width, implied bandwidth,
    and the database entry each matches. Exits non-zero without a GPU or driver."""


    db = hardware_db()
    gpus = detect(db)
    if fmt == "json":
        out = []
        for g in gpus:
            d = g.to_dict()
            spec = db.find(g.entry) if g.entry else None
            d["entry_bandwidth"] = spec.memory_bandwidth if spec else None
            out.append(d)
        click.echo(json.dumps(out, indent=2))
        return
    rows = []
    for g in gpus:
        spec = db.find(g.entry) if g.entry else None
        rows.append([
            g.index, g.name, si(g.memory_bytes, "B"),
            f"{g.sm_clock_max_mhz} MHz" if g.sm_clock_max_mhz else "-",
            f"{g.mem_clock_max_mhz} MHz" if g.mem_clock_max_mhz else "-",
            f"{g.bus_width_bits} bit" if g.bus_width_bits else "-",
            si(g.bandwidth, "B/s") if g.bandwidth else "-",
            g.entry or "(no entry)",
            si(spec.memory_bandwidth, "B/s") if spec else "-",
        ])
    click.echo(tabulate(rows, headers=["gpu", "name", "memory", "SM clock max", "mem clock max",
                                       "bus", "implied bandwidth", "entry", "entry bandwidth"],
                        disable_numparse=True))
    if gpus:
        click.echo(f"driver {gpus[0].driver or '?'}; implied bandwidth = 2 x memory clock x bus width / 8 "
                   "(DDR); --hardware auto uses GPU 0's entry")
