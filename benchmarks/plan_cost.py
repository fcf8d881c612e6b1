"""What `rooflinekit plan` costs: configurations priced, distinct deployments, captures and seconds,
against one profile of the same model.

    python benchmarks/plan_cost.py                 # the questions below
    python benchmarks/plan_cost.py MODEL --gpus 8  # one question, the default search

Runs in one process (the shared machine's noise cancels in the ratio): one serving-view decode
profile of each model, then the plan's default search at ISL 4096 / OSL 1024 with a 50 ms TPOT
target. A deployment is a configuration with its batch aside: serving mode, TP, EP, PP, prefill
pool degrees, weight / activation / KV formats, chunk and speculation. The targets: 10,000
configurations over 500 deployments within 10 s for a dense and for a MoE model, and DeepSeek-V3
on 256 GPUs within 60 s. The default search of a dense model on 8 GPUs holds about 2,000
configurations; the dense question that reaches 10,000 is Llama-3.1-70B on 16 GPUs with every
weight format engines serve (bf16, W8A8 fp8, W8A16 int8, W4A16 int4) and a draft model
(Llama-3.1-8B) searched on and off.
"""

from __future__ import annotations

import argparse
import time

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.plan import PlanConfig, Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source

#: (model, GPUs, the search's options beyond the default, their words)
QUESTIONS = (
    ("examples/configs/llama-3.1-70b.json", 8, {}, ""),
    ("examples/configs/llama-3.1-70b.json", 16,
     {"weight_dtypes": ("bf16", "fp8", "w8a16", "w4a16"), "draft": "examples/configs/llama-3.1-8b.json"},
     "--weight-dtypes bf16,fp8,w8a16,w4a16 --draft llama-3.1-8b.json"),
    ("examples/configs/mixtral-8x7b.json", 8, {}, ""),
    ("examples/configs/mixtral-8x7b.json", 16, {}, ""),
    ("examples/configs/deepseek-v3.json", 256, {}, ""),
)


def deployment_of(c: PlanConfig) -> tuple:
    """A configuration with its batch aside (module doc)."""
    pools = (c.prefill.tp, c.prefill.ep) if c.prefill else None
    return (c.mode, c.tp, c.ep, c.pp, pools, c.weight_dtype, c.dtype, c.kv_dtype, c.chunk,
            c.speculative.draft if c.speculative else None)


def question(model: str, gpus: int, extra: dict | None = None, words: str = "") -> None:
    host = get_host()
    source = load_source(model, {}, host)
    extra = dict(extra or {})
    if "draft" in extra:
        extra["draft"] = load_source(extra["draft"], {}, host)
    start = time.perf_counter()
    run_profile(source, Workload("decode", 64, 4096 + 512), Deployment(hardware="H800", kernels="serving", tp=8),
            options=ReportOptions(measure=False), host=host)
    one = time.perf_counter() - start
    start = time.perf_counter()
    result = run_plan(load_source(model, {}, host), Targets(4096, 1024, tpot_s=0.05), PlanOptions(gpus=gpus, **extra),
                      host=host)
    search = time.perf_counter() - start
    distinct = len({deployment_of(c) for c in result.configs})
    best = result.best_config
    print(f"{model}, {gpus} x H800, ISL 4096, OSL 1024, TPOT <= 50 ms{', ' + words if words else ''}")
    print(f"  one profile (serving view, decode B 64, TP 8): {one:.2f} s")
    print(f"  plan: {result.candidates:,} configurations over {distinct:,} deployments in {search:.1f} s "
          f"({result.captures} captures, {result.recounts} recounted), {result.candidates / search:,.0f} configurations/s; "
          f"{search / one:.1f} x one profile")
    print(f"  best: {best.label() if best else None}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=None)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    for model, gpus, extra, words in ((args.model, args.gpus, {}, ""),) if args.model else QUESTIONS:
        question(model, gpus, extra, words)


if __name__ == "__main__":
    main()
