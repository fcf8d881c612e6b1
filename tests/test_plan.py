"""rooflinekit plan: step models against full profiles, the closed forms against brute force, the
search's best against a profile of its own decode step, and the command's answers."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions, wide_eps
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.analyses.stepfit import Shape, StepFitter
from rooflinekit.cli.main import cli
from rooflinekit.core.plan import WEIGHT_FORMATS, Targets, pareto_front, parse_layout
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.linesum import max_linear_sum
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.queueing import wait_quantile

MODEL = "examples/llama_gqa.py"


@given(st.floats(-1e3, 1e3), st.floats(-10, 10), st.floats(-1e3, 1e3), st.floats(-10, 10), st.integers(1, 60))
@settings(max_examples=200, deadline=None)
def test_max_linear_sum_is_the_sum_of_the_larger_term(a, b, c, d, n):
    brute = sum(max(a + b * i, c + d * i) for i in range(n))
    assert max_linear_sum(a, b, c, d, n) == pytest.approx(brute, rel=1e-9, abs=1e-6)


@given(st.floats(-1e3, 1e3), st.floats(-10, 10), st.floats(-1e3, 1e3), st.floats(-10, 10), st.integers(1, 60),
       st.floats(0, 1e3))
@settings(max_examples=300, deadline=None)
def test_max_linear_sum_with_a_floor_is_the_sum_of_the_largest_term(a, b, c, d, n, floor):
    """The bound over contexts: the larger of two lines (compute, memory) or the collectives' floor."""
    brute = sum(max(a + b * i, c + d * i, floor) for i in range(n))
    assert max_linear_sum(a, b, c, d, n, floor) == pytest.approx(brute, rel=1e-9, abs=1e-6)


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=30))
def test_pareto_front_is_every_undominated_point_and_monotone(points):
    front = pareto_front(points)

    def dominated(i):
        return any(q[0] >= points[i][0] and q[1] >= points[i][1] and q != points[i] for q in points)

    undominated = {points[i] for i in range(len(points)) if not dominated(i)}
    assert {points[i] for i in front} == undominated
    firsts = [points[i][0] for i in front]
    seconds = [points[i][1] for i in front]
    assert firsts == sorted(firsts, reverse=True) and seconds == sorted(seconds)


@pytest.fixture(scope="module")
def fitter():
    host = get_host()
    db = hardware_db(host)
    return StepFitter(load_source(MODEL, {}, host), Workload("decode", 1, 512), host, db), db


@pytest.mark.parametrize("deployment", [
    Deployment(hardware="H800"),
    Deployment(hardware="H800", kernels="serving", tp=2, weight_dtype="fp8", kv_dtype="fp8"),
], ids=["as-written", "serving-tp2-fp8"])
def test_step_model_equals_a_full_profile_at_unseen_points(fitter, deployment):
    f, db = fitter
    hw = db.get("H800")
    shape = Shape("decode", 1, (1, 2), (512, 640))
    model = f.step_model(shape, deployment, hw)
    for batch, context in ((7, 600), (32, 1000)):
        report = run_profile(f.built, Workload("decode", batch, context), deployment,
                         options=ReportOptions(detail=False, measure=False), host=f.host, db=db).report
        assert model.expected(batch, context) == pytest.approx(report.totals.expected_step_s, rel=1e-9)
        assert model.bound(batch, context) == pytest.approx(report.totals.time_bound_s, rel=1e-9)


def test_mean_over_contexts_equals_the_mean_of_each_context(fitter):
    f, db = fitter
    model = f.step_model(Shape("decode", 1, (1, 2), (512, 640)), Deployment(hardware="H800", kernels="serving"),
                         db.get("H800"))
    brute = sum(model.expected(16, s) for s in range(512, 552)) / 40
    assert model.mean_expected(16, 512, 552) == pytest.approx(brute, rel=1e-9)


@pytest.fixture(scope="module")
def planned():
    host = get_host()
    source = load_source(MODEL, {}, host)
    targets = Targets(512, 128, tpot_s=0.002)
    options = PlanOptions(gpus=4, modes=("disaggregated",), pps=(1,), max_batch=64)
    return run_plan(source, targets, options, host=host), source, targets


