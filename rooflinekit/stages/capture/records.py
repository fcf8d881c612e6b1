"""What a capture produces: one OpRecord per op, and the CaptureResult of one forward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class OpRecord:
    """One executed op (or fused call, or modelled block) with its counts and where it ran."""

    index: int
    name: str
    module: str
    flops: float
    bytes_read: float
    bytes_written: float
    dtype: str
    counted: bool
    kind: str = "op"  # "op" | "fused" | "modelled"
    param_bytes: float = 0.0
    reads: tuple[tuple[int, float], ...] = ()
    writes: tuple[tuple[int, float], ...] = ()
    sinks: tuple[int, ...] = ()  # storages of K/V-carrying operands (SDPA k, v; matmul candidates)
    shapes: str = ""
    attrs: dict = field(default_factory=dict)
    time_s: float | None = None

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


@dataclass
class CaptureResult:
    """Everything one forward produced, plus what the attribute stage needs to know of the model."""

    ops: list[OpRecord]
    modules: dict[str, str]  # path -> class name, in registration order
    param_storages: set[int]
    param_bytes_total: float
    wall_s: float
    notes: list[str] = field(default_factory=list)
    param_owners: dict[int, str] = field(default_factory=dict)  # parameter storage -> module path
    param_names: dict[int, str] = field(default_factory=dict)  # parameter storage -> its parameter's name
    #: (storage, end) per storage the forward allocated, in order (rooflinekit.stages.capture.liveness)
    live: list[tuple[int, int | None]] = field(default_factory=list)
    #: (calls answered from the meta memo, meta kernels run for memoisable calls)
    memo_counts: tuple[int, int] = (0, 0)


def shape_text(t: torch.Tensor) -> str:
    """A tensor's shape as OpRecord.shapes spells it ("48x1x7168"; "scalar")."""
    return "x".join(str(s) for s in t.shape) or "scalar"
