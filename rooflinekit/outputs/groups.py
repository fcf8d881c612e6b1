"""Repeated layers folded into one row or point: members of one name pattern with equal figures.

Tables and charts both show `model.layers.*.mlp (x28)` rather than 28 identical rows. Members
are grouped by their name with layer indices starred (layers.*.mlp); a group whose members differ
(DeepSeek's dense first layers and its MoE layers) is split into classes of equal members, each
labelled with its index ranges (layers.0-2.mlp (x3), layers.3-60.mlp (x58)), so that a folded
row is always the figures of real, identical layers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from rooflinekit.core.paths import layer_pattern

T = TypeVar("T")

#: Two members are equal when every figure of their keys agrees this closely (relative).
TOLERANCE = 1e-9

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


@dataclass(frozen=True)
class Group(Generic[T]):
    """Equal members of one name pattern, in their original order, and the label they share."""

    label: str
    members: list[T]

    @property
    def count(self) -> int:
        return len(self.members)


def same(a: Sequence, b: Sequence, tolerance: float = TOLERANCE) -> bool:
    """Equal keys: numbers within `tolerance` relative, anything else exactly."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
            if abs(x - y) > tolerance * max(abs(x), abs(y)):
                return False
        elif x != y:
            return False
    return True


def runs(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (the first three runs, then '..')."""
    spans: list[list[int]] = []
    for i in sorted(set(indices)):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = [str(a) if a == b else f"{a}-{b}" for a, b in spans]
    return ",".join(text[:3]) + (",.." if len(text) > 3 else "")


def class_label(pattern: str, names: list[str], whole: bool) -> str:
    """'layers.*.mlp (x32)' for a whole pattern, 'layers.0-2.mlp (x3)' for one class of it."""
    if len(names) == 1:
        return names[0]
    count = f" (x{len(names)})"
    if whole:
        return pattern + count
    positions = [[int(m.group()) for m in _INDEX.finditer(name)] for name in names]
    if any(len(p) != len(positions[0]) for p in positions) or not positions[0]:
        return pattern + count
    parts = iter(runs([p[i] for p in positions]) for i in range(len(positions[0])))
    return re.sub(r"(?<=\.)\*(?=\.|$)", lambda _m: next(parts), pattern) + count


def fold(items: Sequence[T], name: Callable[[T], str], key: Callable[[T], Sequence]) -> list[Group[T]]:
    """`items` folded: one group per class of equal `key` among the items of one name pattern.

    Groups come in the order of their first member; an item alone keeps its own name.
    """
    patterns: dict[str, list[list[T]]] = {}
    order: list[tuple[str, int]] = []
    for item in items:
        pattern = layer_pattern(name(item))
        classes = patterns.setdefault(pattern, [])
        home = next((c for c in classes if same(key(c[0]), key(item))), None)
        if home is None:
            classes.append([item])
            order.append((pattern, len(classes) - 1))
        else:
            home.append(item)
    out = []
    for pattern, i in order:
        classes = patterns[pattern]
        members = classes[i]
        # a class that holds every layer of its pattern is starred too (two different ops of each layer)
        every = {name(m) for c in classes for m in c}
        whole = len(classes) == 1 or {name(m) for m in members} == every
        out.append(Group(class_label(pattern, [name(m) for m in members], whole), members))
    return out
