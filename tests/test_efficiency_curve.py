"""Shape curves of the efficiency table (rooflinekit.stages.efficiency_curve): kernel times by hand at
a few shapes per class from the committed curve points and the H800's datasheet peaks, a file without
curves priced as before, one-line errors for bad curves, and time never falling as a size grows."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.core.errors import UserError
from rooflinekit.stages.capture.records import OpRecord
from rooflinekit.stages.efficiency_curve import bandwidth_at, compute_at
from rooflinekit.stages.efficiency_table import TABLE_FILE, load_table
from rooflinekit.stages.expected import expected_step
from rooflinekit.stages.hardware import hardware_db

HW = hardware_db().get("H800")
BF16, FP8, BW = 989.4e12, 1979e12, 3.35e12  # H800 SXM5 datasheet: dense bf16, dense fp8, HBM3


def _kernels_s(op: OpRecord, phase: str = "decode", hw=HW) -> float:
    return expected_step([op], (), hw, phase, 0.0, "none").kernels_s


def _mm(m: int, n: int, k: int, dtype: str = "fp8", size: int = 1) -> OpRecord:
    """A linear of K x N weights at M rows: FLOPs 2MNK, bytes input + weights + bf16 output."""
    return OpRecord(0, "aten.mm", "m", 2.0 * m * n * k, (m * k + k * n) * size, m * n * 2.0, dtype, True,
                    param_bytes=k * n * size, shapes=f"{m}x{k},{k}x{n}")


def test_hopper_gemm_on_the_curve_by_hand():
    # M = 64 (a point): bandwidth 0.6925, compute 0.5255; DeepGEMM measured 287 TFLOPS on this shape
    m, n, k = 64, 4096, 7168
    flops, nbytes = 2 * m * n * k, m * k + k * n + 2 * m * n
    want = max(flops / (0.5255 * FP8), nbytes / (0.6925 * BW))
    assert _kernels_s(_mm(m, n, k)) == pytest.approx(want, rel=1e-9)
    assert flops / want == pytest.approx(287e12, rel=0.01)
    # M = 181 (between 128 and 256): bandwidth 0.6630 + (0.6161 - 0.6630) log(181/128) / log 2
    m = 181
    bw = 0.6630 + (0.6161 - 0.6630) * math.log(181 / 128) / math.log(2)
    flops, nbytes = 2 * m * n * k, m * k + k * n + 2 * m * n
    assert _kernels_s(_mm(m, n, k)) == pytest.approx(max(flops / (0.5255 * FP8), nbytes / (bw * BW)), rel=1e-9)
    # M = 2048 (between 1024 and 4096), bf16: compute 0.6230 + (0.6589 - 0.6230) / 2, bandwidth held 0.6161
    m = 2048
    c = 0.6230 + (0.6589 - 0.6230) * 0.5
    flops, nbytes = 2 * m * n * k, 2 * (m * k + k * n) + 2 * m * n
    assert _kernels_s(_mm(m, n, k, "bf16", 2), "prefill") == pytest.approx(
        max(flops / (c * BF16), nbytes / (0.6161 * BW)), rel=1e-9)


def _distinct(tokens: int, k: int, experts: int) -> float:
    """Experts that `tokens` tokens choosing k of `experts` touch under uniform routing."""
    return experts * (1 - (1 - k / experts) ** tokens)


@pytest.mark.parametrize("per_expert, bandwidth", [
    # below the first point (a TP 8 down matrix): held at TP 8's fraction
    (1_835_008, 0.2387),
    # 10 MB, between the TP 4 and TP 2 gate-up points: log-interpolated
    (10e6, 0.4010 + (0.4651 - 0.4010) * math.log(10e6 / 7340032) / math.log(2)),
    # above the last point (a wide expert): held at TP 1's
    (200e6, 0.5534),
])
def test_an_expert_gemm_streams_at_its_experts_width(per_expert, bandwidth):
    # 64 tokens x top-8 over 256 experts: compute on the GEMM curve at 2 tokens per expert (below the
    # first point: 0.5255); bandwidth from the experts curve at one expert's matrix bytes
    terms = {"tokens": 64, "k": 8, "experts": 256, "share": 1.0}
    weights = per_expert * _distinct(64, 8, 256)
    op = OpRecord(0, "moe.gate_up", "m", 1e9, weights + 1e6, 1e6, "fp8", True, kind="modelled",
                  param_bytes=weights, attrs={"expected_experts": terms})
    assert _kernels_s(op) == pytest.approx(max(1e9 / (0.5255 * FP8), (weights + 2e6) / (bandwidth * BW)), rel=1e-9)


def test_expert_parallel_share_and_the_published_call():
    # EP 8: the record holds 1/8 of the touched experts, so one expert's bytes are its weights over
    # distinct x 1/8. At TP 8, DeepSeek-V3's call at 128 tokens (251.6 experts of 5.505 MB, gate-up 2/3
    # and down 1/3) prices at the 1732.33 us vLLM PR #13932 measured on H100 (3.35 TB/s, as the H800)
    per = 2 * 256 * 7168
    terms = {"tokens": 128, "k": 8, "experts": 256, "share": 1 / 8}
    weights = per * _distinct(128, 8, 256) / 8
    op = OpRecord(0, "moe.gate_up", "m", 1.0, weights, 0.0, "fp8", True, kind="modelled", param_bytes=weights,
                  attrs={"expected_experts": terms})
    assert _kernels_s(op) == pytest.approx(weights / (0.2387 * BW), rel=1e-9)
    gate_up, down = per * _distinct(128, 8, 256), per / 2 * _distinct(128, 8, 256)
    call = sum(_kernels_s(OpRecord(0, "moe.x", "m", 1.0, b, 0.0, "fp8", True, kind="modelled", param_bytes=b,
                                   attrs={"expected_experts": {**terms, "share": 1.0}})) for b in (gate_up, down))
    assert call == pytest.approx(1732.33e-6, rel=2e-3)


def test_a_table_without_an_experts_curve_streams_experts_at_the_gemm_class(tmp_path):
    import dataclasses

    path = tmp_path / "no-experts.toml"
    path.write_text(_without_curves_of(r"experts"))
    hw = dataclasses.replace(HW, efficiency=str(path))
    assert load_table(str(path)).experts is None
    terms = {"tokens": 64, "k": 8, "experts": 256, "share": 1.0}
    op = OpRecord(0, "moe.gate_up", "m", 1e9, 4e8, 1e6, "fp8", True, kind="modelled", param_bytes=4e8,
                  attrs={"expected_experts": terms})
    # 2 tokens per expert: the GEMM curve's first point, bandwidth 0.6925
    assert _kernels_s(op, hw=hw) == pytest.approx(max(1e9 / (0.5255 * FP8), 4.01e8 / (0.6925 * BW)), rel=1e-9)


@pytest.mark.parametrize("q, compute", [(512, 0.5713), (3000, 0.6320 + (0.6451 - 0.6320) * math.log(3000 / 2048)
                                                          / math.log(2)), (32768, 0.6552)])
def test_prefill_attention_on_the_curve_by_hand(q, compute):
    flops, nbytes = 4.0 * q * q * 128 * 32, 4.0 * q * 128 * 32 * 2
    op = OpRecord(0, "F.scaled_dot_product_attention", "m", flops, nbytes * 0.75, nbytes * 0.25, "bf16", True,
                  kind="fused", shapes=f"1x32x{q}x128,1x8x{q}x128,1x8x{q}x128")
    assert _kernels_s(op, "prefill") == pytest.approx(max(flops / (compute * BF16), nbytes / (0.89 * BW)), rel=1e-9)


@pytest.mark.parametrize("phase, name, kind, compute, bandwidth", [
    ("decode", "F.scaled_dot_product_attention", "fused", 0.67, 0.89), ("decode", "aten.add", "op", 0.78, 0.89)])
def test_classes_without_a_curve_keep_their_constants(phase, name, kind, compute, bandwidth):
    op = OpRecord(0, name, "m", 3e9, 2e7, 1e7, "bf16", True, kind=kind, shapes="4x32x1x128,4x8x900x128")
    assert _kernels_s(op, phase) == pytest.approx(max(3e9 / (compute * BF16), 3e7 / (bandwidth * BW)), rel=1e-9)


def _without_curves_of(tables: str) -> str:
    """The committed table with the curves of the TOML tables matching `tables` (a regex) and the
    comments above them taken out."""
    return re.sub(rf"\n(# [^\n]*\n)*\[(?:{tables})\.curve\]\n(?:[^\[\n][^\n]*\n|    [^\n]*\n|\]\n)*", "\n",
                  TABLE_FILE.read_text())


def _flat_text() -> str:
    """The committed table with all its curves (and the comments above them) taken out."""
    text = _without_curves_of(r"classes\.\w+|experts")
    assert "\n[classes.gemm_large.curve]" not in text and "key = " not in text
    return text


def _without_curves(tmp_path):
    path = tmp_path / "flat.toml"
    path.write_text(_flat_text())
    return path


def test_a_file_without_curves_prices_at_its_constants(tmp_path):
    import dataclasses

    hw = dataclasses.replace(HW, efficiency=str(_without_curves(tmp_path)))
    for m in (1, 64, 129, 4096):  # the class constants: compute 0.78, bandwidth 0.69, at every M
        flops, nbytes = 2.0 * m * 4096 * 7168, (m * 7168 + 4096 * 7168) * 2 + m * 4096 * 2
        assert _kernels_s(_mm(m, 4096, 7168, "bf16", 2), hw=hw) == pytest.approx(
            max(flops / (0.78 * BF16), nbytes / (0.69 * BW)), rel=1e-9)
    table = load_table(str(hw.efficiency))
    assert all(f.curve is None and f.at(100) is f for f in table.classes.values())


@pytest.mark.parametrize("curve, words", [
    ('key = "tokens"\nat = [1, 2]\ncompute = [0.5, 0.6]\nsources = ["a", "b"]', "key must be 'rows'"),
    ('key = "rows"\nat = [2, 1]\ncompute = [0.5, 0.6]\nsources = ["a", "b"]', "increasing"),
    ('key = "rows"\nat = [1, 2]\ncompute = [0.5]\nsources = ["a", "b"]', "list of 2 numbers"),
    ('key = "rows"\nat = [1, 2]\ncompute = [0.5, 1.5]\nsources = ["a", "b"]', "fractions"),
    ('key = "rows"\nat = [1, 2]\ncompute = [0.5, 0.6]\nsources = ["a"]', "one source per point"),
    ('key = "rows"\nat = [1, 2]\nsources = ["a", "b"]', "needs a compute or bandwidth list"),
])
def test_a_bad_curve_stops_with_one_line(tmp_path, curve, words):
    path = tmp_path / "bad.toml"
    path.write_text(_flat_text().replace("[classes.attention_decode]\n",
                                         f"[classes.gemm_small.curve]\n{curve}\n\n[classes.attention_decode]\n"))
    with pytest.raises(UserError) as err:
        load_table(str(path))
    assert words in str(err.value) and "\n" not in str(err.value)


_points = st.lists(st.floats(0.05, 1.0), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(values=_points, start=st.floats(1, 64), weights=st.floats(0, 1e9), per=st.floats(1, 1e6))
def test_time_never_falls_as_the_size_grows(values, start, weights, per):
    """FLOPs in proportion to the size and bytes = weights + per x size, on any curve: the time at
    the envelope never falls (a rising fraction would otherwise make a larger size cheaper)."""
    at = tuple(start * 2.0 ** i for i in range(len(values)))
    last = 0.0
    for i in range(1, 400):
        x = i * at[-1] / 100
        t = max(1e6 * x / compute_at(at, tuple(values), x), (weights + per * x) / bandwidth_at(at, tuple(values), x))
        assert t >= last * (1 - 1e-12), (x, t, last)
        last = t


@pytest.mark.parametrize("curve, words", [
    ('key = "rows"\nat = [1, 2]\nbandwidth = [0.3, 0.4]\nsources = ["a", "b"]', "key must be 'expert_bytes'"),
    ('key = "expert_bytes"\nat = [1, 2]\ncompute = [0.3, 0.4]\nbandwidth = [0.3, 0.4]\nsources = ["a", "b"]',
     "one bandwidth list"),
])
def test_a_bad_experts_curve_stops_with_one_line(tmp_path, curve, words):
    path = tmp_path / "bad.toml"
    path.write_text(_flat_text().replace("[launch]\n", f"[experts.curve]\n{curve}\n\n[launch]\n"))
    with pytest.raises(UserError) as err:
        load_table(str(path))
    assert words in str(err.value) and "\n" not in str(err.value)


@settings(max_examples=200, deadline=None)
@given(start=st.floats(1e5, 1e8), growth=st.floats(1.01, 3.0))
def test_expert_time_never_falls_as_its_experts_widen(start, growth):
    """A grouped expert GEMM's bytes grow with one expert's matrix: its time never falls as they do."""
    terms = {"tokens": 64, "k": 8, "experts": 256, "share": 1.0}
    last = 0.0
    for i in range(30):
        weights = start * growth ** i * _distinct(64, 8, 256)
        op = OpRecord(0, "moe.gate_up", "m", 1.0, weights, 0.0, "fp8", True, kind="modelled", param_bytes=weights,
                      attrs={"expected_experts": terms})
        t = _kernels_s(op)
        assert t >= last * (1 - 1e-12)
        last = t
