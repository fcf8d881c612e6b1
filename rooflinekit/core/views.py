"""The views for people of every report kind: a one-line `repr`, the text as `str`, Jupyter's HTML
(`_repr_html_`) and a pandas DataFrame (`to_dataframe`), looked up in a registry.

The report types live in this layer, which imports no output; their renderers live in
rooflinekit.outputs (and rooflinekit.trace), which register them here when imported (`register_views`).
The Python API, the CLI and the notebook helpers import them, so what they hand out always has views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

#: The views a kind may register: its one-line repr, its text, its HTML and its DataFrame.
VIEWS = ("repr", "text", "html", "frame")

_REGISTRY: dict[type, dict[str, Callable]] = {}


class NoViewError(LookupError):
    """A report kind's view asked for before any renderer of it was registered."""


def register_views(kind: type, **renderers: Callable) -> None:
    """Register `kind`'s renderers by view name (repr, text, html, frame); each takes the report
    first. A later registration of the same view replaces the earlier one."""
    unknown = set(renderers) - set(VIEWS)
    if unknown:
        raise ValueError(f"no such view {sorted(unknown)}: the views are {', '.join(VIEWS)}")
    _REGISTRY.setdefault(kind, {}).update(renderers)


def renderer(value: object, view: str) -> Callable | None:
    """The renderer of `view` for `value`'s kind (or the nearest base kind's), None if none."""
    for kind in type(value).__mro__:
        found = _REGISTRY.get(kind, {}).get(view)
        if found is not None:
            return found
    return None


def render_view(value: object, view: str, *args, **kwargs):
    """`value` in its `view`; NoViewError naming the module to import when none is registered."""
    found = renderer(value, view)
    if found is None:
        raise NoViewError(f"{type(value).__name__} has no {view} view registered: import rooflinekit.outputs "
                          "(the Python API, the CLI and the notebook helpers do)")
    return found(value, *args, **kwargs)


def plain_repr(value: object) -> str:
    """The dataclass repr of `value` (every field), the repr of a kind without a registered one."""
    return f"{type(value).__qualname__}({', '.join(f'{f.name}={getattr(value, f.name)!r}' for f in fields(value))})"


class HasViews:
    """A report kind with views for people (module doc). Subclasses are dataclasses declared with
    `repr=False`, so that this `__repr__` is theirs; each defines `to_dataframe` with its sections."""

    def __repr__(self) -> str:
        found = renderer(self, "repr")
        return plain_repr(self) if found is None else found(self)

    def __str__(self) -> str:
        return render_view(self, "text")

    def _repr_html_(self) -> str:
        return render_view(self, "html")
