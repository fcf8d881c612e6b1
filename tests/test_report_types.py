"""The typed report: one codec at the edge, the shipped JSON Schema, schema 1.0 still read, and
new placements as new values (nothing edits a report after it is built)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from conftest import EXAMPLES, TINY_LLAMA, profile_dict

from rooflinekit.analyses.alt_placement import with_alt_placement
from rooflinekit.analyses.profile import run_profile
from rooflinekit.core import codec
from rooflinekit.core.report import SCHEMA_FILE, SWEEP_SCHEMA_FILE, Report
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.core.schemas import report_schema
from rooflinekit.core.version import SCHEMA_VERSION
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source

DATA = EXAMPLES.parent / "tests" / "data"
GQA, MLA = EXAMPLES / "llama_gqa.py", EXAMPLES / "deepseek_mla.py"


@pytest.mark.parametrize("kind,path", [("profile", SCHEMA_FILE), ("sweep", SWEEP_SCHEMA_FILE)])
def test_the_shipped_schemas_are_the_ones_the_types_imply(kind, path):
    assert json.loads(path.read_text()) == report_schema(kind), (
        "the report dataclasses changed: regenerate with "
        "python -c 'from rooflinekit.core.schemas import write_schema; write_schema()'")
    assert SCHEMA_VERSION == "3.0" and path.name == f"{kind}-3.0.schema.json"


def test_the_schema_rejects_what_the_types_reject():
    """The schema is no rubber stamp: a wrong type or a missing field fails validation."""
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text())
    data = profile_dict(GQA, batch=1, context=64, **TINY_LLAMA)
    jsonschema.validate(data, schema)
    for broken in (dict(data, totals=dict(data["totals"], bound=3)), {k: v for k, v in data.items() if k != "totals"},
                   dict(data, ops=[dict(data["ops"][0], counted="yes")])):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_json_round_trip_is_exact():
    data = profile_dict(MLA, batch=4, context=256, layers=2, mode="absorbed")
    again = Report.from_dict(data).to_dict()
    assert again == data
    assert data["schema_version"] == "3.0" and data["kind"] == "profile"


def test_decode_names_the_field_that_does_not_fit():
    data = profile_dict(GQA, batch=1, context=64, **TINY_LLAMA)
    data["totals"]["flops"] = "many"
    with pytest.raises(codec.DecodeError, match=r"totals\.flops: expected a number"):
        Report.from_dict(data)
    del data["hardware"]
    with pytest.raises(codec.DecodeError, match="hardware: missing"):
        Report.from_dict(data)


def test_reports_are_frozen_and_new_placements_are_new_values():
    source = load_source(str(GQA), dict(TINY_LLAMA))
    workload = Workload("decode", 2, 64, options=tuple(sorted(TINY_LLAMA.items())))
    report = run_profile(source, workload, Deployment("H800")).report
    before = report.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.totals = None
    h20 = hardware_db().get("H20")
    alt = with_alt_placement(report, h20)
    assert report.to_dict() == before  # the original is untouched
    assert report.totals.placement_alt is None and alt.totals.placement_alt is not None
    # the same bytes over the second entry's bandwidth: an independent recomputation
    assert alt.totals.placement_alt.time_bound_s == pytest.approx(
        max(report.totals.flops / h20.peak("bf16"), report.totals.bytes / h20.memory_bandwidth))
    assert alt.hardware_alt.name == h20.name


@pytest.mark.parametrize("name", ["mla", "gqa"])
def test_schema_1_reports_are_read(name):
    """Reports written by rooflinekit 0.1 (schema 1.0) decode, with measured fields and MLA sizes moved."""
    data = json.loads((DATA / f"report-1.0-{name}.json").read_text())
    assert data["schema_version"] == "1.0"
    report = Report.from_dict(data)
    assert report.totals.flops == data["totals"]["flops"]
    assert [a.kv_bytes_min for a in report.attention] == [a["kv_bytes_min"] for a in data["attention"]]
    if name == "mla":
        assert report.attention[0].extra == data["attention"][0]["mla"]
    else:  # measured on cpu and placed on a second entry: flat fields now nested
        timed = [op for op in data["ops"] if op.get("time_s")]
        assert timed and all(report.ops[op["index"]].measured.time_s == op["time_s"] for op in timed)
        assert report.totals.measured.step_time_s == data["totals"]["measured"]["step_time_s"]
        assert report.hardware_alt.name == data["hardware_alt"]["name"]


def test_plot_and_compare_read_schema_1_reports(invoke, tmp_path):
    old = DATA / "report-1.0-mla.json"
    out = tmp_path / "old.png"
    result = invoke("plot", old, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same model and workload profiled now: every compared quantity is equal (ratio 1)
    new = tmp_path / "new.json"
    result = invoke("profile", MLA, "-O", "layers=2", "-b", 4, "-s", 4096, "-H", "H800", "-f", "json", "-o", new)
    assert result.exit_code == 0, result.stderr
    result = invoke("compare", old, new, "-f", "json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    assert len(ratios) > 20 and all(r == pytest.approx(1.0, rel=1e-12) for r in ratios)


def test_op_rows_are_built_as_the_constructor_builds_them():
    """build_report makes its 10^4 op rows without OpRow's frozen __init__: the same row, every field."""
    from rooflinekit.core.report import CollectiveInfo, OpRow
    from rooflinekit.stages.capture import OpRecord
    from rooflinekit.stages.place import _op_row

    plain = OpRecord(3, "aten.mm", "layers.0.mlp", 2.0e9, 3.0e6, 1.0e6, "bf16", True, param_bytes=2.5e6,
                     shapes="48x7168,7168x2048", attrs={"formula_error": "", "assumption": None})
    modelled = OpRecord(4, "moe.experts", "", 1.0, 2.0, 3.0, "fp8", False, kind="modelled",
                        attrs={"assumption": "uniform routing", "formula_error": "ValueError: x"})
    comm = OpRecord(5, "comm.all_reduce", "a", 0.0, 0.0, 0.0, "bf16", True, kind="collective",
                    attrs={"collective": "all_reduce", "group_size": 8, "message_bytes": 1.0, "wire_bytes": 1.75,
                           "algorithm": "ring", "source": "planned"})
    for op, figures in ((plain, (666.7, "memory", 1e-6)), (modelled, (None, "none", 0.0)),
                        (comm, (None, "communication", 2e-9))):
        row = _op_row(op, *figures)
        collective = CollectiveInfo(**{k: op.attrs.get(k) for k in ("collective", "group_size", "message_bytes",
                                                                      "wire_bytes", "algorithm", "source")}) \
            if op.kind == "collective" else None
        expected = OpRow(
            index=op.index, name=op.name, module=op.module or "(root)", kind=op.kind, flops=op.flops,
            bytes_read=op.bytes_read, bytes_written=op.bytes_written, param_bytes=op.param_bytes, dtype=op.dtype,
            counted=op.counted, intensity=figures[0], bound=figures[1], time_bound_s=figures[2], shapes=op.shapes,
            assumption=op.attrs.get("assumption") or None, formula_error=op.attrs.get("formula_error") or None,
            collective=collective)
        assert row == expected and list(vars(row)) == [f.name for f in dataclasses.fields(OpRow)]
        assert codec.encode(row) == codec.encode(expected)
        with pytest.raises(dataclasses.FrozenInstanceError):
            row.flops = 0.0


