"""Outputs that must succeed safely, and the process's own stdout.

`-o /dev/null`, a FIFO, a symlink to a device: written through, never renamed over. What a model
file or a plugin prints (Python or native) goes to stderr, so `-f json` on stdout stays JSON.
A reader of stdout that goes away (`| head`) ends the run quietly with 141; a full stdout is one line.
(The failures: tests/bad_inputs/outputs.py and process.py in the bad-input matrix.)
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rooflinekit.core.errors import OutputError
from rooflinekit.core.files import check_writable, write_atomic
from rooflinekit.core.stdio import stdout_to_stderr
from tests import warm_python
from tests.conftest import EXAMPLES, ROOT

GQA = EXAMPLES / "llama_gqa.py"
TINY = ["-O", "layers=1", "-O", "hidden=256", "-O", "heads=8", "-O", "kv_heads=2", "-O", "head_dim=32",
        "-O", "intermediate=512", "-O", "vocab=1000", "-H", "H800"]


def _is_char_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


def _child(args, cwd, **kw) -> subprocess.CompletedProcess:
    """`python -m rooflinekit ARGS` in a child process of its own (tests/warm_python.py)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), kw.pop("pythonpath", "")])),
               PYTHONDONTWRITEBYTECODE="1")
    return warm_python.run(["-m", "rooflinekit", *map(str, args)], cwd=cwd, env=env, timeout=240, **kw)


