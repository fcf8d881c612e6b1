"""Reports in a notebook (issue 26, item 1): the HTML view is tables and an inline SVG roofline, the
repr is one line, DataFrames put the name first and carry units in their column names (the old
names accepted with a DeprecationWarning), and `dir(rooflinekit)` lists the public functions. The
same views for sweep, advice and plan results."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import rooflinekit
from rooflinekit.analyses.plan_options import PlanOptions

ROOT = Path(__file__).resolve().parent.parent
GQA = str(ROOT / "examples" / "llama_gqa.py")


@pytest.fixture(scope="module")
def report():
    return rooflinekit.profile_file(GQA, phase="decode", batch=4, context=32768, hardware="H800", tp=2)


@pytest.fixture(scope="module")
def sweep():
    return rooflinekit.sweep(GQA, batches=[1, 4], contexts=[4096, 32768], hardware="H800")


@pytest.fixture(scope="module")
def advice():
    return rooflinekit.advise(GQA, batch=4, context=32768, hardware="H800")


@pytest.fixture(scope="module")
def plan():
    return rooflinekit.plan(GQA, isl=512, osl=128, tpot=0.002, search=PlanOptions(gpus=2, max_batch=16))


def _tree(html: str) -> ET.Element:
    """The view parsed as XML: well-formed, every text escaped."""
    return ET.fromstring(html)


def _tables(root: ET.Element) -> dict[str, ET.Element]:
    return {t.get("class"): t for t in root.iter("table")}


def _aligned(table: ET.Element, numbers: bool = True) -> None:
    """Each column's header and cells share one alignment: right for numbers, left for text."""
    heads = [th.get("style", "") for th in table.iter("th")]
    for tr in table.find("tbody"):
        styles = [td.get("style", "") for td in tr]
        assert [("text-align:right" in s) for s in styles] == [("text-align:right" in s) for s in heads]
        for td, style in zip(tr, styles, strict=True):
            if numbers and "text-align:right" in style:
                assert re.match(r"^(-|<?[\d.,]+(\s?\S*)?%?|[\d.]+ [kMGTP]?\w*( \(.*\))?)$", td.text or ""), td.text


# -- a profile ---------------------------------------------------------------------------------------------


def test_the_html_view_is_tables_and_an_svg_roofline(report):
    html = report._repr_html_()
    assert not html.startswith("<pre>") and len(html) < 60_000
    root = _tree(html)
    tables = _tables(root)
    assert {"rk-totals", "rk-modules", "rk-attention"} <= set(tables)
    heads = [th.text for th in tables["rk-modules"].iter("th")]
    assert heads == ["module", "FLOPs", "bytes [B]", "FLOP/B", "bound", "time bound", "share", "MFU bound"]
    assert [th.text for th in tables["rk-attention"].iter("th")] == [
        "attention (per layer)", "arch", "H", "H_kv", "d", "cache/tok [B]", "KV min [B]", "KV executed [B]",
        "executed/min", "FLOPs model", "FLOPs executed", "I min [FLOP/B]", "bound"]
    for name, t in tables.items():
        _aligned(t, name != "rk-totals")
    first = next(iter(tables["rk-modules"].find("tbody")))
    assert [td.text for td in first][:2] == ["layers.*.self_attn (x2)", "2.48 G"]
    svg = root.find(".//{http://www.w3.org/2000/svg}svg")
    assert svg is not None
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "arithmetic intensity (FLOP/B, log)" in texts and "attainable FLOP/s (log)" in texts
    kinds = [g.get("data-kind") for g in svg.iter("{http://www.w3.org/2000/svg}g")]
    assert kinds.count("step") == 1 and kinds.count("attention") == 1 and "module" in kinds
    assert "<script" not in html


def test_the_step_point_sits_on_the_roof_where_its_numbers_put_it(report):
    from rooflinekit.outputs.notebook import report_points
    from rooflinekit.outputs.roofline_svg import axes_for

    pts = report_points(report)
    ax = axes_for([p for p in pts], report.hardware.peak_flops, report.hardware.bandwidth)
    step = next(p for p in pts if p.kind == "step")
    svg = _tree(report._repr_html_()).find(".//{http://www.w3.org/2000/svg}svg")
    g = next(g for g in svg.iter("{http://www.w3.org/2000/svg}g") if g.get("data-kind") == "step")
    d = g.find("{http://www.w3.org/2000/svg}path").get("d")
    x, y = (float(v) for v in re.match(r"M([\d.]+) [\d.]+L[\d.]+ ([\d.]+)", d).groups())
    assert x == pytest.approx(ax.x(report.totals.intensity), abs=0.2)
    assert y == pytest.approx(ax.y(report.totals.attainable_flops), abs=0.2)
    assert step.flops == pytest.approx(report.totals.intensity * report.hardware.bandwidth, rel=1e-6)


