"""The Python API's searches over one model: what `rooflinekit sweep`, `advise` and `plan` do, as
`rooflinekit.sweep(...)`, `rooflinekit.advise(...)` and `rooflinekit.plan(...)`.

    sweep = rooflinekit.sweep("examples/llama_gqa.py", batches=[1, 4, 16], contexts=[4096, 32768])
    advice = rooflinekit.advise("examples/llama_gqa.py", batch=4, context=32768)
    result = rooflinekit.plan("examples/llama_gqa.py", isl=512, osl=128, tpot=0.002)

Each returns its report with the views for people (rooflinekit.outputs.viewed: a one-line `repr`,
the text table as `str`, Jupyter's HTML, `to_dataframe()`) and raises `rooflinekit.RooflineError`
naming a bad argument, as rooflinekit.api's functions do.
"""

from __future__ import annotations

from collections.abc import Sequence

from rooflinekit.analyses.advise import advise as run_advise
from rooflinekit.analyses.plan import PlanOptions
from rooflinekit.analyses.plan import plan as run_plan
from rooflinekit.analyses.sweep import SweepOptions, run_sweep
from rooflinekit.api import _whole, check_common, check_file_arguments
from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.plugins import get_host
from rooflinekit.core.request import DEFAULT_FRACTION, Deployment
from rooflinekit.outputs.viewed import ViewedAdvice, ViewedPlan, ViewedSweep
from rooflinekit.stages.hardware import DEFAULT_HARDWARE
from rooflinekit.stages.workload import (
    MAX_BATCH,
    MAX_CONTEXT,
    Workload,
    load_source,
    parse_options,
    validate,
)

__all__ = ["advise", "plan", "sweep"]


def _check(path: object, options: object, dtype: object, deployment: object) -> None:
    """The file, its options, the dtype and a whole deployment, as `profile_file` checks them."""
    check_file_arguments(path, options, dict(
        dtype=dtype, device="meta", weight_dtype=None, kv_dtype=None, weight_group_size=None, q_len=1, tp=1, ep=1,
        quantize_embeddings=False, kernels="as-written", memory_fraction=DEFAULT_FRACTION, deployment=deployment))


def _counts(name: str, values: object, most: int) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise WorkloadError(f"{name}= must be a non-empty list of whole numbers, got {values!r}")
    return [_whole(name, v, 1, most) for v in values]


def sweep(path: str, *, batches: Sequence[int] = (1, 4, 16, 48), contexts: Sequence[int] = (4096, 32768),
          phase: str = "decode", hardware: str = DEFAULT_HARDWARE, options: dict | None = None,
          dtype: str = "bf16", deployment: Deployment | None = None) -> ViewedSweep:
    """What `rooflinekit sweep PATH -b ... -s ...` does, on the meta device: every (batch, context)
    profiled (or evaluated from exactly fitted counts), with the critical batch per context.
    `deployment` (TP/EP, formats, kernels) wins over `hardware` when given."""
    check_common(hardware=hardware, phase=phase, batch=None, context=None, depth=1, group_layers=False, host=None)
    _check(path, options, dtype, deployment)
    batches, contexts = _counts("batches", batches, MAX_BATCH), _counts("contexts", contexts, MAX_CONTEXT)
    opts = parse_options([f"{k}={v}" for k, v in (options or {}).items()])
    for b in batches:
        for c in contexts:
            validate(phase, b, c, dtype, "meta")
    base = Workload(phase, batches[0], contexts[0], dtype, "meta", tuple(sorted(opts.items())))
    host = get_host()
    result = run_sweep(load_source(str(path), opts, host), base, deployment or Deployment(hardware=hardware),
                       batches, contexts, options=SweepOptions())
    if result.interrupted:
        raise KeyboardInterrupt
    return ViewedSweep.of(result.report())


def advise(path: str, *, phase: str = "decode", batch: int = 1, context: int = 4096,
           hardware: str = DEFAULT_HARDWARE, options: dict | None = None, dtype: str = "bf16",
           deployment: Deployment | None = None) -> ViewedAdvice:
    """What `rooflinekit advise PATH` does: the step profiled, then every lever that applies priced
    and ranked by tokens/s per GPU. The default deployment is the serving view (as the CLI's)."""
    check_common(hardware=hardware, phase=phase, batch=batch, context=context, depth=1, group_layers=False,
                 host=None)
    _check(path, options, dtype, deployment)
    opts = parse_options([f"{k}={v}" for k, v in (options or {}).items()])
    validate(phase, batch, context, dtype, "meta")
    workload = Workload(phase, batch, context, dtype, "meta", tuple(sorted(opts.items())))
    host = get_host()
    report = run_advise(load_source(str(path), opts, host), workload,
                        deployment or Deployment(hardware=hardware, kernels="serving"), host=host)
    return ViewedAdvice.of(report)


def plan(model: str, *, isl: int = 4096, osl: int = 1024, ttft: float | None = None, tpot: float | None = None,
         prefix_hit: float = 0.0, options: dict | None = None, search: PlanOptions | None = None) -> ViewedPlan:
    """What `rooflinekit plan MODEL` does (rooflinekit.analyses.plan.plan), with the views."""
    return ViewedPlan.of(run_plan(model, isl=isl, osl=osl, ttft=ttft, tpot=tpot, prefix_hit=prefix_hit,
                                  options=options, search=search))
