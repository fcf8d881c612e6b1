"""The Python API takes every analysis option the CLI takes, and gives the CLI's numbers (issue 26,
item 2): `rooflinekit.profile`, `sweep` and `advise` on examples/llama_gqa.py, each with the same
options as a `-f json` run of the command, compared as whole JSON documents but for the fields that
legitimately differ between two runs (STRIPPED)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

import rooflinekit
from rooflinekit.outputs.render import to_json
from tests.conftest import EXAMPLES

GQA = str(EXAMPLES / "llama_gqa.py")
MODEL = {"layers": 2, "hidden": 512, "heads": 8, "kv_heads": 2, "head_dim": 64, "intermediate": 1024}

#: Fields that legitimately differ between a CLI run and an API call: the seconds the analysis took
#: (`wall_s`: the document's, and `capture.wall_s` of a profile) and the tool's own identity (`tool`:
#: name and version of the rooflinekit that wrote it). Nothing else is left out.
TIMINGS = ("wall_s",)
TOOL = ("tool",)


def _stripped(value, top: bool = True):
    if isinstance(value, dict):
        return {k: _stripped(v, False) for k, v in value.items() if k not in TIMINGS and not (top and k in TOOL)}
    if isinstance(value, list):
        return [_stripped(v, False) for v in value]
    return value


def _json(data: dict) -> dict:
    """The document as the CLI writes it (non-finite numbers as null), read back."""
    return _stripped(json.loads(to_json(data)))


def _cli(invoke, *args) -> dict:
    result = invoke(*args, GQA, "-H", "H800", "-f", "json", *[a for k, v in MODEL.items() for a in ("-O", f"{k}={v}")])
    assert result.exit_code == 0, result.stderr
    return _stripped(json.loads(result.stdout))


def test_profile_with_formats_q_len_and_tp_equals_the_cli(invoke):
    cli = _cli(invoke, "profile", "--phase", "decode", "-b", "4", "-s", "2048", "--q-len", "2", "--tp", "2",
               "--weight-dtype", "int4", "--weight-group-size", "64", "--kv-dtype", "fp8", "--kernels", "serving",
               "--memory-fraction", "0.8")
    report = rooflinekit.profile(GQA, phase="decode", batch=4, context=2048, q_len=2, tp=2, weight_dtype="int4",
                                 weight_group_size=64, kv_dtype="fp8", kernels="serving", memory_fraction=0.8,
                                 hardware="H800", options=MODEL)
    assert report.workload.q_len == 2 and report.deployment.tp == 2 and report.deployment.kv_dtype == "fp8"
    assert _json(report.to_dict()) == cli


def test_profile_file_takes_the_same_options(invoke):
    cli = _cli(invoke, "profile", "-b", "2", "-s", "1024", "--pp", "2", "--weight-dtype", "fp8")
    report = rooflinekit.profile_file(GQA, batch=2, context=1024, pp=2, weight_dtype="fp8", hardware="H800",
                                      options=MODEL)
    assert _json(report.to_dict()) == cli


def test_sweep_over_two_by_two_points_equals_the_cli(invoke):
    cli = _cli(invoke, "sweep", "-b", "1,4", "-s", "512,1024", "--tp", "2", "--kv-dtype", "fp8", "--max-batch", "256")
    result = rooflinekit.sweep(GQA, batches=[1, 4], contexts=[512, 1024], tp=2, kv_dtype="fp8", max_batch=256,
                       hardware="H800", options=MODEL)
    assert len(result.points) == 4
    assert _json(result.to_dict()) == cli


def test_advise_equals_the_cli(invoke):
    cli = _cli(invoke, "advise", "-b", "2", "-s", "1024", "--weight-dtype", "fp8", "--mtp", "1", "--accept", "0.6")
    advice = rooflinekit.advise(GQA, batch=2, context=1024, weight_dtype="fp8", mtp=1, accept=0.6, hardware="H800",
                        options=MODEL)
    assert advice.levers
    assert _json(advice.to_dict()) == cli


def test_a_model_in_memory_with_make_inputs_sweeps_as_its_file_does():
    """A module in memory sweeps with make_inputs(batch, context, phase), as its file does."""
    spec = importlib.util.spec_from_file_location("llama_gqa_parity", GQA)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = module.build_model(**MODEL)
    finally:
        torch.set_default_dtype(default)

    def make_inputs(batch, context, phase):
        return module.make_inputs(batch, context, phase, layers=2, kv_heads=2, head_dim=64)

    in_memory = rooflinekit.sweep(model, make_inputs=make_inputs, batches=[1, 2], contexts=[256], hardware="H800",
                          critical=False)
    from_file = rooflinekit.sweep(GQA, batches=[1, 2], contexts=[256], hardware="H800", options=MODEL, critical=False)
    assert [(p.flops, p.bytes) for p in in_memory.points] == [(p.flops, p.bytes) for p in from_file.points]
    with pytest.raises(rooflinekit.RooflineError, match="make_inputs="):
        rooflinekit.sweep(model, batches=[1], contexts=[256])


@pytest.mark.parametrize("call", [rooflinekit.profile, rooflinekit.sweep, rooflinekit.advise], ids=["profile", "sweep", "advise"])
def test_an_unknown_keyword_names_inputs(call):
    with pytest.raises(rooflinekit.RooflineError, match="inputs="):
        call(GQA, input_ids=1)
