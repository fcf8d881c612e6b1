"""Exact sums over whole numbers of piecewise-linear terms: the larger of two lines, a floor under
them, and the first place a monotone condition holds. Step models sum a kernel's time over a
generation with these instead of step by step (rooflinekit.stages.stepmodel)."""

from __future__ import annotations

import math


def max_linear_sum(a: float, b: float, c: float, d: float, n: int, floor: float = -math.inf) -> float:
    """sum over i = 0..n-1 of max(a + b*i, c + d*i, floor), exactly: the larger line (two linear
    terms cross at most once), raised to `floor` where both lie below it (a run of whole i)."""
    total = two_lines(a, b, c, d, n)
    if floor == -math.inf or n <= 0:
        return total
    # where both lines are below the floor: i < (floor - a) / b for a rising line, and so on
    lo, hi = 0, n
    for p, q in ((a, b), (c, d)):
        if q == 0.0:
            if p >= floor:
                hi = lo
            continue
        at = (floor - p) / q  # where p + q*i == floor (clamped: a slope a hair from 0 puts it far away)
        at = min(max(at, -1.0), n + 1.0) if math.isfinite(at) else (n + 1.0 if at > 0 else -1.0)
        if q > 0:
            hi = min(hi, math.ceil(at))  # p + q*i < floor  <=>  i < at
        else:
            lo = max(lo, math.floor(at) + 1)  # p + q*i < floor  <=>  i > at
    lo, hi = max(lo, 0), min(hi, n)
    while hi > lo and max(a + b * (hi - 1), c + d * (hi - 1)) >= floor:  # rounding at the ends
        hi -= 1
    while hi > lo and max(a + b * lo, c + d * lo) >= floor:
        lo += 1
    if hi <= lo:
        return total
    below = two_lines(a + b * lo, b, c + d * lo, d, hi - lo)
    return total - below + floor * (hi - lo)


def two_lines(a: float, b: float, c: float, d: float, n: int) -> float:
    """sum over i = 0..n-1 of max(a + b*i, c + d*i), exactly (two linear terms cross at most once)."""

    def series(p: float, q: float, lo: int, hi: int) -> float:  # sum over i in [lo, hi) of p + q*i
        count = hi - lo
        return p * count + q * (lo + hi - 1) * count / 2 if count > 0 else 0.0

    if b == d:
        return series(max(a, c), b, 0, n)
    cross = (c - a) / (b - d)  # where a + b*i == c + d*i (infinite for slopes a hair apart)
    split = 0 if cross <= 0 else n if cross >= n else math.ceil(cross)
    # below the crossing the term with the smaller slope is larger
    low_first = (a, b) if b < d else (c, d)
    high_first = (c, d) if b < d else (a, b)
    return series(*low_first, 0, split) + series(*high_first, split, n)


# -- building ------------------------------------------------------------------------------------


def first_true(lo: int, hi: int, holds, default: int | None = None) -> int:
    """The least i in [lo, hi] where `holds(i)`, which once true stays true (bisection); `default`
    (else hi) where it holds nowhere."""
    if not holds(hi):
        return hi if default is None else default
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
