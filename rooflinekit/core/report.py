"""The report tree: plain frozen dataclasses from the workload down to single ops.

A report is built once by `rooflinekit.stages.place.build_report` from a capture and a hardware
entry. Measured times, a second hardware entry and parallel views make *new* reports
(`dataclasses.replace`); nothing edits a report after it is built. JSON happens only at the edge:
`Report.to_dict()` / `Report.from_dict()` (rooflinekit.core.report_base, through rooflinekit.core.codec),
against the JSON Schema shipped in rooflinekit/schema/ (docs/schema.md). The views for people (repr,
text, HTML, DataFrame) are rooflinekit.core.views's, rendered by rooflinekit.outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rooflinekit.core import codec
from rooflinekit.core.report_base import ReportBase
from rooflinekit.core.request import Deployment
from rooflinekit.core.version import SCHEMA_VERSION, __version__
from rooflinekit.core.views import render_view

#: The module name the report gives ops that ran outside every module.
ROOT = "(root)"
#: Field metadata: leave the key out of the JSON when the value is None (keeps op rows small).
OMIT_NONE = {"omit_none": True}


@dataclass(frozen=True)
class Tool:
    name: str = "rooflinekit"
    version: str = __version__


@dataclass(frozen=True)
class WorkloadInfo:
    """Phase and shape of the step: part of every result."""

    phase: str
    batch: int
    context: int
    q_len: int
    tokens: int
    dtype: str
    device: str
    #: The model's own options (-O); deployment settings are in the report's `deployment`.
    options: dict[str, Any] = field(default_factory=dict)
    #: A mixed step (phase "mixed"): its decode groups as [context, sequences] pairs, and its
    #: prefill chunk's new tokens after chunk_offset cached ones (absent for a plain step).
    mix: list[list[int]] | None = field(default=None, metadata=OMIT_NONE)
    chunk: int | None = field(default=None, metadata=OMIT_NONE)
    chunk_offset: int | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class ModelInfo:
    name: str | None = None
    path: str | None = None
    kind: str | None = None
    parameters: int | None = None
    param_bytes: float | None = None
    modules: int | None = None


@dataclass(frozen=True)
class HardwareInfo:
    """The entry a report is placed on, with the peak of the workload's dtype."""

    name: str
    dtype: str
    peak_flops: float
    bandwidth: float
    ridge: float
    peaks: dict[str, float] = field(default_factory=dict)
    interconnect_bandwidth: float | None = None
    calibrated: bool = False
    source: str | None = None


@dataclass(frozen=True)
class Placement:
    """One point on one roofline: counts, intensity, the bound it meets and its time."""

    flops: float
    bytes: float
    intensity: float | None
    attainable_flops: float
    bound: str
    time_bound_s: float
    mfu_bound: float
    dtype: str


@dataclass(frozen=True)
class Measured:
    """Measured time of a record and what it implies against the ceilings."""

    time_s: float | None = None
    achieved_flops: float | None = None
    achieved_bandwidth: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    mbu: float | None = None
    time_vs_bound: float | None = None
    predicted_ops_s: float | None = field(default=None, metadata=OMIT_NONE)  # attention rows
    mbu_min: float | None = field(default=None, metadata=OMIT_NONE)  # attention rows
    cpu_time_s: float | None = field(default=None, metadata=OMIT_NONE)  # ops on CUDA


@dataclass(frozen=True)
class StepMeasured:
    """The measured step: times, utilisations, and how they were taken."""

    step_time_s: float
    step_times_s: list[float]
    op_time_s: float
    unattributed_s: float
    device: str
    warmup: int
    repeats: int
    timing: str
    ops_timed: int
    achieved_flops: float | None = None
    achieved_bandwidth: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    mbu: float | None = None
    time_vs_bound: float | None = None
    op_time_share: float | None = None
    step_time_plain_s: float | None = None
    time_vs_whole_step_bound: float | None = None
    tokens_per_s: float | None = None
    threads: int | None = None
    ops_unmatched: list[str] = field(default_factory=list)
    conventions: dict[str, str] = field(default_factory=dict)
    #: The spread of step_times_s (step_time_s is their mean).
    step_time_min_s: float | None = None
    step_time_median_s: float | None = None
    step_time_max_s: float | None = None


