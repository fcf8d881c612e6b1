"""Planned pipeline parallelism (--pp, --micro-batches): stages, sends, the pipelined step, memory.

Every figure is checked against numbers computed here from the unsplit profile's op rows, the
model's own parameters and the hardware entry, not read back from the pp block."""

from __future__ import annotations

import math

import pytest

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.pipeline_parallel import (
    default_micro_batches,
    pipelined_step,
    split_layers,
    steady_step,
)
from tests.conftest import EXAMPLES, one_line_error

GQA = EXAMPLES / "llama_gqa.py"
#: Four layers of a small Llama-style GQA model (meta: sizes cost nothing, keep them small anyway).
SMALL = {"layers": 4, "heads": 32, "kv_heads": 8, "head_dim": 32, "hidden": 1024, "intermediate": 2048,
         "vocab": 1000}
HIDDEN, BATCH, CONTEXT = 1024, 8, 2048


def run(path=GQA, batch=BATCH, phase="decode", options=SMALL, **deployment):
    workload = Workload(phase, batch, CONTEXT, "bf16", "meta", tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options), workload, Deployment("H800", **deployment))


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return int(parts[1]) if parts[0] == "layers" and len(parts) > 1 else None


def stage_by_hand(ops: list[dict], ranges: list[range]) -> list[int]:
    """Each op's stage: its layer's; outside the layers, the last layer's before it (0 before any)."""
    out, current = [], 0
    for op in ops:
        layer = layer_of(op["module"])
        if layer is not None:
            current = next(k for k, r in enumerate(ranges) if layer in r)
        out.append(current)
    return out


@pytest.fixture(scope="module")
def unsplit():
    return run().report.to_dict()


@pytest.fixture(scope="module")
def pp2():
    return run(pp=2)


# -- the pure functions ----------------------------------------------------------------------


def test_split_layers_is_contiguous_and_even():
    assert split_layers(4, 2) == [range(0, 2), range(2, 4)]
    assert split_layers(32, 3) == [range(0, 11), range(11, 22), range(22, 32)]
    assert split_layers(5, 5) == [range(i, i + 1) for i in range(5)]
    with pytest.raises(ValueError):
        split_layers(2, 3)
    with pytest.raises(ValueError):
        split_layers(2, 0)


def test_pipelined_step_formula():
    step, bubble = pipelined_step([1.0, 3.0, 2.0], 4, 0.5)
    assert step == (4 + 3 - 1) * 3.0 + 2 * 0.5
    assert bubble == 2 / 6
    # a link slower than the slowest stage paces the pipeline
    step, _ = pipelined_step([1.0, 1.0], 3, 2.0)
    assert step == (3 + 1) * 2.0 + 1 * 2.0
    assert pipelined_step([2.0], 5, 9.0) == (10.0, 0.0)
    with pytest.raises(ValueError):
        pipelined_step([1.0], 0, 0.0)


def test_steady_step_formula():
    # stages busy: M x the slowest stage
    assert steady_step([1.0, 3.0, 2.0], 4, 0.5, 0.1) == 4 * 3.0
    # a micro-batch's round trip paces it: the stages, N - 1 sends and the token back
    assert steady_step([1.0, 3.0, 2.0], 2, 0.5, 0.1) == pytest.approx(1 + 3 + 2 + 2 * 0.5 + 0.1)
    # a link slower than the slowest stage
    assert steady_step([1.0, 1.0], 3, 2.0, 0.0) == 3 * 2.0
    assert steady_step([2.0], 5, 9.0, 9.0) == 10.0
    with pytest.raises(ValueError):
        steady_step([1.0], 0, 0.0, 0.0)


def test_default_micro_batches():
    assert default_micro_batches(4, 64, "decode") == 4
    assert default_micro_batches(4, 2, "decode") == 2
    assert default_micro_batches(4, 16, "prefill") == 16
    assert default_micro_batches(1, 16, "decode") == 1


# -- the report --------------------------------------------------------------------------------


def test_stage_flops_sum_to_the_unsplit_profile(pp2, unsplit):
    pp = pp2.report.parallel["pp"]
    assert [s["layers"] for s in pp["stages"]] == [[0, 1], [2, 3]]
    assert sum(s["flops"] for s in pp["stages"]) == unsplit["totals"]["flops"]
    ranges = split_layers(4, 2)
    stages = stage_by_hand(unsplit["ops"], ranges)
    for k, row in enumerate(pp["stages"]):
        mine = [op for op, s in zip(unsplit["ops"], stages, strict=True) if s == k]
        assert row["flops"] == sum(op["flops"] for op in mine)
        assert row["bytes"] == pytest.approx(sum(op["bytes_read"] + op["bytes_written"] for op in mine), rel=1e-12)
    assert "embed_tokens" in pp["stages"][0]["other_modules"]
    assert {"norm", "lm_head"} <= set(pp["stages"][1]["other_modules"])


