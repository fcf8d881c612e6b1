"""Roofline charts: files that open, as many points as the report has, Agg backend, clear errors."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from rooflinekit.core.errors import UserError
from rooflinekit.core.report import ModuleRow
from rooflinekit.outputs.chart_data import chart_for, module_points
from rooflinekit.outputs.plot import MISSING, placed, write_plot
from tests.conftest import EXAMPLES, one_line_error, profile_dict

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def mla_report():
    return profile_dict(MLA, batch=16, context=4096, layers=2)


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
    # a process with no matplotlib loaded, another backend asked for in the environment: the chart uses Agg
    import os

    from tests import warm_python
    from tests.conftest import ROOT

    report = tmp_path / "r.json"
    report.write_text(json.dumps(mla_report))
    code = ("import json, sys, matplotlib; from rooflinekit.outputs.plot import write_plot; "
            f"write_plot(json.load(open({str(report)!r})), {str(tmp_path / 'r.png')!r}); "
            "print(matplotlib.get_backend().lower(), 'matplotlib.pyplot' in sys.modules)")
    done = warm_python.run(["-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
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
    report = profile_dict(tmp_path / "mixed.py", batch=4, context=1)
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
    ('{"schema_version": "4.0", "kind": "profile", "totals": {}, "modules": []}', ["schema_version '4.0'"]),
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


# ----------------------------------------------------------------------------------------------
# Charts worth looking at: no overlapping labels, TFLOP/s, marker area by share, measured points
# under their roof, op-level charts, one colour per context, the advise chart
# ----------------------------------------------------------------------------------------------


def _text_boxes(fig):
    """Every text drawn inside the axes (labels, not tick labels or titles), as display boxes."""
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes for t in ax.texts if t.get_text()]


def _assert_no_overlap(fig):
    boxes = _text_boxes(fig)
    assert boxes
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            overlap = ba.x0 < bb.x1 and bb.x0 < ba.x1 and ba.y0 < bb.y1 and bb.y0 < ba.y1
            assert not overlap, f"labels overlap: {a!r} {tuple(ba.bounds)} and {b!r} {tuple(bb.bounds)}"


def _sweep_with_contexts(n_contexts, batches=(1, 2, 4, 8, 16, 32)):
    """A synthetic sweep dict: the step's intensity rises with batch, attention's stays."""
    points = []
    for j in range(n_contexts):
        for b in batches:
            points.append({"batch": b, "context": 1024 * 2 ** j, "intensity": 30 * b / (b + 4 * (j + 1)),
                           "attention": {"recognised": 2, "intensity_min": 4.0 + j, "intensity_executed": 3.5 + j}})
    hw = {"name": "H800 SXM5", "dtype": "bf16", "peak_flops": 989.4e12, "bandwidth": 3.35e12, "ridge": 295.3,
          "peaks": {"bf16": 989.4e12, "fp8": 1978.9e12}}
    return {"kind": "sweep", "hardware": hw, "points": points, "model": {"name": "synthetic"},
            "workload": {"phase": "decode", "dtype": "bf16", "batches": list(batches),
                         "contexts": [1024 * 2 ** j for j in range(n_contexts)]}}


@pytest.fixture(scope="module")
def readme_report():
    """The README's example: every point at about 4 FLOP/B, where labels used to print over each other."""
    return profile_dict(GQA, batch=4, context=32768)


def test_no_two_labels_overlap(mla_report, readme_report, sweep_report):
    from rooflinekit.outputs.plot import figure

    charts = [chart_for(readme_report), chart_for(mla_report), chart_for(mla_report, 2),
              chart_for(readme_report, ops=True), chart_for(json.loads(sweep_report.read_text())),
              chart_for(_sweep_with_contexts(5))]
    for chart in charts:
        fig = figure(chart)
        _assert_no_overlap(fig)
        assert chart.left_out == []  # and every label found a place
        labels = "\n".join(text for text, _ in _text_boxes(fig))
        for s in chart.series:  # every point (or series) is named somewhere on the chart
            if s.joined:
                assert (s.tag or s.label) in labels
            else:
                for _, name in s.points[: s.labelled]:
                    assert name in labels


