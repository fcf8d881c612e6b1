"""Benchmark: a 10 x 10 sweep must cost at most 2x one profile in one process, 2.5x from the shell.

The grid is batches 1, 2, 4, ..., 512 by contexts 512, 1024, ..., 262144 of Qwen2.5-14B's config
(examples/configs/qwen2.5-14b.json, 48 layers), critical batch included. In one process, after a
warm-up profile (torch's first meta-device forward pays a one-off cost neither side should
carry): one profile is what `rooflinekit profile` does after start-up (load the config, build the
model, capture, attribute, place), at one point of the grid; the sweep loads and builds once and
evaluates every point from counts fitted on a few captures (rooflinekit.analyses.gridfit). Each
side runs `--repeats` times; the best wall time of each is compared (CPU times are shown too:
the machine may be shared). From the shell: `rooflinekit sweep` against `rooflinekit profile`,
each a fresh process (imports included), best of `--repeats`.

    python benchmarks/sweep_cost.py [--model examples/configs/qwen2.5-14b.json] [--phase decode]
        [--repeats 3] [--check 12] [--no-shell] [--reference]

`--check N` compares N points of the grid (the corners and a spread) with separate profiles:
FLOPs, bytes, KV bytes executed and minimum, weights, predicted step, to 1e-9 relative.
`--reference` also times the sweep with `--no-fit` (every point captured: minutes).
Exit status 1 when a ratio is above its target or a checked point differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rooflinekit.analyses.profile import run_profile  # noqa: E402
from rooflinekit.analyses.sweep import Profiler, SweepOptions, point_row, run_sweep  # noqa: E402
from rooflinekit.core.codec import encode  # noqa: E402
from rooflinekit.core.request import Deployment, Workload  # noqa: E402
from rooflinekit.stages.model_source import load_source  # noqa: E402
from rooflinekit.stages.request_checks import parse_options  # noqa: E402

BATCHES = [2 ** i for i in range(10)]  # 1 .. 512
CONTEXTS = [2 ** i for i in range(9, 19)]  # 512 .. 262144
POINT = (64, 16384)  # the single profile's point
IN_PROCESS_TARGET = 2.0
SHELL_TARGET = 2.5
CHECKED = ("flops", "bytes", "kv_bytes_executed", "kv_bytes_min", "weight_bytes", "predicted_step_s", "flops_model", "expected_step_s")


def _workload(phase: str, batch: int, context: int, options: dict) -> Workload:
    return Workload(phase, batch, context, options=tuple(sorted(options.items())))


def one_profile(model: str, phase: str, options: dict, hardware: str) -> tuple[float, float]:
    """(wall, cpu) seconds of one profile from the model file: load, build, capture, attribute, place."""
    wall, cpu = time.perf_counter(), time.process_time()
    run_profile(load_source(model, options), _workload(phase, *POINT, options), Deployment(hardware))
    return time.perf_counter() - wall, time.process_time() - cpu


def one_sweep(model: str, phase: str, options: dict, hardware: str, fit: bool = True):
    """(wall, cpu, result, profiler) of the whole grid, critical batch included."""
    wall, cpu = time.perf_counter(), time.process_time()
    source = load_source(model, options)
    base = _workload(phase, BATCHES[0], CONTEXTS[0], options)
    deployment = Deployment(hardware)
    prof = Profiler(source, base, deployment)
    result = run_sweep(source, base, deployment, BATCHES, CONTEXTS, options=SweepOptions(fit=fit), profiler=prof)
    return time.perf_counter() - wall, time.process_time() - cpu, result, prof


def check_points(model: str, phase: str, options: dict, hardware: str, prof: Profiler, n: int) -> float:
    """The largest relative difference between the sweep's rows and separate profiles at n points."""
    grid = [(b, s) for s in CONTEXTS for b in BATCHES]
    corners = [grid[0], grid[len(BATCHES) - 1], grid[-len(BATCHES)], grid[-1]]
    step = max(1, len(grid) // max(1, n - len(corners)))
    points = list(dict.fromkeys(corners + grid[3::step]))[:n]
    worst = 0.0
    for b, s in points:
        row = encode(prof.row(b, s))
        ref = encode(point_row(run_profile(load_source(model, options), _workload(phase, b, s, options),
                                       Deployment(hardware)).report))
        for key in CHECKED:
            x, y = row[key], ref[key]
            if x is None or y is None:
                if x != y:
                    print(f"  B={b} S={s} {key}: {x} vs {y}")
                    worst = float("inf")
                continue
            d = abs(x - y) / max(abs(x), abs(y)) if max(abs(x), abs(y)) else 0.0
            if d > 1e-9:
                print(f"  B={b} S={s} {key}: {x} vs {y} ({d:.2g} relative)")
            worst = max(worst, d)
    print(f"checked {len(points)} points against separate profiles ({', '.join(CHECKED)}): largest relative "
          f"difference {worst:.2g}")
    return worst


def shell(args: list[str], repeats: int) -> float:
    exe = Path(sys.executable).with_name("rooflinekit")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "rooflinekit"]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd + args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "examples" / "configs" / "qwen2.5-14b.json"))
    parser.add_argument("--phase", default="decode", choices=("decode", "prefill"))
    parser.add_argument("-O", "--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--hardware", default="H800")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", type=int, default=12, metavar="N")
    parser.add_argument("--no-shell", action="store_true")
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    options = parse_options(args.option)
    ok = True

    start = time.perf_counter()
    run_profile(load_source(args.model, options), _workload(args.phase, 1, 64, options), Deployment(args.hardware))
    print(f"warm-up profile: {time.perf_counter() - start:.2f} s (excluded)")
    singles, sweeps = [], []
    for _ in range(args.repeats):
        singles.append(one_profile(args.model, args.phase, options, args.hardware))
        wall, cpu, result, prof = one_sweep(args.model, args.phase, options, args.hardware)
        sweeps.append((wall, cpu))
    p_wall, p_cpu = min(w for w, _ in singles), min(c for _, c in singles)
    s_wall, s_cpu = min(w for w, _ in sweeps), min(c for _, c in sweeps)
    print(f"model {args.model} options {options or '{}'}, {args.phase}; grid {len(BATCHES)} batches "
          f"{BATCHES[0]}..{BATCHES[-1]} x {len(CONTEXTS)} contexts {CONTEXTS[0]}..{CONTEXTS[-1]}")
    print(f"one profile (B={POINT[0]}, S={POINT[1]}): {p_wall:.3f} s wall, {p_cpu:.3f} s CPU  (runs: "
          f"{', '.join(f'{w:.3f}' for w, _ in singles)})")
    print(f"one sweep:  {s_wall:.3f} s wall, {s_cpu:.3f} s CPU  (runs: {', '.join(f'{w:.3f}' for w, _ in sweeps)}; "
          f"{result.profiles} captures, {result.evaluated} points and probes evaluated from the fit)")
    ratio = s_wall / p_wall
    print(f"ratio sweep / profile, in one process: {ratio:.2f} wall, {s_cpu / p_cpu:.2f} CPU "
          f"(target <= {IN_PROCESS_TARGET})")
    ok &= ratio <= IN_PROCESS_TARGET
    for note in result.to_dict()["notes"]:
        if note.startswith("counts "):
            print(f"  note: {note}")
    if args.check:
        ok &= check_points(args.model, args.phase, options, args.hardware, prof, args.check) <= 1e-9
    if args.reference:
        wall, cpu, result, _ = one_sweep(args.model, args.phase, options, args.hardware, fit=False)
        print(f"the sweep with --no-fit (every point captured): {wall:.1f} s wall, {cpu:.1f} s CPU, "
              f"{result.profiles} captures: {wall / p_wall:.1f}x one profile")
    if not args.no_shell:
        opts = [x for o in args.option for x in ("-O", o)]
        common = [args.model, "--phase", args.phase, "-H", args.hardware, "-f", "json", "-o", os.devnull, *opts]
        t_profile = shell(["profile", *common, "-b", str(POINT[0]), "-s", str(POINT[1])], args.repeats)
        t_sweep = shell(["sweep", *common, "-b", ",".join(map(str, BATCHES)), "-s", ",".join(map(str, CONTEXTS))],
                        args.repeats)
        print(f"from the shell: rooflinekit profile {t_profile:.2f} s, rooflinekit sweep {t_sweep:.2f} s: ratio "
              f"{t_sweep / t_profile:.2f} (target <= {SHELL_TARGET})")
        ok &= t_sweep / t_profile <= SHELL_TARGET
    print("ok" if ok else "FAIL: a ratio is above its target or a point differs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
