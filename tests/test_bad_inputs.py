"""The bad-input matrix: every command, every kind of bad input, one clear line and nothing lost.

Cases live in tests/bad_inputs/<category>.py (each a CASES list of `Case`); this module runs them.
See tests/bad_inputs/case.py for what every case asserts.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import re
import stat
import textwrap
import types
from pathlib import Path

import bad_inputs as pkg
import pytest
from bad_inputs.case import ROOT, Case
from click.testing import CliRunner

import rooflinekit.core.plugins as plugins_module
from rooflinekit.cli.main import cli
from rooflinekit.core.answers import VALIDATORS
from rooflinekit.core.errors import RooflineError
from rooflinekit.core.plugins import PluginHost, reset_host
from tests import warm_python
from tests.warm_python import PIPE


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


#: The name an inline plugin of a case is registered under (what its warning must name).
PLUGIN = "rkcase"


def _inline_plugin(source: str) -> PluginHost:
    """A fresh plugin host (the built-ins) with the case's plugin module registered as PLUGIN."""
    module = types.ModuleType(f"bad_inputs_{PLUGIN}")
    exec(compile(textwrap.dedent(source), f"<{PLUGIN}>", "exec"), module.__dict__)
    host = PluginHost()
    host.register(module, PLUGIN, "test", "0")
    return host


def _run(case: Case, folder: Path) -> tuple[int, str, str]:
    if case.plugin is not None:
        previous = plugins_module._HOST
        reset_host(_inline_plugin(case.plugin))
        try:
            return _run_cli(case, folder)
        finally:
            reset_host(previous)
    return _run_cli(case, folder)


def _run_cli(case: Case, folder: Path) -> tuple[int, str, str]:
    argv = case.argv(folder)
    env = dict(os.environ, **case.env)
    if case.subprocess:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        p = warm_python.run(["-m", "rooflinekit", *argv], stdout=warm_python.CLOSED if case.stdout_closed else PIPE,
                            stderr=PIPE, text=True, env=env, cwd=folder, input=case.stdin, timeout=240)
        return p.returncode, p.stdout or "", p.stderr
    old = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(cli, argv, env=case.env or None, input=case.stdin)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def test_the_matrix_covers_every_command_and_category():
    assert len(CASES) >= 350, len(CASES)
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    commands = {c.args[0] for c in CASES if c.args}
    assert commands >= {"profile", "sweep", "advise", "compare", "plot", "hardware", "calibrate", "plugins",
                        "plan"}, commands
    hooks = {h for c in CASES if c.plugin for h in re.findall(r"def (rooflinekit_\w+)", c.plugin)}
    assert hooks >= set(VALIDATORS) | {"rooflinekit_module_model"}, set(VALIDATORS) - hooks
    api = {c.id.split("-")[0] + ("_file" if c.id.startswith("profile-file-") else "") for c in CASES if c.api}
    assert api >= {"profile", "profile_file", "capture"}, api


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
    if case.api is not None:
        _check_api(case, folder)
        assert _snapshot(folder) == before, "the case's folder changed"
        return
    code, stdout, stderr = _run(case, folder)
    if case.plugin is not None and case.exit_code is None:  # a plugin fault the run goes on from
        _check_warned(case, code, stdout, stderr)
        assert _snapshot(folder) == before, "the case's folder changed (a file written, replaced or left behind)"
        return
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


def _check_api(case: Case, folder: Path) -> None:
    """A Python API call refused with one RooflineError holding every needle (no other exception)."""
    with pytest.raises(RooflineError) as raised:
        case.api(folder)
    message = str(raised.value)
    assert "\n" not in message.strip(), message
    for needle in case.needles:
        assert needle in message, message


def _check_warned(case: Case, code: int, stdout: str, stderr: str) -> None:
    """A plugin fault: the run went on (exit 0, a report out, no traceback) and exactly one warning
    names the plugin, holding every needle."""
    assert code == 0, f"exit {code}; stderr: {stderr}"
    assert "Traceback" not in stderr + stdout, stderr
    assert stdout.strip(), "no report on stdout"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert not [line for line in lines if line.startswith("rooflinekit: error: ")], stderr
    named = [line for line in lines if line.startswith("rooflinekit: warning: ") and f"plugin '{PLUGIN}'" in line]
    assert len(named) == 1, f"expected one warning naming plugin '{PLUGIN}', got:\n{stderr}"
    for needle in case.needles:
        assert needle in named[0], named[0]
