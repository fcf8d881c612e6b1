"""Storage serial numbers: the capture's name for the memory an op reads or writes."""

from __future__ import annotations

import itertools

import torch

from rooflinekit.core import compat


class Storages:
    """Stable serial numbers for storages, robust to address reuse after a storage dies.

    A storage is known by its StorageImpl's address (what a weak reference's cdata holds). A
    storage with memory is held weakly, and a dead one's address, once reused, gets a new number.
    A meta storage owns no memory: it is held (until the capture ends), so its address cannot be
    reused and a lookup needs no liveness check (the same numbers, at a fraction of the cost).
    """

    def __init__(self) -> None:
        self._refs: dict[int, tuple[object, int, bool]] = {}  # address -> (ref or storage, number, held)
        self._next = itertools.count(1)

    def id(self, t: torch.Tensor) -> int:
        """The number of t's storage (-1 for a tensor without one: sparse, nested)."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return -1
        key = storage._cdata
        entry = self._refs.get(key)
        if entry is not None and (entry[2] or not compat.storage_expired(entry[0])):
            return entry[1]
        if t.is_meta:
            entry = (storage, next(self._next), True)
        else:
            entry = (compat.storage_ref(t), next(self._next), False)
        self._refs[key] = entry
        return entry[1]

    def release(self) -> None:
        """Forget every storage (and let go of the meta ones held): the capture is over."""
        self._refs.clear()
