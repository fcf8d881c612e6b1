"""Bytes an op moves: the storage it actually touches, not the tensors it is handed.

Views and metadata ops are free, a broadcast (stride-0) dimension is read once, a tensor passed
twice is read once, an output that aliases an input (in-place ops, out=) is one write, not two,
a gather reads its source only where the output takes from it, and a partial write (index_put_,
scatter_) writes what it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from rooflinekit.stages.capture.schema import OpInfo

#: The capture's storage numbering (Storages.id).
SidOf = Callable[[torch.Tensor], int]


def unique_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor view addresses: stride-0 dims count once."""
    try:
        if t.is_contiguous():  # every element once (the common case, without walking the strides)
            return t.nbytes  # numel * element size
        strides = t.stride()
    except RuntimeError:  # sparse, nested: fall back to numel
        return t.numel() * t.element_size()
    n = 1
    for size, stride in zip(t.shape, strides, strict=False):
        if size == 0:
            return 0
        if stride != 0:
            n *= size
    return n * t.element_size()


def _view_key(t: torch.Tensor) -> tuple:
    """What makes two views of one storage the same view."""
    return t.storage_offset(), tuple(t.shape), t.stride()


def _read_before(t: torch.Tensor, sid: int, views: dict[int, list[torch.Tensor]], others: set[int]) -> bool:
    """Whether this view was read already by the op (then it counts once); notes it if not."""
    if sid < 0:  # no storage: known by identity
        if id(t) in others:
            return True
        others.add(id(t))
        return False
    same = views.get(sid)
    if same is None:
        views[sid] = [t]
        return False
    key = _view_key(t)  # a storage read twice: the same view (offset, shape, strides) counts once
    if any(_view_key(o) == key for o in same):
        return True
    same.append(t)
    return False


def reads(tensors, sid_of: SidOf, params: set[int],
          cap: dict[int, int] | None = None) -> tuple[list[tuple[int, float]], float]:
    """(storage, bytes) read from each distinct view among `tensors`, and the parameter bytes;
    `cap` bounds the bytes read from a tensor (by id): a gather's source, a partial write's target."""
    out: list[tuple[int, float]] = []
    param = 0.0
    views: dict[int, list[torch.Tensor]] = {}  # storage -> the views of it read so far
    others: set[int] = set()  # tensors without a storage, by identity
    for t in tensors:
        sid = sid_of(t)
        if _read_before(t, sid, views, others):
            continue
        nbytes = float(unique_bytes(t))
        if cap is not None and id(t) in cap:
            nbytes = min(nbytes, cap[id(t)])
        out.append((sid, nbytes))
        if sid in params:
            param += nbytes
    return out, param


def outputs(info: OpInfo, out) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The tensors an op returned, and those of them that are new (not an alias of an input)."""
    if isinstance(out, torch.Tensor):
        out_tensors = [out]
    elif isinstance(out, (list, tuple)):
        out_tensors = [t for t in out if isinstance(t, torch.Tensor)]
    else:
        out_tensors = []
    if not info.any_alias:
        return out_tensors, out_tensors
    aliases = info.returns_alias
    return out_tensors, [t for i, t in enumerate(out_tensors) if i >= len(aliases) or not aliases[i]]


def _operand_tensors(info: OpInfo, args: tuple, kwargs: dict):
    """(argument name, written, its tensors) per tensor-holding argument given, in schema order:
    positional, then keyword by name."""
    nargs = len(args)
    for i, arg_name, written in info.operands:
        if i < nargs:
            value = args[i]
        elif arg_name in kwargs:
            value = kwargs[arg_name]
        else:
            continue
        if isinstance(value, torch.Tensor):
            yield arg_name, written, (value,)
        elif isinstance(value, (list, tuple)):
            yield arg_name, written, [v for v in value if isinstance(v, torch.Tensor)]


class Operands:
    """An op's operands sorted by what the op does with them (split)."""

    __slots__ = ("inputs", "read_tensors", "writes", "cap")

    def __init__(self) -> None:
        self.inputs: list[torch.Tensor] = []  # tensors of the arguments the op does not write
        self.read_tensors: list[torch.Tensor] = []  # everything it reads, written arguments too
        self.writes: list[tuple[int, float]] = []  # (storage, bytes) written
        self.cap: dict[int, int] | None = None  # id(tensor) -> the most bytes read from it

    def _bound(self, t: torch.Tensor, nbytes: int) -> None:
        if self.cap is None:
            self.cap = {}
        self.cap[id(t)] = nbytes

    def read(self, tensors, cap: int | None) -> None:
        """Tensors of an argument the op only reads; `cap` bounds each one's read (a gather's source)."""
        for t in tensors:
            self.read_tensors.append(t)
            self.inputs.append(t)
            if cap is not None:
                self._bound(t, cap)

    def write(self, tensors, read_too: bool, sid_of: SidOf) -> None:
        """Tensors of an argument the op writes whole (in place, out=), reading them first or not."""
        for t in tensors:
            self.writes.append((sid_of(t), float(unique_bytes(t))))
            if read_too:
                self.read_tensors.append(t)

    def write_part(self, tensors, source, read_too: bool, sid_of: SidOf) -> None:
        """Tensors an op writes in part (index_put_, scatter_): the bytes of `source`, what is written."""
        for t in tensors:
            nbytes = (math.prod(source.shape) * t.element_size() if isinstance(source, torch.Tensor)
                      else unique_bytes(t))
            self.writes.append((sid_of(t), float(nbytes)))
            if read_too:
                self.read_tensors.append(t)
                self._bound(t, nbytes)


def _argument(info: OpInfo, args: tuple, kwargs: dict, name: str):
    """The value of argument `name` of a call (None when not given)."""
    for i, (arg_name, _) in enumerate(info.args):
        if arg_name == name:
            return args[i] if i < len(args) else kwargs.get(name)
    return None


def split(info: OpInfo, args: tuple, kwargs: dict, out_bytes: int, sid_of: SidOf) -> Operands:
    """Sort an op's operands into inputs, reads and writes; `out_bytes` bounds a gather's read."""
    ops = Operands()
    partial = info.partial
    source = _argument(info, args, kwargs, partial[0]) if partial is not None else None
    for arg_name, written, tensors in _operand_tensors(info, args, kwargs):
        if not written:
            ops.read(tensors, out_bytes if arg_name == info.gather_arg else None)
        elif partial is not None:
            ops.write_part(tensors, source, partial[1], sid_of)
        else:  # an out= argument is overwritten, never read
            ops.write(tensors, info.reads_written and arg_name not in info.out_args, sid_of)
    return ops


def written_args(operands: tuple[tuple[int, str], ...], args, kwargs,
                 new_outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors an op wrote: its new outputs, then its written `operands` (in place, out=)."""
    written = new_outputs
    for i, arg_name in operands:
        value = args[i] if i < len(args) else kwargs.get(arg_name)
        if isinstance(value, torch.Tensor):
            written = [*written, value]
        elif isinstance(value, (list, tuple)):
            written = [*written, *(v for v in value if isinstance(v, torch.Tensor))]
    return written
