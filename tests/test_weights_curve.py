"""A dense GEMM's bandwidth by its weight matrix (an efficiency table's `[weights]` curve): the MI300X
table's points by hand from the hipBLASLt timings they come from, expert GEMMs and tables without the
curve left as they were, time never falling as the matrix grows, one-line errors for a bad curve,
and the planner's step model pricing it as `profile` does."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.core.errors import UserError
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.efficiency_table import generation_table, load_table, table_for
from rooflinekit.stages.expected import expected_step
from rooflinekit.stages.hardware import hardware_db

MI300X = hardware_db().get("MI300X")
FP8, BF16, HBM = 2614.9e12, 1307.4e12, 5.3e12  # MI300X datasheet: dense fp8, dense bf16, HBM3


def _kernels_s(op: OpRecord, hw=MI300X, phase: str = "decode") -> float:
    return expected_step([op], (), hw, phase, 0.0, "none").kernels_s


def _mm(m: int, n: int, k: int, dtype: str = "fp8", size: int = 1) -> OpRecord:
    """A linear of K x N weights at M rows: FLOPs 2MNK, bytes input + weights + bf16 output."""
    return OpRecord(0, "aten.mm", "m", 2.0 * m * n * k, (m * k + k * n) * size, m * n * 2.0, dtype, True,
                    param_bytes=k * n * size, shapes=f"{m}x{k},{k}x{n}")


def _hipblaslt(n: int, k: int, us: float) -> float:
    """The fraction of 5.3 TB/s a measured fp16 skinny GEMM of an N x K matrix streamed at."""
    return n * k * 2 / (us * 1e-6) / HBM


def test_the_mi300x_points_are_the_hipblaslt_timings():
    # rocm-libraries PR #12329, 'hipBLASLt MI300X us': first and last points, and a mean of two
    curve = table_for(MI300X).weights
    assert curve.bandwidth[0] == pytest.approx(_hipblaslt(4096, 11008, 32.77), abs=1e-4)
    assert curve.bandwidth[-1] == pytest.approx(_hipblaslt(76032, 13312, 497.12), abs=1e-4)
    both = (_hipblaslt(8896, 13312, 71.12) + _hipblaslt(13312, 8896, 71.85)) / 2
    assert curve.bandwidth[3] == pytest.approx(both, abs=1e-4)
    assert curve.at[0] == 4096 * 11008 * 2


@pytest.mark.parametrize("m, n, k, dtype, size, bandwidth", [
    # a TP 8 shard of Llama-70B's gate/up in fp8 (58.7 MB): below the first point, held there
    (1, 7168, 8192, "fp8", 1, 0.5192),
    # 150 MB of bf16, between 132.9 MB (0.5790) and 201.3 MB (0.6174): log-interpolated
    (4, 5000, 15000, "bf16", 2,
     0.5790 + (0.6174 - 0.5790) * math.log(150e6 / 132907008) / math.log(201326592 / 132907008)),
    # 3 GB of bf16: above the last point, held at 0.7683
    (16, 50000, 30000, "bf16", 2, 0.7683),
])
def test_a_dense_gemm_streams_at_its_matrix_size_by_hand(m, n, k, dtype, size, bandwidth):
    flops, nbytes = 2 * m * n * k, (m * k + k * n) * size + 2 * m * n
    compute = 0.49 * FP8 if dtype == "fp8" else 0.54 * BF16  # gemm_small's constants
    assert _kernels_s(_mm(m, n, k, dtype, size)) == pytest.approx(
        max(flops / compute, nbytes / (bandwidth * HBM)), rel=1e-9)


def test_an_expert_gemm_is_not_on_the_weights_curve():
    # MI300X's table has no [experts] curve: a grouped expert GEMM keeps the GEMM class's 0.69
    terms = {"tokens": 64, "k": 8, "experts": 256, "share": 1.0}
    op = OpRecord(0, "moe.gate_up", "m", 1e9, 4e8, 1e6, "fp8", True, kind="modelled", param_bytes=4e8,
                  attrs={"expected_experts": terms})
    assert _kernels_s(op) == pytest.approx(max(1e9 / (0.49 * FP8), 4.01e8 / (0.69 * HBM)), rel=1e-9)


def test_a_table_without_the_curve_prices_as_before():
    h800 = hardware_db().get("H800")
    assert table_for(h800).weights is None
    # the Hopper curve's M = 64 point: bandwidth 0.6925 whatever the matrix's size
    small, large = _mm(64, 1024, 1024), _mm(64, 16384, 16384)
    for op in (small, large):
        assert _kernels_s(op, h800) == pytest.approx(
            max(op.flops / (0.5255 * 1979e12), op.bytes / (0.6925 * 3.35e12)), rel=1e-9)


def test_the_report_names_the_curve():
    words = expected_step([_mm(1, 8192, 8192)], (), MI300X, "decode", 0.0, "none").conventions
    line = next(w for w in words if w.startswith("dense GEMMs: bandwidth by its weight matrix"))
    assert "8 points from 90.2 MB to 2.02 GB" in line and "0.5192-0.7683" in line


@settings(max_examples=200, deadline=None)
@given(n=st.integers(256, 4096), k=st.integers(256, 8192), growth=st.floats(1.01, 2.0), m=st.integers(1, 256))
def test_time_never_falls_as_the_matrix_grows(n, k, growth, m):
    last = 0.0
    for i in range(25):
        width = int(n * growth ** i)
        t = _kernels_s(_mm(m, width, k, "bf16", 2))
        assert t >= last * (1 - 1e-12), (m, width, k, t, last)
        last = t


@pytest.mark.parametrize("curve, words", [
    ('key = "rows"\nat = [1, 2]\nbandwidth = [0.3, 0.4]\nsources = ["a", "b"]', "key must be 'weight_bytes'"),
    ('key = "weight_bytes"\nat = [1, 2]\ncompute = [0.3, 0.4]\nsources = ["a", "b"]', "one bandwidth list"),
])
def test_a_bad_weights_curve_stops_with_one_line(tmp_path, curve, words):
    text = generation_table("cdna3").read_text()
    start, end = text.index("[weights.curve]"), text.index("[launch]")
    path = tmp_path / "bad.toml"
    path.write_text(text[:start] + f"[weights.curve]\n{curve}\n\n" + text[end:])
    with pytest.raises(UserError) as err:
        load_table(str(path))
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.hf
def test_the_planners_step_model_prices_the_curve_as_profile_does():
    from dataclasses import replace

    from rooflinekit.analyses.profile import ReportOptions, run_profile
    from rooflinekit.analyses.stepfit import Shape, StepFitter
    from rooflinekit.core.plugins import get_host
    from rooflinekit.core.request import Deployment, Workload
    from rooflinekit.stages.model_source import load_source

    host = get_host()
    db = hardware_db(host)
    base = Workload("decode", 1, 1024)
    fitter = StepFitter(load_source("examples/configs/llama-3.1-8b.json", {"layers": 2}, host), base, host, db)
    for tp, weights in ((1, "bf16"), (8, "fp8")):
        deployment = Deployment(hardware="MI300X", tp=tp, weight_dtype=weights, kernels="serving")
        model = fitter.step_model(Shape("decode", 1, (1, 2), (1024, 2048)), deployment, db.get("MI300X"))
        for batch, context in ((3, 1500), (64, 3000)):
            report = run_profile(fitter.built, replace(base, batch=batch, context=context), deployment,
                                 options=ReportOptions(detail=False, measure=False), host=host, db=db).report
            assert model.expected(batch, context) == pytest.approx(report.totals.expected_step_s, rel=1e-12)


@pytest.mark.hf
@pytest.mark.parametrize("kernels", ["serving", "as-written"])
def test_sweep_points_from_the_fit_read_one_kernels_matrix(kernels):
    """A sweep's compact record stands for n kernels (its weights summed): the curve is read at one
    kernel's matrix, so a point from the fit equals `profile` (it had read n times the matrix: 18-24%
    below at 8 layers)."""
    from rooflinekit.analyses.profile import run_profile
    from rooflinekit.analyses.sweep import Profiler
    from rooflinekit.core.request import Deployment, Workload
    from rooflinekit.stages.model_source import load_source

    path, options = "examples/configs/llama-3.1-8b.json", {"layers": 4}
    deployment = Deployment("MI300X", kernels=kernels)
    workload = Workload("decode", 1, 64, options=tuple(sorted(options.items())))
    prof = Profiler(load_source(path, options), workload, deployment)
    prof.fit([1, 3, 8], [64, 200, 512, 1024], top_batch=4096)
    assert prof.fits.get(1024), prof.fit_notes
    for batch, context in ((5, 1024), (64, 1024), (16, 512)):
        ref = run_profile(load_source(path, options), Workload("decode", batch, context,
                                                               options=tuple(sorted(options.items()))),
                          deployment).report.totals.expected_step_s
        assert prof.row(batch, context).expected_step_s == pytest.approx(ref, rel=1e-9), (batch, context)


def test_a_merged_gemm_reads_its_siblings_summed_matrix():
    # the serving view's merged gate/up: two 117.4 MB bf16 records of one sibling group read the
    # curve at 234.9 MB (between 201.3 MB and 236.8 MB), not each at its own 117.4 MB (between 90.2 MB
    # and 132.9 MB)
    def sibling(name: str) -> OpRecord:
        return OpRecord(0, "aten.mm", f"mlp.{name}", 2.0 * 4096 * 14336, 2.0 * 4096 * 14336 + 8192, 2.0 * 14336,
                        "bf16", True, param_bytes=2.0 * 4096 * 14336, shapes="1x4096,4096x14336",
                        attrs={"siblings": "mlp#7"})
    gate, up = sibling("gate_proj"), sibling("up_proj")
    merged = 2 * 2.0 * 4096 * 14336
    bw = 0.6174 + (0.6252 - 0.6174) * math.log(merged / 201326592) / math.log(236847104 / 201326592)
    t = expected_step([gate, up], (), MI300X, "decode", 0.0, "none").kernels_s
    assert t == pytest.approx(2 * gate.bytes / (bw * HBM), rel=1e-9)
    alone = expected_step([gate], (), MI300X, "decode", 0.0, "none").kernels_s
    own = 0.5192 + (0.5790 - 0.5192) * math.log(gate.param_bytes / 90177536) / math.log(132907008 / 90177536)
    assert alone == pytest.approx(gate.bytes / (own * HBM), rel=1e-9)
