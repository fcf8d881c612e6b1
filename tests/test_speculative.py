"""Speculative decoding priced whole (rooflinekit.stages.speculative, advise --draft/--mtp/--accept):
the closed form of the expected accepted tokens against the geometric series summed term by term,
and advise's speculative q_len lever against two separate profiles (draft and verify) combined by hand.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rooflinekit.analyses.advise import AdviseOptions, advise
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.speculative import (
    DEFAULT_ACCEPT,
    check_accept,
    expected_tokens,
    speculative_cycle,
)
from tests.conftest import EXAMPLES, TINY_LLAMA, one_line_error

GQA = EXAMPLES / "llama_gqa.py"
COUNTS = ReportOptions(measure=False)


def _series(a: float, k: int) -> float:
    """E = sum over i = 0..k of P(at least i drafts accepted) = sum of a^i, added term by term."""
    total, term = 0.0, 1.0
    for _ in range(k + 1):
        total += term
        term *= a
    return total


@given(st.floats(min_value=1e-6, max_value=1.0, allow_nan=False), st.integers(min_value=0, max_value=32))
@example(a=0.9999999870199199, k=1)  # 1 - a^(k+1) taken directly lost 2e-9 relative here
@example(a=1.0 - 2.0**-52, k=32)
def test_expected_tokens_is_the_geometric_series(a, k):
    assert math.isclose(expected_tokens(a, k), _series(a, k), rel_tol=1e-9, abs_tol=1e-12)


def test_expected_tokens_at_the_edges():
    assert expected_tokens(1.0, 3) == 4.0  # every draft accepted: k + 1
    assert expected_tokens(0.5, 0) == 1.0  # no draft: the target's own token
    assert math.isclose(expected_tokens(0.7, 3), 1 + 0.7 + 0.49 + 0.343)


@pytest.mark.parametrize("bad", [0, -0.1, 1.01, float("nan"), float("inf"), "x"])
def test_an_acceptance_outside_the_unit_interval_is_refused(bad):
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        check_accept(bad)


def test_the_cycle_by_hand():
    c = speculative_cycle(draft_step_s=0.002, verify_step_s=0.010, accept=0.8, k=3)
    e = 1 + 0.8 + 0.64 + 0.512
    assert math.isclose(c.cycle_s, 3 * 0.002 + 0.010)
    assert math.isclose(c.tokens_per_cycle, e)
    assert math.isclose(c.time_per_token_s, (3 * 0.002 + 0.010) / e)
    assert math.isclose(c.tokens_per_s_per_user, e / (3 * 0.002 + 0.010))
    assert DEFAULT_ACCEPT == 0.7


def _tiny(layers: int):
    options = dict(TINY_LLAMA, layers=layers)
    return load_source(str(GQA), options), tuple(sorted(options.items()))


def test_the_q_len_lever_with_a_draft_is_the_cycle_of_two_separate_profiles():
    """Target: the tiny Llama with 4 layers; draft: the same with 1 layer. q_len 4 = 3 drafts and a
    verify of 4 tokens: (3 x draft + verify) / E from a profile of each, made separately."""
    target, t_opts = _tiny(4)
    draft, d_opts = _tiny(1)
    w = Workload("decode", 2, 512, options=t_opts)
    d = Deployment("H800", kernels="serving")
    report = advise(target, w, d, extras=AdviseOptions(draft=draft, draft_options=d_opts, accept=0.6))
    (row,) = [lv for lv in report.levers if lv.lever == "q_len 4"]
    verify = run_profile(target, replace(w, decode_q_len=4), d, options=COUNTS).report.totals.expected_step_s
    draft_s = run_profile(draft, replace(w, options=d_opts), d, options=COUNTS).report.totals.expected_step_s
    e = 1 + 0.6 + 0.36 + 0.216
    spec = row.speculative
    assert spec.k == 3 and spec.accept == 0.6
    assert spec.verify_step_s == verify and spec.draft_step_s == draft_s
    assert math.isclose(spec.time_per_token_s, (3 * draft_s + verify) / e, rel_tol=1e-12)
    assert math.isclose(row.tokens_per_s_per_user, e / (3 * draft_s + verify), rel_tol=1e-12)
    assert math.isclose(row.tokens_per_s_per_gpu, 2 * e / (3 * draft_s + verify), rel_tol=1e-12)


def test_without_a_draft_the_q_len_lever_counts_accepted_tokens_and_says_the_draft_is_not_priced():
    """No draft given: its steps are taken as free, but only the expected accepted tokens count
    (a = 0.7: (1 - a^2) / (1 - a) = 1.7 tokens per verify of 2), never all of them."""
    target, t_opts = _tiny(2)
    report = advise(target, Workload("decode", 2, 256, options=t_opts), Deployment("H800"))
    (row,) = [lv for lv in report.levers if lv.lever == "q_len 2"]
    assert "the draft's steps are not priced" in row.assumption
    spec = row.speculative
    assert spec.draft_step_s == 0.0 and spec.accept == 0.7
    assert spec.tokens_per_cycle == pytest.approx(1.7, rel=1e-12)
    assert row.tokens_per_s_per_gpu == pytest.approx(2 * 1.7 / spec.verify_step_s / row.gpus, rel=1e-12)


def test_mtp_prices_one_decoder_layer_and_the_head_per_draft():
    """--mtp 1: the q_len 2 lever only, its draft step the baseline's expected step times the share
    of its bound time in the last layer and the output head (from the op rows, summed here)."""
    target, t_opts = _tiny(4)
    w = Workload("decode", 2, 512, options=t_opts)
    report = advise(target, w, Deployment("H800"), extras=AdviseOptions(mtp=1))
    assert {lv.lever for lv in report.levers if lv.lever.startswith("q_len")} == {"q_len 2"}
    (row,) = [lv for lv in report.levers if lv.lever == "q_len 2"]
    base = run_profile(target, w, Deployment("H800"), options=COUNTS).report
    layer = [op for op in base.ops if op.module.startswith("layers.3.") or op.module == "layers.3"
             or op.module.split(".")[-1] == "lm_head"]
    assert layer, sorted({op.module for op in base.ops})
    share = sum(op.time_bound_s for op in layer) / sum(op.time_bound_s for op in base.ops)
    assert math.isclose(row.speculative.draft_step_s, base.totals.expected_step_s * share, rel_tol=1e-12)


@pytest.mark.parametrize("args, needle", [
    (("--accept", "1.5"), "(0, 1]"),
    (("--accept", "0"), "(0, 1]"),
    (("--mtp", "1", "--draft", str(GQA)), "--draft and --mtp"),
])
def test_bad_speculative_options_are_one_line(invoke, args, needle):
    opts = sum((["-O", f"{k}={v}"] for k, v in TINY_LLAMA.items()), [])
    one_line_error(invoke("advise", GQA, "--phase", "decode", "-b", "1", "-s", "64", *opts, *args), needle)
