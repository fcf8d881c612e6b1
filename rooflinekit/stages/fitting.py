"""Model-free numeric fits of step counts, shared by sweeps, plans and step models.

Exact polynomial fits over a design of (batch, context) points: a count that is a polynomial of
known degrees is recovered exactly (in rationals) from as many captures as it has terms, then
evaluated anywhere (a sweep's points, rooflinekit.stages.fitted_capture; a plan's step models,
rooflinekit.stages.stepmodel). Affine fits in batch of a whole step's FLOPs and bytes, from which a
sweep solves its critical batch (rooflinekit.analyses.critical_batch). What runs the model at the
design points lives with the captures (rooflinekit.analyses.gridfit, rooflinekit.analyses.stepfit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from math import gcd, lcm

from rooflinekit.stages.roofline import intensity, reaches_ridge

#: The largest relative difference between a fit's prediction and a capture that counts as equal.
TOLERANCE = 1e-9

#: (flops, bytes) of the whole step as a function of batch, at one context.
Probe = Callable[[int], tuple[float, float]]


class FitError(Exception):
    """The counts cannot be fitted: ops that do not align, or a fit that misses the check capture."""


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to the larger magnitude (0 when both are 0)."""
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else 0.0


# -- exact polynomials ------------------------------------------------------------------------


@dataclass(frozen=True)
class Poly:
    """sum(numerators[k] * monomial[k]) / denominator, in exact integer arithmetic until the division."""

    numerators: tuple[int, ...]
    denominator: int

    def at(self, monomials: tuple[int, ...]) -> float:
        total = 0
        for n, m in zip(self.numerators, monomials, strict=True):
            if n:
                total += n * m
        return total / self.denominator  # int / int: correctly rounded


