"""Check: the meta memo (rooflinekit.stages.capture.meta_memo) changes no report, on every transformers type.

Every `model_type` benchmarks/hf_coverage.py profiles (its default config cut to 2 layers, both of
its phases) is profiled twice in one process, with the memo and without it, and the two reports
(every op record, module row, attention row, total and the memory section; the capture's wall
time aside) must be equal. Each type runs in its own process with a time limit. Prints one line
per type and a summary with the time both ways; exit status 1 when any report differs.

    python benchmarks/meta_memo_check.py [--jobs 2] [--only llama,bart] [--timeout 300]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from hf_coverage import LAYERS, PHASES, covering_layers, model_types  # noqa: E402


def _report(model_type: str, phase: str, batch: int, context: int, layers: int, memo: bool):
    from rooflinekit.api import profile_file
    from rooflinekit.stages.capture.recorder import Recorder

    Recorder.memo_meta = memo
    start = time.perf_counter()
    report = profile_file(f"hf:{model_type}", phase=phase, batch=batch, context=context,
                          options={"layers": layers}).to_dict()
    report["capture"].pop("wall_s", None)
    return report, time.perf_counter() - start


def check_type(model_type: str) -> dict:
    """Both phases, with and without the memo: equal, different, or failing both ways alike."""
    result: dict = {"type": model_type, "phases": {}}
    try:  # untimed: the process's one-off imports (transformers' model code, torch's meta kernels)
        _report(model_type, *PHASES[0], covering_layers(model_type) or LAYERS, False)
    except (Exception, SystemExit):  # noqa: BLE001 - compared below
        pass
    for phase, batch, context in PHASES:
        outcomes = []
        for memo in (True, False):
            for layers in dict.fromkeys((LAYERS, covering_layers(model_type) or LAYERS)):
                try:
                    report, seconds = _report(model_type, phase, batch, context, layers, memo)
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failure is compared too
                    outcome = ("error", f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}", 0.0)
                else:
                    outcome = ("ok", report, seconds)
                    break
            outcomes.append(outcome)
        (kind_a, a, t_a), (kind_b, b, t_b) = outcomes
        if kind_a == kind_b == "ok":
            status = "equal" if a == b else "DIFFERENT"
        elif kind_a == kind_b == "error":
            status = "equal" if a == b else "DIFFERENT"
            status += " (fails both ways)"
        else:
            status = "DIFFERENT"
        result["phases"][phase] = {"status": status, "memo_s": round(t_a, 3), "plain_s": round(t_b, 3),
                                   "ops": len(a["ops"]) if kind_a == "ok" else 0}
    return result


def run_one(model_type: str, timeout: float) -> dict:
    try:
        done = subprocess.run([sys.executable, __file__, "--worker", model_type], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"type": model_type, "error": f"no answer within {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"type": model_type, "error": f"worker exited {done.returncode}: {done.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="types checked at once (processes)")
    parser.add_argument("--only", help="comma-separated model types (default: every type)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per type")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        real_stdout, sys.stdout = sys.stdout, sys.stderr  # what a model prints stays off the result line
        try:
            result = check_type(args.worker)
        finally:
            sys.stdout = real_stdout
        print(json.dumps(result), flush=True)
        return 0
    types = args.only.split(",") if args.only else model_types()
    start = time.perf_counter()
    different = errors = equal = 0
    memo_s = plain_s = 0.0
    with ThreadPoolExecutor(args.jobs) as pool:
        for n, result in enumerate(pool.map(lambda t: run_one(t, args.timeout), types), 1):
            if "error" in result:
                errors += 1
                print(f"[{n}/{len(types)}] {result['type']}: {result['error']}", flush=True)
                continue
            cells = []
            for phase, entry in result["phases"].items():
                cells.append(f"{phase} {entry['status']} ({entry['ops']} ops, {entry['memo_s']:.2f} s / "
                             f"{entry['plain_s']:.2f} s)")
                different += entry["status"].startswith("DIFFERENT")
                equal += entry["status"] == "equal"
                if entry["status"] == "equal":
                    memo_s += entry["memo_s"]
                    plain_s += entry["plain_s"]
            print(f"[{n}/{len(types)}] {result['type']}: " + "; ".join(cells), flush=True)
    print(f"\n{len(types)} types in {time.perf_counter() - start:.0f} s: {equal} profiles equal with and "
          f"without the memo, {different} different, {errors} types without an answer; profile time "
          f"{memo_s:.1f} s with the memo against {plain_s:.1f} s without ({plain_s / max(memo_s, 1e-9):.2f}x)")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
