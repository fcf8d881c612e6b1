"""Every table the text report prints, the HTML page, the notebook view and the CSV show (profile,
sweep points, advice, plan) has, in order, the headers of its one definition in rooflinekit.outputs.columns
(sweep_columns, advice_columns, plan_columns): read back from the rendered text, Markdown, page and
notebook HTML and CSV."""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET

import pytest

from rooflinekit.analyses.profile import run_profile
from rooflinekit.analyses.sweep import render_sweep
from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.report import Report
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.outputs import notebook
from rooflinekit.outputs.advice_columns import ADVICE, ADVICE_CSV
from rooflinekit.outputs.advise_view import render_advice
from rooflinekit.outputs.columns import (
    ATTENTION,
    COMM,
    MODULES,
    MODULES_CSV,
    OPS,
    OPS_CSV,
    RANKS,
    UNCOUNTED,
    View,
    csv_header,
    notebook_columns,
    notebook_header,
    notebook_rows,
    shown,
    text_rows,
)
from rooflinekit.outputs.html import advise_html, profile_html, sweep_html
from rooflinekit.outputs.plan_columns import PLAN, PLAN_CSV, front_rows
from rooflinekit.outputs.plan_text import plan_to_text
from rooflinekit.outputs.plan_view import plan_to_csv, plan_to_html
from rooflinekit.outputs.render import to_csv, to_text
from rooflinekit.outputs.report_io import load_report
from rooflinekit.outputs.sections import attention_groups, module_lines
from rooflinekit.outputs.sweep_columns import SWEEP_POINTS
from rooflinekit.outputs.sweep_text import sweep_to_text
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, ROOT, profile_dict
from tests.test_plan_outputs import small_plan

#: A text report's section title -> its table.
TITLES = {"Modules": MODULES, "Attention": ATTENTION, "Mixers": ATTENTION, "The ": OPS,
          "Ops without a FLOP formula": UNCOUNTED, "Collectives per GPU": COMM, "Ranks": RANKS}
#: A page table's id -> its table.
PAGE = {"modules": MODULES, "attention": ATTENTION, "ops": OPS, "uncounted": UNCOUNTED, "comm": COMM}


def _distributed(report: dict) -> dict:
    """`report` as one rank of a two-rank run: its Ranks table has two rows."""
    t = report["totals"]
    rank = {"rank": 0, "flops": t["flops"], "bytes": t["bytes"], "weight_bytes": t["weight_bytes"],
            "time_compute_s": 1e-3, "time_memory_s": 2e-3, "time_comm_s": 1e-4, "binding": "memory",
            "comm_calls": 2, "comm_wire_bytes": 1e6, "predicted_step_s": t["predicted_step_s"]}
    return {**report, "distributed": {"world_size": 2, "backend": "gloo", "device": "cpu", "slowest_rank": 1,
                                      "ranks": [rank, {**rank, "rank": 1}]}}


def _states(report: dict) -> dict:
    """`report` with its first layer keeping a fixed state: the table speaks of mixers."""
    layers = [dict(report["attention"][0], cache_bytes_per_sequence=4096.0), *report["attention"][1:]]
    return {**report, "attention": layers}


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    """A measured report, one with collectives (TP 2) and ranks, and one with a fixed-state layer."""
    tp = run_profile(load_source(str(EXAMPLES / "tp_mlp.py"), {}), Workload("decode", 4, 256, "bf16", "meta"),
                 Deployment("H800", tp=2)).report.to_dict()
    gqa = profile_dict(EXAMPLES / "llama_gqa.py", batch=2, context=256, layers=2)
    return {"measured": load_report(str(ROOT / "tests" / "data" / "report-1.0-gqa.json"), ("profile",)),
            "tp": Report.from_dict(_distributed(tp)), "states": Report.from_dict(_states(gqa))}


def _view(report: Report, where: str) -> View:
    """The view conditions as each renderer reads them from the report."""
    if where == "html":
        return View(report, measured=any(m.measured is not None for m in report.modules),
                    states=any(getattr(a, "cache_bytes_per_sequence", None) for a in report.attention))
    return View(report, measured=report.totals.measured is not None,
                states=any(getattr(a, "cache_bytes_per_sequence", None) for a in report.attention))


def _table_of(title: str):
    return next(cols for start, cols in TITLES.items() if title.startswith(start))


