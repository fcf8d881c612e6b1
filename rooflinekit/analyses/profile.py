"""Wire the stages together: workload -> capture -> attribute -> place. The CLI only calls this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from rooflinekit.analyses.measure import (
    cpu_hardware,
    modelled_modules,
    with_alt_placement,
    with_measurement,
    write_trace,
)
from rooflinekit.analyses.measure import measure as run_measure
from rooflinekit.analyses.parallel import ParallelConfig, plan_parallel
from rooflinekit.core.errors import UserError
from rooflinekit.core.model_facts import cached
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.report import Report
from rooflinekit.stages import quantize
from rooflinekit.stages.attribute import attribute_attention
from rooflinekit.stages.capture import CaptureResult, capture
from rooflinekit.stages.detect import auto_hardware
from rooflinekit.stages.formulas import formula_book
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, HardwareDB, hardware_db
from rooflinekit.stages.memory import activation_peak, memory_fraction, memory_of
from rooflinekit.stages.modelled import module_models
from rooflinekit.stages.place import build_report
from rooflinekit.stages.workload import (
    ModelSource,
    Workload,
    build,
    exit_error,
    in_effect,
    multi_token_note,
    validate_levers,
)
from rooflinekit.stages.workload import _user_frame as user_frame

#: A restatement of a capture before placement: (capture, attention rows, workload, plugin host)
#: -> (capture, attention rows, notes).
Transform = Callable[[CaptureResult, list, Workload, PluginHost], tuple[CaptureResult, list, list[str]]]


@dataclass
class Profiled:
    report: Report | None  # None for profile(place=False)
    model: torch.nn.Module
    capture: object
    #: The attention sites the report was placed from (rooflinekit.stages.attribute.AttentionRow).
    attention: list = field(default_factory=list)
    #: The module models plugins put in place during the capture (rooflinekit.stages.modelled).
    models: list = field(default_factory=list)


def _forward_error(exc: BaseException, source: ModelSource, workload: Workload) -> UserError:
    hint = ""
    text = str(exc)
    if workload.device == "meta" and ("meta" in text or "data-dependent" in text or "item()" in text):
        hint = (" (the meta device holds no data: data-dependent code needs --device cpu with small "
                "options, or a module-model plugin")
        if source.kind.startswith("transformers"):
            # a static cache's length is read from its contents by some models (OPT)
            hint += "; for a transformers config, try -O cache=dynamic first"
        hint += ")"
    return UserError(f"the model's forward failed: {user_frame(exc, source.path)}{hint}")


def profile(
    source: ModelSource,
    workload: Workload,
    hardware: str = DEFAULT_HARDWARE,
    *,
    depth: int = 3,
    group_layers: bool = False,
    host: PluginHost | None = None,
    db: HardwareDB | None = None,
    measure: bool | None = None,
    warmup: int = 2,
    repeats: int = 5,
    trace: str | None = None,
    compare_hardware: str | None = None,
    on_stage: Callable[[str], None] | None = None,
    transform: Transform | None = None,
    place: bool = True,
    detail: bool = True,
) -> Profiled:
    """Build, capture one forward, attribute attention, place on `hardware`.

    `hardware="auto"` takes the local GPU's entry (NVML), else DEFAULT_HARDWARE. Measured mode
    (`measure=True`; None means on for cuda, off otherwise) then times `repeats` real forwards after
    `warmup` ones and joins the times to the counted ops (rooflinekit.analyses.measure); `trace` writes the
    annotated profiler trace there. `compare_hardware` adds a second placement (placement_alt).
    Workload options `_tp`/`_ep` (rooflinekit.analyses.parallel.with_parallel) give one GPU's share of the
    model under planned tensor/expert parallelism. `on_stage("built")` and `on_stage("captured")`
    are called after those stages (torch.distributed runs check every rank there). `transform`
    restates the (per-GPU) capture and attention rows before they are placed (a lever of
    rooflinekit.analyses.advise, e.g. absorbed MLA); its notes join the report's. `place=False`
    stops after the capture and its attention rows (a sweep's design captures): no report, nothing
    measured; `detail=False` places it without op rows and fused view (stages.place.build_report).
    """
    validate_levers(workload)  # formats and q_len, as the command line checks them
    host = host or get_host()
    db = db or hardware_db(host)
    auto_note = None
    if hardware == "auto":
        hw, auto_note = auto_hardware(db, DEFAULT_HARDWARE)
    else:
        hw = db.get(hardware)
    alt_hw = db.get(compare_hardware) if compare_hardware else None
    if measure is None:
        measure = workload.device.startswith("cuda")
    if measure and workload.device == "meta":
        raise UserError("--measure (measured mode) times the real forward: pass --device cpu or --device cuda "
                        "(the meta device holds no data)")
    if trace and not measure:
        raise UserError("--trace records a measured run: add --measure (or use --device cuda)")
    if measure and quantize.applies(workload):
        raise UserError("--weight-dtype, --kv-dtype and --dtype fp8 model formats the model does not run; measured "
                        "mode times what it runs: drop --measure (or those options)")
    quantize.check_hardware(hw, workload)
    hardware_warning = None
    if hardware == "auto" and measure and workload.device.startswith("cpu"):
        # a CPU run belongs on this CPU's calibrated entry; without one, say how to make it
        hw, auto_note, hardware_warning = cpu_hardware(db, hw, workload.device)
    par = ParallelConfig.of(workload)
    if par.active and measure:
        raise UserError("--tp/--ep plan one GPU's share of a single-GPU model from its counts; measured "
                        "mode times the real forward: drop --measure (or run the split model under torchrun)")
    built = build(source, workload)
    if on_stage:
        on_stage("built")
    try:
        with in_effect(workload), module_models(built.model, workload, host) as patched:
            cap = capture(built.model, built.inputs, formula_book(host))
    except UserError:
        raise
    except SystemExit as exc:
        raise exit_error(exc, source.path, "the model's forward") from None
    except Exception as exc:
        raise _forward_error(exc, source, workload) from exc
    if on_stage:
        on_stage("captured")
    rows = attribute_attention(cap, built.model, workload, host)
    levers = quantize.transform(cap, rows, built.model, workload)  # formats the model does not run
    cap, rows = levers.capture, levers.attention
    planned = None
    if par.active:  # planned parallelism: one GPU's share (rooflinekit.analyses.parallel)
        planned = plan_parallel(cap, rows, built.model, workload, host, par, levers.stored)
        cap, rows = planned.capture, planned.attention
    transform_notes: list[str] = []
    if transform is not None:
        cap, rows, transform_notes = transform(cap, rows, workload, host)
    if not place:  # counts only: no report, nothing timed
        return Profiled(report=None, model=built.model, capture=cap, attention=rows, models=list(patched))
    params = cached(built.model, "parameters", lambda: sum(p.numel() for p in built.model.parameters()))
    info = {
        "name": source.name,
        "path": source.path,
        "kind": source.kind,
        "parameters": params,
        "param_bytes": cap.param_bytes_total,
        "modules": len(cap.modules),
    }
    notes = list(source.notes) + [m.assumption_note for m in patched] + levers.notes
    if multi_token_note(workload):
        notes.append(multi_token_note(workload))
    if auto_note:
        notes.append(auto_note)
    if planned is not None:
        notes.append(planned.headline)
    notes.extend(transform_notes)
    measurement = None
    if measure:
        try:
            with in_effect(workload), module_models(built.model, workload, host):
                measurement = run_measure(
                    built.model, built.inputs, cap.ops, device=workload.device, warmup=warmup,
                    repeats=repeats, formulas=formula_book(host), trace=bool(trace),
                )
        except UserError:
            raise
        except SystemExit as exc:
            raise exit_error(exc, source.path, "the measured forward") from None
        except Exception as exc:
            raise _forward_error(exc, source, workload) from exc
    report = build_report(
        cap, rows, hw, workload, model_info=info, depth=depth, group_layers=group_layers,
        warnings=list(host.warnings + db.problems), notes=list(dict.fromkeys(notes)),
        parallel=planned.section if planned is not None else None, detail=detail,
    )
    report = replace(report, memory=memory_of(report, hw, memory_fraction(workload), activation_peak(cap)))
    if measurement is not None:
        report = with_measurement(report, hw, measurement, modelled_modules(cap.ops), hardware_warning)
    if alt_hw is not None:
        report = with_alt_placement(report, alt_hw)
    if measurement is not None and trace:
        write_trace(trace, measurement.trace, report)
    return Profiled(report=report, model=built.model, capture=cap, attention=rows, models=list(patched))
