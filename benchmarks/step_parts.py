"""One step's expected time split by part, from the step's own op records (the benchmarks' shared helper).

`parts(planner, variant, workload, part_of)` runs the full (unskipped) capture of `workload` through the
variant's transforms, prices it as `profile` does (rooflinekit.stages.expected), and sums each
kernel's time, its launch and each collective's expected time under the name `part_of(op, in_attention)`
gives (launches under "launches", collectives under their own part). The parts add up to the
expected step, checked.
"""

from __future__ import annotations

from collections.abc import Callable

from rooflinekit.stages import collectives
from rooflinekit.stages.expected import expected_step
from rooflinekit.stages.place import comm_expected, communication


def parts(planner, variant, workload, part_of: Callable[[object, bool], str]) -> dict[str, float]:
    fitter = planner.fitter_for(variant.dtype)
    counted = fitter.transformed(workload, variant.deployment, skip=False)
    ops, hw = counted.capture.ops, planner.hw
    attention = {i for site in counted.attention for i in site.op_indices}
    expected = expected_step(ops, attention, hw, workload.phase, *comm_expected(communication(ops, hw)))
    launch = expected.launch_s / expected.kernels if expected.kernels else 0.0
    out: dict[str, float] = {}
    for i, (op, t) in enumerate(zip(ops, expected.op_times, strict=True)):
        if op.kind == "collective" or op.attrs.get("collective"):
            key = part_of(op, False)
            out[key] = out.get(key, 0.0) + collectives.call_expected(op.attrs, hw)[0]
        elif t:
            key = part_of(op, i in attention)
            out[key] = out.get(key, 0.0) + t - launch
            out["launches"] = out.get("launches", 0.0) + launch
    total = sum(out.values())
    if abs(total - expected.step_s) > 1e-9 * expected.step_s:
        raise AssertionError(f"the parts ({total}) do not add up to the expected step ({expected.step_s})")
    out["step"] = expected.step_s
    return out
