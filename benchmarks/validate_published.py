"""Hold rooflinekit's bound and expected time against published measurements of real engines.

Reads benchmarks/published.toml (one row per published figure, with its source and exact
configuration), maps each row to rooflinekit runs in-process on the full model config, and writes
benchmarks/published_results.json and docs/validation.md.

Mappings (the `mapping` field of a row):

- `prefill`: one prefill step of `input_len` tokens (a first-token latency).
- `decode-step`: one decode step at `context` (a per-user token rate read as the step).
- `static-batch`: one batch of `batch` prompts: a prefill of `input_len` tokens, then
  `output_len - 1` decode steps at contexts input_len + 1 .. input_len + output_len - 1 (the
  context counts the new token). The decode steps are summed step by step: the two ends are
  profiled, and each step's compute time, memory time and collective time are interpolated
  between them (all three are affine in the context: K/V reads, score sizes and attention FLOPs
  grow linearly) before the step's max(compute, memory) is taken, so the sum is the sum of the
  per-step bounds, not the bound of the mean step. tests/test_validation_published.py checks
  the interpolation against a profiled midpoint.
- `per-token` (bound-only rows): the measured time per token against the step's bound divided
  by its tokens.

The bound of a step is `totals.time_bound_s` (max of compute and memory time over the whole
step) plus the collectives' time (`totals.time_comm_s`) unless the report's time conventions
already put the collectives inside `time_bound_s` (as one of the resources it takes the largest of). The expected time is `totals.expected_step_s`
where the tool has it, else "not yet".

Runs use the serving view (`kernels="serving"`) once the tool has it; until then (the view is
named but prices the code as written, or is not named at all) they fall back to as-written and
say so. Resumable: a row whose result is already in the results file with the same fingerprint
(the row, the kernels view, the tool's version and code, its efficiency tables and whether expected
times exist) is not run again;
`--force` reruns, `--only ID` runs some rows, `--docs-only` rewrites docs/validation.md from the
results file.

    python benchmarks/validate_published.py [--force] [--only ID ...] [--docs-only]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
ROWS_PATH = ROOT / "benchmarks" / "published.toml"
RESULTS_PATH = ROOT / "benchmarks" / "published_results.json"
DOC_PATH = ROOT / "docs" / "validation.md"
SPREAD_PATH = ROOT / "rooflinekit" / "stages" / "spread.toml"
#: The probe that tells whether the serving view prices anything differently (cheap: 2 layers).
PROBE = ("examples/configs/llama-2-7b.json", {"layers": 2})
RESULTS_SCHEMA = 1


def load_rows(path: Path = ROWS_PATH) -> list[dict]:
    with open(path, "rb") as f:
        rows = tomllib.load(f)["row"]
    ids = [r["id"] for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise SystemExit(f"duplicate row ids in {path}: {', '.join(dup)}")
    undated = [r["id"] for r in rows if not re.fullmatch(r"20\d\d-[01]\d", str(r.get("engine_date", "")))]
    if undated:
        raise SystemExit(f"rows without an engine_date (YYYY-MM) in {path}: {', '.join(undated)}")
    return rows


def recent(row: dict) -> bool:
    """Whether the row's engine release is of 2025 or later (the summary by engine year)."""
    return int(row["engine_date"][:4]) >= 2025


def holdout_ids(rows: list[dict]) -> set[str]:
    """Rows added after the spread was fixed: left out of it, its coverage measured on them."""
    return {r["id"] for r in rows if r.get("holdout")}


def gpus(row: dict) -> int:
    return max(row.get("tp", 1), row.get("ep", 1))


def measured_seconds(row: dict) -> float:
    """The published figure as the seconds of the mapped quantity (a step, a sum of steps, or a token)."""
    unit, value, mapping = row["unit"], float(row["measured"]), row["mapping"]
    if unit == "s":
        return value
    if unit == "ms":
        return value / 1e3
    if unit == "tok/s/user":
        if mapping == "static-batch":
            return row["output_len"] / value
        if mapping == "decode-step":
            return 1.0 / value
    if unit == "out tok/s/GPU" and mapping == "static-batch":
        return row["batch"] * row["output_len"] / (value * gpus(row))
    if unit == "in tok/s/GPU" and mapping == "per-token":
        return 1.0 / value
    raise ValueError(f"row {row['id']}: unit '{unit}' does not map to '{mapping}'")


def runs_of(row: dict) -> list[tuple[str, int, int]]:
    """The (phase, batch, context) steps profiled for a row."""
    m, b = row["mapping"], row["batch"]
    if m == "prefill":
        return [("prefill", b, row["input_len"])]
    if m in ("decode-step", "per-token"):
        return [("decode" if m == "decode-step" else "prefill", b, row["context"])]
    if m == "static-batch":
        steps = [("prefill", b, row["input_len"])]
        n = row["output_len"] - 1
        if n >= 1:
            steps.append(("decode", b, row["input_len"] + 1))
        if n >= 2:
            steps.append(("decode", b, row["input_len"] + n))
        return steps
    raise ValueError(f"row {row['id']}: unknown mapping '{m}'")


def command(row: dict, phase: str, batch: int, context: int, kernels: str) -> str:
    """The CLI command of one profiled step."""
    parts = [f"rooflinekit profile {row['model']} --phase {phase} -b {batch} -s {context}",
             f"-H '{row['hardware']}'", f"--dtype {row['dtype']}"]
    if row.get("weight_dtype") and row["weight_dtype"] != row["dtype"]:
        parts.append(f"--weight-dtype {row['weight_dtype']}")
    if row.get("weight_group_size"):
        parts.append(f"--weight-group-size {row['weight_group_size']}")
    if row.get("kv_dtype") and row["kv_dtype"] != row["dtype"]:
        parts.append(f"--kv-dtype {row['kv_dtype']}")
    if row.get("tp", 1) > 1:
        parts.append(f"--tp {row['tp']}")
    if row.get("ep", 1) > 1:
        parts.append(f"--ep {row['ep']}")
    if kernels != "as-written":
        parts.append(f"--kernels {kernels}")
    if row.get("engine_cost"):
        parts.append(f"--engine {row['engine_cost']}")
    if row.get("overlap"):
        parts.append(f"--overlap {row['overlap']}")
    return " ".join(parts)


