"""The package version, the JSON report schema version (bumped when the schema changes shape), and
the releases of the libraries that rooflinekit's counts depend on which its test suite covers."""

from __future__ import annotations

import re
import sys
from importlib import metadata

__version__ = "0.3.0"
SCHEMA_VERSION = "3.0"
#: Older report schemas that `plot` and `compare` still read.
READABLE_SCHEMAS = ("1.0", "2.0", "3.0")

#: The tested range of each library whose code rooflinekit counts, stated once: the floor is what
#: tox's `oldest` envs install (torch's on Python 3.10, transformers' on 3.13), the top the newest
#: release `tox -e latest` passed with when this table was last written. pyproject.toml's ranges may admit more; a report
#: made outside these says so in a note. Check with `rooflinekit --version`.
TESTED: dict[str, tuple[str, str]] = {
    "torch": ("2.5.0", "2.14.1"),
    "transformers": ("5.24.0", "5.25.0"),
}


def release(version: str) -> tuple[int, ...]:
    """A version's release numbers ('2.13.0+cpu' -> (2, 13, 0); '5.26.0.dev0' -> (5, 26, 0))."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def tested_range(package: str) -> str:
    low, high = TESTED[package]
    return f"{low} to {high}"


def outside_tested(package: str, version: str) -> str | None:
    """'older than' / 'newer than' where `version` of `package` lies outside TESTED, else None."""
    low, high = (release(v) for v in TESTED[package])
    mine = release(version)
    if mine < low:
        return "older than"
    if mine > high:
        return "newer than"
    return None


def installed(package: str) -> str | None:
    """The version of `package` this process has imported (None: not imported, so not used)."""
    module = sys.modules.get(package)
    return getattr(module, "__version__", None) if module is not None else None


def untested_notes() -> list[str]:
    """One note per imported library whose version lies outside its tested range."""
    notes = []
    for package in TESTED:
        version = installed(package)
        where = outside_tested(package, version) if version else None
        if where:
            notes.append(f"{package} {version} is {where} the releases rooflinekit is tested with "
                         f"({tested_range(package)}): counts that depend on how {package} runs the model "
                         f"are unverified there (`rooflinekit --version` lists the tested ranges)")
    return notes


def version_text() -> str:
    """`rooflinekit --version`: the version, the tested ranges and what is installed."""
    lines = [f"rooflinekit {__version__} (report schema {SCHEMA_VERSION})", "tested with:"]
    for package in TESTED:
        version = installed(package)
        if version is None:
            try:
                version = metadata.version(package)
            except metadata.PackageNotFoundError:
                version = None
        if version is None:
            mark = "not installed"
        else:
            where = outside_tested(package, version)
            mark = f"installed {version}" + (f", {where} the tested range" if where else "")
        lines.append(f"  {package:<13} {tested_range(package):<18} ({mark})")
    return "\n".join(lines)


def model_library(model: object) -> str | None:
    """'transformers 5.25.0 (tested 5.24.0 to 5.25.0)' where a library of TESTED wrote `model`'s
    class, else None (the user's own code)."""
    package = type(model).__module__.split(".")[0]
    version = installed(package) if package in TESTED and package != "torch" else None
    if version is None:
        return None
    where = outside_tested(package, version)
    return f"{package} {version} ({where + ' ' if where else ''}tested {tested_range(package)})"


def older_than_tested(package: str) -> str | None:
    """One line refusing an installed `package` older than its tested floor (its counts differ there,
    or its modules lack what rooflinekit reads), else None; a newer release is only noted."""
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
    if outside_tested(package, version) != "older than":
        return None
    return (f"{package} {version} is older than {TESTED[package][0]}, the oldest release rooflinekit reads "
            f"(tested {tested_range(package)}): pip install -U 'rooflinekit[hf]'")