def test_y_axis_in_tflops_and_roof_at_the_peak(readme_report):
    from rooflinekit.outputs.plot import figure

    fig = figure(chart_for(readme_report))
    ax = fig.axes[0]
    assert "TFLOP/s" in ax.get_ylabel()
    roof = ax.lines[0]  # the report dtype's roofline, drawn first
    assert max(roof.get_ydata()) == pytest.approx(989.4, rel=1e-9)  # H800 bf16 dense: 989.4 TFLOP/s
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert "1000" in ticks and not any("e" in t or "^" in t for t in ticks)


def _drawn(ax):
    """(x, y) -> marker area of every single-point scatter of the axes."""
    out = {}
    for c in ax.collections:
        offsets = c.get_offsets()
        if len(offsets) == 1:
            out[(float(offsets[0][0]), float(offsets[0][1]))] = float(c.get_sizes()[0])
    return out


def _at(drawn, x, y):
    """The marker area drawn at (x, y), within 1e-9 relative; None if no marker is there."""
    return next((v for (px, py), v in drawn.items() if px == pytest.approx(x, rel=1e-9)
                 and py == pytest.approx(y, rel=1e-9)), None)


def test_marker_area_is_proportional_to_the_share_of_step_time(mla_report):
    from rooflinekit.outputs.plot import AREA_FULL, AREA_MIN, figure

    chart = chart_for(mla_report)
    drawn = _drawn(figure(chart).axes[0])
    predicted = mla_report["totals"]["predicted_step_s"]
    ffn = [m for m in mla_report["modules"] if m["name"].endswith(".ffn")]
    share = sum(m["time_bound_ops_s"] for m in ffn) / predicted  # both layers, by hand
    x = sum(m["flops"] for m in ffn) / sum(m["bytes"] for m in ffn)
    y = min(989.4e12, x * 3.35e12) / 1e12
    assert _at(drawn, x, y) == pytest.approx(max(AREA_MIN, AREA_FULL * share), rel=1e-9)
    step = mla_report["totals"]["intensity"]
    assert _at(drawn, step, min(989.4e12, step * 3.35e12) / 1e12) == pytest.approx(AREA_FULL)  # all its time