# --- the tool --------------------------------------------------------------------------------

def _api():
    from rooflinekit.analyses.profile import ReportOptions, run_profile
    from rooflinekit.core.request import Deployment, Workload
    from rooflinekit.stages.model_source import load_source
    return run_profile, ReportOptions, Workload, Deployment, load_source


def tool_version() -> str:
    import rooflinekit
    return getattr(rooflinekit, "__version__", "unknown")


def _totals(source, workload, deployment) -> dict:
    run_profile, ReportOptions, *_ = _api()
    report = run_profile(source, workload, deployment, options=ReportOptions(detail=False)).report
    return report.to_dict()["totals"]


def serving_view() -> tuple[str, str]:
    """The kernels view the runs use, and why: "serving" once the tool prices it, else "as-written"."""
    try:
        from rooflinekit.core.request import KERNELS, Deployment
    except ImportError:  # pragma: no cover - an older tool
        return "as-written", "the tool has no kernels views: runs price the code as written"
    if "serving" not in KERNELS:
        return "as-written", "the tool does not name the serving view yet: runs price the code as written"
    try:
        Deployment(kernels="serving")
    except Exception as exc:  # noqa: BLE001 - any refusal means no serving view
        return "as-written", f"Deployment(kernels='serving') is refused ({exc}): runs price the code as written"
    _, _, Workload, Deployment, load_source = _api()
    source = load_source(str(ROOT / PROBE[0]), dict(PROBE[1]))
    work = Workload("decode", 1, 256)
    written = _totals(source, work, Deployment("A100 SXM 80GB"))
    serving = _totals(source, work, Deployment("A100 SXM 80GB", kernels="serving"))
    if (written["bytes"], written["flops"]) == (serving["bytes"], serving["flops"]):
        return "as-written", ("the tool names the serving view but prices it as written (a probe on "
                              f"{PROBE[0]} moved the same bytes in both views): the serving transform has "
                              "not landed, so runs price the code as written")
    return "serving", "the serving view (kernels='serving')"


def comm_inside_bound(totals: dict) -> bool:
    words = (totals.get("time_conventions") or {}).get("time_bound_s", "")
    return "collective" in words or "comm" in words


def step_figures(totals: dict) -> dict:
    comm = float(totals.get("time_comm_s") or 0.0)
    return {
        "compute_s": float(totals["time_compute_s"]),
        "memory_s": float(totals["time_memory_s"]),
        "comm_s": 0.0 if comm_inside_bound(totals) else comm,  # added to the bound
        "comm_inside_s": comm if comm_inside_bound(totals) else 0.0,  # one of the bound's resources
        "time_bound_s": float(totals["time_bound_s"]),
        "expected_s": None if totals.get("expected_step_s") is None else float(totals["expected_step_s"]),
        "binding": totals.get("binding") or totals.get("bound"),
        "bytes": float(totals["bytes"]),
        "flops": float(totals["flops"]),
        "weight_bytes": float(totals.get("weight_bytes") or 0.0),
        "kv_bytes": float(totals.get("kv_bytes_executed") or 0.0),
    }


def step_bound(fig: dict) -> float:
    """A step's bound: the whole-step roofline plus the collectives not already inside it."""
    return fig["time_bound_s"] + fig["comm_s"]


def decode_sum(first: dict, last: dict | None, c0: int, c1: int) -> tuple[float, float | None]:
    """The summed bound (and expected time) of the decode steps at contexts c0..c1, interpolating
    compute, memory and collective time linearly in the context between the two profiled ends."""
    if last is None or c1 == c0:
        n = c1 - c0 + 1
        exp = first["expected_s"]
        return n * step_bound(first), None if exp is None else n * exp
    total = 0.0
    for c in range(c0, c1 + 1):
        f = (c - c0) / (c1 - c0)
        comp = first["compute_s"] + f * (last["compute_s"] - first["compute_s"])
        mem = first["memory_s"] + f * (last["memory_s"] - first["memory_s"])
        comm = first["comm_s"] + f * (last["comm_s"] - first["comm_s"])
        inside = first.get("comm_inside_s", 0.0) + f * (last.get("comm_inside_s", 0.0) - first.get("comm_inside_s", 0.0))
        total += max(comp, mem, inside) + comm
    if first["expected_s"] is None or last["expected_s"] is None:
        return total, None
    n = c1 - c0 + 1
    return total, n * (first["expected_s"] + last["expected_s"]) / 2


def deployment_of(row: dict, kernels: str, efficiency: str | None = None):
    *_, Deployment, _ = _api()
    return Deployment(row["hardware"], tp=row.get("tp", 1), ep=row.get("ep", 1),
                      weight_dtype=row.get("weight_dtype"), weight_group_size=row.get("weight_group_size"),
                      kv_dtype=row.get("kv_dtype"), kernels=kernels, engine=row.get("engine_cost"),
                      overlap=row.get("overlap", "none"), efficiency=efficiency)


