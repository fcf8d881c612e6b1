"""--engine NAME: a serving engine's host time per step in the expected step, never in the bound.

The committed costs (rooflinekit/stages/engines.toml) are recomputed here from the published
figures their sources quote; a report's and a plan's figures with an engine are the same figures
without one plus `step_s + sequence_s x sequences` once per step.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.cli.main import cli
from rooflinekit.core.plan import Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.engine import engine_cost, engines
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, MODELS

GQA = str(EXAMPLES / "llama_gqa.py")
OPTIONS = {"layers": 2}
FAST = ReportOptions(detail=False, measure=False)


def test_the_committed_costs_follow_from_their_published_figures():
    e = engines()
    assert e["none"].host_s(512) == 0.0 and e["sglang"].host_s(512) == 0.0  # overlap: no idle GPU shown
    assert e["vllm-v0"].host_s(1) == e["vllm-v0"].host_s(256) == 4e-3  # "about 4ms of GPU bubble" a decode
    # vLLM V1: steps of 256 and 32 sequences without and with async scheduling (throughput = batch / step)
    hidden_256, hidden_32 = 256 / 4039 - 256 / 4258, 32 / 1014 - 32 / 1025
    assert e["vllm"].sequence_s == pytest.approx((hidden_256 - hidden_32) / (256 - 32), rel=0.01)
    assert abs(e["vllm"].host_s(32) - hidden_32) < 1e-4 and abs(e["vllm"].host_s(256) - hidden_256) < 1e-4
    # SGLang without the overlap schedule: 16 running requests at 3053.86 against 3458.31 tok/s
    assert e["sglang-no-overlap"].host_s(16) == pytest.approx(16 / 3053.86 - 16 / 3458.31, rel=0.01)
    assert e["trtllm"].host_s(64) == pytest.approx(580e-6, rel=0.01)  # "~580 us/iter" at concurrency 64
    for cost in e.values():
        assert cost.source and cost.words and cost.step_s >= 0 and cost.sequence_s >= 0


def _report(engine: str | None, **kw):
    host = get_host()
    workload = kw.pop("workload", Workload("decode", 8, 2048, "bf16"))
    return run_profile(load_source(GQA, OPTIONS, host), workload, Deployment("H800", kernels="serving", engine=engine, **kw),
                   options=FAST, host=host).report


@pytest.mark.parametrize("engine", ["vllm", "vllm-v0", "trtllm"])
@pytest.mark.parametrize("kw", [{}, {"pp": 2}, {"workload": Workload("prefill", 2, 512, "bf16")}],
                         ids=["decode", "pp2", "prefill"])
def test_a_report_adds_the_host_time_once_a_step_and_not_to_the_bound(engine, kw):
    batch = kw["workload"].batch if "workload" in kw else 8
    plain, priced = _report(None, **dict(kw)), _report(engine, **dict(kw))
    host = engine_cost(engine).host_s(batch)
    t0, t1 = plain.totals, priced.totals
    assert t1.expected_step_s == pytest.approx(t0.expected_step_s + host, rel=1e-12)
    assert t1.engine_host_s == pytest.approx(host, rel=1e-12) and t0.engine_host_s is None
    assert t1.time_bound_s == t0.time_bound_s
    assert t1.tokens_per_s_per_gpu == pytest.approx(t0.tokens_per_s_per_gpu * t0.expected_step_s / t1.expected_step_s)
    if t0.expected_low_s is not None:
        assert t1.expected_high_s / t1.expected_step_s == pytest.approx(t0.expected_high_s / t0.expected_step_s)
    assert any(c.startswith(f"engine: {engine} ") for c in t1.expected_conventions)


def test_the_cli_names_it_and_refuses_an_unknown_engine():
    runner = CliRunner()
    base = ["profile", GQA, "-O", "layers=2", "-H", "H800", "--batch", "8", "--context", "2048"]
    result = runner.invoke(cli, base + ["--engine", "vllm"])
    assert result.exit_code == 0, result.output
    assert "engine host 104 us" in result.output and "engine vllm" in result.output
    report = json.loads(runner.invoke(cli, base + ["--engine", "vllm", "-f", "json"]).stdout)
    assert report["deployment"]["engine"] == "vllm" and report["totals"]["engine_host_s"] == pytest.approx(8 * 13e-6)
    bad = runner.invoke(cli, base + ["--engine", "warp"])
    assert bad.exit_code != 0 and "--engine 'warp': not an engine" in bad.output and "Traceback" not in bad.output


def test_the_planner_adds_it_to_every_step_and_agrees_with_profile():
    host = get_host()
    source = load_source(GQA, OPTIONS, host)
    targets = Targets(256, 64)  # no targets: the same batches are priced with and without the engine
    search = dict(gpus=2, pps=(1, 2), max_batch=8, weight_dtypes=("bf16",), kv_dtypes=("bf16",))
    plain = run_plan(source, targets, PlanOptions(**search), host=host)
    priced = run_plan(source, targets, PlanOptions(**search, engine="vllm"), host=host)
    cost = engine_cost("vllm")
    assert any(n.startswith("engine: vllm ") for n in priced.notes)
    pairs = [(a, b) for a, b in zip(plain.configs, priced.configs, strict=True) if a.tpot_s is not None]
    assert len(pairs) > 10 and {b.mode for _, b in pairs} == {"aggregated", "disaggregated"}
    for a, b in pairs:
        assert a.label() == b.label()
        step = cost.host_s(b.batch)
        assert b.engine_host_s == pytest.approx(step) and a.engine_host_s is None
        mixed = cost.host_s(b.batch + 1) if b.mode == "aggregated" else step  # the prompt chunk rides along
        assert b.tpot_s == pytest.approx(a.tpot_s + mixed, rel=1e-9), b.label()
        assert b.step_s == pytest.approx(a.step_s + step, rel=1e-9), b.label()
        assert b.tpot_bound_s == a.tpot_bound_s and b.step_bound_s == a.step_bound_s
        again = run_profile(source, Workload("decode", b.batch, b.step_context, b.dtype),
                        Deployment("H800", tp=b.tp, pp=b.pp, kernels=b.kernels, memory_fraction=0.9, engine="vllm"),
                        options=FAST, host=host).report.totals.expected_step_s
        assert b.step_s == pytest.approx(again, rel=1e-6), b.label()


def test_the_fused_view_and_a_speculative_cycle_pay_the_host_time_once():
    from rooflinekit.analyses.advise import AdviseOptions, advise

    host = get_host()
    source = load_source(GQA, OPTIONS, host)
    workload = Workload("decode", 8, 2048, "bf16")
    full = ReportOptions(measure=False)
    plain = run_profile(source, workload, Deployment("H800"), options=full, host=host).report.totals
    priced = run_profile(source, workload, Deployment("H800", engine="vllm-v0"), options=full, host=host).report.totals
    assert priced.fused.expected_step_s == pytest.approx(plain.fused.expected_step_s + 4e-3, rel=1e-12)
    cycles = {}
    for engine in (None, "vllm-v0"):
        report = advise(source, workload, Deployment("H800", kernels="serving", engine=engine), host=host,
                        extras=AdviseOptions(mtp=2))
        cycles[engine] = {lv.lever: lv.speculative for lv in report.levers if lv.speculative is not None}
    assert cycles[None] and cycles[None].keys() == cycles["vllm-v0"].keys()
    for lever, cycle in cycles[None].items():
        other = cycles["vllm-v0"][lever]
        assert other.draft_step_s == pytest.approx(cycle.draft_step_s, rel=1e-12), lever  # drafts pay no host time


def test_captured_graph_sizes_and_the_padding_they_cause():
    """vLLM V1's default list is 1, 2, 4, multiples of 8 to 248 and of 16 from 256 to 512: 51 sizes;
    SGLang's (80 GB parts) 1, 2, 4, 8 and 16 to 160 by 8: 23 sizes; TensorRT-LLM pads nothing by default."""
    e = engines()
    vllm, sglang = e["vllm"].graph_sizes, e["sglang"].graph_sizes
    assert len(vllm) == 3 + 31 + 17 and vllm[:5] == (1, 2, 4, 8, 16) and vllm[-2:] == (496, 512)
    assert 248 in vllm and 252 not in vllm and 264 not in vllm and 272 in vllm
    assert len(sglang) == 4 + 19 and sglang[-1] == 160
    assert [e["vllm"].padded(b) for b in (1, 3, 9, 249, 512, 513)] == [1, 4, 16, 256, 512, 513]
    assert [e["sglang"].padded(b) for b in (5, 17, 160, 161)] == [8, 24, 160, 161]
    assert e["trtllm"].padded(9) == 9 and e["vllm-v0"].padded(9) == 16
    words = e["vllm"].padding_words(9)
    assert "vllm runs 9 sequences as its captured size 16" in words and "7 padded rows" in words
    assert "none: vllm captures 16 sequences" in e["vllm"].padding_words(16)
    above = e["vllm"].padding_words(600)
    assert "600 sequences is above vllm's largest captured size 512" in above and "captures 600" not in above
    # vLLM's graphs count tokens: 3 sequences of 4 tokens pad 12 to 16; SGLang's count sequences
    assert "runs 12 tokens (3 sequences x 4) as its captured size 16" in e["vllm"].padding_words(3, 4)
    assert "runs 3 sequences as its captured size 4" in e["sglang"].padding_words(3, 4)


def test_a_decode_report_states_padding_clocks_and_the_expert_load():
    moe = str(MODELS / "experts3d.py")
    r = run_profile(load_source(GQA, OPTIONS), Workload("decode", 9, 256, options=tuple(OPTIONS.items())),
                Deployment("H800", engine="vllm"), options=FAST).report
    lines = r.totals.expected_conventions
    assert any(line.startswith("CUDA-graph padding (stated, not priced): vllm runs 9 sequences") for line in lines)
    assert any(line.startswith("clocks (stated, not applied)") for line in lines)
    assert not any(line.startswith("expert-parallel load") for line in lines)  # no EP here
    r = run_profile(load_source(moe, {}), Workload("decode", 8, 256), Deployment("H800", ep=4, ep_imbalance=1.5),
                options=FAST).report
    load = [line for line in r.totals.expected_conventions if line.startswith("expert-parallel load")]
    assert len(load) == 1 and "1.5x the mean tokens" in load[0] and "2.56" in load[0]
