"""The deployment settings, each declared once: name, type, default, rule, help and words.

`SETTINGS` is the one table the rest is derived from: the fields of `rooflinekit.Deployment`
(and so its JSON keys and the report schema), the command line's options (`--kv-dtype`, one
channel from click to the Deployment: rooflinekit.cli.request_options), the Python API's keyword-only
arguments and their checks (rooflinekit.api), and `Deployment.words`. Adding a setting is one
entry here plus the transform that reads it (docs/architecture.md, "A deployment setting is declared once").

Torch-free and import-free below rooflinekit.core.errors: the table is read before anything is
built from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rooflinekit.core.errors import WorkloadError

#: --weight-dtype: bits per stored weight element.
WEIGHT_BITS = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
#: --kv-dtype: bytes per cached element.
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
#: Group size of int8/int4 weight-only formats when --weight-group-size is not given.
DEFAULT_GROUP_SIZE = 128
#: The largest --weight-group-size: 65,536 elements per scale, past the rows of any model's layers.
MAX_GROUP_SIZE = 1 << 16
#: The share of a GPU's memory, after the hardware entry's reserve, a workload may fill (the rest:
#: the allocator's fragments).
DEFAULT_FRACTION = 0.9
#: The smallest --memory-fraction: 1% of a GPU's memory (below it no model's weights fit anywhere).
MIN_FRACTION = 0.01
#: The kernels a step is priced with: the model's code as written, or what a serving engine runs.
KERNELS = ("as-written", "serving")
#: How the expected step overlaps communication with compute (Deployment.overlap).
OVERLAPS = ("none", "two-batch")
#: How a pipeline runs: a serving engine's micro-batches in flight, or one batch filling and draining it.
SCHEDULES = ("steady", "one-batch")
#: The largest parallel degree (--tp, --ep, --pp), micro-batch count and replica count.
MAX_PARALLEL = 1 << 16


# -- rules: what a value may be, one WorkloadError naming the setting as the caller spells it ------


@dataclass(frozen=True)
class Whole:
    """A whole number from `least` to `most` (None allowed when `optional`)."""

    least: int
    most: int
    optional: bool = False
    cli_type: Any = int

    def check(self, value: object, label: str) -> None:
        if value is None and self.optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or not self.least <= value <= self.most:
            raise WorkloadError(f"{label} must be a whole number from {self.least:,} to {self.most:,}, got {value!r}")


@dataclass(frozen=True)
class Number:
    """A finite number from `least` to `most`; `what` says what it is (in the message)."""

    least: float
    most: float
    what: str = ""
    cli_type: Any = float

    def check(self, value: object, label: str) -> None:
        ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
              and self.least <= value <= self.most)
        if not ok:
            raise WorkloadError(f"{label} must be a number from {self.least:g} to {self.most:g}"
                                f"{f' ({self.what})' if self.what else ''}, got {value!r}")


@dataclass(frozen=True)
class Choice:
    """One of `choices` (None allowed when `optional`)."""

    choices: tuple[str, ...]
    optional: bool = False
    cli_type: Any = str

    def check(self, value: object, label: str) -> None:
        if value is None and self.optional:
            return
        if value not in self.choices or not isinstance(value, str):
            raise WorkloadError(f"unknown {label} {value!r}: use one of {', '.join(self.choices)}")


@dataclass(frozen=True)
class Text:
    """A non-empty string (None allowed when `optional`); `what` says what it names."""

    what: str
    optional: bool = True
    cli_type: Any = str

    def check(self, value: object, label: str) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, str) or not value.strip():
            raise WorkloadError(f"{label} must be {self.what}, got {value!r}")


@dataclass(frozen=True)
class Flag:
    """True or False."""

    cli_type: Any = bool

    def check(self, value: object, label: str) -> None:
        if not isinstance(value, bool):
            raise WorkloadError(f"{label} must be True or False, got {value!r}")


Rule = Whole | Number | Choice | Text | Flag
#: Words of one setting: (its value, the whole deployment, the activation dtype key) -> the words
#: outputs show, or None when the value is the default (`Deployment.words` joins them in table order).
Words = Callable[[Any, Any, "str | None"], "str | None"]


@dataclass(frozen=True)
class Searched:
    """How `rooflinekit plan` searches a setting: the values it tries unless told (`--kv-dtypes`, the
    plural of the setting's flag; PlanOptions' field of the plural name), and how a configuration's
    label says the value (`label`, formatted with `v`)."""

    values: tuple[str, ...]
    label: str
    help: str


@dataclass(frozen=True)
class Setting:
    """One deployment setting. `cli` False: the Python API and JSON only (no command-line option);
    `short`: a one-letter flag beside `--name`; `cli_default`: the flag's default when it is not
    the field's (None: not given, the field's default applies); `title`: a line of its own on the HTML page."""

    name: str
    annotation: str
    default: Any
    rule: Rule
    words: Words | None = None
    help: str = ""
    cli: bool = True
    short: str | None = None
    metavar: str | None = None
    show_default: bool = False
    #: The label of its own line in the HTML report's deployment card (None: only in the words).
    title: str | None = None
    #: How `rooflinekit plan` searches the setting (None: the plan does not search it).
    searched: Searched | None = None
    #: The axis of advise's composed levers a change of the setting moves along (rooflinekit.analyses.combine).
    axis: str | None = None

    @property
    def flag(self) -> str:
        """The command-line flag: `--kv-dtype` for kv_dtype."""
        return "--" + self.name.replace("_", "-")

    @property
    def keyword(self) -> str:
        """The API keyword as messages name it: `kv_dtype=`."""
        return f"{self.name}="

    def check(self, value: object, label: str | None = None) -> None:
        """One WorkloadError if `value` breaks the rule, naming it as `label` (default: the flag)."""
        self.rule.check(value, label or self.flag)

    @property
    def plural(self) -> str:
        """The name of the values the plan searches: `kv_dtypes` for kv_dtype."""
        return self.name + "s"


# -- words ------------------------------------------------------------------------------------------


def _tp_words(tp, d, dtype_key):
    return f"TP {tp}" if tp > 1 else None


def _ep_words(ep, d, dtype_key):
    if ep == 1:
        return None
    redundant = f" (+{d.redundant_experts} redundant experts)" if d.redundant_experts else ""
    busiest = f" (busiest rank {d.ep_imbalance:g}x the mean tokens)" if d.ep_imbalance != 1.0 else ""
    return f"EP {ep}{redundant}{busiest}"


def _pp_words(pp, d, dtype_key):
    if pp == 1:
        return None
    micro = f" ({d.micro_batches} micro-batches)" if d.micro_batches is not None else ""
    schedule = f" ({d.pp_schedule})" if d.pp_schedule != "steady" else ""
    return f"PP {pp}{micro}{schedule}"


def _weight_words(fmt, d, dtype_key):
    if fmt is None or fmt == dtype_key:
        return None
    group = d.weight_group_size
    default_group = DEFAULT_GROUP_SIZE if fmt in ("int8", "int4") else None
    shown = f" (groups of {group})" if group != default_group and group is not None else ""
    return f"{fmt} weights{shown}"


def _format_words(suffix: str) -> Words:
    """`<format> <suffix>` when a format is given and differs from the activation dtype."""
    def words(fmt, d, dtype_key):
        return f"{fmt} {suffix}" if fmt is not None and fmt != dtype_key else None
    return words


def _said(template: str, unless: object = None) -> Words:
    """`template` formatted with the value as `v`, unless the value is `unless` or empty."""
    def words(value, d, dtype_key):
        return template.format(v=value) if value != unless and value else None
    return words


# -- the table ----------------------------------------------------------------------------------------

_EFFICIENCY_HELP = ("The expected time's achievable fractions per kernel class: published (the committed table "
                    "from public kernel measurements), the path of an efficiency file (`rooflinekit calibrate "
                    "--trace` writes one), or a name a plugin provides [default: the hardware entry's own, else "
                    "published].")
_ENGINE_HELP = ("The serving engine whose host time per step (scheduling, input preparation, sampling between "
                "steps) the expected step adds: none, vllm, vllm-v0, sglang, sglang-no-overlap, trtllm, each from "
                "a published measurement (rooflinekit/stages/engines.toml) [default: none, the kernels alone]. "
                "The bound never includes it.")
_OVERLAP_HELP = ("How the expected step overlaps collectives with kernels: none (after them), or two-batch (two "
                 "micro-batches, one's collectives under the other's kernels, as DeepSeek and SGLang's "
                 "--enable-two-batch-overlap run expert parallelism; each kernel at half the tokens reads its "
                 "weights twice) [default: none]. The bound assumes perfect overlap either way.")

SETTINGS: tuple[Setting, ...] = (
    Setting("hardware", "str | None", None, Text("a hardware entry's name, alias or .toml path"), short="-H",
            help="Hardware entry (name, alias or .toml path), or auto: the local GPU's entry (NVML); default "
                 "auto, else H800 SXM5."),
    Setting("tp", "int", 1, Whole(1, MAX_PARALLEL), _tp_words, show_default=True, axis="tp",
            help="Planned tensor parallelism: report one of N GPUs (heads and MLP columns split, all-reduces "
                 "added). See docs/parallel.md."),
    Setting("ep", "int", 1, Whole(1, MAX_PARALLEL), _ep_words, show_default=True, axis="tp",
            help="Planned expert parallelism: routed experts split over N GPUs (all-to-all dispatch/combine; "
                 "alone, the batch is per GPU)."),
    Setting("pp", "int", 1, Whole(1, MAX_PARALLEL), _pp_words, show_default=True,
            help="Planned pipeline parallelism: the layer stack cut into N stages on N GPUs (x --tp); the step "
                 "pipelined over micro-batches. See docs/parallel.md."),
    Setting("micro_batches", "int | None", None, Whole(1, MAX_PARALLEL, optional=True),
            help="Micro-batches of a pipelined step (default: min(--pp, batch) in decode, one sequence each in "
                 "prefill)."),
    Setting("pp_schedule", "str", "steady", Choice(SCHEDULES), show_default=True,
            help="How the pipeline runs: steady (a serving engine's micro-batches in flight, one token per "
                 "sequence per period) or one-batch (one batch filling and draining the pipeline, with its "
                 "bubble)."),
    Setting("replicas", "int", 1, Whole(1, MAX_PARALLEL), _said("{v} replicas", 1), cli=False,
            help="Copies of the model serving side by side (data parallelism of whole instances)."),
    Setting("redundant_experts", "int", 0, Whole(0, MAX_PARALLEL * 64), metavar="R",
            help="Extra copies of routed experts over the EP group (E + R slots, as DeepSeek's redundant "
                 "experts): memory per GPU, and an --ep that does not divide E."),
    Setting("ep_imbalance", "float", 1.0, Number(1.0, 64.0, "1: uniform"), metavar="F",
            help="Tokens the busiest expert-parallel rank receives over the mean [default: 1, the uniform "
                 "expectation]: its experts' rows and all-to-all bytes scale by F."),
    Setting("weight_dtype", "str | None", None, Choice(tuple(WEIGHT_BITS), optional=True), _weight_words,
            title="weight format", axis="weights",
            help=f"Stored format of linear and expert weights: {', '.join(WEIGHT_BITS)} (default: the --dtype). "
                 "Read at that size plus scales; embedding and lm_head stay bf16. See docs/accounting.md."),
    Setting("weight_group_size", "int | None", None, Whole(1, MAX_GROUP_SIZE, optional=True), axis="weights",
            help="Weight elements per scale (int8/int4 default 128, fp16 scales; fp8 default one fp32 scale "
                 "per output channel)."),
    Setting("kv_dtype", "str | None", None, Choice(tuple(KV_BYTES), optional=True), _format_words("KV"),
            title="KV cache format", help=f"KV cache format: {', '.join(KV_BYTES)} (default: the --dtype).",
            searched=Searched(("bf16", "fp8"), "{v} KV", "KV cache formats to try."), axis="kv"),
    Setting("quantize_embeddings", "bool", False, Flag(), _said("embeddings quantized", False),
            help="Also quantize the token embedding and the output head (lm_head)."),
    Setting("kernels", "str", "as-written", Choice(KERNELS), _said("{v} kernels", "as-written"),
            help="as-written: the model's code as it runs; serving: what a serving engine runs "
                 "(FlashAttention/FlashMLA/paged attention, merged and fused kernels). Default as-written "
                 "(advise: serving). See docs/accounting.md, Serving view."),
    Setting("memory_fraction", "float", DEFAULT_FRACTION,
            Number(MIN_FRACTION, 1.0, "the share of GPU memory usable"),
            _said("memory fraction {v:g}", DEFAULT_FRACTION), show_default=True,
            help="Share of each GPU's memory, after the hardware entry's reserve (CUDA context, communication "
                 "buffers), usable for weights, KV cache and activations (the rest: the allocator's "
                 "fragments); memory.fits and max_batch use it."),
    Setting("kv_block_size", "int", 16, Whole(1, 1 << 20), cli=False,
            help="Tokens per block of the serving view's paged KV cache (vLLM's default block size)."),
    Setting("efficiency", "str | None", None,
            Text("published, an efficiency file's path or a plugin's source name"),
            _said("efficiency {v}"), metavar="SOURCE", help=_EFFICIENCY_HELP),
    Setting("engine", "str | None", None, Text("an engine's name (rooflinekit/stages/engines.toml)"),
            _said("engine {v}", "none"), metavar="NAME", help=_ENGINE_HELP),
    Setting("overlap", "str", "none", Choice(OVERLAPS), _said("{v} overlap", "none"), help=_OVERLAP_HELP),
)


# -- what the plan searches -------------------------------------------------------------------------


def searched_settings() -> tuple[Setting, ...]:
    """The settings `rooflinekit plan` searches (their `searched`), in table order."""
    return tuple(s for s in SETTINGS if s.searched)


def searched_of(obj: object) -> dict[str, Any]:
    """The searched settings' values of a deployment or a plan's configuration, by name."""
    return {s.name: getattr(obj, s.name) for s in searched_settings()}


def with_searched(after: str, *, tried: bool = False) -> Callable[[type], type]:
    """A class decorator, put below `@dataclass`, adding after field `after` one field per searched
    setting: its value (`str`, a plan configuration's) or, with `tried`, the values the plan tries
    (`plural`, default the declared ones: the plan's options)."""
    def add(cls: type) -> type:
        annotations: dict[str, Any] = {}
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            annotations[name] = annotation
            if name != after:
                continue
            for s in searched_settings():
                if tried:
                    annotations[s.plural] = "tuple[str, ...]"
                    setattr(cls, s.plural, s.searched.values)
                else:
                    annotations[s.name] = "str"
        if after not in annotations:
            raise TypeError(f"{cls.__name__} has no field {after!r} to add the searched settings after")
        cls.__annotations__ = annotations
        return cls
    return add
