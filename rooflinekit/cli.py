"""The `rooflinekit` command: wires the stages together and turns UserError into one clear line."""

from __future__ import annotations

import json
import sys

import click

from rooflinekit import __version__
from rooflinekit.errors import UserError
from rooflinekit.render import FORMATS, check_writable, render, write_atomic

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
        except UserError as exc:
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


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="rooflinekit")
def cli():
    """Roofline profiling for PyTorch LLMs: where decode time goes, and why.

    \b
    rooflinekit profile examples/llama_gqa.py --phase decode --batch 4 --context 32768
    rooflinekit hardware list
    rooflinekit plugins
    """


def _emit(report_text: str, output: str | None) -> None:
    if output:
        write_atomic(output, report_text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(report_text, nl=False)


def debug_option(f):
    return click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")(f)


def workload_options(f):
    opts = [
        click.option("--phase", default="decode", show_default=True, help="prefill or decode."),
        click.option("--batch", "-b", default=1, show_default=True, type=int, help="Sequences per step."),
        click.option("--context", "-s", default=4096, show_default=True, type=int,
                     help="Positions each new token attends to (decode: cache of context-1 plus itself)."),
        click.option("--dtype", default="bf16", show_default=True, help="bf16, fp16 or fp32 (default dtype in effect)."),
        click.option("--device", default="meta", show_default=True,
                     help="meta (no memory, default), cpu or cuda."),
        click.option("--hardware", "-H", default=None,
                     help="Hardware entry (name, alias or .toml path), or auto: the local GPU's entry "
                          "(NVML); default auto, else H800 SXM5."),
        click.option("--option", "-O", "options", multiple=True, metavar="KEY=VALUE",
                     help="Passed to build_model()/make_inputs() when they accept KEY (repeatable)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def parallel_options(f):
    """--tp/--ep: planned parallelism, one GPU's share of a single-GPU model (rooflinekit.parallel)."""
    f = click.option("--ep", default=1, show_default=True, type=click.IntRange(1),
                     help="Planned expert parallelism: routed experts split over N GPUs (all-to-all "
                          "dispatch/combine; alone, the batch is per GPU).")(f)
    return click.option("--tp", default=1, show_default=True, type=click.IntRange(1),
                        help="Planned tensor parallelism: report one of N GPUs (heads and MLP columns "
                             "split, all-reduces added). See docs/parallel.md.")(f)


PROFILE_HELP = """Profile MODEL: count FLOPs and bytes per op and module, attribute attention, place on a roofline.

\b
MODEL is a Python file that defines:
  build_model(**options) -> torch.nn.Module
  make_inputs(batch, context, phase, **options) -> tuple or list (positional args) or dict (kwargs)
Both are called with the target device (meta by default) and the default dtype already in
effect, so they must not pass device=/dtype= for floating tensors; on meta nothing is allocated.
Options given with -O KEY=VALUE reach whichever of the two accepts KEY.

\b
CONTEXT is the number of key/value positions each new token attends to:
  prefill: CONTEXT new tokens per sequence, causal among themselves;
  decode:  one new token per sequence; its KV cache has CONTEXT slots, CONTEXT-1 earlier
           tokens plus the new token's own K/V written into the last slot.

MODEL may also be a transformers config.json (needs the hf extra) or anything a plugin loads.
"""


def _workload(phase, batch, context, dtype, device, options, tp=1, ep=1):
    from rooflinekit.workload import Workload, parse_options, validate

    validate(phase, batch, context, dtype, device)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is available here (use --device meta or cpu)")
    opts = parse_options(options)
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(opts.items())))
    if tp > 1 or ep > 1:
        from rooflinekit.parallel import with_parallel

        workload = with_parallel(workload, tp, ep)
    return workload, opts


@cli.command(help=PROFILE_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("model", metavar="MODEL")
@workload_options
@click.option("--depth", default=3, show_default=True, type=int, help="Roll modules up to this many path components.")
@click.option("--group-layers", is_flag=True, help="Merge repeated layers (layers.*.mlp) in the module table.")
@click.option("--top", default=25, show_default=True, type=click.IntRange(0),
              help="Modules shown in the table (0: all).")
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", "-o", default=None, help="Write the report to this file (atomically).")
@click.option("--measure/--no-measure", default=None,
              help="Time the real forward (random weights) and join times to the counts; default: on "
                   "with --device cuda, off otherwise (needs --device cpu or cuda).")
@click.option("--warmup", default=2, show_default=True, type=int, help="Measured mode: untimed forwards first.")
@click.option("--repeats", default=5, show_default=True, type=int, help="Measured mode: timed forwards (mean).")
@click.option("--trace", default=None, metavar="FILE.json",
              help="Measured mode: write a Chrome/Perfetto trace, op events annotated with their counts.")
@click.option("--compare-hardware", default=None, metavar="NAME",
              help="Also place every point on a second entry (e.g. a calibrated one): placement_alt.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png|.svg", help="Also draw the roofline chart.")
@click.option("--plot-depth", type=click.IntRange(1), default=None,
              help="Chart every module at this depth (default: the weights-dominated modules).")
@parallel_options
@click.option("--distributed/--no-distributed", default=None,
              help="Profile every rank of a torchrun job (default: on when WORLD_SIZE > 1); rank 0 "
                   "writes one merged report. See docs/parallel.md.")
@debug_option
def profile(model, phase, batch, context, dtype, device, hardware, options, depth, group_layers, top, fmt, output, debug,
            measure=None, warmup=2, repeats=5, trace=None, compare_hardware=None, plot_path=None, plot_depth=None,
            tp=1, ep=1, distributed=None):
    from rooflinekit.distributed import requested
    from rooflinekit.pipeline import load_source
    from rooflinekit.pipeline import profile as run_profile

    workload, opts = _workload(phase, batch, context, dtype, device, options, tp, ep)
    if output:
        check_writable(output)
    if trace:
        check_writable(trace)
    if depth < 1:
        raise UserError(f"--depth must be at least 1, got {depth}")
    if plot_depth is not None and not plot_path:
        raise UserError("--plot-depth needs --plot FILE.png|.svg")
    if plot_path:
        from rooflinekit.plot import check_target

        check_target(plot_path)
    if warmup < 0 or repeats < 1:
        raise UserError(f"--warmup must be >= 0 and --repeats >= 1, got {warmup} and {repeats}")

    def run(on_stage=None):
        return run_profile(load_source(model, opts), workload, hardware or "auto", depth=depth,
                           group_layers=group_layers, measure=measure, warmup=warmup, repeats=repeats,
                           trace=trace, compare_hardware=compare_hardware, on_stage=on_stage).report

    if requested(distributed):  # every rank profiles its share; rank 0 merges (rooflinekit.distributed)
        from rooflinekit.distributed import check_options, leave, multi_process, run_ranks

        check_options(tp, ep, trace)
        try:
            report = run_ranks(run, device)
        except SystemExit as exc:
            if multi_process():
                leave(exc.code if isinstance(exc.code, int) else 1)
            raise
        if report is None:
            if multi_process():
                leave(0)
            return
    else:
        report = run()
    for w in report["warnings"]:
        click.echo(f"rooflinekit: warning: {w}", err=True)
    _emit(render(report, fmt, top or None), output)
    if trace:
        click.echo(f"wrote {trace} (Chrome/Perfetto trace of the measured run)", err=True)
    if plot_path:
        from rooflinekit.plot import write_plot

        click.echo(f"wrote {plot_path} ({write_plot(report, plot_path, plot_depth)} points)", err=True)
    if requested(distributed):
        from rooflinekit.distributed import leave, multi_process

        if multi_process():
            leave(0)


@cli.group(cls=Group, context_settings=CONTEXT_SETTINGS)
def hardware():
    """The hardware database: list, show, detect."""


@hardware.command("list")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@debug_option
def hardware_list(fmt, debug):
    """List known accelerators with their dense bf16 peak, bandwidth and ridge point."""
    from tabulate import tabulate

    from rooflinekit.pipeline import hardware_db
    from rooflinekit.units import si

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
                     si(e.memory_bandwidth, "B/s"), f"{bf16 / e.memory_bandwidth:.1f}" if bf16 else "-",
                     si(e.memory_bytes, "B"), "" if e.verified else "unverified"])
    click.echo(tabulate(rows, headers=["name", "vendor", "bf16 dense", "fp8 dense", "bandwidth",
                                       "ridge bf16", "memory", ""], disable_numparse=True))


