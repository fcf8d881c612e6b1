"""The meta memo (rooflinekit.stages.capture.meta_memo) changes nothing but the time a capture takes.

A repeated pure meta call gets rebuilt outputs instead of a run of its meta kernel: these tests
check the rebuilt outputs against torch's own kernels op by op (scalar types, strides, default
dtype, several outputs), that what must run still runs (in-place ops, non-meta tensors, random
draws), and that every example, test model and shipped config records the same ops, liveness and
report with the memo as without it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.capture import recorder as capture_mod
from rooflinekit.stages.capture.meta_memo import MetaMemo, memoisable
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, MODELS

CONFIGS = EXAMPLES / "configs"
aten = torch.ops.aten


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _layout(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [(tuple(t.shape), t.stride(), t.dtype, t.device.type) for t in outs]


def _twice(memo, op, *args, **kwargs):
    """(torch's own output, the memo's first, the memo's second) for op(*args, **kwargs)."""
    own = op(*args, **kwargs)
    first = memo.call(op, op, args, kwargs)
    second = memo.call(op, op, args, kwargs)
    return own, first, second


@pytest.mark.parametrize(
    ("op", "args", "kwargs"),
    [
        (aten.add.Tensor, (_meta(4, 8), _meta(8)), {}),
        (aten.mul.Tensor, (_meta(3, 5).t(), _meta(5, 3)), {}),  # strides follow the transposed input
        (aten.mm.default, (_meta(6, 4, dtype=torch.bfloat16), _meta(4, 9, dtype=torch.bfloat16)), {}),
        (aten.topk.default, (_meta(2, 50), 7), {}),  # two outputs
        (aten.var_mean.correction, (_meta(4, 6),), {"dim": [1], "keepdim": True}),
        (aten._softmax.default, (_meta(2, 3, 5), -1, False), {}),
        (aten.cat.default, ([_meta(2, 3), _meta(4, 3)],), {}),
        (aten.arange.start, (0, 10), {"device": torch.device("meta")}),
        (aten.full.default, ([2, 3], 1.5), {"dtype": torch.float16, "device": torch.device("meta")}),
    ],
)
def test_rebuilt_outputs_equal_the_kernels(op, args, kwargs):
    memo = MetaMemo()
    own, first, second = _twice(memo, op, *args, **kwargs)
    assert _layout(first) == _layout(own)
    assert _layout(second) == _layout(own)
    assert type(second) is type(own)
    assert (memo.misses, memo.hits) == (1, 1)


def test_scalars_of_different_types_do_not_share_an_entry():
    memo = MetaMemo()
    ints = _meta(4, dtype=torch.int32)
    as_int = memo.call(aten.mul.Tensor, aten.mul.Tensor, (ints, 2), {})
    as_float = memo.call(aten.mul.Tensor, aten.mul.Tensor, (ints, 2.0), {})
    as_bool = memo.call(aten.mul.Tensor, aten.mul.Tensor, (ints, True), {})
    assert (as_int.dtype, as_float.dtype, as_bool.dtype) == (torch.int32, torch.float32, torch.int32)
    assert memo.hits == 0


def test_the_default_dtype_is_part_of_the_key():
    memo = MetaMemo()
    before = torch.get_default_dtype()
    try:
        first = memo.call(aten.arange.default, aten.arange.default, (5.0,), {"device": torch.device("meta")})
        torch.set_default_dtype(torch.float64)
        second = memo.call(aten.arange.default, aten.arange.default, (5.0,), {"device": torch.device("meta")})
    finally:
        torch.set_default_dtype(before)
    assert (first.dtype, second.dtype) == (torch.float32, torch.float64)
    assert memo.hits == 0


def test_views_and_odd_outputs_are_not_memoised():
    memo = MetaMemo()
    base = _meta(4, 6)
    # an output sharing an input's storage, and one that is not what empty_strided makes
    memo.call(aten.alias.default, aten.alias.default, (base,), {})
    memo.call(aten.alias.default, aten.alias.default, (base,), {})
    memo.call(aten.slice.Tensor, lambda *a, **k: _meta(10)[2:], (base,), {})
    memo.call(aten.slice.Tensor, lambda *a, **k: _meta(10)[2:], (base,), {})
    assert memo.hits == 0


def test_tensors_with_data_are_never_memoised():
    memo = MetaMemo()
    a, b = torch.ones(3), torch.ones(3)
    memo.call(aten.add.Tensor, aten.add.Tensor, (a, b), {})
    out = memo.call(aten.add.Tensor, aten.add.Tensor, (a, b), {})
    assert memo.hits == 0
    assert out.tolist() == [2.0, 2.0, 2.0]  # computed, not rebuilt


def test_which_ops_may_use_the_memo():
    assert memoisable(aten.add.Tensor, writes_or_aliases=False)
    assert not memoisable(aten.add_.Tensor, writes_or_aliases=True)
    assert not memoisable(aten.randn.default, writes_or_aliases=False)  # draws random numbers


# -- whole captures: the same records with and without the memo --------------------------------


def _profiled(path, phase, options, memo, monkeypatch):
    monkeypatch.setattr(capture_mod.Recorder, "memo_meta", memo)
    workload = Workload(phase, 2, 96, options=tuple(sorted(options.items())))
    return run_profile(load_source(str(path), options), workload, Deployment("H800"))


def _without_time(report: dict) -> dict:
    report = dict(report)
    report["capture"] = {k: v for k, v in report["capture"].items() if k != "wall_s"}
    return report


def assert_same_capture(path, phase, options, monkeypatch, expect_hits=True):
    hits = []
    real_call = MetaMemo.call

    def counting(self, *a, **k):
        out = real_call(self, *a, **k)
        hits.append(self.hits)
        return out

    monkeypatch.setattr(MetaMemo, "call", counting)
    with_memo = _profiled(path, phase, options, True, monkeypatch)
    without = _profiled(path, phase, options, False, monkeypatch)
    assert len(with_memo.capture.ops) == len(without.capture.ops)
    for a, b in zip(with_memo.capture.ops, without.capture.ops, strict=True):
        assert dataclasses.asdict(a) == dataclasses.asdict(b), (path.name, phase, a.index, a.name)
    assert with_memo.capture.live == without.capture.live
    assert _without_time(with_memo.report.to_dict()) == _without_time(without.report.to_dict())
    if expect_hits:
        assert hits and hits[-1] > 0, "the memo answered no call: the test compares nothing"


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_examples_record_the_same_with_the_memo(name, phase, monkeypatch):
    assert_same_capture(EXAMPLES / name, phase, {"layers": 2} if name != "tp_mlp.py" else {}, monkeypatch)


@pytest.mark.parametrize(("name", "phase"), [
    (p.name, phase) for p in sorted(MODELS.glob("*.py")) for phase in ("decode", "prefill")
    if p.stem not in {"dtensor_mlp", "explicit_collectives"}  # distributed: tests/test_distributed.py
    and not (p.stem == "encoder_decoder" and phase == "decode")])  # it has no cache to decode from
def test_test_models_record_the_same_with_the_memo(name, phase, monkeypatch):
    assert_same_capture(MODELS / name, phase, {}, monkeypatch, expect_hits=False)


@pytest.mark.hf
@pytest.mark.parametrize(("name", "phase"), [(p.stem, phase) for p in sorted(CONFIGS.glob("*.json"))
                                             for phase in ("decode", "prefill")
                                             if not (p.stem.startswith("bert") and phase == "decode")])
def test_configs_record_the_same_with_the_memo(name, phase, monkeypatch):
    assert_same_capture(CONFIGS / f"{name}.json", phase, {"layers": 2}, monkeypatch)
