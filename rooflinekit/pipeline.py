"""Wire the stages together: workload -> capture -> attribute -> place. The CLI only calls this."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rooflinekit.attention import attribute_attention
from rooflinekit.capture import capture
from rooflinekit.errors import UserError
from rooflinekit.formulas import FormulaBook, op_key
from rooflinekit.hardware import HardwareDB
from rooflinekit.plugins import PluginHost, get_host
from rooflinekit.report import build_report
from rooflinekit.workload import ModelSource, Workload, build, in_effect
from rooflinekit.workload import _user_frame as user_frame

DEFAULT_HARDWARE = "H800 SXM5"


def user_hardware_dir() -> Path:
    """Where calibrated and user entries live: $ROOFLINEKIT_HOME/hardware or ~/.config/rooflinekit/hardware."""
    home = os.environ.get("ROOFLINEKIT_HOME")
    base = Path(home) if home else Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "rooflinekit"
    return base / "hardware"


def hardware_db(host: PluginHost | None = None) -> HardwareDB:
    """The database from every plugin's folders, then the user's folder and $ROOFLINEKIT_HARDWARE_PATH."""
    host = host or get_host()
    dirs: list[Path] = []
    for answer, _ in reversed(host.call_all("rooflinekit_hardware_dirs", expect=(list, tuple))):
        dirs.extend(Path(p) for p in answer)
    user = user_hardware_dir()
    if user.is_dir():
        dirs.append(user)
    extra = os.environ.get("ROOFLINEKIT_HARDWARE_PATH", "")
    dirs.extend(Path(p) for p in extra.split(os.pathsep) if p)
    return HardwareDB.from_dirs(dirs)


def formula_book(host: PluginHost | None = None) -> FormulaBook:
    host = host or get_host()
    extra = {}
    # call_all answers first-asked first; apply them in reverse so the first-asked plugin wins,
    # as with every other hook (tryfirst plugins before the built-ins)
    for answer, _ in reversed(host.call_all("rooflinekit_op_formulas", expect=dict)):
        for op, fn in answer.items():
            extra[op_key(op)] = fn
    return FormulaBook(extra)


def load_source(path: str, options: dict, host: PluginHost | None = None) -> ModelSource:
    host = host or get_host()
    if not Path(path).exists():
        raise UserError(f"model file not found: {path}")
    source, _ = host.call_first("rooflinekit_workload_loader", path=path, options=options)
    if source is None:
        raise UserError(
            f"don't know how to load {path}: give a model .py file (build_model/make_inputs) or a "
            "transformers config .json"
        )
    return source


@dataclass
class Profiled:
    report: dict
    model: torch.nn.Module
    capture: object


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
) -> Profiled:
    """Build, capture one forward, attribute attention, place on `hardware`.

    `hardware="auto"` takes the local GPU's entry (NVML), else DEFAULT_HARDWARE. Measured mode
    (`measure=True`; None means on for cuda, off otherwise) then times `repeats` real forwards after
    `warmup` ones and joins the times to the counted ops (rooflinekit.measure); `trace` writes the
    annotated profiler trace there. `compare_hardware` adds a second placement (placement_alt).
    Workload options `_tp`/`_ep` (rooflinekit.parallel.with_parallel) give one GPU's share of the
    model under planned tensor/expert parallelism. `on_stage("built")` and `on_stage("captured")`
    are called after those stages (torch.distributed runs check every rank there).
    """
    host = host or get_host()
    db = db or hardware_db(host)
    auto_note = None
    if hardware == "auto":
        from rooflinekit.detect import auto_hardware

        hw, auto_note = auto_hardware(db, DEFAULT_HARDWARE)
    else:
        hw = db.get(hardware)
    alt_hw = db.get(compare_hardware) if compare_hardware else None
    if measure is None:
        measure = workload.device.startswith("cuda")
    if measure and workload.device == "meta":
        raise UserError("measured mode runs the real forward: pass --device cpu or --device cuda "
                        "(the meta device holds no data)")
    if trace and not measure:
        raise UserError("--trace records a measured run: add --measure (or use --device cuda)")
    from rooflinekit.parallel import ParallelConfig

    par = ParallelConfig.of(workload)
    if par.active and measure:
        raise UserError("--tp/--ep plan one GPU's share of a single-GPU model from its counts; measured "
                        "mode times the real forward: drop --measure (or run the split model under torchrun)")
    built = build(source, workload)
    if on_stage:
        on_stage("built")
    from rooflinekit.modelled import module_models

    try:
        with in_effect(workload), module_models(built.model, workload, host) as patched:
            cap = capture(built.model, built.inputs, formula_book(host))
    except UserError:
        raise
    except Exception as exc:
        raise _forward_error(exc, source, workload) from exc
    if on_stage:
        on_stage("captured")
    rows = attribute_attention(cap, built.model, workload, host)
    planned = None
    if par.active:  # planned parallelism: one GPU's share (rooflinekit.parallel)
        from rooflinekit.parallel import plan_parallel

        planned = plan_parallel(cap, rows, built.model, workload, host, par)
        cap, rows = planned.capture, planned.attention
    params = sum(p.numel() for p in built.model.parameters())
    info = {
        "name": source.name,
        "path": source.path,
        "kind": source.kind,
        "parameters": params,
        "param_bytes": cap.param_bytes_total,
        "modules": len(cap.modules),
    }
    notes = list(source.notes) + [m.assumption_note for m in patched]
    if auto_note:
        notes.append(auto_note)
    if planned is not None:
        notes.append(planned.headline)
    measurement = None
    if measure:
        from rooflinekit.measure import measure as run_measure

        try:
            with in_effect(workload), module_models(built.model, workload, host):
                measurement = run_measure(
                    built.model, built.inputs, cap.ops, device=workload.device, warmup=warmup,
                    repeats=repeats, formulas=formula_book(host), trace=bool(trace),
                )
        except UserError:
            raise
        except Exception as exc:
            raise _forward_error(exc, source, workload) from exc
        for op in cap.ops:
            op.time_s = measurement.op_time_s.get(op.index)
    report = build_report(
        cap, rows, hw, workload, model_info=info, depth=depth, group_layers=group_layers,
        warnings=list(host.warnings + db.problems), notes=list(dict.fromkeys(notes)),
    )
    if planned is not None:
        report["parallel"] = planned.section
    if measurement is not None:
        from rooflinekit.measure import apply_measurement

        apply_measurement(report, cap.ops, rows, hw, measurement)
    if alt_hw is not None:
        from rooflinekit.measure import apply_alt_placement

        apply_alt_placement(report, alt_hw)
    if measurement is not None and trace:
        from rooflinekit.measure import write_trace

        write_trace(trace, measurement.trace, report)
    return Profiled(report=report, model=built.model, capture=cap)
