"""One truth per number: a plan's per-step figures are `profile`'s for the same deployment.

A random sample of the candidates (a fixed seed, printed) is re-profiled: the decode step at the
candidate's batch and `step_context` (expected and bound, 1e-6 relative; with pipeline stages,
`profile --pp`'s steady pipeline) and the memory one GPU holds (to the byte: `profile --mix` of the batch at ISL+OSL with the prompt chunk each step
carries, aggregated; the decode profile at ISL+OSL, disaggregated). Every candidate's bounds are
at most its estimates. TPOT of a disaggregated candidate is the brute-force mean of profiled
decode steps over every context ISL .. ISL+OSL-1.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.plan_pricing import _pools
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.plan import WEIGHT_FORMATS, PlanConfig, Targets
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload, mixed_workload
from rooflinekit.stages.model_source import load_source

SEED = 20261203
FAST = ReportOptions(detail=False, measure=False)


def _plan(model: str, options: dict, targets: Targets, search: PlanOptions):
    host = get_host()
    source = load_source(model, options, host)
    return source, run_plan(source, targets, search, host=host), host


def _deployment(c: PlanConfig) -> Deployment:
    tp, ep = (c.decode.tp, c.decode.ep) if c.decode else (c.tp, c.ep)
    return Deployment(hardware="H800", tp=tp, ep=ep, pp=c.pp, weight_dtype=WEIGHT_FORMATS[c.weight_dtype][0],
                      kv_dtype=c.kv_dtype, kernels=c.kernels, memory_fraction=0.9,
                      redundant_experts=c.redundant_experts, ep_imbalance=c.ep_imbalance)


def _sample(configs: list[PlanConfig], n: int, tag: str) -> list[PlanConfig]:
    priced = [c for c in configs if c.step_s is not None]
    rng = random.Random(SEED)
    picked = rng.sample(priced, min(n, len(priced)))
    print(f"{tag}: seed {SEED}, {len(picked)} of {len(priced)} priced candidates re-profiled")
    return picked


def _check(source, host, targets: Targets, c: PlanConfig) -> None:
    deployment = _deployment(c)
    step = run_profile(source, Workload("decode", c.batch, c.step_context, c.dtype), deployment, options=FAST,
                   host=host).report
    assert c.step_s == pytest.approx(step.totals.expected_step_s, rel=1e-6), c.label()
    assert c.step_bound_s == pytest.approx(step.totals.time_bound_s, rel=1e-6), c.label()
    held = targets.isl + targets.osl
    if c.mode == "aggregated":
        chunk = min(c.chunk, targets.new_prompt_tokens)
        workload = mixed_workload(Workload("decode", 1, held, c.dtype), ((held, c.batch),), chunk, 0)
    else:
        workload = Workload("decode", c.batch, held, c.dtype)
    memory = run_profile(source, workload, deployment, options=FAST, host=host).report.memory
    assert c.memory_per_gpu_bytes == memory.total_bytes, c.label()


@pytest.fixture(scope="module")
def dense():
    targets = Targets(256, 64, tpot_s=0.05)
    search = PlanOptions(gpus=4, pps=(1, 2), max_batch=32, weight_dtypes=("bf16", "fp8", "w4a16", "fp8-weight-only"))
    return (*_plan("examples/llama_gqa.py", {"layers": 4}, targets, search), targets)


def test_sampled_dense_candidates_are_their_profiles(dense):
    source, result, host, targets = dense
    picked = _sample(result.configs, 40, "dense")
    assert len(picked) == 40
    assert {c.mode for c in picked} == {"aggregated", "disaggregated"}
    assert {c.dtype for c in picked} == {"bf16", "fp8"} and {c.pp for c in picked} == {1, 2}
    assert len({c.weight_dtype for c in picked}) == 4 and len({c.tp for c in picked}) >= 2
    for c in picked:
        _check(source, host, targets, c)


def test_no_bound_above_its_estimate(dense):
    _, result, _, _ = dense
    priced = [c for c in result.configs if c.tpot_s is not None]
    assert priced
    for c in priced:
        assert c.tpot_bound_s <= c.tpot_s * (1 + 1e-12), c.label()
        assert c.ttft_bound_s <= c.ttft_s * (1 + 1e-12), c.label()
        assert c.step_bound_s <= c.step_s * (1 + 1e-12), c.label()


def test_disaggregated_tpot_is_the_mean_of_every_profiled_step():
    """Brute force: OSL profiles, one per context, averaged; the plan's mean is exact."""
    targets = Targets(128, 12)
    source, result, host = _plan("examples/llama_gqa.py", {}, targets,
                                 PlanOptions(gpus=2, pps=(1,), max_batch=8, modes=("disaggregated",),
                                             weight_dtypes=("bf16",), kv_dtypes=("bf16",)))
    c = next(c for c in result.configs if c.batch == 8 and c.tpot_s is not None)
    deployment = _deployment(c)
    steps = [run_profile(source, Workload("decode", c.batch, s), deployment, options=FAST, host=host).report
             for s in range(targets.isl, targets.isl + targets.osl)]
    assert c.tpot_s == pytest.approx(sum(r.totals.expected_step_s for r in steps) / targets.osl, rel=1e-9)
    assert c.tpot_bound_s == pytest.approx(sum(r.totals.time_bound_s for r in steps) / targets.osl, rel=1e-9)


