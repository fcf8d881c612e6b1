"""The workload options of the commands that run a model (`profile`, `sweep`, `advise`): phase,
batch, context, dtype, device, hardware, -O options, weight and KV cache formats, multi-token decode,
planned parallelism, and the checked request they describe (rooflinekit.core.request: the Workload
and its Deployment).

The format and multi-token flags (--weight-dtype, --weight-group-size, --kv-dtype, --q-len,
--quantize-embeddings) reach no command function as arguments: `workload_options` keeps them in the
click context, and `make_workload` reads them from there (or from its `levers` argument).

Apart from rooflinekit.cli.options because a Workload needs torch: commands that run no model
(`hardware`, `plot`, `compare`, `plugins`) import only that module and start without torch.
"""

from __future__ import annotations

from dataclasses import replace

import click
import torch

from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.request import (
    DEFAULT_FRACTION,
    KERNELS,
    KV_BYTES,
    OVERLAPS,
    WEIGHT_BITS,
    Deployment,
    Workload,
)
from rooflinekit.stages.pipeline_parallel import SCHEDULES
from rooflinekit.stages.workload import MAX_PARALLEL, parse_options, validate, validate_levers

#: Where the click context keeps the format and multi-token flags (`make_workload` reads them).
LEVERS = "rooflinekit.workload_levers"
#: The flags among them that set a Deployment field of the same name (--q-len sets the Workload's).
DEPLOYMENT_FLAGS = ("weight_dtype", "weight_group_size", "kv_dtype", "quantize_embeddings", "kernels", "pp",
                    "micro_batches", "pp_schedule", "redundant_experts", "ep_imbalance", "efficiency", "engine", "overlap")
#: --efficiency's help (profile, sweep, advise and plan).
EFFICIENCY_HELP = ("The expected time's achievable fractions per kernel class: published (the committed table "
                   "from public kernel measurements), the path of an efficiency file (`rooflinekit calibrate "
                   "--trace` writes one), or a name a plugin provides [default: the hardware entry's own, else "
                   "published].")
#: --engine's help (profile, sweep, advise and plan).
ENGINE_HELP = ("The serving engine whose host time per step (scheduling, input preparation, sampling between "
               "steps) the expected step adds: none, vllm, vllm-v0, sglang, sglang-no-overlap, trtllm, each from a "
               "published measurement (rooflinekit/stages/engines.toml) [default: none, the kernels alone]. The "
               "bound never includes it.")

#: --overlap's help (profile, sweep, advise and plan).
OVERLAP_HELP = ("How the expected step overlaps collectives with kernels: none (after them), or two-batch (two "
                "micro-batches, one's collectives under the other's kernels, as DeepSeek and SGLang's "
                "--enable-two-batch-overlap run expert parallelism; each kernel at half the tokens reads its "
                "weights twice) [default: none]. The bound assumes perfect overlap either way.")


def _keep(ctx: click.Context, param: click.Parameter, value):
    """Callback of a lever flag: its value (and whether it was given) kept in the context."""
    kept = ctx.meta.setdefault(LEVERS, {})
    kept[param.name] = value
    source = ctx.get_parameter_source(param.name)
    if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
        kept.setdefault("_given", set()).add(param.name)
    return value


