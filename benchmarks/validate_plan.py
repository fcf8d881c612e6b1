"""`rooflinekit plan`'s figures for published configurations, beside the measured ones.

For every row of benchmarks/published.toml that names one configuration with its batch and lengths
(mappings static-batch, prefill and decode-step), the planner's step models (the same code `plan`
prices its candidates with: rooflinekit.analyses.stepfit, rooflinekit.stages.stepmodel) give that
configuration's figure:

- static-batch: one prefill of `input_len` tokens for the batch, then output_len - 1 decode steps
  at contexts input_len + 1 .. input_len + output_len - 1, their mean exact from the fitted counts;
- prefill: the time to first token, one prefill step;
- decode-step: one decode step at the row's batch and context (DeepSeek's latency-targeted service:
  20-22 tokens/s per user at 1,850 output tokens/s per H800).

Beside each: the measured figure and `profile`'s expected time for the same mapping (the
published_results.json of benchmarks/validate_published.py, which sums profiled steps), so that
the planner is checked against the engine and against the profiler. Writes
benchmarks/plan_published.json and the table between the markers in docs/plan.md.

    python benchmarks/validate_plan.py [--only ID ...] [--docs-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import validate_published as vp  # noqa: E402  (the rows, their units and deployments: one home)

from rooflinekit.analyses.stepfit import Shape, StepFitter  # noqa: E402
from rooflinekit.core.plugins import get_host  # noqa: E402
from rooflinekit.core.request import Workload  # noqa: E402
from rooflinekit.stages.engine import engine_cost  # noqa: E402
from rooflinekit.stages.hardware import hardware_db  # noqa: E402
from rooflinekit.stages.model_source import load_source  # noqa: E402

ROOT = vp.ROOT
RESULTS_PATH = ROOT / "benchmarks" / "plan_published.json"
DOC_PATH = ROOT / "docs" / "plan.md"
MAPPINGS = ("static-batch", "prefill", "decode-step")
BEGIN, END = "<!-- plan-validation -->", "<!-- /plan-validation -->"


def _models(fitter: StepFitter, row: dict, phase: str, contexts: tuple[int, ...]):
    """The step model of one phase at the row's batch (fitted in batch where the counts allow)."""
    deployment = vp.deployment_of(row, "serving")
    counting = fitter.raw(replace(fitter.base, batch=1), deployment)
    polynomial = all(getattr(m, "scaling", None) == "polynomial" for m in counting.models)
    batches = (1, 2) if polynomial else (row["batch"],)
    shape = Shape(phase, 1, batches, contexts, polynomial)
    db = fitter.db
    return fitter.step_model(shape, deployment, db.get(row["hardware"]))


def plan_seconds(row: dict) -> float:
    """The planner's seconds for the row's mapped quantity (module doc)."""
    host = get_host()
    source = load_source(str(ROOT / row["model"]), {}, host)
    b = row["batch"]
    base = Workload("decode", b, row.get("input_len") or row["context"], dtype=row["dtype"])
    fitter = StepFitter(source, base, host, hardware_db(host))
    m = row["mapping"]
    cost = engine_cost(row.get("engine_cost"))
    host = cost.host_s(b) if cost is not None else 0.0  # the engine's host time, once a step
    if m == "decode-step":
        c = row["context"]
        return _models(fitter, row, "decode", (c, c + 1)).expected(b, c) + host
    isl = row["input_len"]
    prefill = _models(fitter, row, "prefill", (isl,)).expected(b, isl) + host
    if m == "prefill":
        return prefill
    steps = row["output_len"] - 1
    if steps < 1:
        return prefill
    decode = _models(fitter, row, "decode", (isl + 1, isl + row["output_len"] + 1))
    return prefill + steps * (decode.mean_expected(b, isl + 1, isl + row["output_len"]) + host)


def run(rows: list[dict]) -> dict:
    profiled = vp.load_results()["rows"]
    out = {}
    for row in rows:
        start = time.perf_counter()
        seconds = plan_seconds(row)
        measured = vp.measured_seconds(row)
        profile_s = (profiled.get(row["id"]) or {}).get("expected_s")
        out[row["id"]] = {"id": row["id"], "plan_s": seconds, "measured_s": measured, "profile_expected_s": profile_s,
                          "plan_over_measured": seconds / measured,
                          "plan_over_profile": None if not profile_s else seconds / profile_s,
                          "wall_s": time.perf_counter() - start}
        print(f"{row['id']}: plan {seconds:.4g} s, measured {measured:.4g} s ({seconds / measured:.2f}x)",
              file=sys.stderr)
    return out


def render(rows: list[dict], results: dict) -> str:
    done = [(r, results[r["id"]]) for r in rows if r["id"] in results]
    errs = [abs(x["plan_over_measured"] - 1) for _, x in done]
    lines = [BEGIN, "",
             f"{len(done)} published configurations (benchmarks/published.toml: the static batches, first-token "
             f"latencies and decode steps of {vp.engine_list(r for r, _ in done)}) priced by the planner's step models; "
             "`python benchmarks/validate_plan.py` regenerates this table.", "",
             f"Median |plan / measured - 1|: {statistics.median(errs):.1%}; the planner against `profile`'s summed "
             "steps (docs/validation.md): "
             f"largest difference {max(abs((x['plan_over_profile'] or 1) - 1) for _, x in done):.2%}.", "",
             "| row | engine | configuration | measured | plan | plan / measured | plan / profile |",
             "|---|---|---|---|---|---|---|"]
    for row, x in done:
        ratio = x["plan_over_profile"]
        lines.append(f"| {row['id']} | {row['engine']} | {vp.config_words(row)} | {x['measured_s']:.4g} s | "
                     f"{x['plan_s']:.4g} s | {x['plan_over_measured']:.2f} | "
                     f"{'-' if ratio is None else f'{ratio:.4f}'} |")
    lines += ["", "Times are the row's mapped quantity: a static batch's whole generation, a first token, or one "
              "decode step (docs/validation.md, how each figure maps).", "", END]
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC_PATH.read_text()
    if BEGIN in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + text + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## Checked against published results\n\n" + text + "\n"
    DOC_PATH.write_text(doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="run these row ids only (others kept)")
    parser.add_argument("--docs-only", action="store_true", help="rewrite the docs table from the results file")
    args = parser.parse_args(argv)
    rows = [r for r in vp.load_rows() if r["mapping"] in MAPPINGS]
    results = json.loads(RESULTS_PATH.read_text()) if RESULTS_PATH.exists() else {}
    if not args.docs_only:
        chosen = [r for r in rows if args.only is None or r["id"] in args.only]
        results.update(run(chosen))
        RESULTS_PATH.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    write_doc(render(rows, results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
