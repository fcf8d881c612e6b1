"""Output files: the format an `-o` extension names, interrupts and signals that leave an existing
report untouched, OS errors that name the file, huge numbers read back, and every report kind
recognised by plot and compare.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.conftest import EXAMPLES, one_line_error

GQA = EXAMPLES / "llama_gqa.py"
TINY = ["-O", "layers=1", "-O", "hidden=256", "-O", "heads=8", "-O", "kv_heads=2", "-O", "head_dim=32",
        "-O", "intermediate=512", "-O", "vocab=1000", "-H", "H800"]


@pytest.fixture(scope="module")
def profile_json(tmp_path_factory):
    """A small profile report, written once for the module."""
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    path = tmp_path_factory.mktemp("reports") / "p.json"
    result = CliRunner().invoke(cli, ["profile", str(GQA), *TINY, "-f", "json", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return path


# -- 1. the format follows the extension of -o --------------------------------------------------------


def _is_markdown(text: str) -> bool:
    return any(line.startswith("| ") for line in text.splitlines())


@pytest.mark.parametrize("name,check", [
    ("t.json", lambda text: json.loads(text)["kind"] == "profile"),
    ("T.JSON", lambda text: json.loads(text)["kind"] == "profile"),
    ("t.csv", lambda text: list(csv.reader(io.StringIO(text)))[0][:2] == ["name", "flops"]),
    ("t.md", _is_markdown),
    ("t.htm", lambda text: text.lstrip().lower().startswith("<!doctype html")),
    ("t.txt", lambda text: text.startswith("model: llama_gqa") and "\nhardware: " in text),
])
def test_profile_format_follows_the_extension(invoke, tmp_path, name, check):
    out = tmp_path / name
    result = invoke("profile", GQA, *TINY, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert check(out.read_text()), out.read_text()[:300]


def test_f_wins_over_the_extension(invoke, tmp_path):
    out = tmp_path / "t.json"
    result = invoke("profile", GQA, *TINY, "-f", "csv", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_text().startswith("name,flops")


def test_compare_format_follows_the_extension(invoke, tmp_path, profile_json):
    out = tmp_path / "c.json"
    result = invoke("compare", profile_json, profile_json, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["kind"] == "compare"
    md = tmp_path / "c.md"
    assert invoke("compare", profile_json, profile_json, "-o", md).exit_code == 0
    assert _is_markdown(md.read_text())


@pytest.mark.parametrize("command,name,writes", [
    (["compare", "{p}", "{p}"], "c.csv", "table (.txt), json (.json), markdown (.md), html (.html)"),
    (["plan", str(GQA), "--gpus", "1"], "plan.md", "table (.txt), json (.json), csv (.csv), html (.html)"),
    (["profile", str(GQA), *TINY], "chart.png", "markdown (.md), html (.html)"),
])
def test_an_extension_the_command_cannot_write_is_one_line(invoke, tmp_path, profile_json, command, name, writes):
    out = tmp_path / name
    args = [a.format(p=profile_json) for a in command]
    result = invoke(*args, "-o", out)
    one_line_error(result, "cannot write", name, writes)
    assert not out.exists()


def test_sweep_csv_by_extension(invoke, tmp_path):
    out = tmp_path / "s.csv"
    result = invoke("sweep", GQA, *TINY, "-b", "1,2", "-s", "64", "--no-critical", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_text().startswith("batch,context")


def test_plan_has_no_format_rule_of_its_own():
    import rooflinekit.cli.plan as plan_cli

    assert not hasattr(plan_cli, "_format_of")
