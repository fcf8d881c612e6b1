"""The layers a capture stands in for: a sweep's design captures run one layer of each repeated
stack and skip its equals (rooflinekit.stages.fit.skipping). Code that prepares per-layer inputs
(a loader plugin filling a KV cache) may leave the skipped layers' parts empty: nothing reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SKIPPED: ContextVar[frozenset[str]] = ContextVar("rooflinekit_skipped_layers", default=frozenset())


def skipped_layers() -> frozenset[str]:
    """Module paths of the layers whose forward the capture in progress stands in for (empty
    outside a sweep's design captures)."""
    return _SKIPPED.get()


def under(path: str, roots: frozenset[str]) -> bool:
    """Whether module `path` is one of `roots` or lies inside one."""
    while path:
        if path in roots:
            return True
        path = path.rpartition(".")[0]
    return False


@contextmanager
def skipping_layers(paths: Iterable[str]) -> Iterator[None]:
    """skipped_layers() is `paths` inside the block."""
    token = _SKIPPED.set(frozenset(paths))
    try:
        yield
    finally:
        _SKIPPED.reset(token)
