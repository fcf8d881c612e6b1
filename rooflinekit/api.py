"""The Python API: what the command line does, for a model already in memory or a file.

    report = rooflinekit.profile(model, input_ids, hardware="H800 SXM5", phase="prefill")
    with rooflinekit.capture(hardware="H800 SXM5", phase="decode", context=4096) as cap:
        model(*inputs)
    report = cap.report
    report = rooflinekit.profile_file("examples/llama_gqa.py", batch=4, context=32768)

Every function returns a `rooflinekit.Report` (the report with its text and HTML views) and raises
`rooflinekit.RooflineError` (with the one line the CLI would print) for bad input. Numbers are the
CLI's: the same stages run underneath.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch

from rooflinekit.analyses.advise import AdviseOptions
from rooflinekit.analyses.advise import advise as run_advise
from rooflinekit.analyses.combine import COMBINE_LIMIT
from rooflinekit.analyses.profile import ReportOptions, attributed, place, run_profile, with_memory
from rooflinekit.analyses.sweep import MAX_BATCH as SWEEP_MAX_BATCH
from rooflinekit.analyses.sweep import SweepOptions, run_sweep
from rooflinekit.core.advice_report import AdviceReport
from rooflinekit.core.errors import HardwareError, ModelError, WorkloadError
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.report import Report
from rooflinekit.core.request import (
    PHASES,
    Deployment,
    ModelSource,
    Workload,
    deployment_settings,
)
from rooflinekit.core.sweep_report import SweepReport
from rooflinekit.outputs import views  # noqa: F401  (every result's views: repr, str, HTML, DataFrame)
from rooflinekit.stages.capture.forward import recording
from rooflinekit.stages.capture.records import CaptureResult
from rooflinekit.stages.formulas import formula_book
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, dtype_key, hardware_db
from rooflinekit.stages.model_source import load_source
from rooflinekit.stages.request_checks import (
    DTYPES,
    MAX_BATCH,
    MAX_CONTEXT,
    MAX_Q_LEN,
    MODELLED_DTYPES,
    parse_options,
    validate,
    validate_request,
)
from rooflinekit.stages.speculative import DEFAULT_ACCEPT
from rooflinekit.trace import views as trace_views  # noqa: F401  (the trace report's views)
from rooflinekit.trace.analyse import analyse as analyse_trace
from rooflinekit.trace.report import TraceReport

__all__ = ["Capture", "advise", "capture", "profile", "profile_file", "sweep"]


#: The most path components `depth` rolls modules up to (far past any model's nesting).
MAX_DEPTH = 64


def _whole(name: str, value: object, least: int = 1, most: int | None = None) -> int:
    """`value` as an int, or a WorkloadError naming the argument (a str, float or bool is refused:
    `context=4096.7` is not silently 4096)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise WorkloadError(f"{name}= must be a whole number, got {value!r}")
    value = int(value)
    if value < least or (most is not None and value > most):
        bound = f"from {least:,} to {most:,}" if most is not None else f"at least {least:,}"
        raise WorkloadError(f"{name}= must be {bound}, got {value}")
    return value


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise WorkloadError(f"{name}= must be True or False, got {value!r}")
    return value


