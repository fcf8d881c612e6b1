"""Private torch names are reached in one module only, rooflinekit/core/compat.py: a torch release
that moves one is then one change there.

The scan reads the syntax tree of every module of rooflinekit/ and plugins/ (prose that names
`torch._dynamo` in a docstring or comment is not code) and flags any path under torch with a
component that starts with `_` (dunders such as `__version__` are public protocol): imports
(`import torch._C`, `from torch.utils._device import ...`, `from torch.x import _name`), attribute
chains from `torch` or from a name bound to something of torch (`import torch.distributed as
dist` then `dist._x`), `getattr(<torch path>, "_x")`, and `importlib.import_module("torch._x")`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {"rooflinekit/core/compat.py"}


def _private(path: str) -> bool:
    """Whether a dotted path under torch has a private component (not a dunder)."""
    parts = path.split(".")
    return parts[0] == "torch" and any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
                                       for p in parts[1:])


def _bound(tree: ast.Module) -> dict[str, str]:
    """Name -> the torch path it is bound to by an import in the module (`import torch` binds
    `torch`; `import torch.nn.functional as F`, `F`; `from torch import nn`, `nn`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    names[alias.asname or "torch"] = alias.name if alias.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "torch":
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _resolved(node: ast.expr, names: dict[str, str]) -> str | None:
    """The dotted torch path an expression `a.b.c` stands for, or None when it is not torch's."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(attrs)])


def _import_paths(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def _reached(node: ast.AST, names: dict[str, str]) -> str | None:
    """The private torch path `node` reaches, if any."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return next((p for p in _import_paths(node) if _private(p)), None)
    if isinstance(node, ast.Attribute):
        path = _resolved(node, names)
        return path if path is not None and _private(path) else None
    if isinstance(node, ast.Call) and len(node.args) >= 2 and ast.unparse(node.func) in ("getattr", "hasattr"):
        base, attr = _resolved(node.args[0], names), node.args[1]
        if base is not None and isinstance(attr, ast.Constant) and isinstance(attr.value, str):
            path = f"{base}.{attr.value}"
            return path if _private(path) else None
    if isinstance(node, ast.Call) and node.args and ast.unparse(node.func).endswith(("import_module", "__import__")):
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _private(arg.value):
            return arg.value
    return None


def offences(path: Path, rel: str) -> list[str]:
    """`rel:line: path` for every private torch name the module at `path` reaches (one per line)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = _bound(tree)
    found: dict[int, str] = {}
    for node in ast.walk(tree):
        reached = _reached(node, names)
        if reached is not None and len(reached) > len(found.get(node.lineno, "")):
            found[node.lineno] = reached
    return [f"{rel}:{line}: {reached}" for line, reached in sorted(found.items())]


def test_no_private_torch_name_outside_compat():
    found = []
    for top in ("rooflinekit", "plugins"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in ALLOWED:
                found += offences(path, rel)
    assert found == [], ("private torch names outside rooflinekit/core/compat.py (name them there, with the "
                         "torch internal each wraps and why):\n" + "\n".join(found))


def test_the_scan_finds_each_form(tmp_path):
    code = '''"""Prose may name torch._dynamo and torch.utils._pytree."""
import torch
import torch._C
import torch.distributed as dist
import torch.utils._device as device_mod
from torch import _C as C
from torch._ops import OpOverload
from torch.distributed.distributed_c10d import _resolve_process_group
from torch.overrides import TorchFunctionMode
import importlib

with torch._C.DisableTorchFunction():
    pass
dist._functional_collectives
TorchFunctionMode._private_helper
getattr(torch._C, "_get_dispatch_mode", None)
hasattr(torch, "_dynamo")
importlib.import_module("torch._inductor")
torch.Tensor.__getitem__, torch.__version__, torch.nn.functional.relu, dist.all_reduce
t = object()
t._local_tensor  # not torch's by name
# torch._C in a comment
'''
    (tmp_path / "m.py").write_text(code)
    found = offences(tmp_path / "m.py", "m.py")
    assert [f.split(":")[1] for f in found] == ["3", "5", "6", "7", "8", "12", "14", "15", "16", "17", "18"], found
    assert found[0] == "m.py:3: torch._C" and found[-1] == "m.py:18: torch._inductor"
