"""The command line: the main job works, and bad input gets one clear line and no output file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT

GQA = EXAMPLES / "llama_gqa.py"


def _one_line_error(result, *needles):
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rooflinekit: error: ")
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_profile_table_for_gqa_example(invoke):
    result = invoke("profile", GQA, "--hardware", "H800", "--phase", "decode", "--batch", "4",
                    "--context", "32768", "-O", "layers=1")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "H800 SXM5" in out and "decode, batch 4, context 32768" in out
    assert "layers.0.self_attn" in out and "memory" in out


def test_profile_json_schema(invoke, tmp_path):
    out = tmp_path / "r.json"
    result = invoke("profile", GQA, "-O", "layers=1", "--context", "128", "-f", "json", "-o", out)
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["schema_version"]
    assert {"phase", "batch", "context", "dtype", "device"} <= set(report["workload"])
    assert {"name", "peak_flops", "bandwidth", "ridge"} <= set(report["hardware"])
    assert {"flops", "bytes", "intensity", "attainable_flops", "bound", "time_bound_s",
            "mfu_bound"} <= set(report["totals"])
    for m in report["modules"]:
        assert {"name", "flops", "bytes", "intensity", "bound", "time_bound_s"} <= set(m)
    assert report["ops"] and isinstance(report["uncounted_ops"], list)
    # the whole step is the sum of its ops and of its modules
    assert report["totals"]["flops"] == sum(o["flops"] for o in report["ops"])
    assert report["totals"]["bytes"] == pytest.approx(sum(m["bytes"] for m in report["modules"]))
    t = report["totals"]
    assert t["time_bound_s"] == pytest.approx(
        max(t["flops"] / report["hardware"]["peak_flops"], t["bytes"] / report["hardware"]["bandwidth"]))
    assert t["tokens_per_s"] == pytest.approx(1 / t["predicted_step_s"])


@pytest.mark.parametrize("fmt,marker", [("csv", "name,flops,bytes"), ("markdown", "| module")])
def test_other_formats(invoke, fmt, marker):
    result = invoke("profile", GQA, "-O", "layers=1", "--context", "64", "-f", fmt)
    assert result.exit_code == 0, result.stderr
    assert marker in result.stdout


def test_module_depth_and_grouping(invoke, tmp_path):
    out = tmp_path / "r.json"
    invoke("profile", GQA, "-O", "layers=2", "--context", "64", "--depth", "2", "--group-layers",
           "-f", "json", "-o", out)
    names = {m["name"] for m in json.loads(out.read_text())["modules"]}
    assert "layers.*" in names and "layers.0" not in names


@pytest.fixture
def bad_models(tmp_path):
    files = {
        "syntax.py": "def build_model(:\n",
        "nofuncs.py": "x = 1\n",
        "raises.py": "def build_model():\n    raise ValueError('no weights for you')\n"
                     "def make_inputs(b, c, p):\n    return ()\n",
        "wrongtype.py": "def build_model():\n    return 42\ndef make_inputs(b, c, p):\n    return ()\n",
        "badinputs.py": "import torch\ndef build_model():\n    return torch.nn.Linear(2, 2)\n"
                        "def make_inputs(b, c, p):\n    return 5\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "args,needles",
    [
        (["missing.py"], ["not found"]),
        (["syntax.py"], ["syntax error", "syntax.py:1"]),
        (["nofuncs.py"], ["build_model", "make_inputs"]),
        (["raises.py"], ["raises.py:2", "ValueError: no weights for you"]),
        (["wrongtype.py"], ["returned int", "nn.Module"]),
        (["badinputs.py"], ["make_inputs() returned int"]),
        ([str(GQA), "--hardware", "H8000"], ["unknown hardware", "did you mean"]),
        ([str(GQA), "--dtype", "fp64x"], ["unknown dtype"]),
        ([str(GQA), "--phase", "train"], ["unknown phase"]),
        ([str(GQA), "--batch", "0"], ["batch must be at least 1"]),
        ([str(GQA), "--context", "0"], ["context must be at least 1"]),
        ([str(GQA), "-O", "nonsense=1"], ["nonsense", "not accepted"]),
        ([str(GQA), "-o", "/nonexistent/dir/r.json"], ["cannot write"]),
    ],
)
def test_bad_input_one_clear_line(invoke, bad_models, monkeypatch, args, needles):
    monkeypatch.chdir(bad_models)
    result = invoke("profile", *args, "-f", "json", "-o", "out.json") if "-o" not in args else invoke("profile", *args)
    _one_line_error(result, *needles)
    assert not (bad_models / "out.json").exists()
    assert not list(bad_models.glob(".out.json.*"))


def test_existing_output_survives_a_failed_run(invoke, tmp_path):
    out = tmp_path / "r.json"
    out.write_text("precious")
    result = invoke("profile", str(tmp_path / "missing.py"), "-o", out)
    assert result.exit_code != 0
    assert out.read_text() == "precious"


def test_debug_shows_traceback(invoke, bad_models, monkeypatch):
    monkeypatch.chdir(bad_models)
    result = invoke("profile", "raises.py", "--debug")
    assert result.exit_code != 0 and result.exception is not None


def test_hardware_commands(invoke):
    listed = invoke("hardware", "list")
    assert listed.exit_code == 0 and "H800 SXM5" in listed.stdout and "MI300X" in listed.stdout
    shown = invoke("hardware", "show", "nvidia h800")
    assert shown.exit_code == 0 and "295.3" in shown.stdout and "989" in shown.stdout
    _one_line_error(invoke("hardware", "show", "H8OO"), "unknown hardware")


def test_help_documents_the_contract(invoke):
    text = invoke("profile", "--help").stdout
    assert "build_model" in text and "make_inputs" in text and "context-1" in text.replace("CONTEXT-1", "context-1")


def test_real_process_exit_code_and_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rooflinekit", "profile", str(tmp_path / "nope.py")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"rooflinekit: error: model file not found: {tmp_path / 'nope.py'}"


def test_output_file_mode_and_symlink(invoke, tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        out = tmp_path / "r.csv"
        assert invoke("profile", GQA, "-O", "layers=1", "--context", "64", "-f", "csv", "-o", out).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        real = tmp_path / "real.csv"
        real.write_text("old")
        link = tmp_path / "link.csv"
        link.symlink_to(real)
        assert invoke("profile", GQA, "-O", "layers=1", "--context", "64", "-f", "csv", "-o", link).exit_code == 0
        assert link.is_symlink() and real.read_text().startswith("name,flops")
    finally:
        os.umask(old)


def test_unwritable_special_folder_fails_before_work(invoke):
    result = invoke("profile", GQA, "-O", "layers=1", "-o", "/proc/rooflinekit-test.txt")
    _one_line_error(result, "cannot write")


@pytest.mark.parametrize("args,needle", [
    (["profile"], "Missing argument 'MODEL'"),
    (["profile", str(GQA), "--top", "-3"], "--top"),
    (["profile", str(GQA), "--batch", "four"], "--batch"),
    (["profile", str(GQA), "--tp", "0"], "--tp"),
    (["nonsense"], "No such command"),
])
def test_usage_errors_are_one_line(invoke, args, needle):
    _one_line_error(invoke(*args), needle)


def test_bare_command_shows_help(invoke):
    result = invoke()
    assert result.exit_code == 0 and "profile" in result.stdout