def run_row(row: dict, kernels: str, efficiency: str | None = None) -> dict:
    """Profile a row's steps and map them to its measured quantity (priced with the efficiency
    source `efficiency`; None: the committed tables)."""
    _, _, Workload, _, load_source = _api()
    source = load_source(str(ROOT / row["model"]), {})
    deployment = deployment_of(row, kernels, efficiency)
    steps = []
    for phase, batch, context in runs_of(row):
        fig = step_figures(_totals(source, Workload(phase, batch, context, dtype=row["dtype"]), deployment))
        steps.append({"phase": phase, "batch": batch, "context": context,
                      "command": command(row, phase, batch, context, kernels), **fig})
    m = row["mapping"]
    if m in ("prefill", "decode-step"):
        bound, expected = step_bound(steps[0]), steps[0]["expected_s"]
    elif m == "per-token":
        tokens = steps[0]["batch"] * steps[0]["context"]
        bound = step_bound(steps[0]) / tokens
        expected = None if steps[0]["expected_s"] is None else steps[0]["expected_s"] / tokens
    else:
        bound, expected = step_bound(steps[0]), steps[0]["expected_s"]
        if len(steps) > 1:
            c0 = row["input_len"] + 1
            c1 = row["input_len"] + row["output_len"] - 1
            dec_bound, dec_exp = decode_sum(steps[1], steps[2] if len(steps) > 2 else None, c0, c1)
            bound += dec_bound
            expected = None if expected is None or dec_exp is None else expected + dec_exp
    measured = measured_seconds(row)
    # what dominates the mapped time: the step (or summed steps) carrying most of the bound
    if m == "static-batch" and len(steps) > 1:
        prefill_share = step_bound(steps[0]) / bound if bound else 0.0
        main = steps[0] if prefill_share >= 0.5 else steps[-1]
    else:
        prefill_share = 1.0 if steps[0]["phase"] == "prefill" else 0.0
        main = steps[0]
    return {
        "id": row["id"], "kernels": kernels, "bound_s": bound, "expected_s": expected, "measured_s": measured,
        "bound_over_measured": bound / measured,
        "expected_over_measured": None if expected is None else expected / measured,
        "beats_bound": measured < bound, "bound_only": bool(row.get("bound_only", False)),
        "binding": main["binding"], "prefill_share": prefill_share,
        "weight_share": main["weight_bytes"] / main["bytes"] if main["bytes"] else 0.0,
        "kv_share": main["kv_bytes"] / main["bytes"] if main["bytes"] else 0.0,
        "comm_share": step_bound(main) and main["comm_s"] / step_bound(main),
        "steps": steps,
    }


