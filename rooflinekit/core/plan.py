"""The planner's request and result (`rooflinekit plan`), torch-free: the targets, one priced
configuration, and the search's answer with its Pareto front (its views for people rendered by
rooflinekit.outputs, registered in rooflinekit.core.views)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

from rooflinekit.core.request import Deployment
from rooflinekit.core.settings import searched_settings, with_searched
from rooflinekit.core.views import HasViews, render_view

#: The JSON schema version of a plan result (rooflinekit/schema/plan-1.1.schema.json).
PLAN_SCHEMA_VERSION = "1.1"


#: Where a plan's figures meet the targets (Targets.at).
TARGETS_AT = ("expected", "p90")


@dataclass(frozen=True)
class Targets:
    """What a request asks of the deployment: its input and output lengths, the share of the
    prompt found in a prefix cache, and latency targets (None: no target)."""

    isl: int
    osl: int
    ttft_s: float | None = None
    tpot_s: float | None = None
    prefix_hit: float = 0.0
    #: Where the estimate must meet the targets: "expected" (the expected time itself) or "p90"
    #: (the upper end of its p10-p90 range, rooflinekit.stages.spread).
    at: str = "expected"

    @property
    def new_prompt_tokens(self) -> int:
        """Prompt tokens a request's prefill computes (those not found in the prefix cache)."""
        return max(1, round(self.isl * (1.0 - self.prefix_hit)))


@dataclass(frozen=True)
class Pool:
    """One pool of identical instances: its parallel degrees, instances, batch per instance."""

    tp: int
    ep: int
    pp: int
    instances: int
    batch: int
    step_s: float
    redundant_experts: int = 0  # extra expert copies over the instance's EP group

    @property
    def gpus(self) -> int:
        return max(self.tp, self.ep) * self.pp * self.instances


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding as priced: the draft, its tokens per verify step, the acceptance rate
    and the expected tokens accepted per verify step."""

    draft: str
    k: int
    accept: float
    tokens_per_step: float
    draft_step_s: float
    verify_step_s: float


#: Weight formats the planner searches, as serving engines name them: name -> (weight dtype,
#: activation dtype; None: the request's --dtype). "fp8" is W8A8: fp8 weights and activations,
#: the products at the fp8 peak (what vLLM, SGLang and TensorRT-LLM run on Hopper).
WEIGHT_FORMATS: dict[str, tuple[str, str | None]] = {
    "bf16": ("bf16", None),
    "fp16": ("fp16", None),
    "fp8": ("fp8", "fp8"),
    "fp8-weight-only": ("fp8", None),
    "w8a16": ("int8", None),
    "w4a16": ("int4", None),
    "int8": ("int8", None),
    "int4": ("int4", None),
}
#: Formats from the cheapest to hold and run: a tie in tokens/s per GPU goes to the earlier.
FORMAT_ORDER = ("w4a16", "int4", "fp8", "w8a16", "int8", "fp8-weight-only", "fp16", "bf16")
FORMAT_WORDS = {"fp8": "fp8 (W8A8)", "w8a16": "W8A16 int8", "w4a16": "W4A16 int4",
                "fp8-weight-only": "fp8 weight-only"}


@dataclass(frozen=True)
@with_searched(after="weight_dtype")  # then a field per setting the plan searches: the KV cache format
class PlanConfig:
    """One priced configuration (field meanings: docs/plan.md)."""

    mode: str  # "aggregated" | "disaggregated"
    tp: int
    ep: int
    pp: int
    replicas: int
    weight_dtype: str
    kernels: str
    batch: int
    gpus: int
    speculative: Speculative | None = None
    chunk: int | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tokens_per_s_per_user: float | None = None
    ttft_bound_s: float | None = None
    tpot_bound_s: float | None = None
    #: The p10-p90 range of ttft_s and tpot_s from the validation's residuals of their step class
    #: (rooflinekit.stages.spread; `Targets.at` "p90" meets the targets at the upper ends)
    ttft_p10_s: float | None = None
    ttft_p90_s: float | None = None
    tpot_p10_s: float | None = None
    tpot_p90_s: float | None = None
    #: Requests per second the configuration is priced at (over its GPUs), and the p90 wait for a
    #: prefill at that rate (part of ttft_s; rooflinekit.stages.queueing)
    rate_per_s: float | None = None
    ttft_wait_s: float | None = None
    #: The decode step of one instance at `step_context` (batch `batch`, no prompt tokens): what
    #: `profile --phase decode` of this deployment gives (expected, bound)
    step_context: int | None = None
    step_s: float | None = None
    step_bound_s: float | None = None
    #: The serving engine's host time in each decode step at `batch` (--engine; part of tpot_s,
    #: step_s and every step of ttft_s, never of the bounds); None without --engine
    engine_host_s: float | None = None
    #: How the steps overlap collectives with kernels (--overlap; None: not at all)
    overlap: str | None = None
    memory_per_gpu_bytes: float | None = None
    usable_bytes: float | None = None
    fits: bool = True
    meets_slo: bool = False
    binding: str | None = None
    reject_reason: str | None = None
    prefill: Pool | None = None
    decode: Pool | None = None
    pool_ratio: str | None = None
    dtype: str = "bf16"  # activations (fp8 with the W8A8 format)
    #: Extra expert copies over the (decode) instance's EP group, and the busiest EP rank's
    #: tokens over the mean it is priced at (Deployment.redundant_experts, ep_imbalance)
    redundant_experts: int = 0
    ep_imbalance: float = 1.0
    gpus_idle: int = 0  # GPUs of the budget the configuration leaves unused

    def label(self) -> str:
        """The configuration in words: 'agg TP 8, fp8 W, fp8 KV, B 64, chunk 2048, MTP 1'."""
        if self.mode == "disaggregated" and self.prefill and self.decode:
            head = (f"disagg {self.pool_ratio}: prefill {_degrees(self.prefill.tp, self.prefill.ep)} "
                    f"x{self.prefill.instances}, decode {_degrees(self.decode.tp, self.decode.ep)}"
                    f"{f' PP {self.decode.pp}' if self.decode.pp > 1 else ''} x{self.decode.instances}")
        else:
            head = (f"agg {_degrees(self.tp, self.ep)}"
                    f"{f' PP {self.pp}' if self.pp > 1 else ''} x{self.replicas}")
        tail = f" (+{self.redundant_experts} redundant experts)" if self.redundant_experts else ""
        formats = [f"{FORMAT_WORDS.get(self.weight_dtype, self.weight_dtype)} W",
                   *(s.searched.label.format(v=getattr(self, s.name)) for s in searched_settings())]
        tail += f", {', '.join(formats)}, B {self.batch}"
        if self.chunk:
            tail += f", chunk {self.chunk}"
        if self.speculative:
            tail += f", {self.speculative.draft} k={self.speculative.k}"
        return head + tail


#: PlanConfig fields named as deployment settings that the plan sets itself: its pipeline stages,
#: replicas and overlap, and its weight format (a plan format such as w4a16, not the stored dtype).
_THE_PLANS_OWN = ("pp", "replicas", "overlap", "weight_dtype")


def instance_settings(deployment: Deployment) -> dict[str, object]:
    """The PlanConfig fields an instance's deployment gives, by name: every field the two share
    but the plan's own choices."""
    shared = {f.name for f in fields(PlanConfig)} & {f.name for f in fields(Deployment)}
    return {name: getattr(deployment, name) for name in sorted(shared) if name not in _THE_PLANS_OWN}


