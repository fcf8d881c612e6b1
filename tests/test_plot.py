"""Roofline charts: files that open, as many points as the report has, Agg backend, clear errors."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from rooflinekit.errors import UserError
from rooflinekit.plot import MISSING, chart_for, write_plot
from tests.conftest import EXAMPLES, run_profile

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def mla_report():
    return run_profile(MLA, batch=16, context=4096, layers=2)


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory):
    from click.testing import CliRunner

    from rooflinekit.cli import cli

    out = tmp_path_factory.mktemp("sweep") / "s.json"
    result = CliRunner().invoke(cli, ["sweep", str(GQA), "-O", "layers=1", "-b", "1,4,16", "-s", "256,1024",
                                      "-f", "json", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    return out


def _weights_dominated(report):
    """Expected module points: modules with >= half their bytes in weights, repeated layers merged."""
    names = {re.sub(r"\.\d+(?=\.|$)", ".*", m["name"]) for m in report["modules"]
             if m["bytes"] and m["weight_bytes"] >= 0.5 * m["bytes"]}
    return len(names)


def test_png_profile_chart(tmp_path, mla_report):
    out = tmp_path / "r.png"
    n = write_plot(mla_report, str(out))
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    # whole step + attention (minimum, executed) + weights-dominated modules (ffn x2 -> 1, head)
    assert n == 1 + 2 + _weights_dominated(mla_report)
    assert _weights_dominated(mla_report) >= 2
    assert not list(tmp_path.glob(".r.png.*"))  # no temp file left behind


def test_agg_backend_is_used(tmp_path, mla_report):
    import matplotlib

    write_plot(mla_report, str(tmp_path / "r.png"))
    if "matplotlib.pyplot" not in sys.modules:
        assert matplotlib.get_backend().lower() == "agg"


def test_svg_is_xml(tmp_path, mla_report):
    out = tmp_path / "r.svg"
    write_plot(mla_report, str(out))
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    text = out.read_text()
    assert "H800 SXM5" in text or "H800" in text  # title carries the hardware name


def test_plot_depth_counts_modules(tmp_path, mla_report):
    depth = 2
    groups = {}
    for op in mla_report["ops"]:
        name = op["module"] if op["module"] == "(root)" else ".".join(op["module"].split(".")[:depth])
        name = re.sub(r"\.\d+(?=\.|$)", ".*", name)
        f, b = groups.get(name, (0.0, 0.0))
        groups[name] = (f + op["flops"], b + op["bytes_read"] + op["bytes_written"])
    expected = sum(1 for f, b in groups.values() if f > 0 and b > 0)
    n = write_plot(mla_report, str(tmp_path / "d.png"), depth=depth)
    assert n == 3 + expected


def test_sweep_chart_series(tmp_path, sweep_report):
    data = json.loads(sweep_report.read_text())
    chart = chart_for(data)
    assert chart.points == 3 * len(data["points"])  # step, attention min, attention executed per point
    labels = [s.label for s in chart.series]
    assert "step, S=256" in labels and "step, S=1024" in labels
    assert all(s.joined for s in chart.series)
    out = tmp_path / "s.png"
    assert write_plot(data, str(out)) == chart.points
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_plot_command(invoke, tmp_path, sweep_report):
    out = tmp_path / "c.svg"
    result = invoke("plot", sweep_report, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "(18 points)" in result.stderr and out.read_text().lstrip().startswith("<?xml")


def test_profile_plot_option(invoke, tmp_path):
    out = tmp_path / "p.png"
    result = invoke("profile", GQA, "-O", "layers=1", "--context", "128", "--plot", out, "-f", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    assert f"({1 + 2 + _weights_dominated(report)} points)" in result.stderr


def test_missing_matplotlib(monkeypatch, tmp_path, mla_report, invoke):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match="matplotlib is not installed"):
        write_plot(mla_report, str(tmp_path / "x.png"))
    result = invoke("profile", GQA, "-O", "layers=1", "--plot", tmp_path / "x.png")
    assert result.exit_code != 0 and result.stderr.strip() == f"rooflinekit: error: {MISSING}"
    assert not (tmp_path / "x.png").exists()


def _one_line(result, needle):
    assert result.exit_code != 0
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("rooflinekit: error: "), result.stderr
    assert needle in lines[0] and "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("content,needle", [
    (None, "not found"),
    ("{ not json", "invalid JSON"),
    ('{"a": 1}', "not a rooflinekit report"),
    ("[1, 2]", "not a rooflinekit report"),
])
def test_plot_bad_input(invoke, tmp_path, content, needle):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    _one_line(invoke("plot", path, "-o", tmp_path / "x.png"), needle)
    assert not (tmp_path / "x.png").exists()


def test_plot_bad_suffix(invoke, tmp_path, sweep_report):
    _one_line(invoke("plot", sweep_report, "-o", tmp_path / "x.pdf"), ".png or .svg")
