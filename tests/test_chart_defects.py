"""Issue 26, item 5: chart defects, each checked on the rendered picture.

The PNG charts are measured through matplotlib's renderer (text and marker boxes in display
pixels); the HTML charts through headless Chromium (tests/browser.py), each element's
getBoundingClientRect.
"""

from __future__ import annotations

import json
import math
import re
import time

import pytest

from rooflinekit.outputs.plot import chart_for, figure
from tests.conftest import EXAMPLES, TINY_LLAMA

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"


def _options(opts: dict) -> list[str]:
    return [x for k, v in opts.items() for x in ("-O", f"{k}={v}")]


def _run(*args):
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def gqa_report(tmp_path_factory):
    """The README's example: examples/llama_gqa.py, decode, batch 4, context 32768, on H800."""
    out = tmp_path_factory.mktemp("gqa") / "r.json"
    _run("profile", GQA, "-H", "H800", "--phase", "decode", "-b", "4", "-s", "32768", "-f", "json", "-o", out)
    return json.loads(out.read_text())


def _step_collection(ax):
    """The whole step's marker: the one scatter drawn hollow (no face colour)."""
    hollow = [c for c in ax.collections if len(c.get_offsets()) == 1 and len(c.get_facecolors()) == 0]
    assert len(hollow) == 1, "one hollow marker: the whole step"
    return hollow[0]


def _marker_box(ax, collection):
    """The display box of a one-point scatter: its marker's radius plus half its edge, in pixels."""
    fig = ax.figure
    px, py = ax.transData.transform(collection.get_offsets()[0])
    r = (math.sqrt(collection.get_sizes()[0]) + collection.get_linewidths()[0]) / 2 * fig.dpi / 72
    return px - r, py - r, px + r, py + r


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


# -- item 4: the step's legend handle is drawn as the step is ----------------------------------------


def test_the_legend_draws_the_step_as_the_chart_does(gqa_report):
    fig = figure(chart_for(gqa_report))
    ax = fig.axes[0]
    step = _step_collection(ax)
    handle = next(h for h in fig.legends[0].legend_handles if h.get_label() == "whole step")
    # the chart's ring has no face; the legend's marker neither
    assert handle.get_markerfacecolor() == "none"
    from matplotlib.colors import to_rgba

    edge = tuple(step.get_edgecolors()[0][:3])
    assert to_rgba(handle.get_markeredgecolor())[:3] == pytest.approx(edge)
    assert handle.get_markeredgewidth() == pytest.approx(step.get_linewidths()[0])
    # and every filled marker's handle is filled
    filled = [h for h in fig.legends[0].legend_handles if h.get_label().startswith("attention")]
    assert filled and all(h.get_markerfacecolor() != "none" for h in filled)


# -- item 5: CPU times placed on a GPU's entry -------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_on_h800(tmp_path_factory):
    """A tiny Llama measured on the CPU and placed on H800's entry: JSON, text and chart."""
    folder = tmp_path_factory.mktemp("cpu")
    common = (GQA, *_options(TINY_LLAMA), "-b", "2", "-s", "64", "--device", "cpu", "--measure",
              "--warmup", "0", "--repeats", "1", "-H", "H800")
    _run("profile", *common, "-f", "json", "-o", folder / "r.json")
    text = _run("profile", *common)
    return json.loads((folder / "r.json").read_text()), text.stdout + text.stderr


def test_cpu_times_on_a_gpu_entry_are_warned(cpu_on_h800):
    report, text = cpu_on_h800
    warning = [w for w in report["warnings"] if w.startswith("measured on cpu but placed on H800 SXM5")]
    assert len(warning) == 1, report["warnings"]
    assert "an accelerator's entry" in warning[0] and "rooflinekit calibrate --device cpu" in warning[0]
    assert "measured on cpu but placed on H800 SXM5, an accelerator's entry" in " ".join(text.split())


def test_cpu_times_on_a_gpu_entry_put_a_red_box_on_the_chart(cpu_on_h800):
    report, _ = cpu_on_h800
    fig = figure(chart_for(report))
    boxes = [t for ax in fig.axes for t in ax.texts if t.get_text().startswith("warning: CPU times against")]
    assert len(boxes) == 1
    box = boxes[0]
    assert "H800 SXM5" in box.get_text() and "calibrate" in box.get_text()
    patch = box.get_bbox_patch()
    assert patch is not None and patch.get_edgecolor()[:3] == pytest.approx((0.698, 0.133, 0.133), abs=0.01)
    # drawn inside the plot
    renderer = fig.canvas.get_renderer()
    frame, drawn = fig.axes[0].get_window_extent(renderer), box.get_window_extent(renderer)
    assert frame.x0 <= drawn.x0 and drawn.x1 <= frame.x1 and frame.y0 <= drawn.y0 and drawn.y1 <= frame.y1


