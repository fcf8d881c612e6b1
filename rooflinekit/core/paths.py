"""Module-path helpers shared by reports, tables and charts (no torch import: the CLI stays light)."""

from __future__ import annotations

import re

_LAYER_INDEX = re.compile(r"(?<![^.])\d+(?![^.\s:,])")


def layer_pattern(text: str) -> str:
    """Module paths in `text` with layer indices replaced by '*': layers.3.attn -> layers.*.attn."""
    return _LAYER_INDEX.sub("*", text)
