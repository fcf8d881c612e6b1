"""The test suite's locked versions, and how far an environment has drifted from them.

    python tools/lock.py            rewrite constraints/*.txt from pyproject.toml's ranges (needs uv)
    python tools/lock.py drift      list the installed releases that differ from constraints/test.txt

The library keeps ranges (pyproject.toml); the suite is tested against these files:

- constraints/test.txt: the newest versions the ranges allow on Python 3.11 today, with torch at the
  2.13.0 CPU wheel that README's test command installs first (README's test command and `.ci/run`);
- constraints/oldest-py310.txt, oldest-py313.txt: the floor of every direct requirement that has a
  wheel for that Python (uv's `--resolution lowest-direct`, wheels only): torch 2.5 on 3.10, where
  the `hf` extra installs nothing (transformers 5.21 and later need 3.11); transformers' floor on 3.13
  (tox -e oldest-py310, oldest-py313).

`tox -e latest-py310, latest-py313` install with no lock at all: the newest releases the ranges
admit, so that a new release that breaks the tool fails the next run; `drift` names it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints"
EXTRAS = ("test", "hf", "plot")
#: (file, python, resolution, pins): the lock of README's test command, and the floors per Python.
LOCKS = (
    ("test.txt", "3.11", "highest", ("torch==2.13.0",)),
    ("oldest-py310.txt", "3.10", "lowest-direct", ("numpy<2",)),
    ("oldest-py313.txt", "3.13", "lowest-direct", ("torch>=2.6",)),
)
#: Why each pin beyond pyproject.toml's ranges is there (written into the file's header).
WHY = {
    "torch==2.13.0": "the CPU wheel README's test command installs first",
    "torch>=2.6": "transformers 5.x imports torch 2.6 and later (torch 2.5 is tested on Python 3.10, without it)",
    "numpy<2": "matplotlib 3.7.0 and pandas 2.0.0, the floors on Python 3.10, are built against numpy 1",
}
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock() -> None:
    uv = shutil.which("uv")
    if uv is None:
        sys.exit("tools/lock.py: uv is needed to resolve the locks: pip install uv")
    for name, python, resolution, pins in LOCKS:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as extra:
            extra.write("".join(f"{p}\n" for p in pins))
        out = CONSTRAINTS / name
        command = [uv, "pip", "compile", "pyproject.toml", *(f"--extra={e}" for e in EXTRAS),
                   f"--python-version={python}", "--python-platform=x86_64-manylinux_2_28",
                   f"--resolution={resolution}", "--only-binary=:all:", f"--constraint={extra.name}",
                   "--upgrade", "--no-header", "--no-annotate", "--quiet", f"--output-file={out}"]
        try:
            subprocess.run(command, cwd=ROOT, check=True)
        finally:
            Path(extra.name).unlink()
        header = [f"# {name}: Python {python}, resolution {resolution}, extras {', '.join(EXTRAS)}; "
                  "install with pip's -c (constraints), never -r.",
                  "# Written by `python tools/lock.py` (uv pip compile of pyproject.toml's ranges); "
                  "edit the ranges, not this file."]
        header += [f"# pinned beyond the ranges: {p} ({WHY[p]})" for p in pins]
        if not pins:
            header.append("# pinned beyond the ranges: nothing")
        out.write_text("\n".join(header) + "\n" + out.read_text())
        print(f"wrote {out.relative_to(ROOT)}")


def locked(path: Path = CONSTRAINTS / "test.txt") -> dict[str, str]:
    """{normalised name: version} of a constraints file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            pins[_normal(match.group(1))] = match.group(2)
    return pins


def drift(path: Path = CONSTRAINTS / "test.txt") -> list[tuple[str, str, str]]:
    """(package, installed, locked) for every installed distribution whose release differs from the lock."""
    pins = locked(path)
    rows = []
    for dist in metadata.distributions():
        name = _normal(dist.metadata["Name"] or "")
        want = pins.get(name)
        have = dist.version.split("+")[0]
        if want is not None and have != want.split("+")[0]:
            rows.append((name, dist.version, want))
    return sorted(rows)


def main(argv: list[str]) -> int:
    if argv[:1] == ["drift"]:
        rows = drift()
        if not rows:
            print("drift: every installed release is the locked one (constraints/test.txt)")
            return 0
        print(f"drift: {len(rows)} installed release(s) differ from constraints/test.txt:")
        for name, have, want in rows:
            print(f"  {name} {have} (locked {want})")
        return 0
    if argv:
        print(__doc__)
        return 2
    lock()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
