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


#: A flat efficiency source (no curves, no [experts]): each op's expected time follows by hand.
FLAT = """version = 1
small_gemm_max_rows = 128
[classes.gemm_large]
compute = 0.5
bandwidth = 0.25
[classes.gemm_small]
compute = 0.4
bandwidth = 0.2
[classes.attention_decode]
compute = 0.3
bandwidth = 0.6
[classes.attention_prefill]
compute = 0.35
bandwidth = 0.6
[classes.elementwise]
compute = 0.5
bandwidth = 0.125
[launch]
decode_s = 1e-6
prefill_s = 2e-5
"""


def _by_hand(op, hw: dict, fractions: tuple[float, float]) -> float:
    """One op's kernel at (compute, bandwidth) fractions plus FLAT's prefill launch."""
    peak = hw["peaks"].get(op["dtype"]) or hw["peak_flops"]
    return max(op["flops"] / (fractions[0] * peak),
               (op["bytes_read"] + op["bytes_written"]) / (fractions[1] * hw["bandwidth"])) + 2e-5


def test_each_class_is_priced_with_the_profiles_own_efficiency_source(tmp_path):
    """A profile priced with --efficiency FILE: its ops' expected times are FILE's by hand, and
    compare sums those (not the committed table's)."""
    flat = tmp_path / "flat.toml"
    flat.write_text(FLAT)
    profile_json = tmp_path / "profile.json"
    result = CliRunner().invoke(cli, ["profile", str(EXAMPLES / "llama_gqa.py"), "--phase", "prefill", "-b", "2",
                                      "-s", "16", "--dtype", "fp32", "-H", "H800", "--efficiency", str(flat),
                                      *[a for k, v in OPTIONS.items() for a in ("--option", f"{k}={v}")],
                                      "-f", "json", "-o", str(profile_json)])
    assert result.exit_code == 0, result.output
    data = json.loads(profile_json.read_text())
    hw, ops = data["hardware"], data["ops"]
    mms = [op for op in ops if op["name"] == "aten.mm"]
    # 2 x 16 = 32 rows per product: small GEMMs
    assert mms and all(op["expected_s"] == pytest.approx(_by_hand(op, hw, (0.4, 0.2))) for op in mms)
    norms = [op for op in ops if op["name"] in ("aten.mul", "aten.rsqrt", "aten.pow")]
    assert norms and all(op["expected_s"] == pytest.approx(_by_hand(op, hw, (0.5, 0.125))) for op in norms)
    kernels = [op for op in ops if op["flops"] or op["bytes_read"] + op["bytes_written"]]
    assert sum(op["expected_s"] for op in kernels) == pytest.approx(data["totals"]["expected_step_s"])

    built = build(load_source(str(EXAMPLES / "llama_gqa.py"), OPTIONS), WORKLOAD)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        built.model(**built.inputs)
    prof.export_chrome_trace(str(tmp_path / "cpu.json"))
    assert CliRunner().invoke(cli, ["trace", str(tmp_path / "cpu.json"), "-H", "H800", "-o",
                                    str(tmp_path / "trace.json")]).exit_code == 0
    result = CliRunner().invoke(cli, ["compare", str(profile_json), str(tmp_path / "trace.json"), "-f", "json"])
    assert result.exit_code == 0, result.output
    classes = {c["klass"]: c for c in json.loads(result.stdout)["classes"]}
    assert classes["gemm"]["expected_s"] == pytest.approx(sum(_by_hand(op, hw, (0.4, 0.2)) for op in mms))
    assert not any("older rooflinekit" in n for n in json.loads(result.stdout)["notes"])


def test_an_older_profile_is_repriced_with_the_committed_table_and_says_so(reports, tmp_path):
    profile_json, trace_json, report = reports
    data = json.loads(profile_json.read_text())
    for op in data["ops"]:
        op.pop("expected_s", None)
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data))
    result = CliRunner().invoke(cli, ["compare", str(older), str(trace_json), "-f", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert any("older rooflinekit" in n and "committed Hopper table" in n for n in out["notes"])
    classes = {c["klass"]: c for c in out["classes"]}
    now = json.loads(CliRunner().invoke(cli, ["compare", str(profile_json), str(trace_json), "-f", "json"]).stdout)
    gemm_now = {c["klass"]: c for c in now["classes"]}["gemm"]["expected_s"]
    mms = [op for op in report.ops if op.name == "aten.mm"]
    # this small prefill step is host-bound: the committed table's eager issue, 5 us a kernel, is the
    # whole step, each kernel carrying an equal share of what its work leaves; repriced ops leave it out
    kernels = [op for op in report.ops if op.kind != "collective" and op.flops + op.bytes > 0]
    assert report.totals.expected_step_s == pytest.approx(len(kernels) * 5e-6)
    work = sum(c["expected_s"] for c in out["classes"])
    per = (len(kernels) * 5e-6 - work) / len(kernels)
    assert gemm_now - classes["gemm"]["expected_s"] == pytest.approx(len(mms) * per)
