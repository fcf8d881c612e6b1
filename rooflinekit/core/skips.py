"""The layers a capture stands in for: a sweep's design captures run one layer of each repeated
stack and skip its equals (rooflinekit.stages.repeated_layers.skipping). Code that prepares per-layer inputs
(a loader plugin filling a KV cache) may leave the skipped layers' parts empty: nothing reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

_SKIPPED: ContextVar[Mapping[str, str]] = ContextVar("rooflinekit_skipped_layers", default=MappingProxyType({}))


def skipped_layers() -> frozenset[str]:
    """Module paths of the layers whose forward the capture in progress stands in for (empty
    outside a sweep's design captures)."""
    return frozenset(_SKIPPED.get())


def stand_ins() -> Mapping[str, str]:
    """Skipped layer path -> the path of the layer that ran for it (empty outside design captures
    and their transforms): a format transform gives a skipped layer's parameters the stored size
    of its representative's, so that the weights held count every layer."""
    return _SKIPPED.get()


def under(path: str, roots: frozenset[str]) -> bool:
    """Whether module `path` is one of `roots` or lies inside one."""
    while path:
        if path in roots:
            return True
        path = path.rpartition(".")[0]
    return False


@contextmanager
def skipping_layers(reps: Mapping[str, str]) -> Iterator[None]:
    """skipped_layers() is `reps`' keys and stand_ins() is `reps` inside the block."""
    token = _SKIPPED.set(MappingProxyType(dict(reps)))
    try:
        yield
    finally:
        _SKIPPED.reset(token)
