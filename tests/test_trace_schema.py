"""The trace report's JSON validates against the shipped schema, generated from its dataclasses."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rooflinekit.cli.main import cli
from rooflinekit.trace.report import TRACE_SCHEMA_FILE, trace_schema
from tests.conftest import ROOT, schema_validators

TRACES = ROOT / "tests" / "data" / "traces"


def test_the_shipped_schema_is_the_dataclasses():
    assert json.loads(TRACE_SCHEMA_FILE.read_text()) == trace_schema(), (
        "the trace report dataclasses changed: regenerate with "
        "python -c 'from rooflinekit.trace.report import write_trace_schema; write_trace_schema()'")


@pytest.mark.parametrize("trace, hardware", [("v100_training_steps_1012_1013.json.gz", None),
                                             ("v100_no_shapes_steps_101_102.json.gz", None),
                                             ("sampled_ranks", "A100 SXM 40GB"),
                                             ("mi250_minitoy_train.json.gz", "MI250 GCD")])
def test_every_test_trace_report_validates(trace, hardware):
    args = ["trace", str(TRACES / trace), "-f", "json"] + (["-H", hardware] if hardware else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    fast, full = schema_validators(TRACE_SCHEMA_FILE)
    fast(data)
    assert not list(full.iter_errors(data))
    assert data["kind"] == "trace" and data["schema_version"].startswith("1.")
