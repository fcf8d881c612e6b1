"""--overlap two-batch (rooflinekit.stages.expected): two micro-batches, one's collectives under the
other's kernels. Recomputed here from a report's op rows and the committed table: each kernel at
half the tokens (FLOPs and activation bytes halved, weights read whole), twice, with a launch per
micro-batch; each collective twice at half its message; the step the longer of the two streams."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.analyses.profile import run_profile
from rooflinekit.cli.main import cli as main
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages import collectives
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source
from tests.conftest import MODELS
from tests.test_expected import GQA, PRODUCTS, TABLE, TINY, experts_bandwidth, on_curve

MOE = MODELS / "experts3d.py"


def _report(path, phase, batch, context, options, overlap, tp=1, ep=1, kernels="as-written"):
    workload = Workload(phase, batch, context, "bf16", "meta", tuple(sorted(options.items())))
    deployment = Deployment("H800", tp=tp, ep=ep, kernels=kernels, overlap=overlap)
    return run_profile(load_source(str(path), options), workload, deployment).report


def _class(r, op, in_attention):
    classes = TABLE["classes"]
    if op.kind == "fused" or (op.name in PRODUCTS and op.index in in_attention):
        return classes[f"attention_{r.workload.phase}"]
    if op.name in PRODUCTS:
        first = op.shapes.split(",")[1 if op.name in ("aten.addmm", "aten.baddbmm") else 0]
        dims = [int(d) for d in first.split("x")]
        rows = dims[-2] if op.name in ("aten.bmm", "aten.baddbmm") else math.prod(dims[:-1])
        return classes["gemm_small" if rows <= TABLE["small_gemm_max_rows"] else "gemm_large"]
    if op.kind == "modelled" and op.flops > 0 and op.param_bytes > 0:  # experts: a GEMM of the phase
        return classes["gemm_small" if r.workload.phase == "decode" else "gemm_large"]
    return classes["elementwise"]


def _micro_size(op, routing) -> float | None:
    """A kernel's size on its curve in one micro-batch: half a product's rows or an MoE record's
    tokens per expert; a fused attention's query length whole."""
    if op.kind == "fused":
        return int(op.shapes.split(",")[0].split("x")[-2])
    if op.name in PRODUCTS:
        first = op.shapes.split(",")[1 if op.name in ("aten.addmm", "aten.baddbmm") else 0]
        dims = [int(d) for d in first.split("x")]
        return (dims[-2] if op.name in ("aten.bmm", "aten.baddbmm") else math.prod(dims[:-1])) / 2
    if routing and op.kind == "modelled":
        tokens, k, experts = routing
        return tokens * k / experts / 2
    return None


def distinct(tokens: float, k: int, experts: int) -> float:
    """Expected distinct experts `tokens` tokens choosing `k` of `experts` hit: E(1 - (1 - k/E)^T)."""
    return experts * (1 - (1 - k / experts) ** tokens)


def two_batch_by_hand(r, routing: tuple[int, int, int] | None = None, halve_experts: bool = True) -> tuple[float, float]:
    """(kernels and launches of both micro-batches, their collectives) from the report's rows;
    `routing` = (tokens, k, E) of the MoE records, whose weights at half the tokens are those of the
    experts half the tokens hit (every expert of the step's with `halve_experts` False). In prefill
    the host issues both micro-batches' kernels ahead of the GPU: the kernels' stream is at least
    its issue time."""
    launch = TABLE["launch"][f"{r.workload.phase}_s"]
    host = TABLE["launch"].get(f"host_{r.workload.phase}_s", 0.0)
    in_attention = {i for row in r.attention for i in row.op_indices}
    hw = hardware_db().get(r.hardware.name)
    kernels = comm = 0.0
    count = 0
    for op in r.ops:
        if op.kind == "collective":
            half = {"collective": op.collective.collective, "group_size": op.collective.group_size,
                    "message_bytes": op.collective.message_bytes / 2, "wire_bytes": op.collective.wire_bytes / 2}
            comm += 2 * collectives.call_expected(half, hw)[0]
            continue
        if op.flops == 0 and op.bytes == 0:
            continue
        cls = _class(r, op, in_attention)
        weights = min(op.param_bytes, op.bytes)
        half = weights
        if routing and halve_experts and op.kind == "modelled" and weights:
            tokens, k, experts = routing
            half = weights * distinct(tokens / 2, k, experts) / distinct(tokens, k, experts)
        flops, nbytes = op.flops / 2, (op.bytes - weights) / 2 + half
        peak = r.hardware.peaks[op.dtype]
        size = _micro_size(op, routing)
        compute = cls[f"compute_{op.dtype}"] if f"compute_{op.dtype}" in cls else on_curve(cls, "compute", size)
        stream = on_curve(cls, "bandwidth", size)
        if routing and op.kind == "modelled" and weights and op.flops > 0:  # a grouped expert GEMM
            stream = experts_bandwidth(weights / distinct(*routing))
        kernels += 2 * max(flops / (compute * peak), nbytes / (stream * r.hardware.bandwidth))
        kernels += 2 * launch
        count += 2
    return max(kernels, count * host), comm


