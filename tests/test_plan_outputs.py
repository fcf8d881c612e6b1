"""The plan's outputs: the HTML page (chart points, Pareto rows, escaping), the CSV, the PNG (its
size, the best's label inside the figure) and the JSON schema (a real plan validates)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import struct
from html.parser import HTMLParser

import pytest
from conftest import EXAMPLES

from rooflinekit.core.plan import PlanConfig, PlanResult, Pool, Speculative, Targets, pareto_front
from rooflinekit.outputs.plan_io import PLAN_SCHEMA_FILE, plan_from_dict, plan_schema
from rooflinekit.outputs.plan_view import plan_to_csv, plan_to_html

VOID = {"meta", "br", "img", "input", "hr", "link", "circle", "line", "rect", "polyline"}


def _agg(batch: int, tpot: float, fits: bool = True, **kw) -> PlanConfig:
    per_user = 1.0 / tpot
    fields = dict(mode="aggregated", tp=1, ep=1, pp=1, replicas=8, weight_dtype="bf16", kv_dtype="fp8",
                  kernels="serving", batch=batch, gpus=8, chunk=512, ttft_s=0.1, tpot_s=tpot, e2e_s=0.1 + 1024 * tpot,
                  tokens_per_s_per_gpu=batch * per_user, tokens_per_s_per_user=per_user, ttft_bound_s=0.05,
                  tpot_bound_s=tpot * 0.8, memory_per_gpu_bytes=20e9 + batch * 1e8, usable_bytes=76e9, fits=fits,
                  meets_slo=fits and tpot <= 0.02, binding="memory",
                  reject_reason=None if fits and tpot <= 0.02 else ("memory: too big" if not fits else "target: TPOT"))
    fields.update(kw)
    return PlanConfig(**fields)


def _disagg(batch: int, tpot: float) -> PlanConfig:
    prefill = Pool(tp=1, ep=1, pp=1, instances=2, batch=1, step_s=0.09)
    decode = Pool(tp=2, ep=1, pp=1, instances=3, batch=batch, step_s=tpot)
    return _agg(batch, tpot, mode="disaggregated", replicas=3, prefill=prefill, decode=decode, pool_ratio="2:6",
                chunk=None, tokens_per_s_per_gpu=batch * 3 / tpot / 8)


def small_plan(name: str = "tiny-llama", best: bool = True) -> PlanResult:
    """A hand-made plan: aggregated and disaggregated points, misses, one that does not fit, a
    speculative one."""
    spec = Speculative(draft="MTP", k=1, accept=0.7, tokens_per_step=1.7, draft_step_s=0.001, verify_step_s=0.01)
    configs = [_agg(1, 0.004), _agg(8, 0.006), _agg(32, 0.012), _agg(64, 0.018), _agg(128, 0.03),
               _agg(256, 0.05, fits=False), _disagg(4, 0.005), _disagg(48, 0.015), _disagg(96, 0.025),
               _agg(16, 0.007, speculative=spec)]
    if not best:
        configs = [dataclasses.replace(c, meets_slo=False, reject_reason="target: TPOT") for c in configs]
    fitting = [i for i, c in enumerate(configs) if c.fits]
    front = [fitting[k] for k in pareto_front([(configs[i].tokens_per_s_per_gpu, configs[i].tokens_per_s_per_user)
                                               for i in fitting])]
    meets = [i for i in fitting if configs[i].meets_slo]
    best_index = max(meets, key=lambda i: configs[i].tokens_per_s_per_gpu) if meets else None
    return PlanResult(model={"name": name, "path": "x.json", "kind": "test", "options": {}}, hardware="H800 SXM5",
                      gpus=8, targets=Targets(4096, 1024, tpot_s=0.02), candidates=len(configs), configs=configs,
                      pareto=front, best=best_index, closest=None if best else front[-1],
                      closest_miss=None if best else "TPOT 10 ms over", notes=["a note <b>"])


class _Tags(HTMLParser):
    """Every start tag with its attributes; fails on a closing tag that closes nothing open."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    assert parser.stack == [], f"unclosed: {parser.stack}"
    return parser


def _classes(attrs: dict) -> set[str]:
    return set((attrs.get("class") or "").split())


# -- HTML --------------------------------------------------------------------------------------------------


