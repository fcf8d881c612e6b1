"""The one number formatter of every table, header and chart: SI prefixes, never scientific notation.

`si` (FLOPs, bytes, rates), `seconds` (durations), `ratio` (intensities, x-factors) and `share`
(fractions as percentages) all keep three significant digits and print plain decimals: no
"1.696e+04", no "0.00%" for a share that is not zero.
"""

from __future__ import annotations

import math

_PREFIXES = [(1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"),
             (1e3, "k")]
#: The smallest share `share` prints as a number; a non-zero share below it is "<0.01%".
SMALLEST_SHARE = 0.00005


def _round_sig(value: float, digits: int) -> float:
    """`value` rounded to `digits` significant digits (999.7 -> 1000.0 at three)."""
    if value == 0:
        return 0.0
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def plain(value: float, digits: int = 3) -> str:
    """`value` with `digits` significant digits in plain decimals, trailing zeros dropped:
    4.0 -> '4', 0.00123 -> '0.00123', 123456 -> '123456'."""
    value = _round_sig(float(value), digits)
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _bad(value) -> str | None:
    """'-' for a missing or NaN value, '-inf'/'inf' for infinities, None for a finite number."""
    if value is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return None


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """`value` with an SI prefix: si(3.35e12, 'B/s') -> '3.35 TB/s', si(0.5, 'B') -> '0.5 B'."""
    bad = _bad(value)
    if bad is not None:
        return bad
    if value == 0:
        return f"0 {unit}".strip()
    value = _round_sig(float(value), digits)
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{plain(value / scale, digits)} {prefix}{unit}"
    return f"{plain(value, digits)} {unit}".strip()


def seconds(value: float | None, digits: int = 3) -> str:
    """A duration in s, ms, us, ns or ps: 1.2e-5 -> '12 us'; a run over 1000 s in whole seconds."""
    bad = _bad(value)
    if bad is not None:
        return bad
    if value == 0:
        return "0 s"
    value = _round_sig(float(value), digits)
    for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(value) >= scale:
            return f"{plain(value / scale, digits)} {suffix}"
    return f"{plain(value * 1e12, digits)} ps"


def ratio(value: float | None, digits: int = 3) -> str:
    """A ratio (FLOP/B, x-factor): plain below 1000, SI-prefixed above ('22.4 k'), '<0.001' for a
    positive value too small for three decimals."""
    bad = _bad(value)
    if bad is not None:
        return bad
    if 0 < abs(value) < 0.001:
        return "<0.001" if value > 0 else ">-0.001"
    if abs(_round_sig(float(value), digits)) >= 1000:
        return si(value, "", digits)
    return plain(value, digits)


def share(value: float | None) -> str:
    """A fraction as a percentage with two decimals; '<0.01%' for a non-zero share under 0.005%."""
    bad = _bad(value)
    if bad is not None:
        return bad
    if value == 0:
        return "0%"
    if 0 < value < SMALLEST_SHARE:
        return "<0.01%"
    return f"{100 * value:.2f}%"
