"""The one adapter from what a plugin answers to a `Transform`: a lever's `transform=` and a
`rooflinekit_option_transform` answer are each made a `PluginTransform` where they are collected,
so the profile's stages run `Transform`s only.

A plugin may answer with either form:

- an object with `name`, `applies(ctx)` and `apply(counted, ctx)` (the `Transform` protocol);
- a function of the functional form `(capture, rows, workload, host) -> (capture, rows, notes)`,
  which applies to every request.

A plugin's transform runs under a guard: an exception it raises, or a result that is no `Counted`,
is named with the plugin in one warning and ends this request with one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rooflinekit.core.errors import UserError
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Workload
from rooflinekit.stages.capture import CaptureResult
from rooflinekit.transforms.base import Counted, Transform, TransformContext

#: A transform in its functional form: (capture, rows, workload, host) -> (capture, rows, notes).
TransformFunction = Callable[[CaptureResult, list, Workload, PluginHost], tuple[CaptureResult, list, list[str]]]


@dataclass(frozen=True)
class PluginTransform:
    """A plugin's transform (an object of the protocol, or a function of the functional form) as a
    `Transform`. With a `plugin` named, it runs under the guard (see the module); without one (a
    function a caller hands `run_profile(lever=...)` itself), what the function raises propagates."""

    inner: Transform | TransformFunction
    plugin: str | None = None
    what: str = ""  # "lever 'absorbed MLA'", "transform of -O mode=absorbed"
    name: str = "plugin transform"

    def _is_function(self) -> bool:
        return not isinstance(self.inner, Transform)

    def _fail(self, ctx: TransformContext, reason: str) -> UserError:
        message = f"plugin '{self.plugin}' {reason} in its {self.what}"
        ctx.host.warn(f"{message}; ignored")
        return UserError(message)

    def _applies(self, ctx: TransformContext) -> bool:
        return True if self._is_function() else bool(self.inner.applies(ctx))

    def _apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        if not self._is_function():
            return self.inner.apply(counted, ctx)
        cap, rows, notes = self.inner(counted.capture, counted.attention, ctx.workload, ctx.host)
        return replace(counted, capture=cap, attention=rows).with_notes(*notes)

    def applies(self, ctx: TransformContext) -> bool:
        if self.plugin is None:
            return self._applies(ctx)
        try:
            return self._applies(ctx)
        except UserError:
            raise
        except Exception as exc:
            raise self._fail(ctx, f"failed ({type(exc).__name__}: {exc})") from None

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        if self.plugin is None:
            return self._apply(counted, ctx)
        try:
            out = self._apply(counted, ctx)
        except UserError:
            raise
        except Exception as exc:
            raise self._fail(ctx, f"failed ({type(exc).__name__}: {exc})") from None
        if not isinstance(out, Counted) or not isinstance(out.capture, CaptureResult) \
                or not isinstance(out.attention, list) or not all(isinstance(n, str) for n in out.notes):
            raise self._fail(ctx, f"returned {type(out).__name__}, not a restated capture (Counted with "
                                  "a CaptureResult, a list of attention rows and string notes),")
        return out


def as_transform(value: Transform | TransformFunction, plugin: str | None = None, what: str = "") -> Transform:
    """`value` as a `Transform`, once: a plugin's answer (checked with `transform_problem` first) under
    the guard where `plugin` is named; else an object of the protocol itself, a function wrapped."""
    if plugin is None and isinstance(value, Transform):
        return value
    if not isinstance(value, Transform) and not callable(value):
        raise TypeError(f"a transform must be a Transform or a callable, got {type(value).__name__}")
    name = value.name if isinstance(value, Transform) else getattr(value, "__name__", "lever")
    return PluginTransform(value, plugin, what, name=str(name))


def transform_problem(value: object) -> str | None:
    """Why `value` is no transform (a Transform, or a callable of the functional form), or None."""
    if isinstance(value, Transform) and isinstance(getattr(value, "name", None), str):
        return None
    if callable(value) and not isinstance(value, type):
        return None
    return f"a transform must be a Transform (name, applies, apply) or a callable, got {type(value).__name__}"
