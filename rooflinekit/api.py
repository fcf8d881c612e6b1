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

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from rooflinekit.analyses.profile import ReportOptions, attributed, place, with_memory
from rooflinekit.analyses.profile import profile as run_profile
from rooflinekit.core.errors import WorkloadError
from rooflinekit.core.plugins import PluginHost, get_host
from rooflinekit.core.request import DEFAULT_FRACTION, Deployment
from rooflinekit.outputs.render import ViewedReport
from rooflinekit.stages.capture.forward import recording
from rooflinekit.stages.capture.records import CaptureResult
from rooflinekit.stages.formulas import formula_book
from rooflinekit.stages.hardware import DEFAULT_HARDWARE, dtype_key, hardware_db
from rooflinekit.stages.workload import (
    DTYPES,
    ModelSource,
    Workload,
    load_source,
    parse_options,
    validate,
)

__all__ = ["Capture", "capture", "profile", "profile_file"]


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
