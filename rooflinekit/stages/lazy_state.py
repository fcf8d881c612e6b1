"""Caches the model fills lazily inside the step: counted apart, not as the step's work.

A transformers cache the user builds and passes (`StaticCache(config=..., max_cache_len=...)`)
allocates each layer's slots at the layer's first update, inside the forward: an `aten.zeros` of the
whole cache that a serving engine runs once at start-up, never in a step. `lazy_layers` finds such
layers among the inputs (duck-typed: an object with a `layers` list whose entries have
`is_initialized` False and a `lazy_initialization` method; transformers is not imported), and
`counted_apart` wraps their `lazy_initialization` for the duration of one forward so that its ops
run unrecorded and the storages it makes count as there before the step (as a cache allocated
beforehand is). What was set aside is tallied, and `LazyTally.note` says so in the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch

from rooflinekit.core.swap import own_attribute
from rooflinekit.stages.capture import active_recorder
from rooflinekit.stages.modelled import suppressed

#: How deep into lists, tuples and dicts of the inputs a cache is looked for.
_DEPTH = 2


@dataclass
class LazyTally:
    """The lazily initialised layers of one forward: (cache class, layer index, bytes allocated)."""

    layers: list[tuple[str, int, int]] = field(default_factory=list)

    def note(self) -> str | None:
        """The report's sentence, or None when nothing was initialised in the step."""
        if not self.layers:
            return None
        classes = ", ".join(dict.fromkeys(cls for cls, _, _ in self.layers))
        total = sum(nbytes for _, _, nbytes in self.layers)
        return (f"the cache passed to the model ({classes}) is filled lazily by transformers: "
                f"{len(self.layers)} of its layers were allocated and zeroed inside the profiled step "
                f"({total / 1e6:,.3f} MB written by their lazy initialisation, aten.zeros/aten.empty); those ops "
                f"are counted apart: not in the step's ops, bytes or time (an engine allocates its cache once, "
                f"before any step), their storages taken as the preallocated cache")


def _caches(value, depth: int = _DEPTH) -> Iterator[object]:
    if isinstance(getattr(value, "layers", None), list):
        yield value
        return
    if depth <= 0:
        return
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _caches(item, depth - 1)


def lazy_layers(inputs) -> list[tuple[object, int, object]]:
    """(cache, layer index, layer) of every layer among `inputs` that is not yet initialised."""
    found = []
    for cache in _caches(inputs):
        for idx, layer in enumerate(cache.layers):
            if getattr(layer, "is_initialized", True) is False and callable(
                    getattr(layer, "lazy_initialization", None)):
                found.append((cache, idx, layer))
    return found


def _tensors(layer: object) -> dict[int, torch.Tensor]:
    return {id(t): t for t in vars(layer).values() if isinstance(t, torch.Tensor)}


def _wrapped(cache: object, idx: int, layer: object, tally: LazyTally):
    original = layer.lazy_initialization

    def lazy_initialization(*args, **kwargs):
        before = _tensors(layer)
        with suppressed():
            out = original(*args, **kwargs)
        made = [t for key, t in _tensors(layer).items() if key not in before]
        rec = active_recorder()
        if rec is not None:
            rec.live.existing(*made)  # there before the step, as a preallocated cache's slots are
        tally.layers.append((type(cache).__name__, idx, sum(t.numel() * t.element_size() for t in made)))
        return out

    return lazy_initialization


@contextmanager
def counted_apart(inputs) -> Iterator[LazyTally]:
    """For one forward on `inputs`: the lazy initialisation of their caches' layers unrecorded and
    tallied (the tally's `note` says what was set aside)."""
    tally = LazyTally()
    with ExitStack() as patches:
        for cache, idx, layer in lazy_layers(inputs):  # an instance's own method, put back after
            patches.enter_context(own_attribute(layer, "lazy_initialization", _wrapped(cache, idx, layer, tally)))
        yield tally
