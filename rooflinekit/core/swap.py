"""Patches for the length of a block, on what rooflinekit did not make: an attribute, an instance's
own attribute, an environment variable, a process-wide setting behind a getter and a setter.

Each is a context manager that puts back exactly what it found on leaving, an exception or not, so
that patches nest; every such patch of the package and its built-in plugins goes through this
module (`tests/test_swap.py` fails on a hand-written restore elsewhere).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

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
        _put_back(owner, name, found)


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
        _put_back(owner, name, own)


def _put_back(owner: object, name: str, found: object) -> None:
    """`owner.name` as it was found: `found`, or no attribute of that name where it was absent."""
    if found is _ABSENT:
        delattr(owner, name)
    else:
        setattr(owner, name, found)


@contextmanager
def environment(name: str, value: str | None) -> Iterator[str | None]:
    """The environment variable `name` is `value` inside the block (None: unset); on leaving, it
    is again what it was (unset stays unset). Yields the value found."""
    found = os.environ.get(name)
    _set_variable(name, value)
    try:
        yield found
    finally:
        _set_variable(name, found)


def _set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextmanager
def setting(get: Callable[[], T], set: Callable[[T], object], value: T) -> Iterator[T]:
    """A process-wide setting read by `get` and written by `set` (torch.get_default_dtype and
    torch.set_default_dtype) is `value` inside the block; on leaving, `set` puts back what `get`
    found. Yields the value found."""
    found = get()
    set(value)
    try:
        yield found
    finally:
        set(found)