@functools.cache
def code_digest() -> str:
    """A digest of the tool's code and data (rooflinekit/ and plugins/): a change to how a step is
    counted or priced reruns every row."""
    h = hashlib.sha256()
    for path in sorted(p for d in ("rooflinekit", "plugins") for p in (ROOT / d).rglob("*")
                       if p.suffix in (".py", ".toml", ".json") and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def fingerprint(row: dict, kernels: str, version: str, has_expected: bool, source: str | None = None) -> str:
    """What a row's result depends on: the row, the view, the tool (its version and code) and its
    table of achievable fractions (and the other efficiency source it was priced with, by name)."""
    from rooflinekit.stages.efficiency_table import tables_digest

    table = tables_digest()
    text = json.dumps({"row": row, "kernels": kernels, "version": version, "code": code_digest(),
                       "expected": has_expected, "efficiency": table, **({"source": source} if source else {})},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def has_expected_field() -> bool:
    """Whether the tool's reports carry totals.expected_step_s (read from the report schema)."""
    schema_dir = ROOT / "rooflinekit" / "schema"
    return any("expected_step_s" in p.read_text() for p in schema_dir.glob("profile-*.schema.json"))


# --- results and docs ------------------------------------------------------------------------

def load_results(path: Path = RESULTS_PATH) -> dict:
    if path.exists():
        data = json.loads(path.read_text())
        if data.get("schema") == RESULTS_SCHEMA:
            return data
    return {"schema": RESULTS_SCHEMA, "meta": {}, "rows": {}}


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def summarize(rows: list[dict], results: dict) -> dict:
    done = [(r, results["rows"][r["id"]]) for r in rows
            if r["id"] in results["rows"] and "error" not in results["rows"][r["id"]]]
    failed = [r["id"] for r in rows if "error" in results["rows"].get(r["id"], {})]
    scored = [(r, x) for r, x in done if not x["bound_only"]]
    beats = [x["id"] for _, x in scored if x["beats_bound"]]
    bound_only_beats = [x["id"] for _, x in done if x["bound_only"] and x["beats_bound"]]
    ratios = [x["bound_over_measured"] for _, x in scored]
    errs = [(abs(x["expected_over_measured"] - 1), x["id"]) for _, x in scored if x["expected_over_measured"] is not None]
    within = [x for _, x in scored if not x["beats_bound"]]
    loosest = sorted(within, key=lambda x: x["bound_over_measured"])[:5]
    return {
        "rows": len(rows), "done": len(done), "failed": failed, "scored": len(scored), "bound_only": len(done) - len(scored),
        "beat_bound": beats, "bound_only_beat_bound": bound_only_beats,
        "bound_over_measured_median": statistics.median(ratios) if ratios else None,
        "bound_over_measured_min": min(ratios) if ratios else None,
        "bound_over_measured_max": max(ratios) if ratios else None,
        "expected_rows": len(errs),
        "expected_abs_err_median": statistics.median(e for e, _ in errs) if errs else None,
        "expected_abs_err_worst": max(errs)[0] if errs else None,
        "expected_worst_rows": [i for _, i in sorted(errs, reverse=True)[:5]],
        "loosest_rows": [x["id"] for x in loosest],
    }


def row_class(x: dict) -> str:
    """A scored row's step class (rooflinekit.stages.spread): the step carrying most of its bound."""
    from rooflinekit.stages.spread import step_class

    comm = 1.0 if x["binding"] == "communication" else x["comm_share"]
    return step_class("prefill" if x["prefill_share"] >= 0.5 else "decode", comm)


def deciles(values: list[float]) -> tuple[float, float, float]:
    """(p10, p50, p90) by linear interpolation between order statistics."""
    q = statistics.quantiles(values, n=10, method="inclusive")
    return q[0], statistics.median(values), q[8]


def residuals(results: dict, leave_out: set[str] = frozenset(), only: set[str] | None = None
              ) -> dict[str, list[tuple[str, float]]]:
    """class -> [(row id, measured / expected)] over the scored rows (but `leave_out`; with `only`,
    those alone), and "all" pooled."""
    out: dict[str, list[tuple[str, float]]] = {"all": []}
    for x in results["rows"].values():
        if "error" in x or x["bound_only"] or not x.get("expected_over_measured") or x["id"] in leave_out:
            continue
        if only is not None and x["id"] not in only:
            continue
        pair = (x["id"], 1.0 / x["expected_over_measured"])
        out.setdefault(row_class(x), []).append(pair)
        out["all"].append(pair)
    return out


def left_out_coverage(pairs: list[tuple[str, float]]) -> float | None:
    """The share of rows inside the p10-p90 of the other rows of their class (leave one out)."""
    if len(pairs) < 3:
        return None
    inside = 0
    for i, (_, r) in enumerate(pairs):
        low, _, high = deciles([v for j, (_, v) in enumerate(pairs) if j != i])
        inside += low <= r <= high
    return inside / len(pairs)


def spread_section(results: dict, rows: list[dict]) -> list[str]:
    """The page's account of the expected time's p10-p90 (rooflinekit.stages.spread), fixed on the
    rows before the hold-out, and its coverage on the hold-out rows."""
    from rooflinekit.stages.spread import COMM_SHARE, MIN_ROWS

    out = ["", "## The spread of the expected time", "",
           "Every expected time carries a p10-p90 range: the expected figure times the 10th and 90th",
           "percentiles of measured / expected over the scored rows above of its step class (a row's class is",
           "the step carrying most of its bound: prefill, decode, or communication-heavy where collectives",
           f"bind or take {COMM_SHARE:.0%} of the step). A class with fewer than {MIN_ROWS} rows borrows all rows'",
           "percentiles. `python benchmarks/validate_published.py --spread` writes them to",
           "`rooflinekit/stages/spread.toml`, which `profile` (totals.expected_low_s / expected_high_s) and",
           "`plan` (ttft_p10_s ... tpot_p90_s; `--targets-at p90`) read. Coverage is measured leaving each row",
           "out: the share of a class's rows inside the p10-p90 of its other rows (in-sample it would be 80%",
           "by construction). The median above 1 is the expected time's optimism, kept as it is: nothing is",
           "fitted on these rows.", "",
           "| class | rows | p10 | p50 | p90 | rows inside the others' p10-p90 |", "| --- | --- | --- | --- | --- | --- |"]
    held = holdout_ids(rows)
    fixed = residuals(results, leave_out=held)
    for name, pairs in sorted(fixed.items()):
        if len(pairs) < 2:
            out.append(f"| {name} | {len(pairs)} | - | - | - | - (too few rows: uses all) |")
            continue
        low, mid, high = deciles([r for _, r in pairs])
        cov = left_out_coverage(pairs)
        thin = " (too few rows: uses all)" if len(pairs) < MIN_ROWS else ""
        out.append(f"| {name} | {len(pairs)} | {low:.2f} | {mid:.2f} | {high:.2f} | "
                   f"{'-' if cov is None else f'{cov:.0%}'}{thin} |")
    out += holdout_coverage(results, rows, fixed)
    return out


def holdout_coverage(results: dict, rows: list[dict], fixed: dict[str, list[tuple[str, float]]]) -> list[str]:
    """The share of the hold-out rows whose measured / expected lies in the p10-p90 of their class
    (fixed on the other rows; a class of fewer than MIN_ROWS rows takes all rows')."""
    from rooflinekit.stages.spread import MIN_ROWS

    held = residuals(results, only=holdout_ids(rows))
    pairs = held["all"]
    if not pairs:
        return ["", "No hold-out rows yet: the coverage on rows added after the spread was fixed is not measured."]
    by_id = {i: name for name, ps in held.items() if name != "all" for i, _ in ps}
    inside, lines = 0, []
    for i, r in pairs:
        name = by_id[i]
        basis = fixed.get(name) if len(fixed.get(name, ())) >= MIN_ROWS else fixed["all"]
        low, _, high = deciles([v for _, v in basis])
        ok = low <= r <= high
        inside += ok
        lines.append(f"| `{i}` | {name} | {r:.2f} | {low:.2f}-{high:.2f} | {'yes' if ok else 'no'} |")
    return ["", f"**Coverage on the hold-out rows** (added after the spread was fixed, none of them in it): "
            f"{inside} of {len(pairs)} ({inside / len(pairs):.0%}) lie inside their class's p10-p90.", "",
            "| row | class | measured / expected | p10-p90 | inside |", "| --- | --- | --- | --- | --- |", *lines]


def year_section(rows: list[dict], results: dict) -> list[str]:
    """The scored rows by engine release: before 2025, and 2025 or later."""
    out = ["", "## By engine release", "",
           "| engines released | rows | scored | median abs(expected / measured - 1) | median expected / measured |",
           "| --- | --- | --- | --- | --- |"]
    for label, pick in (("before 2025", lambda r: not recent(r)), ("2025 or later", recent)):
        group = [r for r in rows if pick(r)]
        scored = [results["rows"][r["id"]] for r in group if r["id"] in results["rows"]
                  and "error" not in results["rows"][r["id"]] and not results["rows"][r["id"]]["bound_only"]
                  and results["rows"][r["id"]].get("expected_over_measured")]
        ratios = [x["expected_over_measured"] for x in scored]
        err = f"{statistics.median(abs(v - 1) for v in ratios):.1%}" if ratios else "-"
        mid = f"{statistics.median(ratios):.2f}" if ratios else "-"
        out.append(f"| {label} | {len(group)} | {len(scored)} | {err} | {mid} |")
    return out + source_section([r for r in rows if recent(r)], results)


def scored_ratio(results: dict, row: dict) -> float | None:
    """A row's expected / measured where it is scored (not bound-only, run without error), else None."""
    got = results["rows"].get(row["id"])
    if not got or "error" in got or got["bound_only"]:
        return None
    return got.get("expected_over_measured")


def source_section(rows: list[dict], results: dict) -> list[str]:
    """The scored rows of recent engines by source, so that one source's rows cannot hide in the median."""
    by_source: dict[str, list[tuple[dict, float]]] = {}
    for r in rows:
        ratio = scored_ratio(results, r)
        if ratio is not None:
            by_source.setdefault(r["source_url"], []).append((r, ratio))
    if not by_source:
        return []
    out = ["", "The scored rows of engines released in 2025 or later, by source:", "",
           "| source | engine (versions) | scored | median abs(expected / measured - 1) | median expected / measured |",
           "| --- | --- | --- | --- | --- |"]
    for url, pairs in sorted(by_source.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        title = re.split(r" \(|, ", pairs[0][0]["source_title"], maxsplit=1)[0]
        engines = ", ".join(sorted({r["engine"] for r, _ in pairs}))
        ratios = [v for _, v in pairs]
        out.append(f"| [{title}]({url}) | {engines} | {len(pairs)} | "
                   f"{statistics.median(abs(v - 1) for v in ratios):.1%} | {statistics.median(ratios):.2f} |")
    return out


#: An efficiency source the recent rows are also priced with, where it covers their GPU, and its results.
SIDE_SOURCE = "aic"
SIDE_RESULTS_PATH = ROOT / "benchmarks" / f"published_results_{SIDE_SOURCE}.json"
#: Models whose checkpoints scale fp8 weights in 128x128 blocks (DeepSeek-V3/R1's config.json
#: quantization_config, dropped from the committed config): the side source asks fp8_block for them.
BLOCK_FP8 = ("examples/configs/deepseek-v3.json",)


def side_key(row: dict) -> str:
    """What a side-run result depends on beyond the row and the tool: the source's database version,
    its derivation and the format asked."""
    from rooflinekit_plugins.aic.measure import aic_version
    from rooflinekit_plugins.aic.table import DERIVATION

    block = row["model"] in BLOCK_FP8 and row.get("weight_dtype", row["dtype"]) == "fp8"
    return f"{SIDE_SOURCE} {aic_version()} derivation {DERIVATION}{' fp8_block' if block else ''}"


def side_source(row: dict) -> str:
    """The efficiency source a row is priced with by the side run: SIDE_SOURCE, with the checkpoint's
    block-scaled fp8 where the model's is (BLOCK_FP8)."""
    if row["model"] not in BLOCK_FP8 or row.get("weight_dtype", row["dtype"]) != "fp8":
        return SIDE_SOURCE
    from rooflinekit.core.plugins import get_host
    from rooflinekit.stages.hardware import hardware_db
    from rooflinekit_plugins.aic.table import variant  # the aic extra: only for the side run

    return str(variant(hardware_db(get_host()).get(row["hardware"]), fp8="fp8_block"))


def side_section(rows: list[dict], results: dict, side: dict) -> list[str]:
    """The recent scored rows also priced with SIDE_SOURCE (where it covers their GPU), beside the
    committed tables' figures on the same rows, by source. Not part of the scored figures above."""
    by_source: dict[str, list[tuple[dict, float, float]]] = {}
    for r in rows:
        ratio, other = scored_ratio(results, r), scored_ratio(side, r) if r["id"] in side["rows"] else None
        if ratio is not None and other is not None:
            by_source.setdefault(r["source_url"], []).append((r, ratio, other))
    if not by_source:
        return []
    out = ["", f"## Recent rows priced with `--efficiency {SIDE_SOURCE}`", "",
           f"`python benchmarks/validate_published.py --efficiency {SIDE_SOURCE}` prices the scored rows of",
           "engines released in 2025 or later again, where the source covers their GPU (not MI300X), with",
           "each kernel at its own shape from NVIDIA AIConfigurator's database of TensorRT-LLM kernels",
           "measured on the GPU (docs/accounting.md, Measured kernel times; balanced MoE routing, as",
           "rooflinekit assumes; DeepSeek's block-scaled fp8 as its checkpoint has it). These figures are",
           "not part of the ones above, which the committed tables price. Nothing is fitted.", "",
           "| source | engine | rows | published: median abs(e/m - 1) | e/m | aic: median abs(e/m - 1) | e/m |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    every = []
    for url, triples in sorted(by_source.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        title = re.split(r" \(|, ", triples[0][0]["source_title"], maxsplit=1)[0]
        engines = ", ".join(sorted({r["engine"] for r, _, _ in triples}))
        every += triples
        out.append(f"| [{title}]({url}) | {engines} | {len(triples)} | " + _pair_cells(triples) + " |")
    out.append(f"| all | | {len(every)} | " + _pair_cells(every) + " |")
    return out


def _pair_cells(triples: list[tuple[dict, float, float]]) -> str:
    cells = []
    for k in (1, 2):
        ratios = [t[k] for t in triples]
        cells += [f"{statistics.median(abs(v - 1) for v in ratios):.1%}", f"{statistics.median(ratios):.2f}"]
    return " | ".join(cells)


def spread_toml(results: dict, rows: list[dict]) -> str:
    """The committed table of rooflinekit.stages.spread, from the results file."""
    from rooflinekit.stages.efficiency_table import tables_digest

    table = tables_digest()
    out = ["# The spread of the expected time: p10 / p50 / p90 of measured / expected per step class over",
           "# the scored rows of docs/validation.md. Written by benchmarks/validate_published.py --spread",
           "# from benchmarks/published_results.json; do not edit (rooflinekit.stages.spread reads it).",
           f'efficiency_table = "{table}"  # sha256[:16] of the committed efficiency tables the rows were priced with',
           'statistic = "measured / expected; p10 and p90 by linear interpolation between order statistics"',
           'coverage = "leave-one-out: the share of a class\'s rows inside the p10-p90 of its other rows"', ""]
    for name, pairs in sorted(residuals(results, leave_out=holdout_ids(rows)).items()):
        out.append(f"[class.{name}]")
        out.append(f"rows = {len(pairs)}")
        if len(pairs) >= 2:
            low, mid, high = deciles([r for _, r in pairs])
            out += [f"p10 = {low:.4f}", f"p50 = {mid:.4f}", f"p90 = {high:.4f}"]
        cov = left_out_coverage(pairs)
        if cov is not None:
            out.append(f"coverage_left_out = {cov:.4f}")
        out.append("ids = [" + ", ".join(f'"{i}"' for i, _ in pairs) + "]")
        out.append("")
    return "\n".join(out)


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "not yet"
    if x >= 1:
        return f"{x:.3f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} us"


def _fmt_r(x: float | None) -> str:
    return "not yet" if x is None else f"{x:.3f}"


def _limits(x: dict) -> str:
    """What the bound of a row is made of, in words."""
    parts = [f"{x['binding']}-bound"]
    if x["prefill_share"] not in (0.0, 1.0):
        parts.append(f"prefill {x['prefill_share']:.0%} of the bound")
    parts.append(f"weights {x['weight_share']:.0%} and K/V {x['kv_share']:.0%} of the bytes")
    if x["comm_share"]:
        parts.append(f"collectives {x['comm_share']:.0%} of the step")
    return ", ".join(parts)


def config_words(row: dict) -> str:
    w = [row["dtype"]]
    if row.get("weight_dtype") and row["weight_dtype"] != row["dtype"]:
        g = f" g{row['weight_group_size']}" if row.get("weight_group_size") else ""
        w.append(f"{row['weight_dtype']}{g} weights")
    if row.get("kv_dtype") and row["kv_dtype"] != row["dtype"]:
        w.append(f"{row['kv_dtype']} KV")
    if row.get("tp", 1) > 1:
        w.append(f"TP {row['tp']}")
    if row.get("ep", 1) > 1:
        w.append(f"EP {row['ep']}")
    m = row["mapping"]
    if m == "static-batch":
        w.append(f"B {row['batch']}, {row['input_len']} in / {row['output_len']} out")
    elif m == "prefill":
        w.append(f"B {row['batch']}, prefill {row['input_len']}")
    else:
        w.append(f"B {row['batch']}, context {row['context']}")
    return ", ".join(w)


#: Sections of the page other scripts write (benchmarks/compare_aic.py --steps), kept as they are.
KEPT = ("<!-- aic-steps-section -->", "<!-- /aic-steps-section -->")


def _kept_sections(doc: Path) -> str:
    text = doc.read_text() if doc.exists() else ""
    if KEPT[0] not in text or KEPT[1] not in text:
        return ""
    return "\n" + KEPT[0] + text.split(KEPT[0], 1)[1].split(KEPT[1], 1)[0] + KEPT[1] + "\n"


def engine_list(rows) -> str:
    """The rows' engines in words, in the order they first appear: "a, b and c"."""
    names = list(dict.fromkeys(r["engine"] for r in rows))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def render_doc(rows: list[dict], results: dict) -> str:
    meta, s = results["meta"], summarize(rows, results)
    out = ["# Validation against published measurements", "",
           "rooflinekit's step time is a bound and, beside it, an expected time. This page holds both against",
           f"{len(rows)} published measurements of real engines ({engine_list(rows)}): each row is a figure",
           "from its source with the exact configuration, mapped to",
           "rooflinekit runs on the model's full config. The rows live in `benchmarks/published.toml` (source,",
           "configuration, mapping); `benchmarks/validate_published.py` runs them and regenerates this page and",
           "`benchmarks/published_results.json`; `tests/test_validation_published.py` recomputes a few cheap",
           "rows against the committed results and holds the property below.", "",
           "**The property: no row is faster than its bound.** A measured time below the bound means the",
           "tool prices work the engine does not do (or an entry's peaks are too low): a defect to explain and",
           "fix. The expected time is scored by |expected/measured - 1| (targets: a median of at most 20% over "
           "the scored rows and 12% over those from engines released in 2025 or later, whose median "
           "expected/measured should lie within 0.9-1.1; the summary and the table by engine release below say "
           "where the figures stand).", "",
           "## How a figure maps to runs", "",
           "| mapping | published figure | rooflinekit runs |",
           "| --- | --- | --- |",
           "| `static-batch` | a batch's whole latency, or tokens/s over it (gpt-fast tokens/s, TensorRT-LLM static-batch throughput, vLLM `benchmark_latency`) | prefill of the prompts, plus the decode steps at contexts input + 1 .. input + output - 1, summed step by step (both ends profiled; compute, memory and collective time interpolated per step, the max taken per step) |",
           "| `prefill` | first-token latency at batch 1 | one prefill step |",
           "| `decode-step` | a per-user token rate, or the inter-token latency at a fixed concurrency | one "
           "decode step, 1 / rate; its batch is the concurrency, or where requests wait for a slot the running "
           "batch the source's own output throughput x ITL gives (Little's law) |",
           "| `per-token` (bound-only) | a throughput at a scheduler-chosen batch or unpublished lengths | a step's bound per token; only the bound is checked |",
           "",
           "Conversions: gpt-fast's tokens/s is 200 generated tokens over the whole generate() call (prefill",
           "included), so the time is 200 / rate; TensorRT-LLM's out tok/s/GPU is batch x output / (latency x",
           "GPUs); vLLM's figure is the batch's latency in seconds. The bound of a step is `totals.time_bound_s`:",
           "the largest of its compute, HBM and collectives' times, each overlapped perfectly with the others (an",
           "engine that overlaps its all-to-all with compute, as DeepSeek's does, cannot beat it); the expected",
           "time is `totals.expected_step_s`.", "",
           "Nothing is fitted on these rows. The expected time's fractions come from kernel-level figures",
           "(`rooflinekit/stages/efficiency*.toml`: FlashMLA, FlashAttention-2/3/4, DeepGEMM, vLLM's fused-MoE",
           "kernel benchmark, best-shape matmul tables, hipBLASLt's max-achievable and skinny GEMMs, BabelStream,",
           "device copies), the collectives' per-call latency from each hardware entry (measured NCCL and RCCL",
           "all-reduce figures, or the library's latency model where none was found) and the engines' host time per step",
           "from measurements of the",
           "engines' schedulers (`rooflinekit/stages/engines.toml`: vLLM, SGLang and TensorRT-LLM issues, pull",
           "requests and posts); none of those sources is a row here, and a row takes an engine's host time",
           "(`engine_cost`) only where that table covers its engine version. A row whose engine ran two",
           "micro-batches to hide its all-to-all (DeepSeek's service, SGLang's EP runs with TBO) is priced with",
           "`--overlap two-batch` (`overlap`).", "",
           "## This run", "",
           f"- kernels view: **{meta.get('kernels', '?')}**: {meta.get('kernels_note', '')}",
           f"- expected time: {'`totals.expected_step_s`' if meta.get('has_expected') else 'not yet (the tool has no `totals.expected_step_s`)'}",
           f"- rooflinekit {meta.get('version', '?')}, {s['done']} of {s['rows']} rows run; every run is on meta, full model configs, one GPU's share under TP/EP", "",
           "## Summary", ""]
    if s["failed"]:
        out.append(f"- **{len(s['failed'])} rows failed to run** (the tool raised; see the per-row notes): "
                   f"{', '.join('`' + i + '`' for i in s['failed'])}.")
    if s["beat_bound"]:
        out.append(f"- **{len(s['beat_bound'])} of {s['scored']} scored rows are faster than the bound** "
                   f"(a defect to explain): {', '.join('`' + i + '`' for i in s['beat_bound'])}.")
    else:
        out.append(f"- No scored row is faster than its bound ({s['scored']} rows).")
    if s["bound_only_beat_bound"]:
        out.append(f"- Bound-only rows faster than the bound: {', '.join('`' + i + '`' for i in s['bound_only_beat_bound'])}.")
    if s["bound_over_measured_median"] is not None:
        out.append(f"- bound / measured over the scored rows: median {s['bound_over_measured_median']:.3f}, "
                   f"range {s['bound_over_measured_min']:.3f} to {s['bound_over_measured_max']:.3f}.")
    if s["expected_rows"]:
        out.append(f"- |expected / measured - 1| over {s['expected_rows']} rows: median {s['expected_abs_err_median']:.1%}, "
                   f"worst {s['expected_abs_err_worst']:.1%} (worst rows: {', '.join('`' + i + '`' for i in s['expected_worst_rows'])}).")
    else:
        out.append("- |expected / measured - 1|: not yet (no expected time in the tool's reports).")
    res = results["rows"]
    if s["beat_bound"]:
        out += ["", "What the rows faster than the bound are made of:", ""]
        for i in s["beat_bound"]:
            x = res[i]
            out.append(f"- `{i}`: bound {_fmt_s(x['bound_s'])} against {_fmt_s(x['measured_s'])} measured "
                       f"({x['bound_over_measured']:.2f}x); {_limits(x)}.")
    if s["loosest_rows"]:
        out += ["", "The rows furthest below their bound (where an expected time has most to explain):", ""]
        for i in s["loosest_rows"]:
            x = res[i]
            out.append(f"- `{i}`: bound at {x['bound_over_measured']:.0%} of the measured time; {_limits(x)}.")
    out += year_section(rows, results)
    out += side_section([r for r in rows if recent(r)], results, load_results(SIDE_RESULTS_PATH))
    out += spread_section(results, rows)
    out += ["", "## Rows", "",
            "| id | engine | hardware | model | configuration | measured | measured time | bound | bound / measured | expected | expected / measured |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        x = res.get(r["id"])
        flag = " (bound-only)" if r.get("bound_only") else ""
        if x is not None and "error" in x:
            out.append(f"| `{r['id']}`{flag} | {r['engine']} | {r['hardware']} | {r['model_name']} | {config_words(r)} | "
                       f"{r['measured']:g} {r['unit']} | {_fmt_s(measured_seconds(r))} | failed | | | |")
            continue
        if x is None:
            out.append(f"| `{r['id']}`{flag} | {r['engine']} | {r['hardware']} | {r['model_name']} | {config_words(r)} | "
                       f"{r['measured']:g} {r['unit']} | {_fmt_s(measured_seconds(r))} | not run | | | |")
            continue
        mark = " **faster than bound**" if x["beats_bound"] else ""
        out.append(f"| `{r['id']}`{flag} | {r['engine']} | {r['hardware']} | {r['model_name']} | {config_words(r)} | "
                   f"{r['measured']:g} {r['unit']} | {_fmt_s(x['measured_s'])} | {_fmt_s(x['bound_s'])} | "
                   f"{x['bound_over_measured']:.3f}{mark} | {_fmt_s(x['expected_s'])} | {_fmt_r(x['expected_over_measured'])} |")
    out += ["", "## Per-row notes", ""]
    for r in rows:
        x = res.get(r["id"])
        out.append(f"### `{r['id']}`")
        out.append("")
        out.append(f"- source: [{r['source_title']}]({r['source_url']}); {r['where']}")
        out.append(f"- engine: {r['engine']} {r.get('engine_version', '')}".rstrip())
        out.append(f"- mapping: {r['mapping']}{' (bound-only)' if r.get('bound_only') else ''}; {r['notes']}")
        if x is not None and "error" in x:
            out.append(f"- the run failed: `{x['error'][:300]}`")
        elif x is not None:
            out.append(f"- bound made of: {_limits(x)}")
            out.append("- runs:")
            for st in x["steps"]:
                out.append(f"  - `{st['command']}`: bound {_fmt_s(step_bound(st))} ({st['binding']}), expected {_fmt_s(st['expected_s'])}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rerun rows whose results are up to date")
    ap.add_argument("--only", nargs="*", default=None, help="run only these row ids")
    ap.add_argument("--docs-only", action="store_true", help="rewrite docs/validation.md from the results file")
    ap.add_argument("--spread", action="store_true",
                    help=f"also rewrite {SPREAD_PATH.relative_to(ROOT)} (the expected time's p10-p90) from the results")
    ap.add_argument("--kernels", choices=("auto", "as-written", "serving"), default="auto",
                    help="the kernels view (auto: serving once the tool prices it, else as-written)")
    ap.add_argument("--rows", default=str(ROWS_PATH))
    ap.add_argument("--results", default=str(RESULTS_PATH))
    ap.add_argument("--doc", default=str(DOC_PATH))
    ap.add_argument("--efficiency", choices=(SIDE_SOURCE,), default=None,
                    help=f"price the scored rows of 2025+ engines with this source instead, into "
                         f"{SIDE_RESULTS_PATH.relative_to(ROOT)} (a section of the page; rows whose GPU it does not "
                         "cover are left out)")
    args = ap.parse_args(argv)
    rows = load_rows(Path(args.rows))
    if args.efficiency:
        rows_all = rows
        rows = [r for r in rows if recent(r) and not r.get("bound_only")]
        if args.results == str(RESULTS_PATH):
            args.results = str(SIDE_RESULTS_PATH)
    results_path = Path(args.results)
    results = load_results(results_path)
    if not args.docs_only:
        kernels, note = serving_view()
        if args.kernels != "auto" and args.kernels != kernels:
            kernels, note = args.kernels, f"forced with --kernels {args.kernels} (auto would take {kernels})"
        version, expected = tool_version(), has_expected_field()
        print(f"kernels view: {kernels}: {note}", flush=True)
        print(f"expected time: {'totals.expected_step_s' if expected else 'not yet'}", flush=True)
        results["meta"] = {"kernels": kernels, "kernels_note": note, "version": version, "has_expected": expected}
        todo = [r for r in rows if args.only is None or r["id"] in args.only]
        for i, row in enumerate(todo, 1):
            fp = fingerprint(row, kernels, version, expected, side_key(row) if args.efficiency else None)
            old = results["rows"].get(row["id"])
            if old is not None and old.get("fingerprint") == fp and not args.force:
                print(f"[{i}/{len(todo)}] {row['id']}: up to date", flush=True)
                continue
            t0 = time.perf_counter()
            print(f"[{i}/{len(todo)}] {row['id']}: {len(runs_of(row))} run(s) ...", end="", flush=True)
            try:
                x = run_row(row, kernels, side_source(row) if args.efficiency else None)
            except Exception as exc:  # noqa: BLE001 - one row's failure is reported, the rest still run
                error = f"{type(exc).__name__}: {exc}"
                if args.efficiency and "has no measured kernels" in str(exc):  # a GPU the source does not cover
                    error = f"--efficiency {args.efficiency} does not cover {row['hardware']}"
                results["rows"][row["id"]] = {"id": row["id"], "kernels": kernels, "error": error,
                                              "fingerprint": fp}
                write_json(results_path, results)
                print(f" FAILED: {type(exc).__name__}: {exc}", flush=True)
                continue
            x["fingerprint"] = fp
            results["rows"][row["id"]] = x
            write_json(results_path, results)
            print(f" {time.perf_counter() - t0:.1f} s: bound {_fmt_s(x['bound_s'])}, measured {_fmt_s(x['measured_s'])}, "
                  f"bound/measured {x['bound_over_measured']:.3f}{'  FASTER THAN BOUND' if x['beats_bound'] else ''}", flush=True)
        known = {r["id"] for r in rows}
        results["rows"] = {k: v for k, v in results["rows"].items() if k in known}
        write_json(results_path, results)
    if args.efficiency:  # the page is the committed tables' results, with this source's section
        rows, results = rows_all, load_results(RESULTS_PATH)
    if args.spread:
        SPREAD_PATH.write_text(spread_toml(results, rows))
        print(f"wrote {SPREAD_PATH.relative_to(ROOT)}")
    doc = Path(args.doc)
    doc.write_text(render_doc(rows, results) + _kept_sections(doc))
    s = summarize(rows, results)
    print(f"rows faster than the bound: {', '.join(s['beat_bound']) or 'none'}")
    if s["expected_rows"]:
        print(f"|expected/measured - 1|: median {s['expected_abs_err_median']:.1%}, worst {s['expected_abs_err_worst']:.1%}")
    else:
        print("|expected/measured - 1|: not yet")
    print(f"wrote {args.doc} and {results_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