@hardware.command("show")
@click.argument("name")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@debug_option
def hardware_show(name, fmt, debug):
    """Show one entry: every number, its source, and the ridge point per dtype."""
    from rooflinekit.pipeline import hardware_db
    from rooflinekit.units import si

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
        click.echo(f"    {key:5s} {si(value, 'FLOP/s'):>14s}   ridge {value / spec.memory_bandwidth:7.1f} FLOP/B   [{src}]")
    if spec.notes:
        click.echo(f"  notes: {spec.notes}")


@cli.command("plugins")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table")
@debug_option
def plugins_cmd(fmt, debug):
    """List loaded plugins: name, distribution, version, hooks. ROOFLINEKIT_TRACE_HOOKS=1 traces calls."""
    from tabulate import tabulate

    from rooflinekit.plugins import get_host

    host = get_host()
    if fmt == "json":
        click.echo(json.dumps({"plugins": [vars(i) for i in host.infos], "warnings": host.warnings}, indent=2))
        return
    rows = [[i.name, i.distribution, i.version, i.module, ", ".join(h.replace("rooflinekit_", "") for h in i.hooks)]
            for i in host.infos]
    click.echo(tabulate(rows, headers=["plugin", "distribution", "version", "module", "hooks"]))
    for w in host.warnings:
        click.echo(f"rooflinekit: warning: {w}", err=True)


# Commands defined beside the code they drive (their modules stay light: the commands import
# torch and matplotlib only when they run).
from rooflinekit.compare import compare_command  # noqa: E402
from rooflinekit.measure_cli import calibrate_command, detect_command  # noqa: E402
from rooflinekit.plot import plot_command  # noqa: E402
from rooflinekit.sweep import sweep_command  # noqa: E402

cli.add_command(sweep_command())
cli.add_command(plot_command())
cli.add_command(compare_command())
cli.add_command(calibrate_command(Command))
hardware.add_command(detect_command(Command))


def main() -> None:
    cli(prog_name="rooflinekit")


if __name__ == "__main__":
    main()
