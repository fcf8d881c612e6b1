"""core.revise.revised: a copy with changes, equal to what dataclasses.replace gives."""

from __future__ import annotations

import dataclasses

import pytest

from rooflinekit.core.plan import PlanConfig
from rooflinekit.core.revise import revised
from rooflinekit.stages.capture import OpRecord


def test_revised_equals_replace_and_leaves_the_original():
    op = OpRecord(index=3, name="aten.mm", module="m", flops=2.0, bytes_read=4.0, bytes_written=1.0, dtype="bf16",
                  counted=True, attrs={"rows": 2})
    new = revised(op, index=7, flops=5.0)
    assert new == dataclasses.replace(op, index=7, flops=5.0) and new is not op
    assert (op.index, op.flops) == (3, 2.0)


def test_a_frozen_configuration_stays_frozen():
    c = PlanConfig("aggregated", 2, 1, 1, 4, "bf16", "bf16", "serving", 8, 8)
    new = revised(c, batch=16, tpot_s=0.01)
    assert new == dataclasses.replace(c, batch=16, tpot_s=0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.batch = 1  # type: ignore[misc]


def test_an_unknown_field_is_refused():
    c = PlanConfig("aggregated", 2, 1, 1, 4, "bf16", "bf16", "serving", 8, 8)
    with pytest.raises(TypeError, match="no field tpot"):
        revised(c, tpot=0.01)
