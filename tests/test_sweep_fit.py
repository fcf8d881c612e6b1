"""Sweep points evaluated from fitted counts equal separate profiles of the same points.

Every example and shipped config, both phases: the rows a sweep evaluates from counts fitted on a
few captures (rooflinekit.analyses.gridfit, rooflinekit.stages.fitted_capture) are what `rooflinekit profile`
gives at that point, to 1e-9 relative; where the counts do not fit (MoE expected load, a model
whose ops change with batch) the sweep captures every point and says so.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from rooflinekit.analyses.gridfit import regions
from rooflinekit.analyses.profile import run_profile
from rooflinekit.analyses.sweep import Profiler, point_row, run_sweep
from rooflinekit.core.codec import encode
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.fitting import Design
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, TINY_LLAMA

CONFIGS = EXAMPLES / "configs"
BATCHES = [1, 3, 8]
CONTEXTS = [64, 200, 512, 1024]
#: Points the fit evaluates (none is a design point: B=1,3 x S=64,200[,512]; the check is at B=4096).
SAMPLES = [(8, 512), (3, 1024), (8, 64)]
ROW_KEYS = ("flops", "flops_model", "bytes", "kv_bytes_executed", "kv_bytes_min", "weight_bytes",
            "predicted_step_s", "time_bound_s", "uncounted_bytes", "expected_step_s")
ATTENTION_KEYS = ("flops_model", "flops_executed", "bytes_min", "bytes_executed", "kv_bytes_min",
                  "kv_bytes_executed", "cache_bytes_per_token")


def _close(a, b, rel=1e-9) -> bool:
    if a is None or b is None:
        return a is b
    scale = max(abs(a), abs(b))
    return abs(a - b) <= rel * scale


def _workload(phase, batch, context, options):
    return Workload(phase, batch, context, options=tuple(sorted(options.items())))


def _reference(path, phase, batch, context, options):
    return run_profile(load_source(str(path), options), _workload(phase, batch, context, options),
                   Deployment("H800")).report


def _fitted(path, phase, options, batches=BATCHES, contexts=CONTEXTS):
    prof = Profiler(load_source(str(path), options), _workload(phase, batches[0], contexts[0], options),
                    Deployment("H800"))
    prof.fit(batches, contexts, top_batch=4096)
    return prof


def assert_rows_equal(row, ref, where):
    for key in ROW_KEYS:
        assert _close(row[key], ref[key]), (where, key, row[key], ref[key])
    for key in ATTENTION_KEYS:
        assert _close(row["attention"][key], ref["attention"][key]), (where, "attention", key)
    for key in ("layers", "recognised"):
        assert row["attention"][key] == ref["attention"][key], (where, key)


def check_points(path, phase, options, samples=SAMPLES, batches=BATCHES, contexts=CONTEXTS, expect_fit=True):
    prof = _fitted(path, phase, options, batches, contexts)
    fitted = [s for s in contexts if prof.fits.get(s)]
    if expect_fit:
        assert fitted == list(contexts), prof.fit_notes
    before = prof.profiles
    for batch, context in samples:
        ref = point_row(_reference(path, phase, batch, context, options))
        assert_rows_equal(encode(prof.row(batch, context)), encode(ref), (path.name, phase, batch, context))
    if expect_fit:
        assert prof.profiles == before  # evaluated, not captured
    return prof


# -- the arithmetic ---------------------------------------------------------------------------


def test_the_fit_is_exact_rational_interpolation():
    design = Design((1, 2), (64, 200, 512))

    def count(b, s):  # integer and dyadic coefficients, as FLOP and byte counts have
        return 7 + 3 * b + 5 * s + Fraction(1, 2) * b * s + 11 * s * s + Fraction(3, 4) * b * s * s

    k = design.poly(tuple(float(count(b, s)) for b, s in design.points))
    for b, s in [(4096, 262144), (1, 1), (512, 131072), (3, 4097)]:
        assert design.values(b, s)[k] == float(count(b, s))  # exact, then rounded once


def test_regions_split_at_windows_and_small_contexts():
    assert regions([512, 1024, 8192], set()) == [[512, 1024, 8192]]
    assert regions([1, 2, 64, 4094, 4095, 4096, 4098, 4099, 8192], {4096}) == [
        [1], [2], [64], [4094], [4095], [4096], [4098], [4099, 8192]]


# -- every example and shipped config, both phases --------------------------------------------


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_points_equal_separate_profiles(name, phase):
    check_points(EXAMPLES / name, phase, {})


#: MoE configs: the expected load is not polynomial in batch, so every point is captured.
MOE = {"mixtral-8x7b", "deepseek-v2-lite", "deepseek-v2", "gpt-oss-20b"}


#: Encoder configs: prefill only (an encoder has no decode step).
ENCODERS = {"bert-base-uncased"}


@pytest.mark.hf
@pytest.mark.parametrize(("name", "phase"), [(p.stem, phase) for p in sorted(CONFIGS.glob("*.json"))
                                             for phase in ("decode", "prefill")
                                             if not (p.stem in ENCODERS and phase == "decode")])
def test_config_points_equal_separate_profiles(name, phase):
    moe = name in MOE
    # an encoder's positions stop at its position table (BERT: 512)
    contexts, samples = ([64, 200, 384, 512], [(8, 512), (3, 384)]) if name in ENCODERS else (CONTEXTS, SAMPLES)
    encoder = name in ENCODERS
    prof = check_points(CONFIGS / f"{name}.json", phase, {"layers": 2}, samples=samples[:1 if moe else 2],
                        expect_fit=not (moe or encoder), contexts=contexts)
    if moe:  # captured, with the reason
        assert prof.fits == {} and prof.evaluated == 0
        assert any(n.startswith("counts not fitted: ExpertsModel") and "every point is captured" in n
                   for n in prof.fit_notes)
    if encoder:  # its rows carry their query and key lengths (the encoder_decoder plugin): captured, with the reason
        assert prof.fits == {} and prof.evaluated == 0
        assert any("recognised differently at other points" in n and "every point there is captured" in n
                   for n in prof.fit_notes)


@pytest.mark.hf
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_sliding_window_contexts_straddling_the_window(phase):
    contexts = [2048, 4095, 4096, 4097, 8192, 16384]  # Mistral-7B v0.1: window 4096
    samples = [(8, 2048), (8, 4095), (3, 4096), (8, 4097), (8, 8192), (3, 16384)]
    prof = check_points(CONFIGS / "mistral-7b.json", phase, {"layers": 2}, samples, contexts=contexts)
    fits = {id(f) for s in contexts for f in prof.fits[s]}
    assert len(fits) >= 5  # below, at and above the window fitted apart


@pytest.mark.hf
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_alternating_windows_straddling_the_window(phase):
    contexts = [1024, 4096, 4097, 8192, 12000]  # Gemma-2: sliding (4096) and global layers alternate
    samples = [(8, 1024), (8, 4096), (8, 4097), (3, 8192), (8, 12000)]
    check_points(CONFIGS / "gemma-2-9b.json", phase, {"layers": 2}, samples, contexts=contexts)


# -- what the fit holds beyond the totals -----------------------------------------------------


def test_full_report_from_the_fit_equals_a_profile():
    """Every op, module and attention row of a fitted report, not only the sweep row."""
    options = {"layers": 2}
    prof = _fitted(EXAMPLES / "llama_gqa.py", "decode", options)
    fitted = prof.report_at(8, 512)
    ref = _reference(EXAMPLES / "llama_gqa.py", "decode", 8, 512, options)
    assert len(fitted.ops) == len(ref.ops)
    for a, b in zip(fitted.ops, ref.ops, strict=True):
        assert (a.name, a.module, a.shapes) == (b.name, b.module, b.shapes)
        for key in ("flops", "bytes_read", "bytes_written", "param_bytes", "time_bound_s"):
            assert _close(getattr(a, key), getattr(b, key)), (a.index, key)
    mods = {m.name: m for m in ref.modules}
    assert [m.name for m in fitted.modules] == [m.name for m in ref.modules]
    for m in fitted.modules:
        for key in ("flops", "bytes", "weight_bytes", "time_bound_ops_s"):
            assert _close(getattr(m, key), getattr(mods[m.name], key)), (m.name, key)
    for a, b in zip(fitted.attention, ref.attention, strict=True):
        assert a.module == b.module and a.arch == b.arch
        for key in ("kv_bytes_min", "kv_bytes_executed", "flops_model", "flops_executed", "bytes_min"):
            assert _close(getattr(a, key), getattr(b, key)), (a.module, key)
    assert fitted.notes == prof.fit_for(8, 512).template.notes


def test_a_gather_capped_at_its_table_between_design_and_check():
    """An embedding reads at most its whole table: min(rows gathered, table), reached past the design."""
    options = dict(TINY_LLAMA, vocab=4096)  # B*S tokens reach 4096 rows between the design and the check
    samples = [(8, 512), (8, 1024), (3, 1024), (8, 64)]
    prof = check_points(EXAMPLES / "llama_gqa.py", "prefill", options, samples)
    fitted = prof.fit_for(8, 1024).fitted
    capped = [(op.name, cap) for op, fit in zip(fitted.template.ops, fitted.op_fits, strict=True)
              for _, cap, _ in fit.reads if cap is not None]
    assert capped == [("aten.embedding", 4096 * 256 * 2)]  # the bf16 table, whole


def test_ops_that_change_with_batch_fall_back_with_a_note(tmp_path):
    """A model that runs an extra pass above batch 64: the check at B=4096 (the critical batch's bound)
    sees it, and every point is captured."""
    path = tmp_path / "bend.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.proj = nn.Linear(64, 64)\n"
        "    def forward(self, x, passes):\n        y = self.proj(x)\n"
        "        for _ in range(passes):\n            y = y * 2.0\n        return y\n\n"
        "def build_model():\n    return M()\n\n"
        "def make_inputs(batch, context, phase):\n    return (torch.zeros(batch, 64), 1 if batch > 64 else 0)\n")
    source = load_source(str(path), {})
    base = Workload("decode", 1, 1)
    result = run_sweep(source, base, Deployment("H800"), [1, 4, 16], [1])  # the critical batch may ask up to 4096
    data = result.to_dict()
    assert data["evaluated"] == 0 and result.profiles >= 3
    assert any(n.startswith("counts not fitted for S=1") and "every point there is captured" in n
               for n in data["notes"])


def test_sweep_command_fits_and_no_fit_captures(invoke, tmp_path):
    args = ["sweep", EXAMPLES / "llama_gqa.py", "-O", "layers=2", "-b", "1,2,8,32", "-s", "64,256,1024,4096",
            "-H", "H800", "-f", "json"]
    fitted = invoke(*args, "-o", tmp_path / "fit.json")
    captured = invoke(*args, "--no-fit", "-o", tmp_path / "all.json")
    assert fitted.exit_code == 0 and captured.exit_code == 0, fitted.stderr + captured.stderr
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("fit.json", "all.json"))
    assert a["evaluated"] > 0 and b["evaluated"] == 0 and a["profiles"] < b["profiles"]
    assert any(n.startswith("counts fitted for S=64..4096") for n in a["notes"])
    for p, q in zip(a["points"], b["points"], strict=True):
        assert_rows_equal(p, q, (p["batch"], p["context"]))
    assert [c["summary"] for c in a["critical_batch"]] == [c["summary"] for c in b["critical_batch"]]


def test_layers_called_out_of_order_are_captured_whole(tmp_path):
    """Skipping a layer stands in its earlier twin's output: where the twin has not run yet, the
    design is captured whole, and the points still equal separate profiles."""
    path = tmp_path / "reversed.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))\n"
        "    def forward(self, x):\n"
        "        for layer in reversed(self.layers):\n            x = layer(x)\n        return x\n\n"
        "def build_model():\n    return M()\n\n"
        "def make_inputs(batch, context, phase):\n    return (torch.zeros(batch, context, 32),)\n")
    prof = check_points(path, "decode", {}, samples=[(8, 512), (3, 1024)])
    assert all(f.fitted.repeats.skipped == [] for fits in prof.fits.values() for f in fits)
