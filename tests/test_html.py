"""The HTML report: one self-contained file, checked as text and in a real browser (headless Chromium
over the DevTools protocol, tests/browser.py).

The browser tests need Chromium (Debian's `chromium` package; .ci/run installs it). Without one they
skip and say why; with ROOFLINEKIT_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser fails them.
"""

from __future__ import annotations

import io
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from rooflinekit.core.report import Report
from rooflinekit.outputs.groups import fold
from rooflinekit.outputs.html import profile_html
from rooflinekit.outputs.html_tables import TOP_OPS
from tests.browser import Browser, required_browser
from tests.conftest import EXAMPLES, TINY_LLAMA

GQA = EXAMPLES / "llama_gqa.py"
MLA = EXAMPLES / "deepseek_mla.py"
TINY_MLA = {"layers": 2, "hidden": 256, "heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8, "v_head_dim": 16, "intermediate": 512, "vocab": 1000}


def _options(opts: dict) -> list[str]:
    return [x for k, v in opts.items() for x in ("-O", f"{k}={v}")]


def payload(text: str) -> dict:
    """The JSON the page draws from, as the page's script reads it."""
    match = re.search(r'<script id="rk-data" type="application/json">(.*?)</script>', text, re.S)
    assert match, "no data block"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """JSON and HTML reports written by the CLI: profiles of a GQA and an MLA model, their
    comparison, a sweep and an advice report."""
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    folder = tmp_path_factory.mktemp("html")

    def run(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 0, result.stderr
        return result

    out = {}
    for name, model, opts in (("gqa", GQA, {**TINY_LLAMA, "layers": 2}), ("mla", MLA, TINY_MLA)):
        for ext in ("json", "html"):
            out[f"{name}.{ext}"] = folder / f"{name}.{ext}"
            # --no-group-layers: a page row and point per module row (the default folds identical
            # layers: tests/test_readable_defaults.py)
            run("profile", model, *_options(opts), "-b", "4", "-s", "256", "-H", "H800", "-o", out[f"{name}.{ext}"],
                *(["-f", "json"] if ext == "json" else ["--no-group-layers"]))
    out["compare.html"] = folder / "compare.html"
    run("compare", out["gqa.json"], out["mla.json"], "-o", out["compare.html"])
    advise = ("advise", GQA, *_options({**TINY_LLAMA, "layers": 2}), "-b", "4", "-s", "256", "-H", "H800")
    for ext in ("json", "html"):
        out[f"advise.{ext}"] = folder / f"advise.{ext}"
        run(*advise, "-f", ext, "-o", out[f"advise.{ext}"])
    sweep = ("sweep", GQA, *_options({**TINY_LLAMA, "layers": 2}), "-b", "1,4,16,64", "-s", "128,1024", "-H", "H800")
    for ext in ("json", "html"):
        out[f"sweep.{ext}"] = folder / f"sweep.{ext}"
        run(*sweep, "-f", ext, "-o", out[f"sweep.{ext}"])
    return out


def report(files, name: str) -> Report:
    return Report.from_dict(json.loads(files[f"{name}.json"].read_text()))


# -- the file ----------------------------------------------------------------------------------------


def test_one_file_that_needs_no_network(files):
    for name in ("gqa.html", "compare.html", "sweep.html", "advise.html"):
        text = files[name].read_text()
        assert text.startswith("<!DOCTYPE html>")
        # no external script, style, image or font: nothing loads from anywhere
        assert not re.search(r"<(script|img|link|iframe)[^>]*\b(src|href)=", text), name
        assert "url(http" not in text and "@import" not in text
        # and the page forbids every fetch, should anything try
        assert "default-src 'none'" in text
        assert len(text) < 400_000, f"{name}: {len(text)} characters"
        assert text.isascii()


def test_series_and_tables_hold_every_row(files):
    r = report(files, "gqa")
    data = payload(files["gqa.html"].read_text())
    series = {s["id"]: s for s in data["chart"]["series"]}
    # one point per module that did work; the others are named as not drawn, none lost
    with_flops = [m.name for m in r.modules if m.flops > 0 and m.bytes > 0]
    assert [p["n"] for p in series["modules"]["points"]] == with_flops
    assert sorted(series["modules"]["omitted"]) == sorted(m.name for m in r.modules if m.name not in with_flops)
    assert [p["n"] for p in series["attention"]["points"]] == [a.module for a in r.attention]
    assert len(series["attention_min"]["points"]) == sum(a.placement_min is not None for a in r.attention) == 2
    assert len(series["step"]["points"]) == 1
    tables = {t["id"]: t for t in data["tables"]}
    assert len(tables["modules"]["rows"]) == len(r.modules)
    assert len(tables["attention"]["rows"]) == len(r.attention) == 2
    assert len(tables["ops"]["rows"]) == len(r.ops) and tables["ops"]["limit"] == TOP_OPS
    assert len(tables["uncounted"]["rows"]) == len(r.uncounted_ops)


def test_a_point_sits_where_its_numbers_put_it(files):
    r = report(files, "gqa")
    mods = {p["n"]: p for p in next(s for s in payload(files["gqa.html"].read_text())["chart"]["series"]
                                    if s["id"] == "modules")["points"]}
    hw = r.hardware
    for m in r.modules:
        if m.name in mods:
            p = mods[m.name]
            assert p["x"] == pytest.approx(m.flops / m.bytes, rel=1e-5)
            # on the roof of its dtype: min(peak, bandwidth x intensity)
            assert p["y"] == pytest.approx(min(hw.peaks.get(m.dtype, hw.peak_flops), hw.bandwidth * m.flops / m.bytes),
                                           rel=1e-5)
            assert p["s"] == pytest.approx(m.time_bound_ops_s / r.totals.predicted_step_s, rel=1e-5)


EVIL = "</script><script>window.pwned=1</script><!-- \u00b5 & <b>"


def evil_page(files) -> str:
    """The GQA profile with its first module renamed to markup (and a non-ASCII character)."""
    r = report(files, "gqa")
    return profile_html(replace(r, modules=[replace(r.modules[0], name=EVIL), *r.modules[1:]]))


def test_names_cannot_break_out_of_the_page(files):
    text = evil_page(files)
    assert EVIL not in text and "<script>window.pwned" not in text
    assert text.isascii()  # written the same under any locale
    assert payload(text)["tables"][0]["rows"][0][0] == EVIL


@pytest.mark.parametrize("args,html", [
    (["-o", "{out}/r.html"], True),
    (["-o", "{out}/R.HTM"], True),
    (["-f", "html", "-o", "{out}/r.txt"], True),
    (["-f", "table", "-o", "{out}/r.html"], False),
    (["-o", "{out}/r.txt"], False),
])
def test_the_format_follows_the_suffix_unless_given(invoke, tmp_path, args, html):
    args = [a.format(out=tmp_path) for a in args]
    result = invoke("profile", GQA, *_options(TINY_LLAMA), *args)
    assert result.exit_code == 0, result.stderr
    text = Path(args[-1]).read_text()
    assert text.startswith("<!DOCTYPE html>") == html


def test_html_to_stdout(invoke):
    result = invoke("profile", GQA, *_options(TINY_LLAMA), "-f", "html")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("<!DOCTYPE html>") and result.stdout.rstrip().endswith("</html>")


# -- in the browser ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    yield from required_browser("the HTML report's browser tests", 1280, 900)


def open_page(browser: Browser, path: Path) -> None:
    browser.clear_events()
    browser.open(path)
    assert browser.console_errors() == []
    # the file itself is the only thing the page loaded
    assert [u for u in browser.requests() if not u.startswith("file://")] == []


def drawn(browser: Browser) -> dict[str, int]:
    """Points per series as drawn in the chart's DOM."""
    return browser.js("""(() => { const n = {};
        document.querySelectorAll('#rk-chart path.rk-point').forEach(p => {
            n[p.dataset.series] = (n[p.dataset.series] || 0) + 1; });
        return n; })()""")


def legend(browser: Browser) -> dict[str, int]:
    """Points per series as the legend claims them."""
    items = browser.js("""Array.from(document.querySelectorAll('#rk-legend .rk-legend-item'))
        .map(e => [e.dataset.series, e.textContent])""")
    return {sid: int(re.search(r"\((\d+)\)$", text).group(1)) for sid, text in items}


def variance(png: bytes) -> float:
    return ImageStat.Stat(Image.open(io.BytesIO(png)).convert("L")).var[0]


def test_profile_page_draws_one_point_per_row(browser, files):
    r = report(files, "gqa")
    open_page(browser, files["gqa.html"])
    expected = {"modules": sum(m.flops > 0 and m.bytes > 0 for m in r.modules), "attention": len(r.attention),
                "attention_min": sum(a.placement_min is not None for a in r.attention), "step": 1}
    counts = drawn(browser)
    assert {k: counts.get(k, 0) for k in expected} == expected
    assert {k: legend(browser)[k] for k in expected} == expected
    # the points not drawn are named under the chart
    omitted = [m.name for m in r.modules if not (m.flops > 0 and m.bytes > 0)]
    assert 0 < len(omitted) <= 12
    text = browser.js("document.getElementById('rk-omitted').textContent")
    assert all(name in text for name in omitted) and str(len(omitted)) in text


def _column(browser: Browser, table: str, col: int = 1) -> list[str]:
    return browser.js(f"""Array.from(document.querySelectorAll('#rk-table-{table} tbody tr td:nth-child({col})'))
        .map(td => td.textContent)""")


def test_a_table_sorts_when_its_header_is_clicked(browser, files):
    r = report(files, "gqa")
    open_page(browser, files["gqa.html"])
    header = "#rk-table-modules th:nth-child(3) button"  # FLOPs
    assert browser.js(f"document.querySelector({json.dumps(header)}).textContent") == "FLOPs"
    browser.click(header)
    assert _column(browser, "modules") == [m.name for m in sorted(r.modules, key=lambda m: -m.flops)]
    assert browser.js("document.querySelector('#rk-table-modules th:nth-child(3)').getAttribute('aria-sort')") \
        == "descending"
    browser.click(header)
    assert _column(browser, "modules") == [m.name for m in sorted(r.modules, key=lambda m: m.flops)]
    # text sorts in natural order: layers.2 before layers.10
    browser.click("#rk-table-attention th:nth-child(1) button")
    names = _column(browser, "attention")
    assert names == sorted(names, key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)])
    assert browser.console_errors() == []