def _word(name: str, value: object, choices: tuple[str, ...] | None = None, *, optional: bool = False) -> str | None:
    """A string argument (one of `choices` when given; None allowed when `optional`)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise WorkloadError(f"{name}= must be a non-empty string, got {value!r}")
    if choices is not None and value not in choices:
        raise WorkloadError(f"unknown {name}= '{value}': use one of {', '.join(choices)}")
    return value


def _hardware(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise HardwareError(f"hardware= must be a hardware entry's name (a string; `rooflinekit hardware list` "
                            f"shows them), got {value!r}")
    return value


def check_common(*, hardware: object, phase: object, batch: object, context: object, depth: object,
                 group_layers: object, host: object) -> None:
    """The arguments `profile`, `profile_file` and `capture` share, one RooflineError naming the first bad
    one (a phase, batch or context left None is read from the inputs where the function allows)."""
    _hardware(hardware)
    if phase is not None:
        _word("phase", phase, PHASES)
    if batch is not None:
        _whole("batch", batch, 1, MAX_BATCH)
    if context is not None:
        _whole("context", context, 1, MAX_CONTEXT)
    if depth is not None:  # None: relative to the layer stack (core.paths.default_depth)
        _whole("depth", depth, 1, MAX_DEPTH)
    _flag("group_layers", group_layers)
    if host is not None and not isinstance(host, PluginHost):
        raise WorkloadError(f"host= must be a rooflinekit PluginHost or None, got {type(host).__name__}")


def check_file_arguments(path: object, options: object, args: dict) -> None:
    """`profile_file`'s own arguments (its shared ones: `check_common`; the deployment settings:
    `check_settings`), each RooflineError naming one."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ModelError(f"path= must be a model file's path (a string), got {path!r}")
    if options is not None and (not isinstance(options, dict) or not all(isinstance(k, str) and k.isidentifier()
                                                                            for k in options)):
        raise WorkloadError(f"options= must be a dict of option names to values (the CLI's -O KEY=VALUE), "
                            f"got {options!r}")
    _word("dtype", args["dtype"], tuple(DTYPES) + tuple(MODELLED_DTYPES))
    _word("device", args["device"])
    _whole("q_len", args["q_len"], 1, MAX_Q_LEN)
    if args["deployment"] is not None and not isinstance(args["deployment"], Deployment):
        raise WorkloadError(f"deployment= must be a rooflinekit Deployment or None, got "
                            f"{type(args['deployment']).__name__}")


def check_settings(settings: Mapping[str, object]) -> None:
    """Each deployment setting by its rule (rooflinekit.core.settings), naming its keyword."""
    for setting in deployment_settings():
        setting.check(settings[setting.name], setting.keyword)


def takes_settings(**defaults: object):
    """Decorate an API function to take every deployment setting as a keyword-only argument, with
    its declared default or the one `defaults` gives; the function receives them as one mapping,
    `settings` (its signature, as `help()` and editors show it, lists each)."""
    def wrap(fn):
        table = deployment_settings()

        @functools.wraps(fn)
        def call(*args, **kwargs):
            settings = {s.name: kwargs.pop(s.name, defaults.get(s.name, s.default)) for s in table}
            return fn(*args, settings=settings, **kwargs)

        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "settings"]
        tail = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        added = [inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(s.name, s.default),
                                   annotation=s.annotation) for s in table]
        call.__signature__ = inspect.signature(fn).replace(
            parameters=[p for p in params if p not in tail] + added + tail)
        return call
    return wrap


def _first_tensor(args, kwargs) -> torch.Tensor | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def _model_device_dtype(model: torch.nn.Module) -> tuple[str, str]:
    """(device, dtype key) of the model's first floating parameter (meta and bf16 without one)."""
    for p in model.parameters():
        if p.is_floating_point():
            key = dtype_key(p.dtype)
            return p.device.type, key if key in DTYPES else "bf16"
    return "meta", "bf16"


def infer_workload(args: tuple, kwargs: dict, *, phase: str | None, batch: int | None, context: int | None,
                   device: str, dtype: str) -> Workload:
    """The step the inputs describe: batch from the first tensor's first dimension; prefill of its
    second dimension when it has more than one position, else decode (which needs `context`)."""
    first = _first_tensor(args, kwargs)
    shape = tuple(first.shape) if first is not None else ()
    if batch is None:
        if not shape:
            raise WorkloadError("cannot tell the batch from the inputs (no tensor among them): pass batch=")
        batch = shape[0]
    if phase is None:
        phase = "prefill" if len(shape) >= 2 and shape[1] > 1 else "decode"
    if context is None:
        if phase == "decode":
            raise WorkloadError("decode needs context= (the positions each new token attends to, its KV "
                                "cache included): it cannot be read from a one-token input")
        if len(shape) < 2:
            raise WorkloadError("cannot tell the context from the inputs: pass context=")
        context = shape[1]
    validate(phase, int(batch), int(context), dtype, device)
    return Workload(phase, int(batch), int(context), dtype, device)


