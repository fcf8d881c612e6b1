"""Swapping an attribute for the length of a block, and putting back exactly what was there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_ABSENT = object()


@contextmanager
def swapped(owner: object, name: str, value: object) -> Iterator[object]:
    """`owner.name` is `value` inside the block; on leaving, it is again what it was on entering
    (absent stays absent), so swaps nest: an inner one puts back the outer one's value, whoever
    set it. Yields the value found."""
    found = getattr(owner, name, _ABSENT)
    setattr(owner, name, value)
    try:
        yield None if found is _ABSENT else found
    finally:
        if found is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, found)


@contextmanager
def own_attribute(owner: object, name: str, value: object) -> Iterator[None]:
    """`value` set on the instance `owner` as `name` inside the block (a module's `forward` in place of
    its class's); on leaving, the instance holds what it held before: its own earlier value, or
    none, so that the class's shows through again (`swapped` would leave the class's bound method
    behind as the instance's own)."""
    own = vars(owner).get(name, _ABSENT)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, own)
