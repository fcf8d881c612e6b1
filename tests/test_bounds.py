"""A bound is a bound: no resource's own time exceeds it, and it never exceeds the expected step.

The step's bound (totals.time_bound_s) is the largest of its FLOPs at peak, its bytes at HBM
bandwidth and its collectives' time, each resource overlapped perfectly with the others; the
expected step (totals.expected_step_s) runs kernels, launches and collectives one after another
at achievable rates. A DeepSeek-style expert-parallel step used to report "communication binds"
beside a whole-step bound below the communication time.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinekit.analyses.profile import run_profile
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.model_source import load_source
from tests.conftest import EXAMPLES, MODELS

GQA = (EXAMPLES / "llama_gqa.py", {"layers": 2, "heads": 8, "kv_heads": 4, "head_dim": 32, "hidden": 256,
                                   "intermediate": 512, "vocab": 1000})
MOE = (MODELS / "experts3d.py", {})


def _totals(model, phase, batch, context, tp, ep, kernels, hardware="H800"):
    path, options = model
    workload = Workload(phase, batch, context, "bf16", "meta", tuple(sorted(options.items())))
    deployment = Deployment(hardware, tp=tp, ep=ep, kernels=kernels)
    return run_profile(load_source(str(path), options), workload, deployment).report.totals


@given(st.sampled_from(["dense", "moe"]), st.sampled_from(["decode", "prefill"]), st.integers(1, 64),
       st.sampled_from([16, 512, 8192]), st.sampled_from([1, 2, 4, 8, 16]),
       st.sampled_from(["as-written", "serving"]))
@settings(max_examples=40, deadline=None)
def test_every_resource_fits_under_the_bound_and_the_bound_under_the_expected_step(kind, phase, batch, context,
                                                                                   gpus, kernels):
    if phase == "prefill":
        batch = 1
    model, tp, ep = (GQA, min(gpus, 4), 1) if kind == "dense" else (MOE, 1, gpus)
    t = _totals(model, phase, batch, context, tp, ep, kernels)
    for resource in (t.time_compute_s, t.time_memory_s, t.time_comm_s):
        assert resource <= t.time_bound_s * (1 + 1e-12)
    assert t.time_bound_s == max(t.time_compute_s, t.time_memory_s, t.time_comm_s)
    assert t.time_bound_s <= t.expected_step_s * (1 + 1e-12)
    assert t.time_bound_s <= t.predicted_step_s * (1 + 1e-12)


def test_a_step_that_communication_binds_is_bound_by_its_communication():
    """Experts over 16 GPUs across two nodes at batch 1: the all-to-alls outlast the kernels."""
    t = _totals(MOE, "decode", 1, 64, 1, 16, "serving")
    assert t.binding == "communication"
    assert t.time_bound_s == pytest.approx(t.time_comm_s) and t.time_comm_s > max(t.time_compute_s, t.time_memory_s)
