"""The p10-p90 range of an expected time (rooflinekit.stages.spread) and `plan --targets-at p90`.

The committed table is recomputed here from the validation's results with a percentile written
out by hand (linear interpolation between order statistics), so a table left behind by a change
of the results or of the efficiency table fails.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys

import pytest
from click.testing import CliRunner

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.profile import run_profile
from rooflinekit.cli.main import cli
from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.plan import Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.efficiency_table import committed_tables
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.spread import MIN_ROWS, load_spreads, table_facts
from tests.conftest import EXAMPLES, MODELS, ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

RESULTS = json.loads((ROOT / "benchmarks" / "published_results.json").read_text())
#: Rows added after the spread was fixed (benchmarks/published.toml `holdout`): not in it.
HOLDOUT = {r["id"] for r in tomllib.loads((ROOT / "benchmarks" / "published.toml").read_text())["row"]
           if r.get("holdout")}
GQA = str(EXAMPLES / "llama_gqa.py")
SMALL = {"layers": 2, "heads": 8, "kv_heads": 4, "head_dim": 32, "hidden": 256, "intermediate": 512, "vocab": 1000}


def _percentile(values: list[float], p: float) -> float:
    """The p-th percentile: linear interpolation at rank p x (n - 1) of the sorted values."""
    xs = sorted(values)
    rank = p * (len(xs) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (rank - lo) * (xs[hi] - xs[lo])


def _ratios_by_class() -> dict[str, list[float]]:
    """measured / expected of each scored row, by the class of the step carrying most of its bound."""
    out: dict[str, list[float]] = {"all": []}
    for x in RESULTS["rows"].values():
        if "error" in x or x["bound_only"] or not x.get("expected_over_measured") or x["id"] in HOLDOUT:
            continue
        if x["binding"] == "communication" or x["comm_share"] >= 0.3:
            name = "communication"
        else:
            name = "prefill" if x["prefill_share"] >= 0.5 else "decode"
        out.setdefault(name, []).append(1 / x["expected_over_measured"])
        out["all"].append(1 / x["expected_over_measured"])
    return out


def test_the_committed_table_is_the_percentiles_of_the_committed_results():
    table = load_spreads()
    for name, ratios in _ratios_by_class().items():
        if len(ratios) < MIN_ROWS:
            continue
        assert table[name].rows == len(ratios)
        assert table[name].low == pytest.approx(_percentile(ratios, 0.1), abs=1e-4)
        assert table[name].high == pytest.approx(_percentile(ratios, 0.9), abs=1e-4)


def test_the_table_was_made_with_the_efficiency_table_in_use():
    digest = hashlib.sha256()
    for path in committed_tables():  # recomputed here: each table's name and contents, in order
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    assert table_facts()["efficiency_table"] == digest.hexdigest()[:16], (
        "an efficiency table changed since the spread was computed: rerun "
        "`python benchmarks/validate_published.py --spread`")


def test_a_class_with_too_few_rows_borrows_all_rows():
    table, ratios = load_spreads(), _ratios_by_class()
    for name in ("mixed", "communication"):
        if len(ratios.get(name, [])) < MIN_ROWS:
            assert table[name].source == "all" and table[name].rows == len(ratios["all"])
            assert table[name].high == table["all"].high and "fewer than" in table[name].words()


def _totals(phase, batch, context, **deployment):
    workload = Workload(phase, batch, context, "bf16", "meta", tuple(sorted(SMALL.items())))
    return run_profile(load_source(GQA, SMALL), workload, Deployment("H800", **deployment)).report.totals


@pytest.mark.parametrize("phase, batch, context, expected_class", [("decode", 8, 1024, "decode"),
                                                                    ("prefill", 1, 2048, "prefill")])
def test_a_profile_carries_its_class_range(phase, batch, context, expected_class):
    t = _totals(phase, batch, context)
    ratios = _ratios_by_class()[expected_class]
    assert t.expected_class == expected_class
    assert t.expected_low_s == pytest.approx(t.expected_step_s * _percentile(ratios, 0.1), rel=1e-3)
    assert t.expected_high_s == pytest.approx(t.expected_step_s * _percentile(ratios, 0.9), rel=1e-3)
    assert any("p10-p90" in w for w in t.expected_conventions)


def test_a_step_its_collectives_dominate_is_communication_heavy():
    """Experts over 16 GPUs on two nodes at batch 1: the all-to-alls are most of the step."""
    workload = Workload("decode", 1, 64, "bf16", "meta", ())
    t = run_profile(load_source(str(MODELS / "experts3d.py"), {}), workload,
                Deployment("H800", ep=16, kernels="serving")).report.totals
    assert t.expected_class == "communication"
    assert t.expected_high_s == pytest.approx(t.expected_step_s * load_spreads()["communication"].high)


def test_the_pipelined_step_carries_its_own_range():
    t = _totals("decode", 8, 1024, pp=2)
    assert t.expected_high_s == pytest.approx(t.expected_step_s * load_spreads()["decode"].high)


@pytest.fixture(scope="module")
def plans():
    host = get_host()
    source = load_source(GQA, {}, host)
    options = PlanOptions(gpus=2, pps=(1,), max_batch=512)
    return {at: run_plan(source, Targets(512, 128, ttft_s=0.05, tpot_s=0.003, at=at), options, host=host)
            for at in ("expected", "p90")}


def test_every_candidate_has_the_range_of_its_classes(plans):
    table = load_spreads()
    for c in plans["expected"].configs:
        if c.tpot_s is None:
            continue
        ttft, tpot = ("mixed", "mixed") if c.mode == "aggregated" else ("prefill", "decode")
        assert c.tpot_p90_s == pytest.approx(c.tpot_s * table[tpot].high)
        assert c.tpot_p10_s == pytest.approx(c.tpot_s * table[tpot].low)
        assert c.ttft_p90_s == pytest.approx(c.ttft_s * table[ttft].high)


def test_targets_at_p90_are_met_at_the_upper_ends(plans):
    targets = plans["p90"].targets
    meeting = [c for c in plans["p90"].configs if c.meets_slo]
    assert meeting
    for c in meeting:
        assert c.tpot_p90_s <= targets.tpot_s and c.ttft_p90_s <= targets.ttft_s
    # the expected-time best is too close to the TPOT target to meet it at p90
    best = plans["expected"].best_config
    assert best.tpot_s <= targets.tpot_s < best.tpot_p90_s
    assert plans["p90"].best_config.tokens_per_s_per_user > best.tokens_per_s_per_user


def test_targets_at_is_checked():
    from rooflinekit.analyses.plan import plan

    with pytest.raises(WorkloadError, match="targets_at"):
        plan(GQA, search=PlanOptions(targets_at="p99"))
    result = CliRunner().invoke(cli, ["plan", GQA, "--targets-at", "p99"])
    assert result.exit_code == 2 and "p99" in result.output
