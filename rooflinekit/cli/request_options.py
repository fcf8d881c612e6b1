"""The request options of the commands that run a model (`profile`, `sweep`, `advise`): the
workload's (phase, batch, context, dtype, device, -O options, --q-len) and every deployment setting
of rooflinekit.core.settings, and the checked request they describe (rooflinekit.core.request: the
Workload and its Deployment).

One channel from click to the Deployment: each setting's option (`setting_options`, built from its
declaration) reaches no command function as an argument; its callback keeps the value in the click
context, and `make_workload` builds the Deployment from what was kept.

Apart from rooflinekit.cli.options because a Workload needs torch: commands that run no model
(`hardware`, `plot`, `compare`, `plugins`) import only that module and start without torch.
"""

from __future__ import annotations

import click
import torch

from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.request import Deployment, Workload, deployment_settings
from rooflinekit.core.settings import Choice, Flag, Setting, searched_settings
from rooflinekit.stages.request_checks import parse_options, validate, validate_request

#: Where the click context keeps the settings and --q-len the command was given (`make_workload`
#: reads them).
KEPT = "rooflinekit.request_settings"


def setting_help(name: str) -> str:
    """The help of setting `name` (plan's options for the same setting say the same)."""
    return next(s.help for s in deployment_settings() if s.name == name)


def _keep(ctx: click.Context, param: click.Parameter, value):
    """Callback of a setting's option: its value (and whether it was given) kept in the context."""
    kept = ctx.meta.setdefault(KEPT, {})
    kept[param.name] = value
    source = ctx.get_parameter_source(param.name)
    if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
        kept.setdefault("_given", set()).add(param.name)
    return value


def setting_option(setting: Setting):
    """The click option of one setting, from its declaration: `--weight-dtype` for weight_dtype, its rule's
    type, its help; not given, the Deployment's default applies."""
    rule = setting.rule
    names = [setting.flag] + ([setting.short] if setting.short else [])
    extra: dict = {"is_flag": True} if isinstance(rule, Flag) else {"type": rule.cli_type}
    metavar = setting.metavar or (f"[{'|'.join(rule.choices)}]" if isinstance(rule, Choice) else None)
    return click.option(*names, setting.name, default=setting.default if setting.show_default else None,
                        show_default=setting.show_default, metavar=metavar, expose_value=False, callback=_keep,
                        help=setting.help, **extra)


def setting_options(f):
    """Every deployment setting's option that the command line takes, in the table's order."""
    for setting in reversed(deployment_settings()):
        if setting.cli:
            f = setting_option(setting)(f)
    return f


def _keep_tried(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    """Callback of a searched setting's plan option: the values to try, each checked by the
    setting's rule, kept in the context under the plural name."""
    setting = next(s for s in searched_settings() if s.plural == param.name)
    values = parse_choices(value, tuple(setting.rule.choices), "--" + param.name.replace("_", "-"))
    ctx.meta.setdefault(KEPT, {})[param.name] = values
    return values


def parse_choices(text: str, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    """'bf16,fp8' -> ('bf16', 'fp8'), each one of `allowed`; one WorkloadError naming `option` else."""
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values or any(v not in allowed for v in values):
        raise WorkloadError(f"{option} {text!r}: choose from {', '.join(allowed)} (comma-separated)")
    return values


def searched_options(f):
    """`rooflinekit plan`'s option per searched setting (`--kv-dtypes bf16,fp8`), from its
    declaration; `kept_settings()` holds the values to try under the plural name."""
    for setting in reversed(searched_settings()):
        flag = "--" + setting.plural.replace("_", "-")
        f = click.option(flag, setting.plural, default=",".join(setting.searched.values), show_default=True,
                         expose_value=False, callback=_keep_tried, help=setting.searched.help)(f)
    return f


def q_len_option(f):
    """--q-len: new tokens per sequence in decode (the Workload's, kept like the settings)."""
    return click.option("--q-len", default=1, show_default=True, type=int, expose_value=False, callback=_keep,
                        help="Decode only: new tokens per sequence (speculative/MTP verify), causal among "
                             "themselves, each attending the context up to itself.")(f)


def kept_settings() -> dict:
    """The settings (and --q-len) the current command was given (empty outside a command)."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(KEPT, {})) if ctx is not None else {}


#: Suffixes of a batch or context as they are quoted: 32k = 32768 (x 1024), 1M = 1024 * 1024.
SUFFIXES = {"k": 1024, "K": 1024, "M": 1024 * 1024}


def parse_count(text, what: str = "value") -> int:
    """'32768', '32k', '32K' (x 1024), '1M' (x 1024^2) -> an integer; a WorkloadError naming `what`
    otherwise. The one parser of batch and context on every command (their ranges are checked where
    the workload is: stages.request_checks.validate)."""
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
    """The workload's options, then --q-len and every deployment setting's."""
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
        click.option("--option", "-O", "options", multiple=True, metavar="KEY=VALUE",
                     help="Passed to build_model()/make_inputs() when they accept KEY (repeatable)."),
    ]
    f = setting_options(q_len_option(f))  # applied first: listed after the options above
    for opt in reversed(opts):
        f = opt(f)
    return f


def make_workload(phase, batch, context, dtype, device, options, defaults: dict | None = None, *,
                  kept: dict | None = None) -> tuple[Workload, Deployment, dict]:
    """The request the options describe, checked: the Workload (what runs), the Deployment (how:
    every setting the command was given, else `defaults`' value (advise: kernels="serving"), else the
    setting's own; hardware "auto" when none is given) and the parsed -O options. `kept` maps
    setting names and q_len to values; None: those the current command was given."""
    validate(phase, batch, context, dtype, device)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise WorkloadError("--device cuda: no CUDA device is available here (use --device meta or cpu)")
    kept = kept_settings() if kept is None else dict(kept)
    if "q_len" in kept.get("_given", ()) and phase != "decode":
        raise WorkloadError(f"--q-len applies to decode only: a prefill step's new tokens are its context "
                            f"(drop --q-len {kept['q_len']}, or use --phase decode)")
    opts = parse_options(options)
    q_len = kept.get("q_len")
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(opts.items())),
                        decode_q_len=1 if q_len is None else q_len)
    given = {s.name: kept[s.name] for s in deployment_settings() if kept.get(s.name) is not None}
    deployment = Deployment(**{"hardware": "auto", **(defaults or {}), **given})
    validate_request(workload, deployment)
    return workload, deployment, opts
