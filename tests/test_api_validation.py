"""The Python API checks its arguments: a bad one raises a RooflineError subclass naming it (never a
TypeError, AttributeError or bare ValueError from deep inside, nor a value silently rounded), for
`profile`, `profile_file` and `capture`. One test per argument; the bad-input matrix
(tests/bad_inputs/api.py) holds more values of each."""

from __future__ import annotations

import math

import pytest
import torch

import rooflinekit
from rooflinekit.core.errors import HardwareError, ModelError, RooflineError, WorkloadError
from tests.conftest import EXAMPLES

GQA = str(EXAMPLES / "llama_gqa.py")


def _tiny() -> torch.nn.Module:
    return torch.nn.Linear(4, 4, device="meta")


def _file(**kwargs):
    return rooflinekit.profile_file(GQA, **kwargs)


def _module(**kwargs):
    return rooflinekit.profile(_tiny(), torch.zeros(2, 3, 4, device="meta"), **kwargs)


def _capture(**kwargs):
    with rooflinekit.capture(**kwargs):
        pass


def _raises(call, kind: type[RooflineError], *needles: str) -> None:
    with pytest.raises(kind) as raised:
        call()
    for needle in needles:
        assert needle in str(raised.value), str(raised.value)


@pytest.mark.parametrize("call", [_file, _module, _capture], ids=["profile_file", "profile", "capture"])
def test_batch(call):
    _raises(lambda: call(batch="4"), WorkloadError, "batch=", "'4'")
    _raises(lambda: call(batch="four"), WorkloadError, "batch=", "'four'")
    _raises(lambda: call(batch=0), WorkloadError, "batch=", "got 0")
    _raises(lambda: call(batch=2.5), WorkloadError, "batch=", "2.5")
    _raises(lambda: call(batch=True), WorkloadError, "batch=")


@pytest.mark.parametrize("call", [_file, _module, _capture], ids=["profile_file", "profile", "capture"])
def test_context(call):
    _raises(lambda: call(context=4096.7), WorkloadError, "context=", "4096.7")
    _raises(lambda: call(context=-1), WorkloadError, "context=")
    _raises(lambda: call(context=1 << 40), WorkloadError, "context=")


@pytest.mark.parametrize("call", [_file, _module, _capture], ids=["profile_file", "profile", "capture"])
def test_hardware(call):
    _raises(lambda: call(hardware=None), HardwareError, "hardware=", "None")
    _raises(lambda: call(hardware=5), HardwareError, "hardware=")


@pytest.mark.parametrize("call", [_file, _module, _capture], ids=["profile_file", "profile", "capture"])
def test_depth(call):
    _raises(lambda: call(depth=0), WorkloadError, "depth=", "got 0")
    _raises(lambda: call(depth="3"), WorkloadError, "depth=")


@pytest.mark.parametrize("call", [_file, _module, _capture], ids=["profile_file", "profile", "capture"])
def test_phase(call):
    _raises(lambda: call(phase="train"), WorkloadError, "phase=", "train")
    _raises(lambda: call(phase=1), WorkloadError, "phase=")


@pytest.mark.parametrize("call", [_file, _module, _capture], ids=["profile_file", "profile", "capture"])
def test_group_layers_and_host(call):
    _raises(lambda: call(group_layers="yes"), WorkloadError, "group_layers=")
    _raises(lambda: call(host="plugins"), WorkloadError, "host=")


def test_profile_model_is_a_module():
    _raises(lambda: rooflinekit.profile("model", torch.zeros(1, 2)), WorkloadError, "torch.nn.Module")


def test_profile_file_path():
    _raises(lambda: rooflinekit.profile_file(None), ModelError, "path=")
    _raises(lambda: rooflinekit.profile_file(5), ModelError, "path=")


def test_profile_file_options():
    _raises(lambda: _file(options="layers=1"), WorkloadError, "options=")
    _raises(lambda: _file(options={5: 1}), WorkloadError, "options=")


def test_profile_file_dtype_and_device():
    _raises(lambda: _file(dtype="fp4"), WorkloadError, "dtype=", "fp4")
    _raises(lambda: _file(dtype=None), WorkloadError, "dtype=")
    _raises(lambda: _file(device=0), WorkloadError, "device=")


def test_profile_file_formats():
    _raises(lambda: _file(weight_dtype=4), WorkloadError, "weight_dtype=")
    _raises(lambda: _file(kv_dtype=8), WorkloadError, "kv_dtype=")
    _raises(lambda: _file(weight_group_size=0), WorkloadError, "weight_group_size=")
    _raises(lambda: _file(weight_group_size="64"), WorkloadError, "weight_group_size=")
    _raises(lambda: _file(quantize_embeddings="yes"), WorkloadError, "quantize_embeddings=")


def test_profile_file_q_len():
    _raises(lambda: _file(q_len=0), WorkloadError, "q_len=")
    _raises(lambda: _file(q_len=2.0), WorkloadError, "q_len=")


def test_profile_file_parallel_degrees():
    _raises(lambda: _file(tp="2"), WorkloadError, "tp=")
    _raises(lambda: _file(ep=0), WorkloadError, "ep=")


def test_profile_file_memory_fraction():
    _raises(lambda: _file(memory_fraction=0), WorkloadError, "memory_fraction=", "0.01 to 1")
    _raises(lambda: _file(memory_fraction=math.nan), WorkloadError, "memory_fraction=", "nan")
    _raises(lambda: _file(memory_fraction="most"), WorkloadError, "memory_fraction=")


def test_profile_file_kernels_and_deployment():
    _raises(lambda: _file(kernels="fast"), WorkloadError, "kernels=", "fast")
    _raises(lambda: _file(deployment={"tp": 2}), WorkloadError, "deployment=")


def test_good_arguments_still_profile():
    report = _file(batch=2, context=64, options={"layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2,
                                                   "head_dim": 32, "intermediate": 512, "vocab": 1000})
    assert report.workload.batch == 2 and report.workload.context == 64
