"""The tested ranges of torch and transformers, stated once (rooflinekit.core.version.TESTED): shown
by `rooflinekit --version`, noted in a report made outside them, named in the warning for layers no
plugin recognised, and equal to what tox's `oldest` env and the lock install."""

from __future__ import annotations

import re
import sys

import pytest

from rooflinekit.core import version as v
from rooflinekit.core.plugins import PluginHost, reset_host
from tests.conftest import EXAMPLES, ROOT, TINY_LLAMA, one_line_error, profile_dict


@pytest.mark.parametrize("text,numbers", [("2.13.0+cpu", (2, 13, 0)), ("5.26.0.dev0", (5, 26, 0)),
                                          ("5.4", (5, 4)), ("2.6.0rc1", (2, 6, 0)), ("nightly", ())])
def test_release_numbers(text, numbers):
    assert v.release(text) == numbers


@pytest.mark.parametrize("package,version,where", [
    ("transformers", "5.25.0", None), ("transformers", "5.24.0", None), ("transformers", "5.25.1", "newer than"),
    ("transformers", "5.23.0", "older than"), ("transformers", "6.0.0.dev0", "newer than"),
    ("torch", "2.13.0+cpu", None), ("torch", "2.4.1", "older than"), ("torch", "2.15.0", "newer than"),
])
def test_outside_tested(package, version, where, monkeypatch):
    monkeypatch.setitem(v.TESTED, package, {"torch": ("2.5.1", "2.14.1"), "transformers": ("5.24.0", "5.25.0")}[package])
    assert v.outside_tested(package, version) == where


def test_a_report_made_past_the_tested_range_says_so(monkeypatch):
    """Nothing installed: the imported modules' versions are moved past the range, the report notes it."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    high = v.TESTED["transformers"][1]
    newer = f"{v.release(high)[0]}.{v.release(high)[1] + 1}.0"
    report = profile_dict("hf:llama", batch=1, context=32, layers=1)
    assert not [n for n in report["notes"] if "releases rooflinekit is tested with" in n]
    # the module transformers left in sys.modules once the model was built
    monkeypatch.setattr(sys.modules["transformers"], "__version__", newer)
    monkeypatch.setattr(torch, "__version__", "2.4.0")
    report = profile_dict("hf:llama", batch=1, context=32, layers=1)
    notes = [n for n in report["notes"] if "releases rooflinekit is tested with" in n]
    assert any(n.startswith(f"transformers {newer} is newer than") and v.tested_range("transformers") in n
               for n in notes), notes
    assert any(n.startswith("torch 2.4.0 is older than") for n in notes), notes


def test_unrecognised_layers_name_the_library_version_once_per_kind(monkeypatch):
    """hf:llama without the attention plugins: its attention layers are one kind, one warning,
    naming the transformers release that wrote them; a model file's warning names no library."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("ROOFLINEKIT_DISABLE_PLUGINS", "mha,gqa")
    reset_host(PluginHost())
    try:
        report = profile_dict("hf:llama", batch=1, context=32, layers=2)
        plain = profile_dict(EXAMPLES / "llama_gqa.py", batch=1, context=32, **TINY_LLAMA)
    finally:
        reset_host(None)
    transformers = sys.modules["transformers"]
    warnings = [w for w in report["warnings"] if w.startswith("attention not recognised")]
    classes = {row["module_class"] for row in report["attention"] if not row["recognised"]}
    assert classes and len(warnings) == len(classes), warnings
    assert all(f"the model's code is transformers {transformers.__version__}" in w for w in warnings)
    assert any(w.startswith("attention not recognised") for w in plain["warnings"])
    assert not any("model's code is" in w for w in plain["warnings"])


def test_version_command_shows_the_tested_ranges(invoke):
    result = invoke("--version")
    assert result.exit_code == 0
    for package, (low, high) in v.TESTED.items():
        assert re.search(rf"^  {package}\s+{re.escape(low)} to {re.escape(high)}\s+\(", result.stdout, re.M), result.stdout


def test_the_floors_are_what_the_oldest_envs_install():
    """The oldest envs' locks pin each tested floor (torch's on Python 3.10, transformers' on 3.13,
    where it installs), and pyproject's ranges start there."""
    pins = {"torch": "oldest-py310.txt", "transformers": "oldest-py313.txt"}
    for package, (low, _) in v.TESTED.items():
        lock = (ROOT / "constraints" / pins[package]).read_text()
        assert re.search(rf"^{package}=={re.escape(low)}$", lock, re.M), (package, low)
    pyproject = (ROOT / "pyproject.toml").read_text()
    for package, (low, _) in v.TESTED.items():
        floor = re.search(rf'"{package}>=([\d.]+)', pyproject).group(1)
        assert v.release(low)[:len(v.release(floor))] == v.release(floor), (package, floor, low)


def test_the_lock_lies_within_the_tested_ranges():
    lock = (ROOT / "constraints" / "test.txt").read_text()
    for package in v.TESTED:
        pinned = re.search(rf"^{package}==(\S+)", lock, re.M).group(1)
        assert v.outside_tested(package, pinned) is None, (package, pinned)


def test_a_transformers_older_than_the_floor_is_refused_in_one_line(invoke, monkeypatch):
    """5.20 to 5.23 run the cache and masks differently (their counts differ), 5.4 lacks classes the
    loader reads: a release below the tested floor is refused, not profiled wrongly."""
    pytest.importorskip("transformers")
    real = v.metadata.version
    monkeypatch.setattr(v.metadata, "version", lambda name: "5.20.2" if name == "transformers" else real(name))
    result = invoke("profile", "hf:llama", "-O", "layers=1")
    one_line_error(result, "hf:llama: transformers 5.20.2 is older than "
                   f"{v.TESTED['transformers'][0]}, the oldest release rooflinekit reads")
    assert v.older_than_tested("torch") is None  # the installed torch is within its range
