"""`revised`: dataclasses.replace at the cost of a copy, for the records the planner copies most.

dataclasses.replace runs the class's __init__ again (every field, every default); a plan's search
copies op records and configurations some 10^5 times, where that is a tenth of its time. `revised`
copies the instance's fields and sets the changed ones, checked against the class's fields. It is
for dataclasses without __post_init__ or slots (OpRecord, PlanConfig); a frozen one stays frozen to
every other writer.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")

_FIELDS: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    names = _FIELDS.get(cls)
    if names is None:
        if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__"):
            raise TypeError(f"revised() copies plain dataclasses only: {cls.__name__} has __post_init__ or slots")
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))
    return names


def revised(obj: T, **changes) -> T:
    """A copy of dataclass instance `obj` with `changes` (as dataclasses.replace gives it)."""
    unknown = changes.keys() - _field_names(type(obj))
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {', '.join(sorted(unknown))}")
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new
