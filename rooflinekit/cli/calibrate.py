"""`rooflinekit calibrate`: measure real ceilings and save them as a hardware entry."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click
from tabulate import tabulate

from rooflinekit.analyses.calibrate import (
    calibrate,
    check_device,
    check_output,
    check_size_mb,
    datasheet_entry,
    default_name,
    hardware_argument,
    save,
)
from rooflinekit.cli.base import Command
from rooflinekit.cli.options import check_destination, check_stdout, debug_option
from rooflinekit.core.errors import UserError
from rooflinekit.core.files import write_atomic
from rooflinekit.core.units import si
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.trace.calibrate import (
    calibrate_steps,
    efficiency_toml,
    held_out_check,
    read_steps,
    trace_lines,
    trace_summary,
)


@click.command("calibrate", cls=Command)
@click.option("--device", default=None, help="cuda or cpu (default: cuda if available, else cpu).")
@click.option("--output", "-o", default=None,
              help="Write the entry to this .toml file (default: the user hardware folder, "
                   "$ROOFLINEKIT_HOME/hardware).")
@click.option("--name", default=None, help="Entry name (default: '<datasheet entry> calibrated', or 'CPU calibrated').")
@click.option("--size-mb", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Copy buffer for the bandwidth test, MB (default 1024 on CUDA, 128 on CPU).")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["fp32", "tf32", "bf16", "fp16"]),
              help="Matmul dtypes to measure (repeatable; default fp32, bf16, fp16, and tf32 on CUDA).")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--trace", "trace_path", default=None, metavar="TRACE",
              help="Calibrate from a torch.profiler trace of your own GPU run instead of measuring this machine: "
                   "the achieved fractions per kernel class and shape, written as an efficiency source (-o).")
@click.option("--steps", default=None, metavar="N,N,...",
              help="With --trace: the profiler steps to calibrate from [default: every step but the last]; the "
                   "other steps check the result.")
@click.option("--hardware", "-H", default=None,
              help="With --trace: the hardware entry the trace ran on [default: the GPU its deviceProperties name].")
@debug_option
def calibrate_cmd(device, output, name, size_mb, dtypes, fmt, trace_path, steps, hardware, debug):
    """Measure achievable memory bandwidth (large copies, read + write bytes) and matmul
    throughput per dtype, and save them as a hardware entry (calibrated = true) that
    `profile --hardware NAME` and `--compare-hardware NAME` accept. With --trace, read them from
    a torch.profiler trace instead (docs/trace.md, "Calibrating from a trace")."""

    if trace_path is not None:
        given = [o for o, v in (("--device", device), ("--name", name), ("--size-mb", size_mb),
                                ("--dtype", dtypes)) if v]
        if given:
            raise UserError(f"{given[0]} measures this machine; with --trace nothing is measured here: drop it")
        from_trace(trace_path, steps, hardware, output, fmt)
        return
    if steps or hardware:
        raise UserError(f"{'--steps' if steps else '--hardware'} goes with --trace TRACE")
    check_size_mb(size_mb)
    check_stdout()
    if output:
        check_output(output)
    device = check_device(device)
    db = hardware_db()
    if output:  # a datasheet entry is what calibrate reads, and kept beside the calibrated one
        check_destination(output, [(f"the hardware entry '{e.name}'", e.path) for e in db.entries if not e.calibrated])
    sheet = datasheet_entry(device, db)
    cal = calibrate(device, size_mb, tuple(dtypes) or None, datasheet=sheet)
    name = name or default_name(cal)
    path = save(cal, name, output)
    spec = db.find(sheet) if sheet else None
    if fmt == "json":
        click.echo(json.dumps({
            "name": name, "path": str(path), "device": cal.device, "device_name": cal.device_name,
            "calibrated_from": sheet, "memory_bandwidth": cal.bandwidth, "peak_flops": cal.peaks,
            "matmul_n": cal.matmul_n, "skipped": cal.skipped, "wall_s": cal.wall_s,
        }, indent=2))
        return
    click.echo(f"calibrated {cal.device_name} ({cal.device}) in {cal.wall_s:.1f} s"
               + (f"; datasheet entry {sheet}" if sheet else ""))
    rows = [["memory bandwidth", si(cal.bandwidth, "B/s"), si(cal.bandwidth_median, "B/s"),
             si(spec.memory_bandwidth, "B/s") if spec else "-",
             f"{cal.bandwidth / spec.memory_bandwidth:.0%}" if spec else "-"]]
    for k, v in cal.peaks.items():
        sheet_v = spec.peak_flops.get(k) if spec else None
        rows.append([f"{k} matmul (n={cal.matmul_n[k]})", si(v, "FLOP/s"), si(cal.peaks_median[k], "FLOP/s"),
                     si(sheet_v, "FLOP/s") if sheet_v else "-", f"{v / sheet_v:.0%}" if sheet_v else "-"])
    for k, why in cal.skipped.items():
        rows.append([f"{k} matmul", "not supported", why[:60], "-", "-"])

    click.echo(tabulate(rows, headers=["ceiling", "measured (best)", "median", "datasheet", "of datasheet"],
                        disable_numparse=True))
    click.echo(f"wrote {path}")
    click.echo(f"use it with: rooflinekit profile MODEL --hardware {shlex.quote(hardware_argument(name, path))}")


def _step_list(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        steps = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"--steps {text!r}: give profiler step numbers, comma-separated (e.g. 3,4,5)") from None
    if not steps:
        raise UserError(f"--steps {text!r}: give at least one profiler step number")
    return steps


def from_trace(trace_path: str, steps: str | None, hardware: str | None, output: str | None, fmt: str) -> None:
    """`calibrate --trace`: the efficiency source from some steps, checked on the others."""
    output = output or f"{Path(trace_path).name.split('.')[0]}.efficiency.toml"
    check_destination(output, [("the trace", trace_path)])
    read = read_steps(trace_path, hardware)
    cal = calibrate_steps(read, _step_list(steps), held_out=1)
    write_atomic(output, efficiency_toml(cal))
    checks, others = held_out_check(cal, output, read)
    if fmt == "json":
        click.echo(json.dumps(trace_summary(cal, output, checks, others), indent=2))
        return
    click.echo("\n".join(trace_lines(cal, output, checks, others)))
