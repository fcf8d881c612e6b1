"""The result of a sweep: one row per (batch, context) point, the critical batch per context, and
what was swept (`rooflinekit sweep`; JSON schema sweep-N.schema.json, docs/schema.md).

`SweepReport` is the one type of a sweep's outcome: `run_sweep` (rooflinekit.analyses.sweep)
returns it, whole and immutable, and its JSON reads back with `from_dict`. Its `header` is what the
sweep took from its first profile (`SweepHeader`). Its views for people (repr, text, HTML,
DataFrame) are rendered by rooflinekit.outputs, registered in rooflinekit.core.views.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rooflinekit.core import codec
from rooflinekit.core.report import OMIT_NONE, HardwareInfo, Memory, ModelInfo, Report, Tool
from rooflinekit.core.report_base import ReportBase
from rooflinekit.core.request import Deployment
from rooflinekit.core.version import SCHEMA_VERSION
from rooflinekit.core.views import render_view


@dataclass(frozen=True)
class AttentionFigures:
    """All recognised attention layers of one profile together (a sweep point's `attention`)."""

    layers: int
    recognised: int
    flops_model: float
    flops_executed: float
    bytes_min: float
    bytes_executed: float
    kv_bytes_min: float | None
    kv_bytes_executed: float
    cache_bytes_per_token: float | None
    cache_bytes_per_token_per_layer: float | None
    intensity_min: float | None
    intensity_executed: float | None


@dataclass(frozen=True)
class StepFigures:
    flops: float
    bytes: float
    intensity: float | None


@dataclass(frozen=True)
class SweepPoint:
    """One (batch, context) of a sweep: the whole step, its byte split, attention together."""

    batch: int
    context: int
    phase: str
    tokens: int
    flops: float
    flops_model: float
    bytes: float
    intensity: float | None
    attainable_flops: float
    bound: str
    time_bound_s: float
    predicted_step_s: float
    tokens_per_s: float | None
    mfu_bound: float
    mfu_bound_model: float
    weight_bytes: float
    kv_bytes_executed: float
    kv_bytes_min: float | None
    other_bytes: float
    uncounted_bytes: float | None
    weight_share: float | None
    kv_share: float | None
    other_share: float | None
    uncounted_bytes_share: float | None
    attention: AttentionFigures
    step_at_attention_minimum: StepFigures
    #: What one GPU holds at this point, and whether it fits (rooflinekit.stages.memory).
    memory: Memory | None = field(default=None, metadata=OMIT_NONE)
    fits: bool | None = field(default=None, metadata=OMIT_NONE)
    #: The profile's expected step and the tokens/s per GPU and per user at it (Totals).
    expected_step_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tokens_per_s_per_user: float | None = None


@dataclass(frozen=True)
class CriticalBatchInfo:
    """The critical batch at one context: where the whole step reaches the ridge, or its ceiling.

    Found by rooflinekit.analyses.sweep.critical_batch, which writes `summary` (one line, the
    answer with how it was found) from the other fields. `profiled` says whether the answer was
    checked with real profiles: the critical batch (and the batch below it), or for "never up to
    max_batch" the profile at max_batch; where it is False the answer is the fit's extrapolation.
    """

    context: int
    critical_batch: int | None
    saturation_intensity: float | None
    ridge: float
    method: str  # "affine fit" | "search" | "none" (not computed: see note)
    basis: str  # "executed" | "attention minimum" (the step with attention at its architecture minimum)
    summary: str
    #: Largest relative miss of the affine fit on the batches it was checked on (None: unchecked).
    residual: float | None = None
    #: The affine fit: flops0, flops_per_seq, bytes0, bytes_per_seq, batches, checked, critical.
    fit: dict[str, Any] | None = None
    #: Batch (as a string, as in JSON) -> the intensity profiled there, ascending by batch.
    checked: dict[str, float | None] = field(default_factory=dict)
    note: str = ""
    max_batch: int | None = None
    profiled: bool = False
    fallback: str = ""  # why a search replaced the fit
    #: The largest batch that fits in memory at this context (None: capacity unknown).
    max_batch_fits: int | None = None


@dataclass(frozen=True)
class SweepWorkload:
    phase: str
    dtype: str
    device: str
    batches: list[int]
    contexts: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    #: New tokens per sequence in decode (multi-token decode); None in prefill (the context).
    q_len: int | None = None


@dataclass(frozen=True)
class SweepHeader:
    """What a sweep takes from its first profile: the schema, the tool, the model and the hardware
    entry, as its JSON holds them."""

    schema_version: str
    tool: Tool
    model: ModelInfo
    hardware: HardwareInfo

    @classmethod
    def of(cls, report: Report) -> SweepHeader:
        """The header of a sweep whose first profile is `report` (its fields read as from JSON)."""
        return codec.decode(cls, {f: codec.encode(getattr(report, f)) for f in HEADER_FIELDS})


#: The fields of a profile that make a sweep's header.
HEADER_FIELDS = ("schema_version", "tool", "model", "hardware")


@dataclass(frozen=True, repr=False)
class SweepReport(ReportBase):
    """A model profiled over a grid of batch x context, with the critical batch per context."""

    workload: SweepWorkload
    hardware: HardwareInfo
    deployment: Deployment = field(default_factory=Deployment)
    model: ModelInfo = field(default_factory=ModelInfo)
    points: list[SweepPoint] = field(default_factory=list)
    critical_batch: list[CriticalBatchInfo] = field(default_factory=list)
    critical_batch_attention_minimum: list[CriticalBatchInfo] = field(default_factory=list)
    interrupted: bool = False
    profiles: int = 0  # captures run (full, or a fit's design captures with repeated layers skipped)
    evaluated: int = 0  # points and critical-batch probes evaluated from fitted counts, not captured
    wall_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    schema_version: str = SCHEMA_VERSION
    kind: str = "sweep"
    tool: Tool = field(default_factory=Tool)

    @property
    def header(self) -> SweepHeader:
        """The schema, tool, model and hardware of this sweep."""
        return SweepHeader(self.schema_version, self.tool, self.model, self.hardware)

    def report(self) -> SweepReport:
        """This sweep itself. Deprecated: `run_sweep` returns the SweepReport; kept for one release
        for callers of the former mutable result's `report()`."""
        return self

    def to_dataframe(self, section: str = "points", columns: Sequence[str] | None = None):
        """One row per point (`points`) or per context (`critical_batch`), as a pandas DataFrame."""
        return render_view(self, "frame", section, columns)
