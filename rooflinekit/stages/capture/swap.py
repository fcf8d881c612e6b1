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