def test_html_has_a_point_per_fitting_config_and_a_row_per_pareto_config():
    plan = small_plan()
    page = plan_to_html(plan)
    tags = _parse(page)
    points = [a for t, a in tags.tags if t == "circle" and "rk-point" in _classes(a)]
    assert sorted(int(a["data-i"]) for a in points) == [i for i, c in enumerate(plan.configs) if c.fits]
    filled = {int(a["data-i"]) for a in points if a["fill"] != "#ffffff"}
    assert filled == {i for i, c in enumerate(plan.configs) if c.meets_slo}
    rows = [a for t, a in tags.tags if t == "tr" and "data-i" in a]
    assert [int(a["data-i"]) for a in rows] == plan.pareto
    assert sum("rk-plan-best-row" in _classes(a) for a in rows) == (1 if plan.best in plan.pareto else 0)
    assert any(t == "polyline" and "rk-plan-front" in _classes(a) for t, a in tags.tags)
    assert any(t == "circle" and "rk-plan-best-ring" in _classes(a) for t, a in tags.tags)
    assert any(t == "line" and "rk-plan-target" in _classes(a) for t, a in tags.tags)
    text = " ".join(tags.text)
    assert plan.configs[plan.best].label() in text and "TTFT (ms)" in text and "per GPU (tok/s)" in text
    data = json.loads(next(d for d in tags.text if d.startswith('{"tips"')))
    assert set(map(int, data["tips"])) == {int(a["data-i"]) for a in points}


def test_html_is_self_contained_and_the_same_from_the_json():
    plan = small_plan()
    page = plan_to_html(plan)
    assert "Content-Security-Policy" in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page
    assert plan_to_html(json.loads(json.dumps(plan.to_dict()))) == page


def test_html_escapes_the_model_name_and_notes():
    plan = small_plan(name="<script>alert(1)</script>")
    page = plan_to_html(plan)
    _parse(page)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script") == 2  # the page's JSON and its script, nothing else
    assert "a note <b>" not in page and "a note &lt;b&gt;" in page


def test_html_without_a_best_shows_the_closest_miss():
    plan = small_plan(best=False)
    assert plan.best is None
    page = plan_to_html(plan)
    tags = _parse(page)
    assert "the closest" in page and "TPOT 10 ms over" in page
    assert not any(t == "circle" and "rk-plan-best-ring" in _classes(a) for t, a in tags.tags)
    points = [a for t, a in tags.tags if t == "circle" and "rk-point" in _classes(a)]
    assert points and all(a["fill"] == "#ffffff" for a in points)


# -- CSV ---------------------------------------------------------------------------------------------------


def test_csv_has_a_row_per_config_and_the_results_values():
    plan = small_plan()
    text = plan_to_csv(plan)
    lines = text.splitlines()
    assert len(lines) == len(plan.configs) + 1
    rows = list(csv.DictReader(io.StringIO(text)))
    nested = ("speculative", "prefill", "decode")
    scalars = [f.name for f in dataclasses.fields(PlanConfig) if f.name not in nested]
    parts = [f"{p}_{f.name}" for p, cls in zip(nested, (Speculative, Pool, Pool), strict=True)
             for f in dataclasses.fields(cls)]
    assert list(rows[0]) == ["index", "label", *scalars, *parts, "pareto", "best"]
    assert [float(r["tokens_per_s_per_gpu"]) for r in rows] == [c.tokens_per_s_per_gpu for c in plan.configs]
    assert [r["pareto"] == "True" for r in rows] == [i in plan.pareto for i in range(len(plan.configs))]
    assert [r["best"] == "True" for r in rows] == [i == plan.best for i in range(len(plan.configs))]
    assert [r["label"] for r in rows] == [c.label() for c in plan.configs]
    for name in ("prefill_tp", "decode_tp", "decode_batch", "prefill_step_s", "speculative_k", "speculative_accept"):
        assert name in rows[0]
    disagg = next(r for r, c in zip(rows, plan.configs, strict=True) if c.mode == "disaggregated")
    assert disagg["decode_tp"] == "2" and disagg["prefill_instances"] == "2" and disagg["pool_ratio"] == "2:6"
    spec = next(r for r, c in zip(rows, plan.configs, strict=True) if c.speculative)
    assert spec["speculative_draft"] == "MTP" and float(spec["speculative_tokens_per_step"]) == 1.7
    assert rows[0]["prefill_tp"] == "" and rows[0]["speculative_k"] == ""


