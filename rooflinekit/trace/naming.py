"""A trace's module paths as dotted names: `rooflinekit profile`'s attribute paths
(`layers.0.self_attn.q_proj`) when the model is given, else the recorded `Class_N` names; the
top-level module is left out of both, as profile leaves it out.

torch numbers a module `Class_N` by the order in which instances of its class were first called; a
trace never records attribute names. With the model, the k-th distinct `Class_N` called under a
module is matched to that module's k-th child of the class (containers never called, ModuleList and
ModuleDict, opened into their children): exact for models whose sibling modules of one class run in
the order they were registered; a subtree that does not match keeps its recorded names."""

from __future__ import annotations

from collections import defaultdict

from torch import nn

#: A module path as the trace records it: the names of the modules around an op, top-level first.
Path = tuple[str, ...]


def class_of(recorded: str) -> str:
    """'Linear' of 'Linear_4'."""
    head, sep, tail = recorded.rpartition("_")
    return head if sep and tail.isdigit() else recorded


def called_children(module: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    """A module's children as calls see them: ModuleList and ModuleDict opened into theirs."""
    out: list[tuple[str, nn.Module]] = []
    for name, child in module.named_children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            out += called_children(child, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", child))
    return out


def _children_in_order(paths: list[Path]) -> dict[Path, list[str]]:
    """Each path's distinct child names in the order they were first called."""
    out: dict[Path, list[str]] = defaultdict(list)
    for path in paths:
        for depth in range(1, len(path)):
            parent, child = path[:depth], path[depth]
            if child not in out[parent]:
                out[parent].append(child)
    return out


def _match(recorded: list[str], module: nn.Module) -> dict[str, tuple[str, nn.Module]]:
    """Recorded child names to (attribute name, child), class by class in order; {} on a mismatch."""
    by_class: dict[str, list[tuple[str, nn.Module]]] = defaultdict(list)
    for name, child in called_children(module):
        by_class[type(child).__name__].append((name, child))
    wanted: dict[str, list[str]] = defaultdict(list)
    for name in recorded:
        wanted[class_of(name)].append(name)
    if any(len(names) > len(by_class.get(cls, ())) for cls, names in wanted.items()):
        return {}
    return {name: by_class[cls][k] for cls, names in wanted.items() for k, name in enumerate(names)}


def attribute_names(paths: list[Path], model: nn.Module) -> dict[Path, str]:
    """Each recorded path (top-level first) as the model's dotted attribute path, where it matches."""
    children = _children_in_order(paths)
    named: dict[Path, tuple[str, nn.Module]] = {}
    tops = {p[:1] for p in paths if p and class_of(p[0]) == type(model).__name__}
    queue = [(top, "", model) for top in sorted(tops)]
    while queue:
        path, dotted, module = queue.pop()
        named[path] = (dotted, module)
        for name, (attr, child) in _match(children.get(path, []), module).items():
            queue.append((path + (name,), f"{dotted}.{attr}" if dotted else attr, child))
    return {p: dotted for p, (dotted, _) in named.items()}


def dotted(path: Path, names: dict[Path, str] | None = None) -> str:
    """A recorded path as a name: the model's attribute path, else its recorded names below the
    top-level module, joined by dots (the top-level module itself: '')."""
    if names:
        for cut in range(len(path), 0, -1):
            if path[:cut] in names:
                head = names[path[:cut]]
                return ".".join(([head] if head else []) + list(path[cut:]))
    return ".".join(path[1:])



def row_name(path: Path, depth: int | None, names: dict[Path, str] | None = None) -> str:
    """The row an op's recorded path rolls up to: cut to `depth` levels below the top-level module."""
    return dotted(path if depth is None else path[: depth + 1], names)
