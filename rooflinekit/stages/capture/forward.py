"""One forward under recording: the hooks, modes and swaps around it, and the CaptureResult."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch

from rooflinekit.core import compat
from rooflinekit.core.model_facts import cached, fact
from rooflinekit.core.swap import setting
from rooflinekit.stages.capture.modes import (
    DispatchRecorder,
    EagerDispatchRecorder,
    FunctionRecorder,
)
from rooflinekit.stages.capture.recorder import Recorder
from rooflinekit.stages.capture.records import CaptureResult
from rooflinekit.stages.capture.sdpa import patched_sdpa
from rooflinekit.stages.formulas import FormulaBook

_ACTIVE: list[Recorder] = []


def active_recorder() -> Recorder | None:
    """The recorder of the capture in progress (for modelled modules that emit records)."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def active(recorder: Recorder) -> Iterator[Recorder]:
    """`recorder` is the active one (active_recorder) for the duration; the one before after."""
    _ACTIVE.append(recorder)
    try:
        yield recorder
    finally:
        _ACTIVE.remove(recorder)


@contextmanager
def hooked(recorder: Recorder) -> Iterator[Recorder]:
    """The recorder's module tracking (global forward hooks) for the duration."""
    hooks = compat.register_global_forward_hooks(recorder.pre_hook, recorder.post_hook)
    try:
        yield recorder
    finally:
        for h in hooks:
            h.remove()


@contextmanager
def recording(model: torch.nn.Module | None, formulas: FormulaBook) -> Iterator[Recorder]:
    """Activate module tracking, the function mode and the dispatch mode around a forward.

    Without a `model`, the first module called at top level is adopted as the model.
    """
    recorder = Recorder(formulas, {})
    if model is not None:
        recorder.adopt(model)
    with hooked(recorder), active(recorder):
        compat.mark_not_compiled()  # a command-line run: torch's meta kernels need no dynamo import
        eager = compat.force_eager()  # torch.compile'd code runs eagerly under a dispatch mode anyway
        # The handler needs torch's no-compile wrapper only where something could compile it.
        mode = EagerDispatchRecorder if eager is not None or not compat.dynamo_loaded() else DispatchRecorder
        with (patched_sdpa(recorder), FunctionRecorder(recorder), nullcontext() if eager is None else eager,
              mode(recorder)):
            yield recorder


def call_forward(model: torch.nn.Module, inputs):
    """Call the model with positional (tuple/list) or keyword (dict) inputs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _collecting(on: bool) -> None:
    """gc.enable() or gc.disable(): the setter paired with gc.isenabled."""
    if on:
        gc.enable()
    else:
        gc.disable()


def capture(model: torch.nn.Module, inputs, formulas: FormulaBook | None = None) -> CaptureResult:
    """Run one forward of `model` on `inputs` and record every op."""
    formulas = formulas or FormulaBook()
    start = time.perf_counter()
    # The records are long-lived small objects: cyclic GC passes over them (and over the model's
    # thousands of modules) cost more than the capture itself on large models.
    with setting(gc.isenabled, _collecting, False), torch.no_grad(), recording(model, formulas) as rec:
        with compat.disable_torch_function():
            rec.live.existing(inputs)
        call_forward(model, inputs)
        live = rec.live.finish()
        rec.storages.release()  # freed now, not traversed by the collection that re-enabling starts
    modules = cached(model, fact("module_classes"), lambda: {n: type(m).__name__ for n, m in model.named_modules()})
    return CaptureResult(
        ops=rec.ops,
        modules=modules,
        param_storages=rec.param_storages,
        param_bytes_total=rec.param_total,
        wall_s=time.perf_counter() - start,
        param_owners=dict(rec.param_owners),
        param_names=dict(rec.param_names),
        live=live,
        memo_counts=(rec.memo.hits, rec.memo.misses) if rec.memo is not None else (0, 0),
    )
