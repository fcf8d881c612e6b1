"""What `rooflinekit plan` costs: candidates priced and seconds, against one profile of the same model.

    python benchmarks/plan_cost.py [MODEL] [--gpus 8]

Runs in one process (the shared machine's noise cancels in the ratio): one serving-view decode
profile of MODEL at ISL+OSL/2, then the plan search at ISL 4096 / OSL 1024 with a 50 ms TPOT
target; prints both times, the candidates priced and the ratio.
"""

from __future__ import annotations

import argparse
import time

from rooflinekit.analyses.plan import PlanOptions, run_plan
from rooflinekit.analyses.profile import ReportOptions, profile
from rooflinekit.core.plan import Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.workload import load_source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="examples/configs/llama-3.1-70b.json")
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    host = get_host()
    source = load_source(args.model, {}, host)
    start = time.perf_counter()
    profile(source, Workload("decode", 64, 4096 + 512), Deployment(hardware="H800", kernels="serving", tp=8),
            options=ReportOptions(measure=False), host=host)
    one = time.perf_counter() - start
    start = time.perf_counter()
    result = run_plan(load_source(args.model, {}, host), Targets(4096, 1024, tpot_s=0.05),
                      PlanOptions(gpus=args.gpus), host=host)
    search = time.perf_counter() - start
    print(f"model: {args.model}, {args.gpus} x H800, ISL 4096, OSL 1024, TPOT <= 50 ms")
    print(f"one profile (serving view, decode, TP 8): {one:.2f} s")
    print(f"plan: {result.candidates} candidates priced in {search:.2f} s ({result.captures} captures), "
          f"{result.candidates / search:.0f} candidates/s; {search / one:.1f} x one profile")
    best = result.best_config
    print(f"best: {best.label() if best else None}")


if __name__ == "__main__":
    main()
