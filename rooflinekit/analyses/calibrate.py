"""Calibrate: measure achievable memory bandwidth and matmul throughput, save a user hardware entry.

Method
------
- Bandwidth: `dst.copy_(src)` of one large buffer (default 1 GiB-class on CUDA, 128 MB on CPU, far
  beyond the caches); each copy reads and writes the buffer, so it moves 2 * size bytes. Several
  trials of a few copies each; the entry takes the best trial (the achievable ceiling), the median
  is kept beside it.
- Matmul: square `a @ b` per dtype (fp32, bf16, fp16, plus tf32 on CUDA), 2*n^3 FLOPs each. On
  CUDA n = 8192 (4096 for fp32); on CPU n grows from 256 until one product takes ~20 ms (at most
  2048), each size timed after a warm-up product (the first pays for thread start-up and
  allocation), so the whole CPU calibration stays within a few seconds. Best trial again.
- Checks: the copy buffer is at least MIN_SIZE_MB (smaller copies time call overhead and caches)
  and fits the device's memory twice over; a measured ceiling outside the hardware database's
  plausible bounds (rooflinekit.stages.hardware.BOUNDS) is refused, never saved: the bandwidth
  stops the calibration, a matmul dtype is dropped and named.
- CUDA timings use CUDA events around the loop; CPU timings use perf_counter.

The entry is a normal hardware TOML file with `calibrated = true` (so per-number sources may be
omitted, though they are written), `calibrated_from` naming the datasheet entry it refines, and
sources saying "measured by rooflinekit calibrate on <date>, <method>".
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rooflinekit.core.errors import UserError
from rooflinekit.core.files import write_atomic
from rooflinekit.core.swap import swapped
from rooflinekit.stages.detect import detect, find_entry
from rooflinekit.stages.hardware import (
    HardwareFileError,
    check_value,
    hardware_db,
    load_file,
    user_hardware_dir,
)

_TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

#: The smallest copy buffer, MB: below it a copy stays in the caches and times the call overhead
#: (a 1e-6 MB copy "measures" a few MB/s).
MIN_SIZE_MB = 1.0


@dataclass
class Timing:
    best_s: float
    median_s: float
    trials: int
    iters: int


@dataclass
class Calibration:
    """What one calibration measured (rates are the best trial)."""

    device: str
    device_name: str
    date: str
    bandwidth: float
    bandwidth_median: float
    copy_bytes: int
    copy: Timing
    peaks: dict[str, float] = field(default_factory=dict)
    peaks_median: dict[str, float] = field(default_factory=dict)
    matmul_n: dict[str, int] = field(default_factory=dict)
    matmul: dict[str, Timing] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    memory_bytes: float | None = None
    datasheet: str | None = None
    wall_s: float = 0.0


def _timer(device: str) -> Callable[[Callable[[], None], int], float]:
    """Seconds for `iters` calls of fn, device-synchronised."""
    if device.startswith("cuda"):

        def run(fn, iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) * 1e-3

        return run

    def run_cpu(fn, iters):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return time.perf_counter() - start

    return run_cpu


def _trials(run, fn, iters: int, trials: int) -> Timing:
    fn()  # warm-up
    per_iter = [run(fn, iters) / iters for _ in range(trials)]
    return Timing(best_s=min(per_iter), median_s=statistics.median(per_iter), trials=trials, iters=iters)


def measure_bandwidth(device: str, size_bytes: int, trials: int = 5, iters: int | None = None) -> tuple[float, float, Timing]:
    """(best B/s, median B/s, timing) of dst.copy_(src), counting read + write bytes."""
    n = max(1, size_bytes // 4)
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    run = _timer(device)
    if iters is None:
        iters = 10 if device.startswith("cuda") else 2
    timing = _trials(run, lambda: dst.copy_(src), iters, trials)
    moved = 2.0 * n * 4
    return _rate(moved, timing.best_s), _rate(moved, timing.median_s), timing


def _rate(amount: float, seconds: float) -> float:
    """amount / seconds; inf for a time the clock could not resolve (refused by the bounds check)."""
    return amount / seconds if seconds > 0 else math.inf


def measure_matmul(device: str, key: str, n: int | None = None, trials: int = 3) -> tuple[float, float, int, Timing]:
    """(best FLOP/s, median FLOP/s, n, timing) of an n x n matmul in dtype `key`."""
    dtype = _TORCH_DTYPES[key]
    cuda = device.startswith("cuda")
    run = _timer(device)
    tf32 = swapped(torch.backends.cuda.matmul, "allow_tf32", key == "tf32") if cuda else nullcontext()
    with tf32:
        if n is None:
            if cuda:
                n = 4096 if key == "fp32" else 8192
            else:
                n = 256
                while n < 2048:
                    a = torch.randn(n, n, dtype=dtype, device=device)
                    a @ a  # warm-up: the first product pays for thread start-up and allocation
                    t = min(run(lambda a=a: a @ a, 1) for _ in range(2))
                    if t >= 0.02:
                        break
                    n *= 2
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        out = torch.empty(n, n, dtype=dtype, device=device)
        once = run(lambda: torch.mm(a, b, out=out), 1)
        iters = max(1, min(50, int(0.05 / max(once, 1e-9)))) if cuda else max(1, min(5, int(0.1 / max(once, 1e-9))))
        timing = _trials(run, lambda: torch.mm(a, b, out=out), iters, trials)
    flops = 2.0 * n**3
    return _rate(flops, timing.best_s), _rate(flops, timing.median_s), n, timing


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _memory_bytes(device: str) -> float | None:
    if device.startswith("cuda"):
        return float(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_device(device: str) -> str:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise UserError(f"calibrate: unknown device '{device}': use cpu or cuda")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError("calibrate --device cuda: no CUDA device is available here (use --device cpu)")
    return device


def check_size_mb(size_mb: float | None) -> None:
    """A copy buffer size must be a finite positive number of MB (None: the device's default)."""
    if size_mb is None:
        return
    if not math.isfinite(size_mb):
        raise UserError(f"--size-mb must be a finite number of MB, got {size_mb}")
    if size_mb <= 0:
        raise UserError(f"--size-mb must be positive, got {size_mb:g}")
    if size_mb < MIN_SIZE_MB:
        raise UserError(f"--size-mb {size_mb:g} is below the {MIN_SIZE_MB:g} MB minimum: a copy that small "
                        "times call overhead and caches, not memory")


def check_size_fits(size_mb: float, device: str) -> None:
    """The copy needs two buffers of `size_mb`: refuse sizes past 80% of the device's memory."""
    memory = _memory_bytes(device)
    if memory and 2 * size_mb * 1e6 > 0.8 * memory:
        raise UserError(f"--size-mb {size_mb:g} does not fit {device}: the copy needs two buffers "
                        f"({2 * size_mb:g} MB) of its {memory / 1e6:.0f} MB; give a smaller --size-mb")


def check_output(output: str | os.PathLike) -> None:
    """The entry is found again only as a .toml file (`--hardware PATH` loads .toml paths)."""
    if not str(output).endswith(".toml"):
        raise UserError(f"calibrate --output {output}: the entry must be written to a .toml file "
                        "(--hardware loads only .toml paths)")


def calibrate(device: str | None = None, size_mb: float | None = None, dtypes: tuple[str, ...] | None = None,
              datasheet: str | None = None) -> Calibration:
    """Measure bandwidth and matmul throughput on `device` (cuda if available, else cpu)."""
    check_size_mb(size_mb)
    device = check_device(device)
    cuda = device.startswith("cuda")
    if size_mb is None:
        size_mb = 1024 if cuda else 128
    if dtypes is None:
        dtypes = ("fp32", "tf32", "bf16", "fp16") if cuda else ("fp32", "bf16", "fp16")
    unknown = [d for d in dtypes if d not in _TORCH_DTYPES or (d == "tf32" and not cuda)]
    if unknown:
        raise UserError(f"calibrate: cannot measure {', '.join(unknown)} on {device} "
                        f"(use {', '.join(k for k in _TORCH_DTYPES if cuda or k != 'tf32')})")
    check_size_fits(size_mb, device)
    start = time.perf_counter()
    size = int(size_mb * 1e6)
    try:
        bw, bw_med, copy = measure_bandwidth(device, size)
    except (RuntimeError, MemoryError) as exc:
        raise UserError(f"calibrate: copying {size_mb:g} MB failed on {device} ({exc}); try a smaller --size-mb") from None
    why = check_value("memory_bandwidth", bw)
    if why:
        raise UserError(f"calibrate: the measured memory bandwidth {why}; not saved (a timer too coarse "
                        f"for a {size_mb:g} MB copy? try a larger --size-mb)")
    cal = Calibration(
        device=device, device_name=device_name(device),
        date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
        bandwidth=bw, bandwidth_median=bw_med, copy_bytes=size, copy=copy,
        memory_bytes=_memory_bytes(device), datasheet=datasheet,
    )
    for key in dtypes:
        try:
            peak, med, n, timing = measure_matmul(device, key)
        except (RuntimeError, NotImplementedError, TypeError) as exc:  # dtype not supported here
            cal.skipped[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            continue
        why = check_value(f"peak_flops.{key}", peak)
        if why:  # a measurement no hardware entry may hold: not saved
            cal.skipped[key] = f"measured rate refused: {why}"
            continue
        cal.peaks[key], cal.peaks_median[key], cal.matmul_n[key], cal.matmul[key] = peak, med, n, timing
    if not cal.peaks:
        raise UserError(f"calibrate: no matmul dtype could be measured on {device}: "
                        + "; ".join(f"{k}: {v}" for k, v in cal.skipped.items()))
    cal.wall_s = time.perf_counter() - start
    return cal


def datasheet_entry(device: str, db) -> str | None:
    """The database entry for a CUDA device (NVML name first, then torch's name); none for CPUs."""
    if not device.startswith("cuda"):
        return None

    try:
        index = torch.device(device).index or 0
        gpus = detect(db)
        if index < len(gpus) and gpus[index].entry:
            return gpus[index].entry
    except UserError:
        pass
    spec = find_entry(torch.cuda.get_device_name(torch.device(device)), db)
    return spec.name if spec else None


def default_name(cal: Calibration) -> str:
    if cal.device.startswith("cuda"):
        return f"{cal.datasheet or cal.device_name} calibrated"
    return "CPU calibrated"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "calibrated"


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _toml_num(value: float) -> str:
    return repr(float(value))


def to_toml(cal: Calibration, name: str) -> str:
    """The hardware entry as TOML (schema in hardware_db/README.md; calibrated = true)."""
    mb = cal.copy_bytes / 1e6
    copy_method = (f"{'device-to-device' if cal.device.startswith('cuda') else 'memory-to-memory'} "
                   f"copy_ of a {mb:g} MB buffer, read + write bytes counted (2 x {mb:g} MB per copy), "
                   f"best of {cal.copy.trials} trials x {cal.copy.iters} copies "
                   f"(median {cal.bandwidth_median:.4g} B/s)")
    lines = [
        f"# Written by `rooflinekit calibrate --device {cal.device}` on {cal.date}.",
        f"# Measured on: {cal.device_name}. Re-run calibrate to refresh; edit `name` to rename.",
        f"name = {_toml_str(name)}",
        f"vendor = {_toml_str('NVIDIA' if cal.device.startswith('cuda') else 'CPU')}",
        "aliases = []",
        "calibrated = true",
    ]
    if cal.datasheet:
        lines.append(f"calibrated_from = {_toml_str(cal.datasheet)}")
    if cal.memory_bytes:
        lines.append(f"memory_bytes = {_toml_num(cal.memory_bytes)}")
    lines += [
        f"memory_bandwidth = {_toml_num(cal.bandwidth)}",
        "verified = true",
        "notes = " + _toml_str(
            f"Measured ceilings of {cal.device_name} ({cal.device}), not datasheet figures: "
            "achievable bandwidth of large copies and achievable dense matmul throughput."
            + (f" Datasheet entry: {cal.datasheet}." if cal.datasheet else "")
            + (f" Not measured: {', '.join(f'{k} ({v})' for k, v in cal.skipped.items())}." if cal.skipped else "")
        ),
        "",
        "[peak_flops]",
    ]
    lines += [f"{k} = {_toml_num(v)}" for k, v in cal.peaks.items()]
    lines += ["", "[sources]"]
    lines.append(f"memory_bandwidth = {_toml_str(f'measured by rooflinekit calibrate on {cal.date}, {copy_method}')}")
    if cal.memory_bytes:
        what = "torch.cuda.get_device_properties().total_memory" if cal.device.startswith("cuda") else "physical pages x page size (sysconf)"
        lines.append(f"memory_bytes = {_toml_str(f'reported by {what} on {cal.date}')}")
    for k, t in cal.matmul.items():
        n = cal.matmul_n[k]
        text = (f"measured by rooflinekit calibrate on {cal.date}, torch.mm of two {n}x{n} {k} matrices "
                f"(2*n^3 FLOPs{', TF32 allowed' if k == 'tf32' else ''}), best of {t.trials} trials x {t.iters} "
                f"(median {cal.peaks_median[k]:.4g} FLOP/s)")
        lines.append(f'"peak_flops.{k}" = {_toml_str(text)}')
    lines += [
        "",
        "[calibration]",
        f"device = {_toml_str(cal.device)}",
        f"device_name = {_toml_str(cal.device_name)}",
        f"date = {_toml_str(cal.date)}",
        f"torch = {_toml_str(torch.__version__)}",
        f"copy_bytes = {cal.copy_bytes}",
        f"copy_best_s = {_toml_num(cal.copy.best_s)}",
        f"copy_median_s = {_toml_num(cal.copy.median_s)}",
        f"bandwidth_median = {_toml_num(cal.bandwidth_median)}",
    ]
    for k in cal.matmul:
        lines.append(f"matmul_{k}_n = {cal.matmul_n[k]}")
        lines.append(f"matmul_{k}_median = {_toml_num(cal.peaks_median[k])}")
    lines.append(f"wall_s = {_toml_num(cal.wall_s)}")
    return "\n".join(lines) + "\n"


def default_path(name: str) -> Path:

    return user_hardware_dir() / f"{slug(name)}.toml"


def save(cal: Calibration, name: str, output: str | os.PathLike | None = None) -> Path:
    """Write the entry atomically (to `output`, or the user hardware folder) and check it loads."""

    if output:
        check_output(output)
    path = Path(output) if output else default_path(name)
    if not output:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create {path.parent}: {exc.strerror}") from None
    write_atomic(str(path), to_toml(cal, name))
    if not path.is_file():  # written through to a device or FIFO (-o /dev/null): nothing to read back
        return path
    try:
        load_file(path)
    except HardwareFileError as exc:  # pragma: no cover - a bug in to_toml
        raise UserError(f"the calibrated entry does not load: {exc}") from None
    return path


def hardware_argument(name: str, path: str | os.PathLike) -> str:
    """What `--hardware` takes to load the entry saved at `path`: its name when the database finds
    that name in this very file (saved in the user hardware folder), else the .toml path."""

    spec = hardware_db().find(name)
    if spec is not None and spec.path and Path(spec.path).resolve() == Path(path).resolve():
        return name
    return str(path)