# -- the HTML charts, in a browser --------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    from tests.browser import required_browser

    yield from required_browser("the HTML chart tests", 1280, 900)


#: Every marker's and every label's box on the page's chart (getBoundingClientRect, in CSS pixels).
BOXES = """(() => { const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const all = sel => Array.from(document.querySelectorAll(sel));
    return {points: all('#rk-chart path.rk-point').map(p => [p.dataset.series, p.dataset.name, box(p)]),
            labels: all('#rk-chart text.rk-label').map(t => [t.textContent, box(t)]),
            roofs: all('#rk-chart text.rk-roof-label').map(t => [t.textContent, box(t)])}; })()"""


def _page(browser, path):
    browser.clear_events()
    browser.open(path)
    assert browser.console_errors() == []
    return browser.js(BOXES)


#: How long each command a fixture ran took, timed around it (seconds).
COMMAND_S: dict[str, float] = {}


@pytest.fixture(scope="module")
def sweep_page(tmp_path_factory):
    """`rooflinekit sweep examples/llama_gqa.py -b 1,4,16,48 -s 4096,32768 -H H800`, as JSON and HTML."""
    folder = tmp_path_factory.mktemp("sweep")
    args = ("sweep", GQA, "-b", "1,4,16,48", "-s", "4096,32768", "-H", "H800")
    _run(*args, "-f", "json", "-o", folder / "s.json")
    started = time.perf_counter()
    _run(*args, "-o", folder / "s.html")
    COMMAND_S["sweep.html"] = time.perf_counter() - started
    return json.loads((folder / "s.json").read_text()), folder / "s.html"


# -- item 1: the memory roof's label sits on no point ----------------------------------------------------


def test_the_roof_labels_cover_no_point_of_any_selection(browser, sweep_page):
    sweep, page = sweep_page
    _page(browser, page)
    for context in sweep["workload"]["contexts"]:
        for batch in sweep["workload"]["batches"]:
            browser.js(f"window.rooflinekit.select({batch}, {context})")
            drawn = browser.js(BOXES)
            roofs = drawn["roofs"]
            assert any(text == "memory 3.35 TB/s" for text, _ in roofs)
            assert drawn["points"]
            for text, box in roofs:
                for series, name, marker in drawn["points"]:
                    assert not _overlap(box, marker), \
                        f"B={batch}, S={context}: {text!r} {box} covers {series} {name!r} {marker}"
    assert browser.console_errors() == []


def test_the_sweep_png_has_no_label_on_a_marker(sweep_page):
    sweep, _ = sweep_page
    fig = figure(chart_for(sweep))
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:1]:
        markers = [_marker_box(ax, c) for c in ax.collections if len(c.get_offsets()) == 1]
        assert len(markers) == 1 + 3 * len(sweep["points"])  # the ridge, and three kinds per point
        for t in ax.texts:
            box = t.get_window_extent(renderer).extents
            assert not any(_overlap(box, m) for m in markers), t.get_text()


# -- the sweep page's table and tiles ---------------------------------------------------------------------


def test_the_sweep_table_shows_fits_without_scrolling_sideways(browser, sweep_page):
    _, page = sweep_page
    _page(browser, page)
    drawn = browser.js("""(() => { const box = document.querySelector('#rk-table-points .rk-scroll')
            .getBoundingClientRect();
        return {right: box.right, heads: Array.from(document.querySelectorAll('#rk-table-points th'))
            .map(th => [th.textContent.trim(), th.getBoundingClientRect().right])}; })()""")
    fits = [right for text, right in drawn["heads"] if text.startswith("fits")]
    assert len(fits) == 1, drawn["heads"]
    assert fits[0] <= drawn["right"], f"the fits column ends at {fits[0]}, past the table's edge {drawn['right']}"


