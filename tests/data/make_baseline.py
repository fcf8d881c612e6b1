"""Regenerate baseline_totals.json: the numbers every example and shipped config gave before a
refactor, held by tests/test_baseline.py. Run only when a change of numbers is intended:

    python tests/data/make_baseline.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = {"decode": ["--batch", "2", "--context", "1024"], "prefill": ["--batch", "1", "--context", "256"]}
KEEP_TOTALS = ("flops", "bytes", "flops_executed", "flops_model", "weight_bytes", "kv_bytes_executed",
               "kv_bytes_min", "other_bytes", "uncounted_bytes", "ops", "time_bound_s", "predicted_step_s")
KEEP_ATT = ("module", "arch", "num_heads", "num_kv_heads", "head_dim", "v_head_dim", "window",
            "kv_bytes_min", "bytes_min", "kv_bytes_executed", "flops_model", "flops_executed",
            "bytes_executed", "cache_bytes_per_token")


def targets() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "examples" / "configs").glob("*.json"))


def summary(report: dict) -> dict:
    return {
        "totals": {k: report["totals"][k] for k in KEEP_TOTALS},
        "attention": [{k: row[k] for k in KEEP_ATT} for row in report["attention"]],
        "modules": sorted([[m["name"], m["flops"], m["bytes"], m["weight_bytes"]] for m in report["modules"]]),
        "uncounted": sorted([[u["name"], u["count"], u["bytes"]] for u in report["uncounted_ops"]]),
    }


def run(target: Path, phase: str) -> dict:
    cmd = [sys.executable, "-m", "rooflinekit", "profile", str(target.relative_to(ROOT)), "--phase", phase,
           *WORKLOADS[phase], "-H", "H800", "-f", "json"]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return summary(json.loads(out))


def main() -> None:
    data = {f"{t.relative_to(ROOT)}:{phase}": run(t, phase) for t in targets() for phase in WORKLOADS}
    (Path(__file__).parent / "baseline_totals.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{len(data)} cases written")


if __name__ == "__main__":
    main()