def test_measured_points_sit_at_their_achieved_rate_joined_to_their_bound():
    from rooflinekit.analyses.profile import ReportOptions, run_profile
    from rooflinekit.core.request import Deployment, Workload
    from rooflinekit.outputs.plot import figure
    from rooflinekit.stages.model_source import load_source

    options = {"layers": 2, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512,
               "vocab": 1000}
    workload = Workload("decode", 2, 64, "fp32", "cpu", tuple(sorted(options.items())))
    measured = run_profile(load_source(str(GQA), options), workload, Deployment("H800"),
                       options=ReportOptions(measure=True, warmup=1, repeats=2)).report.to_dict()
    chart = chart_for(measured)
    assert chart.measured
    ax = figure(chart).axes[0]
    peak, bw = measured["hardware"]["peak_flops"], measured["hardware"]["bandwidth"]
    lines = [(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.lines]
    mlp = [m for m in measured["modules"] if m["name"].endswith(".mlp")]
    flops, nbytes = sum(m["flops"] for m in mlp), sum(m["bytes"] for m in mlp)
    seconds_ = sum(m["measured"]["time_s"] for m in mlp)
    x, y = flops / nbytes, flops / seconds_ / 1e12  # achieved TFLOP/s, by hand
    assert y < min(peak, x * bw) / 1e12  # under the roof
    assert _at(_drawn(ax), x, y) is not None
    joined = [ys for xs, ys in lines if len(xs) == 2 and xs[0] == xs[1] == pytest.approx(x)]
    assert any(ys[0] == pytest.approx(y) and ys[1] == pytest.approx(min(peak, x * bw) / 1e12) for ys in joined)


def test_op_level_chart(invoke, tmp_path, readme_report):
    chart = chart_for(readme_report, ops=True)
    ops = [p for s in chart.series if s.kind == "op" for p in s.points]
    # examples/llama_gqa.py, 2 layers: q, k, v, o, gate, up, down per layer (equal in both layers:
    # 7 points), lm_head, and the attention call of both layers (1 point)
    assert len(ops) == 7 + 1 + 1
    assert chart.points == 1 + 2 + 9
    labels = dict((label, x) for x, label in ops)
    # the head: 2*B*d*V FLOPs over its weight 2*d*V plus B rows in (2d) and out (2V), bf16
    b, d, v = 4, 4096, 32000
    assert labels["aten.mm in lm_head"] == pytest.approx(2 * b * d * v / (2 * d * v + b * (2 * d + 2 * v)))
    report = tmp_path / "r.json"
    report.write_text(json.dumps(readme_report))
    result = invoke("plot", report, "--plot-ops", "-o", tmp_path / "ops.png")
    assert result.exit_code == 0, result.stderr
    assert "(12 points)" in result.stderr and (tmp_path / "ops.png").read_bytes()[:8] == PNG_SIGNATURE


def test_sweep_colours_per_context_batch_ticks_and_one_label_per_series():
    from rooflinekit.outputs.plot import figure

    data = _sweep_with_contexts(3, batches=(1, 4, 16, 48))
    chart = chart_for(data)
    colours = {}
    for s in chart.series:
        context = s.label.rsplit("S=", 1)[1]
        colours.setdefault(context, set()).add(s.colour)
    assert all(len(c) == 1 for c in colours.values())  # one colour per context, whatever the kind
    assert len({next(iter(c)) for c in colours.values()}) == 3  # and a different one per context
    fig = figure(chart)
    assert list(fig.axes[1].get_xticks()) == [1, 4, 16, 48]
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["1", "4", "16", "48"]
    texts = [line for t in fig.axes[0].texts for line in t.get_text().splitlines()]
    for s in chart.series:
        assert texts.count(s.tag) == 1  # one label per series, not one per point
    assert not any(t.startswith("B=") for t in texts)


def test_advice_chart_moves_from_the_current_step(tmp_path):
    from rooflinekit.outputs.advice_plot import advice_figure, moves, write_advice_plot

    base = {"lever": "baseline", "predicted_step_s": 4e-4, "tokens_per_s": 1e4, "speedup": 1.0, "binding": "memory",
            "fits": True, "tokens": 4}
    levers = [dict(base, lever="fp8 weights", predicted_step_s=2.5e-4, tokens_per_s=4 / 2.5e-4, speedup=1.6),
              dict(base, lever="batch 64", predicted_step_s=1.2e-3, tokens_per_s=64 / 1.2e-3, speedup=5.33),
              dict(base, lever="TP 8", predicted_step_s=6e-5, tokens_per_s=4 / 6e-5, speedup=6.67,
                   binding="communication"),
              dict(base, lever="batch 4096", predicted_step_s=0.05, tokens_per_s=4096 / 0.05, speedup=8.2,
                   binding="capacity", fits=False),
              dict(base, lever="broken", predicted_step_s=0.0, tokens_per_s=None, speedup=None)]
    advice = {"kind": "advise", "baseline": base, "levers": levers, "model": {"name": "m"},
              "hardware": {"name": "H800 SXM5"}, "workload": {"phase": "decode", "batch": 4, "context": 4096,
                                                              "dtype": "bf16"}}
    _, drawn, left = moves(advice)
    assert [lv["lever"] for lv in drawn] == ["fp8 weights", "batch 64", "TP 8", "batch 4096"] and left == ["broken"]
    fig = advice_figure(advice)
    ax = fig.axes[0]
    _assert_no_overlap(fig)
    assert len(ax.patches) == 4  # one arrow per lever drawn
    for arrow, lever in zip(ax.patches, drawn, strict=True):
        (x0, y0), (x1, y1) = arrow._posA_posB
        assert (x0, y0) == (pytest.approx(0.4), pytest.approx(1e4))  # from the step now (ms, tokens/s)
        assert (x1, y1) == (pytest.approx(lever["predicted_step_s"] * 1e3), pytest.approx(lever["tokens_per_s"]))
    out = tmp_path / "a.png"
    assert write_advice_plot(advice, str(out)) == 4 and out.read_bytes()[:8] == PNG_SIGNATURE