def test_best_tpot_is_a_profile_of_its_decode_step(planned):
    result, source, targets = planned
    best = result.best_config
    assert best is not None and best.meets_slo and best.fits
    assert best.tpot_s <= targets.tpot_s
    assert best.tokens_per_s_per_gpu == max(c.tokens_per_s_per_gpu for c in result.configs if c.meets_slo)
    deployment = Deployment(hardware="H800", kernels="serving", tp=best.decode.tp, ep=best.decode.ep,
                            weight_dtype=WEIGHT_FORMATS[best.weight_dtype][0], kv_dtype=best.kv_dtype)
    report = run_profile(source, Workload("decode", best.batch, targets.isl + targets.osl // 2, best.dtype), deployment,
                     options=ReportOptions(detail=False, measure=False)).report
    assert report.totals.expected_step_s == pytest.approx(best.tpot_s, rel=0.05)
    # the disaggregated figures by hand: without a TTFT target, the arrivals fill 95% of the prefill
    # pool or all of the decode pool; output tokens/s over the GPUs used, 1 / TPOT per user
    rate_p = best.prefill.instances / best.prefill.step_s
    rate_d = best.decode.instances * best.batch / (targets.osl * best.tpot_s)
    rate = min(0.95 * rate_p, rate_d)
    assert best.rate_per_s == pytest.approx(rate, rel=1e-9)
    assert best.tokens_per_s_per_gpu == pytest.approx(targets.osl * rate / best.gpus, rel=1e-9)
    assert best.tokens_per_s_per_user == pytest.approx(1 / best.tpot_s, rel=1e-12)
    wait = wait_quantile(rate, best.prefill.step_s, best.prefill.instances, 0.9)
    assert best.ttft_wait_s == pytest.approx(wait, rel=1e-12)
    # time to first token: one prefill of the prompt, then its KV cache sent to the decode pool
    prefill_deployment = replace(deployment, tp=best.prefill.tp, ep=best.prefill.ep)
    prefill = run_profile(source, Workload("prefill", 1, targets.isl, best.dtype), prefill_deployment,
                      options=ReportOptions(detail=False, measure=False)).report
    held = run_profile(source, Workload("decode", 1, targets.isl, best.dtype), deployment,
                   options=ReportOptions(detail=False, measure=False)).report
    hw = hardware_db(get_host()).get("H800")
    kv = held.memory.kv_bytes_per_sequence * best.decode.tp
    sent = hw.interconnect_latency + kv / (hw.interconnect_bandwidth / 2)  # one direction of the link
    assert best.ttft_s == pytest.approx(prefill.totals.expected_step_s + sent + wait, rel=1e-9)


def test_pareto_front_of_fitting_configs(planned):
    result, _, _ = planned
    front = [result.configs[i] for i in result.pareto]
    assert front and all(c.fits for c in front)
    per_gpu = [c.tokens_per_s_per_gpu for c in front]
    per_user = [c.tokens_per_s_per_user for c in front]
    assert per_gpu == sorted(per_gpu, reverse=True) and per_user == sorted(per_user)
    for c in result.configs:
        if c.fits and c.tokens_per_s_per_gpu:
            assert any(f.tokens_per_s_per_gpu >= c.tokens_per_s_per_gpu and
                       f.tokens_per_s_per_user >= c.tokens_per_s_per_user for f in front)


def test_rejections_say_why(planned):
    result, _, targets = planned
    for c in result.configs:
        if not c.fits:
            assert c.reject_reason.startswith("memory")
        elif not c.meets_slo:
            assert c.reject_reason.startswith("target") and c.tpot_s > targets.tpot_s


def test_cli_json_and_a_target_nothing_meets():
    runner = CliRunner()
    args = ["plan", MODEL, "--gpus", "2", "--isl", "512", "--osl", "128", "--max-batch", "8", "--pp", "1"]
    result = runner.invoke(cli, args + ["--tpot", "1us", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["best"] is None and data["candidates"] == len(data["configs"]) > 0
    misses = [line for line in result.stderr.splitlines() if "no configuration meets the targets" in line]
    assert len(misses) == 1 and "closest" in misses[0]
    for key in ("mode", "tp", "ep", "pp", "replicas", "weight_dtype", "kv_dtype", "kernels", "batch", "speculative",
                "chunk", "ttft_s", "tpot_s", "e2e_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "fits",
                "meets_slo", "binding", "reject_reason"):
        assert key in data["configs"][0]


@pytest.mark.parametrize("text, layout", [("TP8", (8, 1)), ("tp 4 ep 4", (4, 4)), ("DEP32", (1, 32)),
                                          ("EP144", (1, 144)), ("DP16EP16", (1, 16))])
def test_layouts_read_as_the_labels_write_them(text, layout):
    assert parse_layout(text) == layout


@pytest.mark.parametrize("text", ["TP", "DP8EP16", "TP4EP8", "TP0", "pp2"])
def test_a_layout_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="layout|DP = EP|EP equals TP|whole numbers"):
        parse_layout(text)


@given(st.integers(1, 4096), st.sampled_from([None, 4, 8, 72]))
def test_wide_ep_degrees_fit_the_budget_and_hold_the_pool_beside_a_prefill_pool(gpus, node):
    eps = wide_eps(gpus, node)
    assert eps == sorted(set(eps)) and all(1 <= e <= gpus for e in eps)
    powers = [1 << i for i in range(13) if 1 << i <= gpus]
    assert set(powers) <= set(eps)
    for e in set(eps) - set(powers):  # the budget less a power-of-two pool of whole nodes
        assert node and (gpus - e) in powers and (gpus - e) % node == 0 and e >= node
    if node == 8 and gpus == 176:
        assert 144 in eps


@pytest.mark.hf
def test_fixed_pool_layouts_are_the_only_ones_priced():
    runner = CliRunner()
    args = ["plan", "examples/configs/mixtral-8x7b.json", "-O", "layers=2", "--gpus", "8", "--isl", "512", "--osl",
            "128", "--max-batch", "8", "--pp", "1", "--mode", "disaggregated", "--weight-dtypes", "bf16",
            "--kv-dtypes", "bf16", "--prefill", "TP2EP2", "--no-check", "-f", "json", "-q"]
    result = runner.invoke(cli, args + ["--decode", "DEP6"])
    assert result.exit_code == 0, result.output
    configs = json.loads(result.stdout)["configs"]
    assert configs
    for c in configs:
        assert (c["prefill"]["tp"], c["prefill"]["ep"], c["decode"]["tp"], c["decode"]["ep"]) == (2, 2, 1, 6)
        assert c["redundant_experts"] == 4 and c["prefill"]["redundant_experts"] == 0  # 12 slots over 6 GPUs
    result = runner.invoke(cli, args + ["--decode", "DEP16"])
    assert result.exit_code == 2 and "--decode DEP16 needs 16 GPUs" in result.output


@pytest.mark.parametrize("args, words", [
    (["--tpot", "fast"], "--tpot 'fast'"),
    (["--decode", "TP3EP4"], "--decode: 'TP3EP4'"),
    (["--isl", "-3"], "--isl"),
    (["--weight-dtypes", "fp7"], "--weight-dtypes"),
    (["--accept", "0.5"], "--accept"),
])
def test_bad_input_is_one_line(args, words):
    result = CliRunner().invoke(cli, ["plan", MODEL, "--gpus", "2"] + args)
    assert result.exit_code != 0
    assert words in result.output and "Traceback" not in result.output


def test_text_fits_100_columns(planned):
    from rooflinekit.outputs.plan_text import plan_to_text

    result, _, _ = planned
    text = plan_to_text(result)
    assert max(map(len, text.splitlines())) <= 100
    assert "best: " in text and "Pareto front" in text
    assert math.isfinite(result.best_config.e2e_s)
    assert replace(result.best_config).label() in text


def _decode_step(source, deployment, batch, context):
    return run_profile(source, Workload("decode", batch, context), deployment,
                   options=ReportOptions(detail=False, measure=False)).report


@pytest.mark.slow
def test_the_search_dominates_a_hand_grid():
    """TP 1/2/4/8 x bf16/fp8 weights x bf16/fp8 KV x batches 1, 4, 16, 64 priced one by one with `profile
    --kernels serving`, the request's figures written out by hand (each output step a decode step at
    the middle context plus B/OSL prompts prefilled as their own steps), filtered by the same target
    and memory: none has more tokens/s per GPU than the plan's best."""
    host = get_host()
    source = load_source(MODEL, {}, host)
    targets = Targets(512, 128, tpot_s=0.0015)
    best = run_plan(source, targets, PlanOptions(gpus=8, max_batch=64), host=host).best_config
    assert best is not None
    found = []
    for tp in (1, 2, 4, 8):
        for w in ("bf16", "fp8"):
            for kv in ("bf16", "fp8"):
                deployment = Deployment(hardware="H800", kernels="serving", tp=tp, weight_dtype=w, kv_dtype=kv)
                prefill = run_profile(source, Workload("prefill", 1, targets.isl), deployment,
                                  options=ReportOptions(detail=False, measure=False)).report.totals.expected_step_s
                for batch in (1, 4, 16, 64):
                    step = _decode_step(source, deployment, batch, targets.isl + targets.osl // 2)
                    held = _decode_step(source, deployment, batch, targets.isl + targets.osl)
                    output_step = step.totals.expected_step_s + batch / targets.osl * prefill
                    if held.memory.fits and output_step <= targets.tpot_s:
                        found.append((batch / output_step / tp, tp, w, kv, batch))
    assert found
    assert max(found)[0] <= best.tokens_per_s_per_gpu


def test_an_aggregated_step_is_a_profile_of_its_mixed_step():
    """The aggregated best's TPOT against `profile --mix` of its step: B sequences at the middle
    context and the prompt tokens arriving per step as one chunk in the middle of a prompt."""
    host = get_host()
    source = load_source(MODEL, {}, host)
    targets = Targets(512, 128, tpot_s=0.002)
    result = run_plan(source, targets, PlanOptions(gpus=4, pps=(1,), max_batch=64, modes=("aggregated",)), host=host)
    best = result.best_config
    assert best.mode == "aggregated"
    per_step = best.batch * targets.isl // targets.osl
    args = ["profile", MODEL, "--mix", f"{targets.isl + targets.osl // 2}:{best.batch}", "--chunk", str(per_step),
            "--chunk-offset", str((targets.isl - per_step) // 2), "--kernels", "serving", "-H", "H800",
            "--tp", str(best.tp), "--weight-dtype", WEIGHT_FORMATS[best.weight_dtype][0], "--dtype", best.dtype,
            "--kv-dtype", best.kv_dtype, "-f", "json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    mixed = json.loads(out.stdout)["totals"]["expected_step_s"]
    assert best.tpot_s == pytest.approx(mixed, rel=0.05)


def test_python_api_plan_returns_the_typed_result_and_names_bad_arguments():
    import rooflinekit

    assert "plan" in rooflinekit.__all__
    result = rooflinekit.plan(MODEL, isl=512, osl=128, tpot=0.002, search=PlanOptions(gpus=2, pps=(1,), max_batch=8))
    assert result.best_config is not None and result.candidates == len(result.configs)
    for kwargs, name in (({"isl": "4k"}, "isl"), ({"tpot": -1.0}, "tpot"), ({"search": PlanOptions(gpus=0)}, "gpus"),
                         ({"prefix_hit": 1.0}, "prefix_hit")):
        with pytest.raises(rooflinekit.RooflineError, match=name):
            rooflinekit.plan(MODEL, **kwargs)


def test_speculative_decoding_priced_whole_with_a_draft_model():
    """A disaggregated candidate with a draft model: TPOT = (k x draft step + verify step of k + 1
    tokens) / E, E = 1 + a for k = 1, each step a profile at the middle context; speculation is
    searched on and off."""
    host = get_host()
    draft = load_source("examples/gpt2_mha.py", {}, host)
    targets = Targets(512, 128)
    options = PlanOptions(gpus=2, pps=(1,), max_batch=4, modes=("disaggregated",), draft=draft, accept=0.6,
                          weight_dtypes=("bf16",), kv_dtypes=("bf16",), tps=(1,))
    result = run_plan(load_source(MODEL, {}, host), targets, options, host=host)
    spec = [c for c in result.configs if c.speculative and c.batch == 4]
    plain = [c for c in result.configs if not c.speculative and c.batch == 4]
    assert spec and plain
    c = spec[0]
    middle = targets.isl + targets.osl // 2
    deployment = Deployment(hardware="H800", kernels="serving")
    options = ReportOptions(detail=False, measure=False)
    verify = run_profile(load_source(MODEL, {}, host), Workload("decode", 4, middle, decode_q_len=2), deployment,
                     options=options).report.totals.expected_step_s
    drafted = run_profile(draft, Workload("decode", 4, middle), deployment, options=options).report.totals.expected_step_s
    assert c.speculative.tokens_per_step == pytest.approx(1.6, rel=1e-12)
    assert c.tpot_s == pytest.approx((drafted + verify) / 1.6, rel=0.01)
