"""Shape curves of the efficiency table: a kernel class's achievable fractions as a function of its size.

A class of `efficiency.toml` may carry `[classes.<name>.curve]`: a `key` (the size it is read at:
`rows`, a GEMM's output rows M, or a grouped expert GEMM's tokens per expert; `query_len`, a fused
attention's query length), the sizes `at`, and per size a `compute` and/or `bandwidth` fraction
(`compute_<dtype>` / `bandwidth_<dtype>` lists for a format measured apart), each point's source in
`sources`. Between points a fraction is interpolated linearly in log(size); outside them it is held
at the nearest point. A kernel whose size is not recorded keeps the class's constant fractions.

Expected time stays non-decreasing in the size by construction (the fractions are priced at their
envelope, below), given that a kernel's FLOPs grow at least in proportion to its size and its bytes
do not fall as it grows (true of the keys above):

- compute: the fraction at size x is min(f(x), f(p) x / p for every curve point p <= x), so
  x / fraction never falls: a fraction rising faster than the size (a larger problem cheaper) is
  held to the size's growth;
- bandwidth: the fraction at size x is the lowest the curve takes at or below x (a GEMM's weights,
  most of its bytes, do not grow with its rows, so a rising bandwidth fraction would make more rows
  cheaper).

The table's `[experts]` curve (key `expert_bytes`: one expert's weight matrix on the GPU, in bytes)
gives a grouped expert GEMM's bandwidth fraction by how wide its experts are, and its `[weights]`
curve (key `weight_bytes`: a dense GEMM's weight matrix on the GPU) a dense GEMM's by how large its
matrix is: the bytes grow with those sizes, so their envelope is the compute one (the fraction never
rises faster than the size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rooflinekit.core.units import si

#: The size each class's curve is read at (a curve on any other key is refused).
CURVE_KEYS = {"gemm_large": "rows", "gemm_small": "rows", "attention_prefill": "query_len",
              "attention_decode": "query_len", "experts": "expert_bytes", "weights": "weight_bytes"}
#: Keys whose sizes are bytes (written as such in words).
BYTE_KEYS = frozenset({"expert_bytes", "weight_bytes"})


@dataclass(frozen=True)
class Curve:
    """One class's fractions at sizes `at`: `compute` / `bandwidth` (default format) and per format."""

    key: str
    at: tuple[float, ...]
    compute: tuple[float, ...] | None = None
    bandwidth: tuple[float, ...] | None = None
    compute_by_dtype: dict[str, tuple[float, ...]] = field(default_factory=dict)
    bandwidth_by_dtype: dict[str, tuple[float, ...]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()


def micro_batch_size(curve: Curve | None, size: float | None) -> float | None:
    """A kernel's size in one of two micro-batches (two-batch overlap): a GEMM's rows and an expert
    GEMM's tokens per expert halve; an attention's query length does not (the split is by sequence)."""
    if curve is None or size is None or curve.key != "rows":
        return size
    return size / 2


def _points(value: object, where: str, n: int | None) -> tuple[float, ...]:
    if not isinstance(value, list) or not value or (n is not None and len(value) != n):
        raise ValueError(f"{where} must be a list of {n or 'one or more'} numbers")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{where} must hold positive numbers, not {v!r}")
        out.append(float(v))
    return tuple(out)


def parse_curve(entry: dict, name: str) -> Curve:
    """The curve of class `name` from its TOML table (ValueError / KeyError where it is not one)."""
    where = f"{name}.curve"
    key = entry["key"]
    if key != CURVE_KEYS.get(name):
        raise ValueError(f"{where}.key must be {CURVE_KEYS.get(name)!r} for {name}, not {key!r}"
                         if name in CURVE_KEYS else f"{where}: {name} takes no curve")
    at = _points(entry["at"], f"{where}.at", None)
    if any(b <= a for a, b in zip(at, at[1:], strict=False)):
        raise ValueError(f"{where}.at must be increasing")
    lists = {}
    for k, v in entry.items():
        if k == "compute" or k == "bandwidth" or k.startswith(("compute_", "bandwidth_")):
            lists[k] = _points(v, f"{where}.{k}", len(at))
            if max(lists[k]) > 1:
                raise ValueError(f"{where}.{k} must hold fractions in (0, 1]")
        elif k not in ("key", "at", "sources"):
            raise ValueError(f"{where}: unknown key {k!r}")
    if not lists:
        raise ValueError(f"{where} needs a compute or bandwidth list")
    sources = entry["sources"]
    if not isinstance(sources, list) or len(sources) != len(at) or not all(isinstance(s, str) and s.strip()
                                                                           for s in sources):
        raise ValueError(f"{where}.sources must give one source per point of at")
    return Curve(key=key, at=at, compute=lists.get("compute"), bandwidth=lists.get("bandwidth"),
                 compute_by_dtype={k.removeprefix("compute_"): v for k, v in lists.items() if k.startswith("compute_")},
                 bandwidth_by_dtype={k.removeprefix("bandwidth_"): v for k, v in lists.items()
                                     if k.startswith("bandwidth_")},
                 sources=tuple(sources))


def interpolate(at: tuple[float, ...], values: tuple[float, ...], x: float) -> float:
    """The curve through (at, values) at x: linear in log(size) between points, flat outside."""
    if x <= at[0]:
        return values[0]
    if x >= at[-1]:
        return values[-1]
    i = next(j for j in range(1, len(at)) if x < at[j])
    share = math.log(x / at[i - 1]) / math.log(at[i] / at[i - 1])
    return values[i - 1] + share * (values[i] - values[i - 1])


def compute_at(at: tuple[float, ...], values: tuple[float, ...], x: float) -> float:
    """The compute fraction at size x, at its envelope: x / fraction never falls as x grows."""
    f = interpolate(at, values, x)
    return min([f, *(v * x / p for p, v in zip(at, values, strict=True) if p <= x)])


def bandwidth_at(at: tuple[float, ...], values: tuple[float, ...], x: float) -> float:
    """The bandwidth fraction at size x, at its envelope: the lowest at or below x."""
    return min([interpolate(at, values, x), *(v for p, v in zip(at, values, strict=True) if p <= x)])


#: What each key measures, in words.
KEY_WORDS = {"rows": "output rows M (an expert GEMM's tokens per expert)", "query_len": "query length",
             "expert_bytes": "one expert's weight matrix on the GPU",
             "weight_bytes": "its weight matrix on the GPU"}


def curve_words(curve: Curve) -> str:
    """A curve in one clause: its key, sizes and the range of each fraction."""
    def span(values: tuple[float, ...]) -> str:
        return f"{min(values):g}-{max(values):g}" if min(values) != max(values) else f"{values[0]:g}"

    parts = [f"{what} {span(v)}" for what, v in (("compute", curve.compute), ("bandwidth", curve.bandwidth)) if v]
    parts += [f"{what} {span(v)} for {d}" for what, table in (("compute", curve.compute_by_dtype),
                                                              ("bandwidth", curve.bandwidth_by_dtype))
              for d, v in table.items()]
    ends = [si(v, "B") for v in (curve.at[0], curve.at[-1])] if curve.key in BYTE_KEYS else \
        [f"{v:g}" for v in (curve.at[0], curve.at[-1])]
    return (f"by {KEY_WORDS.get(curve.key, curve.key)} on a curve of {len(curve.at)} points from {ends[0]} to "
            f"{ends[1]} ({', '.join(parts)}; log-interpolated, priced at its non-decreasing envelope; a "
            "source per point in the table's curve), where the size is not recorded ")