@dataclass(frozen=True)
class Asked:
    """The analysis options one API call was given, as the CLI's flags (None: the CLI's default or,
    for a model in memory, what its inputs and parameters say), and its deployment settings."""

    phase: str | None = None
    batch: int | None = None
    context: int | None = None
    q_len: int = 1
    dtype: str | None = None
    device: str | None = None
    options: dict | None = None
    settings: Mapping[str, object] = field(default_factory=dict)
    deployment: Deployment | None = None

    def check(self, depth: object = None, group_layers: object = False, host: object = None) -> None:
        """Each argument, a RooflineError naming the first bad one."""
        check_common(hardware=self.settings["hardware"], phase=self.phase, batch=self.batch, context=self.context,
                     depth=depth, group_layers=group_layers, host=host)
        check_file_arguments("(checked apart)", self.options, dict(
            dtype=self.dtype or "bf16", device=self.device or "meta", q_len=self.q_len, deployment=self.deployment))
        check_settings(self.settings)

    def deployed(self) -> Deployment:
        """The Deployment asked for (a whole `deployment` wins over the settings)."""
        return self.deployment or Deployment(**self.settings)


#: What `model=` may be: a module in memory, or the path of what a loader reads.
MODEL_RULE = ("a torch.nn.Module (with its inputs, or make_inputs=) or the path of a model file, a transformers "
              "config.json (or its folder) or hf:MODEL_TYPE")


def no_such_option(function: str, unknown: dict) -> None:
    """A keyword that is no option of `function`: the model's keyword inputs go in `inputs=`."""
    if unknown:
        names = ", ".join(f"{k}=" for k in unknown)
        raise WorkloadError(f"{function}() has no option {names}: the model's keyword inputs go in one mapping, "
                            f"inputs={{'name': value, ...}} (so that no option shadows one of them)")


def _is_path(model: object) -> bool:
    return isinstance(model, (str, os.PathLike)) and bool(str(model))


def _model_inputs(args: tuple, inputs: object) -> tuple[tuple, dict]:
    """The model's positional and keyword inputs: `args` and the `inputs` mapping."""
    if inputs is not None and (not isinstance(inputs, Mapping) or not all(isinstance(k, str) for k in inputs)):
        raise WorkloadError(f"inputs= must be a mapping of the model's keyword names to values, got "
                            f"{type(inputs).__name__}")
    return tuple(args), dict(inputs or {})


def _from_memory(model: torch.nn.Module, args: tuple, kwargs: dict, asked: Asked,
                 make_inputs: Callable | None) -> tuple[ModelSource, Workload]:
    """The source and workload of a model in memory: its given inputs (the step read from them as
    `infer_workload` does), or `make_inputs(batch, context, phase)` at the CLI's defaults."""
    device, dtype = _model_device_dtype(model)
    if asked.device is not None and asked.device.split(":")[0] != device:
        raise WorkloadError(f"device={asked.device!r}: the model in memory is on {device} (move it, or leave "
                            f"device= out)")
    dtype = asked.dtype or dtype
    name = type(model).__name__
    if make_inputs is not None:
        if args or kwargs:
            raise WorkloadError("give the model's inputs or make_inputs=, not both")
        phase, batch, context = asked.phase or "decode", asked.batch or 1, asked.context or 4096
        validate(phase, batch, context, dtype, device)
        workload = Workload(phase, batch, context, dtype, device, tuple(sorted((asked.options or {}).items())),
                            decode_q_len=asked.q_len)
        return ModelSource(name=name, path="(in memory)", build_model=lambda **_: model, make_inputs=make_inputs,
                           kind="module"), workload
    workload = infer_workload(args, kwargs, phase=asked.phase, batch=asked.batch, context=asked.context,
                              device=device, dtype=dtype)
    workload = replace(workload, decode_q_len=asked.q_len)
    given = _as_keywords(model, args, kwargs) if args and kwargs else (kwargs or args)
    return ModelSource(name=name, path="(in memory)", build_model=lambda **_: model, make_inputs=lambda *_: given,
                       kind="module"), workload


