"""CLI commands beside measured mode: `rooflinekit calibrate` and `rooflinekit hardware detect`.

cli.py registers them, passing its Command class (one-line errors); the commands are built by
these functions when cli.py calls them, so this module imports nothing from cli.py at import time.
"""

from __future__ import annotations

import json
import shlex

import click


def detect_command(command_cls: type[click.Command]) -> click.Command:
    from rooflinekit.cli import debug_option

    @click.command("detect", cls=command_cls)
    @click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
    @debug_option
    def hardware_detect(fmt, debug):
        """Detect local NVIDIA GPUs (NVML): name, memory, max clocks, bus width, implied bandwidth,
        and the database entry each matches. Exits non-zero without a GPU or driver."""
        from tabulate import tabulate

        from rooflinekit.detect import detect
        from rooflinekit.pipeline import hardware_db
        from rooflinekit.units import si

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

    return hardware_detect


def calibrate_command(command_cls: type[click.Command]) -> click.Command:
    from rooflinekit.cli import debug_option

    @click.command("calibrate", cls=command_cls)
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
    @debug_option
    def calibrate_cmd(device, output, name, size_mb, dtypes, fmt, debug):
        """Measure achievable memory bandwidth (large copies, read + write bytes) and matmul
        throughput per dtype, and save them as a hardware entry (calibrated = true) that
        `profile --hardware NAME` and `--compare-hardware NAME` accept."""
        from rooflinekit.calibrate import (
            calibrate,
            check_device,
            check_output,
            check_size_mb,
            datasheet_entry,
            default_name,
            hardware_argument,
            save,
        )
        from rooflinekit.pipeline import hardware_db
        from rooflinekit.render import check_writable
        from rooflinekit.units import si

        check_size_mb(size_mb)
        if output:
            check_output(output)
            check_writable(output)
        device = check_device(device)
        db = hardware_db()
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
        from tabulate import tabulate

        click.echo(tabulate(rows, headers=["ceiling", "measured (best)", "median", "datasheet", "of datasheet"],
                            disable_numparse=True))
        click.echo(f"wrote {path}")
        click.echo(f"use it with: rooflinekit profile MODEL --hardware {shlex.quote(hardware_argument(name, path))}")

    return calibrate_cmd
