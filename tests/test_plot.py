"""Roofline charts: files that open, as many points as the report has, Agg backend, clear errors."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from rooflinekit.core.errors import UserError
from rooflinekit.core.report import ModuleRow
from rooflinekit.outputs.plot import MISSING, chart_for, module_points, placed, write_plot
from tests.conftest import EXAMPLES, one_line_error, run_profile

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def mla_report():
    return run_profile(MLA, batch=16, context=4096, layers=2)


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory):
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    out = tmp_path_factory.mktemp("sweep") / "s.json"
    result = CliRunner().invoke(cli, ["sweep", str(GQA), "-O", "layers=1", "-b", "1,4,16", "-s", "256,1024",
                                      "-f", "json", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    return out


# examples/deepseek_mla.py defaults: hidden 7168, MLP 18432
MLA_HIDDEN, MLA_INTER = 7168, 18432


def _ffn_intensity(batch, d=MLA_HIDDEN, i=MLA_INTER):
    """One SwiGLU MLP in bf16, decode: w1, w3 [d -> i], w2 [i -> d] each 2*B*d*i FLOPs; bytes: the three
    weights once (6*d*i), and per sequence w1 and w3 read 2d and write 2i, w2 reads 2i and writes 2d,
    silu reads and writes 2i, the product reads 4i and writes 2i: 6d + 16i."""
    return 6 * batch * d * i / (6 * d * i + batch * (6 * d + 16 * i))


def test_png_profile_chart(tmp_path, mla_report):
    out = tmp_path / "r.png"
    n = write_plot(mla_report, str(out))
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    # at B=16, S=4096 the weights-dominated modules are the MLPs (two equal layers, one point) and the
    # head; attention's own bytes are mostly its cache
    chart = chart_for(mla_report)
    modules = dict((label, x) for s in chart.series if s.kind == "module" for x, label in s.points)
    assert set(modules) == {"layers.*.ffn (x2)", "head"}
    assert modules["layers.*.ffn (x2)"] == pytest.approx(_ffn_intensity(16), rel=1e-12)
    assert n == chart.points == 1 + 2 + 2  # whole step, attention (minimum, executed), two modules
    assert not list(tmp_path.glob(".r.png.*"))  # no temp file left behind


def test_agg_backend_is_used(tmp_path, mla_report):
    # a fresh interpreter, with another backend asked for in the environment: the chart still uses Agg
    import os
    import subprocess

    from tests.conftest import ROOT

    report = tmp_path / "r.json"
    report.write_text(json.dumps(mla_report))
    code = ("import json, sys, matplotlib; from rooflinekit.outputs.plot import write_plot; "
            f"write_plot(json.load(open({str(report)!r})), {str(tmp_path / 'r.png')!r}); "
            "print(matplotlib.get_backend().lower(), 'matplotlib.pyplot' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, MPLBACKEND="svg"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["agg", "False"]
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG_SIGNATURE


def test_svg_is_xml(tmp_path, mla_report):
    out = tmp_path / "r.svg"
    write_plot(mla_report, str(out))
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    assert "H800 SXM5" in out.read_text()  # title carries the hardware name


def test_plot_depth_points_and_skipped(invoke, tmp_path, mla_report):
    chart = chart_for(mla_report, 2)
    modules = dict((label, x) for s in chart.series if s.kind == "module" for x, label in s.points)
    # depth 2: each decoder layer whole (equal, merged) and the head; the embedding, the rotary tables at
    # the root and the final norm have no FLOP-counted op and cannot be placed
    assert set(modules) == {"layers.* (x2)", "head"}
    vocab = 129280
    # head: 2*B*d*V FLOPs over its weight (2*d*V) plus per sequence 2d read and 2V written
    assert modules["head"] == pytest.approx(2 * 16 * MLA_HIDDEN * vocab
                                            / (2 * MLA_HIDDEN * vocab + 16 * (2 * MLA_HIDDEN + 2 * vocab)))
    assert chart.skipped == ["embed", "(root)", "norm"]
    report = tmp_path / "r.json"
    report.write_text(json.dumps(mla_report))
    result = invoke("plot", report, "--plot-depth", "2", "-o", tmp_path / "d.png")
    assert result.exit_code == 0, result.stderr
    assert "3 points not plotted (no FLOPs or no bytes): embed, (root), norm" in result.stderr
    assert "(5 points)" in result.stderr


def test_layers_merge_only_when_equal():
    def module(name, flops, nbytes, weights):
        return ModuleRow(flops=flops, bytes=nbytes, intensity=flops / nbytes, attainable_flops=0.0,
                         bound="memory", time_bound_s=0.0, mfu_bound=0.0, dtype="bf16", name=name,
                         weight_bytes=weights)

    dense = [module(f"layers.{i}.mlp", 100.0, 10.0, 8.0) for i in range(3)]      # I = 10
    moe = [module(f"layers.{i}.mlp", 300.0, 20.0, 15.0) for i in range(3, 5)]    # I = 15
    head = module("head", 50.0, 25.0, 20.0)                                       # I = 2
    points, skipped = module_points(SimpleNamespace(modules=[*dense, *moe, head]))
    assert sorted(points) == [(2.0, "head"), (10.0, "layers.0-2.mlp (x3)"), (15.0, "layers.3-4.mlp (x2)")]
    assert skipped == []
    # equal within 1e-9: one point; and an interleaved pattern keeps its runs
    same = [module(f"layers.{i}.mlp", 100.0 * (1 + 1e-12 * i), 10.0, 8.0) for i in range(4)]
    assert module_points(SimpleNamespace(modules=same))[0] == [(pytest.approx(10.0), "layers.*.mlp (x4)")]
    mixed = [module(f"layers.{i}.mlp", 100.0 if i % 2 else 200.0, 10.0, 8.0) for i in range(4)]
    assert sorted(module_points(SimpleNamespace(modules=mixed))[0]) == [(10.0, "layers.1,3.mlp (x2)"),
                                                            (20.0, "layers.0,2.mlp (x2)")]


def test_dense_and_moe_layers_are_separate_points(tmp_path):
    """A real model with two kinds of layer under one name: each point is a real layer's intensity."""
    (tmp_path / "mixed.py").write_text(MIXED)
    report = run_profile(tmp_path / "mixed.py", batch=4, context=1)
    points = {label: x for s in chart_for(report).series if s.kind == "module" for x, label in s.points}
    h, wide, narrow, b = 256, 1024, 512, 4

    def linear(n_in, n_out):  # bf16, decode: 2*B*in*out FLOPs; weight once, B rows in and out
        return 2 * b * n_in * n_out / (2 * n_in * n_out + b * 2 * (n_in + n_out))

    assert points == {"layers.0-1.mlp (x2)": pytest.approx(linear(h, narrow), rel=1e-12),
                      "layers.2-4.mlp (x3)": pytest.approx(linear(h, wide), rel=1e-12)}


