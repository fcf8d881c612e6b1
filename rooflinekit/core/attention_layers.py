"""Which attention layers a report could not account for, named for a sentence (torch-free: the text
report's memory line and the memory section's notes use the same words)."""

from __future__ import annotations

from collections import Counter

from rooflinekit.core.paths import layer_pattern
from rooflinekit.core.report import Report


def uncounted_layers(report: Report) -> list[str]:
    """The attention layers whose cache the memory section leaves out (no plugin gave their cache
    bytes: attention not recognised), in execution order."""
    return list(dict.fromkeys(
        row.module for row in report.attention
        if row.cache_bytes_per_token is None and not (getattr(row, "cache_bytes_per_sequence", None)
                                                      or (row.extra or {}).get("cache_bytes_per_sequence"))))


def layer_names(names: list[str], most: int = 4) -> str:
    """Module paths for a sentence: each one up to `most`, else folded by layer pattern
    (layers.*.attn (x32))."""
    if len(names) <= most:
        return ", ".join(names)
    folded = Counter(layer_pattern(n) for n in names)
    return ", ".join(f"{p} (x{n})" if n > 1 else p for p, n in folded.items())
