"""`rooflinekit compare PROFILE.json TRACE.json`: the prediction beside the measurement, kernel
class by kernel class. A CPU trace recorded here of the example GQA model's prefill against
`profile` of the same model and workload: the gemm and attention classes hold the same FLOPs on
both sides (two counts of one forward: the capture's and the recorded shapes'), and each class's
measured time is the trace's. Where torch's CPU SDPA runs its math decomposition (older torch),
the attention products are gemm kernels over every query-key pair, and the test says so."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch.profiler import ProfilerActivity, profile

from rooflinekit.analyses.profile import run_profile as rooflinekit_profile
from rooflinekit.cli.main import cli
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import build, load_source
from tests.conftest import EXAMPLES

OPTIONS = {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "hidden": 64, "intermediate": 128,
           "vocab": 100}
WORKLOAD = Workload("prefill", 2, 16, "fp32", "cpu", tuple(sorted(OPTIONS.items())))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """(profile JSON path, trace JSON path, the profile report) of one model and workload."""
    tmp = tmp_path_factory.mktemp("compare")
    source = load_source(str(EXAMPLES / "llama_gqa.py"), OPTIONS)
    report = rooflinekit_profile(source, WORKLOAD, Deployment("H800")).report
    (tmp / "profile.json").write_text(json.dumps(report.to_dict()))
    built = build(source, WORKLOAD)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        built.model(**built.inputs)
    prof.export_chrome_trace(str(tmp / "cpu.json"))
    result = CliRunner().invoke(cli, ["trace", str(tmp / "cpu.json"), "-H", "H800", "-o", str(tmp / "trace.json")])
    assert result.exit_code == 0, result.output
    return tmp / "profile.json", tmp / "trace.json", report


def test_classes_hold_the_same_flops_on_both_sides(reports):
    profile_json, trace_json, report = reports
    result = CliRunner().invoke(cli, ["compare", str(trace_json), str(profile_json), "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    classes = {c["klass"]: c for c in data["classes"]}
    gemm = sum(op.flops for op in report.ops if op.name == "aten.mm")
    assert classes["gemm"]["flops_predicted"] == gemm
    sdpa = classes["attention"]["flops_predicted"]
    if classes["attention"]["flops_counted"]:
        for klass in ("gemm", "attention"):
            c = classes[klass]
            assert c["flops_predicted"] == c["flops_counted"] > 0
    else:  # torch's CPU SDPA ran its math decomposition: its bmm (every pair) are gemm kernels
        every_pair = 2 * (2 * 2 * 4 * 16 * 16 * 16) * 2  # Q K^T and P V, B 2, 4 heads, 16 tokens, 2 layers
        assert classes["gemm"]["flops_counted"] == gemm + every_pair and every_pair > sdpa > 0
    trace = json.loads(trace_json.read_text())
    by_class = {c["klass"]: c["time_s"] for c in trace["ranks"][0]["total"]["by_class"]}
    for klass, seconds in by_class.items():
        assert classes[klass]["measured_s"] == pytest.approx(seconds)
    assert classes["gemm"]["measured_over_expected"] == pytest.approx(
        classes["gemm"]["measured_s"] / classes["gemm"]["expected_s"])


def test_the_text_fits_100_columns_and_says_what_it_cannot_check(reports):
    profile_json, trace_json, _ = reports
    result = CliRunner().invoke(cli, ["compare", str(profile_json), str(trace_json)])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100
    assert "not checked" in result.output and "meas/exp" in result.output


def test_two_trace_reports_are_refused_in_one_line(reports):
    _, trace_json, _ = reports
    result = CliRunner().invoke(cli, ["compare", str(trace_json), str(trace_json)])
    assert result.exit_code != 0 and "Traceback" not in result.output and "trace report" in result.output
