"""The plan search's space: its options (PlanOptions), the batches, chunks and expert-parallel
degrees it tries, and the tolerance its step-model check holds to (rooflinekit.analyses.plan)."""

from __future__ import annotations

from dataclasses import dataclass

from rooflinekit.core.request import ModelSource
from rooflinekit.core.settings import with_searched
from rooflinekit.stages.speculative import DEFAULT_ACCEPT

#: Chunked-prefill budgets (prompt tokens per step) the search tries for aggregated serving.
CHUNKS = (512, 2048, 8192)
#: Module models' scalings a step model fits from two batches (rooflinekit.stages.stepmodel).
FITTED_SCALINGS = ("polynomial", "expected-experts")
#: Batches per instance the search tries: powers of two up to this.
MAX_BATCH = 1024
#: The largest relative difference between a step model and a full profile that the check accepts
#: without a warning in the notes.
CHECK_TOLERANCE = 1e-6


@dataclass(frozen=True)
@with_searched(after="weight_dtypes", tried=True)  # then the values of each searched setting: the KV formats
class PlanOptions:
    """The search space and the assumptions it is priced with."""

    gpus: int = 8
    hardware: str = "H800"
    kernels: str = "serving"
    weight_dtypes: tuple[str, ...] = ("bf16", "fp8")
    tps: tuple[int, ...] | None = None  # None: powers of two up to the budget
    #: EP degrees with data-parallel attention (DEPn) for MoE models; None: wide_eps
    eps: tuple[int, ...] | None = None
    #: (TP, EP) layouts a disaggregated prefill pool may take; None: any searched
    prefill_layouts: tuple[tuple[int, int], ...] | None = None
    #: (TP, EP) layouts a decode instance (aggregated, or a disaggregated decode pool) may take
    decode_layouts: tuple[tuple[int, int], ...] | None = None
    #: The busiest EP rank's tokens over the mean (Deployment.ep_imbalance), for every EP layout
    ep_imbalance: float = 1.0
    pps: tuple[int, ...] = (1, 2, 4)
    modes: tuple[str, ...] = ("aggregated", "disaggregated")
    chunks: tuple[int, ...] = CHUNKS
    max_batch: int = MAX_BATCH
    mtp: int = 0
    draft: ModelSource | str | None = None  # a draft model (its source, or a path in the Python API)
    accept: float = DEFAULT_ACCEPT
    memory_fraction: float = 0.9
    rate: float | None = None  # requests/s over the budget (None: the highest each candidate sustains)
    check: bool = True
    #: The Python API's `Targets.at` (the CLI's --targets-at): "expected" or "p90".
    targets_at: str = "expected"
    dtype: str = "bf16"  # the activation dtype (the Python API's; the CLI passes --dtype to run_plan)
    #: The expected time's efficiency source (Deployment.efficiency; --efficiency)
    efficiency: str | None = None
    #: The serving engine whose host time per step the expected figures add (Deployment.engine; --engine)
    engine: str | None = None
    #: How expected steps overlap collectives with kernels (Deployment.overlap; --overlap): with
    #: "two-batch" only disaggregated pools without pipeline stages are priced
    overlap: str = "none"


def wide_eps(gpus: int, node: int | None) -> list[int]:
    """EP degrees a data-parallel-attention layout is searched at: powers of two up to the budget
    and, where the budget spans nodes, the budget less a power-of-two pool of whole nodes (a decode
    pool beside a prefill pool: DeepSeek's EP 144 beside EP 32 on 22 nodes)."""
    out = set(_powers(gpus))
    if node and gpus > node:
        out.update(gpus - p for p in _powers(gpus) if p >= node and p % node == 0 and gpus - p >= node)
    return sorted(out)


def _powers(limit: int) -> list[int]:
    out, b = [], 1
    while b <= limit:
        out.append(b)
        b *= 2
    return out

