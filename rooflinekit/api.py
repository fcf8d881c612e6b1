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

import numbers
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from rooflinekit.analyses.profile import ReportOptions, attributed, place, with_memory
from rooflinekit.analyses.profile import profile as run_profile
from rooflinekit.core.errors import HardwareError, ModelError, WorkloadError
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import DEFAULT_FRACTION, KERNELS, PHASES, Deployment
from rooflinekit.outputs.render import ViewedReport
from rooflinekit.stages.capture.forward import recording
from rooflinekit.stages.capture.records import CaptureResult
from rooflinekit.stages.formulas import formula_book
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, dtype_key, hardware_db
from rooflinekit.stages.workload import (
    DTYPES,
    MAX_BATCH,
    MAX_CONTEXT,
    MAX_PARALLEL,
    MAX_Q_LEN,
    MODELLED_DTYPES,
    ModelSource,
    Workload,
    check_fraction,
    load_source,
    parse_options,
    validate,
)

__all__ = ["Capture", "capture", "profile", "profile_file"]


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
    _whole("depth", depth, 1, MAX_DEPTH)
    _flag("group_layers", group_layers)
    if host is not None and not isinstance(host, PluginHost):
        raise WorkloadError(f"host= must be a rooflinekit PluginHost or None, got {type(host).__name__}")


def check_file_arguments(path: object, options: object, args: dict) -> None:
    """`profile_file`'s own arguments (its shared ones: `check_common`), each RooflineError naming one."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ModelError(f"path= must be a model file's path (a string), got {path!r}")
    if options is not None and (not isinstance(options, dict) or not all(isinstance(k, str) and k.isidentifier()
                                                                            for k in options)):
        raise WorkloadError(f"options= must be a dict of option names to values (the CLI's -O KEY=VALUE), "
                            f"got {options!r}")
    _word("dtype", args["dtype"], tuple(DTYPES) + tuple(MODELLED_DTYPES))
    _word("device", args["device"])
    for name in ("weight_dtype", "kv_dtype"):
        _word(name, args[name], optional=True)
    if args["weight_group_size"] is not None:
        _whole("weight_group_size", args["weight_group_size"])
    _whole("q_len", args["q_len"], 1, MAX_Q_LEN)
    for name in ("tp", "ep"):
        _whole(name, args[name], 1, MAX_PARALLEL)
    _flag("quantize_embeddings", args["quantize_embeddings"])
    _word("kernels", args["kernels"], KERNELS)
    if isinstance(args["memory_fraction"], str):
        raise WorkloadError(f"memory_fraction= must be a number in (0, 1], got {args['memory_fraction']!r}")
    check_fraction(args["memory_fraction"])
    if args["deployment"] is not None and not isinstance(args["deployment"], Deployment):
        raise WorkloadError(f"deployment= must be a rooflinekit Deployment or None, got "
                            f"{type(args['deployment']).__name__}")


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


def profile(model: torch.nn.Module, *args, hardware: str = DEFAULT_HARDWARE, phase: str | None = None,
            batch: int | None = None, context: int | None = None, depth: int = 3, group_layers: bool = False,
            host: PluginHost | None = None, **kwargs) -> ViewedReport:
    """Profile one forward of `model(*args, **kwargs)` (meta, cpu or cuda tensors) on `hardware`.

    `phase`, `batch` and `context` describe the step (see `infer_workload` for what is read from
    the inputs when they are left out). Plugins run as in the CLI: attention architectures, MoE
    modelling, custom formulas. The model is put in eval mode.
    """
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(f"profile() takes a torch.nn.Module, got {type(model).__name__}")
    check_common(hardware=hardware, phase=phase, batch=batch, context=context, depth=depth,
                 group_layers=group_layers, host=host)
    device, dtype = _model_device_dtype(model)
    workload = infer_workload(args, kwargs, phase=phase, batch=batch, context=context, device=device,
                              dtype=dtype)
    inputs = kwargs if kwargs and not args else args
    if args and kwargs:
        raise WorkloadError("give the model's inputs either positionally or as keywords, not both")
    source = ModelSource(name=type(model).__name__, path="(in memory)", build_model=lambda: model,
                         make_inputs=lambda *_: inputs, kind="module")
    options = ReportOptions(depth=depth, group_layers=group_layers, measure=False)
    return ViewedReport.of(run_profile(source, workload, Deployment(hardware=hardware), options=options,
                                       host=host).report)


def profile_file(path: str, *, phase: str = "decode", batch: int = 1, context: int = 4096,
                 hardware: str = DEFAULT_HARDWARE, dtype: str = "bf16", device: str = "meta",
                 options: dict | None = None, depth: int = 3, group_layers: bool = False,
                 host: PluginHost | None = None, weight_dtype: str | None = None,
                 weight_group_size: int | None = None, kv_dtype: str | None = None, q_len: int = 1,
                 quantize_embeddings: bool = False, tp: int = 1, ep: int = 1,
                 memory_fraction: float = DEFAULT_FRACTION, kernels: str = "as-written",
                 deployment: Deployment | None = None) -> ViewedReport:
    """What `rooflinekit profile PATH` does: a model file (build_model/make_inputs), a transformers
    config.json, or anything a loader plugin reads. `options` are the CLI's `-O KEY=VALUE` pairs (the
    model's own); `q_len` is `--q-len`; the deployment is `hardware`, `tp`, `ep`, the formats
    (`--weight-dtype`, `--weight-group-size`, `--kv-dtype`, `--quantize-embeddings`:
    docs/accounting.md), `kernels` ("as-written" or "serving": docs/accounting.md, Serving view) and
    `memory_fraction`, or a whole `deployment` (which then wins)."""
    check_common(hardware=hardware, phase=phase, batch=batch, context=context, depth=depth,
                 group_layers=group_layers, host=host)
    check_file_arguments(path, options, dict(
        dtype=dtype, device=device, weight_dtype=weight_dtype, kv_dtype=kv_dtype, weight_group_size=weight_group_size,
        q_len=q_len, tp=tp, ep=ep, quantize_embeddings=quantize_embeddings, kernels=kernels,
        memory_fraction=memory_fraction, deployment=deployment))
    opts = parse_options([f"{k}={v}" for k, v in (options or {}).items()])
    validate(phase, batch, context, dtype, device)
    workload = Workload(phase, batch, context, dtype, device, tuple(sorted(opts.items())), decode_q_len=q_len)
    deployment = deployment or Deployment(
        hardware=hardware, tp=tp, ep=ep, weight_dtype=weight_dtype, weight_group_size=weight_group_size,
        kv_dtype=kv_dtype, quantize_embeddings=quantize_embeddings, kernels=kernels,
        memory_fraction=memory_fraction)
    host = host or get_host()
    options = ReportOptions(depth=depth, group_layers=group_layers, measure=False)
    return ViewedReport.of(run_profile(load_source(str(path), opts, host), workload, deployment, options=options,
                                       host=host).report)


@dataclass
class Capture:
    """What `capture()` yields: its `report` is set when the block ends."""

    hardware: str
    report: ViewedReport | None = None
    model: torch.nn.Module | None = None


@contextmanager
def capture(hardware: str = DEFAULT_HARDWARE, *, phase: str | None = None, batch: int | None = None,
            context: int | None = None, depth: int = 3, group_layers: bool = False,
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
    out.report = ViewedReport.of(with_memory(report, counting, hw, deployment))
