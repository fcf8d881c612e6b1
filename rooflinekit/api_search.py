"""The Python API's deployment search: what `rooflinekit plan` does, as `rooflinekit.plan(...)`.

    result = rooflinekit.plan("examples/llama_gqa.py", isl=512, osl=128, tpot=0.002)

It returns the plan with the views for people (rooflinekit.outputs.views: a one-line `repr`, the
text as `str`, Jupyter's HTML, `to_dataframe()`) and raises `rooflinekit.RooflineError` naming a
bad argument, as rooflinekit.api's functions do. (`rooflinekit.sweep` and `rooflinekit.advise`
live in rooflinekit.api beside `profile`.)
"""

from __future__ import annotations

from rooflinekit.analyses.plan import plan as run_plan
from rooflinekit.analyses.plan_options import PlanOptions
from rooflinekit.core.plan import PlanResult
from rooflinekit.outputs import views  # noqa: F401  (the plan's views: repr, str, HTML, DataFrame)

__all__ = ["plan"]


def plan(model: str, *, isl: int = 4096, osl: int = 1024, ttft: float | None = None, tpot: float | None = None,
         prefix_hit: float = 0.0, options: dict | None = None, search: PlanOptions | None = None) -> PlanResult:
    """What `rooflinekit plan MODEL` does (rooflinekit.analyses.plan.plan), with the views."""
    return run_plan(model, isl=isl, osl=osl, ttft=ttft, tpot=tpot, prefix_hit=prefix_hit, options=options,
                    search=search)