@dataclass(frozen=True)
class AltPlacement:
    """The same counts placed on a second hardware entry (`--compare-hardware`)."""

    hardware: str
    calibrated: bool
    intensity: float | None
    attainable_flops: float
    bound: str
    time_bound_s: float
    mfu_bound: float
    ridge: float
    time_bound_ops_s: float | None = field(default=None, metadata=OMIT_NONE)
    predicted_step_s: float | None = field(default=None, metadata=OMIT_NONE)
    mfu: float | None = field(default=None, metadata=OMIT_NONE)
    hfu: float | None = field(default=None, metadata=OMIT_NONE)
    mbu: float | None = field(default=None, metadata=OMIT_NONE)
    time_vs_bound: float | None = field(default=None, metadata=OMIT_NONE)
    min: AltPlacement | None = field(default=None, metadata=OMIT_NONE)  # attention rows


@dataclass(frozen=True)
class FusedTotals:
    """The step with elementwise chains fused between matmul/attention anchors (rooflinekit.stages.fusion):
    its bytes, the whole step's intensity and bound on them, and the sum of kernel and anchor bounds."""

    bytes: float
    intensity: float | None
    time_bound_s: float
    predicted_step_s: float
    bound: str = "none"
    tokens_per_s: float | None = None
    kernels: int = 0  # fused kernels formed
    ops_fused: int = 0  # ops folded into them
    ops_unknown: int = 0  # fusible ops kept at their eager bytes (per-storage traffic unknown)
    #: Each fused kernel and anchor at its class's achievable rates, launches and collectives included.
    expected_step_s: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Totals(Placement):
    """The whole step. `flop_conventions` and `time_conventions` say what each figure means."""

    flops_executed: float = 0.0
    flops_model: float = 0.0
    predicted_step_s: float = 0.0
    tokens_per_s: float | None = None
    sequences_per_s: float | None = None
    mfu_bound_model: float = 0.0
    weight_bytes: float = 0.0
    kv_bytes_executed: float = 0.0
    kv_bytes_min: float | None = None
    other_bytes: float = 0.0
    uncounted_bytes: float = 0.0
    ops: int = 0
    time_compute_s: float = 0.0
    time_memory_s: float = 0.0
    time_comm_s: float = 0.0
    binding: str = "none"
    flop_conventions: dict[str, str] = field(default_factory=dict)
    time_conventions: dict[str, str] = field(default_factory=dict)
    #: The step at the rates real kernels reach (rooflinekit.stages.expected): each kernel at its
    #: class's achievable fractions, a launch cost per kernel and the collectives' expected cost.
    expected_step_s: float = 0.0
    #: The p10-p90 range of expected_step_s from the validation's residuals for its step class
    #: (rooflinekit.stages.spread; the class and its rows in expected_conventions).
    expected_low_s: float | None = field(default=None, metadata=OMIT_NONE)
    expected_high_s: float | None = field(default=None, metadata=OMIT_NONE)
    expected_class: str | None = field(default=None, metadata=OMIT_NONE)
    #: The serving engine's host time the expected step holds (--engine; rooflinekit.stages.engine).
    engine_host_s: float | None = field(default=None, metadata=OMIT_NONE)
    #: Under two-batch overlap (--overlap): the kernels' and collectives' time that ran under the
    #: other stream, so not in expected_step_s (rooflinekit.stages.expected).
    overlap_hidden_s: float | None = field(default=None, metadata=OMIT_NONE)
    #: Tokens per second at expected_step_s, per GPU serving them (the TP group) and per sequence.
    tokens_per_s_per_gpu: float | None = None
    tokens_per_s_per_user: float | None = None
    #: The fractions, launch costs and collective costs expected_step_s used, in words.
    expected_conventions: list[str] = field(default_factory=list)
    measured: StepMeasured | None = field(default=None, metadata=OMIT_NONE)
    placement_alt: AltPlacement | None = field(default=None, metadata=OMIT_NONE)
    fused: FusedTotals | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class ModuleRow(Placement):
    """Ops rolled up to a module path (cut to the report's depth; layers merged when grouped)."""

    name: str = ""
    ops: int = 0
    weight_bytes: float = 0.0
    time_bound_ops_s: float = 0.0
    time_share: float = 0.0
    flops_model: float | None = field(default=None, metadata=OMIT_NONE)
    measured: Measured | None = field(default=None, metadata=OMIT_NONE)
    placement_alt: AltPlacement | None = field(default=None, metadata=OMIT_NONE)
    fused_bytes: float | None = field(default=None, metadata=OMIT_NONE)  # bytes in the fused view