def test_the_ops_table_shows_the_top_ops_then_all(browser, files):
    r = report(files, "gqa")
    open_page(browser, files["gqa.html"])
    top = sorted(r.ops, key=lambda o: -o.time_bound_s)[:TOP_OPS]
    shown = [int(x.replace(",", "")) for x in _column(browser, "ops")]
    assert len(shown) == min(TOP_OPS, len(r.ops))
    assert [r.ops[i].time_bound_s for i in shown] == [o.time_bound_s for o in top]
    browser.click("#rk-table-ops .rk-more")
    assert len(_column(browser, "ops")) == len(r.ops)


def test_a_long_cell_keeps_its_row_short_until_clicked(browser, files):
    """A long text cell (the attention layers' notes) shows three lines, the whole text on hover
    (title) or a click: a note of 600 characters put in one keeps its row short until clicked."""
    open_page(browser, files["mla.html"])
    cell = "document.querySelector('#rk-table-attention td.rk-long')"
    text, title = browser.js(f"[{cell}.textContent, {cell}.title]")
    assert len(text) > 40 and title == text
    clamp = f"{cell}.querySelector('.rk-clamp')"
    line = browser.js(f"({clamp}.textContent = 'one line', {clamp}.getBoundingClientRect().height)")
    browser.js(f"{clamp}.textContent = 'a note that runs on '.repeat(30)")
    shut = browser.js(f"{clamp}.getBoundingClientRect().height")
    assert shut <= 3 * line + 1
    browser.click("#rk-table-attention td.rk-long")
    opened = browser.js(f"{clamp}.getBoundingClientRect().height")
    assert opened > shut + 2 * line and browser.js(f"{cell}.classList.contains('rk-open')")
    assert browser.console_errors() == []


