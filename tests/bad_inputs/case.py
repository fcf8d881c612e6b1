"""One bad-input case: the command line, the files it starts from, and what the one error line names.

The harness (tests/test_bad_inputs.py) runs each case in a fresh folder and asserts, for every
case: a non-zero exit (the given code, if any), exactly one line on stderr that starts with
`rooflinekit: error: ` and holds every needle, no traceback, nothing on stdout, no file left
behind, and every file the case started from unchanged.

Two more kinds of case:
- a plugin fault (`plugin`: an inline plugin module's source, registered in-process as 'rkcase' on a
  fresh plugin host): the run goes on, exit 0, a report on stdout, and exactly one warning line that
  names the plugin and holds every needle (the answer skipped, the next implementation's used); with
  an `exit_code`, a fault the run cannot go on from: the ordinary one-error-line checks;
- a Python API call (`api`: a function of the case's folder): it raises a `RooflineError` whose message
  holds every needle, and nothing else (no TypeError, AttributeError or bare ValueError).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: Placeholders in args: {dir} is the case's folder, {root} this checkout, {examples} its examples.
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GQA = "{examples}/llama_gqa.py"
TINY = ["-O", "layers=1", "-O", "hidden=256", "-O", "heads=8", "-O", "kv_heads=2", "-O", "head_dim=32",
        "-O", "intermediate=512", "-O", "vocab=1000"]


@dataclass
class Case:
    id: str
    category: str
    args: list[str]
    needles: list[str] = field(default_factory=list)
    files: dict[str, str | bytes] = field(default_factory=dict)  # created in the case's folder first
    setup: Callable[[Path], None] | None = None  # special files (FIFOs, symlinks) or installs
    exit_code: int | None = None  # None: any non-zero
    env: dict[str, str] = field(default_factory=dict)
    subprocess: bool = False  # run `python -m rooflinekit` in a child (process-level behaviour)
    stdout_closed: bool = False  # the child starts with stdout closed (a shell's `>&-`)
    stdin: str | None = None
    marks: tuple = ()
    plugin: str | None = None  # an inline plugin's source: a warning case (see the module docstring)
    api: Callable[[Path], object] | None = None  # a Python API call: a RooflineError case

    def argv(self, folder: Path) -> list[str]:
        subs = {"{dir}": str(folder), "{root}": str(ROOT), "{examples}": str(EXAMPLES)}
        out = []
        for a in self.args:
            for k, v in subs.items():
                a = a.replace(k, v)
            out.append(a)
        return out
