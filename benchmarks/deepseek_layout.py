"""DeepSeek's published serving layout priced by `rooflinekit plan`, beside the published figures.

DeepSeek-V3/R1 inference system overview (DeepSeek, open-infra-index, 2025-03-01), H800 SXM5:
prefill units of 4 nodes (routed experts EP 32, MLA and shared expert data-parallel 32), decode units
of 18 nodes (EP 144, data-parallel 144, 256 routed experts plus 32 redundant: two slots per GPU).
Over 24 hours: 608 B input tokens, 342 B of them (56.3%) prefix-cache hits, 168 B output tokens; 20-22
output tokens/s per user; an average KV cache length of 4,989 tokens per output token; per node on
average 73.7 k input tokens/s in prefill (cache hits included) and 14.8 k output tokens/s in decode
(1,850 per GPU). The request lengths are not published; from the two averages they give:
ISL / OSL = 608 / 168 and ISL + OSL / 2 = 4,989 (the mean context an output token attends), so
OSL = 4,989 / (608/168 + 1/2) = 1,211 and ISL = 4,383.

The published figures are per node of each role, averaged over a day whose node count varied. So
each pool is priced at its own capacity, with the plan's step models (the figures `plan` prints,
each equal to `profile`'s):

- decode: DEP144, W8A8 fp8 (DeepGEMM's fp8 GEMMs), bf16 MLA cache (FlashMLA), the batch per GPU at
  which the mean step over the generation (contexts ISL..ISL+OSL) gives 20 and 22 tokens/s per user,
  with and without one multi-token-prediction head (acceptance 0.85; DeepSeek-V3's report: 85-90%
  for the second token); output tokens/s per GPU = batch x tokens/s per user;
- prefill: DEP32, one prompt per GPU per step, its 43.7% uncached tokens after the cached prefix;
  input tokens/s per node (cache hits included) = 8 x ISL / step.

Each role's gap is itemised by part (attention, routed experts, other kernels, all-to-all, other
collectives, launches) from the step's own records at the mean context, and the free search on the
same 22 nodes is run to show that its space holds the layout. Writes benchmarks/deepseek_layout.json
and the table between the markers in docs/plan.md.

    python benchmarks/deepseek_layout.py [--no-search]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.plan_pricing import Planner
from rooflinekit.core.plan import Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.stages.model_source import load_source

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_parts  # noqa: E402  (one step split by part: shared with compare_aic.py)
from doc_table import put_between  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples/configs/deepseek-v3.json"
DOC = ROOT / "docs/plan.md"
OUT = Path(__file__).with_name("deepseek_layout.json")
BEGIN, END = "<!-- deepseek-layout -->", "<!-- /deepseek-layout -->"

ISL, OSL, HIT, KV_MEAN = 4383, 1211, 0.563, 4989
PUBLISHED = {"decode_tokens_per_gpu": 1850.0, "prefill_tokens_per_node": 73.7e3}
USER_RATES = (20.0, 22.0)
ACCEPT = 0.85
NODE = 8
GPUS = 176  # one prefill unit (4 nodes) and one decode unit (18 nodes)


def planner(mtp: int) -> Planner:
    options = PlanOptions(gpus=GPUS, hardware="H800", weight_dtypes=("fp8",), kv_dtypes=("bf16",),
                          modes=("disaggregated",), prefill_layouts=((1, 32),), decode_layouts=((1, 144),),
                          mtp=mtp, accept=ACCEPT, check=False)
    return Planner(load_source(str(MODEL), {}), Targets(ISL, OSL, tpot_s=0.05, prefix_hit=HIT), options,
                   host=get_host())


def variant(p: Planner, ep: int):
    v = p.variant(p.deployment(1, ep, "fp8", "bf16"), "fp8")
    if isinstance(v, str):
        sys.exit(f"deepseek_layout: DEP{ep} could not be priced: {v}")
    return replace(v, format="fp8")


def batch_at(p: Planner, v, rate: float) -> tuple[float, float]:
    """(batch per GPU, TPOT) where the mean TPOT over the generation is 1/rate (linear between the
    two whole batches around it)."""
    target = 1.0 / rate
    lo, hi = 1, 2
    while p._decode_time(v, hi, 1, 0.0)[0] <= target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if p._decode_time(v, mid, 1, 0.0)[0] <= target else (lo, mid)
    t_lo, t_hi = p._decode_time(v, lo, 1, 0.0)[0], p._decode_time(v, hi, 1, 0.0)[0]
    return lo + (target - t_lo) / (t_hi - t_lo), target


PARTS = ("attention", "routed experts", "other kernels", "all-to-all", "other collectives", "launches")


def part_of(op, in_attention: bool) -> str:
    if op.kind == "collective" or op.attrs.get("collective"):
        return "all-to-all" if op.attrs.get("collective") == "all_to_all" else "other collectives"
    return "attention" if in_attention else "routed experts" if op.name.startswith("moe.") else "other kernels"


def parts(p: Planner, v, workload) -> dict[str, float]:
    """The expected step of `workload` split by part (benchmarks/step_parts.py)."""
    found = step_parts.parts(p, v, workload, part_of)
    return {**dict.fromkeys(PARTS, 0.0), **found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-search", action="store_true", help="skip the free search on the same 22 nodes")
    args = parser.parse_args()
    start = time.perf_counter()
    rows, itemised = [], {}
    for mtp in (0, 1):
        p = planner(mtp)
        dv, pv = variant(p, 144), variant(p, 32)
        for rate in USER_RATES:
            batch, tpot = batch_at(p, dv, rate)
            rows.append({"role": "decode", "mtp": mtp, "tokens_per_user": rate, "batch_per_gpu": batch,
                         "tpot_s": tpot, "ours": batch * rate, "published": PUBLISHED["decode_tokens_per_gpu"]})
        if mtp == 0:
            fitter = p.fitter_for(dv.dtype)
            mid, _ = batch_at(p, dv, sum(USER_RATES) / 2)
            decode = replace(fitter.base, phase="decode", batch=round(mid), context=KV_MEAN, decode_q_len=1)
            itemised["decode"] = {"batch": round(mid), "context": KV_MEAN, **parts(p, dv, decode)}
            shape = p._shapes(True)[1]
            prefill = fitter._workload(shape, 1, shape.contexts[0])
            step = pv.prefill.expected(1, shape.contexts[0])
            rows.append({"role": "prefill", "mtp": 0, "step_s": step, "ours": NODE * ISL / step,
                         "published": PUBLISHED["prefill_tokens_per_node"]})
            itemised["prefill"] = {"new_tokens": shape.q_len, "cached": shape.contexts[0], **parts(p, pv, prefill)}
    search = None
    if not args.no_search:
        t0 = time.perf_counter()
        result = run_plan(load_source(str(MODEL), {}), Targets(ISL, OSL, tpot_s=0.05, prefix_hit=HIT),
                          PlanOptions(gpus=GPUS, hardware="H800", check=False), host=get_host())
        held = [c for c in result.configs if c.mode == "disaggregated" and c.prefill and c.decode
                and (c.prefill.tp, c.prefill.ep, c.decode.tp, c.decode.ep) == (1, 32, 1, 144)]
        best = result.best_config
        search = {"configurations": result.candidates, "seconds": time.perf_counter() - t0,
                  "holds_layout": bool(held), "layout_configurations": len(held),
                  "best": best.label() if best else None,
                  "best_tokens_per_gpu": best.tokens_per_s_per_gpu if best else None}
    for r in rows:
        r["ratio"] = r["ours"] / r["published"]
    data = {"workload": {"isl": ISL, "osl": OSL, "prefix_hit": HIT, "mean_context": KV_MEAN, "accept": ACCEPT},
            "rows": rows, "itemised": itemised, "search": search, "seconds": time.perf_counter() - start}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    table = render(data)
    print(table)
    put_between(DOC, BEGIN, END, table)


def render(data: dict) -> str:
    lines = ["| role | MTP | per user | batch per GPU | rooflinekit | published | ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        if r["role"] == "decode":
            lines.append(f"| decode DEP144 | {'1 head, accept 0.85' if r['mtp'] else 'none'} | "
                         f"{r['tokens_per_user']:.0f} tok/s | {r['batch_per_gpu']:.1f} | "
                         f"{r['ours']:,.0f} output tok/s per GPU | {r['published']:,.0f} | {r['ratio']:.2f} |")
        else:
            lines.append(f"| prefill DEP32 | | step {r['step_s'] * 1e3:.0f} ms | 1 prompt | "
                         f"{r['ours'] / 1e3:,.1f} k input tok/s per node | {r['published'] / 1e3:,.1f} k | "
                         f"{r['ratio']:.2f} |")
    lines += ["", "| part of the step (ms) | " + " | ".join(data["itemised"]) + " |",
              "|---|" + "---|" * len(data["itemised"])]
    keys = ("attention", "routed experts", "other kernels", "all-to-all", "other collectives", "launches", "step")
    for key in keys:
        lines.append(f"| {key} | " + " | ".join(f"{v[key] * 1e3:.2f}" for v in data["itemised"].values()) + " |")
    d, pr = data["itemised"].get("decode"), data["itemised"].get("prefill")
    if d and pr:
        lines.append(f"| (step at) | decode B {d['batch']} per GPU, context {d['context']:,} | prefill of "
                     f"{pr['new_tokens']:,} new tokens after {pr['cached']:,} cached |")
    s = data.get("search")
    if s:
        lines += ["", f"Free search on the same 176 GPUs ({s['configurations']:,} configurations, "
                      f"{s['seconds']:.0f} s): DEP32 prefill beside DEP144 decode is "
                      f"{'in' if s['holds_layout'] else 'NOT in'} its space ({s['layout_configurations']} "
                      f"configurations); its best: {s['best']}, {s['best_tokens_per_gpu']:,.0f} tok/s per GPU."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
