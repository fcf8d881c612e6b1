"""The planner's figures for published configurations (benchmarks/validate_plan.py): recomputed
for a cheap row, and held against `profile`'s summed steps for the same mapping."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_plan as vplan  # noqa: E402
import validate_published as vp  # noqa: E402

RESULTS = json.loads((ROOT / "benchmarks" / "plan_published.json").read_text())


@pytest.mark.hf
@pytest.mark.parametrize("row_id", ["gptfast-llama2-7b-bf16", "trtllm-llama2-7b-h100-fp8-ttft-128"])
def test_a_row_recomputes_to_its_stored_figure(row_id):
    row = next(r for r in vp.load_rows() if r["id"] == row_id)
    assert vplan.plan_seconds(row) == pytest.approx(RESULTS[row_id]["plan_s"], rel=1e-9)


def test_every_published_configuration_is_priced_and_agrees_with_profile():
    rows = [r for r in vp.load_rows() if r["mapping"] in vplan.MAPPINGS]
    assert {r["id"] for r in rows} <= set(RESULTS)
    for row in rows:
        x = RESULTS[row["id"]]
        assert x["measured_s"] == pytest.approx(vp.measured_seconds(row), rel=1e-12)
        if x["profile_expected_s"] is not None:
            # the planner's exact mean over contexts against the profiler's two profiled ends
            assert x["plan_s"] == pytest.approx(x["profile_expected_s"], rel=1e-3)
