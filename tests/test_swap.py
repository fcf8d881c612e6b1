"""The patches of rooflinekit.core.swap put back exactly what they found, an exception or not, and
nest; and no other module of the package or its built-in plugins restores a patch by hand."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from rooflinekit.core.swap import environment, own_attribute, setting, swapped

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = "ROOFLINEKIT_TEST_SWAP_VARIABLE"


@pytest.fixture
def unset(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)


def test_an_environment_variable_is_put_back_when_the_block_raises(unset, monkeypatch):
    with pytest.raises(RuntimeError), environment(VARIABLE, "1") as found:
        assert (found, os.environ[VARIABLE]) == (None, "1")
        raise RuntimeError
    assert VARIABLE not in os.environ  # absent stays absent
    monkeypatch.setenv(VARIABLE, "mine")
    with pytest.raises(RuntimeError), environment(VARIABLE, "1") as found:
        assert (found, os.environ[VARIABLE]) == ("mine", "1")
        raise RuntimeError
    assert os.environ[VARIABLE] == "mine"
    with environment(VARIABLE, None):  # None: unset for the block
        assert VARIABLE not in os.environ
    assert os.environ[VARIABLE] == "mine"


def test_environment_variables_nest(unset):
    with environment(VARIABLE, "outer"):
        with environment(VARIABLE, "inner") as found:
            assert (found, os.environ[VARIABLE]) == ("outer", "inner")
        assert os.environ[VARIABLE] == "outer"
    assert VARIABLE not in os.environ


class _Setting:
    """A process-wide value behind a getter and a setter, as torch.get_default_dtype and
    torch.set_default_dtype are; the setter logs each value it is given."""

    def __init__(self, value: object):
        self.value, self.log = value, []

    def get(self) -> object:
        return self.value

    def set(self, value: object) -> None:
        self.log.append(value)
        self.value = value


def test_a_setting_is_put_back_when_the_block_raises():
    knob = _Setting("original")
    with pytest.raises(KeyError), setting(knob.get, knob.set, "inside") as found:
        assert (found, knob.value) == ("original", "inside")
        raise KeyError
    assert knob.value == "original" and knob.log == ["inside", "original"]


def test_settings_nest_and_restore_in_order():
    knob = _Setting("original")
    with setting(knob.get, knob.set, "outer"):
        with pytest.raises(ValueError), setting(knob.get, knob.set, "inner") as found:
            assert found == "outer"
            raise ValueError
        assert knob.value == "outer"
    assert knob.log == ["outer", "inner", "outer", "original"]


def test_the_default_dtype_is_a_setting():
    import torch

    found = torch.get_default_dtype()
    with pytest.raises(RuntimeError), setting(torch.get_default_dtype, torch.set_default_dtype, torch.float64):
        assert torch.empty(1).dtype == torch.float64
        raise RuntimeError
    assert torch.get_default_dtype() is found


def test_every_kind_of_patch_nests_with_the_others(unset):
    class Owner:
        attr = "class"

    owner, knob = Owner(), _Setting(0)
    with swapped(owner, "other", 1), own_attribute(owner, "attr", "own"), environment(VARIABLE, "1"), \
            setting(knob.get, knob.set, 1):
        assert (owner.other, owner.attr, os.environ[VARIABLE], knob.value) == (1, "own", "1", 1)
    assert not hasattr(owner, "other") and "attr" not in vars(owner) and owner.attr == "class"
    assert VARIABLE not in os.environ and knob.value == 0


# -- no restore by hand ------------------------------------------------------------------------

#: The one module that puts back what a patch found.
SWAP_MODULE = "rooflinekit/core/swap.py"
#: Attributes set and cleared by hand on objects rooflinekit made itself, not patches: file ->
#: the targets, as written.
OWN_OBJECTS = {
    # the capture's own Recording: the hint of the matmul in progress, cleared after it (once per
    # matmul, thousands per forward)
    "rooflinekit/stages/capture/modes.py": {"rec.matmul_hint"},
}
_ENVIRON_CALLS = {"pop", "update", "setdefault", "clear", "putenv", "unsetenv"}


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _restored(node: ast.AST) -> str | None:
    """What `node` (inside a `finally` or an `__exit__`) writes back, if it writes an attribute,
    an environment variable or a setting: the target or the call, as written."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            for part in ast.walk(target):
                own = isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self"
                if (isinstance(part, ast.Attribute) and not own) or (
                        isinstance(part, ast.Subscript) and _is_environ(part.value)):
                    return ast.unparse(part)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("setattr", "delattr") or name.startswith("set_"):
            return ast.unparse(node)
        if isinstance(func, ast.Attribute) and name in _ENVIRON_CALLS and (
                _is_environ(func.value) or ast.unparse(func.value) == "os"):
            return ast.unparse(node)
    return None


def hand_written_restores(root: Path) -> list[str]:
    """`file:line: what` for each write-back in a `finally` block or an `__exit__` method of the
    package and its built-in plugins under `root`, outside the swap module and OWN_OBJECTS."""
    found = []
    for path in sorted([*(root / "rooflinekit").rglob("*.py"), *(root / "plugins").rglob("*.py")]):
        rel = path.relative_to(root).as_posix()
        if rel == SWAP_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
            if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                blocks = node.finalbody
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__exit__":
                blocks = node.body
            else:
                continue
            for statement in blocks:
                for inner in ast.walk(statement):
                    what = _restored(inner)
                    if what is not None and what not in OWN_OBJECTS.get(rel, ()):
                        found.append(f"{rel}:{inner.lineno}: {what}")
    return sorted(set(found))


def test_no_patch_is_put_back_by_hand():
    """An attribute, environment variable or setting written back in a `finally` (or an
    `__exit__`) outside rooflinekit/core/swap.py is a patch restored by hand: use the swap
    module's context managers instead (`rooflinekit.plugin` exports them to plugins)."""
    found = hand_written_restores(ROOT)
    assert not found, "patches put back by hand (use rooflinekit.core.swap):\n" + "\n".join(found)


def test_the_scan_finds_a_restore_by_hand(tmp_path):
    """The scan above sees each kind of write-back it looks for."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "rooflinekit").mkdir()
    (tmp_path / "rooflinekit" / "patches.py").write_text(
        "import os, sys, torch\n"
        "def block(layer, saved, found):\n"
        "    try:\n"
        "        pass\n"
        "    finally:\n"
        "        sys.dont_write_bytecode = saved\n"
        "        setattr(layer, 'forward', found)\n"
        "        os.environ['X'] = saved\n"
        "        os.environ.pop('X', None)\n"
        "        torch.set_default_dtype(found)\n"
        "        del layer.forward\n"
        "class Patch:\n"
        "    def __exit__(self, *exc):\n"
        "        self.saved = None\n"
        "        sys.stdout = self.stream\n")
    found = hand_written_restores(tmp_path)
    assert {line.split(": ", 1)[0] for line in found} == {
        f"rooflinekit/patches.py:{n}" for n in (6, 7, 8, 9, 10, 11, 15)}, found
