"""Human formatting of SI quantities (FLOPs, bytes, seconds) for tables."""

from __future__ import annotations

_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """Format `value` with an SI prefix: si(3.35e12, 'B/s') -> '3.35 TB/s'."""
    if value is None:
        return "-"
    if value == 0:
        return f"0 {unit}".strip()
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".strip()


def seconds(value: float | None) -> str:
    """Format a duration: 1.2e-5 -> '12.0 us'."""
    if value is None:
        return "-"
    for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {suffix}"
    return f"{value * 1e9:.3g} ns"