@pytest.mark.parametrize(("phase", "batch", "context", "tp"), [
    ("decode", 2, 64, 1), ("decode", 32, 512, 1), ("decode", 8, 256, 2), ("prefill", 1, 256, 2),
])
def test_two_batch_step_is_the_longer_stream_by_hand(phase, batch, context, tp):
    r = _report(GQA, phase, batch, context, TINY, "two-batch", tp=tp)
    kernels, comm = two_batch_by_hand(r)
    assert r.totals.expected_step_s == pytest.approx(max(kernels, comm), rel=1e-9)
    if tp > 1:
        assert comm > 0
    assert any("two-batch overlap" in line for line in r.totals.expected_conventions)


def test_without_collectives_two_batches_cost_the_weights_twice():
    """No communication to hide: two micro-batches only read every weight once more."""
    one = _report(GQA, "decode", 4, 256, TINY, "none")
    two = _report(GQA, "decode", 4, 256, TINY, "two-batch")
    kernels, comm = two_batch_by_hand(two)
    assert comm == 0 and two.totals.expected_step_s == pytest.approx(kernels, rel=1e-9)
    weights = sum(o.param_bytes for o in two.ops if o.kind != "collective")
    assert two.totals.expected_step_s > one.totals.expected_step_s + 0.5 * weights / (0.89 * one.hardware.bandwidth)


def test_a_decode_step_of_one_sequence_runs_as_one_batch():
    one = _report(GQA, "decode", 1, 256, TINY, "none", tp=2).totals
    two = _report(GQA, "decode", 1, 256, TINY, "two-batch", tp=2).totals
    assert two.expected_step_s == one.expected_step_s and two.overlap_hidden_s is None
    assert any("not applied to a decode step of one sequence" in line for line in two.expected_conventions)


def test_an_moe_micro_batch_reads_the_experts_its_half_of_the_tokens_hits():
    """64 experts, top 2, 4 sequences in decode: half the tokens hit about half the experts."""
    r = _report(MOE, "decode", 4, 256, {"experts": 64}, "two-batch")
    kernels, comm = two_batch_by_hand(r, routing=(4, 2, 64))
    assert comm == 0 and r.totals.expected_step_s == pytest.approx(kernels, rel=1e-9)
    whole, _ = two_batch_by_hand(r, routing=(4, 2, 64), halve_experts=False)  # the whole step's experts: more
    assert whole > kernels * 1.02


def test_overlap_hides_an_expert_parallel_steps_all_to_all():
    """Experts over 8 GPUs at a batch where kernels and all-to-alls are alike: the step falls below the
    kernels plus the collectives, and never below either stream."""
    none = _report(MOE, "decode", 64, 512, {}, "none", ep=8, kernels="serving")
    two = _report(MOE, "decode", 64, 512, {}, "two-batch", ep=8, kernels="serving")
    kernels, comm = two_batch_by_hand(two)
    assert two.totals.expected_step_s == pytest.approx(max(kernels, comm), rel=1e-9)
    assert two.totals.expected_step_s < kernels + comm
    assert none.totals.time_bound_s == two.totals.time_bound_s  # the bound assumes perfect overlap either way


