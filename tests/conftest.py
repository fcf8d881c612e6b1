"""Test fixtures: profile a model file through the public pipeline, run the CLI in-process."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from rooflinekit.analyses.profile import profile
from rooflinekit.cli.main import cli
from rooflinekit.core.report import SCHEMA_FILE, Report
from rooflinekit.stages.workload import Workload, load_source

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MODELS = Path(__file__).resolve().parent / "models"

#: Small dimensions for examples/llama_gqa.py so CPU runs stay fast.
TINY_LLAMA = {"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32,
              "intermediate": 512, "vocab": 1000}


def run_profile(path, phase="decode", batch=1, context=64, dtype="bf16", device="meta",
                hardware="H800", **options):
    """Profile a model file and return the report dict."""
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(options.items())))
    return profile(load_source(str(path), options), workload, hardware).report.to_dict()


@pytest.fixture
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


# -- every report a test produces is checked against the shipped JSON Schema -------------------------

_VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
_to_dict = Report.to_dict


def _validated_to_dict(self):
    data = _to_dict(self)
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = "/".join(map(str, e.absolute_path))
        raise AssertionError(f"report does not validate against {SCHEMA_FILE.name} at {path}: {e.message}")
    return data


Report.to_dict = _validated_to_dict
