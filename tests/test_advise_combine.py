"""`advise --combine`: levers that compose priced together, each combination ONE deployment
re-profiled through the pipeline; `-O mode=absorbed` on a transformers DeepSeek config."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rooflinekit.analyses.advise import AdviseOptions, advise
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, TINY_LLAMA, one_line_error

GQA = EXAMPLES / "llama_gqa.py"
COUNTS = ReportOptions(measure=False)
LITE = str(EXAMPLES / "configs/deepseek-v2-lite.json")
V2 = str(EXAMPLES / "configs/deepseek-v2.json")


def test_a_combined_row_is_a_separate_profile_of_its_deployment():
    options = dict(TINY_LLAMA, layers=2)
    w = Workload("decode", 2, 512, options=tuple(sorted(options.items())))
    d = Deployment("H800", kernels="serving")
    report = advise(load_source(str(GQA), options), w, d, extras=AdviseOptions(combine=True, max_combinations=4))
    combos = [lv for lv in report.levers if lv.kind == "combination"]
    assert combos and report.combine is not None and report.combine.priced <= 4
    for row in combos:
        changed = {k: v for k, v in row.changes.items() if k in Deployment.__dataclass_fields__}
        batch = row.changes.get("batch", w.batch)
        alone = run_profile(load_source(str(GQA), options), replace(w, batch=batch), replace(d, **changed),
                        options=COUNTS).report
        assert row.expected_step_s == alone.totals.expected_step_s, row.lever
        assert row.tokens_per_s_per_gpu == alone.totals.tokens_per_s_per_gpu
        assert row.fits == alone.memory.fits
        assert row.lever == ", ".join([p for p in replace(d, **changed).words("bf16").split(", ")
                                       if p != "serving kernels"] + ([f"batch {batch:,}"] if "batch" in row.changes
                                                                     else []))


def test_without_combine_the_levers_are_alone():
    options = dict(TINY_LLAMA, layers=1)
    w = Workload("decode", 1, 128, options=tuple(sorted(options.items())))
    report = advise(load_source(str(GQA), options), w, Deployment("H800"))
    assert report.combine is None and {lv.kind for lv in report.levers} == {"lever"}


@pytest.mark.hf
def test_mode_absorbed_on_a_deepseek_config_is_the_absorbed_lever():
    """-O mode=absorbed on transformers' DeepSeek-V2-Lite (naive MLA code): the capture restated
    as advise's absorbed-MLA lever restates it, the same step."""
    w = Workload("decode", 8, 32768, options=(("layers", 2),))
    d = Deployment("H800")
    advice = advise(load_source(LITE, {"layers": 2}), w, d)
    (lever,) = [lv for lv in advice.levers if lv.lever == "absorbed MLA"]
    absorbed = run_profile(load_source(LITE, {"layers": 2, "mode": "absorbed"}),
                       replace(w, options=(("layers", 2), ("mode", "absorbed"))), d, options=COUNTS).report
    assert {a.mode for a in absorbed.attention} == {"absorbed"}
    assert absorbed.totals.expected_step_s == lever.expected_step_s
    naive = run_profile(load_source(LITE, {"layers": 2}), w, d, options=COUNTS).report
    assert absorbed.totals.expected_step_s < naive.totals.expected_step_s / 4


@pytest.mark.hf
def test_mode_absorbed_on_a_model_without_mla_is_one_line(invoke):
    one_line_error(invoke("profile", str(EXAMPLES / "configs/llama-3.1-8b.json"), "-O", "layers=1", "-O",
                          "mode=absorbed", "--phase", "decode", "-b", "1", "-s", "64", "-H", "H800"),
                   "mode=absorbed", "MLA")


@pytest.mark.hf
@pytest.mark.slow
def test_deepseek_v2_best_combination_fits_where_no_single_lever_does():
    """DeepSeek-V2 cut to 4 layers, as written, batch 8 at context 32768 on H800, with the memory
    fraction cut to 0.09 so that one GPU holds what it holds of the whole model (4/60 of the
    layers: weights and cache scale with layers): no single lever fits, the best combination does."""
    w = Workload("decode", 8, 32768, options=(("layers", 4),))
    d = Deployment("H800", memory_fraction=0.09)
    report = advise(load_source(V2, {"layers": 4}), w, d, extras=AdviseOptions(combine=True, max_combinations=8))
    singles = [lv for lv in report.levers if lv.kind == "lever"]
    assert singles and not any(lv.fits for lv in singles)
    best = report.levers[0]
    assert best.kind == "combination" and best.fits is True, best
    again = run_profile(load_source(V2, {"layers": 4}), replace(w, batch=best.changes.get("batch", 8)),
                    replace(d, **{k: v for k, v in best.changes.items() if k in Deployment.__dataclass_fields__}),
                    options=COUNTS, lever=_absorb() if "absorbed MLA" in best.lever else None).report
    assert again.totals.expected_step_s == best.expected_step_s and again.memory.fits


def _absorb():
    from rooflinekit_plugins.mla_absorb import AbsorbMLA

    return AbsorbMLA()


@pytest.mark.parametrize("args, needle", [(("--max-combinations", "0", "--combine"), "--max-combinations")])
def test_bad_combine_options_are_one_line(invoke, args, needle):
    opts = sum((["-O", f"{k}={v}"] for k, v in TINY_LLAMA.items()), [])
    one_line_error(invoke("advise", GQA, "--phase", "decode", "-b", "1", "-s", "64", *opts, *args), needle)


def test_combine_json_names_the_search(invoke):
    opts = sum((["-O", f"{k}={v}"] for k, v in TINY_LLAMA.items()), [])
    result = invoke("advise", GQA, "--phase", "decode", "-b", "1", "-s", "64", *opts, "--combine",
                    "--max-combinations", "2", "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["combine"]["limit"] == 2 and data["combine"]["priced"] <= 2
    assert any(lv["kind"] == "combination" for lv in data["levers"])
    assert "combination 1/" in result.stderr
