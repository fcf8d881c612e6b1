"""The bad-input matrix: every command, every kind of bad input, one clear line and nothing lost.

Cases live in tests/bad_inputs/<category>.py (each a CASES list of `Case`); this module runs them.
See tests/bad_inputs/case.py for what every case asserts.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import stat
import subprocess
import sys
from pathlib import Path

import bad_inputs as pkg
import pytest
from bad_inputs.case import ROOT, Case
from click.testing import CliRunner

from rooflinekit.cli.main import cli


def _all_cases() -> list[Case]:
    cases = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name == "case":
            continue
        cases += importlib.import_module(f"bad_inputs.{info.name}").CASES
    return cases


CASES = _all_cases()


def _snapshot(folder: Path) -> dict[str, object]:
    """Every entry under `folder` with what identifies its content (regular files: a hash)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            out[str(path)] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode))
        elif stat.S_ISLNK(st.st_mode):
            out[str(path)] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            out[str(path)] = ("dir",)
        else:
            out[str(path)] = ("special", stat.S_IFMT(st.st_mode))
    return out


def _run(case: Case, folder: Path) -> tuple[int, str, str]:
    argv = case.argv(folder)
    env = dict(os.environ, **case.env)
    if case.subprocess:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        p = subprocess.run([sys.executable, "-m", "rooflinekit", *argv], capture_output=True, text=True, env=env,
                           cwd=folder, input=case.stdin, timeout=240)
        return p.returncode, p.stdout, p.stderr
    old = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(cli, argv, env=case.env or None, input=case.stdin)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def test_the_matrix_covers_every_command_and_category():
    assert len(CASES) >= 80, len(CASES)
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    commands = {c.args[0] for c in CASES if c.args}
    assert commands >= {"profile", "sweep", "advise", "compare", "plot", "hardware", "calibrate", "plugins"}, commands


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.category}:{c.id}", marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    folder = tmp_path / "case"
    folder.mkdir()
    for name, content in case.files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.write_bytes if isinstance(content, bytes) else target.write_text)(content)
    if case.setup:
        case.setup(folder)
    before = _snapshot(folder)
    code, stdout, stderr = _run(case, folder)
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("rooflinekit: error: ")]
    assert code != 0, f"exit 0; stderr: {stderr}"
    if case.exit_code is not None:
        assert code == case.exit_code, stderr
    assert "Traceback" not in stderr + stdout, stderr
    assert len(errors) == 1 and lines[-1] == errors[0], f"expected one error line last, got:\n{stderr}"
    for needle in case.needles:
        assert needle in errors[0], errors[0]
    assert stdout == "", f"stdout not empty: {stdout[:500]}"
    assert _snapshot(folder) == before, "the case's folder changed (a file written, replaced or left behind)"
