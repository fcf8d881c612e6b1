"""Benchmark: a sweep of 8 points must cost no more than 8 single profiles of the same points.

Both are measured in this one process, after one warm-up profile (torch's first meta-device
forward pays a one-off cost that neither side should carry). A single profile is what one
`rooflinekit profile` run does after start-up: load the model file, build the model, capture,
attribute, place. The sweep builds the model once and also computes the critical batch per
context. Each side runs `--repeats` times; the best time of each is compared.

    python benchmarks/sweep_cost.py [--model examples/llama_gqa.py] [-O layers=4] [--repeats 2]

Exit status 1 when the sweep costs more than the singles.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rooflinekit.analyses.profile import profile  # noqa: E402
from rooflinekit.analyses.sweep import Profiler, run_sweep  # noqa: E402
from rooflinekit.core.plugins import get_host  # noqa: E402
from rooflinekit.stages.hardware import hardware_db  # noqa: E402
from rooflinekit.stages.workload import (  # noqa: E402
    Workload,
    load_source,  # noqa: E402
    parse_options,
)

BATCHES = [1, 4, 16, 48]
CONTEXTS = [4096, 32768]


def singles(model: str, options: dict, hardware: str) -> float:
    """Eight independent profiles, each loading and building from scratch."""
    start = time.perf_counter()
    for context in CONTEXTS:
        for batch in BATCHES:
            source = load_source(model, options)
            profile(source, Workload("decode", batch, context, options=tuple(sorted(options.items()))), hardware)
    return time.perf_counter() - start


def sweep(model: str, options: dict, hardware: str) -> tuple[float, int]:
    """One sweep over the same eight points, critical batch included; returns (seconds, profiles run)."""
    start = time.perf_counter()
    source = load_source(model, options)
    base = Workload("decode", BATCHES[0], CONTEXTS[0], options=tuple(sorted(options.items())))
    prof = Profiler(source, base, hardware, host=get_host(), db=hardware_db())
    result = run_sweep(source, base, BATCHES, CONTEXTS, hardware, profiler=prof)
    return time.perf_counter() - start, result.profiles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "examples" / "llama_gqa.py"))
    parser.add_argument("-O", "--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--hardware", default="H800")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    options = parse_options(args.option)

    t0 = time.perf_counter()
    profile(load_source(args.model, options), Workload("decode", 1, 64, options=tuple(sorted(options.items()))),
            args.hardware)
    print(f"warm-up profile: {time.perf_counter() - t0:.2f} s (excluded)")

    single_times, sweep_times, profiles = [], [], 0
    for _ in range(args.repeats):
        single_times.append(singles(args.model, options, args.hardware))
        elapsed, profiles = sweep(args.model, options, args.hardware)
        sweep_times.append(elapsed)
    s, w = min(single_times), min(sweep_times)
    points = len(BATCHES) * len(CONTEXTS)
    print(f"model {args.model} options {options or '{}'}; {points} points: batches {BATCHES} x contexts {CONTEXTS}")
    print(f"8 single profiles: {s:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in single_times)})")
    print(f"one sweep:         {w:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in sweep_times)}; "
          f"{profiles} profiles incl. critical batch)")
    print(f"ratio sweep / singles: {w / s:.3f}")
    if w > s:
        print("FAIL: the sweep cost more than 8 single profiles")
        return 1
    print("ok: the sweep costs no more than 8 single profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