# -- PNG ---------------------------------------------------------------------------------------------------


def test_png_has_its_size_and_the_best_label_inside_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from rooflinekit.outputs.plan_plot import DPI, FIGSIZE, plan_figure, plot_plan

    plan = small_plan()
    path = tmp_path / "plan.png"
    assert plot_plan(plan, str(path)) == sum(c.fits for c in plan.configs)
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))
    fig = plan_figure(plan)
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text().startswith("best: ")]
    assert [t.get_text() for t in labels] == [f"best: {plan.configs[plan.best].label()}"] and fig.left_out == []
    box, frame, whole = labels[0].get_window_extent(renderer), ax.get_window_extent(renderer), fig.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
    assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1
    legend = ax.get_legend().get_window_extent(renderer)
    assert frame.x0 <= legend.x0 and legend.x1 <= frame.x1 and frame.y0 <= legend.y0 and legend.y1 <= frame.y1
    assert not (box.x0 < legend.x1 and legend.x0 < box.x1 and box.y0 < legend.y1 and legend.y0 < box.y1)
    assert ax.get_xlabel() == "tokens/s per user (1 / TPOT)" and ax.get_ylabel() == "output tokens/s per GPU"


def test_png_without_a_best_draws_no_label(tmp_path):
    pytest.importorskip("matplotlib")
    from rooflinekit.outputs.plan_plot import plan_figure

    fig = plan_figure(small_plan(best=False).to_dict())
    assert not [t for t in fig.axes[0].texts if t.get_text().startswith("best: ")]
    fig = plan_figure(small_plan(name="costs $5 <b>", best=False))  # a '$' is no mathtext
    fig.savefig(io.BytesIO(), format="png")
    assert "costs \\$5 <b>" in fig.axes[0].get_title()


# -- JSON schema -------------------------------------------------------------------------------------------


def test_the_shipped_plan_schema_is_the_one_the_types_imply():
    assert json.loads(PLAN_SCHEMA_FILE.read_text()) == plan_schema(), (
        "the plan dataclasses changed: regenerate with "
        "python -c 'from rooflinekit.outputs.plan_io import write_plan_schema; write_plan_schema()'")


def test_the_plan_schema_accepts_a_plan_and_rejects_a_broken_one():
    import jsonschema

    schema = json.loads(PLAN_SCHEMA_FILE.read_text())
    for plan in (small_plan(), small_plan(best=False)):
        data = json.loads(json.dumps(plan.to_dict()))
        jsonschema.validate(data, schema)
        assert plan_from_dict(data).to_dict() == data
    data = small_plan().to_dict()
    for broken in (dict(data, configs=[dict(data["configs"][0], fits="yes")]), {k: v for k, v in data.items()
                                                                                 if k != "pareto"},
                   dict(data, best=3), dict(data, kind="sweep")):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


@pytest.mark.hf
@pytest.mark.slow
def test_a_real_plan_validates_and_renders(tmp_path):
    import jsonschema

    from rooflinekit.analyses.plan import run_plan
    from rooflinekit.analyses.plan_options import PlanOptions
    from rooflinekit.core.plugins import get_host
    from rooflinekit.stages.model_source import load_source

    host = get_host()
    src = load_source(str(EXAMPLES / "configs" / "llama-3.1-8b.json"), {}, host)
    result = run_plan(src, Targets(4096, 1024, tpot_s=0.02), PlanOptions(), host=host)
    data = json.loads(json.dumps(result.to_dict()))
    jsonschema.validate(data, json.loads(PLAN_SCHEMA_FILE.read_text()))
    assert plan_from_dict(data).to_dict() == data
    tags = _parse(plan_to_html(result))
    assert sum(t == "circle" and "rk-point" in _classes(a) for t, a in tags.tags) == sum(c.fits for c in result.configs)
    assert sum(t == "tr" and "data-i" in a for t, a in tags.tags) == len(result.pareto)
    assert len(plan_to_csv(data).splitlines()) == len(result.configs) + 1
