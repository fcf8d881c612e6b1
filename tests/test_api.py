"""The Python API: the documented examples run, and profile(), capture() and profile_file() give
the CLI's numbers on the same model file."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os

import pytest
import torch
from conftest import EXAMPLES, ROOT

import rooflinekit
from rooflinekit.core.errors import HardwareError, ModelError, WorkloadError

GQA = EXAMPLES / "llama_gqa.py"
TOTALS = ("flops", "flops_model", "bytes", "weight_bytes", "kv_bytes_executed", "kv_bytes_min", "ops")


def test_python_api_doc_examples_run(monkeypatch):
    monkeypatch.chdir(ROOT)
    failures, tried = doctest.testfile(str(ROOT / "docs" / "python-api.md"), module_relative=False,
                                       optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert tried > 10 and failures == 0


def _load(path):
    spec = importlib.util.spec_from_file_location("model_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("phase,batch,context", [("decode", 4, 2048), ("prefill", 2, 256)])
def test_profile_capture_and_profile_file_equal_the_cli(invoke, phase, batch, context):
    options = {"layers": 2, "hidden": 512, "heads": 8, "kv_heads": 2, "head_dim": 64, "intermediate": 1024}
    cli = invoke("profile", GQA, "--phase", phase, "-b", batch, "-s", context, "-H", "H800", "-f", "json",
                 *[a for k, v in options.items() for a in ("-O", f"{k}={v}")])
    assert cli.exit_code == 0, cli.stderr
    expected = json.loads(cli.stdout)["totals"]

    module = _load(GQA)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = module.build_model(**options)
            inputs = module.make_inputs(batch, context, phase, layers=2, kv_heads=2, head_dim=64)
        in_memory = rooflinekit.profile(model, hardware="H800", phase=phase, context=context, inputs=inputs)
        with torch.device("meta"), rooflinekit.capture(hardware="H800", phase=phase, batch=batch,
                                                       context=context) as cap:
            model(**inputs)
    finally:
        torch.set_default_dtype(default)
    from_file = rooflinekit.profile_file(str(GQA), phase=phase, batch=batch, context=context, hardware="H800",
                                         options=options)
    for report in (in_memory, cap.report, from_file):
        assert isinstance(report, rooflinekit.Report)
        got = report.to_dict()["totals"]
        assert {k: got[k] for k in TOTALS} == {k: expected[k] for k in TOTALS}
    assert cap.model is model and in_memory.workload.batch == batch


def test_errors_are_one_family_with_the_cli_lines(invoke, tmp_path):
    with pytest.raises(HardwareError) as info:
        rooflinekit.profile_file(str(GQA), hardware="H9000")
    cli = invoke("profile", GQA, "-H", "H9000")
    assert cli.stderr.strip() == f"rooflinekit: error: {info.value}"
    assert isinstance(info.value, rooflinekit.RooflineError)
    with pytest.raises(ModelError):
        rooflinekit.profile_file(os.fspath(tmp_path / "missing.py"))
    with pytest.raises(WorkloadError, match="decode needs context="):
        rooflinekit.profile(torch.nn.Linear(8, 8, device="meta"), torch.empty(2, 1, 8, device="meta"))
    with pytest.raises(WorkloadError, match="no module was called"):
        with rooflinekit.capture(hardware="H800"):
            pass


def test_report_views():
    report = rooflinekit.profile_file(str(GQA), batch=2, context=512, hardware="H800", options={"layers": 1})
    assert report.table().startswith("model: llama_gqa")
    assert "<table" in report._repr_html_() and "Modules (by time bound" in report._repr_html_()
    assert json.loads(report.to_json()) == report.to_dict()
    pd = pytest.importorskip("pandas")
    frame = report.to_dataframe("modules")
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(report.modules)
    assert frame["flop"].sum() == pytest.approx(report.totals.flops)  # units in the names: outputs/frames.py
