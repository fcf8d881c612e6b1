"""The shape of the code in rooflinekit/ and plugins/, read from its syntax trees: every function at
most 80 lines (its `def` line to its last) and 8 parameters (self and cls not counted; *args and
**kwargs count one each), every module at most 600 lines.

Only the entry points a user calls with one keyword per option may take more parameters: the click
commands of rooflinekit/cli/ and the public functions of rooflinekit/api.py, named one by one in
`WIDE_ENTRY_POINTS`. A new one is added there on purpose, not by a pattern.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("rooflinekit", "plugins")
MAX_FUNCTION_LINES = 80
MAX_PARAMS = 8
MAX_MODULE_LINES = 600

#: (module, function) of the entry points that may take more than MAX_PARAMS parameters.
WIDE_ENTRY_POINTS = {
    # click commands: one parameter per command-line option
    ("rooflinekit/cli/advise.py", "advise_cmd"),
    ("rooflinekit/cli/calibrate.py", "calibrate_cmd"),
    ("rooflinekit/cli/compare.py", "compare_cmd"),
    ("rooflinekit/cli/hardware.py", "hardware"),
    ("rooflinekit/cli/hardware.py", "hardware_list"),
    ("rooflinekit/cli/hardware.py", "hardware_show"),
    ("rooflinekit/cli/hardware.py", "hardware_detect"),
    ("rooflinekit/cli/main.py", "cli"),
    ("rooflinekit/cli/plan.py", "plan_cmd"),
    ("rooflinekit/cli/plot.py", "plot"),
    ("rooflinekit/cli/plugins.py", "plugins_cmd"),
    ("rooflinekit/cli/profile.py", "profile_cmd"),
    ("rooflinekit/cli/sweep.py", "sweep_cmd"),
    ("rooflinekit/cli/trace.py", "trace_cmd"),
    # the Python API: one keyword per option, as the command line has
    ("rooflinekit/api.py", "check_common"),
    ("rooflinekit/api.py", "check_file_arguments"),
    ("rooflinekit/api.py", "infer_workload"),
    ("rooflinekit/api.py", "no_such_option"),
    ("rooflinekit/api.py", "source_and_workload"),
    ("rooflinekit/api.py", "profile"),
    ("rooflinekit/api.py", "profile_file"),
    ("rooflinekit/api.py", "capture"),
    ("rooflinekit/api.py", "sweep"),
    ("rooflinekit/api.py", "advise"),
    ("rooflinekit/api.py", "trace"),
}

#: Modules over MAX_MODULE_LINES today, being split.

def _modules():
    for top in TOPS:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def _functions(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters of a function, self and cls not counted, *args and **kwargs one each."""
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [x.arg for x in (a.vararg, a.kwarg) if x]
    return len([n for n in names if n not in ("self", "cls")])


def lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def test_no_function_over_80_lines():
    long = [f"{rel}:{f.lineno} {f.name} ({lines(f)} lines)"
            for rel, path in _modules() for f in _functions(path) if lines(f) > MAX_FUNCTION_LINES]
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_no_function_over_8_parameters_but_the_entry_points():
    wide = [f"{rel}:{f.lineno} {f.name} ({params(f)} parameters)"
            for rel, path in _modules() for f in _functions(path)
            if params(f) > MAX_PARAMS and (rel, f.name) not in WIDE_ENTRY_POINTS]
    assert wide == [], (f"functions over {MAX_PARAMS} parameters (group those that travel together in a "
                        "frozen dataclass, or split the function):\n" + "\n".join(wide))


def test_the_entry_points_named_are_top_level_entry_points():
    """Each exemption names a function that exists: a click command of rooflinekit/cli/, or a
    public top-level function of rooflinekit/api.py."""
    for rel, name in sorted(WIDE_ENTRY_POINTS):
        tree = ast.parse((ROOT / rel).read_text())
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        assert len(found) == 1, (rel, name)
        if rel.startswith("rooflinekit/cli/"):
            decorators = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in found[0].decorator_list]
            assert any(d.endswith((".command", ".group")) for d in decorators), (rel, name, decorators)
        else:
            assert rel == "rooflinekit/api.py" and not name.startswith("_"), (rel, name)


def test_no_module_over_600_lines():
    big = [f"{rel} ({n} lines)" for rel, path in _modules()
           if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert big == [], f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(big)


def test_the_counts_are_as_stated(tmp_path):
    """Lines from `def` to the last line; parameters without self/cls, *args and **kwargs one each."""
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "m.py").write_text(f"def f(self, a, b, *args, c=1, **kwargs):\n{body}\n\n"
                                   "def g(a, b, c, d, e, f, g, h, *, i):\n    return a\n")
    f, g = _functions(tmp_path / "m.py")
    assert lines(f) == 80 and params(f) == 5
    assert lines(g) == 2 and params(g) == 9


def test_a_setting_is_named_in_few_files():
    """A deployment setting is declared once (rooflinekit/core/settings.py) and read through the
    Deployment's methods: `kv_dtype` is written in the table, the Deployment and the one output that
    formats it as each engine's flag, and nowhere else under rooflinekit/ or plugins/."""
    named = sorted(str(p.relative_to(ROOT)) for d in ("rooflinekit", "plugins") for p in (ROOT / d).rglob("*.py")
                   if "kv_dtype" in p.read_text())
    assert named == ["rooflinekit/core/request.py", "rooflinekit/core/settings.py",
                     "rooflinekit/outputs/engine_flags.py"]