def lever_options(f):
    """--weight-dtype, --weight-group-size, --kv-dtype, --q-len, --quantize-embeddings, --kernels (kept
    in the click context for make_workload; see the module docstring)."""
    opts = [
        click.option("--weight-dtype", default=None, expose_value=False, callback=_keep,
                     help=f"Stored format of linear and expert weights: {', '.join(WEIGHT_BITS)} (default: "
                          "the --dtype). Read at that size plus scales; embedding and lm_head stay bf16. "
                          "See docs/accounting.md."),
        click.option("--weight-group-size", default=None, type=int, expose_value=False, callback=_keep,
                     help="Weight elements per scale (int8/int4 default 128, fp16 scales; fp8 default one "
                          "fp32 scale per output channel)."),
        click.option("--kv-dtype", default=None, expose_value=False, callback=_keep,
                     help=f"KV cache format: {', '.join(KV_BYTES)} (default: the --dtype)."),
        click.option("--q-len", default=1, show_default=True, type=int, expose_value=False, callback=_keep,
                     help="Decode only: new tokens per sequence (speculative/MTP verify), causal among "
                          "themselves, each attending the context up to itself."),
        click.option("--quantize-embeddings", is_flag=True, expose_value=False, callback=_keep,
                     help="Also quantize the token embedding and the output head (lm_head)."),
        click.option("--kernels", default=None, type=click.Choice(KERNELS), expose_value=False, callback=_keep,
                     help="as-written: the model's code as it runs; serving: what a serving engine runs "
                          "(FlashAttention/FlashMLA/paged attention, merged and fused kernels). Default "
                          "as-written (advise: serving). See docs/accounting.md, Serving view."),
        click.option("--efficiency", default=None, metavar="SOURCE", expose_value=False, callback=_keep,
                     help=EFFICIENCY_HELP),
        click.option("--engine", default=None, metavar="NAME", expose_value=False, callback=_keep, help=ENGINE_HELP),
        click.option("--overlap", default=None, type=click.Choice(OVERLAPS), expose_value=False, callback=_keep,
                     help=OVERLAP_HELP),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def context_levers() -> dict:
    """The lever flags the current command was given (empty outside a command)."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(LEVERS, {})) if ctx is not None else {}


#: Suffixes of a batch or context as they are quoted: 32k = 32768 (x 1024), 1M = 1024 * 1024.
SUFFIXES = {"k": 1024, "K": 1024, "M": 1024 * 1024}


def parse_count(text, what: str = "value") -> int:
    """'32768', '32k', '32K' (x 1024), '1M' (x 1024^2) -> an integer; a WorkloadError naming `what`
    otherwise. The one parser of batch and context on every command (their ranges are checked where
    the workload is: stages.workload.validate)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    raw = str(text).strip().replace("_", "")
    scale = SUFFIXES.get(raw[-1:], 1)
    digits = raw[:-1] if scale > 1 else raw
    sign = -1 if digits.startswith("-") else 1
    if not digits.lstrip("-").isdigit() or digits.count("-") > 1:
        raise WorkloadError(f"{what} {text!r} is not a valid integer: give a whole number of tokens or sequences "
                            f"such as 4096, 32k (x 1024) or 1M (x 1024^2)")
    return sign * int(digits.lstrip("-")) * scale


def parse_counts(text, what: str = "value") -> list[int]:
    """'1,4,16' or '4k,32k' -> [1, 4, 16] / [4096, 32768]: `parse_count` of each, order kept,
    duplicates dropped."""
    items: list[int] = []
    for part in str(text).split(","):
        if part.strip():
            n = parse_count(part, what)
            if n < 1:
                raise WorkloadError(f"{what} {n}: every value must be at least 1")
            if n not in items:
                items.append(n)
    if not items:
        raise WorkloadError(f"{what}: give at least one value (e.g. 1,4,16)")
    return items


def _flag(param) -> str:
    return param.opts[0] if param is not None and param.opts else "value"


class Count(click.ParamType):
    """A batch or context on the command line: `parse_count` (32k = 32768)."""

    name = "N"

    def convert(self, value, param, ctx):
        try:
            return parse_count(value, _flag(param))
        except WorkloadError as exc:
            self.fail(str(exc), param, ctx)


def count_list(ctx, param, value) -> list[int]:
    """Click callback for comma-separated batches or contexts (`parse_counts`)."""
    try:
        return parse_counts(value, _flag(param))
    except WorkloadError as exc:
        raise click.BadParameter(str(exc)) from None


COUNT = Count()


def workload_options(f):
    opts = [
        click.option("--phase", default="decode", show_default=True, help="prefill or decode."),
        click.option("--batch", "-b", default=1, show_default=True, type=COUNT,
                     help="Sequences per step (k = x 1024)."),
        click.option("--context", "-s", default=4096, show_default=True, type=COUNT,
                     help="Positions each new token attends to (decode: cache of context-1 plus itself); "
                          "32k = 32768, 1M = 1024^2."),
        click.option("--dtype", default="bf16", show_default=True,
                     help="bf16, fp16 or fp32 (default dtype in effect), or fp8: activations and weight "
                          "products in fp8 at the fp8 peak (modelled: the model runs in bf16)."),
        click.option("--device", default="meta", show_default=True,
                     help="meta (no memory, default), cpu or cuda."),
        click.option("--hardware", "-H", default=None,
                     help="Hardware entry (name, alias or .toml path), or auto: the local GPU's entry "
                          "(NVML); default auto, else H800 SXM5."),
        click.option("--option", "-O", "options", multiple=True, metavar="KEY=VALUE",
                     help="Passed to build_model()/make_inputs() when they accept KEY (repeatable)."),
    ]
    f = memory_option(lever_options(f))  # applied first: listed after the options above
    for opt in reversed(opts):
        f = opt(f)
    return f


#: Where the click context keeps --memory-fraction (`make_workload` reads it).
MEMORY_FRACTION = "rooflinekit.memory_fraction"


def _keep_fraction(ctx: click.Context, param: click.Parameter, value):
    ctx.meta[MEMORY_FRACTION] = value
    return value


def memory_option(f):
    """--memory-fraction: the share of each GPU's memory the workload may fill (rooflinekit.stages.memory)."""
    return click.option("--memory-fraction", default=DEFAULT_FRACTION, show_default=True, type=float,
                        expose_value=False, callback=_keep_fraction,
                        help="Share of each GPU's memory, after the hardware entry's reserve (CUDA context, "
                             "communication buffers), usable for weights, KV cache and activations (the "
                             "rest: the allocator's fragments); memory.fits and max_batch use it.")(f)


def pipeline_options(f):
    """--pp/--micro-batches: planned pipeline parallelism (rooflinekit.analyses.pipeline_parallel), kept in
    the click context for make_workload like the lever flags."""
    f = click.option("--pp-schedule", default="steady", show_default=True, type=click.Choice(SCHEDULES),
                     expose_value=False, callback=_keep,
                     help="How the pipeline runs: steady (a serving engine's micro-batches in flight, one "
                          "token per sequence per period) or one-batch (one batch filling and draining the "
                          "pipeline, with its bubble).")(f)
    f = click.option("--micro-batches", default=None, type=int, expose_value=False, callback=_keep,
                     help="Micro-batches of a pipelined step (default: min(--pp, batch) in decode, one "
                          "sequence each in prefill).")(f)
    return click.option("--pp", default=1, show_default=True, type=int, expose_value=False, callback=_keep,
                        help="Planned pipeline parallelism: the layer stack cut into N stages on N GPUs "
                             "(x --tp); the step pipelined over micro-batches. See docs/parallel.md.")(f)


def parallel_options(f):
    """--tp/--ep: planned parallelism, one GPU's share of a single-GPU model (rooflinekit.analyses.parallel);
    --pp/--micro-batches: pipeline parallelism (`pipeline_options`)."""
    f = pipeline_options(f)
    f = click.option("--ep-imbalance", default=None, type=float, expose_value=False, callback=_keep, metavar="F",
                     help="Tokens the busiest expert-parallel rank receives over the mean [default: 1, the "
                          "uniform expectation]: its experts' rows and all-to-all bytes scale by F.")(f)
    f = click.option("--redundant-experts", default=None, type=click.IntRange(0), expose_value=False,
                     callback=_keep, metavar="R",
                     help="Extra copies of routed experts over the EP group (E + R slots, as DeepSeek's "
                          "redundant experts): memory per GPU, and an --ep that does not divide E.")(f)
    f = click.option("--ep", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
                     help="Planned expert parallelism: routed experts split over N GPUs (all-to-all "
                          "dispatch/combine; alone, the batch is per GPU).")(f)
    return click.option("--tp", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
                        help="Planned tensor parallelism: report one of N GPUs (heads and MLP columns "
                             "split, all-reduces added). See docs/parallel.md.")(f)


def command_memory_fraction() -> float:
    """The --memory-fraction the current command was given (the default outside a command)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(MEMORY_FRACTION, DEFAULT_FRACTION) if ctx is not None else DEFAULT_FRACTION


def make_workload(phase, batch, context, dtype, device, options, deployment: Deployment | None = None, *,
                  levers: dict | None = None) -> tuple[Workload, Deployment, dict]:
    """The request the options describe, checked: the Workload (what runs), the Deployment (how:
    `deployment`'s hardware and TP/EP, with the formats and memory fraction the command was given)
    and the parsed -O options. `levers` maps the format and multi-token flag names (weight_dtype,
    weight_group_size, kv_dtype, q_len, quantize_embeddings) to values; None: those the current
    command was given."""
    validate(phase, batch, context, dtype, device)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise WorkloadError("--device cuda: no CUDA device is available here (use --device meta or cpu)")
    kept = context_levers() if levers is None else dict(levers)
    if "q_len" in kept.get("_given", ()) and phase != "decode":
        raise WorkloadError(f"--q-len applies to decode only: a prefill step's new tokens are its context "
                            f"(drop --q-len {kept['q_len']}, or use --phase decode)")
    opts = parse_options(options)
    q_len = kept.get("q_len")
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(opts.items())),
                        decode_q_len=1 if q_len is None else q_len)
    formats = {k: v for k, v in kept.items() if k in DEPLOYMENT_FLAGS and v is not None}
    deployment = replace(deployment or Deployment(hardware="auto"), memory_fraction=command_memory_fraction(),
                         **formats)
    validate_levers(workload, deployment)
    return workload, deployment, opts
