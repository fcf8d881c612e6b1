"""Pure roofline placement: intensity, attainable rate, bound, time bound, bound MFU."""

from __future__ import annotations

from typing import Protocol

from rooflinekit.core.report import Placement


class Roof(Protocol):
    """What placement reads of a hardware entry (a `rooflinekit.stages.hardware.HardwareSpec`, which
    imports this module for `ridge`)."""

    @property
    def memory_bandwidth(self) -> float: ...

    def peak(self, dtype_key: str) -> float: ...


def ridge(peak: float, bandwidth: float) -> float:
    """The ridge point I* = peak / bandwidth in FLOP/B: the intensity where a roofline's slope meets
    its peak (below it a workload is memory-bound)."""
    return peak / bandwidth


def intensity(flops: float, nbytes: float) -> float | None:
    """Arithmetic intensity in FLOP/B; None when no bytes move (undefined, not infinite)."""
    if nbytes <= 0:
        return None
    return flops / nbytes


def attainable(intensity_: float | None, peak: float, bandwidth: float) -> float:
    """attainable(I) = min(peak, I * bandwidth)."""
    if intensity_ is None:
        return peak
    return min(peak, intensity_ * bandwidth)


def time_bound(flops: float, nbytes: float, peak: float, bandwidth: float) -> float:
    """Lower bound on execution time: max(flops / peak, bytes / bandwidth)."""
    return max(flops / peak, nbytes / bandwidth)


def bound_of(flops: float, nbytes: float, intensity_: float | None, ridge: float) -> str:
    """"memory" below the ridge, "compute" at or above it (or when nothing moves), "none" for no work."""
    if flops <= 0 and nbytes <= 0:
        return "none"
    if intensity_ is None or intensity_ >= ridge:
        return "compute"
    return "memory"


def op_figures(flops: float, nbytes: float, peak: float, bandwidth: float) -> tuple[float | None, str, float]:
    """(intensity, bound, time_bound_s) of `place`, without building a Placement: the report's
    per-op rows need only these, for every one of 10^4 ops."""
    i = flops / nbytes if nbytes > 0 else None
    return i, bound_of(flops, nbytes, i, ridge(peak, bandwidth)), max(flops / peak, nbytes / bandwidth)


def place(flops: float, nbytes: float, peak: float, bandwidth: float, dtype: str) -> Placement:
    """Place one workload of `dtype` on the roofline of (peak, bandwidth)."""
    i = intensity(flops, nbytes)
    att = attainable(i, peak, bandwidth)
    return Placement(
        flops=flops,
        bytes=nbytes,
        intensity=i,
        attainable_flops=att,
        bound=bound_of(flops, nbytes, i, ridge(peak, bandwidth)),
        time_bound_s=time_bound(flops, nbytes, peak, bandwidth),
        mfu_bound=att / peak if flops > 0 else 0.0,
        dtype=dtype,
    )


def place_on(hw: Roof, dtype_key: str, flops: float, nbytes: float) -> Placement:
    """Place on a hardware entry's roofline for one dtype (its peak, or the fallback's)."""
    return place(flops, nbytes, hw.peak(dtype_key), hw.memory_bandwidth, dtype_key)


def reaches_ridge(value: float | None, ridge: float) -> bool:
    """An intensity at or above the ridge; None (no bytes moved) is compute-bound, as in roofline.place."""
    return value is None or value >= ridge