def source_and_workload(model: object, args: tuple, inputs: object, asked: Asked, *,
                        make_inputs: Callable | None = None, host: PluginHost | None = None,
                        in_memory: bool = True) -> tuple[ModelSource, Workload]:
    """What `model=` names (MODEL_RULE) as a source and the workload `asked` describes; `in_memory`
    False where the function runs the model at other points too (sweep, advise: a module needs
    make_inputs=)."""
    positional, keywords = _model_inputs(args, inputs)
    if make_inputs is not None and not callable(make_inputs):
        raise WorkloadError(f"make_inputs= must be a function (batch, context, phase) -> inputs, got "
                            f"{type(make_inputs).__name__}")
    if isinstance(model, torch.nn.Module):
        if not in_memory and make_inputs is None:
            raise WorkloadError("this analysis runs the model at other batches and contexts: give a model in "
                                "memory with make_inputs=(batch, context, phase) -> inputs, or a path")
        return _from_memory(model, positional, keywords, asked, make_inputs)
    if not _is_path(model):
        raise ModelError(f"model= must be {MODEL_RULE}, got {type(model).__name__}")
    if positional or keywords or make_inputs is not None:
        raise WorkloadError(f"{str(model)!r} is a path: its make_inputs (or the config's loader) makes the inputs, "
                            f"so give no inputs (they are for a torch.nn.Module in memory)")
    opts = parse_options([f"{k}={v}" for k, v in (asked.options or {}).items()])
    phase, batch, context = asked.phase or "decode", asked.batch or 1, asked.context or 4096
    dtype, device = asked.dtype or "bf16", asked.device or "meta"
    validate(phase, batch, context, dtype, device)
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(opts.items())), decode_q_len=asked.q_len)
    return load_source(str(model), opts, host or get_host()), workload