def _si(value: float, unit: str) -> str:
    """An SI-prefixed value with 3 significant digits, written independently of the page's formatter."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if value >= scale:
            return f"{float(f'{value / scale:.3g}'):g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def test_hover_shows_the_rows_figures(browser, files):
    r = report(files, "gqa")
    open_page(browser, files["gqa.html"])
    # the largest module that shows (of several rows at one spot, the one drawn last is on top)
    top = max(m.time_share for m in r.modules)
    same = [m for m in r.modules if m.time_share == top]
    m = same[-1]
    browser.hover(f'#rk-chart path.rk-point[data-series="modules"][data-name="{m.name}"]')
    assert browser.js("document.getElementById('rk-tip').hidden") is False
    lines = browser.js("document.getElementById('rk-tip').innerText").splitlines()
    assert lines[0] == m.name
    figures = dict(zip(lines[2::2], lines[3::2], strict=False))
    assert figures["FLOPs"] == _si(m.flops, "FLOP")
    assert figures["bytes"] == _si(m.bytes, "B")
    share = 100 * m.time_share  # 3 significant digits: one decimal from 10%, two below
    assert figures["share of predicted step"] == (f"{share:.1f}%" if share >= 10 else f"{share:.2f}%")
    assert {"intensity", "time bound (sum of its ops)", "attainable"} <= set(figures)
    if len(same) > 1:  # rows drawn at the same spot are named, none hidden
        assert lines[-1].startswith(f"+{len(same) - 1} more at this point: ") and same[0].name in lines[-1]


def test_the_formatter_never_writes_an_exponent(browser, files):
    open_page(browser, files["gqa.html"])
    cases = {
        "fmt.si(3.35e12, 'B/s')": "3.35 TB/s", "fmt.si(989.4e12, 'FLOP/s')": "989 TFLOP/s",
        "fmt.si(999.96e9, 'B')": "1 TB", "fmt.si(1.7e22, 'FLOP')": "17,000 EFLOP", "fmt.si(512, 'B')": "512 B",
        "fmt.pct(0.4486)": "44.9%", "fmt.pct(0.0164)": "1.64%", "fmt.pct(3e-5)": "<0.01%", "fmt.pct(0)": "0%",
        "fmt.time(0.000554)": "554 \u00b5s", "fmt.time(0.7183)": "718 ms", "fmt.time(2.5e-10)": "0.25 ns",
        "fmt.num(0.49958)": "0.5", "fmt.num(132.48, 'FLOP/B')": "132 FLOP/B", "fmt.num(3e-7)": "<0.000001",
        "fmt.int(32768)": "32,768",
    }
    got = browser.js("(() => { const fmt = window.rooflinekit.fmt; return [" + ", ".join(cases) + "]; })()")
    assert dict(zip(cases.values(), got, strict=True)) == {v: v for v in cases.values()}


def test_a_screenshot_is_not_blank(browser, files, tmp_path):
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body data-ready='1'></body></html>")
    browser.open(blank)
    assert variance(browser.screenshot()) < 1.0  # the measure can tell a blank page
    open_page(browser, files["gqa.html"])
    assert variance(browser.screenshot()) > 200
    box = browser.js("""(() => { const e = document.getElementById('rk-chart'); e.scrollIntoView();
        const r = e.getBoundingClientRect(); return {x: r.left + window.scrollX, y: r.top + window.scrollY,
        width: r.width, height: r.height}; })()""")
    chart = browser.screenshot(clip=box)
    assert Image.open(io.BytesIO(chart)).size[0] >= 900
    assert variance(chart) > 200


def test_the_sweep_selector_moves_the_points(browser, files):
    sweep = json.loads(files["sweep.json"].read_text())
    batches, contexts = sweep["workload"]["batches"], sweep["workload"]["contexts"]
    open_page(browser, files["sweep.html"])
    intensity = {(p["batch"], p["context"]): p["intensity"] for p in sweep["points"]}

    def step_x() -> float:
        return browser.js("""(() => { const b = document.querySelector('#rk-chart path.rk-point[data-series="step"]')
            .getBBox(); return b.x + b.width / 2; })()""")

    def choose(select_id: str, value: int) -> None:
        browser.js(f"""(() => {{ const s = document.getElementById('{select_id}'); s.value = '{value}';
            s.dispatchEvent(new Event('change')); }})()""")

    for context in contexts:
        choose("rk-context", context)
        xs = []
        for batch in batches:
            choose("rk-batch", batch)
            assert {k: drawn(browser).get(k, 0) for k in ("step", "attention", "trail")} == \
                {"step": 1, "attention": 1, "trail": len(batches)}
            xs.append(step_x())
        logs = [math.log10(intensity[(b, context)]) for b in batches]
        # the point moves with the batch, on a log axis: pixels are affine in log10(intensity)
        slopes = [(xs[i] - xs[0]) / (logs[i] - logs[0]) for i in range(1, len(xs))]
        assert xs == sorted(xs) and xs[-1] - xs[0] > 50
        assert max(slopes) == pytest.approx(min(slopes), rel=1e-3)
    # a row of the points table selects its point
    browser.click("#rk-table-points tbody tr:nth-child(2)")
    assert browser.js("document.getElementById('rk-batch').value") == str(sweep["points"][1]["batch"])
    assert browser.console_errors() == []


def test_a_name_is_shown_as_text_not_run(browser, files, tmp_path):
    page = tmp_path / "evil.html"
    page.write_text(evil_page(files))
    open_page(browser, page)
    assert browser.js("typeof window.pwned") == "undefined"
    assert EVIL in _column(browser, "modules")


def test_compare_page_draws_both_reports(browser, files):
    a, b = report(files, "gqa"), report(files, "mla")
    open_page(browser, files["compare.html"])
    counts = drawn(browser)
    for tag, r in (("A", a), ("B", b)):
        # identical layers folded into one point, as profile folds them
        placed = [m for m in r.modules if m.flops > 0 and m.bytes > 0]
        assert counts[f"{tag}_modules"] == len(fold(placed, lambda m: m.name,
                                                    lambda m: (m.flops, m.bytes, m.weight_bytes, m.dtype)))
        assert counts[f"{tag}_attention"] == len(r.attention)
        assert counts[f"{tag}_step"] == 1
    rows = browser.js("document.querySelectorAll('#rk-table-compare tbody tr').length")
    assert rows == len(payload(files["compare.html"].read_text())["tables"][0]["rows"]) > 0


def test_advise_page_draws_one_bar_per_lever(browser, files):
    advice = json.loads(files["advise.json"].read_text())
    open_page(browser, files["advise.html"])
    names = browser.js("Array.from(document.querySelectorAll('#rk-chart rect.rk-bar')).map(r => r.dataset.name)")
    assert names == [lv["lever"] for lv in advice["levers"]] and names
    # a bar runs from the baseline (1x) to the lever's speed-up, on a log axis
    boxes = browser.js("""Array.from(document.querySelectorAll('#rk-chart rect.rk-bar'))
        .map(r => { const b = r.getBBox(); return [b.x, b.x + b.width]; })""")
    one = {round(lo if lv["speedup"] >= 1 else hi, 3) for (lo, hi), lv in zip(boxes, advice["levers"], strict=True)}
    assert len(one) == 1  # every bar starts (or ends) at the baseline's line
    grow = [(hi - lo, abs(math.log10(lv["speedup"]))) for (lo, hi), lv in zip(boxes, advice["levers"], strict=True)
            if abs(math.log10(lv["speedup"])) > 0.01]
    assert max(w / g for w, g in grow) == pytest.approx(min(w / g for w, g in grow), rel=1e-3)
    rows = _column(browser, "levers", 2)
    assert rows == ["baseline"] + [lv["lever"] for lv in advice["levers"]]
    if advice["skipped"]:
        assert _column(browser, "skipped") == [x["lever"] for x in advice["skipped"]]
