"""The result of `rooflinekit advise`: each lever priced against the baseline step, the levers
skipped and why, and the combinations searched (JSON schema advise-N.schema.json, docs/schema.md).
Its views for people are rendered by rooflinekit.outputs, registered in rooflinekit.core.views.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rooflinekit.core.report import OMIT_NONE, HardwareInfo, Memory, ModelInfo, Tool, WorkloadInfo
from rooflinekit.core.report_base import ReportBase
from rooflinekit.core.request import Deployment
from rooflinekit.core.version import SCHEMA_VERSION
from rooflinekit.core.views import render_view


@dataclass(frozen=True)
class LeverResult:
    """One lever (or the baseline) priced by re-profiling or re-placing the step (`rooflinekit advise`).

    `speedup` is tokens/s over the baseline's (throughput); `step_speedup` the baseline's step time
    over this one's. `binding` is what limits the step afterwards: "compute", "memory" (HBM
    bandwidth) or "communication" (the largest of the three time bounds), or "capacity" where the
    step does not fit in memory. `predicted_step_s` is the sum of op bounds (`view`: "eager", or
    "fused" for the fused-kernels lever).
    """

    lever: str
    predicted_step_s: float
    tokens_per_s: float | None
    speedup: float | None
    binding: str
    fits: bool | None
    assumption: str
    step_speedup: float | None = None
    view: str = "eager"
    gpus: int = 1
    batch: int = 1
    tokens: int = 1
    memory_bytes: float | None = None
    max_batch: int | None = None
    time_compute_s: float = 0.0
    time_memory_s: float = 0.0
    time_comm_s: float = 0.0
    source: str = "rooflinekit"  # the plugin that proposed it, for a third-party lever
    changes: dict[str, Any] = field(default_factory=dict)  # what differs from the baseline's workload
    #: The step at achievable rates (Totals.expected_step_s; the fused view's for the fused lever),
    #: and tokens/s per GPU (levers are ranked by it) and per user at it.
    expected_step_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tokens_per_s_per_user: float | None = None
    #: "lever" (one change), "combination" (`advise --combine`: several changes in one deployment,
    #: named in words in `lever`) or "baseline".
    kind: str = "lever"
    #: A multi-token lever priced with its draft (`--draft`/`--mtp`): the cycle behind its figures.
    speculative: SpeculativeCycle | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class SpeculativeCycle:
    """A speculative cycle (rooflinekit.stages.speculative): `k` drafted tokens at `draft_step_s`
    each, one verify step of q_len k + 1 at `verify_step_s`, per-token acceptance `accept`; the
    tokens it emits on average (`tokens_per_cycle`), its seconds and the seconds per emitted token."""

    draft: str
    k: int
    accept: float
    draft_step_s: float
    verify_step_s: float
    cycle_s: float
    tokens_per_cycle: float
    time_per_token_s: float


@dataclass(frozen=True)
class CombineSearch:
    """How `advise --combine` searched: the combinations enumerated from the axes kept, how many
    were priced (at most `limit`, the most promising first), and how many priced rows were left out
    as dominated by another row."""

    axes: dict[str, list[str]]
    enumerated: int
    priced: int
    limit: int
    dominated: int
    pruned: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SkippedLever:
    """A lever that does not apply to this workload, and why."""

    lever: str
    reason: str
    source: str = "rooflinekit"


@dataclass(frozen=True, repr=False)
class AdviceReport(ReportBase):
    """What would change a step's time: every lever that applies, ranked by speed-up."""

    workload: WorkloadInfo
    hardware: HardwareInfo
    baseline: LeverResult
    deployment: Deployment = field(default_factory=Deployment)
    model: ModelInfo = field(default_factory=ModelInfo)
    levers: list[LeverResult] = field(default_factory=list)
    skipped: list[SkippedLever] = field(default_factory=list)
    memory: Memory | None = None  # the baseline's
    #: `--combine`'s search (None without it).
    combine: CombineSearch | None = field(default=None, metadata=OMIT_NONE)
    profiles: int = 0  # captures run (the baseline's included)
    wall_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    schema_version: str = SCHEMA_VERSION
    kind: str = "advise"
    tool: Tool = field(default_factory=Tool)

    def to_dataframe(self, columns: Sequence[str] | None = None):
        """The baseline (rank 0) and every lever, as a pandas DataFrame."""
        return render_view(self, "frame", columns)
