"""Output files: the format an `-o` extension names, interrupts and signals that leave an existing
report untouched, OS errors that name the file, huge numbers read back, and every report kind
recognised by plot and compare.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests import warm_python
from tests.conftest import EXAMPLES, ROOT, one_line_error

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


# -- 3. OS errors name the file, and leave nothing half-written ----------------------------------------


def _child_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")


def _limit_file_size(limit: int):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def test_a_file_size_limit_is_one_line_naming_the_file(tmp_path, profile_json):
    out = tmp_path / "out.json"
    out.write_text("old report\n")
    proc = subprocess.run([sys.executable, "-m", "rooflinekit", "compare", str(profile_json), str(profile_json),
                           "-o", str(out)], cwd=tmp_path, env=_child_env(), capture_output=True, text=True,
                          timeout=120, preexec_fn=_limit_file_size(2000))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("rooflinekit: error: cannot write ") and str(out) in lines[0], lines[0]
    assert "File too large" in lines[0] and "Errno" not in lines[0]
    assert out.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary left


class _FullDisk(io.TextIOWrapper):
    def write(self, text):
        super().write(text[: len(text) // 2])
        self.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("args", [
    ["profile", str(GQA), *TINY, "-f", "json"],
    ["compare", "{p}", "{p}"],
])
def test_a_full_disk_is_one_line_naming_the_file(invoke, tmp_path, monkeypatch, profile_json, args):
    real = os.fdopen

    def fdopen(fd, mode="r", *a, **kw):
        fh = real(fd, mode, *a, **kw)
        if "w" in mode and "b" not in mode:
            return _FullDisk(fh.detach(), encoding="utf-8")
        return fh

    out = tmp_path / "out.txt"
    out.write_text("old report\n")
    monkeypatch.setattr(os, "fdopen", fdopen)
    result = invoke(*[a.format(p=profile_json) for a in args], "-o", out)
    one_line_error(result, f"cannot write {out}: No space left on device")
    assert out.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_full_disk_under_a_chart_is_one_line(invoke, tmp_path, monkeypatch, profile_json):
    real = os.fdopen

    class FullBinary(io.BufferedWriter):
        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fdopen(fd, mode="r", *a, **kw):
        if mode == "wb":
            return FullBinary(io.FileIO(fd, "w"))
        return real(fd, mode, *a, **kw)

    chart = tmp_path / "p.png"
    monkeypatch.setattr(os, "fdopen", fdopen)
    result = invoke("plot", profile_json, "-o", chart)
    one_line_error(result, f"cannot write {chart}: No space left on device")
    assert list(tmp_path.iterdir()) == []


# -- 2. Ctrl-C and SIGTERM leave an existing -o file untouched ------------------------------------------

SLOW = '''import time

import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        print("slow forward", flush=True)  # to stderr: what a model prints stays off the report
        time.sleep(0.4)
        return self.proj(x)


def build_model():
    return M()


def make_inputs(batch, context, phase):
    return (torch.zeros(batch, 8),)
'''


def _interrupt(tmp_path, args, sig, forwards: int) -> tuple[int, list[str]]:
    """Run rooflinekit in a child, send `sig` once `forwards` forwards of the slow model have
    begun (each prints a line on stderr), and return its exit status and stderr lines."""
    (tmp_path / "m.py").write_text(SLOW)

    # a child of its own whose Ctrl-C is python's default (KeyboardInterrupt), as from a terminal
    proc = warm_python.Popen(["-m", "rooflinekit", *args], cwd=tmp_path, env=_child_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while sum("slow forward" in line for line in lines) < forwards and proc.poll() is None:
        assert time.monotonic() < deadline, "".join(lines)
        time.sleep(0.02)
    proc.send_signal(sig)
    code = proc.wait(timeout=120)
    reader.join(10)
    return code, [line.rstrip("\n") for line in lines if "slow forward" not in line and line.strip()]


SWEEP = ["sweep", "m.py", "-H", "H800", "-b", "1,2,3,4,5,6,7,8", "-s", "64", "--no-fit", "--no-critical"]


@pytest.mark.parametrize("sig,status,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_mid_sweep_keeps_the_report_and_writes_the_points_done_beside_it(tmp_path, sig, status, word):
    out, chart = tmp_path / "out.json", tmp_path / "chart.png"
    out.write_text("the last report\n")
    code, lines = _interrupt(tmp_path, [*SWEEP, "-o", "out.json", "--plot", "chart.png"], sig, forwards=3)
    assert code == status, lines
    assert out.read_text() == "the last report\n"
    assert not chart.exists()
    partial = json.loads((tmp_path / "out.partial.json").read_text())
    assert partial["interrupted"] and 2 <= len(partial["points"]) < 8
    assert (tmp_path / "chart.partial.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert lines[0].startswith(f"rooflinekit: error: {word} after {len(partial['points'])} of 8 points")
    assert "out.partial.json" in lines[0] and "chart.partial.png" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart.partial.png", "m.py", "out.json", "out.partial.json"]


@pytest.mark.parametrize("sig,status,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_mid_profile_leaves_the_report_untouched(tmp_path, sig, status, word):
    out = tmp_path / "out.json"
    out.write_text("the last report\n")
    code, lines = _interrupt(tmp_path, ["profile", "m.py", "-H", "H800", "-o", "out.json"], sig, forwards=1)
    assert code == status, lines
    assert lines == [f"rooflinekit: error: {word}"]
    assert out.read_text() == "the last report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py", "out.json"]


def test_partial_path():
    from rooflinekit.core.files import partial_path

    assert partial_path("out.json") == "out.partial.json"
    assert partial_path("dir/report") == "dir/report.partial"


# -- 5. every report kind recognised; plot draws what it can --------------------------------------------


@pytest.fixture(scope="module")
def reports(tmp_path_factory, profile_json):
    """One report of every kind rooflinekit writes (small: a one-layer llama, a 2 x 2 sweep, a
    plan on 2 GPUs)."""
    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    folder = tmp_path_factory.mktemp("kinds")
    runs = {
        "sweep": ["sweep", str(GQA), *TINY, "-b", "1,2", "-s", "64", "--no-critical", "-f", "json"],
        "advise": ["advise", str(GQA), *TINY, "-f", "json"],
        "compare": ["compare", str(profile_json), str(profile_json), "-f", "json"],
        "plan": ["plan", str(GQA), *TINY[:-2], "--gpus", "2", "--isl", "128", "--osl", "16", "--tp", "1,2",
                 "--pp", "1", "--max-batch", "64", "--no-check", "-f", "json"],
    }
    paths = {"profile": profile_json}
    for kind, args in runs.items():
        paths[kind] = folder / f"{kind}.json"
        result = CliRunner().invoke(cli, [*args, "-o", str(paths[kind])])
        assert result.exit_code == 0, result.stderr
    return paths


@pytest.mark.parametrize("kind", ["sweep", "advise", "compare", "plan"])
def test_compare_names_the_kind_it_got_and_what_it_takes(invoke, reports, kind):
    result = invoke("compare", reports["profile"], reports[kind])
    one_line_error(result, "compare takes two profile reports", f"got a{'n' if kind == 'advise' else ''} {kind} "
                   f"report: {reports[kind]}")


def test_report_kinds_are_all_recognised(reports):
    from rooflinekit.outputs.report_io import REPORT_KINDS, report_kind

    assert sorted(REPORT_KINDS) == sorted(reports)
    for kind, path in reports.items():
        assert report_kind(json.loads(path.read_text())) == kind


@pytest.mark.parametrize("kind,what", [("profile", "points"), ("sweep", "points"), ("advise", "levers"),
                                       ("plan", "configurations")])
def test_plot_draws_every_report_with_a_chart(invoke, tmp_path, reports, kind, what):
    chart = tmp_path / f"{kind}.png"
    result = invoke("plot", reports[kind], "-o", chart)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {chart} (" in result.stderr and f" {what})" in result.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_refuses_a_comparison_in_one_line(invoke, tmp_path, reports):
    result = invoke("plot", reports["compare"], "-o", tmp_path / "c.png")
    one_line_error(result, "plot draws profile, sweep, advise and plan reports", "got a compare report")
    assert not (tmp_path / "c.png").exists()


@pytest.mark.parametrize("kind", ["advise", "plan"])
def test_plot_ops_on_a_chart_without_ops(invoke, tmp_path, reports, kind):
    result = invoke("plot", reports[kind], "--plot-ops", "-o", tmp_path / "x.png")
    one_line_error(result, "--plot-ops applies to a profile report", f"{kind} report")


def test_plot_of_a_plan_with_a_missing_field_is_one_line(invoke, tmp_path, reports):
    data = json.loads(reports["plan"].read_text())
    del data["configs"]
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(data))
    one_line_error(invoke("plot", bad, "-o", tmp_path / "x.png"), "not a usable rooflinekit plan report", "configs")


# -- 4. huge numbers read back: drawn and printed, or refused in one line --------------------------------


def _with_number(path, tmp_path, old: str, new: str, name: str = "huge.json"):
    """The report at `path` with the first JSON text `old` replaced by `new` (a raw number)."""
    text = path.read_text()
    assert old in text, old
    out = tmp_path / name
    out.write_text(text.replace(old, new, 1))
    return out


@pytest.mark.parametrize("number,shown", [("1" + "0" * 400, "an integer of about 401 digits"),
                                          ("1e300", "1e+300"), ("-1" + "0" * 400, "an integer of about 401 digits")])
def test_huge_flops_in_a_profile_report_are_one_line(invoke, tmp_path, profile_json, number, shown):
    flops = json.loads(profile_json.read_text())["totals"]["flops"]
    huge = _with_number(profile_json, tmp_path, f'"flops": {flops!r}', f'"flops": {number}')
    for result in (invoke("plot", huge, "-o", tmp_path / "x.png"), invoke("compare", profile_json, huge)):
        one_line_error(result, str(huge), "totals.flops", shown)
    assert not (tmp_path / "x.png").exists()


def test_a_huge_batch_in_a_sweep_report_is_one_line(invoke, tmp_path, reports):
    huge = _with_number(reports["sweep"], tmp_path, '"batch": 1,', '"batch": 1' + "0" * 400 + ",")
    one_line_error(invoke("plot", huge, "-o", tmp_path / "x.png"), "points[0].batch: implausibly large")


def test_a_number_past_pythons_digit_limit_is_one_line(invoke, tmp_path, profile_json):
    flops = json.loads(profile_json.read_text())["totals"]["flops"]
    huge = _with_number(profile_json, tmp_path, f'"flops": {flops!r}', '"flops": 1' + "0" * 5000)
    one_line_error(invoke("compare", profile_json, huge), str(huge), "not a rooflinekit report",
                   f"({sys.get_int_max_str_digits()} digits)")


@pytest.mark.parametrize("kind,field", [("advise", "tokens_per_s"), ("plan", "tokens_per_s_per_gpu")])
def test_huge_numbers_in_advise_and_plan_reports_are_one_line(invoke, tmp_path, reports, kind, field):
    data = json.loads(reports[kind].read_text())
    row = data["levers"][0] if kind == "advise" else data["configs"][0]
    row[field] = 1e300
    huge = tmp_path / f"{kind}.json"
    huge.write_text(json.dumps(data))
    one_line_error(invoke("plot", huge, "-o", tmp_path / "x.png"), str(huge), f"{field}: implausibly large")


@pytest.mark.parametrize("scale", [1e20, 1e-25])
def test_large_and_small_numbers_within_bounds_are_drawn_and_printed(invoke, tmp_path, profile_json, scale):
    data = json.loads(profile_json.read_text())
    for row in [data["totals"], *data["modules"]]:
        row["flops"] *= scale
    report = tmp_path / "r.json"
    report.write_text(json.dumps(data))
    assert invoke("plot", report, "-o", tmp_path / "x.svg").exit_code == 0
    result = invoke("compare", report, profile_json)
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("field,value,needle", [
    ("pareto", [1e29], "pareto[0]: expected an integer"),
    ("pareto", [99999], "pareto 99999 not an index into configs"),
    ("best_index", -1, "best_index -1 not an index into configs"),
])
def test_a_plan_with_a_bad_index_is_one_line(invoke, tmp_path, reports, field, value, needle):
    data = json.loads(reports["plan"].read_text())
    data[field] = value
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(data))
    one_line_error(invoke("plot", bad, "-o", tmp_path / "x.png"), str(bad), needle)
    assert not (tmp_path / "x.png").exists()
