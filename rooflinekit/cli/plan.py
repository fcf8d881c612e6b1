"""`rooflinekit plan MODEL`: the best deployment for a GPU budget and latency targets."""

from __future__ import annotations

import math

import click

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.cli.base import CONTEXT_SETTINGS, Command
from rooflinekit.cli.options import (
    check_destination,
    debug_option,
    emit,
    model_inputs,
    output_format,
)
from rooflinekit.cli.request_options import (
    kept_settings,
    parse_choices,
    parse_count,
    searched_options,
    setting_help,
)
from rooflinekit.core import compat
from rooflinekit.core.codec import dumps
from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.files import check_not_input
from rooflinekit.core.plan import TARGETS_AT, WEIGHT_FORMATS, Targets, parse_layout
from rooflinekit.core.request import KERNELS, OVERLAPS
from rooflinekit.core.settings import searched_settings
from rooflinekit.core.stdio import stdout_to_stderr
from rooflinekit.outputs.engine_flags import engine_commands
from rooflinekit.outputs.plan_plot import plot_plan
from rooflinekit.outputs.plan_text import commands_lines, plan_to_text
from rooflinekit.outputs.plan_view import plan_to_csv, plan_to_html
from rooflinekit.outputs.plot import check_target
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.request_checks import parse_options

PLAN_HELP = """Search the deployments of MODEL on --gpus GPUs for the best that meets the targets.

\b
  rooflinekit plan examples/configs/llama-3.1-70b.json --hardware H800 --gpus 8 \\
      --isl 4096 --osl 1024 --tpot 50ms

Searches tensor, expert (with data-parallel attention: DEPn) and pipeline parallel degrees and
replicas within the budget, weight formats (fp8 is W8A8) and KV cache formats, the batch per
instance up to what fits, the chunked-prefill budget, speculative decoding (with --mtp or --draft)
and aggregated against disaggregated prefill/decode pools. Every candidate is priced from step
models fitted exactly on a few captures of the model's own code, each step equal to `profile`'s:
time to first token (TTFT, p90 with prompts queueing at the arrival rate), time per output token
(TPOT, the mean over the generation as the context grows from ISL to ISL+OSL), end-to-end latency,
tokens/s per GPU and per user, memory per GPU. Prints the best configuration that meets the
targets (highest tokens/s per GPU) with the vLLM, SGLang and TensorRT-LLM commands that start it,
the Pareto front of tokens/s per GPU against tokens/s per user, and why the others were rejected.
With no configuration meeting the targets: exit status 0, one line on stderr naming the closest,
and `best` null in the JSON. Details: docs/plan.md.
"""

PLAN_FORMATS = ("table", "json", "csv", "html")


def _seconds(text: str, option: str) -> float:
    """'50ms', '2s', '800us' -> seconds; a number without its unit is refused (is 40 seconds or
    milliseconds?)."""
    raw = text.strip().lower()
    scale = None
    for suffix, factor in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if raw.endswith(suffix):
            raw, scale = raw[: -len(suffix)], factor
            break
    try:
        value = float(raw)
    except ValueError:
        raise WorkloadError(f"{option} {text!r}: give a time with its unit, such as 50ms, 2s or 800us") from None
    if scale is None:
        raise WorkloadError(f"{option} {text!r}: give the unit: {text.strip()}ms or {text.strip()}s")
    value *= scale
    if not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"{option} {text!r}: give a time above zero")
    return value


