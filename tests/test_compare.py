"""`compare`: two reports side by side; the cache ratio is what the formulas give."""

from __future__ import annotations

import json

import pytest

from rooflinekit.analyses.compare import compare, ratio
from rooflinekit.core.report import Report
from tests.conftest import EXAMPLES, one_line_error

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"

GQA_CACHE = 2 * 8 * 128 * 2  # K and V, H_kv=8 heads of d=128, bf16: 4096 B per token per layer
MLA_CACHE = (512 + 64) * 2  # latent + rope key, bf16: 1152 B per token per layer


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    folder = tmp_path_factory.mktemp("cmp")
    paths = {}
    for name, model in (("gqa", GQA), ("mla", MLA)):
        paths[name] = folder / f"{name}.json"
        result = CliRunner().invoke(cli, ["profile", str(model), "-O", "layers=2", "--context", "4096", "-b", "4",
                                          "-f", "json", "-o", str(paths[name])])
        assert result.exit_code == 0, result.stderr
    return paths


def _row(data, section, key):
    return next(r for r in data["rows"] if r["section"] == section and r["key"] == key)


def test_cache_bytes_ratio_per_token_per_layer(reports):
    a, b = (Report.from_dict(json.loads(reports[k].read_text())) for k in ("gqa", "mla"))
    data = compare(a, b)
    per_layer = _row(data, "attention", "cache_bytes_per_token_per_layer")
    assert (per_layer["a"], per_layer["b"]) == (GQA_CACHE, MLA_CACHE)
    assert per_layer["ratio"] == pytest.approx(GQA_CACHE / MLA_CACHE) == pytest.approx(3.556, abs=1e-3)
    total = _row(data, "attention", "cache_bytes_per_token")
    assert (total["a"], total["b"]) == (2 * GQA_CACHE, 2 * MLA_CACHE)
    layers = [r for r in data["rows"] if r["section"] == "attention layer" and r["key"] == "cache_bytes_per_token"]
    assert len(layers) == 2 and all(r["ratio"] == pytest.approx(GQA_CACHE / MLA_CACHE) for r in layers)
    # the architecture-minimum KV bytes scale the same way: batch and context are equal
    assert _row(data, "step", "kv_bytes_min")["ratio"] == pytest.approx(GQA_CACHE / MLA_CACHE)


def test_compare_command_table_and_json(invoke, reports, tmp_path):
    table = invoke("compare", reports["gqa"], reports["mla"])
    assert table.exit_code == 0, table.stderr
    assert "3.556" in table.stdout and "Attention per layer" in table.stdout
    out = tmp_path / "c.json"
    result = invoke("compare", reports["gqa"], reports["mla"], "-f", "json", "-o", out)
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["ratio"] == "A/B" and data["a"]["model"] == "llama_gqa" and data["b"]["model"] == "deepseek_mla"


def test_a_report_against_itself(reports):
    a = Report.from_dict(json.loads(reports["gqa"].read_text()))
    data = compare(a, a)
    numeric = [r for r in data["rows"] if r["ratio"] is not None]
    assert numeric and all(r["ratio"] == pytest.approx(1.0) for r in numeric)
    assert any(r["section"] == "module" for r in data["rows"]) and not data["notes"]


def test_ratio_edge_cases():
    assert ratio(1, 0) is None and ratio(None, 2) is None and ratio("x", 1) is None and ratio(3, 2) == 1.5


@pytest.mark.parametrize("content,needles", [
    (None, ["not found"]),
    ("not json at all", ["invalid JSON"]),
    ('{"schema_version": "1.0"}', ["not a rooflinekit report"]),
    ('{"schema_version": "1.0", "kind": "sweep", "points": [], "hardware": {}}', ["takes two profile reports", "got a sweep report"]),
    ('{"schema_version": "1.0", "totals": {"flops": 1}, "modules": [], "attention": [], "workload": {}}',
     ["totals.intensity", "hardware (an object)", "workload.phase", "attention_totals (an object)"]),
    ('{"schema_version": "4.1", "kind": "profile"}', ["schema_version '4.1'", "schema 1.x"]),
])
def test_compare_bad_input(invoke, reports, tmp_path, content, needles):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    one_line_error(invoke("compare", reports["gqa"], bad), *needles)


def test_compare_report_with_a_bad_module_row(invoke, reports, tmp_path):
    report = json.loads(reports["mla"].read_text())
    del report["modules"][1]["bytes"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(report))
    one_line_error(invoke("compare", reports["gqa"], bad), "modules[1].bytes")
    report["kind"] = "profile"  # a report that says its kind is read the same way
    del report["modules"][1]
    bad.write_text(json.dumps(report))
    assert invoke("compare", reports["gqa"], bad).exit_code == 0


def test_a_step_that_does_not_fit_reads_back(invoke, tmp_path):
    """memory.headroom_bytes is negative when the step does not fit: compare and plot still read
    the report (a signed field, not a corrupt count)."""
    out = tmp_path / "short.json"
    made = invoke("profile", GQA, "-O", "layers=1", "--memory-fraction", "0.01", "-f", "json", "-o", out)
    assert made.exit_code == 0, made.stderr
    memory = json.loads(out.read_text())["memory"]
    assert memory["fits"] is False and memory["headroom_bytes"] == pytest.approx(
        (memory["capacity_bytes"] - memory["reserve_bytes"]) * 0.01 - memory["total_bytes"], rel=1e-9)
    assert memory["headroom_bytes"] < 0
    result = invoke("compare", out, out, "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert all(r["ratio"] in (None, 1.0) for r in json.loads(result.stdout)["rows"])