def _as_keywords(model: torch.nn.Module, args: tuple, kwargs: dict) -> dict:
    """Positional and keyword inputs together as keywords of `model.forward` (one forward call takes
    one or the other here)."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise WorkloadError(f"the inputs do not fit {type(model).__name__}.forward: {exc}") from None
    out = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            raise WorkloadError(f"{type(model).__name__}.forward takes *{name}: give its inputs positionally only, "
                                f"or all as inputs=")
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


@takes_settings(hardware=DEFAULT_HARDWARE)
def profile(model: torch.nn.Module | str, *args, inputs: Mapping | None = None,
            make_inputs: Callable | None = None, phase: str | None = None, batch: int | None = None,
            context: int | None = None, q_len: int = 1, dtype: str | None = None, device: str | None = None,
            options: dict | None = None, deployment: Deployment | None = None, depth: int | None = None,
            group_layers: bool = False, host: PluginHost | None = None, settings: Mapping[str, object],
            **unknown) -> Report:
    """What `rooflinekit profile MODEL` does, for a model in memory or a path (MODEL_RULE).

    A module runs on `model(*args, **inputs)` (meta, cpu or cuda tensors; `infer_workload` says what
    is read from them when `phase`, `batch` or `context` are left out), or on
    `make_inputs(batch, context, phase)`. A path is what the CLI reads: `options` are its -O pairs.
    The rest are the CLI's flags with its defaults (docs/python-api.md): every deployment setting
    (rooflinekit.core.settings: hardware, tp, ep, pp, the formats, kernels, ...) is a keyword; a
    whole `deployment` wins over them.
    """
    asked = Asked(phase, batch, context, q_len, dtype, device, options, settings, deployment)
    no_such_option("profile", unknown)
    asked.check(depth, group_layers, host)
    host = host or get_host()
    source, workload = source_and_workload(model, args, inputs, asked, make_inputs=make_inputs, host=host)
    report_options = ReportOptions(depth=depth, group_layers=group_layers, measure=False)
    return run_profile(source, workload, asked.deployed(), options=report_options, host=host).report


@takes_settings(hardware=DEFAULT_HARDWARE)
def profile_file(path: str, *, phase: str = "decode", batch: int = 1, context: int = 4096, dtype: str = "bf16",
                 device: str = "meta", options: dict | None = None, depth: int | None = None,
                 group_layers: bool = False, host: PluginHost | None = None, q_len: int = 1,
                 deployment: Deployment | None = None, settings: Mapping[str, object]) -> Report:
    """`profile(path, ...)` with a path only: what `rooflinekit profile PATH` does (a model file,
    a transformers config.json, hf:TYPE, or anything a loader plugin reads)."""
    if not _is_path(path):
        raise ModelError(f"path= must be a model file's path (a string), got {path!r}")
    _word("phase", phase, PHASES)  # none of these is read from inputs here: None is no value
    _whole("batch", batch, 1, MAX_BATCH)
    _whole("context", context, 1, MAX_CONTEXT)
    _word("dtype", dtype, tuple(DTYPES) + tuple(MODELLED_DTYPES))
    _word("device", device)
    return profile(path, phase=phase, batch=batch, context=context, dtype=dtype, device=device, options=options,
                   depth=depth, group_layers=group_layers, host=host, q_len=q_len, deployment=deployment,
                   **settings)


@dataclass
class Capture:
    """What `capture()` yields: its `report` is set when the block ends."""

    hardware: str
    report: Report | None = None
    model: torch.nn.Module | None = None


@contextmanager
def capture(hardware: str = DEFAULT_HARDWARE, *, phase: str | None = None, batch: int | None = None,
            context: int | None = None, depth: int | None = None, group_layers: bool = False,
            host: PluginHost | None = None) -> Iterator[Capture]:
    """Record the first top-level module call inside the block (and any op around it) as one step.

        with rooflinekit.capture(hardware="H800 SXM5") as cap:
            model(input_ids)
        cap.report.totals.flops

    The model is the first module called in the block; the workload is read from its inputs as in
    `profile`. Make inputs before the block: ops inside it count. Modules that plugins model
    analytically (MoE routing on meta) are not swapped in here: use `profile()` for those.
    """
    check_common(hardware=hardware, phase=phase, batch=batch, context=context, depth=depth,
                 group_layers=group_layers, host=host)
    host = host or get_host()
    db = hardware_db(host)
    hw = db.get(hardware)
    formulas = formula_book(host)
    out = Capture(hardware=hw.name)
    start = time.perf_counter()
    with torch.no_grad(), recording(None, formulas) as rec:
        yield out
    if rec.root is None:
        raise WorkloadError("capture(): no module was called inside the block")
    model, (args, kwargs) = rec.root, rec.root_inputs
    device, dtype = _model_device_dtype(model)
    workload = infer_workload(args, kwargs, phase=phase, batch=batch, context=context, device=device,
                              dtype=dtype)
    cap = CaptureResult(ops=rec.ops, modules={n: type(m).__name__ for n, m in model.named_modules()},
                        param_storages=rec.param_storages, param_bytes_total=rec.param_total,
                        wall_s=time.perf_counter() - start, param_owners=dict(rec.param_owners),
                        param_names=dict(rec.param_names), live=rec.live.finish())
    deployment = Deployment(hardware=hw.name)
    source = ModelSource(name=type(model).__name__, path="(in memory)", build_model=lambda: model,
                         make_inputs=lambda *_: (), kind="module")
    counting = attributed(model, cap, workload, deployment, host)
    out.model = model
    report = place(counting, source, workload, deployment, hw, ReportOptions(depth=depth, group_layers=group_layers),
                   ([], list(host.warnings + db.problems)))
    out.report = with_memory(report, counting, hw, deployment)


def _counts(name: str, values: object, most: int) -> list[int]:
    """A list of whole numbers (batches=, contexts=), each checked; order kept, repeats dropped."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise WorkloadError(f"{name}= must be a non-empty list of whole numbers, got {values!r}")
    return list(dict.fromkeys(_whole(name, v, 1, most) for v in values))