@dataclass(frozen=True)
class CollectiveInfo:
    collective: str | None = None
    group_size: int | None = None
    message_bytes: float | None = None
    wire_bytes: float | None = None
    algorithm: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class OpRow:
    """One aten op (or a modelled / collective record) as counted and placed."""

    index: int
    name: str
    module: str
    kind: str
    flops: float
    bytes_read: float
    bytes_written: float
    param_bytes: float
    dtype: str
    counted: bool
    intensity: float | None
    bound: str
    time_bound_s: float
    shapes: str = ""
    assumption: str | None = field(default=None, metadata=OMIT_NONE)
    formula_error: str | None = field(default=None, metadata=OMIT_NONE)
    collective: CollectiveInfo | None = field(default=None, metadata=OMIT_NONE)
    flops_model: float | None = field(default=None, metadata=OMIT_NONE)
    measured: Measured | None = field(default=None, metadata=OMIT_NONE)
    #: the op's kernel as the expected step priced it (its class's fractions, or a database's measured
    #: time), its launch included (under two-batch overlap both micro-batches'); None for a collective
    expected_s: float | None = field(default=None, metadata=OMIT_NONE)

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class AttentionRow:
    """One attention layer: what its architecture needs beside what its code moved.

    `extra` holds the recognising plugin's architecture-specific fields, as it gave them.
    `op_indices` are the layer's own ops in `Report.ops` (not its projections).
    """

    module: str
    module_class: str
    recognised: bool
    plugin: str | None
    arch: str
    mode: str | None
    num_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    v_head_dim: int | None
    window: int | None
    cache_bytes_per_token: float | None
    kv_bytes_min: float | None
    bytes_min: float | None
    kv_bytes_executed: float
    kv_read_bytes: float
    kv_copy_bytes: float
    kv_reexpand_flops: float
    amplification: float | None
    read_amplification: float | None
    flops_model: float | None
    flops_executed: float
    bytes_executed: float
    intensity_min: float | None
    intensity_executed: float | None
    dtype: str
    placement_executed: Placement
    placement_min: Placement | None
    flops_alt: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    op_indices: list[int] = field(default_factory=list)
    chunk: int | None = None  # chunked attention: keys of the query's own chunk only
    measured: Measured | None = field(default=None, metadata=OMIT_NONE)
    placement_alt: AltPlacement | None = field(default=None, metadata=OMIT_NONE)
    #: A fixed state per sequence that does not grow with context (SSM, linear-attention, RNN and
    #: convolution states; 0 for attention over a per-token cache). For such a layer `kv_bytes_min`
    #: is that state read and written once per step, `kv_bytes_executed` what its code read of it
    #: and wrote into it.
    cache_bytes_per_sequence: float | None = None


@dataclass(frozen=True)
class AttentionTotals:
    layers: int = 0
    recognised: int = 0
    flops_model: float = 0.0
    flops_executed: float = 0.0
    kv_reexpand_flops: float = 0.0
    kv_bytes_min: float | None = None
    kv_bytes_executed: float = 0.0
    kv_bytes_executed_unrecognised: float = 0.0
    amplification: float | None = None
    cache_bytes_per_token: float | None = None
    intensity_min: float | None = None
    cache_bytes_per_sequence: float | None = None  # fixed states of all recognised layers, per sequence


@dataclass(frozen=True)
class UncountedOp:
    """An op without a FLOP formula: listed with its share of bytes and time, never a silent zero."""

    name: str
    count: int
    bytes: float
    time_bound_s: float
    bytes_share: float = 0.0
    time_share: float = 0.0
    formula_error: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class CollectiveSummary:
    collective: str
    group_size: int
    calls: int
    message_bytes: float
    wire_bytes: float
    time_bound_s: float
    #: Expected time of the calls: the library's algorithm and measured per-call latency.
    expected_time_s: float = 0.0
    #: Per-call latency in the bound (the link's floor) and in the expected time (at zero bytes).
    latency_s: float = 0.0
    expected_latency_s: float = 0.0
    #: The algorithm(s) the expected time picked ("one-shot", "ring x 3, one-shot x 2").
    algorithm: str = ""


@dataclass(frozen=True)
class Communication:
    """Collectives per type, their bytes on the wire and time bound (rooflinekit.stages.collectives)."""

    collectives: list[CollectiveSummary] = field(default_factory=list)
    calls: int = 0
    message_bytes: float = 0.0
    wire_bytes: float = 0.0
    time_s: float = 0.0
    #: Sum of the collectives' expected times (not overlapped with compute).
    expected_time_s: float = 0.0
    interconnect_bandwidth: float | None = None
    link_bandwidth_per_direction: float | None = None
    #: The entry's per-call latencies: the floor (bound) and the library's measured one (expected).
    latency_s: float | None = None
    expected_latency_s: float | None = None
    assumption: str = ""
    note: str | None = None


