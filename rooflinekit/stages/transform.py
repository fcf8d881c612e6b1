"""Transforms: restatements of a counted capture before it is placed.

Between attribution and placement, the pipeline runs a stated list of transforms, each a
`Transform`: stored formats the model does not run (quantization), one GPU's share of a split
model (the parallel plan), a plugin's lever (absorbed MLA, ...), and later the serving view. Each
takes the `Counted` capture and the `TransformContext` (the request and the model) and returns a
new `Counted`; none edits what it was given. Placement then treats the result as any capture.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import torch

from rooflinekit.core.errors import UserError
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


#: A lever's restatement in its functional form: (capture, rows, workload, host) -> (capture, rows, notes).
LegacyTransform = Callable[[CaptureResult, list, Workload, PluginHost], tuple[CaptureResult, list, list[str]]]


@dataclass(frozen=True)
class FunctionTransform:
    """A `Transform` made of a function of the functional form (a lever's `transform=`)."""

    fn: LegacyTransform
    name: str = "lever"

    def applies(self, ctx: TransformContext) -> bool:
        return True

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        cap, rows, notes = self.fn(counted.capture, counted.attention, ctx.workload, ctx.host)
        return replace(counted, capture=cap, attention=rows).with_notes(*notes)


def as_transform(value: Transform | LegacyTransform) -> Transform:
    """`value` as a Transform: itself, or a function of the functional form wrapped."""
    if isinstance(value, Transform):
        return value
    if callable(value):
        return FunctionTransform(value, getattr(value, "__name__", "lever"))
    raise TypeError(f"a transform must be a Transform or a callable, got {type(value).__name__}")


def transform_problem(value: object) -> str | None:
    """Why `value` is no transform (a Transform, or a callable of the functional form), or None."""
    if isinstance(value, Transform) and isinstance(getattr(value, "name", None), str):
        return None
    if callable(value) and not isinstance(value, type):
        return None
    return f"a transform must be a Transform (name, applies, apply) or a callable, got {type(value).__name__}"


@dataclass(frozen=True)
class PluginTransform:
    """A plugin's transform run under a guard: an exception it raises, or a result that is no
    `Counted`, is named with the plugin in one warning and ends this request with one line (an
    advise lever is then listed as skipped with that reason; the other levers are priced)."""

    inner: Transform
    plugin: str
    what: str  # "lever 'absorbed MLA'", "option mode=absorbed"
    name: str = "plugin transform"

    def _fail(self, ctx: TransformContext, reason: str) -> UserError:
        message = f"plugin '{self.plugin}' {reason} in its {self.what}"
        ctx.host.warn(f"{message}; ignored")
        return UserError(message)

    def applies(self, ctx: TransformContext) -> bool:
        try:
            return bool(self.inner.applies(ctx))
        except UserError:
            raise
        except Exception as exc:
            raise self._fail(ctx, f"failed ({type(exc).__name__}: {exc})") from None

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        try:
            out = self.inner.apply(counted, ctx)
        except UserError:
            raise
        except Exception as exc:
            raise self._fail(ctx, f"failed ({type(exc).__name__}: {exc})") from None
        if not isinstance(out, Counted) or not isinstance(out.capture, CaptureResult) \
                or not isinstance(out.attention, list) or not all(isinstance(n, str) for n in out.notes):
            raise self._fail(ctx, f"returned {type(out).__name__}, not a restated capture (Counted with "
                                  "a CaptureResult, a list of attention rows and string notes),")
        return out


def guarded(value: Transform | LegacyTransform, plugin: str, what: str) -> PluginTransform:
    """A plugin's transform (checked with `transform_problem` first) under `PluginTransform`'s guard."""
    inner = as_transform(value)
    return PluginTransform(inner, plugin, what, name=str(getattr(inner, "name", "plugin transform")))


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