def _rate(text: str) -> float:
    """--rate: requests per second, a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise WorkloadError(f"--rate {text!r}: give requests per second, e.g. 12.5") from None
    if not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"--rate {text!r}: give requests per second above zero")
    return value


def _tokens(text: str, option: str) -> int:
    """'4096', '4k' (x 1024), '1M' (x 1024^2) -> tokens (rooflinekit.cli.request_options.parse_count)."""
    value = parse_count(text, option)
    if value < 1:
        raise WorkloadError(f"{option} {text!r}: give at least 1 token")
    return value



def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise WorkloadError(f"{option} {text!r}: give whole numbers, comma-separated") from None
    if not values or any(v < 1 for v in values):
        raise WorkloadError(f"{option} {text!r}: give whole numbers >= 1, comma-separated")
    return values


@click.command("plan", cls=Command, help=PLAN_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("model", metavar="MODEL")
@click.option("--hardware", "-H", default="H800", show_default=True, help="Hardware entry of every GPU.")
@click.option("--gpus", type=click.IntRange(1, 4096), default=8, show_default=True, help="GPUs in the budget.")
@click.option("--isl", default="4096", show_default=True, help="Input (prompt) tokens per request (4k = 4096).")
@click.option("--osl", default="1024", show_default=True, help="Output tokens per request.")
@click.option("--ttft", default=None, metavar="TIME", help="Target time to first token (e.g. 2s, 800ms).")
@click.option("--tpot", default=None, metavar="TIME", help="Target time per output token (e.g. 50ms).")
@click.option("--targets-at", type=click.Choice(TARGETS_AT), default="expected", show_default=True,
              help="Meet --ttft/--tpot with the expected figures, or with the upper end of their p10-p90 range "
                   "(from the validation's residuals, docs/accounting.md).")
@click.option("--prefix-hit", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Share of each prompt found in the prefix cache (not prefilled).")
@click.option("--kernels", type=click.Choice(KERNELS), default="serving", show_default=True,
              help="The kernels view the steps are priced in.")
@click.option("--efficiency", default=None, metavar="SOURCE", help=setting_help("efficiency"))
@click.option("--engine", default=None, metavar="NAME", help=setting_help("engine"))
@click.option("--overlap", type=click.Choice(OVERLAPS), default="none", show_default=True,
              help=setting_help("overlap") + " With two-batch the plan searches disaggregated pools without pipeline "
                   "stages, as engines that overlap micro-batches serve [--mode disaggregated, --pp 1].")
@click.option("--weight-dtypes", default="bf16,fp8", show_default=True,
              help="Weight formats to try: bf16, fp16, fp8 (W8A8: fp8 activations at the fp8 peak), "
                   "fp8-weight-only, w8a16 (int8 weight-only), w4a16 (int4 weight-only).")
@searched_options
@click.option("--tp", "tps", default=None, help="TP degrees to try [default: powers of two up to --gpus within a node].")
@click.option("--ep", "eps", default=None,
              help="EP degrees to try with data-parallel attention (DEPn: TP 1, experts over n GPUs) for MoE "
                   "models [default: powers of two up to --gpus and, past a node, --gpus less a power-of-two "
                   "pool of whole nodes]; an EP that does not divide the experts holds redundant copies.")
@click.option("--prefill", "prefill_layouts", default=None, metavar="LAYOUTS",
              help="Fix the layouts a disaggregated prefill pool may take, comma-separated: TP8, TP8EP8, "
                   "DEP32 (TP 1, experts over 32 GPUs).")
@click.option("--decode", "decode_layouts", default=None, metavar="LAYOUTS",
              help="Fix the layouts a decode instance (aggregated, or a disaggregated decode pool) may take, "
                   "as --prefill.")
@click.option("--ep-imbalance", type=click.FloatRange(1, 64), default=1.0, show_default=True, metavar="F",
              help="Tokens the busiest expert-parallel rank receives over the mean (1: uniform routing's "
                   "expectation): its experts' rows and all-to-all bytes scale by F.")
@click.option("--pp", "pps", default="1,2,4", show_default=True, help="Pipeline stages to try.")
@click.option("--mode", "modes", default="aggregated,disaggregated", show_default=True,
              help="Serving modes to try: aggregated, disaggregated.")
@click.option("--max-batch", type=click.IntRange(1, 65536), default=1024, show_default=True,
              help="Largest batch per instance tried (powers of two up to it, and the largest that fits).")
@click.option("--mtp", type=click.IntRange(1, 16), default=None, metavar="N",
              help="Price speculative decoding with N multi-token-prediction heads (each one decoder layer and "
                   "the output head) beside plain decoding.")
@click.option("--draft", "draft_path", default=None, metavar="MODEL",
              help="Price speculative decoding with this draft model (file or config), one drafted token per cycle.")
@click.option("--accept", type=float, default=None, metavar="RATE",
              help="Per-token acceptance rate of drafted tokens, in (0, 1] [default: 0.7].")
@click.option("-O", "options", multiple=True, metavar="KEY=VALUE", help="A model option (as profile's -O).")
@click.option("--dtype", default="bf16", show_default=True, help="Activation dtype.")
@click.option("--format", "-f", "fmt", type=click.Choice(PLAN_FORMATS), default=None,
              help="Output format [default: table, or what -o's extension names].")
@click.option("--output", "-o", default=None, help="Write the plan to this file (atomically).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png", help="Also draw the Pareto chart.")
@click.option("--no-check", is_flag=True, help="Skip the check of the best step model against a full profile.")
@click.option("--rate", default=None, metavar="REQ/S",
              help="Price every configuration at this arrival rate (requests/s over the budget) instead of the "
                   "highest each sustains with its TTFT (p90) within the target.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr (warnings and errors still).")
@click.option("--commands", "commands_of", type=click.IntRange(0), default=None, metavar="INDEX",
              help="Print only the serving engines' command lines of configuration INDEX (the JSON's configs "
                   "index; the best's are in every output).")
@debug_option
def plan_cmd(model, hardware, gpus, isl, osl, ttft, tpot, targets_at, prefix_hit, kernels, efficiency, engine, overlap,
             weight_dtypes, tps, eps,
             prefill_layouts, decode_layouts, ep_imbalance, pps, modes, max_batch, mtp, draft_path, accept, options, dtype, fmt, output, plot_path, no_check, rate,
             quiet, commands_of, debug):
    targets = Targets(_tokens(isl, "--isl"), _tokens(osl, "--osl"), _seconds(ttft, "--ttft") if ttft else None,
                      _seconds(tpot, "--tpot") if tpot else None, prefix_hit, targets_at)
    fmt = output_format(fmt, output)
    if overlap == "two-batch":  # its defaults: disaggregated pools, no pipeline stages
        ctx = click.get_current_context()
        given = {name for name in ("modes", "pps")
                 if ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)}
        modes = modes if "modes" in given else "disaggregated"
        pps = pps if "pps" in given else "1"
    search = dict(gpus=gpus, hardware=hardware, kernels=kernels, efficiency=efficiency, engine=engine, overlap=overlap,
                  weight_dtypes=parse_choices(weight_dtypes, tuple(WEIGHT_FORMATS), "--weight-dtypes"),
                  tps=_ints(tps, "--tp") if tps else None, pps=_ints(pps, "--pp"),
                  eps=_ints(eps, "--ep") if eps else None, ep_imbalance=ep_imbalance,
                  prefill_layouts=_layouts(prefill_layouts, "--prefill", gpus) if prefill_layouts else None,
                  decode_layouts=_layouts(decode_layouts, "--decode", gpus) if decode_layouts else None,
                  modes=parse_choices(modes, ("aggregated", "disaggregated"), "--mode"), max_batch=max_batch,
                  mtp=mtp or 0, check=not no_check, rate=_rate(rate) if rate is not None else None)
    kept = kept_settings()  # the searched settings' values to try (--kv-dtypes), from their declarations
    search.update({s.plural: kept[s.plural] for s in searched_settings() if s.plural in kept})
    if accept is not None:
        if not mtp and not draft_path:
            raise WorkloadError("--accept is the acceptance rate of drafted tokens: add --mtp N or --draft MODEL")
        if not 0 < accept <= 1:
            raise WorkloadError(f"--accept {accept}: give a rate in (0, 1]")
        search["accept"] = accept
    _check_budget(gpus, search["tps"], search["pps"])
    inputs = model_inputs(model, hardware) + ([("the --draft model", draft_path)] if draft_path else [])
    check_destination(output, inputs)
    if plot_path:
        check_not_input(plot_path, inputs + [("the --output file", output)], "--plot")
        check_target(plot_path)
    compat.defer_dynamo_import()
    result = _run(model, draft_path, targets, search, options, dtype, quiet)
    for w in result.warnings:
        click.echo(f"rooflinekit: warning: {w}", err=True)
    if commands_of is not None:
        if commands_of >= len(result.configs):
            raise WorkloadError(f"--commands {commands_of}: the plan priced configurations 0 to "
                                f"{len(result.configs) - 1}")
        chosen = result.configs[commands_of]
        text = "\n".join([f"# {commands_of}: {chosen.label()}",
                          *commands_lines(engine_commands(chosen, "MODEL", result.model.get("routed_experts")),
                                         indent="")[1:]]) + "\n"
        emit(text, output)
        return
    if result.best is None:
        click.echo(_nothing_meets(result), err=True)
    emit(_render(result, fmt), output)
    if plot_path:
        plot_plan(result, plot_path)
        if not quiet:
            click.echo(f"wrote {plot_path}", err=True)


def _layouts(text: str, option: str, gpus: int) -> tuple[tuple[int, int], ...]:
    """The (TP, EP) layouts of --prefill/--decode, each within the budget."""
    out = []
    for part in text.split(","):
        try:
            layout = parse_layout(part)
        except ValueError as exc:
            raise WorkloadError(f"{option}: {exc}") from None
        if max(layout) > gpus:
            raise WorkloadError(f"{option} {part.strip()} needs {max(layout)} GPUs, more than the {gpus} of --gpus: "
                                f"give --gpus {max(layout)} or more")
        out.append(layout)
    return tuple(dict.fromkeys(out))


def _check_budget(gpus: int, tps: tuple[int, ...] | None, pps: tuple[int, ...]) -> None:
    """Refuse degrees no configuration within --gpus can have."""
    over = [tp for tp in tps or () if tp > gpus]
    if over:
        raise WorkloadError(f"--tp {','.join(map(str, over))} needs more than the {gpus} GPUs of --gpus: give --gpus "
                            f"{max(over)} or more, or smaller TP degrees")
    smallest = min(tps or (1,))
    if all(pp * smallest > gpus for pp in pps):
        raise WorkloadError(f"--pp {','.join(map(str, pps))} x TP {smallest} needs more than the {gpus} GPUs of --gpus: "
                            f"give --gpus {min(pps) * smallest} or more, or fewer stages")


def _run(model, draft_path, targets, search, options, dtype, quiet=False):
    opts = parse_options(options)

    def progress(what: str) -> None:
        if not quiet:
            click.echo(f"rooflinekit: plan: {what}", err=True)

    with stdout_to_stderr():
        draft = load_source(draft_path, {}) if draft_path else None
        return run_plan(load_source(model, opts), targets, PlanOptions(**search, draft=draft), dtype=dtype,
                        model_options=tuple(sorted(opts.items())), progress=progress)


def _nothing_meets(result) -> str:
    if result.closest is None:
        if any(c.fits for c in result.configs):
            return "rooflinekit: plan: no configuration that fits in memory meets the targets"
        return "rooflinekit: plan: no configuration fits in memory (the warning above says what would)"
    c = result.configs[result.closest]
    return f"rooflinekit: plan: no configuration meets the targets; closest: {c.label()}: {result.closest_miss}"


def _render(result, fmt: str) -> str:
    if fmt == "json":
        return dumps(result.to_dict())
    if fmt == "csv":
        return plan_to_csv(result)
    if fmt == "html":
        return plan_to_html(result)
    return plan_to_text(result)