def test_every_text_is_escaped(report):
    evil = "<script>alert(1)</script>&<b>"
    bad = dataclasses.replace(report, model=dataclasses.replace(report.model, name=evil),
                              notes=[evil], warnings=[evil],
                              modules=[dataclasses.replace(report.modules[0], name=evil), *report.modules[1:]])
    html = bad._repr_html_()
    assert "<script" not in html and "<b>" not in html
    root = _tree(html)
    assert evil in "".join(root.itertext())
    assert evil in repr(bad)


def test_the_repr_is_one_line_and_str_is_the_text_table(report):
    line = repr(report)
    assert line == "<Report llama_gqa decode B=4 S=32768 on H800 SXM5, TP 2: step 331 us bound (memory-bound)>"
    assert str(report).startswith("model: llama_gqa") and "Modules (by time bound)" in str(report)


def test_the_dataframe_puts_the_name_first_with_units_in_the_columns(report):
    pd = pytest.importorskip("pandas")
    frame = report.to_dataframe("modules")
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(report.modules)
    assert frame.columns[0] == "name"
    assert {"flop", "bytes", "flop_per_byte", "attainable_flop_per_s", "time_bound_s"} <= set(frame.columns)
    assert not {"flops", "intensity", "attainable_flops"} & set(frame.columns)
    assert frame["flop"].sum() == pytest.approx(report.totals.flops)
    attention = report.to_dataframe("attention")
    assert attention.columns[0] == "module"
    assert {"flop_model", "flop_per_byte_min", "placement_min.flop_per_byte"} <= set(attention.columns)
    ops = report.to_dataframe("ops")
    assert ops.columns[0] == "name" and (ops["bytes"] == ops["bytes_read"] + ops["bytes_written"]).all()


def test_the_old_column_names_are_accepted_with_a_warning(report):
    pytest.importorskip("pandas")
    with pytest.warns(DeprecationWarning, match="'intensity' \\(now 'flop_per_byte'\\)"):
        old = report.to_dataframe("modules", columns=["name", "intensity", "flops"])
    assert list(old.columns) == ["name", "intensity", "flops"]
    new = report.to_dataframe("modules", columns=["name", "flop_per_byte", "flop"])
    assert (old.to_numpy() == new.to_numpy()).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.to_dataframe("modules", columns=["name", "time_bound_s"])
    with pytest.raises(ValueError, match="no column 'nope'"):
        report.to_dataframe("modules", columns=["nope"])
    with pytest.raises(ValueError, match="no table section"):
        report.to_dataframe("workload")


def test_dir_lists_the_public_functions():
    """In a fresh interpreter: before first use the lazy names are in no module global."""
    code = "import json, rooflinekit; print(json.dumps([dir(rooflinekit), rooflinekit.__all__]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    names, public = json.loads(out.stdout)
    for name in ("profile", "profile_file", "capture", "sweep", "advise", "plan", "Report"):
        assert name in names and name in public


# -- sweep, advice, plan -----------------------------------------------------------------------------------


def test_a_sweep_has_the_views(sweep):
    line = repr(sweep)
    assert "\n" not in line and line.startswith("<SweepReport llama_gqa decode B=1,4 S=4096,32768 on H800 SXM5")
    assert "4 points" in line and len(line) < 300
    root = _tree(sweep._repr_html_())
    assert root.find(".//{http://www.w3.org/2000/svg}svg") is not None
    points = _tables(root)["rk-points"]
    _aligned(points)
    assert [th.text for th in points.iter("th")] == [
        "batch", "context", "FLOPs", "bytes [B]", "FLOP/B", "bound", "predicted step", "tokens/s", "bound MFU",
        "weights", "KV", "other", "attn I min [FLOP/B]", "attn I executed [FLOP/B]", "memory", "fits"]
    pytest.importorskip("pandas")
    frame = sweep.to_dataframe()
    assert list(frame.columns[:2]) == ["batch", "context"] and len(frame) == 4
    assert {"flop", "flop_per_byte", "predicted_step_s"} <= set(frame.columns)
    assert sweep.to_dataframe("critical_batch")["context"].tolist() == [4096, 32768]


def test_advice_has_the_views(advice):
    line = repr(advice)
    assert "\n" not in line and line.startswith("<AdviceReport llama_gqa decode B=4 S=32768 on H800 SXM5")
    assert len(line) < 300
    _aligned(_tables(_tree(advice._repr_html_()))["rk-levers"])
    pytest.importorskip("pandas")
    frame = advice.to_dataframe()
    assert frame.columns[0] == "rank" and frame["rank"].tolist() == list(range(len(advice.levers) + 1))
    assert frame["lever"].iloc[0] == "baseline"


def test_a_plan_has_the_views(plan):
    line = repr(plan)
    assert "\n" not in line and line.startswith("<PlanResult llama_gqa on 2 x H800 SXM5") and len(line) < 300
    assert plan.best_config is not None and plan.best_config.label() in line
    tables = _tables(_tree(plan._repr_html_()))
    _aligned(tables["rk-front"])
    pytest.importorskip("pandas")
    frame = plan.to_dataframe()
    assert frame.columns[0] == "label" and len(frame) == len(plan.configs)
    assert frame["best"].sum() == 1 and frame["pareto"].sum() == len(plan.pareto)
