"""Every kernel's expected time is non-decreasing in batch at a fixed context, for every shipped
config on every GPU of the database: no class boundary, curve or table makes a larger decode step's
kernel cheaper (a 129-row GEMM was once 17% cheaper than a 128-row one)."""

from __future__ import annotations

import pytest

from rooflinekit.analyses.stepfit import Shape, StepFitter
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import Deployment, Workload
from rooflinekit.stages.hardware import hardware_db
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.stepmodel import _kernel_time
from tests.conftest import EXAMPLES

CONFIGS = EXAMPLES / "configs"
#: Decoder configs (BERT has no decode step); layers cut to what holds every kind of layer.
NAMES = sorted(p.stem for p in CONFIGS.glob("*.json") if p.stem != "bert-base-uncased")
LAYERS = {"deepseek-v2": 3, "deepseek-v2-lite": 3, "deepseek-v3": 5, "gemma-2-9b": 2}
BATCHES = range(1, 513)
CONTEXT = 2048


def _walk(model, hw, batches, context):
    """[(kernel, batch, seconds)] per kernel group of a step model, batch by batch."""
    table = model.table()
    out = {}
    for b in batches:
        m = model._at(b)
        values = m._values(b, context)
        for i, (k, frac) in enumerate(zip(m.kernels, m._classes(values, table), strict=True)):
            out.setdefault(i, []).append((b, _kernel_time(values[k.flops], values[k.nbytes], hw, frac, k.dtype),
                                          k.name))
    return out


@pytest.mark.hf
@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_costs_no_less_at_a_larger_batch_on_every_gpu(name):
    host = get_host()
    db = hardware_db(host)
    options = {"layers": LAYERS.get(name, 2)}
    fitter = StepFitter(load_source(str(CONFIGS / f"{name}.json"), options, host), Workload("decode", 1, CONTEXT),
                        host, db)
    shape = Shape("decode", 1, (1, 2), (CONTEXT, CONTEXT + 128))
    deployments = [Deployment(kernels="serving"), Deployment(kernels="serving", weight_dtype="fp8", kv_dtype="fp8")]
    walked = 0
    for spec in db.entries:
        for deployment in deployments:
            model = fitter.step_model(shape, deployment, spec)
            for points in _walk(model, spec, BATCHES, CONTEXT).values():
                for (b0, t0, kernel), (b1, t1, _) in zip(points, points[1:], strict=False):
                    assert t1 >= t0 * (1 - 1e-12), (name, spec.name, deployment.weight_dtype, kernel, b0, t0, b1, t1)
                walked += 1
    assert walked > 10 * len(db.entries)
