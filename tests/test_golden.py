"""What `profile`, `sweep` and `advise` print for every example, in every text format, byte for
byte as tests/data/golden/ holds it (written by tests/data/make_golden.py before a refactor of the
request, transforms and outputs: a refactor keeps every output; an intended change regenerates the
files in the same commit and says why)."""

from __future__ import annotations

import difflib
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "data"))
import make_golden  # noqa: E402


@pytest.mark.parametrize("fmt", sorted(make_golden.FORMATS))
@pytest.mark.parametrize(("case", "args"), make_golden.cases(), ids=[c for c, _ in make_golden.cases()])
def test_output_is_the_golden_file(case, args, fmt):
    path = make_golden.GOLDEN / f"{case}.{fmt}"
    assert path.is_file(), f"no golden file {path.name}: python tests/data/make_golden.py"
    got, want = make_golden.run(args, fmt), path.read_text()
    if got != want:
        diff = "".join(list(difflib.unified_diff(want.splitlines(True), got.splitlines(True), f"golden/{path.name}",
                                                 "now", n=1))[:60])
        pytest.fail(f"{' '.join(args)} -f {make_golden.FORMATS[fmt]} differs from golden/{path.name} "
                    f"(python tests/data/make_golden.py regenerates it when the change is intended):\n{diff}")
