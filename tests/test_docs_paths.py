"""docs/architecture.md names only what exists: every backticked path ending in `.py` or `/` is a
file or folder of the repository, and every backticked dotted name starting with `rooflinekit.`
imports (a module) or resolves (an attribute of one).

A path is read as the doc means it: from the repository root (`rooflinekit/cli/`, `plugins/hf/`,
`tests/test_layout.py`, `hardware_db/`) or from the package (`core/swap.py`, `api.py`).
A bare file name listed after a path is in that path's folder, as in "`transforms/` (`base.py`)"
or "`analyses/plan.py`: ... `plan_options.py`"; failing that, in the package.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
#: Where a path with a folder in it may start, in the order tried.
BASES = (ROOT, ROOT / "rooflinekit")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"rooflinekit(?:\.\w+)+")


def spans(text: str) -> list[str]:
    """The backticked spans of `text` outside fenced code blocks, in order."""
    return SPAN.findall(FENCE.sub("", text))


def doc_paths(text: str) -> list[tuple[str, list[Path]]]:
    """(path as written, the places it may be) of every backticked path ending in .py or /."""
    found: list[tuple[str, list[Path]]] = []
    folder: str | None = None  # the folder of the last path with one, for a bare file name after it
    for span in spans(text):
        if " " in span or not span.endswith((".py", "/")):
            continue
        if "/" in span.rstrip("/"):
            places = [base / span for base in BASES]
            folder = span if span.endswith("/") else span.rsplit("/", 1)[0] + "/"
        elif span.endswith("/"):
            places = [base / span for base in BASES]
            folder = span
        else:
            places = [base / folder / span for base in BASES] if folder else []
            places.append(ROOT / "rooflinekit" / span)
        if (span, places) not in found:
            found.append((span, places))
    return found


def doc_names(text: str) -> list[str]:
    """Every dotted name starting with `rooflinekit.` that opens a backticked span."""
    names = []
    for span in spans(text):
        match = DOTTED.match(span)
        if match and match.group() not in names:
            names.append(match.group())
    return names


def resolve(name: str) -> object:
    """The module `name`, or the attribute it names of its longest importable prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:cut]).startswith(exc.name):
                raise
            continue
        for attr in parts[cut:]:
            value = getattr(value, attr)
        return value
    raise ModuleNotFoundError(name)


DOC_TEXT = DOC.read_text()


def test_the_doc_names_paths_and_modules():
    """The scan finds what it checks (a wrong pattern would pass by finding nothing)."""
    paths = [p for p, _ in doc_paths(DOC_TEXT)]
    assert {"core/swap.py", "rooflinekit/transforms/", "tests/test_layout.py", "base.py"} <= set(paths)
    assert {"rooflinekit.plugin", "rooflinekit.core"} <= set(doc_names(DOC_TEXT))


@pytest.mark.parametrize(("path", "places"), doc_paths(DOC_TEXT), ids=[p for p, _ in doc_paths(DOC_TEXT)])
def test_every_path_exists(path, places):
    wanted = [p for p in places if (p.is_dir() if path.endswith("/") else p.is_file())]
    assert wanted, f"docs/architecture.md names `{path}`: none of {[str(p.relative_to(ROOT)) for p in places]}"


@pytest.mark.parametrize("name", doc_names(DOC_TEXT))
def test_every_dotted_name_resolves(name):
    try:
        resolve(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"docs/architecture.md names `{name}`, which does not resolve: {exc}")


def test_a_bare_name_is_read_in_the_folder_listed_before_it():
    text = "`transforms/` (`base.py`), `analyses/plan.py` (`plan_options.py`), `api.py`, `no such/`\n"
    got = {span: [p.relative_to(ROOT).as_posix() for p in places] for span, places in doc_paths(text)}
    assert got["base.py"][:2] == ["transforms/base.py", "rooflinekit/transforms/base.py"]
    assert "rooflinekit/analyses/plan_options.py" in got["plan_options.py"]
    assert got["api.py"][-1] == "rooflinekit/api.py"
    assert "no such/" not in got
