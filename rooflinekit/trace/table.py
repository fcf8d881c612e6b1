"""Events of one kind stored as columns: times in arrays of doubles, ids in arrays of 64-bit ints,
names, threads and args as indices into one list of distinct values. A trace of millions of events
then costs tens of bytes an event while it is read instead of hundreds. The first time the table is
read (iterated, indexed) every event becomes its dataclass once and the columns are dropped: from
then on it is a list of events, each the same object on every read (the analysis keys by id())."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")
#: What an int column holds for None (and for ints outside 64 bits, which no trace id reaches).
NONE = -(1 << 63)
_LOW, _HIGH = -(1 << 63) + 1, (1 << 63) - 1


class Interned:
    """Distinct values and each one's index; unhashable ones (shared args dicts) by identity."""

    def __init__(self) -> None:
        self.values: list = []
        self.index: dict = {}

    def add(self, value: Any) -> int:
        key = value
        try:
            k = self.index.get(key)
        except TypeError:
            key = ("id", id(value))
            k = self.index.get(key)
        if k is None:
            k = self.index[key] = len(self.values)
            self.values.append(value)
        return k


def _int_or_none(value: int | None) -> int:
    return value if value is not None and _LOW <= value <= _HIGH else NONE


class EventTable(Sequence[T], Generic[T]):
    """A sequence of events of one dataclass, stored by column. `kinds` has one letter per field
    of `make`, in order: 'd' a float, 'q' an int or None, 'o' any value (interned)."""

    def __init__(self, make: Callable[..., T], kinds: str):
        self.make, self.kinds = make, kinds
        self.interned = [Interned() if k == "o" else None for k in kinds]
        self.columns = [array("i") if k == "o" else array(k) for k in kinds]
        self._put = [i.add if i is not None else (float if k == "d" else _int_or_none)
                     for i, k in zip(self.interned, kinds, strict=True)]
        self._appends = [c.append for c in self.columns]
        self._made: list[T] | None = None

    def append(self, *values: Any) -> None:
        """Add one event, its fields in the dataclass's order."""
        if self._made is not None:
            self._made.append(self.make(*values))
            return
        for add, put, value in zip(self._appends, self._put, values, strict=True):
            add(put(value))

    def events(self) -> list[T]:
        """Every event as its dataclass, made once (the columns dropped then)."""
        if self._made is None:
            self._made = [self._row(raw) for raw in zip(*self.columns, strict=True)]
            self.columns = [array(c.typecode) for c in self.columns]
            self.interned = [None] * len(self.kinds)
        return self._made

    def field(self, k: int) -> Iterator[Any]:
        """Field `k` of every event, in order, without making the events."""
        if self._made is not None:
            key = list(self.make.__dataclass_fields__)[k]
            return (getattr(e, key) for e in self._made)
        kind, interned = self.kinds[k], self.interned[k]
        if kind == "o":
            return (interned.values[v] for v in self.columns[k])
        if kind == "q":
            return (None if v == NONE else v for v in self.columns[k])
        return iter(self.columns[k])

    def __len__(self) -> int:
        return len(self._made) if self._made is not None else len(self.columns[0])

    def _row(self, raw: tuple) -> T:
        out = []
        for kind, interned, value in zip(self.kinds, self.interned, raw, strict=True):
            if kind == "o":
                out.append(interned.values[value])
            else:
                out.append(None if kind == "q" and value == NONE else value)
        return self.make(*out)

    def __getitem__(self, i):
        return self.events()[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self.events())

    def __repr__(self) -> str:
        return f"<{len(self)} {getattr(self.make, '__name__', 'event')}s by column>"

    def nbytes(self) -> int:
        """Bytes the columns hold (not counting the distinct values)."""
        return sum(c.itemsize * len(c) for c in self.columns)