@pytest.mark.hf
@pytest.mark.slow
def test_sampled_moe_candidates_are_their_profiles():
    targets = Targets(256, 64)
    source, result, host = _plan("examples/configs/mixtral-8x7b.json", {"layers": 2}, targets,
                                 PlanOptions(gpus=4, pps=(1,), max_batch=8))
    picked = _sample(result.configs, 12, "moe")
    assert any(c.ep > 1 for c in picked)
    for c in picked:
        _check(source, host, targets, c)


@pytest.mark.hf
@pytest.mark.slow
def test_sampled_candidates_with_redundant_experts_are_their_profiles():
    """EP 3 does not divide Mixtral's 8 experts: the plan holds one redundant copy (9 slots, 3 per
    GPU), prices the busiest rank at --ep-imbalance 1.25, and each sampled figure is `profile`'s
    with those settings."""
    targets = Targets(256, 64)
    source, result, host = _plan("examples/configs/mixtral-8x7b.json", {"layers": 2}, targets,
                                 PlanOptions(gpus=3, tps=(1,), eps=(3,), pps=(1,), max_batch=8, ep_imbalance=1.25))
    wide = [c for c in result.configs if c.ep == 3]
    assert wide and all(c.redundant_experts == 1 and c.ep_imbalance == 1.25 for c in wide)
    for c in _sample(wide, 6, "redundant"):
        _check(source, host, targets, c)


def test_the_batch_search_reaches_the_memory_limit():
    """Besides powers of two, each layout's largest batch that fits is priced: its profiled memory
    fits the usable bytes and one sequence more does not."""
    targets = Targets(2048, 512)
    source, result, host = _plan("examples/llama_gqa.py", {"layers": 4}, targets,
                                 PlanOptions(gpus=2, tps=(1,), pps=(1,), max_batch=65536, modes=("disaggregated",),
                                             weight_dtypes=("bf16",), kv_dtypes=("bf16",), hardware="RTX 4090"))
    limits = [c for c in result.configs if c.batch & (c.batch - 1) and c.tpot_s is not None]
    assert limits, "no batch at the memory limit was priced"
    c = max(limits, key=lambda c: c.batch)
    held = targets.isl + targets.osl
    for batch, fits in ((c.batch, True), (c.batch + 1, False)):
        memory = run_profile(source, Workload("decode", batch, held), _deployment(c), options=FAST,
                         host=host).report.memory
        assert (memory.total_bytes <= c.usable_bytes) is fits, (batch, memory.total_bytes, c.usable_bytes)


