"""`rooflinekit advise`: every lever priced by the same placement as a profile of its workload.

Each lever's figures are checked against a second method: an independent profile of the changed
workload (or closed forms for absorbed MLA written from the config's dimensions).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest

from rooflinekit.analyses.advise import advise
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.levers import LeverProposal
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from rooflinekit_plugins.mla_absorb import absorb
from tests.conftest import EXAMPLES, ROOT, TINY_LLAMA

GQA = EXAMPLES / "llama_gqa.py"
OPTIONS = dict(TINY_LLAMA, layers=2)
CAPACITY = 40e6  # a small device: the tiny model's largest batch that fits stays small
RESERVE = 4e6  # and a small reserve (CUDA context, communication buffers)


@pytest.fixture(scope="module")
def small_hw(tmp_path_factory):
    """The H800 entry with 40 MB of memory, 4 MB of it reserved."""
    text = (ROOT / "hardware_db/nvidia/h800_sxm5.toml").read_text()
    text = re.sub(r"(?m)^memory_bytes = \d.*$", f"memory_bytes = {CAPACITY:g}", text)
    text = re.sub(r"(?m)^memory_reserve_bytes = \d.*$", f"memory_reserve_bytes = {RESERVE:g}", text)
    text = text.replace('name = "H800 SXM5"', 'name = "Small H800"')
    path = tmp_path_factory.mktemp("hw") / "small.toml"
    path.write_text(text)
    return str(path)


def _workload(**changes) -> Workload:
    return replace(Workload("decode", 2, 256, options=tuple(sorted(OPTIONS.items()))), **changes)


COUNTS = ReportOptions(measure=False)


def _step(workload: Workload, hw: str, **deployment) -> float:
    return run_profile(load_source(str(GQA), OPTIONS), workload, Deployment(hw, **deployment),
                   options=COUNTS).report.totals.predicted_step_s


@pytest.fixture(scope="module")
def advice(small_hw) -> AdviceReport:
    return advise(load_source(str(GQA), OPTIONS), _workload(), Deployment(small_hw))


def test_levers_are_the_profiles_of_their_workloads(advice, small_hw):
    by = {lv.lever: lv for lv in advice.levers}
    w = _workload()
    assert advice.baseline.predicted_step_s == _step(w, small_hw)
    assert by["TP 2"].predicted_step_s == _step(w, small_hw, tp=2)
    assert by["TP 2"].changes == {"tp": 2}
    assert by["fp8 weights"].predicted_step_s == _step(w, small_hw, weight_dtype="fp8")
    assert by["int4 weights"].predicted_step_s == _step(w, small_hw, weight_dtype="int4", weight_group_size=128)
    assert by["int4 weights"].changes == {"weight_dtype": "int4", "weight_group_size": 128}
    assert by["fp8 KV cache"].predicted_step_s == _step(w, small_hw, kv_dtype="fp8")
    assert by["q_len 4"].predicted_step_s == _step(replace(w, decode_q_len=4), small_hw)
    assert by["q_len 4"].tokens == 4 * w.batch
    fused = run_profile(load_source(str(GQA), OPTIONS), w, Deployment(small_hw), options=COUNTS).report.totals.fused
    assert by["fused kernels"].predicted_step_s == fused.predicted_step_s


def test_batch_lever_is_the_largest_batch_that_fits(advice, small_hw):
    m = advice.memory
    expected = math.floor(((CAPACITY - RESERVE) * 0.9 - m.weights_bytes) / (m.kv_bytes_per_sequence + m.activation_bytes_per_sequence))
    (lever,) = [lv for lv in advice.levers if lv.lever.startswith("batch ")]
    assert lever.batch in (expected, expected - 1)  # one step down where activations grow faster than batch
    assert lever.fits is True
    assert lever.predicted_step_s == _step(_workload(batch=lever.batch), small_hw)


def test_ranked_speedups_and_bindings(advice):
    base = advice.baseline
    assert base.speedup == 1.0 and base.tokens_per_s == base.tokens / base.predicted_step_s
    per_gpu = [lv.tokens_per_s_per_gpu or 0.0 for lv in advice.levers]
    assert per_gpu == sorted(per_gpu, reverse=True)  # ranked by tokens/s per GPU at the expected step
    speedups = [lv.speedup or 0.0 for lv in advice.levers]
    assert speedups == sorted(speedups, reverse=True)  # the speed-up column sorted as titled
    for lv in advice.levers:
        assert lv.expected_step_s >= lv.predicted_step_s * (1 - 1e-12)
        # speed-up: tokens/s per GPU at the expected step over the baseline's (the text's figure)
        assert lv.speedup == pytest.approx(lv.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu)
        if lv.speculative is not None:  # a q_len lever: the accepted tokens of a verify cycle
            continue
        assert lv.tokens_per_s_per_gpu == pytest.approx(lv.tokens / lv.expected_step_s / lv.gpus)
        assert lv.tokens_per_s == pytest.approx(lv.tokens / lv.predicted_step_s)
        times = {"compute": lv.time_compute_s, "memory": lv.time_memory_s, "communication": lv.time_comm_s}
        assert lv.binding == ("capacity" if lv.fits is False else max(times, key=times.get))
    assert len(advice.levers) >= 6


def test_lever_that_does_not_apply_is_skipped_with_a_reason(advice):
    skipped = {s.lever: s.reason for s in advice.skipped}
    assert "MLA" in skipped["absorbed MLA"]


def test_prefill_skips_multi_token_decode(invoke):
    result = invoke("advise", GQA, "--phase", "prefill", "-s", "64", "-b", "1",
                    *sum((["-O", f"{k}={v}"] for k, v in OPTIONS.items()), []), "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    skipped = {s["lever"]: s["reason"] for s in data["skipped"]}
    assert "decode" in skipped["q_len 2"] and "decode" in skipped["q_len 4"]
    for lever in data["levers"]:
        assert set(lever) >= {"lever", "predicted_step_s", "tokens_per_s", "speedup", "binding", "fits", "assumption"}
    assert data["baseline"]["lever"] == "baseline"
    AdviceReport.from_dict(data)


class _DoubleBatch:
    """A third-party lever: twice the batch; and one that never applies."""

    @hookimpl
    def rooflinekit_advise_levers(self, workload, report):
        return [LeverProposal("double batch", replace(workload, batch=2 * workload.batch), "twice the sequences"),
                LeverProposal("warp drive", skip="no warp drive on this device")]


def test_plugin_lever_is_priced_like_the_builtins(small_hw):
    host = PluginHost()
    host.register(_DoubleBatch(), "double")
    report = advise(load_source(str(GQA), OPTIONS, host), _workload(), Deployment(small_hw), host=host)
    (lever,) = [lv for lv in report.levers if lv.lever == "double batch"]
    assert lever.source == "double" and lever.changes == {"batch": 4}
    assert lever.predicted_step_s == _step(_workload(batch=4), small_hw)
    assert ("warp drive", "double") in {(s.lever, s.source) for s in report.skipped}


MLA_OPTIONS = {"layers": 1, "hidden": 512, "heads": 4, "q_lora_rank": 64, "kv_lora_rank": 64,
               "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "intermediate": 256, "vocab": 256}


def test_absorbed_mla_from_the_models_own_mode():
    """A model file with an absorbed mode: the lever is that mode profiled."""
    path = str(EXAMPLES / "deepseek_mla.py")
    naive = dict(MLA_OPTIONS, mode="naive")
    w = Workload("decode", 2, 512, options=tuple(sorted(naive.items())))
    report = advise(load_source(path, naive), w, Deployment("H800"))
    (lever,) = [lv for lv in report.levers if lv.lever == "absorbed MLA"]
    absorbed = dict(MLA_OPTIONS, mode="absorbed")
    expected = run_profile(load_source(path, absorbed), replace(w, options=tuple(sorted(absorbed.items()))),
                       Deployment("H800"), options=COUNTS).report.totals.predicted_step_s
    assert lever.predicted_step_s == expected and lever.changes == {"mode": "absorbed"}


@pytest.mark.hf
def test_absorbed_mla_restates_a_naive_capture_to_closed_forms():
    """transformers' DeepSeek-V2-Lite runs MLA naive (kv_b_proj re-expands every cached position):
    restated, each layer attends the latent, 2 B H S (2 r + rope) FLOPs reading B S (r + rope) x 2 B,
    and kv_b_proj's weights apply to the T new tokens only: 2 T r H (nope + v) FLOPs."""
    c = json.loads((EXAMPLES / "configs/deepseek-v2-lite.json").read_text())
    b, s = 2, 1024
    h, r, rope, nope, v = (c["num_attention_heads"], c["kv_lora_rank"], c["qk_rope_head_dim"],
                           c["qk_nope_head_dim"], c["v_head_dim"])
    source = load_source(str(EXAMPLES / "configs/deepseek-v2-lite.json"), {})
    done = run_profile(source, Workload("decode", b, s), Deployment("H800"), options=COUNTS, lever=absorb)
    rows = done.report.attention
    assert len(rows) == c["num_hidden_layers"] and {a.mode for a in rows} == {"absorbed"}
    for a in rows:
        assert a.flops_executed == 2 * b * h * s * (2 * r + rope)
        assert a.kv_bytes_executed == a.kv_bytes_min == b * s * (r + rope) * 2
    projections = [op for op in done.report.ops if op.name == "mla.absorb_projections"]
    assert len(projections) == c["num_hidden_layers"]
    assert {op.flops for op in projections} == {2 * b * r * h * (nope + v)}
    # nothing over the cached positions is left: no op writes per-head K/V of every position
    assert max(op.bytes_written for op in done.report.ops) < b * s * h * (nope + rope) * 2
    assert done.report.memory.activation_peak_bytes < b * s * h * (nope + rope) * 2


@pytest.mark.hf
@pytest.mark.slow
def test_deepseek_v3_advice_has_six_priced_levers():
    """The acceptance workload: DeepSeek-V3, decode, batch 4, context 32768, H800, on the config cut
    to 8 layers (its 3 dense and 5 of its MoE layers: 61 B parameters, the same levers, and bf16
    weights that still do not fit one H800; the whole 61 layers cost 7x the time for no other lever)."""
    source = load_source(str(EXAMPLES / "configs/deepseek-v3.json"), {"layers": 8})
    report = advise(source, Workload("decode", 4, 32768), Deployment("H800"))
    priced = [lv for lv in report.levers if lv.predicted_step_s > 0 and lv.tokens_per_s]
    assert len(priced) >= 6
    names = {lv.lever for lv in report.levers}
    assert {"fp8 weights", "int4 weights", "fp8 KV cache", "TP 2", "TP 4", "TP 8", "absorbed MLA", "q_len 2"} <= names
    assert report.memory.fits is False  # 61e9 parameters in bf16 on one 80 GB GPU
    assert 60e9 < report.model.parameters < 62e9
    assert {s.lever for s in report.skipped} == {"batch up to what fits"}