class _Reader(threading.Thread):
    """Opens a FIFO for reading (unblocking the writer's open) and keeps everything written."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.data = path, b""

    def run(self):
        with open(self.path, "rb") as fh:
            self.data = fh.read()


# -- write through anything that is not a regular file -----------------------------------------------


def test_dev_null_stays_a_device(invoke):
    assert _is_char_device("/dev/null")
    result = invoke("profile", GQA, *TINY, "-f", "json", "-o", "/dev/null")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "" and "wrote /dev/null" in result.stderr
    assert _is_char_device("/dev/null")


def test_symlink_to_a_device_is_written_through(invoke, tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to("/dev/null")
    chart = tmp_path / "chart.png"
    chart.symlink_to("/dev/null")
    result = invoke("profile", GQA, *TINY, "-f", "json", "-o", link, "--plot", chart)
    assert result.exit_code == 0, result.stderr
    for path in (link, chart):
        assert path.is_symlink() and os.readlink(path) == "/dev/null"
    assert _is_char_device("/dev/null")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart.png", "out.json"]  # no temporary left


def test_a_fifo_receives_the_report(invoke, tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = _Reader(fifo)
    reader.start()
    result = invoke("profile", GQA, *TINY, "-f", "json", "-o", fifo)
    reader.join(30)
    assert result.exit_code == 0, result.stderr
    assert json.loads(reader.data)["workload"]["batch"] == 1
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["report.fifo"]


def test_compare_into_a_fifo(invoke, tmp_path):
    report = tmp_path / "a.json"
    assert invoke("profile", GQA, *TINY, "-f", "json", "-o", report).exit_code == 0
    fifo = tmp_path / "cmp.fifo"
    os.mkfifo(fifo)
    reader = _Reader(fifo)
    reader.start()
    result = invoke("compare", report, report, "-f", "json", "-o", fifo)
    reader.join(30)
    assert result.exit_code == 0, result.stderr
    assert json.loads(reader.data)["kind"] == "compare"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_write_atomic_keeps_special_files_and_replaces_regular_ones(tmp_path):
    check_writable("/dev/null")
    write_atomic("/dev/null", "x")
    write_atomic("/dev/null", b"x")
    assert _is_char_device("/dev/null")
    link = tmp_path / "null.toml"
    link.symlink_to("/dev/null")
    write_atomic(str(link), "x")
    assert link.is_symlink() and _is_char_device("/dev/null")
    regular = tmp_path / "r.txt"
    regular.write_text("old")
    inode = regular.stat().st_ino
    write_atomic(str(regular), "new")
    assert regular.read_text() == "new" and regular.stat().st_ino != inode  # renamed over, atomically
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null.toml", "r.txt"]


def test_a_socket_is_refused_with_one_line(tmp_path):
    import socket

    path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        with pytest.raises(OutputError, match="cannot write .*s.json"):
            write_atomic(str(path), "x")
        assert stat.S_ISSOCK(path.lstat().st_mode)
    finally:
        sock.close()


# -- stdout: what user code and plugins print stays off the report ------------------------------------

NOISY = '''import ctypes
import os
import sys

import torch
from torch import nn

print("noise: import")
os.write(1, b"noise: native write at import\\n")


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        print("noise: forward")
        ctypes.CDLL(None).printf(b"noise: printf in forward\\n")
        return self.proj(x)


def build_model():
    print("noise: build")
    sys.stdout.write("noise: sys.stdout.write\\n")
    return M()


def make_inputs(batch, context, phase):
    print("noise: inputs")
    return (torch.zeros(batch, 8),)
'''

NOISY_PLUGIN = {
    "noisy_plugin.py": ("import os\n\nfrom rooflinekit.plugin import hookimpl\n\nprint('noise: plugin import')\n\n\n"
                        "@hookimpl\ndef rooflinekit_hardware_dirs():\n    print('noise: plugin hook')\n"
                        "    os.write(1, b'noise: plugin native\\n')\n"),
    "noisy_plugin-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: noisy-plugin\nVersion: 0.1\n",
    "noisy_plugin-0.1.dist-info/entry_points.txt": "[rooflinekit]\nnoisy = noisy_plugin\n",
}


def _noisy_setup(tmp_path: Path) -> str:
    (tmp_path / "m.py").write_text(NOISY)
    site = tmp_path / "site"
    for name, text in NOISY_PLUGIN.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    return str(site)


@pytest.mark.parametrize("command", [
    ["profile", "m.py", "-H", "H800", "-f", "json"],
    ["profile", "m.py", "-H", "H800", "-f", "json", "--device", "cpu", "--measure", "--warmup", "0", "--repeats", "1"],
    ["sweep", "m.py", "-H", "H800", "-b", "1,2", "-s", "64", "--no-critical", "-f", "json"],
    ["hardware", "list", "-f", "json"],
    ["plugins", "-f", "json"],
])
def test_prints_of_the_model_and_plugins_go_to_stderr(tmp_path, command):
    site = _noisy_setup(tmp_path)
    proc = _child(command, tmp_path, pythonpath=site, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # nothing else on stdout
    assert "noise" not in proc.stdout
    assert "noise: plugin import" in proc.stderr
    if command[0] in ("profile", "sweep"):
        for what in ("import", "native write at import", "build", "sys.stdout.write", "inputs", "forward",
                     "printf in forward"):
            assert f"noise: {what}" in proc.stderr, what
    if command[0] != "plugins":
        assert "noise: plugin hook" in proc.stderr and "noise: plugin native" in proc.stderr


def test_stdout_to_stderr_nests_and_restores(capfd):
    before = sys.stdout
    with stdout_to_stderr():
        print("inner 1")
        with stdout_to_stderr():
            os.write(1, b"inner 2\n")
        replaced = sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - user code replacing sys.stdout
    replaced.close()
    assert sys.stdout is before
    print("outer")
    os.write(1, b"outer fd\n")
    out, err = capfd.readouterr()
    assert out == "outer\nouter fd\n"
    assert "inner 1" in err and "inner 2" in err


# -- stdout closed, broken or full ------------------------------------------------------------------------


def test_broken_pipe_exits_quietly_with_141(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written (`| head -c0`)
    try:
        proc = _child(["profile", GQA, *TINY, "-f", "json"], tmp_path, stdout=write_end, stderr=subprocess.PIPE,
                      text=True)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_head_of_a_large_report_exits_quietly(tmp_path):
    """A report larger than a pipe's buffer, read by `head -c1`: 141 (or 0 had it all fit), no traceback."""
    read_end, write_end = os.pipe()
    head = subprocess.Popen(["head", "-c1"], stdin=read_end, stdout=subprocess.DEVNULL)
    os.close(read_end)
    try:
        proc = _child(["profile", GQA, "-O", "layers=4", "-H", "H800", "-f", "csv", "--top", "0"], tmp_path,
                      stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert head.wait(timeout=60) == 0
    assert proc.returncode in (141, 0), proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_stdout_closed_by_the_shell_is_one_line(tmp_path):
    proc = _child(["profile", GQA, "-O", "layers=1", "-H", "H800"], tmp_path, stdout=warm_python.CLOSED,
                  stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rooflinekit: error: stdout is closed: nothing to write the output to "
                                   "(redirect it to a file, or use -o FILE)")


def test_stdout_closed_with_an_output_file_still_works(tmp_path):
    proc = _child(["profile", GQA, "-O", "layers=1", "-H", "H800", "-f", "json", "-o", "r.json"], tmp_path,
                  stdout=warm_python.CLOSED, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["workload"]["batch"] == 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_stdout_is_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        proc = _child(["profile", GQA, *TINY, "-f", "json"], tmp_path, stdout=full, stderr=subprocess.PIPE,
                      text=True)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rooflinekit: error: cannot write the report to stdout"), proc.stderr
    assert "No space left on device" in lines[0]


def test_profiling_a_model_file_writes_nothing_beside_it(tmp_path, monkeypatch):
    """No __pycache__ beside the user's model file, whatever the interpreter's bytecode setting."""
    import shutil
    import sys as _sys

    from click.testing import CliRunner

    from rooflinekit.cli.main import cli

    model = tmp_path / "m.py"
    shutil.copy(Path(__file__).resolve().parent.parent / "examples" / "llama_gqa.py", model)
    monkeypatch.setattr(_sys, "dont_write_bytecode", False)
    result = CliRunner().invoke(cli, ["profile", str(model), "-O", "layers=1", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]
    assert _sys.dont_write_bytecode is False  # restored
