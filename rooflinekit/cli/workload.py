"""The workload options of the commands that run a model (`profile`, `sweep`): phase, batch,
context, dtype, device, hardware, -O options, planned parallelism, and the checked Workload they
describe.

Apart from rooflinekit.cli.options because a Workload needs torch: commands that run no model
(`hardware`, `plot`, `compare`, `plugins`) import only that module and start without torch.
"""

from __future__ import annotations

import click
import torch

from rooflinekit.analyses.parallel import with_parallel
from rooflinekit.core.errors import WorkloadError
from rooflinekit.stages.workload import Workload, parse_options, validate

#: The most GPUs --tp or --ep splits a model over.
MAX_PARALLEL = 1 << 16


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
    """--tp/--ep: planned parallelism, one GPU's share of a single-GPU model (rooflinekit.analyses.parallel)."""
    f = click.option("--ep", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
                     help="Planned expert parallelism: routed experts split over N GPUs (all-to-all "
                          "dispatch/combine; alone, the batch is per GPU).")(f)
    return click.option("--tp", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
                        help="Planned tensor parallelism: report one of N GPUs (heads and MLP columns "
                             "split, all-reduces added). See docs/parallel.md.")(f)


def make_workload(phase, batch, context, dtype, device, options, tp=1, ep=1) -> tuple[Workload, dict]:
    """The Workload the options describe (checked), and the parsed -O options."""
    validate(phase, batch, context, dtype, device)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise WorkloadError("--device cuda: no CUDA device is available here (use --device meta or cpu)")
    opts = parse_options(options)
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(opts.items())))
    if tp > 1 or ep > 1:
        workload = with_parallel(workload, tp, ep)
    return workload, opts
