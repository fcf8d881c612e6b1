"""The profile's stages: build -> capture -> attribute -> transforms -> place -> annotate.

    counted = count(source, workload, deployment)          # build, capture, attribute, transforms
    report = place(counted, hw, ...)                       # the roofline placement (and fused view)
    report = annotate(report, ...)                         # memory, measurement, a second entry

`run_profile` runs the whole list; a sweep's design captures stop after `count`. What passes
between the stages (docs/architecture.md, The profile's stages): the capture's `CaptureResult`, the
attributed and transformed `Counted`, `count`'s `Counting` (those counts with the model),
`run_profile`'s `Profiled`. The transforms run in
the stated order `TRANSFORMS` (formats, then the parallel shard, then a lever's restatement); the
CLI, the Python API, sweep and advise all go through here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from rooflinekit.analyses.alt_placement import with_alt_placement
from rooflinekit.analyses.measure import FreshInputs, write_trace
from rooflinekit.analyses.measure import measure as run_measure
from rooflinekit.analyses.measured import (
    cpu_hardware,
    cpu_on_gpu_warning,
    modelled_modules,
    with_measurement,
)
from rooflinekit.analyses.pipeline_parallel import with_pipeline_parallel
from rooflinekit.core.errors import UserError
from rooflinekit.core.model_facts import cached, fact
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.report import Report
from rooflinekit.core.request import Deployment, ModelSource, Workload
from rooflinekit.core.version import model_library, untested_notes
from rooflinekit.stages import mixed
from rooflinekit.stages.attribute import AttentionSite, attribute_attention
from rooflinekit.stages.capture import CaptureResult, Recorder, capture
from rooflinekit.stages.detect import auto_hardware
from rooflinekit.stages.efficiency_table import with_efficiency
from rooflinekit.stages.engine import engine_cost, with_engine
from rooflinekit.stages.expected_words import stated_factors
from rooflinekit.stages.formulas import formula_book
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, HardwareDB, HardwareSpec, hardware_db
from rooflinekit.stages.lazy_state import counted_apart
from rooflinekit.stages.memory import activation_peak, memory_of, unrecognised_warnings
from rooflinekit.stages.model_source import (
    Built,
    build,
    exit_error,
    in_effect,
    inputs_for,
    multi_token_note,
)
from rooflinekit.stages.model_source import _user_frame as user_frame
from rooflinekit.stages.modelled import ModelCall, answers_for, modelled_paths, module_models, rerun
from rooflinekit.stages.place import Presentation, build_report
from rooflinekit.stages.request_checks import validate_request
from rooflinekit.transforms import quantize
from rooflinekit.transforms.adapter import TransformFunction, as_transform
from rooflinekit.transforms.base import Counted, Transform, TransformContext, run_transforms
from rooflinekit.transforms.mixed import MixedStep
from rooflinekit.transforms.parallel import ParallelShard
from rooflinekit.transforms.restate import OptionRestatements
from rooflinekit.transforms.serving import Serving, views_of

#: The transforms every request runs, in this order (a lever's restatement goes after them).
TRANSFORMS: tuple[Transform, ...] = (quantize.Quantize(), Serving(), ParallelShard(), OptionRestatements())


@dataclass(frozen=True)
class ReportOptions:
    """How a profile is laid out and annotated: module depth (None: the layer stack's children and
    one level below, core.paths.default_depth), layer folding, op rows; measured
    mode (None: on for cuda), its warm-up and repeats, its trace file; a second hardware entry."""

    depth: int | None = None
    group_layers: bool = False
    detail: bool = True
    measure: bool | None = None
    warmup: int = 2
    repeats: int = 5
    trace: str | None = None
    compare_hardware: str | None = None


@dataclass
class Counting:
    """The count stage's result (`count`, build to transforms): the built model and inputs, the
    transformed counts (`Counted`, around the capture's `CaptureResult`), the module models in place
    during the capture, and the notes from the source and the module models."""

    model: torch.nn.Module
    inputs: object
    counted: Counted
    models: list
    notes: list[str]
    #: The capture and its attention rows before the transforms (the other kernels view is run from it).
    raw: Counted | None = None
    #: Makes the inputs anew as the counted forward got them (measured mode: every timed forward
    #: starts from the state the counted one did, a cache the forward wrote or grew made again).
    fresh_inputs: Callable[[], object] | None = None
    #: Each modelled module's call, and the module models in place by path (recounted).
    calls: list[ModelCall] = field(default_factory=list)
    modelled: dict[str, type] = field(default_factory=dict)


@dataclass
class Profiled:
    """The profile's result (`run_profile`): the placed and annotated report with the counts it was
    placed from (`counted`: the counts alone, `report` None, as a sweep's design captures need)."""

    report: Report | None
    counting: Counting

    @property
    def model(self) -> torch.nn.Module:
        return self.counting.model

    @property
    def capture(self) -> CaptureResult:
        """The transformed capture the report was placed from."""
        return self.counting.counted.capture

    @property
    def attention(self) -> list[AttentionSite]:
        """The attention sites the report was placed from (rooflinekit.stages.attribute)."""
        return self.counting.counted.attention

    @property
    def models(self) -> list:
        """The module models plugins put in place during the capture (rooflinekit.stages.modelled)."""
        return self.counting.models


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


def _guarded(what: str, source: ModelSource, workload: Workload, fn: Callable):
    """`fn()`, with a model's failure turned into one line naming `what` ran."""
    try:
        return fn()
    except UserError:
        raise
    except SystemExit as exc:
        raise exit_error(exc, source.path, what) from None
    except Exception as exc:
        raise _forward_error(exc, source, workload) from exc


def transforms_for(lever: Transform | TransformFunction | None) -> tuple[Transform, ...]:
    """The transform list of a request: TRANSFORMS, then the lever's restatement if any."""
    return TRANSFORMS + ((as_transform(lever),) if lever is not None else ())


def count(source: ModelSource, workload: Workload, deployment: Deployment, host: PluginHost, *,
          lever: Transform | TransformFunction | None = None,
          on_stage: Callable[[str], None] | None = None, transforms: bool = True) -> Counting:
    """Build, capture one forward, attribute attention, and run the transforms (a mixed step:
    `count_mixed`); `transforms` False leaves `counted` the raw capture (a caller that runs its own)."""
    if workload.mixed:
        return count_mixed(source, workload, deployment, host, lever=lever, on_stage=on_stage)
    built = build(source, workload)
    if on_stage:
        on_stage("built")
    counting = counted_forward(built, source, workload, deployment, host, lever, transforms)
    if on_stage:
        on_stage("captured")
    return counting


def counted_forward(built: Built, source: ModelSource, workload: Workload, deployment: Deployment,
                    host: PluginHost, lever: Transform | TransformFunction | None = None,
                    transforms: bool = True) -> Counting:
    """A built model's forward on its inputs captured, attention attributed, the transforms run."""
    calls: list[ModelCall] = []

    def forward():
        with in_effect(workload), module_models(built.model, workload, host, deployment, calls) as patched, \
                counted_apart(built.inputs) as lazy:  # a cache transformers fills in the step: apart
            return capture(built.model, built.inputs, formula_book(host)), list(patched), lazy.note()

    cap, models, lazy_note = _guarded("the model's forward", source, workload, forward)
    rows = attribute_attention(cap, built.model, workload, host, deployment)
    ctx = TransformContext(workload, deployment, built.model, host)
    raw = Counted(cap, rows)
    counted = run_transforms(raw, transforms_for(lever), ctx) if transforms else raw
    notes = list(source.notes) + [m.assumption_note for m in models] + ([lazy_note] if lazy_note else [])
    return Counting(built.model, built.inputs, counted, models, notes, raw=raw,
                    fresh_inputs=lambda: inputs_for(source, workload), calls=calls,
                    modelled=modelled_paths(answers_for(built.model, workload, host, deployment)))


def recounted(counting: Counting, source: ModelSource, workload: Workload, deployment: Deployment,
              host: PluginHost) -> Counting | None:
    """`counting` (a capture with module models, before its transforms) at another deployment
    without running the forward again: each modelled module's model is asked at `deployment` and
    its records replace the ones it emitted (the rest of a forward does not depend on the layout).
    None where the deployment models other modules, or its models emit other records."""
    answers = answers_for(counting.model, workload, host, deployment)
    if not counting.calls or counting.raw is None or modelled_paths(answers) != counting.modelled:
        return None
    cap = counting.raw.capture
    ops = rerun(cap.ops, counting.calls, answers, Recorder(formula_book(host), {}))
    if ops is None:
        return None
    cap = replace(cap, ops=ops)
    raw = Counted(cap, attribute_attention(cap, counting.model, workload, host, deployment))
    models = [a for _, _, a, _ in answers if a is not None]
    used = [m for i, m in enumerate(models) if not any(type(u) is type(m) for u in models[:i])]
    notes = list(source.notes) + [m.assumption_note for m in used]
    return replace(counting, counted=raw, raw=raw, models=used, notes=notes)


def count_mixed(source: ModelSource, workload: Workload, deployment: Deployment, host: PluginHost, *,
                lever: Transform | TransformFunction | None = None,
                on_stage: Callable[[str], None] | None = None) -> Counting:
    """A mixed step: one model, one forward per segment counted as its plain step, merged with the
    weights read once and attention per segment (rooflinekit.stages.mixed). The other kernels view
    is not annotated (`raw` None)."""
    segments = workload.segments()
    plain = [workload.segment_workload(s) for s in segments]
    mixed.check_source(source, plain)
    built = build(source, plain[0])
    if on_stage:
        on_stage("built")
    parts = []
    for w in plain:
        one = built if not parts else Built(built.model, inputs_for(source, w))
        parts.append(counted_forward(one, source, w, deployment, host, lever))
    if on_stage:
        on_stage("captured")
    step = MixedStep([p.counted for p in parts[1:]], segments, mixed.describe(workload))
    counted = run_transforms(parts[0].counted, (step,), TransformContext(workload, deployment, built.model, host))
    notes = list(dict.fromkeys(n for p in parts for n in p.notes))
    return Counting(built.model, built.inputs, counted, parts[0].models, notes)


def attributed(model: torch.nn.Module, cap: CaptureResult, workload: Workload, deployment: Deployment,
               host: PluginHost) -> Counting:
    """A capture recorded elsewhere (`rooflinekit.capture()` around the user's own forward) through
    the rest of the counting: attribute, then the transforms. Its inputs are not kept."""
    rows = attribute_attention(cap, model, workload, host, deployment)
    counted = run_transforms(Counted(cap, rows), TRANSFORMS, TransformContext(workload, deployment, model, host))
    return Counting(model, None, counted, [], [])


def counted(source: ModelSource, workload: Workload, deployment: Deployment, host: PluginHost) -> Profiled:
    """The stages up to the transforms, nothing placed (a sweep's design captures fit the counts)."""
    validate_request(workload, deployment)
    counting = count(source, workload, deployment, host)
    return Profiled(report=None, counting=counting)


def place(counting: Counting, source: ModelSource, workload: Workload, deployment: Deployment,
          hw: HardwareSpec, options: ReportOptions, extra: tuple[list[str], list[str]]) -> Report:
    """The report of the transformed counts on `hw`; `extra` = (notes, warnings) to add."""
    cap = counting.counted.capture
    model = counting.model
    info = {
        "name": source.name,
        "path": source.path,
        "kind": source.kind,
        "parameters": cached(model, fact("parameters"), lambda: sum(p.numel() for p in model.parameters())),
        "param_bytes": cap.param_bytes_total,
        "modules": len(cap.modules),
    }
    notes = counting.notes + list(counting.counted.notes)
    if multi_token_note(workload):
        notes.append(multi_token_note(workload))
    extra_notes, warnings = extra
    notes += extra_notes + untested_notes()
    view = Presentation(depth=options.depth, group_layers=options.group_layers, detail=options.detail,
                        model_info=info, warnings=warnings, notes=list(dict.fromkeys(notes)),
                        parallel=counting.counted.parallel, overlap=deployment.overlap,
                        factors=stated_factors(deployment.ep, deployment.ep_imbalance))
    report = build_report(cap, counting.counted.attention, hw, workload, view)
    # what the memory section and the minimum cannot see
    unrecognised = [w for w in unrecognised_warnings(report, model_library(model)) if w not in report.warnings]
    if unrecognised:
        report = replace(report, warnings=[*report.warnings, *unrecognised])
    return replace(report, deployment=replace(deployment.resolved(workload.dtype_key), hardware=hw.name))


def with_memory(report: Report, counting: Counting, hw: HardwareSpec, deployment: Deployment) -> Report:
    """Annotate: what one GPU holds for the step against its capacity (rooflinekit.stages.memory)."""
    peak = activation_peak(counting.counted.capture)
    return replace(report, memory=memory_of(report, hw, deployment.memory_fraction, peak))


def with_views(report: Report, counting: Counting, workload: Workload, deployment: Deployment, hw: HardwareSpec,
               host: PluginHost, lever: Transform | TransformFunction | None = None) -> Report:
    """Annotate: the step in the other kernels view (as-written or serving), from the same capture
    run through the transforms again (no second forward), and the module that differs most."""
    if counting.raw is None:
        return report
    other = replace(deployment, kernels="as-written" if deployment.kernels == "serving" else "serving")
    try:
        counted_other = run_transforms(counting.raw, transforms_for(lever),
                                       TransformContext(workload, other, counting.model, host))
    except UserError:
        return report  # a view the other kernels cannot take: this report stands alone
    placed = build_report(counted_other.capture, counted_other.attention, hw, workload, Presentation(detail=False))
    mine = (counting.counted, report.totals.predicted_step_s)
    theirs = (counted_other, placed.totals.predicted_step_s)
    return replace(report, views=views_of(mine, theirs, deployment.kernels, hw))


def measured(counting: Counting, workload: Workload, deployment: Deployment, host: PluginHost,
             options: ReportOptions):
    """Annotate: real forwards timed and joined to the counted ops (rooflinekit.analyses.measure)."""
    with in_effect(workload), module_models(counting.model, workload, host, deployment):
        inputs = FreshInputs(counting.fresh_inputs) if counting.fresh_inputs is not None else counting.inputs
        return run_measure(counting.model, inputs, counting.counted.capture.ops, device=workload.device,
                           warmup=options.warmup, repeats=options.repeats, formulas=formula_book(host),
                           trace=bool(options.trace))


def resolve_hardware(deployment: Deployment, db: HardwareDB, host: PluginHost | None = None
                     ) -> tuple[HardwareSpec, str | None]:
    """The deployment's hardware entry ("auto": the local GPU's, else the default), with its
    efficiency source where the deployment names one, and the note saying how "auto" was resolved."""
    name = deployment.hardware or DEFAULT_HARDWARE
    if name == "auto":
        hw, note = auto_hardware(db, DEFAULT_HARDWARE)
    else:
        hw, note = db.get(name), None
    return with_efficiency(hw, deployment.efficiency, host), note


def _check(workload: Workload, deployment: Deployment, hw: HardwareSpec, options: ReportOptions) -> bool:
    """Refuse what cannot be combined, in one line each; returns whether measured mode is on."""
    validate_request(workload, deployment)  # formats, q_len and degrees, as the command line checks them
    measure = workload.device.startswith("cuda") if options.measure is None else options.measure
    if measure and workload.device == "meta":
        raise UserError("--measure (measured mode) times the real forward: pass --device cpu or --device cuda "
                        "(the meta device holds no data)")
    if measure and workload.mixed:
        raise UserError("--measure times one forward; a mixed step (--mix/--chunk) is counted from one forward per "
                        "segment: drop --measure (or --mix/--chunk)")
    if options.trace and not measure:
        raise UserError("--trace records a measured run: add --measure (or use --device cuda)")
    if measure and quantize.applies(workload, deployment):
        raise UserError("--weight-dtype, --kv-dtype and --dtype fp8 model formats the model does not run; measured "
                        "mode times what it runs: drop --measure (or those options)")
    quantize.check_hardware(hw, workload)
    if deployment.parallel and measure:
        raise UserError("--tp/--ep plan one GPU's share of a single-GPU model from its counts; measured "
                        "mode times the real forward: drop --measure (or run the split model under torchrun)")
    if deployment.pp > 1 and measure:
        raise UserError("--pp plans a pipeline of a single-GPU model from its counts; measured mode times the "
                        "real, unsplit forward: drop --measure (or --pp)")
    return measure


def run_profile(
    source: ModelSource,
    workload: Workload,
    deployment: Deployment | None = None,
    *,
    options: ReportOptions | None = None,
    host: PluginHost | None = None,
    db: HardwareDB | None = None,
    lever: Transform | TransformFunction | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> Profiled:
    """Every stage for one request: count, place on the deployment's hardware, annotate.

    `deployment.hardware` "auto" takes the local GPU's entry (NVML), else DEFAULT_HARDWARE. The
    annotate steps are the memory section, measured mode (`options.measure`: times real forwards
    and joins them to the counted ops, rooflinekit.analyses.measure) with its trace, and a second
    placement on `options.compare_hardware`. `lever` restates the counts after the built-in
    transforms (advise's levers). `on_stage("built")`/`on_stage("captured")` are called after those
    stages (torch.distributed runs check every rank there).
    """
    deployment = deployment or Deployment()
    options = options or ReportOptions()
    host = host or get_host()
    db = db or hardware_db(host)
    hw, auto_note = resolve_hardware(deployment, db, host)
    measure = _check(workload, deployment, hw, options)
    hardware_warning = None
    if deployment.hardware == "auto" and measure and workload.device.startswith("cpu"):
        # a CPU run belongs on this CPU's calibrated entry; without one, say how to make it
        hw, auto_note, hardware_warning = cpu_hardware(db, hw, workload.device)
        hw = with_efficiency(hw, deployment.efficiency, host)
    elif measure:  # CPU times on an accelerator's roofs: said in the report and on its chart
        hardware_warning = cpu_on_gpu_warning(workload.device, hw)
    alt_hw = db.get(options.compare_hardware) if options.compare_hardware else None
    counting = count(source, workload, deployment, host, lever=lever, on_stage=on_stage)
    report = place(counting, source, workload, deployment, hw, options,
                   ([auto_note] if auto_note else [], list(host.warnings + db.problems)))
    report = with_memory(report, counting, hw, deployment)
    report = with_pipeline_parallel(report, counting, hw, workload, deployment, host,  # --pp: the pipelined step
                                    lambda micro: count(source, micro, deployment, host, lever=lever))
    report = with_engine(report, engine_cost(deployment.engine), workload.batch)  # after --pp: once a step
    report = with_views(report, counting, workload, deployment, hw, host, lever)
    if measure:
        measurement = _guarded("the measured forward", source, workload,
                               lambda: measured(counting, workload, deployment, host, options))
        report = with_measurement(report, hw, measurement, modelled_modules(counting.counted.capture.ops),
                                  hardware_warning)
        if options.trace:
            write_trace(options.trace, measurement.trace, report)
    if alt_hw is not None:
        report = with_alt_placement(report, alt_hw)
    return Profiled(report=report, counting=counting)


def __getattr__(name: str):
    """`profile`, this module's entry point's name before 0.3, with a DeprecationWarning until 0.4."""
    if name == "profile":
        warnings.warn("rooflinekit.analyses.profile.profile is deprecated since rooflinekit 0.3: call "
                      "run_profile (or the Python API's rooflinekit.profile)", DeprecationWarning, stacklevel=2)
        return run_profile
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