class Design:
    """Design points batches x contexts, and the polynomials through samples taken there.

    The monomials are B^i S^j for i < len(batches) and j < len(contexts): as many as there are
    points, so the fit interpolates them exactly. Two batches and three contexts fit counts linear
    in B and quadratic in S; with fewer contexts the fit is exact at those contexts only, which is
    all a caller evaluates there.
    """

    def __init__(self, batches: tuple[int, ...], contexts: tuple[int, ...]):
        if len(set(batches)) != len(batches) or len(set(contexts)) != len(contexts):
            raise ValueError(f"design points must be distinct: batches {batches}, contexts {contexts}")
        self.batches = tuple(batches)
        self.contexts = tuple(contexts)
        self.points = [(b, s) for s in self.contexts for b in self.batches]
        self.exponents = [(i, j) for j in range(len(self.contexts)) for i in range(len(self.batches))]
        self._inverse = _inverse([[Fraction(b ** i * s ** j) for i, j in self.exponents] for b, s in self.points])
        # the inverse as integers over one denominator: whole-number samples (most counts) are
        # fitted in integer arithmetic, the same polynomial as the fractions give
        self._scale = lcm(*(x.denominator for row in self._inverse for x in row))
        self._whole_inverse = [[int(x * self._scale) for x in row] for row in self._inverse]
        self._polys: dict[tuple[float, ...], int] = {}
        self.polys: list[Poly] = []
        self._last: tuple[tuple[int, int, int], list[float]] | None = None

    def monomials(self, batch: int, context: int) -> tuple[int, ...]:
        return tuple(batch ** i * context ** j for i, j in self.exponents)

    def poly(self, samples: tuple[float, ...]) -> int:
        """The index in `polys` of the polynomial through `samples` (one per point, in `points` order)."""
        index = self._polys.get(samples)
        if index is None and all(isinstance(v, (int, float)) and math.isfinite(v) and v == int(v) for v in samples):
            ys = [int(v) for v in samples]
            numerators = tuple(sum(a * y for a, y in zip(row, ys, strict=True) if y) for row in self._whole_inverse)
            common = gcd(*numerators, self._scale)
            index = self._polys[samples] = len(self.polys)
            self.polys.append(Poly(tuple(n // common for n in numerators), self._scale // common))
        elif index is None:
            try:
                ys = [Fraction(v) for v in samples]
            except (ValueError, OverflowError, TypeError):
                raise FitError(f"a count that is not a finite number ({samples})") from None
            coefficients = [sum((row[p] * ys[p] for p in range(len(ys)) if ys[p]), Fraction(0))
                            for row in self._inverse]
            denominator = lcm(*(c.denominator for c in coefficients))
            numerators = tuple(c.numerator * (denominator // c.denominator) for c in coefficients)
            index = self._polys[samples] = len(self.polys)
            self.polys.append(Poly(numerators, denominator))
        return index

    def values(self, batch: int, context: int) -> list[float]:
        """Every polynomial so far at (batch, context), by index (the last point's are kept)."""
        key = (batch, context, len(self.polys))
        if self._last is None or self._last[0] != key:
            monomials = self.monomials(batch, context)
            self._last = (key, [p.at(monomials) for p in self.polys])
        return self._last[1]


def _inverse(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    """The inverse of a small square matrix of Fractions (Gauss-Jordan, exact)."""
    n = len(matrix)
    rows = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if pivot is None:
            raise ValueError("singular design")
        rows[col], rows[pivot] = rows[pivot], rows[col]
        head = rows[col][col]
        rows[col] = [x / head for x in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col], strict=True)]
    return [row[n:] for row in rows]


# -- affine fits in batch ------------------------------------------------------------------


@dataclass(frozen=True)
class AffineFit:
    """F(B) = flops0 + B*flops_per_seq and bytes(B) = bytes0 + B*bytes_per_seq, from two batches."""

    flops0: float
    flops_per_seq: float
    bytes0: float
    bytes_per_seq: float
    batches: tuple[int, int]
    residual: float | None = None  # largest relative miss on the checked batches
    checked: tuple[int, ...] = ()

    @classmethod
    def through(cls, b1: int, p1: tuple[float, float], b2: int, p2: tuple[float, float]) -> AffineFit:
        f = (p2[0] - p1[0]) / (b2 - b1)
        k = (p2[1] - p1[1]) / (b2 - b1)
        return cls(p1[0] - b1 * f, f, p1[1] - b1 * k, k, (b1, b2))

    def flops(self, batch: float) -> float:
        return self.flops0 + batch * self.flops_per_seq

    def bytes(self, batch: float) -> float:
        return self.bytes0 + batch * self.bytes_per_seq

    def intensity(self, batch: float) -> float | None:
        return intensity(self.flops(batch), self.bytes(batch))

    @property
    def saturation(self) -> float:
        """The limit of F(B)/bytes(B) as B grows: f/k."""
        return math.inf if self.bytes_per_seq <= 0 else self.flops_per_seq / self.bytes_per_seq

    def miss(self, batch: int, point: tuple[float, float]) -> float:
        """Relative miss of the fit on a profiled point (the worse of FLOPs and bytes)."""
        flops, nbytes = point
        return max(abs(self.flops(batch) - flops) / flops if flops else 0.0,
                   abs(self.bytes(batch) - nbytes) / nbytes if nbytes else 0.0)

    def critical(self, ridge: float) -> int | None:
        """The smallest integer B >= 1 with F(B)/bytes(B) >= ridge, or None where none does."""
        if reaches_ridge(self.intensity(1), ridge):
            return 1
        slope = self.flops_per_seq - ridge * self.bytes_per_seq
        if slope <= 0:
            return None
        b = max(1, math.ceil((ridge * self.bytes0 - self.flops0) / slope - 1e-9))
        while not reaches_ridge(self.intensity(b), ridge):  # guard against rounding at the boundary
            b += 1
        while b > 1 and reaches_ridge(self.intensity(b - 1), ridge):
            b -= 1
        return b


def fit_affine(probe: Probe, batches: list[int]) -> AffineFit:
    """Fit through the smallest and largest batch; the residual is the worst miss on the others."""
    b1, b2 = batches[0], batches[-1]
    fit = AffineFit.through(b1, probe(b1), b2, probe(b2))
    inner = tuple(batches[1:-1])
    residual = max((fit.miss(b, probe(b)) for b in inner), default=None)
    return replace(fit, residual=residual, checked=inner)