@given(st.sampled_from(["decode", "prefill"]), st.integers(1, 64), st.sampled_from([16, 512, 4096]),
       st.sampled_from([1, 2, 4, 8, 16]))
@settings(max_examples=25, deadline=None)
def test_the_bound_stays_under_a_two_batch_step(phase, batch, context, gpus):
    if phase == "prefill":
        batch = 1
    t = _report(MOE, phase, batch, context, {}, "two-batch", ep=gpus, kernels="serving").totals
    for resource in (t.time_compute_s, t.time_memory_s, t.time_comm_s):
        assert resource <= t.time_bound_s * (1 + 1e-12)
    assert t.time_bound_s <= t.expected_step_s * (1 + 1e-12)


@pytest.mark.parametrize("tp", [1, 2])
def test_sweep_points_carry_the_overlap(tmp_path, tp):
    """TP 1: the points evaluated from the fit (compact records); TP 2: captured point by point."""
    out = tmp_path / "s.json"
    args = [str(GQA), "-b", "2,8,24", "-s", "300,512,2000", "--tp", str(tp), "-H", "H800", "--no-critical", "-f",
            "json", "-o", str(out), *[f"-O{k}={v}" for k, v in TINY.items()]]
    assert CliRunner().invoke(main, ["sweep", *args, "--overlap", "two-batch"]).exit_code == 0
    points = json.loads(out.read_text())["points"]
    assert len(points) == 9
    for point in points:
        r = _report(GQA, "decode", point["batch"], point["context"], TINY, "two-batch", tp=tp)
        assert point["expected_step_s"] == pytest.approx(r.totals.expected_step_s, rel=1e-9)


def test_bad_overlap_gets_one_line():
    runner = CliRunner()
    result = runner.invoke(main, ["profile", str(GQA), "--overlap", "two-batch", "--pp", "2",
                                  *[f"-O{k}={v}" for k, v in TINY.items()]])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "--overlap two-batch with --pp 2" in result.output
    result = runner.invoke(main, ["profile", str(GQA), "--overlap", "three"])
    assert result.exit_code != 0 and "three" in result.output


# -- plan's step models ---------------------------------------------------------------------------

from rooflinekit.analyses.stepfit import Shape, StepFitter  # noqa: E402
from rooflinekit.core.plugins import get_host  # noqa: E402
from rooflinekit.stages.stepmixed import mixed_mean  # noqa: E402

#: Large enough that the kernels' stream outgrows the all-reduces' within the contexts walked.
WIDER = {"layers": 2, "hidden": 1024, "heads": 16, "kv_heads": 4, "head_dim": 64, "intermediate": 4096, "vocab": 32000}
PLAN_CASES = [
    (GQA, WIDER, Deployment("H800", tp=2, kernels="serving", overlap="two-batch")),
    (MOE, {}, Deployment("H800", ep=8, kernels="serving", overlap="two-batch")),
]


@pytest.fixture(scope="module", params=PLAN_CASES, ids=["gqa-tp2", "moe-ep8"])
def fitted(request):
    path, options, deployment = request.param
    host = get_host()
    db = hardware_db(host)
    fitter = StepFitter(load_source(str(path), options, host), Workload("decode", 1, 256, options=tuple(
        sorted(options.items()))), host, db)
    model = fitter.step_model(Shape("decode", 1, (1, 2), (256, 320)), deployment, db.get("H800"))
    return fitter, deployment, model, db


def test_a_step_model_prices_two_batches_as_profile_does(fitted):
    fitter, deployment, model, db = fitted
    for batch, context in ((3, 300), (64, 1000)):
        report = run_profile(fitter.built, replace_workload(fitter, batch, context), deployment, host=fitter.host,
                         db=db).report
        assert model.expected(batch, context) == pytest.approx(report.totals.expected_step_s, rel=1e-9)
        assert model.bound(batch, context) == pytest.approx(report.totals.time_bound_s, rel=1e-9)


