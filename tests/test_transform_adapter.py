"""The one adapter from a plugin's transform (an object of the protocol, or a function of the
functional form) to a `Transform` (rooflinekit.transforms.adapter), and the guard it runs under."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch

from rooflinekit.core.errors import UserError
from rooflinekit.core.plugins import PluginHost
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.plugin import Counted, Transform, TransformContext
from rooflinekit.stages.capture import CaptureResult
from rooflinekit.transforms.adapter import PluginTransform, as_transform, transform_problem
from rooflinekit.transforms.base import run_transforms


def _counted() -> Counted:
    return Counted(CaptureResult(ops=[], modules={}, param_storages=set(), param_bytes_total=0.0, wall_s=0.0), [])


def _ctx() -> TransformContext:
    return TransformContext(Workload("decode", 1, 8), Deployment(), torch.nn.Identity(), PluginHost(load_entry_points=False))


@dataclass(frozen=True)
class Noted:
    name: str = "noted"

    def applies(self, ctx: TransformContext) -> bool:
        return True

    def apply(self, counted: Counted, ctx: TransformContext) -> Counted:
        return counted.with_notes("object form")


def function_form(cap, rows, workload, host):
    return cap, rows, ["function form"]


def test_both_forms_become_one_shape_and_run_alike():
    for value, note in ((Noted(), "object form"), (function_form, "function form")):
        transform = as_transform(value, "rkcase", "lever 'x'")
        assert isinstance(transform, PluginTransform) and isinstance(transform, Transform)
        assert transform_problem(value) is None
        assert run_transforms(_counted(), [transform], _ctx()).notes == (note,)
    assert as_transform(function_form, "rkcase", "lever 'x'").name == "function_form"
    assert as_transform(Noted()) == Noted()  # a caller's own Transform is run as it is


def test_a_plugin_transform_that_fails_is_named_in_one_line():
    def raises(cap, rows, workload, host):
        raise RuntimeError("restated nothing")

    ctx = _ctx()
    with pytest.raises(UserError, match="plugin 'rkcase' failed \\(RuntimeError: restated nothing\\) in its lever 'x'"):
        as_transform(raises, "rkcase", "lever 'x'").apply(_counted(), ctx)
    bad = replace(Noted(), name="bad")
    object.__setattr__(bad, "apply", lambda counted, ctx: "not counted")
    with pytest.raises(UserError, match="returned str, not a restated capture"):
        as_transform(bad, "rkcase", "lever 'x'").apply(_counted(), ctx)


def test_what_is_no_transform_is_said():
    assert "a transform must be a Transform" in transform_problem(5)
    with pytest.raises(TypeError):
        as_transform(5, "rkcase", "lever 'x'")