MIXED = """
from torch import nn
import torch


class Block(nn.Module):
    def __init__(self, hidden, width):
        super().__init__()
        self.mlp = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        self.mlp(x)
        return x


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block(256, 512 if i < 2 else 1024) for i in range(5))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def build_model():
    return Stack()


def make_inputs(batch, context, phase):
    return (torch.zeros(batch, 256),)
"""


def test_sweep_chart_series(tmp_path, sweep_report):
    data = json.loads(sweep_report.read_text())
    chart = chart_for(data)
    assert chart.points == 3 * len(data["points"])  # step, attention min, attention executed per point
    labels = [s.label for s in chart.series]
    assert "step, S=256" in labels and "step, S=1024" in labels
    assert all(s.joined for s in chart.series)
    # GQA attention at its minimum: H*S / (H_kv*S + H) = 4 * 1024/1025.. = H/H_kv within 1%, memory-bound,
    # so drawn at y = I * bandwidth (H800: 3.35 TB/s)
    index = labels.index("attention min, S=1024")
    for x, y in placed(chart)[index]:
        assert x == pytest.approx(32 / 8, rel=0.01)
        assert y == pytest.approx(x * 3.35e12, rel=1e-12) and y < 989.4e12
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
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    # whole step, attention (minimum, executed), and at S=128 three weights-dominated modules:
    # layers.0.self_attn (its projections), layers.0.mlp, lm_head
    assert "(6 points)" in result.stderr


def test_missing_matplotlib(monkeypatch, tmp_path, mla_report, invoke):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match="matplotlib is not installed"):
        write_plot(mla_report, str(tmp_path / "x.png"))
    result = invoke("profile", GQA, "-O", "layers=1", "--plot", tmp_path / "x.png")
    assert result.exit_code != 0 and result.stderr.strip() == f"rooflinekit: error: {MISSING}"
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("content,needles", [
    (None, ["not found"]),
    ("{ not json", ["invalid JSON"]),
    ('{"a": 1}', ["not a rooflinekit report"]),
    ("[1, 2]", ["not a rooflinekit report"]),
    ('{"schema_version": "1.0", "totals": {}, "modules": []}',
     ["not a usable rooflinekit profile report", "totals.intensity", "hardware (an object)"]),
    ('{"schema_version": "3.0", "kind": "profile", "totals": {}, "modules": []}', ["schema_version '3.0'"]),
    ('{"schema_version": "1.0", "kind": "sweep", "points": [{"batch": 1}], "hardware": {"name": "x"}, '
     '"workload": {}}', ["points[0].context", "hardware.peak_flops", "workload.batches"]),
])
def test_plot_bad_input(invoke, tmp_path, content, needles):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    one_line_error(invoke("plot", path, "-o", tmp_path / "x.png"), *needles)
    assert not (tmp_path / "x.png").exists()


def test_plot_incomplete_report(invoke, tmp_path, mla_report):
    report = json.loads(json.dumps(mla_report))
    del report["hardware"]["bandwidth"]
    report["totals"]["intensity"] = "fast"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    one_line_error(invoke("plot", path, "-o", tmp_path / "x.png"), "hardware.bandwidth", "totals.intensity")


def test_plot_bad_suffix(invoke, tmp_path, sweep_report):
    one_line_error(invoke("plot", sweep_report, "-o", tmp_path / "x.pdf"), ".png or .svg")
