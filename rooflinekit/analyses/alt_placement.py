"""A report placed on a second hardware entry beside its own (`--compare-hardware`): each row's
bound, predicted time and utilisation there."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from rooflinekit.analyses.measured import utilisation
from rooflinekit.core.report import (
    AltPlacement,
    Placement,
    Report,
)
from rooflinekit.stages.hardware import HardwareSpec
from rooflinekit.stages.place import hardware_info, rollup_name
from rooflinekit.stages.roofline import place_on

# ----------------------------------------------------------------------------------------------
# A second hardware entry, side by side
# ----------------------------------------------------------------------------------------------


def _alt(placed: Placement, hw: HardwareSpec, **more) -> AltPlacement:
    return AltPlacement(
        hardware=hw.name, calibrated=hw.calibrated, intensity=placed.intensity,
        attainable_flops=placed.attainable_flops, bound=placed.bound, time_bound_s=placed.time_bound_s,
        mfu_bound=placed.mfu_bound, ridge=hw.ridge(placed.dtype), **more,
    )


def with_alt_placement(report: Report, hw: HardwareSpec) -> Report:
    """A new report: `report` with `placement_alt` (the same counts placed on `hw`) on its totals,
    modules and attention rows, and `hardware_alt`."""
    depth, group = report.capture.depth, report.capture.group_layers
    module_ops_bound: dict[str, float] = defaultdict(float)
    total_ops_bound = 0.0
    for row in report.ops:
        t = place_on(hw, row.dtype, row.flops, row.bytes).time_bound_s
        total_ops_bound += t
        module_ops_bound[rollup_name(row.module, depth, group)] += t

    def alt(placed: Placement, flops_model: float | None, flops: float, nbytes: float,
            measured_s: float | None, dtype: str, ops_bound: float, **more) -> AltPlacement:
        if not measured_s:
            return _alt(placed, hw, time_bound_ops_s=ops_bound, **more)
        return _alt(placed, hw, time_bound_ops_s=ops_bound,
                    mfu=utilisation(flops_model if flops_model is not None else flops, measured_s, hw.peak(dtype)),
                    hfu=utilisation(flops, measured_s, hw.peak(dtype)),
                    mbu=utilisation(nbytes, measured_s, hw.memory_bandwidth),
                    time_vs_bound=measured_s / ops_bound if ops_bound else None, **more)

    t = report.totals
    step = t.measured.step_time_s if t.measured else None
    totals = replace(t, placement_alt=alt(place_on(hw, t.dtype, t.flops, t.bytes), t.flops_model, t.flops,
                                          t.bytes, step, t.dtype, total_ops_bound,
                                          predicted_step_s=total_ops_bound))
    modules = [
        replace(mod, placement_alt=alt(place_on(hw, mod.dtype, mod.flops, mod.bytes), mod.flops_model,
                                       mod.flops, mod.bytes, mod.measured.time_s if mod.measured else None,
                                       mod.dtype, module_ops_bound.get(mod.name, 0.0)))
        for mod in report.modules
    ]
    attention = []
    for att in report.attention:
        pe, pm = att.placement_executed, att.placement_min
        minimum = _alt(place_on(hw, att.dtype, pm.flops, pm.bytes), hw) if pm else None
        attention.append(replace(att, placement_alt=_alt(place_on(hw, att.dtype, pe.flops, pe.bytes), hw,
                                                         min=minimum)))
    return replace(report, totals=totals, modules=modules, attention=attention,
                   hardware_alt=hardware_info(hw, t.dtype))
