"""Repeated layers: the layers of a model's stacks that equal an earlier one, and skipping them.

A layer whose modules, attributes and parameters equal an earlier layer's (`fingerprint`) can stand
in for it: under `skipping(layer_repeats(model))` it returns that layer's output without running, so a
design capture runs one layer of each kind (rooflinekit.stages.fitted_capture, a sweep's fits;
rooflinekit.analyses.stepfit, a plan's step models; rooflinekit.transforms.pipeline, the stages of --pp).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch

from rooflinekit.core.skips import skipping_layers
from rooflinekit.core.swap import own_attribute
from rooflinekit.stages.fitting import FitError

#: Attributes that number a layer rather than configure it (transformers' layer_idx).
_INDEX_WORDS = ("idx", "index", "layer_id", "layer_num")


def _simple(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, tuple) and all(_simple(v) for v in value)


def fingerprint(module: torch.nn.Module) -> tuple:
    """What makes two layers count alike: every submodule's class, its plain attributes (but those
    that number the layer), its parameters' and buffers' shapes and dtypes."""
    parts = []
    for rel, m in module.named_modules():
        attrs = tuple(sorted((k, repr(v)) for k, v in vars(m).items()
                             if not k.startswith("_") and _simple(v)
                             and not any(w in k.lower() for w in _INDEX_WORDS)))
        params = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in m.named_parameters(recurse=False))
        buffers = tuple((n, tuple(b.shape), str(b.dtype)) for n, b in m.named_buffers(recurse=False))
        parts.append((rel, type(m).__module__, type(m).__qualname__, attrs, params, buffers))
    return tuple(parts)


@dataclass
class LayerRepeats:
    """Layer stacks (ModuleList, Sequential) of a model: each child's representative, the first
    child of its stack with the same fingerprint (itself when none is earlier)."""

    rep: dict[str, str] = field(default_factory=dict)  # child path -> representative's path
    modules: dict[str, torch.nn.Module] = field(default_factory=dict)  # child path -> module
    _owners: dict[str, str | None] = field(default_factory=dict)

    @property
    def skipped(self) -> list[str]:
        return [c for c, r in self.rep.items() if c != r]

    def owner(self, path: str) -> str | None:
        """The stack child a module path lies in (itself included), or None."""
        try:
            return self._owners[path]
        except KeyError:
            pass
        p, found = path, None
        while p:
            if p in self.rep:
                found = p
                break
            p = p.rpartition(".")[0]
        self._owners[path] = found
        return found


def layer_repeats(model: torch.nn.Module) -> LayerRepeats:
    """The repeated layers of `model`; stacks inside a stack's child run with their layer."""
    repeats = LayerRepeats()
    for path, module in model.named_modules():
        if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        if any(path.startswith(child + ".") for child in repeats.rep):
            continue
        children = [(f"{path}.{name}" if path else name, child) for name, child in module.named_children()]
        if len(children) < 2:
            continue
        first: dict[tuple, str] = {}
        for child_path, child in children:
            repeats.rep[child_path] = first.setdefault(fingerprint(child), child_path)
            repeats.modules[child_path] = child
    repeats._owners.clear()
    return repeats


@contextmanager
def skipping(repeats: LayerRepeats) -> Iterator[None]:
    """Layers that have an earlier equal layer return its output (of this forward) without running,
    its hidden states replaced by their own input's (`_passed_through`), so that the next layer that
    runs reads what the last run layer wrote: the serving view fuses a layer's residual add with the
    norm of the layer that reads it, which must be a run layer for every run layer."""
    skipped = repeats.skipped
    outputs: dict[str, object] = {}
    handles = []

    def keep(rep: str) -> Callable:
        def hook(_module, _args, output):
            outputs[rep] = output
        return hook

    def stand_in(rep: str, child: str) -> Callable:
        def forward(*args, **kwargs):
            if rep not in outputs:
                raise FitError(f"{child} ran before {rep}, the layer it stands for")
            return _passed_through(outputs[rep], args, kwargs)
        return forward

    try:
        with ExitStack() as patches:
            for rep in dict.fromkeys(repeats.rep[c] for c in skipped):
                handles.append(repeats.modules[rep].register_forward_hook(keep(rep)))
            for child in skipped:
                patches.enter_context(own_attribute(repeats.modules[child], "forward", stand_in(repeats.rep[child], child)))
            with skipping_layers({child: repeats.rep[child] for child in skipped}):  # inputs (a loader's KV cache) may leave these layers' parts empty
                yield
    finally:
        for handle in handles:
            handle.remove()


def _passed_through(output: object, args: tuple, kwargs: dict) -> object:
    """A stand-in layer's output: its representative's `output` with the hidden states (a tensor,
    or a tuple's first) replaced by the layer's own hidden-state input of the same shape; `output`
    as it is when there is none."""
    hidden = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")
    if not isinstance(hidden, torch.Tensor):
        return output
    if isinstance(output, torch.Tensor):
        return hidden if hidden.shape == output.shape and hidden.dtype == output.dtype else output
    if type(output) is tuple and output and isinstance(output[0], torch.Tensor) \
            and output[0].shape == hidden.shape and output[0].dtype == hidden.dtype:
        return (hidden, *output[1:])
    return output
