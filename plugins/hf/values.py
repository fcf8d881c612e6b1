"""Values a model reads from tensors on the meta device, computed from the inputs that determine them.

A meta tensor holds no data, so model code that reads one (`.item()`, `bool(t)`, `.tolist()`,
`.cpu()`, `torch.nonzero`, a boolean index) fails there. Many such reads are of values the inputs
alone determine: Reformer's largest position (`position_ids.max().item()`), XLM's sequence
lengths (`(input_ids != pad).sum(1)`, checked with `.max().item()`), X-MOD's rows per language
(`lang_ids == i`, from the default language). While `KnownValues` is open (around a model's
forward on meta), each op whose tensor arguments are all known (made by a factory such as
`arange` or `ones`, given as CPU tensors, declared with `declare`, or computed from known ones)
leaves a recipe on its meta outputs: the op and its arguments. A read of a meta tensor with a
recipe evaluates the recipe on CPU, small integer work, and answers with that value; the op's
cost is recorded as usual, the recipes cost nothing until a read needs them.

Values derived from parameters or activations (a router's choice) have no recipe: they still fail,
and need a module model. A tensor written in place after its recipe was taken (its version
counter moved) is unknown too, as is one past `MAX_ELEMENTS`.

The assumption is the inputs': the loader's token ids are all 0 (no padding token, no language
ids), its positions `0..S-1` per sequence; each value answered is named in a note with the model
line that read it.

Imports from rooflinekit only torch's dispatch-mode internals, through `rooflinekit.plugin`.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable

import torch

from rooflinekit.plugin import TorchDispatchMode, disable_torch_dispatch

#: The attribute holding a meta tensor's recipe.
RECIPE = "_rooflinekit_recipe"
#: A value larger than this (elements) is not computed: a read of it fails as it would have.
MAX_ELEMENTS = 1 << 24
NOTE = ("meta device: values the model reads from tensors ({reads}) were computed from the inputs, which "
        "the workload fixes (token ids 0, no padding, positions 0..S-1 per sequence, the default language "
        "where the model takes one)")

_aten = torch.ops.aten
_META = torch.device("meta")
_CPU = torch.device("cpu")


class Unknown(Exception):
    """A value no recipe gives."""


class Recipe:
    """How a meta tensor's value is computed on CPU: `make()` (a leaf), or `func` over `args` and
    `kwargs` (output `index` of a multi-output op), valid while the tensor's version is `version`.
    The arguments are held as they were when the op ran: each meta tensor as its recipe then
    (`_source`), so a later write to it does not change what this value was computed from."""

    __slots__ = ("make", "func", "args", "kwargs", "index", "version", "value")

    def __init__(self, version: int, make: Callable | None = None, func=None, args=(), kwargs=None,
                 index: int | None = None):
        self.version, self.make, self.func, self.args, self.kwargs = version, make, func, args, kwargs or {}
        self.index, self.value = index, None

    def evaluate(self) -> torch.Tensor:
        if self.value is None:
            if self.make is not None:
                value = self.make()
            else:
                args = [_evaluated(a) for a in self.args]
                if self.func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
                    args[0] = args[0].clone()  # written in place: the earlier value stays as it was
                kwargs = {k: _evaluated(v) for k, v in self.kwargs.items()}
                out = self.func(*args, **kwargs)
                value = out[self.index] if self.index is not None else out
            self.value = value
        return self.value


class View:
    """A view of a tensor with a recipe (its base's), by size, stride and offset."""

    __slots__ = ("base", "size", "stride", "offset")

    def __init__(self, base: Recipe, t: torch.Tensor):
        self.base, self.size, self.stride, self.offset = base, t.size(), t.stride(), t.storage_offset()

    def evaluate(self) -> torch.Tensor:
        return self.base.evaluate().as_strided(self.size, self.stride, self.offset)


def declare(tensor: torch.Tensor, make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Give a meta tensor its value: `make()`, a function making the same tensor on CPU (the
    loader's inputs). Returns the tensor."""
    if isinstance(tensor, torch.Tensor) and tensor.is_meta:
        setattr(tensor, RECIPE, Recipe(tensor._version, make=make))
    return tensor


def on_cpu(make: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """`make` run with CPU as the default device (for `declare`: the loader's own constructor)."""

    def made() -> torch.Tensor:
        with torch.device("cpu"):
            return make()

    return made


def known(make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """`make()` (on the default device), declared with its own value: `make` run on CPU."""
    return declare(make(), on_cpu(make))


def _source(t: torch.Tensor):
    """What a meta tensor's value comes from now: its recipe, a view of its base's, or None (unknown);
    a CPU tensor is its own value."""
    if not t.is_meta:
        return t if t.device.type == "cpu" else None
    if t.numel() > MAX_ELEMENTS:
        return None
    recipe = getattr(t, RECIPE, None)
    if recipe is not None:
        return recipe if recipe.version == t._version else None
    base = t._base
    recipe = getattr(base, RECIPE, None) if base is not None else None
    if recipe is not None and recipe.version == base._version:
        return View(recipe, t)
    return None


def value(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU value of a meta tensor, from its recipe (or its base's, for a view); Unknown if none."""
    source = _source(tensor)
    if source is None:
        raise Unknown("a value computed from parameters or activations")
    if isinstance(source, torch.Tensor):
        return source
    with disable_torch_dispatch(), torch.no_grad():
        return source.evaluate()


def _evaluated(arg):
    if isinstance(arg, (Recipe, View)):
        return arg.evaluate()
    if isinstance(arg, (list, tuple)):
        return type(arg)(_evaluated(a) for a in arg)
    if isinstance(arg, torch.device) and arg == _META:
        return _CPU
    return arg


def _sources(arg):
    """`arg` with each tensor in it replaced by its source; raises Unknown for one without."""
    if isinstance(arg, torch.Tensor):
        source = _source(arg)
        if source is None:
            raise Unknown
        return source
    if isinstance(arg, (list, tuple)):
        return type(arg)(_sources(a) for a in arg)
    return arg


#: Reads answered from a recipe: Tensor.item() / bool(t) / int(t), a copy to CPU (.tolist(), .cpu()),
#: nonzero (torch.nonzero, a boolean index).
_SCALAR = (_aten._local_scalar_dense.default, _aten.is_nonzero.default)
_NONZERO = (_aten.nonzero.default,)
_COPY = (_aten._to_copy.default,)
#: Indexing ops whose boolean indices (a mask) are taken to positions first, as torch does.
_INDEXING = (_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default, _aten._index_put_impl_.default)


def _is_mask(index) -> bool:
    return isinstance(index, torch.Tensor) and index.is_meta and index.dtype in (torch.bool, torch.uint8)


def _site() -> str:
    """file:line of the model code that read the value: the innermost frame in transformers' models,
    else the innermost outside torch and rooflinekit."""
    torch_dir = os.path.dirname(torch.__file__)
    frames = [f for f in reversed(traceback.extract_stack()) if not os.path.abspath(f.filename).startswith(torch_dir)]
    models = f"{os.sep}transformers{os.sep}models{os.sep}"
    skipped = (f"{os.sep}rooflinekit{os.sep}", f"{os.sep}rooflinekit_plugins{os.sep}", f"{os.sep}plugins{os.sep}hf{os.sep}")
    frame = next((f for f in frames if models in f.filename), None) or next(
        (f for f in frames if not any(s in os.path.abspath(f.filename) for s in skipped)), None)
    return f"{os.path.basename(frame.filename)}:{frame.lineno}" if frame is not None else "?"


class KnownValues(TorchDispatchMode):
    """Recipes on meta outputs of known inputs, and reads of them answered (module docstring)."""

    def __init__(self, notes: list[str]):
        super().__init__()
        self.notes = notes
        self.reads: dict[tuple[str, str], list[str]] = {}

    def _answered(self, what: str, shown) -> None:
        """Name the read (its kind, the model line, each distinct value) in the note."""
        key = (what, _site())
        seen = self.reads.setdefault(key, [])
        if str(shown) in seen:
            return
        seen.append(str(shown))
        reads = "; ".join(f"{kind} at {site}: {', '.join(values)}" for (kind, site), values in self.reads.items())
        prefix = NOTE.split("(", 1)[0]
        self.notes[:] = [n for n in self.notes if not n.startswith(prefix)]
        self.notes.append(NOTE.format(reads=reads))

    def _read(self, func, args, kwargs):
        t = args[0]
        if not (isinstance(t, torch.Tensor) and t.is_meta):
            return NotImplemented
        if func in _COPY and (kwargs.get("device") is None or torch.device(kwargs["device"]) == _META):
            return NotImplemented  # a cast on meta: it runs (a copy out to another device is the read)
        try:
            v = value(t)
        except Unknown:
            return NotImplemented
        if func in _SCALAR:
            answer = v.item() if func is _aten._local_scalar_dense.default else bool(v)
            self._answered("a scalar read", answer)
            return answer
        if func in _NONZERO:
            found = torch.nonzero(v)
            self._answered("nonzero", f"{found.shape[0]} of {v.numel()}")
            out = torch.empty(found.shape, dtype=found.dtype, device=_META)
            setattr(out, RECIPE, Recipe(out._version, make=lambda: found))
            return out
        cast = kwargs.get("dtype")
        self._answered("a copy to CPU", f"{tuple(v.shape)} values")
        return v.to(dtype=cast) if cast is not None else v.clone()

    def _positions(self, indices) -> list | None:
        """Boolean indices (masks) with known values as the long index tensors torch makes of them
        (a k-dimensional mask: k of them), or None where a mask's value is unknown."""
        out = []
        for index in indices:
            if not _is_mask(index):
                out.append(index)
                continue
            try:
                found = torch.nonzero(value(index))
            except Unknown:
                return None
            self._answered("a boolean index", f"{found.shape[0]} of {index.numel()} selected")
            for column in found.unbind(1):
                made = torch.empty(column.shape, dtype=column.dtype, device=_META)
                setattr(made, RECIPE, Recipe(made._version, make=lambda c=column: c))
                out.append(made)
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SCALAR or func in _NONZERO or func in _COPY:
            with disable_torch_dispatch():
                answer = self._read(func, args, kwargs)
            if answer is not NotImplemented:
                return answer
        if func in _INDEXING and len(args) > 1 and any(_is_mask(i) for i in args[1]):
            with disable_torch_dispatch():
                indices = self._positions(args[1])
            if indices is not None:
                args = (args[0], indices, *args[2:])
        try:  # the sources before the op runs (an in-place op's input as it was)
            held = (_sources(args), {k: _sources(v) for k, v in kwargs.items()})
        except Unknown:
            held = None
        out = func(*args, **kwargs)
        if held is not None:
            _leave_recipes(func, held, out)
        return out


def _leave_recipes(func, held, out) -> None:
    args, kwargs = held
    mutable = func._schema.is_mutable
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and o.is_meta:
            version = o._version + (1 if mutable else 0)  # an in-place write moves the counter on return
            setattr(o, RECIPE, Recipe(version, func=func, args=args, kwargs=kwargs,
                                      index=i if isinstance(out, (tuple, list)) else None))
