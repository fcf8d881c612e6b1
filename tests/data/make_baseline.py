"""Regenerate baseline_totals.json: the numbers every example and shipped config gave before a
refactor, held by tests/test_baseline.py. Run only when a change of numbers is intended:

    python tests/data/make_baseline.py

Each case is `TARGET:PHASE:VARIANT`. The variants are the deployment settings a refactor of the
request must carry unchanged: plain, tensor parallel 2, expert parallel 2 (models with experts),
int4 weights with an fp8 KV cache, and four new tokens per sequence in decode. A case that the
tool refuses holds its error line instead of numbers.

    python tests/data/make_baseline.py --only 'tp2|ep2' --allow comm.time_s,totals.predicted_step_s

reruns only the cases whose key matches --only (the others are kept as saved) and refuses to write
when a field outside --allow (dotted: section.field) changed or appeared.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPTH = "3"
WORKLOADS = {"decode": ["--batch", "2", "--context", "1024"], "prefill": ["--batch", "1", "--context", "256"]}
VARIANTS = {
    "plain": [],
    "tp2": ["--tp", "2"],
    "ep2": ["--ep", "2"],
    "int4-fp8kv": ["--weight-dtype", "int4", "--kv-dtype", "fp8"],
    "qlen4": ["--q-len", "4"],
}
KEEP_TOTALS = ("flops", "bytes", "flops_executed", "flops_model", "weight_bytes", "kv_bytes_executed",
               "kv_bytes_min", "other_bytes", "uncounted_bytes", "ops", "time_bound_s", "predicted_step_s")
KEEP_ATT = ("module", "arch", "num_heads", "num_kv_heads", "head_dim", "v_head_dim", "window",
            "kv_bytes_min", "bytes_min", "kv_bytes_executed", "flops_model", "flops_executed",
            "bytes_executed", "cache_bytes_per_token")
KEEP_MEMORY = ("weights_bytes", "kv_cache_bytes", "activation_peak_bytes", "total_bytes", "capacity_bytes",
               "reserve_bytes", "fits", "max_batch", "gpus")
KEEP_COMM = ("calls", "message_bytes", "wire_bytes", "time_s", "expected_time_s")
KEEP_FUSED = ("bytes", "time_bound_s", "predicted_step_s")


#: The key of the release the transformers configs' cases were recorded with (their counts are how
#: that release writes the models; tests/test_baseline.py compares exactly only on that release).
RECORDED = "_recorded_with"


def targets() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "examples" / "configs").glob("*.json"))


def variants(phase: str) -> list[str]:
    """The variants a phase takes: q_len is a decode knob."""
    return [v for v in VARIANTS if v != "qlen4" or phase == "decode"]


def args(target: str, phase: str, variant: str) -> list[str]:
    return ["profile", target, "--phase", phase, *WORKLOADS[phase], *VARIANTS[variant], "-H", "H800",
            "--depth", DEPTH, "-f", "json"]


def has_experts(report: dict) -> bool:
    """Whether an expert-parallel report routes tokens between GPUs (the ep2 variant is kept only then)."""
    return any(c["collective"] == "all_to_all" for c in (report.get("comm") or {}).get("collectives", []))


def summary(report: dict) -> dict:
    out = {
        "totals": {k: report["totals"][k] for k in KEEP_TOTALS},
        "attention": [{k: row[k] for k in KEEP_ATT} for row in report["attention"]],
        "modules": sorted([[m["name"], m["flops"], m["bytes"], m["weight_bytes"]] for m in report["modules"]]),
        "uncounted": sorted([[u["name"], u["count"], u["bytes"]] for u in report["uncounted_ops"]]),
        "memory": {k: report["memory"][k] for k in KEEP_MEMORY},
        "fused": {k: report["totals"]["fused"][k] for k in KEEP_FUSED},
    }
    if report.get("comm"):
        out["comm"] = {k: report["comm"][k] for k in KEEP_COMM}
        out["collectives"] = sorted([[c["collective"], c["group_size"], c["calls"], c["message_bytes"]]
                                     for c in report["comm"]["collectives"]])
    return out


def run(invoke, target: str, phase: str, variant: str) -> dict | None:
    """One case: its summary, its error line when refused, None when the variant does not apply."""
    result = invoke(*args(target, phase, variant))
    if result.exit_code != 0:
        return {"error": result.stderr.strip().splitlines()[-1]}
    report = json.loads(result.stdout)
    if variant == "ep2" and not has_experts(report):
        return None
    return summary(report)


def changed(old, new, where: str = "") -> set[str]:
    """The dotted fields (section.field) in which two summaries differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: set[str] = set()
        for k in old.keys() | new.keys():
            name = f"{where}.{k}" if where else k
            if k not in old or k not in new:
                out.add(name)
            elif where:
                out |= {name} if old[k] != new[k] else set()
            else:
                out |= changed(old[k], new[k], name)
        return out
    return {where} if old != new else set()


def main() -> None:
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", help="rerun only the cases whose key matches this regex")
    parser.add_argument("--allow", help="comma-separated dotted fields that may change (default: any)")
    opts = parser.parse_args()
    path = Path(__file__).parent / "baseline_totals.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    allow = set(opts.allow.split(",")) if opts.allow else None

    def invoke(*a):
        return CliRunner().invoke(cli, [str(x) for x in a])

    import transformers

    release = transformers.__version__
    recorded = saved.get(RECORDED, {}).get("transformers")
    if opts.only and recorded not in (None, release):
        raise SystemExit(f"not written: the baseline's transformers cases were recorded on {recorded}, this is "
                         f"{release}: rerun every case (no --only), or install {recorded}")
    data, bad = {RECORDED: {"transformers": release}}, []
    for t in targets():
        rel = str(t.relative_to(ROOT))
        for phase in WORKLOADS:
            for variant in variants(phase):
                key = f"{rel}:{phase}:{variant}"
                if opts.only and not re.search(opts.only, key):
                    if key in saved:
                        data[key] = saved[key]
                    continue
                case = run(invoke, rel, phase, variant)
                if case is not None:
                    data[key] = case
                    moved = changed(saved.get(key, {}), case) if key in saved else set()
                    if allow is not None and moved - allow:
                        bad.append(f"{key}: {sorted(moved - allow)}")
                    print(key, "error" if "error" in case else "ok", sorted(moved), flush=True)
    if bad:
        raise SystemExit("not written: fields outside --allow changed:\n" + "\n".join(bad))
    lines = [f"{json.dumps(k)}: {json.dumps(data[k], sort_keys=True, separators=(',', ':'))}" for k in sorted(data)]
    print(f"transformers cases recorded on {release}")
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"{len(data)} cases written")


if __name__ == "__main__":
    main()
