"""The real traces in tests/data/traces: at least 95% of GPU time lands in a known kernel class,
no kernel or op achieves more than its dtype's peak, and every shared GPU has its hardware entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from rooflinekit.trace.analyse import analyse

TRACES = Path(__file__).resolve().parent / "data" / "traces"
#: Each test trace and the -H it needs (None: deviceProperties name it).
CASES = {
    "v100_training_steps_1012_1013.json.gz": None,
    "v100_no_shapes_steps_101_102.json.gz": None,
    "sampled_ranks": "A100 SXM 40GB",  # no deviceProperties; sm_80 (cutlass_80, ampere_) kernels
    "mi250_minitoy_train.json.gz": "MI250 GCD",  # deviceProperties say only 'AMD Radeon Graphics'
    "a100_triton_example.json.gz": None,
}


@pytest.fixture(scope="module")
def reports():
    return {name: analyse(str(TRACES / name), hw) for name, hw in CASES.items()}


def test_class_coverage_is_at_least_95_percent(reports):
    for name, report in reports.items():
        for rank in report.ranks:
            assert rank.class_coverage >= 0.95, (name, rank.rank, rank.class_coverage)


def test_nothing_runs_above_its_peak(reports):
    for name, report in reports.items():
        for rank in report.ranks:
            for row in rank.kernels + rank.ops:
                if row.rates.peak_fraction is not None:
                    assert row.rates.peak_fraction <= 1.0, (name, row.name, row.rates)
            for step in rank.steps + [rank.total]:
                assert step.busy_s <= step.span_s + 1e-12 and (step.hfu or 0) <= 1.0


def test_the_v100_trace_counts_its_matmuls_at_fp32(reports):
    rank = reports["v100_training_steps_1012_1013.json.gz"].ranks[0]
    mm = next(r for r in rank.ops if r.name == "aten::mm")
    assert mm.rates.dtype == "fp32" and mm.rates.flops > 0 and mm.klass == "gemm"
    assert rank.collectives and rank.collectives[0].busbw


def test_two_ranks_side_by_side(reports):
    report = reports["sampled_ranks"]
    assert [r.rank for r in report.ranks] == [0, 1]
    tf32 = [r for r in report.ranks[0].kernels if r.rates.dtype == "tf32"]
    assert tf32, "cutlass s1688 kernels run fp32 matmuls on TF32 tensor cores"
