"""Every model transform is a class of the one `Transform` protocol, held in rooflinekit/transforms/;
a pipeline stage's share (`PipelineStage`) partitions the step's ops and attention rows by layer.

The stages' shares are checked against the whole step's op records, grouped here from their module
paths and the stage ranges of rooflinekit.stages.pipeline_parallel.split_layers."""

from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path

import pytest
import torch

from rooflinekit.analyses.profile import TRANSFORMS, count
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import Deployment, Workload, mixed_workload
from rooflinekit.stages.capture import CaptureResult
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.pipeline_parallel import split_layers
from rooflinekit.transforms.adapter import PluginTransform, as_transform
from rooflinekit.transforms.base import Counted, Transform, TransformContext
from rooflinekit.transforms.mixed import MixedStep
from rooflinekit.transforms.parallel import ParallelShard
from rooflinekit.transforms.pipeline import Layout, PipelineStage
from rooflinekit.transforms.quantize import Quantize
from rooflinekit.transforms.restate import OptionRestatements
from rooflinekit.transforms.serving import Serving
from tests.conftest import EXAMPLES, ROOT

#: Four layers of a small Llama-style GQA model (on meta).
SMALL = {"layers": 4, "heads": 8, "kv_heads": 2, "head_dim": 32, "hidden": 256, "intermediate": 512,
         "vocab": 1000}
WORKLOAD = Workload("decode", 4, 512, "bf16", "meta", tuple(sorted(SMALL.items())))


def _ctx(workload: Workload = WORKLOAD, deployment: Deployment | None = None) -> TransformContext:
    return TransformContext(workload, deployment or Deployment(), torch.nn.Identity(),
                            PluginHost(load_entry_points=False))


def _lever(cap, rows, workload, host):
    return cap, rows, []


def _built_ins() -> list[Transform]:
    layout = Layout("layers", [f"layers.{i}" for i in range(4)], split_layers(4, 2))
    return [Quantize(), Serving(), ParallelShard(), OptionRestatements(), as_transform(_lever),
            PipelineStage(layout, 0), MixedStep([], WORKLOAD.segments(), "")]


@pytest.mark.parametrize("transform", _built_ins(), ids=lambda t: type(t).__name__)
def test_every_built_in_transform_is_a_transform_class_of_the_transforms_package(transform):
    assert isinstance(transform, Transform)
    assert isinstance(transform.name, str) and transform.name
    where = Path(inspect.getsourcefile(type(transform))).resolve()
    assert where.parent == ROOT / "rooflinekit" / "transforms", where
    assert type(transform).__module__.startswith("rooflinekit.transforms.")


def test_the_stated_list_and_the_lever_adapter_are_those_classes():
    assert [type(t) for t in TRANSFORMS] == [Quantize, Serving, ParallelShard, OptionRestatements]
    assert isinstance(as_transform(_lever), PluginTransform)


def test_pipeline_stage_applies_to_a_pipelined_request_and_mixed_step_to_a_mixed_one():
    stage = _built_ins()[5]
    assert stage.applies(_ctx(deployment=Deployment(pp=2)))
    assert not stage.applies(_ctx())
    mixed = mixed_workload(WORKLOAD, ((64, 2), (128, 1)), 32)
    step = MixedStep([], mixed.segments(), "")
    assert step.applies(_ctx(mixed)) and not step.applies(_ctx())


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return int(parts[1]) if parts[0] == "layers" and len(parts) > 1 else None


def _expected_stages(ops, ranges: list[range]) -> list[int]:
    """Each op's stage from its module path: its layer's, else the last layer's run before it."""
    out, current = [], 0
    for op in ops:
        layer = _layer(op.module)
        if layer is not None:
            current = next(k for k, r in enumerate(ranges) if layer in r)
        out.append(current)
    return out


def _key(op) -> tuple:
    return (op.module, op.name, op.kind, op.flops, op.bytes_read, op.bytes_written, op.shapes)


@pytest.fixture(scope="module")
def whole() -> Counted:
    source = load_source(str(EXAMPLES / "llama_gqa.py"), SMALL)
    return count(source, WORKLOAD, Deployment("H800", pp=2), get_host()).counted


@pytest.mark.parametrize("pp", [2, 3, 4])
def test_the_stages_ops_partition_the_steps_ops(whole, pp):
    ranges = split_layers(4, pp)
    layout = Layout("layers", [f"layers.{i}" for i in range(4)], ranges)
    ctx = _ctx(deployment=Deployment(pp=pp))
    shares = [PipelineStage(layout, k).apply(whole, ctx) for k in range(pp)]
    ops = whole.capture.ops
    want = _expected_stages(ops, ranges)
    assert len(set(want)) == pp
    for k, share in enumerate(shares):
        mine = [op for op, s in zip(ops, want, strict=True) if s == k]
        assert [_key(op) for op in share.capture.ops] == [_key(op) for op in mine]
        assert [op.index for op in share.capture.ops] == list(range(len(mine)))
        assert all(_layer(op.module) is None or _layer(op.module) in ranges[k] for op in share.capture.ops)
        assert share.notes[-1].startswith(f"pipeline stage {k} of {pp}: layers {ranges[k].start}-")
    assert Counter(_key(op) for s in shares for op in s.capture.ops) == Counter(_key(op) for op in ops)
    assert sum(op.flops for s in shares for op in s.capture.ops) == sum(op.flops for op in ops)
    assert sum(op.bytes for s in shares for op in s.capture.ops) == sum(op.bytes for op in ops)
    assert [op.index for op in ops] == list(range(len(ops)))  # the step itself is not edited


@pytest.mark.parametrize("pp", [2, 3])
def test_the_attention_rows_split_by_layer(whole, pp):
    ranges = split_layers(4, pp)
    layout = Layout("layers", [f"layers.{i}" for i in range(4)], ranges)
    shares = [PipelineStage(layout, k).apply(whole, _ctx(deployment=Deployment(pp=pp))) for k in range(pp)]
    by_module = {row.module: row for row in whole.attention}
    assert len(by_module) == 4
    assert sorted(row.module for s in shares for row in s.attention) == sorted(by_module)
    for k, share in enumerate(shares):
        assert {_layer(row.module) for row in share.attention} == set(ranges[k])
        for row in share.attention:
            before = by_module[row.module]
            assert [_key(share.capture.ops[i]) for i in row.op_indices] == \
                [_key(whole.capture.ops[i]) for i in before.op_indices]
            assert [_key(share.capture.ops[i]) for i in row.kv_op_indices] == \
                [_key(whole.capture.ops[i]) for i in before.kv_op_indices]


def test_a_stage_of_an_empty_capture_is_empty():
    layout = Layout("layers", ["layers.0", "layers.1"], split_layers(2, 2))
    empty = Counted(CaptureResult(ops=[], modules={}, param_storages=set(), param_bytes_total=0.0, wall_s=0.0), [])
    share = PipelineStage(layout, 1).apply(empty, _ctx(deployment=Deployment(pp=2)))
    assert share.capture.ops == [] and share.attention == []