def _micro_stage_bounds(n: int, m: int) -> list[float]:
    """Each stage's micro-batch bound by hand, from an unsplit profile at the micro-batch's batch."""
    hw = hardware_db().get("H800")
    micro = run(batch=BATCH // m).report.to_dict()
    stages = stage_by_hand(micro["ops"], split_layers(4, n))
    times = []
    for k in range(n):
        mine = [op for op, s in zip(micro["ops"], stages, strict=True) if s == k]
        flops = sum(op["flops"] for op in mine)
        nbytes = sum(op["bytes_read"] + op["bytes_written"] for op in mine)
        times.append(max(flops / hw.peak("bf16"), nbytes / hw.memory_bandwidth))
    return times


def test_steady_pipeline_is_the_larger_of_busy_stages_and_a_round_trip(pp2, unsplit):
    """The default schedule: M micro-batches in flight; one token per sequence per period =
    max(M x slowest stage, the stages + (N - 1) sends + the token ids sent back)."""
    hw = hardware_db().get("H800")
    pp = pp2.report.parallel["pp"]
    n, m = 2, 2  # decode default: one micro-batch per stage
    assert pp["schedule"] == "steady"
    assert pp["micro_batches"] == m and pp["micro_batch_sequences"] == BATCH // m
    times = _micro_stage_bounds(n, m)
    assert [s["time_bound_s"] for s in pp["stages"]] == pytest.approx(times, rel=1e-9)
    send_bytes = (BATCH // m) * HIDDEN * 2
    one_way = hw.interconnect_bandwidth / 2
    send_s = hw.interconnect_latency + send_bytes / one_way
    back_s = hw.interconnect_latency + (BATCH // m) * 8 / one_way  # int64 token ids
    assert pp["send_bytes_per_micro_batch"] == send_bytes
    assert pp["send_time_s"] == pytest.approx(send_s, rel=1e-12)
    assert pp["token_send_time_s"] == pytest.approx(back_s, rel=1e-12)
    step = max(m * max(max(times), send_s), sum(times) + (n - 1) * send_s + back_s)
    assert pp2.report.totals.time_bound_s == pytest.approx(step, rel=1e-9)
    expected = [s["expected_s"] for s in pp["stages"]]
    period = max(m * max(max(expected), pp["send_expected_s"]),
                 sum(expected) + (n - 1) * pp["send_expected_s"] + pp["token_send_expected_s"])
    assert pp2.report.totals.expected_step_s == pytest.approx(period, rel=1e-12)
    assert pp2.report.totals.tokens_per_s_per_gpu == pytest.approx(BATCH / period / n, rel=1e-12)
    assert pp["unpipelined_time_bound_s"] == unsplit["totals"]["time_bound_s"]


def test_one_batch_schedule_is_m_plus_n_minus_1_slowest_stages_plus_sends():
    hw = hardware_db().get("H800")
    report = run(pp=2, pp_schedule="one-batch").report
    pp = report.parallel["pp"]
    n, m = 2, 2
    assert pp["schedule"] == "one-batch"
    times = _micro_stage_bounds(n, m)
    send_s = hw.interconnect_latency + (BATCH // m) * HIDDEN * 2 / (hw.interconnect_bandwidth / 2)
    assert report.totals.time_bound_s == pytest.approx((m + n - 1) * max(times) + (n - 1) * send_s, rel=1e-9)
    assert pp["bubble_fraction"] == (n - 1) / (m + n - 1)
    expected = (m + n - 1) * max(s["expected_s"] for s in pp["stages"]) + (n - 1) * pp["send_expected_s"]
    assert report.totals.expected_step_s == pytest.approx(expected, rel=1e-12)


def test_send_bytes_over_the_step_and_hidden_from_the_boundary():
    report = run(pp=4, micro_batches=4).report
    pp = report.parallel["pp"]
    assert [s["layers"] for s in pp["stages"]] == [[i, i] for i in range(4)]
    assert pp["hidden_size"] == HIDDEN and "layers.0" in pp["hidden_source"]
    assert pp["send_bytes"] == BATCH * 1 * HIDDEN * 2 * (4 - 1)
    assert pp["micro_batch_tokens"] == 2


def test_stage_weights_are_the_layers_parameters(pp2, unsplit):
    model = pp2.model
    by_stage = [0.0, 0.0]
    for name, p in model.named_parameters():
        layer = layer_of(name)
        if layer is not None:
            stage = 0 if layer < 2 else 1
        else:
            stage = 0 if name.startswith("embed_tokens") else 1
        by_stage[stage] += p.numel() * p.element_size()
    pp = pp2.report.parallel["pp"]
    assert [s["weights_bytes"] for s in pp["stages"]] == by_stage
    fullest = max(range(2), key=lambda k: pp["stages"][k]["memory_bytes"])
    assert pp["memory_stage"] == fullest
    assert pp2.report.memory.weights_bytes == by_stage[fullest]
    assert pp2.report.memory.gpus == 2
    # each stage holds its own two layers' KV cache: half the unsplit cache
    for row in pp["stages"]:
        assert row["kv_cache_bytes"] == pytest.approx(unsplit["memory"]["kv_cache_bytes"] / 2, rel=1e-12)


def test_tp_with_pp_stage_flops_sum_to_the_tp_profile():
    tp = run(tp=2).report
    both = run(tp=2, pp=2)
    pp = both.report.parallel["pp"]
    assert sum(s["flops"] for s in pp["stages"]) == tp.totals.flops
    assert both.report.parallel["gpus"] == 4 and both.report.parallel["tp"] == 2
    # every weight is split in two by TP (replicated norms aside): each stage holds about half
    whole = run(pp=2).report.parallel["pp"]
    for a, b in zip(pp["stages"], whole["stages"], strict=True):
        assert 0.45 * b["weights_bytes"] < a["weights_bytes"] < 0.55 * b["weights_bytes"]
    expected = both.report.totals.expected_step_s
    assert both.report.totals.tokens_per_s_per_gpu == pytest.approx(BATCH / expected / 4, rel=1e-12)


def test_prefill_default_splits_the_batch_into_sequences():
    report = run(batch=4, phase="prefill", options={**SMALL, "layers": 2}, pp=2).report
    pp = report.parallel["pp"]
    assert pp["micro_batches"] == 4 and pp["micro_batch_sequences"] == 1
    assert pp["micro_batch_tokens"] == CONTEXT
    times = [s["time_bound_s"] for s in pp["stages"]]
    assert pp["bubble_fraction"] == pytest.approx(1 - 4 * max(times) / report.totals.time_bound_s, rel=1e-12)
    one_batch = run(batch=4, phase="prefill", options={**SMALL, "layers": 2}, pp=2, pp_schedule="one-batch").report
    assert one_batch.parallel["pp"]["bubble_fraction"] == 1 / 5


def test_pp1_is_no_pp(unsplit):
    again = run(pp=1).report.to_dict()
    for r in (again, unsplit):
        r.pop("capture")
    assert again == unsplit


def test_text_block_fits_100_columns(invoke):
    result = invoke("profile", GQA, *[f"-O{k}={v}" for k, v in SMALL.items()], "-b", BATCH, "-s", CONTEXT,
                    "-H", "H800", "--pp", 2)
    assert result.exit_code == 0, result.stderr
    assert "pipeline: 2 stages x 2 micro-batches" in result.stdout
    assert "Pipeline stages" in result.stdout and "pipeline sends:" in result.stdout
    assert all(len(line) <= 100 for line in result.stdout.splitlines())


@pytest.mark.parametrize("args, needle", [
    (("--pp", 5), "exceeds the 4 layers"),
    (("--pp", 0), "--pp must be"),
    (("--pp", 2, "--micro-batches", 0), "--micro-batches must be"),
    (("--pp", 2, "--micro-batches", BATCH + 1), "exceeds the batch"),
    (("--micro-batches", 2), "give --pp above 1"),
    (("--pp", 2, "--measure", "--device", "cpu"), "drop --measure"),
])
def test_bad_inputs(invoke, args, needle):
    result = invoke("profile", GQA, *[f"-O{k}={v}" for k, v in SMALL.items()], "-b", BATCH, "-H", "H800", *args)
    one_line_error(result, needle)


def test_sweep_takes_pp(invoke):
    result = invoke("sweep", GQA, *[f"-O{k}={v}" for k, v in SMALL.items()], "-b", "2,4", "-s", CONTEXT,
                    "-H", "H800", "--pp", 2, "--no-critical", "-f", "json")
    assert result.exit_code == 0, result.stderr


@pytest.mark.hf
def test_transformers_config_stages_sum_to_the_unsplit_profile():
    pytest.importorskip("transformers")
    config = EXAMPLES / "configs" / "llama-3.1-8b.json"
    options = {"layers": 4}
    whole = run(config, options=options).report
    split = run(config, options=options, pp=2).report
    pp = split.parallel["pp"]
    assert sum(s["flops"] for s in pp["stages"]) == whole.totals.flops
    assert pp["hidden_size"] == 4096
    assert pp["send_bytes"] == BATCH * 4096 * 2 * 1
    expected = [s["expected_s"] for s in pp["stages"]]
    period = max(2 * max(expected), sum(expected) + pp["send_expected_s"] + pp["token_send_expected_s"])
    assert math.isclose(split.totals.expected_step_s, period, rel_tol=1e-12)
