"""Meta kernels run once per distinct call: outputs of a repeated call rebuilt from the first.

On the meta device an op's outputs (shapes, strides, dtypes) are a pure function of its inputs'
metadata and its other arguments: no data exists. torch computes them with Python meta kernels
and refs (type promotion, broadcasting, stride propagation), about 0.1 ms an op, and a model of
identical layers asks the same questions thousands of times. During a capture, an op called
again with the same metadata gets fresh outputs of the recorded layout (`empty_strided`, a C++
call) instead of its meta kernel.

Only ops that are safe to answer this way are: those that write no argument and return no alias
(their outputs are new storages), whose every tensor argument and output is a plain strided meta
tensor, and whose outputs are exactly what `empty_strided` makes (offset 0, a storage of the
minimal size). The key holds every argument (scalars with their type, so 1, 1.0 and True differ)
and torch's default dtype (factories read it); anything unhashable (a symbolic size) is not
memoised. A memo lives for one capture.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rooflinekit.stages.capture.liveness import tensors_in

_META = torch.device("meta")
_STRIDED = torch.strided
#: Argument types that go into a key as (type, value).
_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
#: Ops that draw random numbers: left to run (their generator's state is theirs to advance).
_SEEDED = getattr(torch.Tag, "nondeterministic_seeded", None)


def memoisable(func, writes_or_aliases: bool) -> bool:
    """Whether calls of op overload `func` may be answered from the memo (module doc)."""
    return not writes_or_aliases and not (_SEEDED is not None and _SEEDED in getattr(func, "tags", ()))


class _Skip(Exception):
    """An argument this memo does not key (a subclass, a symbolic size, a non-meta tensor)."""


def _tensor_key(t: torch.Tensor) -> tuple:
    if not t.is_meta or t.layout is not _STRIDED or type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise _Skip
    return (t.shape, t.stride(), t.dtype, t.storage_offset(), t.is_conj(), t.is_neg())


def _key(value) -> object:
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_key(v) for v in value))
    if isinstance(value, _SCALARS):
        return (type(value), value)
    raise _Skip


def _minimal_bytes(t: torch.Tensor) -> int:
    """The storage size empty_strided gives a tensor of t's shape, strides and dtype."""
    if t.numel() == 0:
        return 0
    return (1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))) * t.element_size()


def _layout(out, inputs: set[int]):
    """(shape, stride, dtype) of each output, or None when empty_strided would not make it."""
    tensors = (out,) if isinstance(out, torch.Tensor) else out
    if not isinstance(tensors, tuple) or not tensors:
        return None
    layout = []
    for t in tensors:
        if type(t) is not torch.Tensor or not t.is_meta or t.layout is not _STRIDED:
            return None
        storage = t.untyped_storage()
        if (t.storage_offset() != 0 or storage._cdata in inputs or t.is_conj() or t.is_neg()
                or storage.nbytes() != _minimal_bytes(t)):
            return None
        layout.append((tuple(t.shape), tuple(t.stride()), t.dtype))
    return isinstance(out, torch.Tensor), tuple(layout)


class MetaMemo:
    """Outputs of meta op calls, by the call's key, for one capture (module doc)."""

    def __init__(self) -> None:
        self._layouts: dict[tuple, tuple] = {}
        self.hits = 0
        self.misses = 0

    def call(self, func, run: Callable, args: tuple, kwargs: dict):
        """run(*args, **kwargs), or its outputs rebuilt when this call was seen before."""
        try:
            key = (id(func), torch.get_default_dtype(), _key(args), tuple((k, _key(v)) for k, v in kwargs.items()) if kwargs else None)
            layout = self._layouts.get(key)
        except (_Skip, TypeError, RuntimeError):  # unkeyable: a subclass, a symbolic size, sparse
            return run(*args, **kwargs)
        if layout is not None:
            self.hits += 1
            single, shapes = layout
            outs = tuple(torch.empty_strided(s, st, dtype=dt, device=_META) for s, st, dt in shapes)
            return outs[0] if single else outs
        out = run(*args, **kwargs)
        self.misses += 1
        inputs = {t.untyped_storage()._cdata for t in tensors_in((args, kwargs), depth=3)}
        found = _layout(out, inputs)
        if found is not None:
            self._layouts[key] = found
        return out

