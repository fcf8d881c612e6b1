"""--efficiency SOURCE: the expected time priced with a named efficiency source on every command.

The sources are written here from the committed table (rooflinekit/stages/efficiency.toml): one
with the launch costs set to zero ("flat") and one with every fraction also halved ("halved").
Without collectives a step's expected time is the sum of max(FLOPs / (fraction x peak), bytes /
(fraction x bandwidth)) over its kernels, so halving every fraction doubles it exactly: the
"halved" step is twice the "flat" one, whichever route names the source (the option, the Python
API, a hardware entry's own `efficiency` key, a plugin's source name, the planner).
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from click.testing import CliRunner

from rooflinekit.analyses.plan import run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.analyses.profile import ReportOptions, run_profile
from rooflinekit.cli.main import cli
from rooflinekit.core.hookspecs import hookimpl
from rooflinekit.core.plan import Targets
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.efficiency_table import TABLE_FILE, load_table, with_efficiency
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

GQA = str(EXAMPLES / "llama_gqa.py")
OPTIONS = {"layers": 2}
FAST = ReportOptions(detail=False, measure=False)
PREFILL = Workload("prefill", 2, 512, "bf16")


def _source_text(halve: bool) -> str:
    """The committed table with launches zeroed and, with `halve`, every fraction halved."""
    text = TABLE_FILE.read_text()
    text = re.sub(r"^(decode_s|prefill_s) = .*$", r"\1 = 0.0", text, flags=re.M)
    if halve:
        def half(m: re.Match) -> str:
            return f"{m.group(1)} = {float(m.group(2)) / 2!r}"
        text = re.sub(r"^(compute(?:_\w+)?|bandwidth) = ([0-9.eE+-]+)$", half, text, flags=re.M)

        def halves(m: re.Match) -> str:  # a curve's points
            return f"{m.group(1)} = [{', '.join(repr(float(v) / 2) for v in m.group(2).split(','))}]"
        text = re.sub(r"^(compute(?:_\w+)?|bandwidth(?:_\w+)?) = \[([0-9.eE+, -]+)\]$", halves, text, flags=re.M)
    return text


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("efficiency")
    flat, halved = folder / "flat.toml", folder / "halved.toml"
    flat.write_text(_source_text(False))
    halved.write_text(_source_text(True))
    table, half = load_table(str(flat)), load_table(str(halved))
    for name, fractions in table.classes.items():  # the files are what the test says they are
        assert half.classes[name].compute == fractions.compute / 2
        assert half.classes[name].bandwidth == fractions.bandwidth / 2
    assert table.launch_decode_s == table.launch_prefill_s == 0.0
    return flat, halved


def _step(source: str | None, hardware: str = "H800", kernels: str = "as-written", workload: Workload = PREFILL,
          **deployment) -> float:
    host = get_host()
    report = run_profile(load_source(GQA, OPTIONS, host), workload,
                     Deployment(hardware, kernels=kernels, efficiency=source, **deployment), options=FAST,
                     host=host).report
    return report.totals.expected_step_s


def test_halving_every_fraction_doubles_the_step(sources):
    flat, halved = sources
    assert _step(str(halved)) == pytest.approx(2 * _step(str(flat)), rel=1e-12)
    decode = Workload("decode", 4, 2048, "bf16")
    assert _step(str(halved), kernels="serving", workload=decode) == pytest.approx(
        2 * _step(str(flat), kernels="serving", workload=decode), rel=1e-12)


def test_published_is_the_committed_table(sources):
    assert _step("published") == _step(None)
    assert with_efficiency(hardware_db().get("H800"), "published").efficiency == ""


def test_a_hardware_entry_naming_the_file_prices_as_the_option(sources, tmp_path):
    flat, halved = sources
    datasheet = hardware_db().get("H800")
    text = open(datasheet.path).read()
    text = re.sub(r'^name = .*$', 'name = "H800 halved"', text, count=1, flags=re.M)
    text = re.sub(r'^aliases = .*$', 'aliases = []', text, count=1, flags=re.M)
    entry = tmp_path / "h800-halved.toml"
    entry.write_text(f'efficiency = "{halved}"\n' + text)
    assert tomllib.loads(entry.read_text())["efficiency"] == str(halved)
    by_entry = _step(None, hardware=str(entry))
    assert by_entry == pytest.approx(_step(str(halved)), rel=1e-12)
    # --efficiency published on such an entry sets its own source aside
    assert _step("published", hardware=str(entry)) == pytest.approx(_step(None), rel=1e-12)


class _Halved:
    """A third party's named source."""

    def __init__(self, path):
        self.path = path

    @hookimpl
    def rooflinekit_efficiency_source(self, source, hardware):
        return str(self.path) if source == "team-halved" and hardware.name.startswith("H800") else None