def parse_layout(text: str) -> tuple[int, int]:
    """(TP, EP) of an instance layout as the labels write it: 'TP8', 'TP8EP8', 'DEP32' or
    'DP32EP32' or 'EP32' (TP 1, data-parallel attention, experts over 32 GPUs); spaces and case
    ignored. ValueError naming the forms otherwise."""
    t = "".join(text.split()).upper()
    m = re.fullmatch(r"TP(\d+)(?:EP(\d+))?|(?:DEP|EP)(\d+)|DP(\d+)EP(\d+)", t)
    forms = "TP8, TP8EP8, DEP32 (= DP32EP32: TP 1, experts over 32 GPUs)"
    if not m:
        raise ValueError(f"{text!r} is not a layout: write {forms}")
    tp, ep, dep, dp, dep2 = (int(g) if g else None for g in m.groups())
    if dp is not None and dp != dep2:
        raise ValueError(f"{text!r}: data-parallel attention runs one replica per expert-parallel GPU (DP = EP)")
    layout = (tp, ep or 1) if tp is not None else (1, dep or dep2)
    if min(layout) < 1:
        raise ValueError(f"{text!r}: degrees are whole numbers >= 1")
    if layout[0] > 1 and layout[1] > 1 and layout[0] != layout[1]:
        raise ValueError(f"{text!r}: EP equals TP (experts over the TP group) or TP is 1 (DEP)")
    return layout


def _degrees(tp: int, ep: int) -> str:
    """'TP 8', 'TP 8 EP 8', or 'DP 32 EP 32' (data-parallel attention: TP 1, experts over EP)."""
    if tp == 1 and ep > 1:
        return f"DP {ep} EP {ep}"
    return f"TP {tp}" + (f" EP {ep}" if ep > 1 else "")


@dataclass(repr=False)
class PlanResult(HasViews):
    """The search's answer: every configuration priced, the Pareto front of tokens/s per GPU
    against tokens/s per user (indices into `configs`), the best that meets the targets."""

    model: dict
    hardware: str
    gpus: int
    targets: Targets
    candidates: int
    configs: list[PlanConfig]
    pareto: list[int]
    best: int | None
    closest: int | None = None
    closest_miss: str | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    captures: int = 0
    #: Design captures made from another layout's by asking its module models again (MoE experts
    #: under another TP/EP: rooflinekit.analyses.profile.recounted), not by a forward
    recounts: int = 0
    #: The best configuration as serving engines' command lines (rooflinekit.outputs.engine_flags),
    #: MODEL standing for the checkpoint
    commands: dict[str, list[str]] = field(default_factory=dict)
    schema_version: str = PLAN_SCHEMA_VERSION
    kind: str = "plan"

    @property
    def best_config(self) -> PlanConfig | None:
        return None if self.best is None else self.configs[self.best]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["best"] = None if self.best is None else d["configs"][self.best]
        d["best_index"] = self.best
        return d

    def to_dataframe(self, columns: Sequence[str] | None = None):
        """One row per priced configuration, with `label`, `pareto` and `best`, as a pandas DataFrame."""
        return render_view(self, "frame", columns)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (higher is better), sorted
    by the first coordinate descending: along the front the second rises as the first falls."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front: list[int] = []
    best_second = float("-inf")
    for i in order:
        if points[i][1] > best_second:
            front.append(i)
            best_second = points[i][1]
    return front