def test_the_sweep_page_names_its_time_for_what_it_measures(browser, sweep_page):
    """The sweep's own time is not the command's (start-up and the model's import come first): the tile
    says so and is no longer than the command took."""
    _, page = sweep_page
    _page(browser, page)
    tiles = browser.js("""Array.from(document.querySelectorAll('.rk-tile')).map(t =>
        [t.querySelector('.rk-tile-label').textContent, t.querySelector('.rk-tile-value').textContent])""")
    labels = [label for label, _ in tiles]
    assert "wall time" not in labels
    timed = [value for label, value in tiles if label.startswith("analysis time (after start-up and model import)")]
    assert len(timed) == 1, labels
    number, unit = re.fullmatch(r"([\d.]+)\s*(ms|s|µs)", timed[0].strip()).groups()
    shown_s = float(number) * {"s": 1.0, "ms": 1e-3, "µs": 1e-6}[unit]
    assert 0 < shown_s <= COMMAND_S["sweep.html"]


# -- item 2: no label on the step's marker ------------------------------------------------------------


@pytest.fixture(scope="module")
def gqa_batch_one(tmp_path_factory):
    """examples/llama_gqa.py in decode at batch 1, context 4096: lm_head's point sits beside the step's,
    where its label once touched the step's ring (the ring's stroke was not an obstacle)."""
    out = tmp_path_factory.mktemp("gqa1") / "r.json"
    _run("profile", GQA, "-H", "H800", "--phase", "decode", "-b", "1", "-s", "4096", "-f", "json", "-o", out)
    return json.loads(out.read_text())


@pytest.mark.parametrize("which", ["gqa_report", "gqa_batch_one"])
def test_no_label_covers_the_step_marker_png(which, request):
    report = request.getfixturevalue(which)
    for chart in (chart_for(report), chart_for(report, 2), chart_for(report, ops=True)):
        fig = figure(chart)
        ax = fig.axes[0]
        step = _marker_box(ax, _step_collection(ax))
        renderer = fig.canvas.get_renderer()
        texts = [t for t in ax.texts if t.get_text()]
        assert texts
        for t in texts:
            box = t.get_window_extent(renderer).extents
            assert not _overlap(box, step), f"{t.get_text()!r} {tuple(box)} on the step's ring {step}"


@pytest.fixture(scope="module")
def gqa_page(tmp_path_factory):
    """The README's example as an HTML page."""
    page = tmp_path_factory.mktemp("gqa-page") / "gqa.html"
    _run("profile", GQA, "-H", "H800", "--phase", "decode", "-b", "4", "-s", "32768", "-o", page)
    return page


def test_no_label_covers_the_step_marker_html(browser, gqa_page):
    drawn = _page(browser, gqa_page)
    step = [box for series, _, box in drawn["points"] if series == "step"]
    assert len(step) == 1 and drawn["labels"]
    for text, box in drawn["labels"] + drawn["roofs"]:
        assert not _overlap(box, step[0]), f"{text!r} {box} on the step's marker {step[0]}"


# -- item 3: an attention layer's two points say which is which --------------------------------------------


def test_mla_attention_points_are_labelled_executed_and_minimum(browser, tmp_path):
    page = tmp_path / "mla.html"
    _run("profile", MLA, "-H", "H800", "--phase", "decode", "-o", page)
    drawn = _page(browser, page)
    texts = [text for text, _ in drawn["labels"]]
    assert len(texts) == len(set(texts)), texts  # no label twice
    executed = [t for t in texts if t.endswith(", executed")]
    minimum = [t for t in texts if t.endswith(", minimum")]
    assert len(executed) == len(minimum) == 1, texts
    assert executed[0].removesuffix(", executed") == minimum[0].removesuffix(", minimum")  # one layer, two points
    assert "attn" in executed[0]


def test_mla_attention_points_are_labelled_distinctly_png(tmp_path):
    out = tmp_path / "mla.json"
    _run("profile", MLA, "-H", "H800", "--phase", "decode", "-f", "json", "-o", out)
    fig = figure(chart_for(json.loads(out.read_text())))
    texts = [line for t in fig.axes[0].texts for line in t.get_text().splitlines()]
    assert len(texts) == len(set(texts)), texts
    assert "attention min" in texts and "attention exec" in texts
    handles = [h.get_label() for h in fig.legends[0].legend_handles]
    assert any(h.startswith("attention (architecture minimum)") for h in handles)
    assert any(h.startswith("attention (as executed)") for h in handles)


def test_an_attention_layer_at_its_minimum_labels_both_points_once(browser, gqa_page):
    """GQA executes its minimum (amplification 1): the executed and minimum points share one spot and
    one label saying so, where the minimum was left unlabelled."""
    drawn = _page(browser, gqa_page)
    texts = [text for text, _ in drawn["labels"]]
    both = [t for t in texts if t.endswith(", executed = minimum")]
    assert len(both) == 1 and "self_attn" in both[0], texts
    assert not any(t.endswith((", executed", ", minimum")) for t in texts), texts