def test_encode_writes_dataclasses_field_by_field():
    """The generated per-class encoder: fields in order, omit_none honoured, non-finite floats null,
    nested values through encode."""

    @dataclasses.dataclass(frozen=True)
    class Inner:
        x: float
        tags: tuple = ()

    @dataclasses.dataclass(frozen=True)
    class Outer:
        a: int
        b: float
        inner: Inner
        note: str | None = dataclasses.field(default=None, metadata={"omit_none": True})
        maybe: str | None = None
        items: list = dataclasses.field(default_factory=list)

    value = Outer(1, float("inf"), Inner(float("nan"), (1, 2.5)), items=[Inner(1.0), {"k": float("-inf")}])
    assert codec.encode(value) == {"a": 1, "b": None, "inner": {"x": None, "tags": [1, 2.5]}, "maybe": None,
                                   "items": [{"x": 1.0, "tags": []}, {"k": None}]}
    assert list(codec.encode(Outer(0, 0.0, Inner(0.0), note="n"))) == ["a", "b", "inner", "note", "maybe", "items"]


def test_each_report_kind_is_one_class_with_its_views():
    """`rooflinekit.Report` is the plugin's and core's Report; the views are the kind's own methods,
    drawn by the renderers rooflinekit.outputs registers (core imports none)."""
    import rooflinekit
    import rooflinekit.plugin

    assert rooflinekit.Report is rooflinekit.plugin.Report is Report
    report = Report.from_dict(json.loads((DATA / "report-1.0-gqa.json").read_text()))
    assert repr(report).startswith("<Report llama_gqa decode B=4 S=4096 on H800 SXM5")
    assert str(report) == report.table() and "<svg" in report._repr_html_()


def test_without_the_outputs_a_report_says_what_to_import():
    """Read where no output was imported (a plugin's view): the dataclass repr, and a clear error."""
    code = f"""
import json, sys
from rooflinekit.core.report import Report
from rooflinekit.core.views import NoViewError
report = Report.from_dict(json.loads(open({str(DATA / "report-1.0-gqa.json")!r}).read()))
assert "rooflinekit.outputs" not in sys.modules
assert repr(report).startswith("Report(workload=WorkloadInfo(phase='decode'")
try:
    str(report)
except NoViewError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("Report has no text view registered: import rooflinekit.outputs (the Python API, "
                                  "the CLI and the notebook helpers do)")