def test_a_plugin_adds_a_named_source(sources):
    flat, halved = sources
    host = PluginHost()
    host.register(_Halved(halved), "halved-source")
    hw = with_efficiency(hardware_db(host).get("H800"), "team-halved", host)
    assert hw.efficiency == str(halved)
    with pytest.raises(Exception, match="no such efficiency source"):
        with_efficiency(hardware_db(host).get("H100"), "team-halved", host)


def test_the_cli_takes_it_and_names_it(sources):
    flat, halved = sources
    runner = CliRunner()
    base = ["profile", GQA, "-O", "layers=2", "-H", "H800", "--phase", "prefill", "--batch", "2", "--context", "512",
            "-f", "json"]
    out = {}
    for name, path in (("flat", flat), ("halved", halved)):
        result = runner.invoke(cli, base + ["--efficiency", str(path)])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        out[name] = report["totals"]["expected_step_s"]
        assert report["deployment"]["efficiency"] == str(path)
        assert any(str(path) in line for line in report["totals"]["expected_conventions"])
    assert out["halved"] == pytest.approx(2 * out["flat"], rel=1e-12)
    text = runner.invoke(cli, base[:-2] + ["--efficiency", str(halved)])
    assert f"efficiency {halved}" in text.output


@pytest.mark.parametrize("value, words", [("nope", "--efficiency 'nope': no such efficiency source"),
                                          ("README.md", "efficiency source README.md")])
def test_a_source_that_is_not_one_is_refused_in_one_line(value, words):
    result = CliRunner().invoke(cli, ["profile", GQA, "-O", "layers=2", "--efficiency", value])
    assert result.exit_code != 0
    assert words in result.output and "Traceback" not in result.output


def test_the_planner_prices_with_the_source_and_agrees_with_profile(sources):
    flat, halved = sources
    host = get_host()
    source = load_source(GQA, OPTIONS, host)
    targets = Targets(256, 64, tpot_s=0.05)
    search = dict(gpus=2, tps=(1,), pps=(1,), max_batch=8, weight_dtypes=("bf16",), kv_dtypes=("bf16",))  # no collectives
    flat_plan = run_plan(source, targets, PlanOptions(**search, efficiency=str(flat)), host=host)
    half_plan = run_plan(source, targets, PlanOptions(**search, efficiency=str(halved)), host=host)
    assert any(str(halved) in n for n in half_plan.notes)
    assert any(n.startswith("no p10-p90 ranges") for n in half_plan.notes)
    assert not any(n.startswith("p10-p90") for n in half_plan.notes)
    assert all(c.tpot_p90_s is None for c in half_plan.configs)
    pairs = [(a, b) for a, b in zip(flat_plan.configs, half_plan.configs, strict=True) if a.step_s is not None]
    assert pairs
    for a, b in pairs:
        assert a.label() == b.label()
        assert b.step_s == pytest.approx(2 * a.step_s, rel=1e-9), b.label()
        again = run_profile(source, Workload("decode", b.batch, b.step_context, b.dtype),
                        Deployment("H800", tp=b.tp, kernels=b.kernels, efficiency=str(halved), memory_fraction=0.9),
                        options=FAST, host=host).report.totals.expected_step_s
        assert b.step_s == pytest.approx(again, rel=1e-6), b.label()


def test_sweep_and_advise_take_it_from_the_api_as_from_the_cli(sources):
    import rooflinekit

    flat, halved = sources
    points = {}
    for name, path in (("flat", flat), ("halved", halved)):
        result = rooflinekit.sweep(GQA, batches=[1, 4], contexts=[512], hardware="H800", options=OPTIONS,
                                   critical=False, efficiency=str(path))
        points[name] = [p.expected_step_s for p in result.points]
        cli_result = CliRunner().invoke(cli, ["sweep", GQA, "-O", "layers=2", "-H", "H800", "-b", "1,4", "-s", "512",
                                              "--no-critical", "--efficiency", str(path), "-f", "json"])
        assert cli_result.exit_code == 0, cli_result.output
        assert [p["expected_step_s"] for p in json.loads(cli_result.stdout)["points"]] == points[name]
    assert points["halved"] == pytest.approx([2 * t for t in points["flat"]], rel=1e-12)
    base = {}
    for name, path in (("flat", flat), ("halved", halved)):
        advice = rooflinekit.advise(GQA, batch=2, context=512, hardware="H800", options=OPTIONS, efficiency=str(path))
        base[name] = advice.to_dict()["baseline"]["expected_step_s"]
    assert base["halved"] == pytest.approx(2 * base["flat"], rel=1e-12)


