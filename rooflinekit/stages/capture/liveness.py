"""Live storages during a capture: what the forward allocates, and when each allocation is gone.

The peak of activation memory is measured here, not modelled. A storage is *allocated by the
forward* when an op writes it for the first time and it is neither a parameter or buffer nor a
tensor passed in (the inputs, a KV cache object's tensors). At every allocation the earlier ones
are checked for liveness (on meta: a reference count above the one held here, since a meta storage
has no memory to watch; elsewhere: a weak reference that does not keep the memory alive), so the
live set, and its peak, is exact at op granularity: live bytes rise only at allocations.

The tracker keeps storage numbers (the capture's sids) and allocation ordinals only; bytes come
from the records afterwards (rooflinekit.stages.memory), so a transformed capture (one GPU's share
under tensor parallelism) gives its own peak from the same liveness.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from rooflinekit.core.compat import storage_use_count, untyped_storage_expired

#: The end of an allocation freed only by the garbage collector after the forward.
GARBAGE = -1

#: How deep the walk for tensors passed in goes into containers and objects (a cache object's
#: layers' key and value tensors are three levels down).
INPUT_DEPTH = 5


def _key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def tensors_in(value, depth: int = INPUT_DEPTH, seen: set[int] | None = None) -> Iterable[torch.Tensor]:
    """Every tensor reachable from `value` through tuples, lists, dicts and object attributes."""
    seen = set() if seen is None else seen
    if id(value) in seen or depth < 0:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        yield value
        return
    if isinstance(value, (str, bytes, int, float, bool, type(None), torch.nn.Module)):
        return
    if isinstance(value, dict):
        children = value.values()
    elif isinstance(value, (list, tuple, set)):
        children = value
    else:
        children = getattr(value, "__dict__", {}).values()
    for child in children:
        yield from tensors_in(child, depth - 1, seen)


class LiveStorages:
    """Allocations of one forward, in order: their storage numbers and when each died.

    `sids[i]` is the storage of allocation i; `ends[i]` the number of allocations made before it
    was first seen dead (None: alive when the forward returned; GARBAGE: held only by garbage).
    """

    def __init__(self) -> None:
        self.sids: list[int] = []
        self.ends: list[int | None] = []
        self._known: set[int] = set()  # storage addresses passed in, or allocated and alive
        self._meta: dict[int, tuple[torch.UntypedStorage, int]] = {}  # address -> (held, allocation)
        self._weak: dict[int, tuple[StorageWeakRef, int]] = {}  # the same, for storages with memory

    def existing(self, *values) -> None:
        """Storages that are there before the forward: not allocations when first written."""
        for t in tensors_in(values, INPUT_DEPTH + 1):
            key = _key(t)
            if key is not None:
                self._known.add(key)

    def _sweep(self) -> None:
        """Close the allocations that died since the last one (a meta storage held only here)."""
        dead = [key for key in self._meta if storage_use_count(key) <= 1]
        if self._weak:
            dead += [key for key, (ref, _) in self._weak.items() if untyped_storage_expired(ref.cdata)]
        now = len(self.sids)
        for key in dead:
            entry = self._meta.pop(key, None) or self._weak.pop(key)
            self.ends[entry[1]] = now
            self._known.discard(key)

    def written(self, tensors: Iterable[torch.Tensor], sid_of: Callable[[torch.Tensor], int],
                params: set[int]) -> None:
        """An op wrote `tensors`: any storage not known before is an allocation of the forward."""
        known = self._known
        swept = False
        for t in tensors:
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            key = storage._cdata
            if key in known:
                continue
            if not swept:  # what was freed since the last allocation is gone before this one
                self._sweep()
                swept = True
            known.add(key)
            sid = sid_of(t)
            if sid in params:
                continue
            if t.is_meta:
                self._meta[key] = (storage, len(self.sids))
            else:
                self._weak[key] = (StorageWeakRef(storage), len(self.sids))
            self.sids.append(sid)
            self.ends.append(None)

    def finish(self) -> list[tuple[int, int | None]]:
        """(storage, end) per allocation, in order; what is still alive stays open (None).

        An allocation held only by garbage (a reference cycle: a caught exception's traceback
        holding the frames of the forward, as torch's first import of a module inside an op makes)
        would be freed by Python's collector, which the capture keeps off: the young garbage is
        collected once here, and what that frees is marked GARBAGE (taken as freed after its last
        use, rooflinekit.stages.memory)."""
        self._sweep()
        if self._meta or self._weak:
            gc.collect(0)  # the objects made during the forward only: the capture keeps the collector off
            dead = [key for key in self._meta if storage_use_count(key) <= 1]
            dead += [key for key, (ref, _) in self._weak.items() if untyped_storage_expired(ref.cdata)]
            for key in dead:
                entry = self._meta.pop(key, None) or self._weak.pop(key)
                self.ends[entry[1]] = GARBAGE
        out = list(zip(self.sids, self.ends, strict=True))
        self._meta.clear()
        self._weak.clear()
        self._known.clear()
        return out
