"""Small rooms: no function in rooflinekit/ or plugins/ is longer than 80 lines (its `def` line to its
last line) or takes more than 8 parameters (not counting self, cls, *args and **kwargs).

Click command functions (rooflinekit/cli/), the public functions of rooflinekit/api.py and the
helpers rooflinekit.plugin exports take one keyword per option the user may give: they may take
more parameters, never more lines."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 80
MAX_PARAMS = 8


def _functions(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, tree


def _params(node: ast.FunctionDef) -> int:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return len([n for n in names if n not in ("self", "cls")])


def _is_click_command(node: ast.FunctionDef) -> bool:
    """Decorated with a click command, group or option (`@click.command`, `@cli.command(...)`,
    `@click.option`, or a project decorator that adds options, `@workload_options`)."""
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        text = ast.unparse(target)
        if text.startswith("click.") or text.endswith((".command", ".group")) or text.endswith("_options") \
                or text.endswith("_option"):
            return True
    return False


def _plugin_helpers() -> set[tuple[str, str]]:
    """(file, function name) of every function rooflinekit.plugin exports."""
    import rooflinekit.plugin as plugin

    out = set()
    for name in plugin.__all__:
        obj = getattr(plugin, name)
        if inspect.isfunction(obj):
            out.add((str(Path(inspect.getfile(obj)).resolve()), obj.__name__))
    return out


def _exempt_from_params(path: Path, node: ast.FunctionDef, tree: ast.Module, helpers: set) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith("rooflinekit/cli/") and _is_click_command(node):
        return True
    if rel == "rooflinekit/api.py" and node in tree.body and not node.name.startswith("_"):
        return True
    return (str(path.resolve()), node.name) in helpers


def test_no_long_function_and_none_with_many_parameters():
    helpers = _plugin_helpers()
    long, wide = [], []
    for top in ("rooflinekit", "plugins"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node, tree in _functions(path):
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{where} ({lines} lines)")
                if _params(node) > MAX_PARAMS and not _exempt_from_params(path, node, tree, helpers):
                    wide.append(f"{where} ({_params(node)} parameters)")
    assert long == [], f"functions over {MAX_LINES} lines: {long}"
    assert wide == [], f"functions over {MAX_PARAMS} parameters: {wide}"


def test_the_rule_counts_as_stated(tmp_path):
    """The counter itself: lines from def to the last line, parameters without self/*args/**kwargs."""
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "m.py").write_text(
        f"def f(self, a, b, *args, c=1, **kwargs):\n{body}\n\n"
        f"def g(a, b, c, d, e, f, g, h, i):\n    return a\n")
    (f, _), (g, _) = list(_functions(tmp_path / "m.py"))
    assert f.end_lineno - f.lineno + 1 == 80 and _params(f) == 3
    assert _params(g) == 9