def test_a_plugin_source_reaches_profile_through_its_host(sources):
    flat, halved = sources
    host = PluginHost()
    host.register(_Halved(halved), "halved-source")
    workload = Workload("prefill", 2, 512, "bf16")
    named = run_profile(load_source(GQA, OPTIONS, host), workload, Deployment("H800", efficiency="team-halved"),
                    options=FAST, host=host).report.totals.expected_step_s
    assert named == pytest.approx(_step(str(halved)), rel=1e-12)


def test_a_rewritten_source_is_read_again(tmp_path, sources):
    flat, halved = sources
    path = tmp_path / "mine.toml"
    path.write_text(flat.read_text())
    first = _step(str(path))
    path.write_text(halved.read_text() + "\n# rewritten\n")
    assert _step(str(path)) == pytest.approx(2 * first, rel=1e-12)


def test_published_on_a_calibrated_entry_and_a_malformed_file_are_refused(tmp_path):
    import dataclasses

    from rooflinekit.core.errors import UserError

    calibrated = dataclasses.replace(hardware_db().get("H800"), calibrated=True)
    with pytest.raises(UserError, match="calibrated entry"):
        with_efficiency(calibrated, "published")
    bad = tmp_path / "bad.toml"
    bad.write_text(TABLE_FILE.read_text().replace("[classes.gemm_large]\n", "[classes.gemm_large_x]\n", 1)
                   + "\n[extra]\nclasses = 1\n")
    bad2 = tmp_path / "bad2.toml"
    bad2.write_text("version = 1\nsmall_gemm_max_rows = 128\nclasses = [1]\n")
    for path in (bad, bad2):
        with pytest.raises(UserError, match=f"efficiency source {path}"):
            with_efficiency(hardware_db().get("H800"), str(path))


def _named(text: str) -> str:
    """The source a rendered report names beside its expected step."""
    return re.search(r"efficiency ([^,;)]+(?: \([^)]*\))?)", text).group(1)


def test_every_report_names_its_source(sources, tmp_path):
    """The text report, the page, advise and plan name the source: published by default, the one
    given, or the hardware entry's own file."""
    flat, halved = sources
    runner = CliRunner()
    base = ["-O", "layers=2", "-H", "H800", "--batch", "2", "--context", "512"]
    text = runner.invoke(cli, ["profile", GQA, *base]).output
    assert _named(text.split("expected step", 1)[1]) == "published"
    text = runner.invoke(cli, ["profile", GQA, *base, "--efficiency", str(flat)]).output
    assert _named(text.split("expected step", 1)[1]) == str(flat)
    page = tmp_path / "r.html"
    assert runner.invoke(cli, ["profile", GQA, *base, "-o", str(page)]).exit_code == 0
    assert "expected step (efficiency published)" in page.read_text()
    advice = runner.invoke(cli, ["advise", GQA, *base]).output
    assert "baseline: expected step" in advice and _named(advice.split("baseline:", 1)[1]) == "published"
    datasheet = hardware_db().get("H800")
    entry = tmp_path / "h800-own.toml"
    own = re.sub(r'^name = .*$', 'name = "H800 own"', open(datasheet.path).read(), count=1, flags=re.M)
    entry.write_text(f'efficiency = "{halved}"\n' + re.sub(r'^aliases = .*$', 'aliases = []', own, count=1, flags=re.M))
    text = runner.invoke(cli, ["profile", GQA, "-O", "layers=2", "-H", str(entry), "--batch", "2", "--context",
                               "512"]).output
    assert _named(text.split("expected step", 1)[1]) == "the hardware entry's own"
    host = get_host()
    options = PlanOptions(gpus=1, tps=(1,), pps=(1,), max_batch=2, modes=("aggregated",), check=False,
                          weight_dtypes=("bf16",), kv_dtypes=("bf16",))
    plan = run_plan(load_source(GQA, OPTIONS, host), Targets(256, 16), options, host=host)
    assert any("efficiency published (docs/accounting.md" in note for note in plan.notes)