@takes_settings(hardware=DEFAULT_HARDWARE)
def sweep(model: torch.nn.Module | str, *, make_inputs: Callable | None = None,
          batches: Sequence[int] = (1, 4, 16, 48), contexts: Sequence[int] = (4096, 32768), phase: str = "decode",
          q_len: int = 1, dtype: str | None = None, device: str | None = None, options: dict | None = None,
          deployment: Deployment | None = None, critical: bool = True, max_batch: int = SWEEP_MAX_BATCH,
          fit: bool = True, host: PluginHost | None = None, settings: Mapping[str, object],
          **unknown) -> SweepReport:
    """What `rooflinekit sweep MODEL -b ... -s ...` does: every (batch, context), the critical batch
    per context (`critical`, probing up to `max_batch`; the CLI's --no-critical is critical=False),
    points from exactly fitted counts on meta (`fit`; --no-fit is fit=False). `model` is a path, or a
    module in memory with `make_inputs(batch, context, phase)` (every point runs it at its own shape).
    Every deployment setting is a keyword, as in `profile`."""
    no_such_option("sweep", unknown)
    batches, contexts = _counts("batches", batches, MAX_BATCH), _counts("contexts", contexts, MAX_CONTEXT)
    asked = Asked(phase, batches[0], contexts[0], q_len, dtype, device, options, settings, deployment)
    asked.check(1, False, host)  # no module rows here: depth and group_layers are profile's
    _flag("critical", critical)
    _flag("fit", fit)
    max_batch = _whole("max_batch", max_batch, 1, MAX_BATCH)
    host = host or get_host()
    source, base = source_and_workload(model, (), None, asked, make_inputs=make_inputs, host=host, in_memory=False)
    for b in batches:
        for c in contexts:
            validate(base.phase, b, c, base.dtype, base.device)
    deployed = asked.deployed()
    validate_request(base, deployed)
    result = run_sweep(source, base, deployed, batches, contexts,
                       options=SweepOptions(critical=critical, max_batch=max_batch, fit=fit))
    if result.interrupted:
        raise KeyboardInterrupt
    return result


@takes_settings(hardware=DEFAULT_HARDWARE, kernels="serving")
def advise(model: torch.nn.Module | str, *, make_inputs: Callable | None = None, phase: str = "decode",
           batch: int = 1, context: int = 4096, q_len: int = 1, dtype: str | None = None, device: str | None = None,
           options: dict | None = None, deployment: Deployment | None = None, combine: bool = False,
           max_combinations: int = COMBINE_LIMIT, draft: str | None = None, draft_options: dict | None = None,
           mtp: int | None = None, accept: float = DEFAULT_ACCEPT, host: PluginHost | None = None,
           settings: Mapping[str, object], **unknown) -> AdviceReport:
    """What `rooflinekit advise MODEL` does: the step profiled (the serving view unless
    kernels="as-written", as the CLI), then every lever that applies priced and ranked; `combine`,
    `max_combinations`, `draft` (a draft model's path) with `draft_options`, `mtp` and `accept` are
    --combine, --max-combinations, --draft, --draft-option, --mtp and --accept. `model` is a path, or
    a module in memory with `make_inputs(batch, context, phase)` (levers run it at other shapes).
    Every deployment setting is a keyword, as in `profile`."""
    no_such_option("advise", unknown)
    asked = Asked(phase, batch, context, q_len, dtype, device, options, settings, deployment)
    asked.check(1, False, host)  # no module rows here: depth and group_layers are profile's
    _flag("combine", combine)
    _whole("max_combinations", max_combinations, 1)
    if mtp is not None:
        _whole("mtp", mtp, 1, 16)
    if isinstance(accept, bool) or not isinstance(accept, numbers.Real):
        raise WorkloadError(f"accept= must be a number in (0, 1], got {accept!r}")
    if draft is not None and not _is_path(draft):
        raise ModelError(f"draft= must be a draft model's path (a model file or config), got {draft!r}")
    host = host or get_host()
    source, workload = source_and_workload(model, (), None, asked, make_inputs=make_inputs, host=host,
                                           in_memory=False)
    extras = AdviseOptions(combine=combine, max_combinations=max_combinations, mtp=mtp, accept=float(accept))
    extras.check()
    if draft is not None:
        given = parse_options([f"{k}={v}" for k, v in (draft_options or {}).items()])
        extras = replace(extras, draft=load_source(str(draft), given, host), draft_options=tuple(sorted(given.items())))
    elif draft_options:
        raise WorkloadError("draft_options= are the draft model's: give draft= too")
    deployed = asked.deployed()
    validate_request(workload, deployed)
    return run_advise(source, workload, deployed, host=host, extras=extras)


def trace(path: str, hardware: str | None = None, step: int | None = None) -> TraceReport:
    """The roofline of what a torch.profiler trace ran (a file or a folder of rank files), the
    report `rooflinekit trace` prints: `report.to_dict()` is its JSON (docs/trace.md)."""
    return analyse_trace(str(path), hardware, step)
