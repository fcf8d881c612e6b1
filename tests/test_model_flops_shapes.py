"""Model FLOPs take attention's shape from the calls that ran, not from --batch/--context: a model
file whose inputs ignore the batch it is asked for gets the model FLOPs of what ran, with a note
on each attention row saying so."""

from __future__ import annotations

import pytest

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from tests.conftest import MODELS

RAN_BATCH = 3

#: tests/models/tiny_gqa.py (examples/llama_gqa.py at small sizes) whose make_inputs builds
#: RAN_BATCH sequences whatever batch it is given.
IGNORES_BATCH = f'''
import importlib.util

_spec = importlib.util.spec_from_file_location("_tiny_gqa_for_shapes", {str(MODELS / "tiny_gqa.py")!r})
_tiny = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tiny)
build_model = _tiny.build_model


def make_inputs(batch, context, phase):
    return _tiny.make_inputs({RAN_BATCH}, context, phase)
'''


def _report(path, phase, batch, context, deployment):
    workload = Workload(phase, batch, context, "bf16", "meta", ())
    return run_profile(load_source(str(path), {}), workload, deployment).report.to_dict()


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("deployment", [Deployment("H800"), Deployment("H800", tp=2),
                                        Deployment("H800", kernels="serving")], ids=["plain", "tp2", "serving"])
def test_model_flops_follow_the_shapes_that_ran(tmp_path, phase, deployment):
    model = tmp_path / "ignores_batch.py"
    model.write_text(IGNORES_BATCH)
    asked = _report(model, phase, 8, 128, deployment)
    honest = _report(MODELS / "tiny_gqa.py", phase, RAN_BATCH, 128, deployment)
    # what ran is the honest file's step: executed FLOPs agree, and so must model FLOPs
    assert asked["totals"]["flops"] == honest["totals"]["flops"]
    assert asked["totals"]["flops_model"] == honest["totals"]["flops_model"]
    assert [a["flops_model"] for a in asked["attention"]] == [a["flops_model"] for a in honest["attention"]]
    assert [a["kv_bytes_min"] for a in asked["attention"]] == [a["kv_bytes_min"] for a in honest["attention"]]
    q_len = 128 if phase == "prefill" else 1
    for row in asked["attention"]:
        assert any(n.startswith(f"attention ran at batch {RAN_BATCH}, {q_len} queries over 128 keys")
                   and "the workload: batch 8" in n for n in row["notes"]), row["notes"]
    assert not any("attention ran at" in n for a in honest["attention"] for n in a["notes"])
