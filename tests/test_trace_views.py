"""`rooflinekit trace -o FILE.html` and `--plot`: every kernel with counted FLOPs a point at its
achieved FLOP/s, sized by its share of the GPU time; the text keeps the first rows of each table."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from rooflinekit.cli.main import cli
from rooflinekit.trace.analyse import analyse
from rooflinekit.trace.views import short_name, trace_payload
from tests.conftest import ROOT

TRACE = ROOT / "tests" / "data" / "traces" / "v100_training_steps_1012_1013.json.gz"


def _payload(html: str) -> dict:
    text = re.search(r'<script id="rk-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    return json.loads(text)


def test_every_kernel_with_counted_flops_is_a_point_at_its_achieved_rate(tmp_path):
    out = tmp_path / "t.html"
    result = CliRunner().invoke(cli, ["trace", str(TRACE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = _payload(out.read_text())
    assert data["kind"] == "trace"
    report = analyse(str(TRACE), top=None)
    rows = [r for r in report.ranks[0].kernels if r.rates.intensity and r.rates.flops_per_s]
    (points,) = [s["points"] for s in data["chart"]["series"]]
    assert len(points) == len(rows) and len(report.ranks[0].kernels) > 15  # every one, not the text's first 15
    total = report.ranks[0].total.kernel_time_s
    for p, r in zip(points, rows, strict=True):
        assert p["y"] == pytest.approx(r.rates.flops / r.rates.counted_time_s, rel=1e-5)  # FLOPs over their time (the page keeps 6 digits)
        assert p["s"] == pytest.approx(r.rates.time_s / total, rel=1e-5)
    peaks = {roof["peak"] for roof in data["chart"]["roofs"]}
    assert peaks == {v for k, v in report.peaks.items() if k != "fp64"}
    assert max(p["y"] for p in points) < max(peaks)


def test_the_text_keeps_the_first_rows_and_the_page_all(tmp_path):
    page = trace_payload(analyse(str(TRACE), top=None))
    kernels = [t for t in page["tables"] if t["id"] == "kernels"][0]
    text = CliRunner().invoke(cli, ["trace", str(TRACE), "-f", "json"])
    data = json.loads(text.stdout)
    assert len(data["ranks"][0]["kernels"]) == 15 < len(kernels["rows"])


def test_plot_writes_a_chart_and_refuses_a_report_format(tmp_path):
    png = tmp_path / "t.png"
    result = CliRunner().invoke(cli, ["trace", str(TRACE), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = CliRunner().invoke(cli, ["trace", str(TRACE), "--plot", str(tmp_path / "t.json")])
    assert bad.exit_code != 0 and "Traceback" not in bad.output and not (tmp_path / "t.json").exists()


def test_short_names_drop_templates_and_parameters():
    assert short_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
                      "(int, at::detail::Array<char*, 3>)") == "vectorized_elementwise_kernel"
    assert short_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"
    assert short_name("volta_sgemm_128x64_nn") == "volta_sgemm_128x64_nn"


def test_the_api_returns_the_report_with_its_notebook_view():
    import rooflinekit

    report = rooflinekit.trace(str(TRACE))
    assert repr(report).startswith("<rooflinekit trace v100_training_steps_1012_1013.json.gz on V100 SXM2 16GB")
    assert str(report).startswith("trace: ") and max(len(line) for line in str(report).splitlines()) <= 100
    html = report._repr_html_()
    assert "<svg" in html and "GPU time per step" in html and "volta_sgemm" in html
    assert report.to_dict()["kind"] == "trace"