@dataclass(frozen=True)
class CaptureInfo:
    wall_s: float = 0.0
    depth: int = 3
    group_layers: bool = False


@dataclass(frozen=True)
class ViewGap:
    """The module whose time differs most between the two kernels views, and why in words."""

    module: str
    as_written_s: float
    serving_s: float
    why: str


@dataclass(frozen=True)
class Views:
    """The step in both kernels views (`--kernels`): the code as written and what a serving engine
    runs (docs/accounting.md, Serving view); predicted steps (sums of op bounds) on the same entry."""

    as_written_step_s: float
    serving_step_s: float
    largest_gap: ViewGap | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Memory:
    """What one GPU holds for the step (rooflinekit.stages.memory): weights, the KV cache at the
    report's context and batch, the measured activation peak, against capacity x fraction."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_peak_bytes: float | None
    total_bytes: float
    capacity_bytes: float | None
    fits: bool | None
    max_batch: int | None
    fraction: float = 0.9
    usable_bytes: float | None = None  # (capacity - reserve) x fraction
    headroom_bytes: float | None = None  # usable - total (negative: short by that much)
    kv_bytes_per_sequence: float = 0.0
    activation_bytes_per_sequence: float | None = None
    gpus: int = 1  # the GPUs the figures are one share of (planned TP/EP)
    notes: list[str] = field(default_factory=list)
    reserve_bytes: float | None = None  # held back before the fraction (CUDA context, comm buffers)
    kv_block_size: int | None = None  # serving view: tokens per paged KV block
    kv_blocks: int | None = None  # serving view: blocks that fit beside weights and activations


@dataclass(frozen=True, repr=False)
class Report(ReportBase):
    """A profile of one step of one model on one accelerator (schema in docs/schema.md)."""

    workload: WorkloadInfo
    hardware: HardwareInfo
    totals: Totals
    #: How the step is deployed (parallel degrees, formats, kernels, memory fraction), resolved.
    deployment: Deployment = field(default_factory=Deployment)
    model: ModelInfo = field(default_factory=ModelInfo)
    attention_totals: AttentionTotals = field(default_factory=AttentionTotals)
    modules: list[ModuleRow] = field(default_factory=list)
    attention: list[AttentionRow] = field(default_factory=list)
    uncounted_ops: list[UncountedOp] = field(default_factory=list)
    comm: Communication = field(default_factory=Communication)
    ops: list[OpRow] = field(default_factory=list)
    capture: CaptureInfo = field(default_factory=CaptureInfo)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    memory: Memory | None = field(default=None, metadata=OMIT_NONE)
    hardware_alt: HardwareInfo | None = field(default=None, metadata=OMIT_NONE)
    parallel: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    distributed: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    #: The step in the other kernels view beside this one's (profile's annotate step).
    views: Views | None = field(default=None, metadata=OMIT_NONE)
    schema_version: str = SCHEMA_VERSION
    kind: str = "profile"
    tool: Tool = field(default_factory=Tool)

    @classmethod
    def upgraded(cls, data: dict) -> dict:
        """`data` in the current shape: schema 1.x reports upgraded, then their deployment moved."""
        return codec.upgrade_deployment(codec.upgrade_profile(data))

    # -- for people (the renderers: rooflinekit.outputs, registered in rooflinekit.core.views) ----

    def to_text(self, fmt: str = "table", top: int | None = 25, *, wide: bool = False) -> str:
        """The text report the CLI prints (`fmt`: table or markdown)."""
        return render_view(self, "text", fmt, top, wide=wide)

    def table(self, top: int | None = 25) -> str:
        """The text report the CLI prints."""
        return render_view(self, "text", "table", top)

    def to_dataframe(self, section: str = "modules", columns: Sequence[str] | None = None):
        """One section (`modules`, `ops`, `attention`, `uncounted_ops`) as a pandas DataFrame, the
        identifying column first and each column named with its unit (rooflinekit.outputs.frames;
        `columns` selects by new or, deprecated, old names). pandas is optional."""
        return render_view(self, "frame", section, columns)


# -- the shipped JSON Schema -----------------------------------------------------------------------

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
#: The JSON Schemas of profile and sweep reports, shipped inside the package (docs/schema.md).
SCHEMA_FILE = SCHEMA_DIR / f"profile-{SCHEMA_VERSION}.schema.json"
SWEEP_SCHEMA_FILE = SCHEMA_DIR / f"sweep-{SCHEMA_VERSION}.schema.json"
ADVISE_SCHEMA_FILE = SCHEMA_DIR / f"advise-{SCHEMA_VERSION}.schema.json"
