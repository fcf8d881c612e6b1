"""Module-path helpers shared by reports, tables and charts (no torch import: the CLI stays light)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

#: A dotted name in running text: module paths (layers.3.attn) and numbers (8.3, 3.35e12) alike.
_DOTTED = re.compile(r"[\w*]+(?:\.[\w*]+)+")
#: A component that makes a dotted name a module path: a name, not a number.
_NAME = re.compile(r"[A-Za-z_]\w*|\*")

#: Module rows' default depth where a model has no repeated layer stack (its children's children).
DEFAULT_DEPTH = 3


def _star_indices(match: re.Match) -> str:
    parts = match.group().split(".")
    if not any(_NAME.fullmatch(p) for p in parts):
        return match.group()  # a number (8.3, 3.35e12, 2.13.0): left as written
    return ".".join("*" if p.isdigit() else p for p in parts)


def layer_pattern(text: str) -> str:
    """Module paths in `text` with layer indices replaced by '*': layers.3.attn -> layers.*.attn.

    Numbers are left as they are ("kv_b_proj: 8.3 TFLOP" keeps its 8.3); `text` that is a bare
    index (a Sequential's child "0") is one.
    """
    if text.isdigit():
        return "*"
    return _DOTTED.sub(_star_indices, text)


def layer_stack(paths: Iterable[str]) -> str | None:
    """The repeated layer stack of a model from its module paths: the prefix before the first
    layer index that most paths run through (model.layers for model.layers.3.mlp.up), or None."""
    counts: Counter[str] = Counter()
    for path in paths:
        parts = path.split(".")
        first = next((i for i, p in enumerate(parts) if p.isdigit()), None)
        if first is not None:
            counts[".".join(parts[:first])] += 1
    return max(counts, key=lambda k: (counts[k], -len(k))) if counts else None


def default_depth(paths: Iterable[str]) -> int:
    """Module rows cut where the answer is: the layer stack's children and one level below them
    (model.layers.*.self_attn, .mlp, .input_layernorm); DEFAULT_DEPTH where there is no stack."""
    stack = layer_stack(paths)
    if stack is None:
        return DEFAULT_DEPTH
    return (len(stack.split(".")) if stack else 0) + 2