def replace_workload(fitter, batch, context):
    import dataclasses
    return dataclasses.replace(fitter.base, batch=batch, context=context)


def test_the_walk_crosses_from_collectives_to_kernels():
    """The dense case: all-reduces longer at short contexts, kernels at long ones."""
    host = get_host()
    db = hardware_db(host)
    path, options, deployment = PLAN_CASES[0]
    fitter = StepFitter(load_source(str(path), options, host), Workload("decode", 1, 256, options=tuple(
        sorted(options.items()))), host, db)
    model = fitter.step_model(Shape("decode", 1, (1, 2), (256, 320)), deployment, db.get("H800"))
    kernels, calls = model._two_streams(model._values(256, 1))
    assert kernels < calls
    kernels, calls = model._two_streams(model._values(256, 6000))
    assert kernels > calls
    brute = sum(model.expected(256, s) for s in range(1, 6001)) / 6000
    assert model.mean_expected(256, 1, 6001) == pytest.approx(brute, rel=1e-9)


@given(st.integers(1, 256), st.integers(1, 6000), st.integers(1, 300))
@settings(max_examples=30, deadline=None)
def test_the_mean_two_batch_step_over_contexts_is_exact(fitted, batch, start, length):
    """The mean over a generation equals the mean of the steps, context by context (the kernels'
    stream crossing the collectives' inside the range or not)."""
    _, _, model, _ = fitted
    stop = start + length
    brute = sum(model.expected(batch, s) for s in range(start, stop)) / length
    assert model.mean_expected(batch, start, stop) == pytest.approx(brute, rel=1e-9)
    assert mixed_mean(model, model, batch, start, stop, 0.0) == pytest.approx(brute, rel=1e-9)


def test_plan_prices_disaggregated_pools_with_two_batches_and_refuses_the_rest():
    from rooflinekit.analyses.plan import run_plan
    from rooflinekit.analyses.plan_options import PlanOptions
    from rooflinekit.core.errors import UserError
    from rooflinekit.core.plan import Targets

    source = load_source(str(MOE), {})
    targets = Targets(256, 32, None, None)
    with pytest.raises(UserError, match="disaggregated pools without pipeline stages"):
        run_plan(source, targets, PlanOptions(gpus=8, hardware="H800", overlap="two-batch"))
    result = run_plan(source, targets, PlanOptions(gpus=8, hardware="H800", overlap="two-batch",
                                                   modes=("disaggregated",), pps=(1,), eps=(2, 4)))
    configs = [c for c in result.configs if c.fits]
    assert configs and all(c.mode == "disaggregated" for c in configs)
    assert all((c.overlap == "two-batch") == (c.decode.ep > 1 or c.prefill.ep > 1) for c in result.configs)
    assert any(c.overlap == "two-batch" for c in configs) and any(c.overlap is None for c in configs)
    assert any("two-batch overlap" in n for n in result.notes)


def test_the_range_class_counts_the_collectives_left_showing():
    """Kernels outlast the all-reduces at this step: the collectives hidden under them do not make it a
    communication step (its p10-p90 is the decode class's)."""
    t = _report(GQA, "decode", 256, 6000, WIDER, "two-batch", tp=2).totals
    assert t.overlap_hidden_s > 0 and t.expected_class == "decode"


def test_a_mixed_step_with_two_batch_overlap_gets_one_line(invoke):
    result = invoke("profile", GQA, "--mix", "512:8", "--chunk", "64", "--tp", "2", "--overlap", "two-batch",
                    *[f"-O{k}={v}" for k, v in TINY.items()])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "--overlap two-batch with a mixed step (--mix)" in result.stderr


def test_plan_takes_its_modes_as_one_string_too():
    from rooflinekit.analyses.plan import run_plan
    from rooflinekit.analyses.plan_options import PlanOptions
    from rooflinekit.core.plan import Targets

    result = run_plan(load_source(str(MOE), {}), Targets(256, 32, None, None),
                      PlanOptions(gpus=8, hardware="H800", overlap="two-batch", modes="disaggregated", pps=(1,),
                                  eps=(2,)))
    assert result.configs and all(c.mode == "disaggregated" for c in result.configs)
