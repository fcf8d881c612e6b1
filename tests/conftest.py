"""Test fixtures: profile a model file through the public pipeline, run the CLI in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from rooflinekit.analyses.profile import run_profile
from rooflinekit.cli.main import cli
from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.report import ADVISE_SCHEMA_FILE, SCHEMA_FILE, SWEEP_SCHEMA_FILE, Report
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.stages.model_source import load_source

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MODELS = Path(__file__).resolve().parent / "models"

#: Small dimensions for examples/llama_gqa.py so CPU runs stay fast.
TINY_LLAMA = {"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32,
              "intermediate": 512, "vocab": 1000}


def profile_dict(path, phase="decode", batch=1, context=64, dtype="bf16", device="meta",
                hardware="H800", **options):
    """Profile a model file and return the report dict."""
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options), workload, Deployment(hardware)).report.to_dict()


@pytest.fixture(scope="session")
def invoke():
    """Run the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""

    def _invoke(*args):
        return CliRunner().invoke(cli, [str(a) for a in args])

    return _invoke


def one_line_error(result, *needles):
    """Assert a CLI result failed with one `rooflinekit: error: ...` line holding every needle, no traceback."""
    assert result.exit_code != 0, result.stdout
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("rooflinekit: error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- every report a test produces is checked against the shipped JSON Schemas ------------------------


def schema_validators(schema_file: Path):
    """The schema's two validators: fastjsonschema's compiled one (about 14x faster than jsonschema's
    on a report of 5,000 ops, so every report can be checked) and jsonschema's, which says where the
    first error is. tests/test_schema_validators.py holds them to the same verdicts."""
    import fastjsonschema

    schema = json.loads(schema_file.read_text())
    return fastjsonschema.compile(schema), jsonschema.Draft202012Validator(schema)


#: Compiled schema validators, per schema file (compiling one takes a while: once per process).
_VALIDATORS: dict = {}


def _validated(to_dict, schema_file):
    """`to_dict` that checks what it returns against `schema_file` (an AssertionError naming where)."""

    def validated_to_dict(self):
        import fastjsonschema

        data = to_dict(self)
        if schema_file not in _VALIDATORS:
            _VALIDATORS[schema_file] = schema_validators(schema_file)
        fast, full = _VALIDATORS[schema_file]
        try:
            fast(data)
        except fastjsonschema.JsonSchemaException as exc:
            errors = sorted(full.iter_errors(data), key=lambda e: list(e.absolute_path))
            where, message = (("/".join(map(str, errors[0].absolute_path)), errors[0].message) if errors
                              else (getattr(exc, "name", "?"), exc.message))
            raise AssertionError(f"report does not validate against {schema_file.name} at {where}: "
                                 f"{message}") from None
        return data

    return validated_to_dict


@pytest.fixture(autouse=True)
def reports_validate_against_their_schemas(monkeypatch):
    """Every report a test serialises is checked against its JSON schema; the methods are
    restored after each test."""
    for cls, schema_file in ((Report, SCHEMA_FILE), (SweepReport, SWEEP_SCHEMA_FILE),
                             (AdviceReport, ADVISE_SCHEMA_FILE)):
        monkeypatch.setattr(cls, "to_dict", _validated(cls.to_dict, schema_file))


# -- third-party plugin distributions, as a user would pip-install them --------------------------------


def write_distribution(root: Path, name: str, package: str, modules: dict[str, str],
                       entry_points: dict[str, str], version: str = "0.1.0") -> Path:
    """A source tree of a plugin distribution: `package` with `modules` (name -> code) and
    `rooflinekit` entry points (name -> module). Returns its folder."""
    src = root / name
    (src / package).mkdir(parents=True)
    (src / package / "__init__.py").write_text(modules.get("__init__", ""))
    for module, code in modules.items():
        if module != "__init__":
            (src / package / f"{module}.py").write_text(code)
    eps = "\n".join(f'{k} = "{v}"' for k, v in entry_points.items())
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
        f"[project.entry-points.rooflinekit]\n{eps}\n"
        f'[tool.setuptools]\npackages = ["{package}"]\n'
    )
    return src


def pip_install_site(src: Path, site: Path) -> dict:
    """pip-install `src` into the folder `site`; returns an environment whose Python sees it (and
    this checkout) first, for running `python -m rooflinekit` in a subprocess."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(src)], check=True, capture_output=True)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))


# -- timing tests run apart from the parallel run -----------------------------------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--timing", choices=("include", "exclude", "only"), default="include",
        help="tests marked `timing` (they time things and judge the times): run them with the others "
             "(include, the default), leave them out (exclude: the parallel run under pytest-xdist), or "
             "run only them (only: the serial run after it). Deselected, never skipped.")


def pytest_configure(config):
    """Under xdist, one intra-op thread per worker: N workers on N cores, each with N torch threads,
    would oversubscribe the cores and spin in each other's time slices."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        import torch

        torch.set_num_threads(1)


def pytest_ignore_collect(collection_path, config):
    """`--timing only`: a test file whose text never names the `timing` mark holds no timing test,
    so it is not imported (the serial run's start-up was mostly importing the other 90 files)."""
    if config.getoption("timing") != "only" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return None if "mark.timing" in collection_path.read_text(encoding="utf-8", errors="replace") else True


def pytest_collection_modifyitems(config, items):
    """`--timing exclude|only`: README's test command runs the suite under xdist without the timing
    tests, then those alone in one serial process, so no other test shares the cores with them.
    (xdist's `--dist loadgroup` would keep them on one worker, but beside the others, and it does not
    group at all under pytest 9.2: pytest-dev/pytest-xdist#1386.)"""
    mode = config.getoption("timing")
    if mode == "include":
        return
    keep, drop = [], []
    for item in items:
        (keep if (item.get_closest_marker("timing") is not None) == (mode == "only") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_sessionfinish(session, exitstatus):
    """A half of the split run that has nothing left to run (a -k or -m that selects no timing
    test) passes, as the whole run would."""
    if session.config.getoption("timing") != "include" and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
