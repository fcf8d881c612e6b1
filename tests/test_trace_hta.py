"""The measured trace reads in Holistic Trace Analysis (HTA): its steps are iterations, and a
per-iteration analysis (TraceDiff between two iterations) finds every counted op once in each."""

from __future__ import annotations

import json

import pytest
from hta.trace_analysis import TraceAnalysis
from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

from tests.conftest import EXAMPLES, TINY_LLAMA

GQA = EXAMPLES / "llama_gqa.py"
REPEATS = 3


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A measured CPU run of a tiny model: its report and its trace, alone in a folder (HTA reads
    every trace of a folder)."""
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    folder = tmp_path_factory.mktemp("trace")
    report = folder.parent / "report.json"
    args = ["profile", str(GQA), "--device", "cpu", "--dtype", "fp32", "--measure", "--warmup", "1",
            "--repeats", str(REPEATS), "--context", "32", "--trace", str(folder / "t.json"), "-f", "json",
            "-o", str(report)]
    for k, v in TINY_LLAMA.items():
        args += ["-O", f"{k}={v}"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.stderr
    return json.loads(report.read_text()), folder


@pytest.mark.slow
def test_hta_splits_iterations_and_diffs_two_of_them(traced):
    report, folder = traced
    raw = json.loads((folder / "t.json").read_text())
    steps = sorted(e["name"] for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert steps == [f"ProfilerStep#{r}" for r in range(REPEATS)]

    analysis = TraceAnalysis(trace_dir=str(folder))
    # HTA leaves out the last step (it may be cut short), as for torch.profiler's own traces
    assert analysis.t.get_iterations(0) == list(range(REPEATS - 1))
    trace = analysis.t.get_trace(0)
    names = analysis.t.symbol_table.get_sym_table()
    ours = trace[[str(names[i]).startswith("rk#") for i in trace["name"]]]
    # the `bytes` column is HTA's own (memory copies); the counts no longer land in it
    assert (ours["bytes"] <= 0).all()

    # per-iteration analysis: the ops of iteration 0 against those of iteration 1
    diff = TraceDiff.compare_traces(LabeledTrace("first", t=analysis.t), LabeledTrace("second", t=analysis.t),
                                    control_iteration=0, test_iteration=1, device_type=DeviceType.CPU)
    counted = diff[[name.startswith("rk#") for name in diff.index]]
    expected = {f"rk#{op['index']} {op['name']}" for op in report["ops"]}
    assert set(counted.index) == expected  # every op of the report, by its index, and nothing else
    assert (counted["first_counts"] == 1).all() and (counted["second_counts"] == 1).all()
    assert (counted["diff_counts"] == 0).all()
    # HTA's iteration 0 holds the op ranges that lie inside ProfilerStep#0 in the raw trace, and the
    # raw ranges of all steps average to the report's measured op time
    step_spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in raw["traceEvents"]
                  if str(e.get("name", "")).startswith("ProfilerStep#")}
    per_step = {name: 0.0 for name in step_spans}
    for e in raw["traceEvents"]:
        if str(e.get("name", "")).startswith("rk#"):
            name = next(n for n, (a, b) in step_spans.items() if a <= e["ts"] <= b)
            per_step[name] += e["dur"]
    slack = 2 * len(expected)  # us: HTA rounds each event's start and end to whole microseconds
    assert counted["first_total_duration"].sum() == pytest.approx(per_step["ProfilerStep#0"], abs=slack)
    assert counted["second_total_duration"].sum() == pytest.approx(per_step["ProfilerStep#1"], abs=slack)
    assert sum(per_step.values()) / REPEATS == pytest.approx(report["totals"]["measured"]["op_time_s"] * 1e6,
                                                             rel=1e-3)