def text_tables(text: str) -> list[tuple[str, list[str]]]:
    """(title, headers) of every table in a text report: the headers are read from the spans of the
    dashes under them."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if i >= 2 and line and set(line) <= {"-", " "} and line.startswith("-"):
            head, start = lines[i - 1], i - 2
            while start > 0 and lines[start - 1]:  # a long title wraps: its first line names it
                start -= 1
            headers = [head[m.start():m.end()].strip() for m in re.finditer(r"-+", line)]
            out.append((lines[start], headers))
    return out


def markdown_tables(text: str) -> list[tuple[str, list[str]]]:
    """(title, headers) of every table in a Markdown report."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|[-:| ]+\|", lines[i + 1]):
            title = next(x for x in reversed(lines[:i]) if x.startswith("## "))[3:]
            out.append((title, [h.strip() for h in line.strip("|").split("|")]))
    return out


def page_tables(page: str) -> dict[str, list[str]]:
    """id -> column headers of every table the page's embedded data holds."""
    data = json.loads(re.search(r'<script id="rk-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    for t in data["tables"]:
        assert all(len(row) == len(t["columns"]) for row in t["rows"]), t["id"]
    return {t["id"]: [c["label"] for c in t["columns"]] for t in data["tables"]}


@pytest.mark.parametrize("case", ["measured", "tp", "states"])
@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_every_text_table_has_the_headers_of_its_definition(reports, case, fmt):
    report = reports[case]
    text = to_text(report, fmt, wide=True, ops=5)
    found = (text_tables if fmt == "table" else markdown_tables)(text)
    view = _view(report, "text")
    titles = [title for title, _ in found]
    assert any(t.startswith("Modules") for t in titles) and any(t.startswith("The 5 most") for t in titles)
    for title, headers in found:
        if title.startswith("Pipeline"):
            continue
        assert headers == [c.header(view) for c in shown(_table_of(title), view, "text")], title
    if case == "tp":
        assert {"Collectives per GPU", "Ranks"} <= {t.split(" (")[0] for t in titles}
    if case == "states":
        assert any(t.startswith("Mixers") for t in titles)


@pytest.mark.parametrize("case", ["measured", "tp", "states"])
def test_a_narrow_text_table_leaves_out_only_its_droppable_columns_in_order(reports, case):
    report = reports[case]
    view = _view(report, "text")
    for title, headers in text_tables(to_text(report, "table", ops=5)):
        cols = shown(_table_of(title), view, "text")
        kept = [c for c in cols if c.header(view) in headers]
        assert [c.header(view) for c in kept] == headers, title
        assert all(c.drop is not None or c.wide_only for c in cols if c not in kept), title


@pytest.mark.parametrize("case", ["measured", "tp", "states"])
def test_every_page_table_has_the_headers_of_its_definition(reports, case):
    report = reports[case]
    found = page_tables(profile_html(report))
    view = _view(report, "html")
    assert "modules" in found and "ops" in found
    for tid, headers in found.items():
        assert headers == [c.html for c in shown(PAGE[tid], view, "html")], tid
    if case == "tp":
        assert "comm" in found
    if case == "states":
        assert "state/sequence" in found["attention"]
    if case == "measured":
        assert {"measured", "MFU"} <= set(found["modules"])


def notebook_tables(html: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """class -> (headers, cells of each row) of every table in a notebook view."""
    out = {}
    for t in ET.fromstring(html).iter("table"):
        rows = [[td.text or "" for td in tr] for tr in t.find("tbody")]
        out[t.get("class")] = ([th.text for th in t.iter("th")], rows)
    return out


@pytest.mark.parametrize("case", ["measured", "tp", "states"])
def test_the_notebook_tables_have_the_text_columns_under_their_definitions_headers(reports, case):
    """The notebook shows the text report's columns and cells; its headers are the page's names
    (the text's where the page has none or the text's follows the view), with the unit."""
    report = reports[case]
    found = notebook_tables(notebook.report_html(report))
    view = _view(report, "text")
    for cls, cols, rows in (("rk-modules", MODULES, module_lines(report, True)),
                            ("rk-attention", ATTENTION, attention_groups(report, True))):
        if not rows:  # an MLP: no attention table
            assert cls not in found
            continue
        headers, cells = found[cls]
        kept = shown(cols, view, "text")
        assert headers == [notebook_header(c, view) for c in kept], cls
        assert [h.split(" [")[0] for h in headers] == [
            c.header(view) if callable(c.text) or c.html is None else c.html for c in kept], cls
        assert cells == text_rows(cols, view, rows[:notebook.TOP]), cls
    modules = found["rk-modules"][0]
    assert "bytes [B]" in modules and "time bound" in modules
    assert ({"measured", "x bound", "MFU", "MBU"} <= set(modules)) is (case == "measured")
    if case == "states":
        assert found["rk-attention"][0][:1] == ["mixer (per layer)"] and "cache [B]" in found["rk-attention"][0]


@pytest.mark.parametrize("memory", [True, False])
def test_the_sweep_points_table_has_the_headers_of_its_definition(memory):
    data = dict(load_report(str(ROOT / "tests" / "data" / "sweep-3.0-gqa.json"), ("sweep",)))
    if not memory:
        data["points"] = [{k: v for k, v in p.items() if k not in ("memory", "fits")} for p in data["points"]]
    text_view, page_view = View(data), View(data, memory=memory)
    want = [c.header(text_view) for c in shown(SWEEP_POINTS, text_view, "text")]
    for fmt, read in (("table", text_tables), ("markdown", markdown_tables)):
        (_, headers), *_ = read(sweep_to_text(data, fmt, wide=True))
        assert headers == want, fmt
    (_, narrow), *_ = text_tables(sweep_to_text(data, "table"))
    assert narrow == [h for h in want if h in narrow]
    page = page_tables(sweep_html(SweepReport.from_dict(data)))
    assert page["points"] == [c.html for c in shown(SWEEP_POINTS, page_view, "html")]
    assert ("memory per GPU" in page["points"]) is memory
    headers, cells = notebook_tables(notebook.sweep_html(SweepReport.from_dict(data)))["rk-points"]
    assert headers == [notebook_header(c, text_view) for c in shown(SWEEP_POINTS, text_view, "text")]
    assert [h.split(" [")[0] for h in headers] == [c.html or c.header(text_view)
                                                   for c in shown(SWEEP_POINTS, text_view, "text")]
    assert len(cells) == len(data["points"]) and all(len(row) == len(headers) for row in cells)


@pytest.mark.parametrize("case", ["deepseek_mla", "gpt2_mha", "llama_gqa", "tp_mlp"])
def test_the_advice_table_has_the_headers_of_its_definition(case):
    """The ranked levers: the text and Markdown table, the page's and the notebook's, each with the
    headers ADVICE defines for that view, in order (Markdown adds fits and the assumption)."""
    advice = AdviceReport.from_dict(json.loads((ROOT / "tests" / "data" / "golden" / f"{case}-advise.json").read_text()))
    levers = [(0, advice.baseline), *enumerate(advice.levers, 1)]
    for fmt, md in (("table", False), ("markdown", True)):
        view = View(advice, markdown=md)
        want = [c.header(view) for c in shown(ADVICE, view, "text")]
        lines = render_advice(advice, fmt).splitlines()
        if md:
            head = next(line for line in lines if line.startswith("| #"))
            headers = [h.strip() for h in head.strip("|").split("|")]
        else:
            (_, headers), *_ = text_tables("\n".join(lines))
        assert headers == want, fmt
    assert want[-2:] == ["fits", "assumption"]
    view = View(advice)
    page = page_tables(advise_html(advice))
    assert page["levers"] == [c.html for c in shown(ADVICE, view, "html")]
    assert page["levers"][:3] == ["#", "lever", "speed-up"] and "changes" in page["levers"]
    headers, cells = notebook_tables(notebook.advice_html(advice))["rk-levers"]
    assert headers == [notebook_header(c, view) for c in notebook_columns(ADVICE, view)]
    assert headers == ["rank (0: baseline)", "lever", "predicted step [s]", "tokens/s per GPU", "speed-up [x]",
                       "binds after", "fits"]
    assert cells == notebook_rows(ADVICE, view, levers)
    assert [row[0] for row in cells] == [str(i) for i in range(len(levers))]


@pytest.mark.parametrize("best", [True, False])
def test_the_plan_table_has_the_headers_of_its_definition(best):
    """The Pareto front: the text table, the page's sortable table and the notebook's, each with the
    headers PLAN defines for that view, in order."""
    plan = small_plan(best=best)
    view = View(plan)
    (_, headers), *_ = text_tables(plan_to_text(plan))
    assert headers == [c.header(view) for c in shown(PLAN, view, "text")]
    assert headers[:2] == ["configuration", "tok/s/GPU"]
    table = re.search(r'<table class="rk-table" id="rk-plan-table">.*?</table>', plan_to_html(plan), re.S).group()
    page = [re.sub(r"<[^>]+>", "", th) for th in re.findall(r"<th .*?</th>", table)]
    assert page == [c.html for c in shown(PLAN, view, "html")]
    assert len(re.findall(r"<tr class", table)) == len(plan.pareto)
    headers, cells = notebook_tables(notebook.plan_html(plan))["rk-front"]
    assert headers == [notebook_header(c, view) for c in notebook_columns(PLAN, view)]
    assert headers == ["configuration", "TTFT [s]", "TPOT [s]", "tokens/s per GPU", "tokens/s per user",
                       "memory per GPU [B]", "meets targets"]
    front = sorted(front_rows(plan), key=lambda r: -(r[1].tokens_per_s_per_gpu or 0.0))
    assert cells == notebook_rows(PLAN, view, front[:notebook.TOP])


def test_a_header_is_named_once_per_view():
    view = View(None, measured=True, states=True, memory=True, markdown=True)
    for cols in (MODULES, ATTENTION, OPS, UNCOUNTED, COMM, RANKS, SWEEP_POINTS, ADVICE, PLAN):
        assert len({c.key for c in cols}) == len(cols)
        for where, header, kept in (("text", lambda c: c.header(view), shown(cols, view, "text")),
                                    ("html", lambda c: c.html, shown(cols, view, "html")),
                                    ("notebook", lambda c: notebook_header(c, view), notebook_columns(cols, view)),
                                    ("csv", lambda c: c.csv, shown(cols, view, "csv"))):
            names = [header(c) for c in kept]
            assert len(names) == len(set(names)), (where, names)


#: A table -> the order its CSV states for its fields, where that is not the table's own.
CSV_ORDER = {id(MODULES): MODULES_CSV, id(OPS): OPS_CSV, id(ADVICE): ADVICE_CSV, id(PLAN): PLAN_CSV}


def csv_fields(text: str) -> list[str]:
    """The header row of a CSV."""
    return next(csv.reader(io.StringIO(text)))


def test_a_stated_csv_order_holds_each_csv_column_of_its_table_once():
    """MODULES_CSV and the like reorder their table's own entries: none missing, none added, none twice."""
    for cols in (MODULES, OPS, ADVICE, PLAN):
        order = CSV_ORDER[id(cols)]
        assert len({id(c) for c in order}) == len(order)
        assert {id(c) for c in order} == {id(c) for c in cols if c.csv is not None}


@pytest.mark.parametrize("case", ["measured", "tp", "states"])
@pytest.mark.parametrize("name,cols", [("modules", MODULES), ("ops", OPS), ("attention", ATTENTION)])
def test_every_profile_csv_has_the_fields_of_its_definition(reports, case, name, cols):
    """`-f csv --table NAME`: the fields of the table's columns that name one, in the CSV's order;
    the measured figures only where the report was measured, the state field always."""
    report = reports[case]
    measured = report.totals.measured is not None
    view = View(report, measured=measured, states=True)
    fields = csv_fields(to_csv(report, name))
    assert fields == csv_header(CSV_ORDER.get(id(cols), cols), view)
    assert ("time_s" in fields) is measured and (name != "attention") is ("name" in fields)
    on_page = [c.csv for c in shown(cols, view, "html") if c.csv is not None]
    assert on_page and set(on_page) <= set(fields)


@pytest.mark.parametrize("memory", [True, False])
def test_the_sweep_csv_has_the_fields_of_its_definition_and_the_pages_numbers(memory):
    data = dict(load_report(str(ROOT / "tests" / "data" / "sweep-3.0-gqa.json"), ("sweep",)))
    if not memory:
        data["points"] = [{k: v for k, v in p.items() if k not in ("memory", "fits")} for p in data["points"]]
    view = View(data)
    text = render_sweep(data, "csv")
    assert csv_fields(text) == csv_header(SWEEP_POINTS, view)
    assert {"batch", "predicted_step_s", "attention_intensity_min", "memory_bytes", "fits"} <= set(csv_fields(text))
    points, page_view = SweepReport.from_dict(data).points, View(data, memory=memory)
    for c in SWEEP_POINTS:  # a column the page and the CSV show: the same number in both
        if c.csv is not None and c.html is not None:
            assert [c.value(p, page_view) for p in points] == [c.csv_value(r, view) for r in data["points"]], c.key


@pytest.mark.parametrize("case", ["deepseek_mla", "tp_mlp"])
def test_the_advice_csv_has_the_fields_of_its_definition_and_the_pages_values(case):
    advice = AdviceReport.from_dict(json.loads((ROOT / "tests" / "data" / "golden" / f"{case}-advise.json").read_text()))
    view = View(advice)
    assert csv_fields(render_advice(advice, "csv")) == csv_header(ADVICE_CSV, view)
    levers = [(0, advice.baseline), *enumerate(advice.levers, 1)]
    for c in ADVICE:
        if c.csv is not None and c.html is not None:
            assert [c.value(r, view) for r in levers] == [c.csv_value(r, view) for r in levers], c.key


@pytest.mark.parametrize("best", [True, False])
def test_the_plan_csv_has_the_fields_of_its_definition(best):
    plan = small_plan(best=best)
    fields = csv_fields(plan_to_csv(plan))
    assert fields == csv_header(PLAN_CSV, View(plan))
    assert fields[:2] == ["index", "label"] and fields[-2:] == ["pareto", "best"]
    assert {c.csv for c in shown(PLAN, View(plan), "html") if c.csv} <= set(fields)
