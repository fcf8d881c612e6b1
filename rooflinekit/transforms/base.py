"""The one shape of a transform: `Transform`, the `Counted` capture it restates and the
`TransformContext` it reads, and `run_transforms`, the profile's loop over a stated list.

Between attribution and placement, the profile's stages run a stated list of transforms, each a
`Transform`: stored formats the model does not run (quantization), the serving view, one GPU's
share of a split model (the TP shard plan), the options a plugin restates, a plugin's lever
(absorbed MLA, ...). Each takes the `Counted` capture and the `TransformContext` (the request and
the model) and returns a new `Counted`; none edits what it was given. Placement then treats the
result as any capture. A plugin's transform, a function or an object, is made a `Transform` once,
where it is collected (rooflinekit.transforms.adapter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import torch

from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.revise import revised
from rooflinekit.stages.attribute import AttentionSite
from rooflinekit.stages.capture import CaptureResult, OpRecord


@dataclass(frozen=True)
class Counted:
    """A capture with its attention rows, as it moves through the transforms."""

    capture: CaptureResult
    attention: list[AttentionSite]
    #: What the transforms assumed, in their order (the report's notes).
    notes: tuple[str, ...] = ()
    #: Parameter name -> its stored bytes, for parameters a format transform rescaled.
    stored: dict[str, float] = field(default_factory=dict)
    #: The report's `parallel` section, where a parallel transform split the model.
    parallel: dict[str, Any] | None = None

    def with_notes(self, *notes: str) -> Counted:
        return replace(self, notes=self.notes + tuple(n for n in notes if n))


@dataclass(frozen=True)
class TransformContext:
    """What a transform may read besides the capture: the request, the model and the plugins."""

    workload: Workload
    deployment: Deployment
    model: torch.nn.Module
    host: PluginHost


@runtime_checkable
class Transform(Protocol):
    """A restatement of a counted capture: `name`, whether it `applies` to a request, and `apply`."""

    name: str

    def applies(self, ctx: TransformContext) -> bool: ...

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted: ...


def rebuild_ops(ops: list[OpRecord], drop: set[int], inserts: dict[int, list[OpRecord]],
                ) -> tuple[list[OpRecord], dict[int, int], dict[int, int]]:
    """A transform's new op list: `ops` without the indices in `drop`, each list of `inserts`
    placed before the op of its index, renumbered. Returns it with old index -> new index and
    id(inserted record) -> its new index."""
    out: list[OpRecord] = []
    index: dict[int, int] = {}
    at: dict[int, int] = {}
    for op in ops:
        for record in inserts.get(op.index, ()):
            at[id(record)] = len(out)
            out.append(revised(record, index=len(out)))
        if op.index in drop:
            continue
        index[op.index] = len(out)
        out.append(revised(op, index=len(out)))
    return out, index, at


def run_transforms(counted: Counted, transforms: Sequence[Transform], ctx: TransformContext) -> Counted:
    """`counted` through every transform that applies to the request, in the order given."""
    for transform in transforms:
        if transform.applies(ctx):
            counted = transform.apply(counted, ctx)
    return counted
