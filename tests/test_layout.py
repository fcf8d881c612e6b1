"""The layout is the architecture: imports point down (import-linter), no import cycles, and no
function-level imports but of optional dependencies."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rooflinekit"
#: Imported only where used: not needed by every installation.
OPTIONAL = {"transformers", "matplotlib", "pynvml", "pandas", "tomli", "tomllib"}


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports not found: pip install -e '.[test]' (import-linter)")
    result = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_import_cycles():
    """None in rooflinekit and its built-in plugins, imports under `if TYPE_CHECKING:` counted."""
    graph = grimp.build_graph("rooflinekit", "rooflinekit_plugins", exclude_type_checking_imports=False)
    modules = sorted(graph.modules)
    cycles = []
    for module in modules:
        for other in graph.find_modules_directly_imported_by(module):
            if other != module and graph.chain_exists(importer=other, imported=module):
                cycles.append((module, other))
    assert cycles == []


def test_function_level_imports_only_for_optional_dependencies():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    names = [a.name for a in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    names = [inner.module or ""]
                else:
                    continue
                if any(n.split(".")[0] not in OPTIONAL for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{inner.lineno} {names}")
    assert offenders == []


def test_the_layers_are_packages_and_every_command_has_its_module():
    for layer in ("cli", "analyses", "outputs", "transforms", "stages", "core"):
        assert (PACKAGE / layer / "__init__.py").is_file()
    from rooflinekit.cli.main import COMMANDS

    for name, (module, _attr, _) in COMMANDS.items():
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), name
