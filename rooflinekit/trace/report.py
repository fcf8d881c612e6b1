"""The trace report: plain dataclasses, what the text, Markdown, CSV and JSON views print.
Times are seconds, rates per second, as in every other rooflinekit report. Its views for people
(repr, text, HTML) are rooflinekit.trace.views's, registered in rooflinekit.core.views."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rooflinekit.core import codec
from rooflinekit.core.views import HasViews
from rooflinekit.trace.counters import CounterRow

#: The JSON trace report's schema version (bumped when its shape changes).
TRACE_SCHEMA_VERSION = "1.0"
#: The shipped JSON Schema of the trace report, generated from these dataclasses (write_trace_schema).
TRACE_SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema" / f"trace-{TRACE_SCHEMA_VERSION}.schema.json"


@dataclass(frozen=True)
class Rates:
    """Counted work over measured time, and where it sits on the roofline."""

    time_s: float
    #: The part of time_s whose events have counts (the denominator of the rates).
    counted_time_s: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    #: The peak-table key the work ran at (fp32, tf32, bf16...), of the largest share of its FLOPs.
    dtype: str = ""
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    #: Achieved FLOP/s over the dtype's dense peak (FLOPs of several dtypes: each over its own).
    peak_fraction: float | None = None
    #: Achieved bytes/s over the HBM bandwidth.
    bandwidth_fraction: float | None = None
    intensity: float | None = None
    bound: str = ""


@dataclass(frozen=True)
class ClassTime:
    """GPU time of one kernel class (kernel durations summed; overlaps count twice)."""

    klass: str
    time_s: float
    events: int
    share: float
    #: The class's counted FLOPs and bytes (from recorded shapes; 0 where nothing was counted).
    flops: float = 0.0
    bytes: float = 0.0


@dataclass(frozen=True)
class Row:
    """A kernel name or an op, its GPU time and what its counted work achieved."""

    name: str
    klass: str
    events: int
    rates: Rates
    #: For a kernel: the op its counts come from; for an op: its count status.
    op: str = ""
    status: str = ""
    reason: str = ""


@dataclass(frozen=True)
class CollectiveRow:
    """One collective (by name and group) over the window: calls, time, bytes, bandwidths."""

    collective: str
    calls: int
    time_s: float
    bytes: float | None
    group: int | None
    algbw: float | None
    busbw: float | None
    source: str


@dataclass(frozen=True)
class StepSummary:
    """One window (a ProfilerStep, all of them, or the trace): busy and idle GPU time, class
    times, and the utilisation the counted work reached."""

    label: str
    step: int | None
    span_s: float
    busy_s: float
    idle_s: float
    kernel_time_s: float
    events: int
    counted_flops: float
    counted_bytes: float
    #: Counted FLOPs over (busy time x the dtype's peak): hardware FLOP utilisation.
    hfu: float | None
    #: Counted bytes over (busy time x HBM bandwidth): memory bandwidth utilisation.
    mbu: float | None
    by_class: list[ClassTime] = field(default_factory=list)
    #: The model's FLOPs (a profile report's, `trace --profile`) over (busy time x its dtype's peak).
    mfu: float | None = None


@dataclass(frozen=True)
class RankReport:
    """One rank's trace: per-step summaries, their total, the tables, and what was not counted."""

    path: str
    rank: int | None
    device: str
    steps: list[StepSummary]
    total: StepSummary
    kernels: list[Row]
    ops: list[Row]
    uncounted: list[Row]
    unplaced: list[Row]
    collectives: list[CollectiveRow]
    #: Share of GPU time whose kernel class is known (by kernel name or launching op).
    class_coverage: float
    #: Share of GPU time whose work was counted from recorded shapes.
    counted_coverage: float
    notes: list[str] = field(default_factory=list)
    #: "gpu": kernels' GPU time; "cpu": a CPU-only trace, each leaf op's CPU time standing for a kernel.
    timing: str = "gpu"
    #: Time, counted work and rates per phase: forward, backward, optimizer.
    phases: list[Row] = field(default_factory=list)
    #: The same per module path (two levels below the top-level module); empty without a hierarchy.
    modules: list[Row] = field(default_factory=list)
    #: CUPTI counter ranges per kernel name: measured FLOPs beside the counted ones.
    counters: list[CounterRow] = field(default_factory=list)


@dataclass(frozen=True)
class RankStep:
    """One rank's ProfilerStep: its span and how much of it some stream was busy."""

    rank: str
    step: int
    span_s: float
    busy_s: float
    idle_s: float


@dataclass(frozen=True)
class Straggler:
    """The slowest rank of one step, against the median rank."""

    step: int
    ranks: int
    median_s: float
    slowest_rank: str
    slowest_s: float
    #: (slowest - median) / median.
    over_median: float
    fastest_s: float


@dataclass(frozen=True)
class SlowCall:
    """One collective call (the Nth of its name on every rank) at its slowest rank."""

    collective: str
    call: int
    rank: str
    time_s: float
    median_s: float
    ranks: int


@dataclass(frozen=True)
class AcrossRanks:
    """The ranks compared: per-rank steps, each step's straggler, the slowest collective calls."""

    ranks: int
    workers: int
    steps: list[RankStep]
    stragglers: list[Straggler]
    slowest_calls: list[SlowCall]
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True, repr=False)
class TraceReport(HasViews):
    """The roofline of what a torch.profiler trace ran, one RankReport per rank file."""

    source: str
    hardware: str
    peaks: dict[str, float]
    bandwidth: float
    ranks: list[RankReport]
    step: int | None = None
    notes: list[str] = field(default_factory=list)
    #: The profile report whose model FLOPs and predicted kernels the trace was given (--profile).
    profile: str | None = None
    #: A folder of rank files compared across ranks (rooflinekit.trace.ranks).
    across: AcrossRanks | None = None

    def to_dict(self) -> dict:
        """The JSON report: every field, with the schema version and the report kind first."""
        return {"schema_version": TRACE_SCHEMA_VERSION, "kind": "trace", **asdict(self)}


def trace_schema() -> dict:
    """The JSON Schema of a trace report, from the dataclasses."""
    return codec.json_schema(TraceReport, "trace", TRACE_SCHEMA_VERSION)


def write_trace_schema() -> Path:
    """Regenerate the shipped schema file (after changing a trace report dataclass)."""
    TRACE_SCHEMA_FILE.write_text(json.dumps(trace_schema(), indent=1) + "\n")
    return TRACE_SCHEMA_FILE