@pytest.mark.hf
@pytest.mark.parametrize("config, layers", [("deepseek-v3", 5), ("gpt-oss-20b", 6)])
def test_a_stack_whose_layer_kind_changes_is_fitted_exactly(config, layers):
    """Serving view, where a layer's residual add is fused with the norm of the layer that reads it.
    DeepSeek-V3 cut to 3 dense then 2 MoE layers: the last dense layer, before an MoE one, runs
    instead of standing in for a dense one before a dense one (1.2e-4 relative at B 64 before).
    gpt-oss, sliding and full attention alternating: a stand-in layer passes its input through, so
    the last run layer of each kind is read by a run layer (its add was left unfused: 2.3e-5)."""
    from dataclasses import replace

    from rooflinekit.analyses.stepfit import Shape, StepFitter
    from rooflinekit.stages.hardware import hardware_db

    host = get_host()
    db = hardware_db(host)
    base = Workload("decode", 1, 4096)
    fitter = StepFitter(load_source(f"examples/configs/{config}.json", {"layers": layers}, host), base, host, db)
    deployment = Deployment(hardware="H800", ep=4, weight_dtype="fp8", kv_dtype="fp8", kernels="serving")
    model = fitter.step_model(Shape("decode", 1, (1, 2), (4096, 5120)), deployment, db.get("H800"))
    for batch, context in ((3, 4609), (64, 5000)):
        report = run_profile(fitter.built, replace(base, batch=batch, context=context), deployment, options=FAST,
                         host=host, db=db).report
        assert model.expected(batch, context) == pytest.approx(report.totals.expected_step_s, rel=1e-12)
        assert model.bound(batch, context) == pytest.approx(report.totals.time_bound_s, rel=1e-12)


@given(st.integers(1, 64), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8, 16]),
       st.floats(0.1, 100), st.floats(0.1, 100), st.sampled_from([1, 8]))
@settings(max_examples=200, deadline=None)
def test_pools_split_the_budget_best_in_whole_units(gpus, gp, gd, rate_p, rate_d, unit):
    """The prefill:decode split against every split by brute force: the most requests served, then
    the fewest GPUs; each pool's GPUs a whole number of `unit` (a node)."""
    best = (0.0, 0, 0, 0)
    for n_p in range(1, gpus + 1):
        for n_d in range(1, gpus + 1):
            used = n_p * gp + n_d * gd
            if used > gpus or (n_p * gp) % unit or (n_d * gd) % unit:
                continue
            served = min(n_p * rate_p, n_d * rate_d)
            if (served, -used) > (best[0], -best[1]):
                best = (served, used, n_p, n_d)
    n_p, n_d = _pools(gpus, gp, gd, rate_p, rate_d, unit)
    if best[2] == 0:
        assert (n_p, n_d) == (0, 0)
    else:
        assert min(n_p * rate_p, n_d * rate_d) == best[0]
        assert n_p * gp + n_d * gd == best[1]


def test_the_search_costs_what_its_design_implies():
    """A named question's captures and aggregated configurations, counted by hand.

    examples/llama_gqa.py (2 layers), 4 GPUs, ISL 512 / OSL 128, default search. Captures: no
    part of a dense deployment changes its capture (formats and the TP shard are transforms; W8A8
    reuses the bf16 capture), so the decode design's 2 batches x 2 contexts and the prefill
    design's 2 batches (a 512-token chunk is that prefill; the look at the model as given, is it
    an MoE, is the decode design's first point): 6.
    Aggregated: TP 1, 2, 4 x 2 weight formats x 2 KV formats; PP 1 for all, PP 2 where TP x 2 <= 4
    (PP 4 needs 4 layers); 11 batches (1 .. 1024) at PP 1 and the 10 even ones at PP 2 (the memory
    limit lies past 1024); 3 chunks: (11 + 10 + 11 + 10 + 11) x 3 x 4 = 636."""
    targets = Targets(512, 128, tpot_s=0.05)
    _, result, _ = _plan("examples/llama_gqa.py", {}, targets, PlanOptions(gpus=4, check=False))
    assert result.captures == 6
    assert sum(c.mode == "aggregated" for c in result.configs) == 636
