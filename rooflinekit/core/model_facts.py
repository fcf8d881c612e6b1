"""Facts of a model that do not change between its captures, computed once per sweep.

A sweep captures one built model several times (rooflinekit.analyses.sweep: its fit's design
captures and check); each capture would otherwise walk every module of the model again (its
module tree, parameters and buffers, plugins' answers about each module), which for a skipped-
layer design capture costs more than the forward it records. Inside `using(facts)` those walks
are answered from `facts` for that model; elsewhere `cached` computes every time, as before.
Nothing may change the model's modules or parameters inside the block (patched forwards are fine).
Plugins use `cached` and `module_tree` too (rooflinekit.plugin), for their own walks of the model;
rooflinekit's own facts are kept under `fact(name)` keys, which no plugin's key can equal. Only
pure computations are cached: a side effect (such as `model.eval()`) would run once per sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # no torch import here: plugins import this through rooflinekit.plugin
    import torch

T = TypeVar("T")


class ModelFacts:
    """The cached facts of one model, by key."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.values: dict[Hashable, object] = {}


_ACTIVE: ContextVar[ModelFacts | None] = ContextVar("rooflinekit_model_facts", default=None)


@contextmanager
def using(facts: ModelFacts) -> Iterator[None]:
    """Answer `cached` for facts.model from `facts` inside the block."""
    token = _ACTIVE.set(facts)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def cached(model: torch.nn.Module, key: Hashable, compute: Callable[[], T]) -> T:
    """compute(), once per `key` while `using` facts of `model` (module doc)."""
    facts = _ACTIVE.get()
    if facts is None or facts.model is not model:
        return compute()
    try:
        return facts.values[key]  # type: ignore[return-value]
    except KeyError:
        value = facts.values[key] = compute()
        return value


class _Own:
    """The namespace of rooflinekit's own facts (a key no plugin can build)."""


_OWN = _Own()


def fact(name: str) -> tuple[_Own, str]:
    """The key of one of rooflinekit's own facts."""
    return (_OWN, name)


def module_tree(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """list(model.named_modules()), cached while `using` facts of `model`."""
    return cached(model, fact("tree"), lambda: list(model.named_modules()))
